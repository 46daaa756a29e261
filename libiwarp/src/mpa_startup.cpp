// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA Startup Phase: RFC 5044 §7.1, RFC 6581 (MPA Rev 2), and the RDMAC interop
// rules of draft-carrier-rddp-rnic-interop (IOP; RFC 5044 App. C).
#include "iwarp/mpa_startup.hpp"

#include "iwarp/framing.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace iwarp {

namespace {

constexpr std::uint8_t kRevRdmac = 0;    // IOP §4: RDMAC proxies send Rev 0
constexpr std::uint8_t kRevIetf = 1;     // RFC 5044 §7.1.1
constexpr std::uint8_t kRevEnhanced = 2; // RFC 6581 §6
constexpr std::size_t kKeyLen = kMpaRequestKey.size();
constexpr std::uint16_t kNoNeg = kIrdOrdNoNegotiation;

// Message builder: strings as they are, integers (bool and uint8_t too) in decimal.
template <typename... Args> std::string cat(const Args&... args) {
  std::string s;
  auto add = [&s](const auto& a) {
    if constexpr (std::is_integral_v<std::decay_t<decltype(a)>>)
      s += std::to_string(+a);
    else
      s += a;
  };
  (add(args), ...);
  return s;
}

std::string_view kind_name(MpaKind k) {
  return k == MpaKind::Request ? "MPA Request" : "MPA Reply";
}

std::string_view key_of(MpaKind k) { return k == MpaKind::Request ? kMpaRequestKey : kMpaReplyKey; }

MpaKind other_kind(MpaKind k) { return k == MpaKind::Request ? MpaKind::Reply : MpaKind::Request; }

// "0x47 ('G')" or "0x00".
std::string octet_text(std::byte b) {
  static constexpr char kHex[] = "0123456789abcdef";
  const unsigned v = std::to_integer<unsigned>(b);
  std::string s{'0', 'x', kHex[v >> 4], kHex[v & 0xf]};
  if (v >= 0x20 && v < 0x7f) s += std::string(" ('") + static_cast<char>(v) + "')";
  return s;
}

// IRD/ORD are 14-bit fields (RFC 6581 §9); larger local values saturate at 0x3FFF.
std::uint16_t wire_ird_ord(std::uint16_t v) { return std::min(v, kIrdOrdMask); }

RtrSet rtr_set(const MpaEnhanced& e) { return {e.rtr_send, e.rtr_write, e.rtr_read}; }

RtrSet intersect(const RtrSet& a, const RtrSet& b) {
  return {a.send && b.send, a.write && b.write, a.read && b.read};
}

std::string rtr_names(const RtrSet& s) {
  if (!s.any()) return "none";
  std::string out;
  for (auto [on, name] : {std::pair{s.send, "Send"}, {s.write, "Write"}, {s.read, "Read"}})
    if (on) out += (out.empty() ? "" : ", ") + std::string(name);
  return "{" + out + "}";
}

// RFC 6581 §1.1: with several mutually supported RTR types the initiator picks
// one at its discretion. Ours: Write (needs nothing at the responder, EMPA-041),
// then Send (consumes a receive buffer), then Read (needs IRD/ORD >= 1).
std::optional<RtrType> pick_rtr(const RtrSet& mutual, bool read_possible) {
  if (mutual.write) return RtrType::Write;
  if (mutual.send) return RtrType::Send;
  if (mutual.read && read_possible) return RtrType::Read;
  return std::nullopt;
}

// RFC 6581 §8, §9.2/§9.1: the TERM an endpoint sends as its first FPDU when the
// negotiation fails after an accepting Reply: untagged DDP (QN 2, MSN 1, MO 0,
// L=1), RDMAP opcode Terminate, an LLP/MPA code, HdrCt bits all 0.
std::vector<std::byte> terminate_fpdu(const MpaResult& r, TermCode code) {
  DdpHeader ddp;
  ddp.tagged = false;
  ddp.last = true;
  ddp.ddp_version = r.version;
  ddp.rdmap_version = r.version;
  ddp.opcode = static_cast<std::uint8_t>(Opcode::Terminate);
  ddp.qn = kQnTerminate;
  ddp.msn = 1;
  ddp.mo = 0;
  TerminateHeader t;
  t.code = code;
  std::array<std::byte, kUntaggedHdrLen + kTerminateCtrlLen> hdr{};
  ddp.encode(hdr.data());
  t.encode(hdr.data() + kUntaggedHdrLen);
  // The first FPDU of Full Operation: a marker first if the peer asked (RFC 5044 §7.1.2 r7).
  return FpduTx(r.crc, r.markers_tx).frame_bytes(hdr);
}

} // namespace

