// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// libFuzzer target: the MPA Startup state machine (RFC 5044 §7.1, RFC 6581,
// IOP) as initiator or responder. The first octets are the local policy (see
// fuzz_mpa_startup.hpp); the rest is what the peer sends, fed in PRNG-chosen
// chunks, interleaved with timer ticks, output consumption, peer closes, local
// errors and (responder) accept()/reject(). The harness checks:
//  - on_bytes never takes octets past the peer's frame: exactly 20 + PD_Length
//    when the frame completes, nothing once the exchange is over;
//  - states only move forward (Established and Rejected can only fail);
//  - a finished exchange has no deadline, a failed one says why;
//  - an Established result is consistent with the local policy, a same-host offer
//    agreed only when both ends set the bit and, at the initiator, received intact;
//  - everything we wrote is our own well-formed Request or Reply (a Request never
//    with a same-host trailer, a Reply with one only after our caller's offer),
//    followed by a well-formed Terminate FPDU when the error says one was sent.
#include "fuzz_mpa_startup.hpp"

#include "fuzz_common.hpp"
#include "iwarp/framing.hpp"
#include "iwarp/mpa_startup.hpp"
#include "ulpdu_collector.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

using namespace iwarp;
using namespace iwarp_fuzz;
using namespace iwarp_fuzz::mpa;

namespace {

bool awaiting(MpaState s) { return s == MpaState::AwaitRequest || s == MpaState::AwaitReply; }

bool allowed(MpaState from, MpaState to) {
  if (from == to) return true;
  switch (from) {
  case MpaState::AwaitRequest: return to == MpaState::RequestReceived || to == MpaState::Failed;
  case MpaState::RequestReceived:
  case MpaState::AwaitReply:
    return to == MpaState::Established || to == MpaState::Rejected || to == MpaState::Failed;
  case MpaState::Established:
  case MpaState::Rejected: return to == MpaState::Failed;
  case MpaState::Failed: return false;
  }
  return false;
}

std::vector<std::byte> pattern(std::size_t n, std::uint8_t salt) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = std::byte(static_cast<unsigned>((i + salt) & 0xff));
  return v;
}

// A Terminate FPDU (RFC 6581 §8 / §9) as the startup machine appends it.
class TermChecker final : public iwarp::test::UlpduCollector {
  bool on_ulpdu(const Bytes& u, std::optional<TermCode> err) override {
    FUZZ_CHECK(!err, "Terminate FPDU with a bad CRC or marker");
    FUZZ_CHECK(u.size() >= kUntaggedHdrLen + kTerminateCtrlLen, "short Terminate FPDU");
    DdpHeader h = DdpHeader::decode(u.data());
    FUZZ_CHECK(!h.tagged && h.last && h.op() == Opcode::Terminate && h.qn == kQnTerminate &&
                   h.msn == 1 && h.mo == 0,
               "the FPDU after the startup frame is not a Terminate");
    auto t = TerminateHeader::decode(ConstBytes(u).subspan(kUntaggedHdrLen));
    FUZZ_CHECK(t && t->code.layer == TermLayer::Llp, "Terminate without an MPA error code");
    return false; // checked, not kept
  }
};

struct Harness {
  Harness(const std::uint8_t* hdr, MpaClock::time_point t0)
      : policy(make_policy(hdr)), responder(hdr[0] & kPol0Responder), reject(hdr[1] & kPol1Reject),
        pd_len(kPdLen[hdr[4] & 15]), accept_limits(hdr[4] >> 4),
        offer(accept_limits & kAcceptNoOffer ? std::nullopt : std::optional(fuzz_offer(hdr[5]))),
        rng(hdr[5]), now(t0),
        m(responder ? MpaStartup::responder(policy, now)
                    : MpaStartup::initiator(policy, pattern(pd_len, 1), now)) {
    prev = m.state();
    check();
  }

  void take_output(std::size_t max) {
    ConstBytes o = m.output();
    std::size_t n = std::min(o.size(), max);
    out.insert(out.end(), o.begin(), o.begin() + static_cast<std::ptrdiff_t>(n));
    m.consume_output(n);
  }

  void feed(ConstBytes in) {
    const MpaState before = m.state();
    const std::size_t used = m.on_bytes(in);
    FUZZ_CHECK(used <= in.size());
    if (!awaiting(before)) FUZZ_CHECK(used == 0, "on_bytes took octets after the exchange");
    if (used < in.size()) FUZZ_CHECK(!awaiting(m.state()), "on_bytes stopped early");
    consumed += used;
    if (awaiting(before) && !awaiting(m.state()) && m.state() != MpaState::Failed) {
      // The frame is complete: exactly its octets were taken, not one more.
      const MpaFrame& f = responder ? m.request() : m.reply();
      FUZZ_CHECK(f.kind == (responder ? MpaKind::Request : MpaKind::Reply));
      FUZZ_CHECK(consumed == kMpaFrameHeaderLen + f.pd_length(),
                 "on_bytes consumed more or less than the frame");
    }
    check();
  }

