// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// libFuzzer target: the MPA deframer and the DDP/RDMAP receive path of a Qp.
// The input (see fuzz_rx_fixture.hpp) picks the connection parameters and is
// then the peer's TCP stream, fed in PRNG-chosen chunks through rx_feed or
// rx_next/rx_advance, interleaved with transmit draining (into a second
// deframer that checks what we send), completion polling, more receive and
// send posts, a graceful close and a local failure. Out-of-bounds placement is ASan's job; the
// harness checks:
//  - the QP is in Terminate/Error exactly when it reports an error, and never
//    leaves those states;
//  - every work request completes at most once, in posting order, and after
//    the final close or flush every one has completed;
//  - a successful receive fits its buffer;
//  - memory nobody may write (no remote write right, other PD, deregistered)
//    is unchanged;
//  - the octets the QP transmits are well-formed FPDUs (CRC, markers), at most
//    MULPDU long, with the negotiated DDP/RDMAP version.
#include "fuzz_common.hpp"
#include "fuzz_rx_fixture.hpp"
#include "iwarp/framing.hpp"
#include "iwarp/qp.hpp"
#include "ulpdu_collector.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace iwarp;
using namespace iwarp_fuzz;
using namespace iwarp_fuzz::rx;

namespace {

// Known issue (reported): post_recv in state Closed completes the new WR at once
// (Flushed) while the WRs posted before it stay queued and complete later, so
// receive completions leave posting order. Set to true once that is fixed.
constexpr bool kPostRecvAfterClose = true;
// Known issue (reported): with markers_tx, the frames an error drops unsent are
// not taken back out of FpduTx's stream offset, so the Terminate's markers land
// at the wrong octets. Until fixed, transmitted octets are checked only up to
// the error when markers_tx is on. Set to true once that is fixed.
constexpr bool kCheckTxMarkersAfterError = true;

// Deframes what the QP transmits, as the peer would, and checks each ULPDU.
class TxChecker final : public iwarp::test::UlpduCollector {
public:
  TxChecker(const QpConfig& c)
      : rx_(c.conn.crc, c.conn.markers_tx, c.mulpdu), version_(c.conn.version) {
    rx_.set_sink(this);
  }
  void saw(ConstBytes b) {
    rx_.feed(b);
    FUZZ_CHECK(!rx_.error(), "the QP transmitted a malformed FPDU");
  }

private:
  bool on_ulpdu(const Bytes& u, std::optional<TermCode> err) override {
    if (verbose() && u.size() >= 2)
      std::fprintf(stderr, "  tx FPDU %zu: %s, ULPDU %zu, ends at %llu\n", fpdus,
                   std::string(opcode_name(std::to_integer<std::uint8_t>(u[1]) & 0xf)).c_str(),
                   u.size(), static_cast<unsigned long long>(rx_.stream_offset()));
    if (err)
      std::fprintf(stderr,
                   "transmitted FPDU %zu (ULPDU %zu octets, ends at stream offset %llu): %s\n",
                   fpdus, u.size(), static_cast<unsigned long long>(rx_.stream_offset()),
                   std::string(term_code_name(*err)).c_str());
    FUZZ_CHECK(!err, "the QP transmitted an FPDU with a bad CRC or marker");
    FUZZ_CHECK(u.size() >= kTaggedHdrLen, "transmitted ULPDU shorter than a DDP header");
    DdpHeader h = DdpHeader::decode(u.data());
    FUZZ_CHECK(h.ddp_version == version_ && h.rdmap_version == version_,
               "transmitted a segment with another DDP/RDMAP version");
    FUZZ_CHECK(u.size() >= h.size());
    FUZZ_CHECK(opcode_info(h.opcode).valid && opcode_info(h.opcode).tagged == h.tagged,
               "transmitted an invalid opcode / T bit");
    return false; // checked, not kept
  }
  FpduRx rx_;
  std::uint8_t version_;
};

struct Harness {
  explicit Harness(const std::uint8_t* hdr)
      : cfg(make_config(hdr)), srq(64), use_srq(hdr[2] & kCfg2Srq),
        qp(cfg, fx.mem, use_srq ? &srq : nullptr), tap(qp.config()),
        in_place(hdr[0] & kCfgReadInPlace), rng(hdr[1] | (std::uint64_t{hdr[3]} << 8)) {
    for (RecvWr& w : fx.recv_wrs())
      post_recv(std::move(w));
    if (hdr[0] & kCfgLocalSends)
      for (SendWr& w : fx.send_wrs(cfg.conn.rfc7306))
        post_send(std::move(w));
  }

