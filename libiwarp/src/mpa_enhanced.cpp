// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA Startup, RFC 6581 (MPA Rev 2, enhanced connection set-up): the enhanced data of each
// frame, IRD/ORD negotiation (§9.1), the peer-to-peer model's RTR types (§9.2), and the
// Terminate that ends a negotiation that fails after an accepting Reply (§8). The rest of the
// machine is mpa_startup.cpp.
#include "iwarp/framing.hpp"
#include "iwarp/mpa_startup.hpp"
#include "mpa_startup_detail.hpp"

#include <array>
#include <utility>

namespace iwarp {

using namespace mpa_detail;

namespace {

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
std::vector<std::byte> terminate_fpdu(const ConnParams& r, TermCode code) {
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

std::optional<MpaEnhanced> mpa_detail::request_enhanced(const MpaPolicy& policy) {
  if (policy.revision < kRevEnhanced || !policy.enhanced) return std::nullopt;
  MpaEnhanced e;
  e.p2p = policy.p2p; // RFC 6581 §9.2: A, and with it every RTR type we support
  e.rtr_send = policy.p2p && policy.rtr.send;
  e.rtr_write = policy.p2p && policy.rtr.write;
  e.rtr_read = policy.p2p && policy.rtr.read;
  e.ird = wire_ird_ord(policy.ird); // RFC 6581 §9.1: initiator IRD / ORD
  e.ord = wire_ird_ord(policy.ord);
  return e;
}

// RFC 6581 §9.1 (EMPA-022): the ULP sees the peer's values.
void MpaStartup::take_peer_enhanced() {
  if (!peer_frame_.enhanced) return;
  result_.conn.peer_ird = peer_frame_.enhanced->ird;
  result_.conn.peer_ord = peer_frame_.enhanced->ord;
  result_.peer_rtr = rtr_set(*peer_frame_.enhanced);
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
  result_.conn.ird = ird;
  result_.conn.ord = ord;
  result_.conn.p2p = req.p2p;

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
    const std::optional<RtrType> rtr = pick_rtr(intersect(offered, listed), read_possible);
    if (!rtr) { // RT-06/07, HX-014
      fail_with_terminate(term::mpa_no_matching_rtr,
                          cat("no matching RTR: the Request offered ", rtr_names(offered),
                              ", the Reply listed ", rtr_names(listed),
                              read_possible ? "" : " (Read needs responder IRD >= 1)",
                              " (RFC 6581 §9.2)"));
      return;
    }
    result_.conn.rtr = *rtr;
    if (*rtr == RtrType::Read && result_.conn.ord == 0) result_.conn.ord = 1;
  }
  finish(MpaState::Established);
}

// RFC 6581 §9.1, §9.2: the responder's enhanced data; sets result_.conn.ird/ord.
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
  result_.conn.ird = ird;
  result_.conn.ord = ord;
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

void MpaStartup::fail_with_terminate(TermCode code, std::string message) {
  const std::vector<std::byte> term = terminate_fpdu(result_.conn, code);
  out_.insert(out_.end(), term.begin(), term.end());
  fail(code, std::move(message));
  error_.terminate_sent = true;
}

} // namespace iwarp