  void answer() {
    if (m.state() != MpaState::RequestReceived) return;
    std::vector<std::byte> pd = pattern(pd_len, 2);
    if (reject) {
      std::optional<std::uint16_t> req_ord;
      if (accept_limits & 1) req_ord = kIrdOrd[accept_limits];
      m.reject(std::move(pd), req_ord);
    } else {
      if (accept_limits & 1) accept_ird = kIrdOrd[accept_limits];
      if (accept_limits & 2) accept_ord = kIrdOrd[(accept_limits * 7) & 15];
      m.accept(std::move(pd), accept_ird, accept_ord, offer);
    }
    check();
  }

  void check() {
    const MpaState s = m.state();
    FUZZ_CHECK(allowed(prev, s), "MPA state moved backwards");
    prev = s;
    if (!awaiting(s) && s != MpaState::RequestReceived)
      FUZZ_CHECK(m.deadline() == MpaClock::time_point::max(), "finished exchange keeps a deadline");
    if (s == MpaState::Failed) FUZZ_CHECK(!m.error().message.empty(), "failure without a message");
    if (s == MpaState::RequestReceived) FUZZ_CHECK(responder);
    if (s == MpaState::Established) check_result();
  }

  void check_result() {
    const MpaResult& res = m.result();
    const ConnParams& r = res.conn;
    FUZZ_CHECK(r.version == kVersionIetf || r.version == kVersionRdmac);
    if (r.version == kVersionRdmac)
      FUZZ_CHECK(policy.permissive, "RDMAC version without permissive mode");
    if (policy.crc_always) FUZZ_CHECK(r.crc, "CRC off although crc_always");
    FUZZ_CHECK(r.markers_rx == (policy.markers || r.version == kVersionRdmac),
               "markers toward us differ from what we asked");
    if (r.large_fpdu) FUZZ_CHECK(policy.large_fpdu);
    if (r.rfc7306)
      FUZZ_CHECK(policy.rfc7306 && r.version == kVersionIetf, "RFC 7306 not offered, or RDMAC");
    if (r.same_host)
      FUZZ_CHECK(policy.same_host && r.version == kVersionIetf, "same-host not offered, or RDMAC");
    if (responder) {
      FUZZ_CHECK(!r.peer_same_host, "a same-host offer from the initiator");
      if (r.same_host) FUZZ_CHECK(offer && m.request().same_host, "same-host offered unasked");
    } else {
      FUZZ_CHECK(r.same_host == r.peer_same_host.has_value());
      if (r.peer_same_host) FUZZ_CHECK(r.peer_same_host->valid(), "malformed same-host offer");
      FUZZ_CHECK(r.peer_same_host == m.reply().same_host_offer);
      FUZZ_CHECK(res.peer_private_data == m.reply().private_data,
                 "the ULP's private data is not the Reply's without its offer");
    }
    FUZZ_CHECK(res.peer_private_data.size() <= policy.max_private_data,
               "peer private data larger than the local buffer");
    const std::uint16_t base_ird = accept_ird.value_or(policy.ird);
    const std::uint16_t base_ord = accept_ord.value_or(policy.ord);
    const std::uint16_t max_ird =
        std::max<std::uint16_t>({base_ird, policy.max_ird, std::uint16_t{1}});
    FUZZ_CHECK(r.ird <= max_ird, "IRD above both the local IRD and the maximum");
    FUZZ_CHECK(r.ord <= std::max<std::uint16_t>(base_ord, 1), "ORD above the local ORD");
    if (!responder && r.p2p) {
      FUZZ_CHECK(policy.rtr.has(r.rtr) && res.peer_rtr.has(r.rtr),
                 "RTR type not offered by both sides");
    }
    if (res.enhanced) FUZZ_CHECK(policy.enhanced && policy.revision >= 2);
  }