// ---- construction -------------------------------------------------------------

MpaStartup MpaStartup::start(MpaRole role, const MpaPolicy& policy, MpaClock::time_point now) {
  MpaStartup m;
  m.role_ = role;
  m.state_ = role == MpaRole::Initiator ? MpaState::AwaitReply : MpaState::AwaitRequest;
  m.policy_ = policy;
  m.deadline_ = now + policy.timeout;
  m.result_.ird = policy.ird; // unenhanced: IRD/ORD are the ULP's business
  m.result_.ord = policy.ord;
  if (policy.revision != kRevIetf && policy.revision != kRevEnhanced)
    m.fail(term::mpa_local_catastrophic,
           cat("local policy MPA revision ", policy.revision, " is not supported (1 or 2)"));
  return m;
}

MpaStartup MpaStartup::initiator(const MpaPolicy& policy, std::vector<std::byte> private_data,
                                 MpaClock::time_point now) {
  MpaStartup m = start(MpaRole::Initiator, policy, now);
  if (m.state_ == MpaState::Failed) return m;

  MpaFrame& f = m.local_frame_;
  f.kind = MpaKind::Request;
  f.rev = policy.revision;
  f.markers = policy.markers;
  f.crc = policy.crc || policy.crc_always; // MC-07: an always-CRC side says C=1
  f.large_fpdu = policy.large_fpdu;
  f.rfc7306 = policy.rfc7306;
  // Only the bit: a peer that is not uiwarp would hand a trailer to its ULP as private data.
  f.same_host = policy.same_host;
  // RFC 6581 §6, §10: enhanced data (S=1) only when enhanced features are wanted.
  if (policy.revision >= kRevEnhanced && policy.enhanced) {
    MpaEnhanced e;
    e.p2p = policy.p2p; // RFC 6581 §9.2: A, and with it every RTR type we support
    e.rtr_send = policy.p2p && policy.rtr.send;
    e.rtr_write = policy.p2p && policy.rtr.write;
    e.rtr_read = policy.p2p && policy.rtr.read;
    e.ird = wire_ird_ord(policy.ird); // RFC 6581 §9.1: initiator IRD / ORD
    e.ord = wire_ird_ord(policy.ord);
    f.enhanced = e;
  }
  const std::size_t max_pd = kMaxPrivateData - (f.enhanced ? kEnhancedDataLen : 0);
  if (private_data.size() > max_pd) {
    m.fail(term::mpa_local_catastrophic, cat("MPA Request private data of ", private_data.size(),
                                             " octets exceeds ", max_pd, " (RFC 5044 §7.1.1)"));
    return m;
  }
  f.private_data = std::move(private_data);
  m.out_ = f.encode();
  return m;
}

MpaStartup MpaStartup::responder(const MpaPolicy& policy, MpaClock::time_point now) {
  return start(MpaRole::Responder, policy, now);
}

// ---- receiving the Request / Reply ----------------------------------------------

bool MpaStartup::awaiting_frame() const {
  return state_ == MpaState::AwaitRequest || state_ == MpaState::AwaitReply;
}

MpaKind MpaStartup::expected_kind() const {
  return role_ == MpaRole::Responder ? MpaKind::Request : MpaKind::Reply;
}

