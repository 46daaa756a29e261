// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Test harness for the DDP/RDMAP engine (iwarp::Qp):
//  - Pair: two Qp endpoints (initiator a, responder b) joined by an in-memory
//    byte pipe, with three ways of moving the octets (whole gather lists into
//    rx_feed; rx_next/rx_advance in small random chunks; partial writes);
//  - Dut: one Qp fed hand-made FPDUs by a scripted peer, whose answer is decoded;
//  - Hostile: a Dut with memory to aim at and work outstanding, and the checks of
//    what it must do with hostile input (the exact Terminate, flushes, silence);
//  - helpers to register memory, build ULPDUs, decode FPDU streams into DDP
//    segments (with the tests' one ULPDU collector, tests/common) and build the
//    exact Terminate a Qp must send.
// Shared by the test_qp_*.cpp files, one per topic.
#pragma once

#include "catch_compat.hpp"
#include "hex.hpp"
#include "iwarp/framing.hpp"
#include "iwarp/memory.hpp"
#include "iwarp/qp.hpp"
#include "iwarp/wire.hpp"
#include "ulpdu_collector.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

// A check of the harness that reaches Catch2 only when it fails. The harness also runs in worker
// threads (test_qp_rfc7306.cpp's concurrent FetchAdds), and Catch2 3 handles even a passing
// assertion in a way that is not thread-safe (its output redirection asserted under sid's
// Catch2 3.7.1); its pump loop checks once per round.
#define HARNESS_REQUIRE(...)                                                                       \
  do {                                                                                             \
    if (!(__VA_ARGS__)) REQUIRE(__VA_ARGS__);                                                      \
  } while (false)

