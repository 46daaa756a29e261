// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA Startup, uiwarp's own Res bits of RFC 5044 §7.1.1 (docs/extensions.md): kMpaFlagSameHost
// (0x02; in an accepting Reply, the same-host offer that ends its private data) and
// kMpaFlagRfc7306 (0x04), which an initiator sets and a uiwarp responder echoes, never offers,
// never toward an RDMAC peer, with kMpaFlagUiwarpReply (0x01) to mark them as its answer.
// kMpaFlagLargeFpdu (0x08), which each side sets for itself, is read with the standard flags
// (mpa_startup.cpp). A peer that is not uiwarp ignores them all (Res bits are not checked,
// HX-010), so the standard machine runs the same with them or without.
#include "iwarp/mpa_startup.hpp"
#include "mpa_startup_detail.hpp"

namespace iwarp {

using namespace mpa_detail;

// The Reply's uiwarp bits count only beside kMpaFlagUiwarpReply: without it they are the
// Request's own, returned by a responder that writes its Reply over the Request's header (siw).
bool MpaStartup::uiwarp_answer(std::uint8_t flag) const {
  return role_ == MpaRole::Initiator && (header_.flags & flag) &&
         (header_.flags & kMpaFlagUiwarpReply);
}

// Whether the Reply carries a same-host offer: uiwarp's same-host bit (kMpaFlagSameHost, a Res
// bit of RFC 5044 §7.1.1) beside its mark, accepting an IETF Request of ours that offered it.
// Anywhere else the bit is not checked (HX-010) and the private data stays the ULP's.
bool MpaStartup::reply_has_offer() const {
  return uiwarp_answer(kMpaFlagSameHost) && local_frame_.same_host && !header_.reject() &&
         !peer_rdmac_;
}

// A offer that cannot be there is a bug or an attack of a peer that says it is uiwarp (C-18),
// refused like other malformed Replies: here as far as the header tells, the offer's magic and
// version once the private data is in (process_frame).
bool MpaStartup::check_same_host_flag() {
  const std::size_t need = (peer_enhanced() ? kEnhancedDataLen : 0) + kSameHostOfferLen;
  if (!reply_has_offer() || header_.pd_length >= need) return true;
  fail(term::mpa_invalid_frame,
       cat("MPA Reply has uiwarp's same-host bit but PD_Length ", header_.pd_length,
           " cannot hold the ", kSameHostOfferLen, "-octet same-host offer",
           peer_enhanced() ? " after the enhanced data" : "", " (a Res bit, RFC 5044 §7.1.1)"));
  return false;
}

// Octets of same-host offer at the end of the frame's private data (checked at the header).
std::size_t MpaStartup::same_host_trailer() const {
  return reply_has_offer() ? kSameHostOfferLen : 0;
}

// The offer at the end of a Reply's private data: its magic and version, or the connection
// fails as for any malformed Reply (C-18).
bool MpaStartup::check_offer(const SameHostOffer& offer) {
  if (offer.magic != kSameHostMagic) {
    fail(term::mpa_invalid_frame,
         cat("MPA Reply's same-host offer has magic ", octet_text(offer.magic[0]), " ",
             octet_text(offer.magic[1]), " ", octet_text(offer.magic[2]), " ",
             octet_text(offer.magic[3]), ", expected \"UWSH\" (uiwarp's same-host bit)"));
    return false;
  }
  if (offer.version != kSameHostVersion) {
    fail(term::mpa_invalid_frame,
         cat("MPA Reply's same-host offer has version ", offer.version, ", expected ",
             kSameHostVersion, " (uiwarp's same-host bit)"));
    return false;
  }
  return true;
}

// Initiator: what the Reply's bits agreed.
void MpaStartup::take_private_answers() {
  // RFC 7306 runs on RDMAP version 1 only (§4), so never toward an RDMAC peer; and only
  // from a uiwarp responder, not from one that returned our own bit (kMpaFlagUiwarpReply).
  result_.conn.rfc7306 =
      local_frame_.rfc7306 && peer_frame_.rfc7306 && peer_frame_.uiwarp_reply && !peer_rdmac_;
  // check_same_host_flag: an offer is here only in an accepting IETF Reply to our bit.
  result_.conn.same_host = peer_frame_.same_host_offer.has_value();
  result_.conn.peer_same_host = peer_frame_.same_host_offer;
}

// Responder: the Reply's answers to the Request's bits.
void MpaStartup::private_reply_bits(MpaFrame& f) const {
  // Echoed, never offered: a Request without the flag gets a Reply without it.
  f.rfc7306 = policy_.rfc7306 && peer_frame_.rfc7306 && !peer_rdmac_;
  // A Request with uiwarp's bits comes from uiwarp: mark the answers as ours.
  f.uiwarp_reply = (peer_frame_.rfc7306 || peer_frame_.same_host) && !peer_rdmac_;
}

// Responder: uiwarp's same-host offer, echoed as the RFC 7306 bit is (never offered, never to
// RDMAC), never in a reject, and dropped with its bit when the ULP's private data leaves no
// room for it in the 512 octets of RFC 5044 §7.1.1.
void MpaStartup::offer_same_host(MpaFrame& f, std::optional<SameHostOffer> offer) const {
  if (offer && !f.reject && policy_.same_host && peer_frame_.same_host && !peer_rdmac_ &&
      f.pd_length() + kSameHostOfferLen <= kMaxPrivateData) {
    f.same_host = true;
    f.same_host_offer = offer;
  }
}

} // namespace iwarp