// RFC 6581 §6: S exists from Rev 2 on; in a Rev 0/1 frame it is a RFC 5044 Res
// bit, which is not checked (IM-12).
bool MpaStartup::peer_enhanced() const { return header_.enhanced() && header_.rev >= kRevEnhanced; }

std::size_t MpaStartup::on_bytes(ConstBytes in) {
  std::size_t used = 0;
  while (used < in.size() && awaiting_frame()) {
    // Never read past the frame: what follows belongs to the data path (HX-017).
    const std::size_t n = std::min(octets_wanted(), in.size() - used);
    in_.insert(in_.end(), in.begin() + used, in.begin() + used + n);
    used += n;
    octets_added();
  }
  return used;
}

std::size_t MpaStartup::octets_wanted() const {
  const std::size_t n = in_.size();
  if (n < kKeyLen) return 1; // the key is checked octet by octet (HX-001)
  if (n < kMpaFrameHeaderLen) return kMpaFrameHeaderLen - n;
  return kMpaFrameHeaderLen + header_.pd_length - n;
}

void MpaStartup::octets_added() {
  const std::size_t n = in_.size();
  if (n <= kKeyLen) {
    check_key(n);
    return;
  }
  if (n == kMpaFrameHeaderLen && !check_header()) return;
  if (n == kMpaFrameHeaderLen + header_.pd_length) process_frame();
}

// RFC 5044 §7.1.1, §7.1.2 r5: a wrong key closes the connection. Checking each
// octet as it arrives makes junk (HTTP, TLS, random bytes) fail at once instead
// of at the timeout; the other side's key is an Initiator/Initiator startup.
void MpaStartup::check_key(std::size_t n) {
  const MpaKind want = expected_kind();
  const std::string_view key = key_of(want), other = key_of(other_kind(want));
  const auto* got = reinterpret_cast<const char*>(in_.data());
  if (std::memcmp(got, key.data(), n) == 0) return;
  if (std::memcmp(got, other.data(), n) == 0) {
    if (n < kKeyLen) return; // wait for the whole key before naming it
    fail(term::mpa_invalid_frame,
         role_ == MpaRole::Initiator
             ? "received an MPA Request while awaiting the MPA Reply (Initiator/Initiator "
               "startup, RFC 5044 §7.1.2 r8)"
             : "received an MPA Reply while awaiting the MPA Request (RFC 5044 §7.1.1)");
    return;
  }
  const std::size_t i =
      static_cast<std::size_t>(std::mismatch(got, got + n, key.begin()).first - got);
  fail(term::mpa_invalid_frame,
       cat("invalid ", kind_name(want), " key: octet ", i, " is ", octet_text(in_[i]),
           ", expected '", key.substr(i, 1), "' of \"", key, "\" (RFC 5044 §7.1.1)"));
}

// The 20-octet header is complete: everything that can be refused before the
// private data arrives is refused now.
bool MpaStartup::check_header() {
  header_ = *MpaFrameHeader::decode(in_.data()); // the key is already checked
  const std::string_view kind = kind_name(header_.kind);
  // RFC 5044 §7.1.1 (HX-006, PD-02).
  if (header_.pd_length > kMaxPrivateData) {
    fail(term::mpa_invalid_frame, cat(kind, " PD_Length ", header_.pd_length, " exceeds ",
                                      kMaxPrivateData, " (RFC 5044 §7.1.1)"));
    return false;
  }
  if (!check_revision() || !check_enhanced_flag()) return false;
  // RFC 6581 §6: with S=1 the private data begins with 4 octets of enhanced data (HX-012).
  const bool enhanced = peer_enhanced();
  if (enhanced && header_.pd_length < kEnhancedDataLen) {
    fail(term::mpa_invalid_frame, cat(kind, " has S=1 but PD_Length ", header_.pd_length,
                                      " cannot hold the 4 octets of enhanced data (RFC 6581 §6)"));
    return false;
  }
  if (!check_same_host_flag()) return false;
  // RFC 5044 §7.1.2 r9 (HX-008): never more than the local buffer holds. A same-host offer
  // goes to its own fixed-size field, not to the ULP's buffer.
  const std::size_t ulp_pd =
      header_.pd_length - (enhanced ? kEnhancedDataLen : 0) - same_host_trailer();
  if (ulp_pd > policy_.max_private_data) {
    fail(term::mpa_invalid_frame,
         cat(kind, " private data of ", ulp_pd, " octets exceeds the local buffer of ",
             policy_.max_private_data, " octets (RFC 5044 §7.1.2 r9)"));
    return false;
  }
  return true;
}