namespace qpt {

using namespace iwarp;
using Bytes = std::vector<std::byte>;

inline Bytes pattern(std::size_t n, unsigned seed = 1) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = std::byte((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return b;
}

inline Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline Bytes slice(const Bytes& b, std::size_t off, std::size_t n) {
  return Bytes(b.begin() + static_cast<std::ptrdiff_t>(off),
               b.begin() + static_cast<std::ptrdiff_t>(off + n));
}

inline bool all_zero(const Bytes& b) {
  for (std::byte x : b)
    if (x != std::byte{0}) return false;
  return true;
}

using iwarp::test::hex;

// A 64-bit value in host order at `off` (atomics operate on host memory).
inline std::uint64_t host_u64(const Bytes& b, std::size_t off) {
  std::uint64_t v;
  std::memcpy(&v, b.data() + off, 8);
  return v;
}
inline void set_host_u64(Bytes& b, std::size_t off, std::uint64_t v) {
  std::memcpy(b.data() + off, &v, 8);
}

// ---- registered memory ---------------------------------------------------------

// A buffer registered in a MemoryTable. Not copyable (the table holds its address).
struct Buf {
  Bytes data;
  std::uint32_t stag = 0;
  std::uint64_t base = 0; // TO of data[0]

  Buf() = default;
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&&) = default;
  Buf& operator=(Buf&&) = default;

  Sge sge(std::size_t off, std::size_t len) const {
    return {base + off, static_cast<std::uint32_t>(len), stag};
  }
  Sge all() const { return sge(0, data.size()); }
  std::uint64_t to(std::size_t off) const { return base + off; }
};

inline constexpr std::uint32_t kAllAccess =
    access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;

enum class Based { Va, Zero };

// Registers `data` (VA-based: TO = host address; zero-based: TO = offset).
inline Buf reg(MemoryTable& mem, Bytes data, std::uint32_t acc = kAllAccess, std::uint32_t pd = 1,
               Based based = Based::Va) {
  Buf b;
  b.data = std::move(data);
  b.base = based == Based::Va ? reinterpret_cast<std::uintptr_t>(b.data.data()) : 0;
  b.stag = mem.add(pd, b.data.data(), b.base, b.data.size(),
                   acc | (based == Based::Zero ? access::kZeroBased : 0));
  HARNESS_REQUIRE(b.stag != 0);
  return b;
}
inline Buf reg(MemoryTable& mem, std::size_t n, std::uint32_t acc = kAllAccess,
               std::uint32_t pd = 1, Based based = Based::Va) {
  return reg(mem, Bytes(n), acc, pd, based);
}

// ---- work requests ---------------------------------------------------------------

inline SendWr send_wr(std::uint64_t id, std::vector<Sge> sgl, WrOpcode op = WrOpcode::Send) {
  SendWr w;
  w.wr_id = id;
  w.opcode = op;
  w.sgl = std::move(sgl);
  return w;
}
inline SendWr write_wr(std::uint64_t id, std::vector<Sge> sgl, std::uint32_t rkey,
                       std::uint64_t raddr) {
  SendWr w = send_wr(id, std::move(sgl), WrOpcode::RdmaWrite);
  w.remote_stag = rkey;
  w.remote_addr = raddr;
  return w;
}
inline SendWr read_wr(std::uint64_t id, std::vector<Sge> sink, std::uint32_t rkey,
                      std::uint64_t raddr) {
  SendWr w = send_wr(id, std::move(sink), WrOpcode::RdmaRead);
  w.remote_stag = rkey;
  w.remote_addr = raddr;
  return w;
}
inline RecvWr recv_wr(std::uint64_t id, std::vector<Sge> sgl) {
  RecvWr w;
  w.wr_id = id;
  w.sgl = std::move(sgl);
  return w;
}

inline std::vector<Completion> drain_cq(Qp& qp) {
  std::vector<Completion> v;
  while (auto c = qp.poll())
    v.push_back(*c);
  return v;
}

inline std::string describe(const Completion& c) {
  return "wr " + std::to_string(c.wr_id) + " " + std::string(wc_status_name(c.status)) + " len " +
         std::to_string(c.byte_len) + (c.recv ? " recv" : " send");
}

inline void check_completion(const Completion& c, std::uint64_t id, WcStatus st, WcOpcode op,
                             std::uint32_t len, bool recv) {
  INFO(describe(c));
  CHECK(c.wr_id == id);
  CHECK(c.status == st);
  CHECK(c.opcode == op);
  CHECK(c.byte_len == len);
  CHECK(c.recv == recv);
}

// ---- FPDU streams ----------------------------------------------------------------

// Deframes a whole stream (markers and CRC verified); fails the test on any MPA error.
inline std::vector<Bytes> ulpdus_of(const Bytes& stream, bool crc, bool markers) {
  iwarp::test::UlpduCollector c; // every ULPDU, and the first error
  FpduRx rx(crc, markers);
  rx.set_sink(&c);
  rx.feed(stream);
  INFO("deframing " << stream.size() << " octets");
  REQUIRE_FALSE(c.error.has_value());
  REQUIRE(rx.at_fpdu_boundary());
  return std::move(c.ulpdus);
}

// One DDP segment as seen on the wire.
struct Seg {
  DdpHeader h;
  Bytes ulpdu;
  std::size_t rdmap_len = 0; // RDMAP header octets after the DDP header
  std::size_t payload_len() const { return ulpdu.size() - h.size() - rdmap_len; }
  Bytes payload() const { return slice(ulpdu, h.size() + rdmap_len, payload_len()); }
  Bytes rdmap() const { return slice(ulpdu, h.size(), rdmap_len); }
};

inline std::vector<Seg> segments_of(const Bytes& stream, bool crc, bool markers) {
  std::vector<Seg> v;
  for (Bytes& u : ulpdus_of(stream, crc, markers)) {
    REQUIRE(u.size() >= kTaggedHdrLen);
    Seg s;
    s.h = DdpHeader::decode(u.data());
    REQUIRE(u.size() >= s.h.size());
    const OpcodeInfo& info = opcode_info(s.h.opcode);
    if (!s.h.tagged && info.valid) s.rdmap_len = std::min(info.rdmap_hdr, u.size() - s.h.size());
    s.ulpdu = std::move(u);
    v.push_back(std::move(s));
  }
  return v;
}

// ---- two endpoints and a pipe ----------------------------------------------------

enum class Io {
  Feed,    // the whole gather list is written and handed to rx_feed
  Chunks,  // read side: rx_next/rx_advance, 1..13 octets at a time
  Partial, // write side: random short writes (and a small max_iov)
};

inline const char* io_name(Io io) {
  switch (io) {
  case Io::Feed: return "feed";
  case Io::Chunks: return "chunks";
  case Io::Partial: return "partial";
  }
  return "?";
}

inline QpConfig initiator_cfg(std::size_t mulpdu = 1452) {
  QpConfig c;
  c.conn.initiator = true;
  c.qp_id = 1;
  c.mulpdu = mulpdu;
  return c;
}
inline QpConfig responder_cfg(std::size_t mulpdu = 1452) {
  QpConfig c;
  c.conn.initiator = false;
  c.qp_id = 2;
  c.mulpdu = mulpdu;
  return c;
}

class Pair {
public:
  struct Options {
    Io io = Io::Feed;
    bool shared_mem = false;          // both Qps use mem_a
    SharedRecvQueue* srq_b = nullptr; // the responder takes receive buffers from it
    MemoryTable* mem_b = nullptr;     // the responder's table lives elsewhere
    std::uint64_t seed = 1;
  };