  void post_recv(RecvWr w) {
    std::uint64_t cap = 0;
    for (const Sge& s : w.sgl)
      cap += s.length;
    const std::uint64_t id = w.wr_id;
    PostError e = use_srq ? srq.post(std::move(w)) : qp.post_recv(std::move(w));
    if (verbose())
      std::fprintf(stderr, "  post_recv %llu: %d\n", static_cast<unsigned long long>(id),
                   static_cast<int>(e));
    if (e != PostError::None) return;
    recv_cap[id] = cap;
    ++posted_recv;
  }

  void post_send(SendWr w) {
    if (qp.post_send(std::move(w)) == PostError::None) ++posted_send;
  }

  // Writes up to `budget` octets of what the QP wants to send (all of it when
  // budget is SIZE_MAX), as a partial writev would.
  void drain_tx(std::size_t budget) {
    for (int round = 0; round < 4096 && budget > 0; ++round) {
      std::vector<ConstBytes> iov;
      qp.tx_gather(iov, 1 + rng.below(64));
      std::size_t total = 0;
      for (ConstBytes b : iov)
        total += b.size();
      if (total == 0) return;
      std::size_t n = std::min(total, budget);
      if (budget != SIZE_MAX) n = std::min(n, 1 + rng.below(total));
      std::size_t left = n;
      if (!kCheckTxMarkersAfterError && cfg.conn.markers_tx && qp.error()) left = 0;
      for (ConstBytes b : iov) {
        if (!left) break;
        std::size_t k = std::min(left, b.size());
        tap.saw(b.first(k));
        left -= k;
      }
      qp.tx_advance(n);
      budget = budget == SIZE_MAX ? budget : budget - n;
      check_state();
    }
  }

  void feed(ConstBytes in) {
    fed += in.size();
    if (!in_place) {
      FUZZ_CHECK(qp.rx_feed(in) == in.size());
      return;
    }
    while (!in.empty()) {
      MutBytes d = qp.rx_next();
      FUZZ_CHECK(!d.empty(), "rx_next returned an empty span");
      std::size_t n = std::min(d.size(), in.size());
      std::memcpy(d.data(), in.data(), n);
      qp.rx_advance(n);
      in = in.subspan(n);
    }
  }

  void poll_all() {
    while (auto c = qp.poll()) {
      if (verbose())
        std::fprintf(stderr, "  %s wr %llu: %s, %u octets\n", c->recv ? "recv" : "send",
                     static_cast<unsigned long long>(c->wr_id),
                     std::string(wc_status_name(c->status)).c_str(), c->byte_len);
      if (c->recv) {
        FUZZ_CHECK(recv_cap.count(c->wr_id), "completion for a receive WR never posted");
        FUZZ_CHECK(recv_done.insert(c->wr_id).second, "receive WR completed twice");
        FUZZ_CHECK(recv_done.size() <= posted_recv);
        if (c->status == WcStatus::Success && !c->immediate)
          FUZZ_CHECK(c->byte_len <= recv_cap[c->wr_id], "receive longer than its buffer");
        // MSN order is posting order, for a QP's own RQ and for an SRQ alike.
        FUZZ_CHECK(c->wr_id > last_recv, "receive completions out of order");
        last_recv = c->wr_id;
      } else {
        FUZZ_CHECK(send_done.insert(c->wr_id).second, "send WR completed twice");
        FUZZ_CHECK(send_done.size() <= posted_send);
        FUZZ_CHECK(c->wr_id > last_send, "send completions out of order");
        last_send = c->wr_id;
      }
    }
  }