// RFC 5044 §7.1.1 / IOP §4: close when we cannot interoperate with the Rev.
bool MpaStartup::check_revision() {
  const std::string_view kind = kind_name(header_.kind);
  if (header_.rev == kRevRdmac) {
    if (policy_.permissive) { // IOP §5.3: V=0 with this peer
      peer_rdmac_ = true;
      return true;
    }
    if (role_ == MpaRole::Responder) {
      // IOP §5.2.1 (IM-08): a non-permissive responder replies Rev 1, then closes.
      // R=1: we will not enter Full Operation with this peer.
      MpaFrame reply = reply_frame(true);
      out_ = reply.encode();
      local_frame_ = std::move(reply);
    }
    fail(term::mpa_invalid_frame,
         cat(kind, " Rev 0 (RDMAC peer) but permissive mode is off",
             role_ == MpaRole::Responder ? ": replied Rev 1 and closing (IOP §5.2.1)"
                                         : " (IOP §5.2.2)"));
    return false;
  }
  // IM-05/06 (Rev 2 at a rev-1-only endpoint), IM-07 (Rev >= 3): no silent downgrade.
  if (header_.rev > policy_.revision) {
    fail(term::mpa_invalid_frame, cat(kind, " Rev ", header_.rev, " is not supported (local ",
                                      "maximum Rev ", policy_.revision, ", RFC 5044 §7.1.1)"));
    return false;
  }
  return true;
}

// RFC 6581 §10: enhanced Requests get enhanced Replies, unenhanced ones unenhanced.
bool MpaStartup::check_enhanced_flag() {
  const bool peer = peer_enhanced();
  if (role_ == MpaRole::Responder) {
    if (peer && !policy_.enhanced) { // EMPA-009: as an unenhanced responder
      fail(term::mpa_invalid_frame, "MPA Request is enhanced (S=1) but enhanced connection "
                                    "setup is disabled locally (RFC 6581 §10)");
      return false;
    }
    return true;
  }
  const bool ours = local_frame_.enhanced.has_value();
  if (peer && !ours) {
    fail(term::mpa_invalid_frame,
         "MPA Reply is enhanced (S=1) but the Request was not (RFC 6581 §10)");
    return false;
  }
  if (!peer && ours && !policy_.accept_unenhanced_reply) { // IM-11, C-17
    fail(term::mpa_invalid_frame, cat("MPA Reply is not enhanced (Rev ", header_.rev, ", S=",
                                      header_.enhanced(), ") but the Request was (RFC 6581 §10)"));
    return false;
  }
  return true;
}

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