  Pair(const QpConfig& ca, const QpConfig& cb) : Pair(ca, cb, Options{}) {}
  Pair(const QpConfig& ca, const QpConfig& cb, Options o)
      : opt_(o), mem_a(o.seed * 2 + 1), mem_b(o.seed * 2 + 2), rng_(o.seed) {
    a.emplace(ca, mem_a);
    b.emplace(cb, mb(), o.srq_b);
  }

  MemoryTable& ma() { return mem_a; }
  MemoryTable& mb() { return opt_.mem_b ? *opt_.mem_b : opt_.shared_mem ? mem_a : mem_b; }

  // Moves what `src` has ready into `dst`, once. Returns the octets moved. Octets `dst`
  // does not take (its stream is held: a Send waits for a buffer) stay in `pending`, as
  // they would stay in TCP, and are offered first next time.
  std::size_t step(Qp& src, Qp& dst, Bytes& log, Bytes& pending) {
    std::size_t moved = deliver(dst, pending, {});
    std::vector<ConstBytes> iov;
    const std::size_t max_iov = opt_.io == Io::Partial ? 3 : 1024;
    src.tx_gather(iov, max_iov);
    HARNESS_REQUIRE(iov.size() <= max_iov); // the writev limit the caller asked for
    std::size_t total = 0;
    for (ConstBytes p : iov)
      total += p.size();
    if (total == 0) return moved;
    std::size_t n = total;
    if (opt_.io == Io::Partial) {
      n = (rng_() % 3 == 0) ? 1 + rng_() % std::min<std::size_t>(total, 7) : 1 + rng_() % total;
    }
    Bytes chunk;
    chunk.reserve(n);
    for (ConstBytes p : iov) {
      std::size_t k = std::min(p.size(), n - chunk.size());
      chunk.insert(chunk.end(), p.begin(), p.begin() + static_cast<std::ptrdiff_t>(k));
      if (chunk.size() == n) break;
    }
    src.tx_advance(n);
    log.insert(log.end(), chunk.begin(), chunk.end());
    deliver(dst, pending, chunk);
    return moved + n;
  }

  // Appends `in` to `pending` and hands `dst` what it takes; returns the octets it took.
  std::size_t deliver(Qp& dst, Bytes& pending, ConstBytes in) {
    pending.insert(pending.end(), in.begin(), in.end());
    std::size_t taken = 0;
    if (opt_.io != Io::Chunks) {
      taken = dst.rx_feed(pending);
    } else {
      while (taken < pending.size()) {
        MutBytes d = dst.rx_next();
        if (d.empty()) { // only while the stream is held
          HARNESS_REQUIRE(dst.rx_held());
          break;
        }
        std::size_t k = std::min({d.size(), pending.size() - taken, std::size_t{1 + rng_() % 13}});
        std::memcpy(d.data(), pending.data() + taken, k);
        dst.rx_advance(k);
        taken += k;
      }
    }
    HARNESS_REQUIRE((taken == pending.size() || dst.rx_held()));
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(taken));
    return taken;
  }