  // Everything we wrote: our frame, then possibly a Terminate FPDU.
  void check_output() {
    take_output(SIZE_MAX);
    if (out.empty()) return;
    FUZZ_CHECK(out.size() >= kMpaFrameHeaderLen, "partial MPA frame written");
    auto h = MpaFrameHeader::decode(out.data());
    FUZZ_CHECK(h.has_value(), "written frame has no valid key");
    FUZZ_CHECK(h->kind == (responder ? MpaKind::Reply : MpaKind::Request),
               "wrote the wrong kind of frame");
    FUZZ_CHECK(h->pd_length <= kMaxPrivateData);
    const std::size_t frame_len = kMpaFrameHeaderLen + h->pd_length;
    FUZZ_CHECK(out.size() >= frame_len, "written frame shorter than its PD_Length");
    if (h->enhanced() && h->rev >= 2) FUZZ_CHECK(h->pd_length >= kEnhancedDataLen);
    const bool sh_bit = h->flags & kMpaFlagSameHost;
    if (!responder) {
      FUZZ_CHECK(h->rev == policy.revision, "Request Rev differs from the policy");
      FUZZ_CHECK(h->crc() == (policy.crc || policy.crc_always));
      FUZZ_CHECK(h->markers() == policy.markers);
      FUZZ_CHECK(sh_bit == policy.same_host, "Request same-host bit differs from the policy");
      FUZZ_CHECK(!(h->flags & kMpaFlagUiwarpReply), "a Request carries the uiwarp Reply mark");
      FUZZ_CHECK(h->pd_length == pd_len + (h->enhanced() ? kEnhancedDataLen : 0),
                 "Request private data is not the ULP's alone");
    } else {
      FUZZ_CHECK(sh_bit == m.result().conn.same_host,
                 "Reply same-host bit differs from the result");
      // The mark answers a Request with uiwarp's bits, and nothing else (kMpaFlagUiwarpReply).
      FUZZ_CHECK(static_cast<bool>(h->flags & kMpaFlagUiwarpReply) ==
                     ((m.request().rfc7306 || m.request().same_host) && h->rev != 0),
                 "Reply mark without uiwarp bits in the Request, or missing");
      if (sh_bit) {
        FUZZ_CHECK(offer && policy.same_host && !h->reject() && h->rev != 0,
                   "same-host bit without an offer, in a reject, or to RDMAC");
        FUZZ_CHECK(h->pd_length >= kSameHostOfferLen);
        FUZZ_CHECK(SameHostOffer::decode(out.data() + kMpaFrameHeaderLen + h->pd_length -
                                         kSameHostOfferLen) == *offer,
                   "the Reply's trailer is not the caller's offer");
      }
      if (m.state() == MpaState::Established) FUZZ_CHECK(!h->reject(), "accepting Reply has R=1");
      if (m.state() == MpaState::Rejected) FUZZ_CHECK(h->reject(), "rejecting Reply has R=0");
    }
    if (out.size() == frame_len) return;
    FUZZ_CHECK(m.state() == MpaState::Failed && m.error().terminate_sent,
               "octets after the frame but no Terminate was sent");
    TermChecker tc;
    FpduRx rx(m.result().conn.crc, m.result().conn.markers_tx);
    rx.set_sink(&tc);
    rx.feed(ConstBytes(out).subspan(frame_len));
    FUZZ_CHECK(!rx.error() && rx.at_fpdu_boundary() && tc.fpdus == 1,
               "the Terminate after the frame is not exactly one well-formed FPDU");
  }

  MpaPolicy policy;
  bool responder;
  bool reject;
  std::size_t pd_len;
  unsigned accept_limits;
  std::optional<std::uint16_t> accept_ird, accept_ord;
  std::optional<SameHostOffer> offer; // the responder caller's, for accept()
  Rng rng;
  MpaClock::time_point now;
  MpaStartup m;
  MpaState prev;
  std::size_t consumed = 0;
  std::vector<std::byte> out;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kMpaHeaderLen) return 0;
  const MpaClock::time_point t0{std::chrono::hours(1)};
  Harness h(data, t0);
  ConstBytes stream(reinterpret_cast<const std::byte*>(data) + kMpaHeaderLen, size - kMpaHeaderLen);

  while (!stream.empty()) {
    switch (h.rng.below(32)) {
    case 0:
      h.now += std::chrono::milliseconds(h.rng.below(400));
      h.m.on_timer(h.now);
      h.check();
      break;
    case 1: h.take_output(h.rng.below(64)); break;
    case 2:
      if (h.rng.chance(20)) {
        h.m.on_peer_closed();
        h.check();
      }
      break;
    case 3:
      if (h.rng.chance(10)) {
        h.m.local_error("fuzz: local error");
        h.check();
      }
      break;
    case 4: h.answer(); break;
    default: {
      std::size_t n = h.rng.chunk(stream.size());
      h.feed(stream.first(n));
      stream = stream.subspan(n);
      if (h.rng.chance(70)) h.answer();
      break;
    }
    }
  }
  h.answer();
  if (verbose()) {
    static constexpr const char* kNames[] = {"AwaitRequest", "RequestReceived", "AwaitReply",
                                             "Established",  "Rejected",        "Failed"};
    std::fprintf(stderr, "  %s: %s%s%s (consumed %zu)%s\n", h.responder ? "responder" : "initiator",
                 kNames[static_cast<int>(h.m.state())], h.m.state() == MpaState::Failed ? ": " : "",
                 h.m.state() == MpaState::Failed ? h.m.error().message.c_str() : "", h.consumed,
                 h.m.result().conn.same_host ? " same-host" : "");
  }
  h.check_output();
  // The exchange ends one way or another: timeout, then the peer's close.
  h.now += 2 * kTimeout;
  h.m.on_timer(h.now);
  h.check();
  FUZZ_CHECK(!awaiting(h.m.state()) && h.m.state() != MpaState::RequestReceived,
             "exchange still open after its timeout");
  h.m.on_peer_closed();
  h.check();
  h.check_output();
  return 0;
}