void MpaStartup::process_frame() {
  const std::byte* pd = in_.data() + kMpaFrameHeaderLen;
  const std::byte* end = pd + header_.pd_length;
  // The split of the private data: enhanced octets first (RFC 6581 §9), the ULP's, then a
  // same-host offer, which the ULP never sees.
  std::optional<SameHostOffer> offer;
  if (same_host_trailer() != 0) {
    end -= kSameHostOfferLen;
    offer = SameHostOffer::decode(end);
    if (offer->magic != kSameHostMagic) {
      fail(term::mpa_invalid_frame,
           cat("MPA Reply's same-host offer has magic ", octet_text(offer->magic[0]), " ",
               octet_text(offer->magic[1]), " ", octet_text(offer->magic[2]), " ",
               octet_text(offer->magic[3]), ", expected \"UWSH\" (uiwarp's same-host bit)"));
      return;
    }
    if (offer->version != kSameHostVersion) {
      fail(term::mpa_invalid_frame,
           cat("MPA Reply's same-host offer has version ", offer->version, ", expected ",
               kSameHostVersion, " (uiwarp's same-host bit)"));
      return;
    }
  }
  MpaFrame f;
  f.kind = header_.kind;
  f.markers = header_.markers();
  f.crc = header_.crc();
  f.reject = f.kind == MpaKind::Reply && header_.reject(); // HX-010: not checked in a Request
  f.large_fpdu = header_.flags & kMpaFlagLargeFpdu;        // other Res bits: not checked
  f.rfc7306 = header_.flags & kMpaFlagRfc7306;
  f.same_host = header_.flags & kMpaFlagSameHost; // in a Reply, its offer is split off above
  f.uiwarp_reply = f.kind == MpaKind::Reply && (header_.flags & kMpaFlagUiwarpReply);
  f.rev = header_.rev;
  if (peer_enhanced()) {
    f.enhanced = MpaEnhanced::decode(pd); // EMPA-037: B/C/D ignored when A=0
    pd += kEnhancedDataLen;
  }
  f.private_data.assign(pd, end);
  f.same_host_offer = offer;
  peer_frame_ = std::move(f);

  result_.peer_rev = peer_frame_.rev;
  result_.peer_private_data = peer_frame_.private_data;
  if (peer_frame_.enhanced) { // RFC 6581 §9.1 (EMPA-022): the ULP sees the peer's values
    result_.peer_ird = peer_frame_.enhanced->ird;
    result_.peer_ord = peer_frame_.enhanced->ord;
    result_.peer_rtr = rtr_set(*peer_frame_.enhanced);
  }
  if (role_ == MpaRole::Responder) {
    result_.enhanced = peer_frame_.enhanced.has_value();
    result_.p2p = result_.enhanced && peer_frame_.enhanced->p2p;
    state_ = MpaState::RequestReceived;
    return;
  }
  process_reply();
}

// ---- initiator: the Reply -----------------------------------------------------------

void MpaStartup::process_reply() {
  result_.version = peer_rdmac_ ? kVersionRdmac : kVersionIetf;
  // RFC 5044 §7.1.1 (MPA-021/022): CRC unless both said C=0; §4.4 (MC-07); IOP
  // §5.1: RDMAC always uses CRC.
  result_.crc = peer_rdmac_ || local_frame_.crc || peer_frame_.crc || policy_.crc_always;
  // RFC 5044 §7.1.1 (MPA-032): each M bit asks for markers toward its sender.
  // IOP §5.3.2: an RDMAC peer means markers both ways, whatever we asked (RC-11).
  result_.markers_tx = peer_rdmac_ || peer_frame_.markers;
  result_.markers_rx = peer_rdmac_ || local_frame_.markers;
  result_.large_fpdu = local_frame_.large_fpdu && peer_frame_.large_fpdu;
  // RFC 7306 runs on RDMAP version 1 only (§4), so never toward an RDMAC peer; and only
  // from a uiwarp responder, not from one that returned our own bit (kMpaFlagUiwarpReply).
  result_.rfc7306 =
      local_frame_.rfc7306 && peer_frame_.rfc7306 && peer_frame_.uiwarp_reply && !peer_rdmac_;
  // check_same_host_flag: an offer is here only in an accepting IETF Reply to our bit.
  result_.same_host = peer_frame_.same_host_offer.has_value();
  result_.peer_same_host = peer_frame_.same_host_offer;
  result_.enhanced = local_frame_.enhanced && peer_frame_.enhanced;
  if (peer_frame_.reject) { // RFC 5044 §7.1.2 r3 (HX-011): TCP stays open for the ULP
    finish(MpaState::Rejected);
    return;
  }
  if (!result_.enhanced) { // unenhanced (or IM-11 fallback): IRD/ORD/RTR are the ULP's
    finish(MpaState::Established);
    return;
  }
  negotiate_enhanced();
}