  // Injects octets into a direction (tests that forge or split the stream).
  std::size_t deliver(Qp& dst, ConstBytes in) {
    return deliver(dst, &dst == &*b ? pending_ab_ : pending_ba_, in);
  }

  std::size_t a_to_b() { return step(*a, *b, ab, pending_ab_); }
  std::size_t b_to_a() { return step(*b, *a, ba, pending_ba_); }

  // Runs the pipe both ways until neither side has anything to send.
  void pump() {
    for (std::size_t rounds = 0;; ++rounds) {
      HARNESS_REQUIRE(rounds < 10'000'000);
      std::size_t n = a_to_b();
      n += b_to_a();
      if (n == 0) return;
    }
  }
  // Only a → b until a is quiet (b's answers stay queued).
  void pump_a() {
    while (a_to_b() > 0) {
    }
  }
  void pump_b() {
    while (b_to_a() > 0) {
    }
  }

  std::vector<Seg> segs_ab() const {
    return segments_of(ab, a->config().conn.crc, a->config().conn.markers_tx);
  }
  std::vector<Seg> segs_ba() const {
    return segments_of(ba, b->config().conn.crc, b->config().conn.markers_tx);
  }

private:
  Options opt_;
  Bytes pending_ab_, pending_ba_;

public:
  MemoryTable mem_a, mem_b;
  std::optional<Qp> a, b;
  Bytes ab, ba; // every octet written a → b and b → a

private:
  std::mt19937_64 rng_;
};

// ---- one endpoint and a scripted peer --------------------------------------------

// The header octets of an untagged segment for `op` on its own queue.
inline DdpHeader untagged(Opcode op, std::uint32_t msn, std::uint32_t mo = 0, bool last = true) {
  DdpHeader h;
  h.tagged = false;
  h.last = last;
  h.opcode = static_cast<std::uint8_t>(op);
  h.qn = opcode_info(h.opcode).qn;
  h.msn = msn;
  h.mo = mo;
  return h;
}
inline DdpHeader tagged(Opcode op, std::uint32_t stag, std::uint64_t to, bool last = true) {
  DdpHeader h;
  h.tagged = true;
  h.last = last;
  h.opcode = static_cast<std::uint8_t>(op);
  h.stag = stag;
  h.to = to;
  return h;
}

inline Bytes ulpdu(const DdpHeader& h, const Bytes& rdmap = {}, const Bytes& payload = {}) {
  Bytes u(h.size());
  h.encode(u.data());
  return cat(cat(u, rdmap), payload);
}
inline Bytes rr_bytes(const ReadRequestHeader& r) {
  Bytes b(kReadRequestHdrLen);
  r.encode(b.data());
  return b;
}
inline Bytes atomic_bytes(const AtomicRequestHeader& a) {
  Bytes b(kAtomicRequestHdrLen);
  a.encode(b.data());
  return b;
}
// A Read Request ULPDU (MSN `msn`) for `size` octets at the source STag/TO.
inline Bytes read_request(std::uint32_t src_stag, std::uint64_t src_to, std::uint32_t size,
                          std::uint32_t msn = 1) {
  return ulpdu(untagged(Opcode::RdmaReadRequest, msn),
               rr_bytes({0xabcd0001, 0x0102030405060708ull, size, src_stag, src_to}));
}
inline Bytes be64(std::uint64_t v) {
  Bytes b(8);
  store_be64(b.data(), v);
  return b;
}

class Dut {
public:
  explicit Dut(QpConfig c = dut_cfg(), SharedRecvQueue* srq = nullptr)
      : cfg(c), mem(77), peer_(c.conn.crc, c.conn.markers_rx) {
    qp.emplace(cfg, mem, srq);
  }
  static QpConfig dut_cfg() {
    QpConfig c = initiator_cfg();
    c.qp_id = 7;
    return c;
  }

