// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A randomized soak (ORD-12): random Sends, Writes, Reads and atomics both ways between
// two Qps; every completion arrives in order and every octet lands where it should.
#include "catch_compat.hpp"
#include "qp_harness.hpp"

#include <cstring>

using namespace qpt;

namespace {

// One side of the soak test: what it posted and what it must see.
struct SoakSide {
  Qp* qp = nullptr;
  MemoryTable* mem = nullptr;
  Buf src;     // remote-readable, never written
  Buf target;  // the peer writes here
  Bytes model; // what `target` must hold at the end
  Buf counter; // the peer's atomics land here
  std::uint64_t counter_model = 0;
  struct SqExp {
    std::uint64_t id;
    WcOpcode op;
    std::uint32_t len;
    bool signaled;
  };
  std::vector<SqExp> sq; // in posting order
  struct RecvExp {
    std::uint64_t id;
    Bytes data;
  };
  std::vector<std::unique_ptr<Buf>> rbufs;
  std::vector<RecvExp> rq; // in the order the peer's Sends were posted
  struct Check {
    Buf* buf;
    std::size_t off;
    Bytes want;
  };
  std::vector<std::unique_ptr<Buf>> sinks;
  std::vector<Check> checks;
  std::uint64_t next_id = 1;
};

void soak_post(std::mt19937_64& rng, SoakSide& me, SoakSide& peer, bool ext) {
  const unsigned kind = rng() % 100;
  const std::uint64_t id = me.next_id++;
  if (kind < 35) { // Send: the peer posts a receive buffer for it first
    const std::size_t len = rng() % 6000, off = rng() % (me.src.data.size() - len);
    auto rb = std::make_unique<Buf>(reg(*peer.mem, 6000, access::kLocalWrite));
    REQUIRE(peer.qp->post_recv(recv_wr(id, {rb->all()})) == PostError::None);
    peer.rq.push_back({id, slice(me.src.data, off, len)});
    peer.rbufs.push_back(std::move(rb));
    SendWr w = send_wr(id, len ? std::vector<Sge>{me.src.sge(off, len)} : std::vector<Sge>{});
    w.solicited = rng() % 4 == 0;
    REQUIRE(me.qp->post_send(w) == PostError::None);
    me.sq.push_back({id, WcOpcode::Send, static_cast<std::uint32_t>(len), true});
  } else if (kind < 65) { // Write, possibly unsignalled, possibly a two-piece gather list
    const std::size_t len = rng() % 8000, off = rng() % (me.src.data.size() - len);
    const std::size_t to = rng() % (peer.target.data.size() - len);
    std::vector<Sge> sgl;
    if (len > 1 && rng() % 2) {
      const std::size_t cut = 1 + rng() % (len - 1);
      sgl = {me.src.sge(off, cut), me.src.sge(off + cut, len - cut)};
    } else if (len) {
      sgl = {me.src.sge(off, len)};
    }
    SendWr w = write_wr(id, sgl, peer.target.stag, peer.target.to(to));
    w.signaled = rng() % 3 != 0;
    REQUIRE(me.qp->post_send(w) == PostError::None);
    std::copy_n(me.src.data.begin() + static_cast<std::ptrdiff_t>(off), len,
                peer.model.begin() + static_cast<std::ptrdiff_t>(to));
    me.sq.push_back({id, WcOpcode::RdmaWrite, static_cast<std::uint32_t>(len), w.signaled});
  } else if (kind < 90 || !ext) { // Read into a fresh two-SGE sink
    const std::size_t len = rng() % 7000, off = rng() % (peer.src.data.size() - len);
    auto sink = std::make_unique<Buf>(reg(*me.mem, len + 32, access::kLocalWrite));
    const std::size_t cut = len ? rng() % len : 0;
    std::vector<Sge> sgl{sink->sge(0, cut), sink->sge(cut + 32, len - cut)};
    SendWr w = read_wr(id, sgl, peer.src.stag, peer.src.to(off));
    w.fence = rng() % 8 == 0;
    REQUIRE(me.qp->post_send(w) == PostError::None);
    Bytes want = slice(peer.src.data, off, len);
    me.checks.push_back({sink.get(), 0, slice(want, 0, cut)});
    me.checks.push_back({sink.get(), cut + 32, slice(want, cut, len - cut)});
    me.sinks.push_back(std::move(sink));
    me.sq.push_back({id, WcOpcode::RdmaRead, static_cast<std::uint32_t>(len), true});
  } else { // FetchAdd on the peer's counter: the original value is known
    const std::uint64_t add = rng() % 1000;
    auto res = std::make_unique<Buf>(reg(*me.mem, 8, access::kLocalWrite));
    SendWr w = send_wr(id, {res->all()}, WrOpcode::AtomicFetchAdd);
    w.remote_stag = peer.counter.stag;
    w.remote_addr = peer.counter.to(0);
    w.compare_add = add;
    REQUIRE(me.qp->post_send(w) == PostError::None);
    Bytes want(8);
    std::memcpy(want.data(), &peer.counter_model, 8);
    peer.counter_model += add;
    me.checks.push_back({res.get(), 0, want});
    me.sinks.push_back(std::move(res));
    me.sq.push_back({id, WcOpcode::FetchAdd, 8, true});
  }
}

void soak_verify(SoakSide& s) {
  std::vector<Completion> sends, recvs;
  for (const Completion& c : drain_cq(*s.qp))
    (c.recv ? recvs : sends).push_back(c);
  std::vector<SoakSide::SqExp> want;
  for (const auto& e : s.sq)
    if (e.signaled) want.push_back(e);
  REQUIRE(sends.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    check_completion(sends[i], want[i].id, WcStatus::Success, want[i].op, want[i].len, false);
  REQUIRE(recvs.size() == s.rq.size());
  for (std::size_t i = 0; i < recvs.size(); ++i) {
    check_completion(recvs[i], s.rq[i].id, WcStatus::Success, WcOpcode::Recv,
                     static_cast<std::uint32_t>(s.rq[i].data.size()), true);
    CHECK(slice(s.rbufs[i]->data, 0, s.rq[i].data.size()) == s.rq[i].data);
  }
  for (const auto& c : s.checks)
    CHECK(slice(c.buf->data, c.off, c.want.size()) == c.want);
  CHECK(s.target.data == s.model);
  CHECK(host_u64(s.counter.data, 0) == s.counter_model);
  CHECK(s.qp->state() == QpState::Rts);
  CHECK(s.qp->sq_outstanding() == 0);
  CHECK(s.qp->rq_outstanding() == 0);
}

} // namespace

TEST_CASE("ORD-12 soak: random Sends, Writes, Reads, atomics both ways, order and data hold",
          "[qp][soak]") {
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  const std::uint64_t seed = GENERATE(range(1, 6));
  std::mt19937_64 rng(seed * 7919 + static_cast<unsigned>(io));
  const std::size_t mulpdus[] = {128, 200, 1452, 9000};
  QpConfig ca = initiator_cfg(mulpdus[rng() % 4]), cb = responder_cfg(mulpdus[rng() % 4]);
  ca.conn.crc = cb.conn.crc = rng() % 2;
  ca.conn.markers_tx = cb.conn.markers_rx = rng() % 2;
  cb.conn.markers_tx = ca.conn.markers_rx = rng() % 2;
  ca.conn.rfc7306 = cb.conn.rfc7306 = true;
  ca.conn.ord = cb.conn.ird = static_cast<std::uint16_t>(1 + rng() % 4);
  cb.conn.ord = ca.conn.ird = static_cast<std::uint16_t>(1 + rng() % 4);
  INFO("seed " << seed << " io " << io_name(io) << " mulpdu " << ca.mulpdu << "/" << cb.mulpdu
               << " crc " << ca.conn.crc << " markers " << ca.conn.markers_tx << cb.conn.markers_tx
               << " ord " << ca.conn.ord << "/" << cb.conn.ord);
  Pair p(ca, cb, {.io = io, .seed = seed});
  SoakSide A, B;
  for (auto [s, qp, mem] : {std::tuple{&A, &*p.a, &p.ma()}, std::tuple{&B, &*p.b, &p.mb()}}) {
    s->qp = qp;
    s->mem = mem;
    s->src = reg(*mem, pattern(65536, static_cast<unsigned>(seed) + (s == &A ? 0 : 50)),
                 access::kRemoteRead | access::kLocalWrite);
    s->target = reg(*mem, 65536, access::kRemoteWrite, 1, Based::Zero);
    s->model.assign(65536, std::byte{0});
    s->counter = reg(*mem, 8, access::kRemoteAtomic);
  }
  B.next_id = 1'000'000;
  for (int round = 0; round < 40; ++round) {
    for (unsigned k = rng() % 5; k > 0; --k)
      soak_post(rng, A, B, true);
    if (round > 0) // the responder may only post once the initiator spoke (it may queue)
      for (unsigned k = rng() % 5; k > 0; --k)
        soak_post(rng, B, A, true);
    for (unsigned k = rng() % 6; k > 0; --k) {
      p.a_to_b();
      p.b_to_a();
    }
  }
  p.pump();
  soak_verify(A);
  soak_verify(B);
}