void MpaStartup::negotiate_enhanced() {
  const MpaEnhanced& req = *local_frame_.enhanced;
  const MpaEnhanced& rep = *peer_frame_.enhanced;
  // RFC 6581 §9.1 (EMPA-026/027/028): IRD at least the responder ORD, ORD at most
  // the responder IRD; 0x3FFF on either side leaves the local value alone.
  std::uint16_t ird = req.ird;
  if (rep.ord != kNoNeg && req.ird != kNoNeg && rep.ord > ird) {
    if (rep.ord > policy_.max_ird) { // IR-06, HX-015/016
      fail_with_terminate(term::mpa_insufficient_ird, cat("MPA Reply responder ORD ", rep.ord,
                                                          " exceeds the local maximum IRD ",
                                                          policy_.max_ird, " (RFC 6581 §9.1)"));
      return;
    }
    ird = rep.ord; // IR-07: the MUST of §9.1 wins over keeping the advertised IRD
  }
  std::uint16_t ord = req.ord;
  if (rep.ird != kNoNeg && req.ord != kNoNeg) ord = std::min(ord, rep.ird);
  result_.ird = ird;
  result_.ord = ord;
  result_.p2p = req.p2p;

  // RFC 6581 §9.2: the Reply echoes A; a mismatch leaves no common model (RT-08, HX-014).
  if (rep.p2p != req.p2p) {
    fail_with_terminate(term::mpa_no_matching_rtr,
                        cat("MPA Reply A=", rep.p2p, " does not echo the Request's A=", req.p2p,
                            " (RFC 6581 §9.2)"));
    return;
  }
  if (req.p2p) {
    const RtrSet offered = rtr_set(req), listed = rtr_set(rep);
    // EMPA-041: a Read RTR needs a responder IRRQ entry and one ORD credit here.
    const bool read_possible = rep.ird >= 1 && policy_.max_ord >= 1;
    result_.rtr = pick_rtr(intersect(offered, listed), read_possible);
    if (!result_.rtr) { // RT-06/07, HX-014
      fail_with_terminate(term::mpa_no_matching_rtr,
                          cat("no matching RTR: the Request offered ", rtr_names(offered),
                              ", the Reply listed ", rtr_names(listed),
                              read_possible ? "" : " (Read needs responder IRD >= 1)",
                              " (RFC 6581 §9.2)"));
      return;
    }
    if (*result_.rtr == RtrType::Read && result_.ord == 0) result_.ord = 1;
  }
  finish(MpaState::Established);
}

// ---- responder: the Reply -------------------------------------------------------------

void MpaStartup::accept(std::vector<std::byte> private_data, std::optional<std::uint16_t> ird,
                        std::optional<std::uint16_t> ord, std::optional<SameHostOffer> same_host) {
  if (state_ != MpaState::RequestReceived) return;
  send_reply(false, std::move(private_data), ird.value_or(policy_.ird), ord.value_or(policy_.ord),
             std::nullopt, same_host);
}

void MpaStartup::reject(std::vector<std::byte> private_data,
                        std::optional<std::uint16_t> required_ord) {
  if (state_ != MpaState::RequestReceived) return;
  send_reply(true, std::move(private_data), policy_.ird, policy_.ord, required_ord, std::nullopt);
}

// Flags and Rev of our Reply, from the Request header.
MpaFrame MpaStartup::reply_frame(bool reject) const {
  MpaFrame f;
  f.kind = MpaKind::Reply;
  f.reject = reject;
  // RFC 6581 §10 (EMPA-008): Rev 2 only for an enhanced Request, else Rev 1 (IM-02,
  // IM-04); IOP §5.3.1: Rev 0, M=1, C=1 to an RDMAC peer (IM-09, RC-09/10).
  f.rev = peer_rdmac_ ? kRevRdmac : peer_enhanced() ? kRevEnhanced : kRevIetf;
  f.markers = peer_rdmac_ || policy_.markers;
  // RFC 5044 §7.1.1: the Request's C=1 turns CRC on anyway; say so.
  f.crc = peer_rdmac_ || policy_.crc || policy_.crc_always || header_.crc();
  f.large_fpdu = policy_.large_fpdu;
  // Echoed, never offered: a Request without the flag gets a Reply without it.
  f.rfc7306 = policy_.rfc7306 && peer_frame_.rfc7306 && !peer_rdmac_;
  // A Request with uiwarp's bits comes from uiwarp: mark the answers as ours.
  f.uiwarp_reply = (peer_frame_.rfc7306 || peer_frame_.same_host) && !peer_rdmac_;
  return f;
}

