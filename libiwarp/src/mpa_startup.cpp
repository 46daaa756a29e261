// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA Startup Phase: RFC 5044 §7.1 and the RDMAC interop rules of
// draft-carrier-rddp-rnic-interop (IOP; RFC 5044 App. C): the keys, the header, the revision,
// the exchange and its timers. RFC 6581's enhanced set-up is mpa_enhanced.cpp, uiwarp's Res bits
// mpa_private.cpp.
#include "iwarp/mpa_startup.hpp"

#include "mpa_startup_detail.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

namespace iwarp {

using namespace mpa_detail;

namespace {

constexpr std::size_t kKeyLen = kMpaRequestKey.size();

std::string_view key_of(MpaKind k) { return k == MpaKind::Request ? kMpaRequestKey : kMpaReplyKey; }

MpaKind other_kind(MpaKind k) { return k == MpaKind::Request ? MpaKind::Reply : MpaKind::Request; }

} // namespace

// ---- construction -------------------------------------------------------------

MpaStartup MpaStartup::start(MpaRole role, const MpaPolicy& policy, MpaClock::time_point now) {
  MpaStartup m;
  m.role_ = role;
  m.state_ = role == MpaRole::Initiator ? MpaState::AwaitReply : MpaState::AwaitRequest;
  m.policy_ = policy;
  m.deadline_ = now + policy.timeout;
  m.result_.conn.initiator = role == MpaRole::Initiator;
  m.result_.conn.recv_wait_ms = static_cast<std::uint32_t>(policy.recv_wait.count());
  m.result_.conn.ird = policy.ird; // unenhanced: IRD/ORD are the ULP's business
  m.result_.conn.ord = policy.ord;
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
  f.enhanced = request_enhanced(policy); // RFC 6581 §6, §10: S=1 only when wanted
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

void MpaStartup::process_frame() {
  const std::byte* pd = in_.data() + kMpaFrameHeaderLen;
  const std::byte* end = pd + header_.pd_length;
  // The split of the private data: enhanced octets first (RFC 6581 §9), the ULP's, then a
  // same-host offer, which the ULP never sees.
  std::optional<SameHostOffer> offer;
  if (same_host_trailer() != 0) {
    end -= kSameHostOfferLen;
    offer = SameHostOffer::decode(end);
    if (!check_offer(*offer)) return;
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
  take_peer_enhanced();
  if (role_ == MpaRole::Responder) {
    result_.enhanced = peer_frame_.enhanced.has_value();
    result_.conn.p2p = result_.enhanced && peer_frame_.enhanced->p2p;
    state_ = MpaState::RequestReceived;
    return;
  }
  process_reply();
}

// ---- initiator: the Reply -----------------------------------------------------------

void MpaStartup::process_reply() {
  result_.conn.version = peer_rdmac_ ? kVersionRdmac : kVersionIetf;
  // RFC 5044 §7.1.1 (MPA-021/022): CRC unless both said C=0; §4.4 (MC-07); IOP
  // §5.1: RDMAC always uses CRC.
  result_.conn.crc = peer_rdmac_ || local_frame_.crc || peer_frame_.crc || policy_.crc_always;
  // RFC 5044 §7.1.1 (MPA-032): each M bit asks for markers toward its sender.
  // IOP §5.3.2: an RDMAC peer means markers both ways, whatever we asked (RC-11).
  result_.conn.markers_tx = peer_rdmac_ || peer_frame_.markers;
  result_.conn.markers_rx = peer_rdmac_ || local_frame_.markers;
  result_.conn.large_fpdu = local_frame_.large_fpdu && peer_frame_.large_fpdu;
  take_private_answers();
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
  private_reply_bits(f);
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
  result_.conn.ird = ird;
  result_.conn.ord = ord;
  if (enhanced) {
    f.enhanced = reply_enhanced(ird, ord);
    // RFC 6581 §9.1, C-11 (PD-04): a Reject names the ORD the ULP requires.
    if (reject && required_ord) f.enhanced->ord = wire_ird_ord(*required_ord);
  }
  f.private_data = std::move(private_data);
  offer_same_host(f, same_host);

  result_.conn.version = peer_rdmac_ ? kVersionRdmac : kVersionIetf;
  result_.conn.crc = f.crc;                                     // already includes the Request's C
  result_.conn.markers_tx = peer_rdmac_ || peer_frame_.markers; // RFC 5044 §7.1.1 (MPA-032)
  result_.conn.markers_rx = f.markers;
  result_.conn.large_fpdu = f.large_fpdu && peer_frame_.large_fpdu;
  result_.conn.rfc7306 = f.rfc7306;
  result_.conn.same_host = f.same_host;
  const std::vector<std::byte> wire = f.encode();
  out_.insert(out_.end(), wire.begin(), wire.end());
  local_frame_ = std::move(f);
  finish(reject ? MpaState::Rejected : MpaState::Established);
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

} // namespace iwarp