  void check_state() {
    const QpState s = qp.state();
    if (verbose() && s != last_state) {
      std::fprintf(stderr, "  -> %s (rx offset %zu)\n", std::string(qp_state_name(s)).c_str(), fed);
      last_state = s;
    }
    const bool err_state = s == QpState::Terminate || s == QpState::Error;
    if (qp.error())
      FUZZ_CHECK(err_state, "an error was reported but the QP is not in Terminate/Error");
    if (err_state) FUZZ_CHECK(qp.error().has_value(), "Terminate/Error without an error");
    if (was_error) FUZZ_CHECK(err_state, "the QP left Terminate/Error");
    was_error = was_error || err_state;
  }

  Fixture fx;
  QpConfig cfg;
  SharedRecvQueue srq;
  bool use_srq;
  Qp qp;
  TxChecker tap;
  bool in_place;
  Rng rng;
  bool was_error = false;
  QpState last_state = QpState::Rts;
  std::size_t fed = 0; // stream octets fed so far
  bool closed = false; // close() was called
  std::size_t posted_recv = 0, posted_send = 0;
  std::map<std::uint64_t, std::uint64_t> recv_cap; // wr_id -> capacity
  std::set<std::uint64_t> recv_done, send_done;
  std::uint64_t last_recv = 0, last_send = 0;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kRxHeaderLen) return 0;
  Harness h(data);
  ConstBytes stream(reinterpret_cast<const std::byte*>(data) + kRxHeaderLen, size - kRxHeaderLen);

  // The initiator may send at once (its RTR, our posted work).
  h.drain_tx(SIZE_MAX);
  h.check_state();
  std::size_t extra_recvs = 0, extra_sends = 0;
  while (!stream.empty()) {
    switch (h.rng.below(16)) {
    case 0:
    case 1: h.drain_tx(1 + h.rng.below(4096)); break;
    case 2: h.drain_tx(SIZE_MAX); break;
    case 3: h.poll_all(); break;
    case 4:
      if (extra_recvs < 8 && (kPostRecvAfterClose || !h.closed))
        h.post_recv(h.fx.extra_recv(extra_recvs++));
      break;
    case 5:
      if (extra_sends < 6 && h.rng.chance(30)) h.post_send(h.fx.extra_send(extra_sends++));
      break;
    case 7:
      if (h.rng.chance(2)) h.qp.fail(term::rdmap_local_catastrophic, "fuzz: local failure");
      break;
    case 6:
      if (h.rng.chance(3)) { // graceful close while data still arrives
        h.qp.close();
        h.closed = true;
      }
      break;
    default: {
      std::size_t n = h.rng.chunk(stream.size());
      h.feed(stream.first(n));
      stream = stream.subspan(n);
      break;
    }
    }
    h.check_state();
  }
  h.drain_tx(SIZE_MAX);
  h.poll_all();
  h.check_state();
  if (verbose())
    std::fprintf(stderr, "  state %s%s%s\n", std::string(qp_state_name(h.qp.state())).c_str(),
                 h.qp.error() ? ": " : "", h.qp.error() ? h.qp.error()->message.c_str() : "");

  // Every work request must complete once the connection goes away.
  switch (static_cast<EndAction>(data[3] & 3)) {
  case EndAction::PeerClosed: h.qp.on_peer_closed(true); break;
  case EndAction::PeerReset: h.qp.on_peer_closed(false); break;
  case EndAction::Flush: h.qp.flush(); break;
  case EndAction::CloseThenPeerClosed:
    h.qp.close();
    h.closed = true;
    h.drain_tx(SIZE_MAX);
    h.poll_all();
    h.check_state();
    h.qp.on_peer_closed(true);
    break;
  }
  h.poll_all();
  h.check_state();
  // A graceful close that completed stays Closed when the peer closes too.
  const bool closed = h.qp.state() == QpState::Closed;
  FUZZ_CHECK(h.qp.state() == QpState::Error || (closed && h.closed),
             "QP neither in Error nor Closed after the connection went away");
  if (closed) FUZZ_CHECK(!h.qp.error(), "Closed with an error");
  FUZZ_CHECK(h.qp.wants_disconnect());
  FUZZ_CHECK(h.recv_done.size() + h.srq.size() == h.posted_recv, "a receive WR never completed");
  FUZZ_CHECK(h.send_done.size() == h.posted_send, "a send WR never completed");
  FUZZ_CHECK(h.fx.guards_intact(), "memory without write rights was modified");
  return 0;
}