void MpaStartup::send_reply(bool reject, std::vector<std::byte> private_data, std::uint16_t ird,
                            std::uint16_t ord, std::optional<std::uint16_t> required_ord,
                            std::optional<SameHostOffer> same_host) {
  MpaFrame f = reply_frame(reject);
  const bool enhanced = peer_frame_.enhanced.has_value();
  const std::size_t max_pd = kMaxPrivateData - (enhanced ? kEnhancedDataLen : 0);
  if (private_data.size() > max_pd) {
    fail(term::mpa_local_catastrophic, cat("MPA Reply private data of ", private_data.size(),
                                           " octets exceeds ", max_pd, " (RFC 5044 §7.1.1)"));
    return;
  }
  result_.ird = ird;
  result_.ord = ord;
  if (enhanced) {
    f.enhanced = reply_enhanced(ird, ord);
    // RFC 6581 §9.1, C-11 (PD-04): a Reject names the ORD the ULP requires.
    if (reject && required_ord) f.enhanced->ord = wire_ird_ord(*required_ord);
  }
  f.private_data = std::move(private_data);
  // uiwarp's same-host offer: echoed as the RFC 7306 bit is (never offered, never to RDMAC),
  // never in a reject, and dropped with its bit when the ULP's private data leaves no room
  // for it in the 512 octets of RFC 5044 §7.1.1.
  if (same_host && !reject && policy_.same_host && peer_frame_.same_host && !peer_rdmac_ &&
      f.pd_length() + kSameHostOfferLen <= kMaxPrivateData) {
    f.same_host = true;
    f.same_host_offer = same_host;
  }

  result_.version = peer_rdmac_ ? kVersionRdmac : kVersionIetf;
  result_.crc = f.crc;                                     // already includes the Request's C
  result_.markers_tx = peer_rdmac_ || peer_frame_.markers; // RFC 5044 §7.1.1 (MPA-032)
  result_.markers_rx = f.markers;
  result_.large_fpdu = f.large_fpdu && peer_frame_.large_fpdu;
  result_.rfc7306 = f.rfc7306;
  result_.same_host = f.same_host;
  const std::vector<std::byte> wire = f.encode();
  out_.insert(out_.end(), wire.begin(), wire.end());
  local_frame_ = std::move(f);
  finish(reject ? MpaState::Rejected : MpaState::Established);
}

// RFC 6581 §9.1, §9.2: the responder's enhanced data; sets result_.ird/ord.
MpaEnhanced MpaStartup::reply_enhanced(std::uint16_t ird, std::uint16_t ord) {
  const MpaEnhanced& req = *peer_frame_.enhanced;
  // 0x3FFF from the initiator: keep the local value, echo 0x3FFF (EMPA-028, IR-04).
  const bool keep_ird = req.ord == kNoNeg, keep_ord = req.ird == kNoNeg;
  // IRD at least the initiator ORD, as far as we can raise it (IR-02).
  if (!keep_ird) ird = std::max(ird, std::min(req.ord, policy_.max_ird));
  // ORD at most the initiator IRD (EMPA-023).
  if (!keep_ord) ord = std::min(ord, req.ird);

  MpaEnhanced e;
  e.p2p = req.p2p; // RFC 6581 §9.2 (EMPA-033): echo A
  if (req.p2p) {
    RtrSet listed = reply_rtr(rtr_set(req));
    // A Read RTR needs an IRRQ entry: raise IRD 0 to 1 when Read is the only type
    // we list (EMPA-024, IR-03); otherwise offer the other types only.
    if (listed.read && ird == 0) {
      if (listed.send || listed.write)
        listed.read = false;
      else if (!keep_ird && policy_.max_ird >= 1)
        ird = 1;
      else
        listed = RtrSet{.write = true};
    }
    e.rtr_send = listed.send;
    e.rtr_write = listed.write;
    e.rtr_read = listed.read;
  }
  e.ird = keep_ird ? kNoNeg : wire_ird_ord(ird);
  e.ord = keep_ord ? kNoNeg : wire_ird_ord(ord);
  result_.ird = ird;
  result_.ord = ord;
  return e;
}