  // Frames a ULPDU as the peer would (CRC, markers of the DUT's receive side).
  Bytes frame(const Bytes& u) {
    const std::size_t h = std::min<std::size_t>(u.size(), 128);
    ConstBytes rest = ConstBytes(u).subspan(h);
    return peer_.frame_bytes(ConstBytes(u).first(h), std::span<const ConstBytes>(&rest, 1));
  }
  void feed_raw(const Bytes& b) { qp->rx_feed(b); }
  void feed(const Bytes& u) { feed_raw(frame(u)); }

  // Everything the DUT has to send, written in full.
  Bytes drain() {
    Bytes got;
    for (;;) {
      std::vector<ConstBytes> iov;
      qp->tx_gather(iov);
      std::size_t n = 0;
      for (ConstBytes p : iov) {
        got.insert(got.end(), p.begin(), p.end());
        n += p.size();
      }
      if (n == 0) break;
      qp->tx_advance(n);
    }
    out.insert(out.end(), got.begin(), got.end());
    return got;
  }
  std::vector<Seg> segs(const Bytes& stream) {
    return segments_of(stream, cfg.conn.crc, cfg.conn.markers_tx);
  }

  QpConfig cfg;
  MemoryTable mem;
  std::optional<Qp> qp;
  Bytes out; // all octets the DUT wrote

private:
  FpduTx peer_;
};

// The exact Terminate ULPDU (RFC 5040 §4.8; layout of requirements C-05/C-06): DDP
// header QN 2 MSN 1, control word, then the DDP Segment Length, the offending
// segment's DDP header and its Read Request header as HdrCt says.
inline Bytes terminate_ulpdu(TermCode code, bool m, bool d, bool r, const Bytes& offending,
                             std::uint8_t version = kVersionIetf) {
  DdpHeader h = untagged(Opcode::Terminate, 1);
  h.ddp_version = h.rdmap_version = version;
  Bytes u = ulpdu(h);
  u.push_back(std::byte((static_cast<unsigned>(code.layer) << 4) | code.etype));
  u.push_back(std::byte(code.code));
  u.push_back(std::byte((m ? 0x80 : 0) | (d ? 0x40 : 0) | (r ? 0x20 : 0)));
  u.push_back(std::byte{0});
  if (m || d) {
    u.push_back(std::byte(offending.size() >> 8));
    u.push_back(std::byte(offending.size() & 0xff));
  }
  if (d) {
    const std::size_t hl = DdpHeader::is_tagged(offending.data()) ? kTaggedHdrLen : kUntaggedHdrLen;
    u = cat(u, slice(offending, 0, hl));
  }
  if (r) u = cat(u, slice(offending, kUntaggedHdrLen, kReadRequestHdrLen));
  return u;
}

// ---- one endpoint under attack ---------------------------------------------------

// A DUT with memory to aim at and work outstanding to watch being flushed.
struct Hostile {
  Dut d;
  Buf w;     // PD 1, every right, 256 octets: the legitimate target
  Buf other; // PD 2
  Buf ro;    // remote read only
  Buf rbuf;  // receive buffer, local write only
  Buf sink;  // RDMA Read sink, local write only
  bool armed_recv = false, armed_read = false;
  bool has_srq = false;

  explicit Hostile(QpConfig c = Dut::dut_cfg(), SharedRecvQueue* srq = nullptr)
      : d(c, srq), has_srq(srq != nullptr) {
    w = reg(d.mem, 256);
    other = reg(d.mem, 256, kAllAccess, 2);
    ro = reg(d.mem, 256, access::kRemoteRead);
    rbuf = reg(d.mem, 256, access::kLocalWrite);
    sink = reg(d.mem, 64, access::kLocalWrite);
  }
  Qp& qp() { return *d.qp; }