// RFC 6581 §9.2 (EMPA-034): list the requested types we support; if none, the
// types we support. C-12/RT-10: never an empty list; a zero-length Write needs no
// resources at all (EMPA-041), so it is the type of last resort.
RtrSet MpaStartup::reply_rtr(const RtrSet& requested) const {
  RtrSet listed = intersect(requested, policy_.rtr);
  if (!listed.any()) listed = policy_.rtr;
  if (!listed.any()) listed.write = true;
  return listed;
}

// ---- closing, timers, errors -----------------------------------------------------------

void MpaStartup::on_peer_closed() {
  const std::string_view kind = kind_name(expected_kind());
  const std::size_t n = in_.size();
  if (state_ == MpaState::RequestReceived) {
    fail(term::mpa_tcp_closed, "peer closed TCP before the MPA Reply was sent");
  } else if (!awaiting_frame()) {
    return; // after the exchange, closing is the data path's business
  } else if (n == 0) {
    fail(term::mpa_tcp_closed, cat("peer closed TCP before sending the ", kind));
  } else if (n < kMpaFrameHeaderLen) {
    fail(term::mpa_invalid_frame, cat(kind, " header incomplete: peer closed TCP after ", n, " of ",
                                      kMpaFrameHeaderLen, " octets (RFC 5044 §7.1.1)"));
  } else { // HX-007
    fail(term::mpa_invalid_frame,
         cat(kind, " PD incomplete: peer closed TCP after ", n - kMpaFrameHeaderLen, " of ",
             header_.pd_length, " private data octets (RFC 5044 §7.1.2 r9)"));
  }
}

void MpaStartup::on_timer(MpaClock::time_point now) {
  if (now < deadline_) return;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(policy_.timeout).count();
  if (state_ == MpaState::RequestReceived) {
    fail(term::mpa_tcp_closed,
         cat("MPA startup timed out after ", ms, " ms waiting for the local accept or reject"));
  } else if (awaiting_frame()) { // HX-004/005, OX-03, RFC 5044 §7.1.2 r8/r10
    fail(term::mpa_tcp_closed,
         cat("MPA startup timed out after ", ms, " ms waiting for the ", kind_name(expected_kind()),
             " (", in_.size(), " octets received)"));
  }
}

void MpaStartup::local_error(std::string message) {
  if (state_ == MpaState::Failed) return;
  // RFC 6581 §9.3 (EMPA-039, HX-020): TERM code 5 once in Full Operation.
  if (state_ == MpaState::Established)
    fail_with_terminate(term::mpa_local_catastrophic, std::move(message));
  else
    fail(term::mpa_local_catastrophic, std::move(message));
}

void MpaStartup::finish(MpaState state) {
  state_ = state;
  deadline_ = MpaClock::time_point::max();
}

void MpaStartup::fail(TermCode code, std::string message) {
  finish(MpaState::Failed);
  error_ = MpaError{code, false, std::move(message)};
}

void MpaStartup::fail_with_terminate(TermCode code, std::string message) {
  const std::vector<std::byte> term = terminate_fpdu(result_, code);
  out_.insert(out_.end(), term.begin(), term.end());
  fail(code, std::move(message));
  error_.terminate_sent = true;
}

} // namespace iwarp