  // A receive buffer (wr 100) and an RDMA Read awaiting its Response (wr 200).
  void arm(bool recv = true, bool read = true) {
    if (recv) REQUIRE(qp().post_recv(recv_wr(100, {rbuf.all()})) == PostError::None);
    if (read) {
      REQUIRE(qp().post_send(read_wr(200, {sink.all()}, 0x5eed0001, 0x1000)) == PostError::None);
      auto segs = d.segs(d.drain());
      REQUIRE(segs.size() == 1);
      REQUIRE(segs[0].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadRequest));
    }
    armed_recv = recv;
    armed_read = read;
  }

  // Every outstanding WR completed: the first with `first`, the rest flushed.
  void expect_flushed(WcStatus first = WcStatus::Flushed) {
    auto cq = drain_cq(qp());
    std::size_t i = 0;
    REQUIRE(cq.size() == std::size_t{armed_read} + std::size_t{armed_recv});
    if (armed_read) {
      check_completion(cq[i++], 200, first, WcOpcode::RdmaRead, 64, false);
      first = WcStatus::Flushed;
    }
    if (armed_recv) check_completion(cq[i++], 100, WcStatus::Flushed, WcOpcode::Recv, 0, true);
    CHECK(qp().sq_outstanding() == 0);
    CHECK(qp().rq_outstanding() == 0);
    CHECK(qp().reads_outstanding() == 0);
    CHECK(qp().inbound_reads_queued() == 0);
  }

  // HX-064: after the error every later segment is dropped unread.
  void expect_dropped() {
    const Bytes before = w.data, rbefore = rbuf.data;
    d.feed(ulpdu(tagged(Opcode::RdmaWrite, w.stag, w.to(0)), {}, pattern(32, 9)));
    d.feed(ulpdu(untagged(Opcode::Send, 1), {}, pattern(8, 1)));
    d.feed(ulpdu(untagged(Opcode::RdmaReadRequest, 1), rr_bytes({0x1111, 0, 8, w.stag, w.to(0)})));
    CHECK(w.data == before);
    CHECK(rbuf.data == rbefore);
    CHECK(drain_cq(qp()).empty());
    CHECK(d.drain().empty());
    // TM-003: nothing goes out after the Terminate; new work completes flushed.
    REQUIRE(qp().post_send(send_wr(300, {})) == PostError::None);
    if (!has_srq) REQUIRE(qp().post_recv(recv_wr(301, {rbuf.all()})) == PostError::None);
    auto cq = drain_cq(qp());
    REQUIRE(cq.size() == (has_srq ? 1u : 2u));
    for (const Completion& c : cq)
      CHECK(c.status == WcStatus::Flushed);
    CHECK(d.drain().empty());
  }

  // The DUT answered `offending` with exactly one Terminate of this content.
  void expect_terminate(const Bytes& offending, TermCode code, bool m, bool dd, bool r) {
    INFO("offending ULPDU " << hex(offending));
    CHECK(qp().state() == QpState::Terminate);
    CHECK_FALSE(qp().wants_disconnect());
    auto segs = d.segs(d.drain());
    REQUIRE(segs.size() == 1);
    CHECK(hex(segs[0].ulpdu) ==
          hex(terminate_ulpdu(code, m, dd, r, offending, d.cfg.conn.version)));
    CHECK(qp().state() == QpState::Error);
    CHECK(qp().wants_disconnect());
    REQUIRE(qp().error().has_value());
    CHECK(qp().error()->code == code);
    CHECK_FALSE(qp().error()->remote);
    expect_flushed();
    expect_dropped();
  }
  // Shorthands for the Fig. 10 header sets.
  void expect_ddp_term(const Bytes& off, TermCode code) { expect_terminate(off, code, 1, 1, 0); }
  void expect_rdma_term(const Bytes& off, TermCode code) { expect_terminate(off, code, 1, 1, 1); }
  void expect_bare_term(const Bytes& off, TermCode code) { expect_terminate(off, code, 0, 0, 0); }

  // Nothing wrong: no Terminate, still RTS.
  void expect_accepted() {
    CHECK(qp().state() == QpState::Rts);
    CHECK_FALSE(qp().error().has_value());
  }
};

inline QpConfig cfg7306() {
  QpConfig c = Dut::dut_cfg();
  c.conn.rfc7306 = true;
  return c;
}

} // namespace qpt
