// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Sends (RFC 5040 §5.3, RFC 5041 §5.3; requirements SD-, DDP-044, DDP-083): Send/Recv of
// every size, gather/scatter, inline data, Send with Invalidate and with SE, the shared
// receive queue, posting limits; then Sends with Invalidate from a hostile peer (HX-083..085).
// Two Qps talk through the in-memory pipe of qp_harness.hpp, or one Qp is fed hand-made FPDUs.
#include "catch_compat.hpp"
#include "qp_harness.hpp"

using namespace qpt;

namespace {

// One Send of `n` octets from a to b; returns the pair for further checks.
void send_and_check(Io io, std::size_t n) {
  INFO("io " << io_name(io) << ", " << n << " octets");
  Pair p(initiator_cfg(), responder_cfg(), {.io = io, .seed = n + 3});
  Buf src = reg(p.ma(), pattern(n, 3), access::kLocalWrite);
  Buf dst = reg(p.mb(), n + 16, access::kLocalWrite);
  REQUIRE(p.b->post_recv(recv_wr(11, {dst.all()})) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(21, n ? std::vector<Sge>{src.all()} : std::vector<Sge>{})) ==
          PostError::None);
  p.pump();

  auto ca = drain_cq(*p.a), cb = drain_cq(*p.b);
  REQUIRE(ca.size() == 1);
  check_completion(ca[0], 21, WcStatus::Success, WcOpcode::Send, static_cast<std::uint32_t>(n),
                   false);
  REQUIRE(cb.size() == 1);
  check_completion(cb[0], 11, WcStatus::Success, WcOpcode::Recv, static_cast<std::uint32_t>(n),
                   true);
  CHECK(slice(dst.data, 0, n) == src.data);
  CHECK(all_zero(slice(dst.data, n, 16)));
  CHECK(p.a->state() == QpState::Rts);
  CHECK(p.b->state() == QpState::Rts);
  CHECK(p.a->sq_outstanding() == 0);
  CHECK(p.b->rq_outstanding() == 0);

  // DDP-042/044: segments of at most MULPDU (1452) octets, header included.
  const std::size_t per = 1452 - kUntaggedHdrLen;
  const std::size_t want = n == 0 ? 1 : (n + per - 1) / per;
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == want);
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const Seg& s = segs[i];
    CHECK_FALSE(s.h.tagged);
    CHECK(s.h.opcode == static_cast<std::uint8_t>(Opcode::Send));
    CHECK(s.h.qn == kQnSend);
    CHECK(s.h.msn == 1);
    CHECK(s.h.mo == i * per);
    CHECK(s.h.last == (i + 1 == segs.size()));
    CHECK(s.payload_len() == std::min(per, n - i * per));
    CHECK(s.ulpdu.size() <= 1452);
  }
}

} // namespace

TEST_CASE("SD-001 Send/Recv of 0, 1, MULPDU-boundary and 1 MiB messages", "[qp][send]") {
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  const std::size_t n =
      GENERATE(as<std::size_t>{}, 0, 1, 1434, 1435, 2868, 2869, std::size_t{1} << 20);
  send_and_check(io, n);
}

TEST_CASE("DDP-044 2048-octet untagged message at MULPDU 1500: MO 0 len 1482, MO 1482 len 566",
          "[qp][send]") {
  Pair p(initiator_cfg(1500), responder_cfg(1500));
  Buf src = reg(p.ma(), pattern(2048, 5));
  Buf dst = reg(p.mb(), 2048);
  REQUIRE(p.b->post_recv(recv_wr(1, {dst.all()})) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(2, {src.all()})) == PostError::None);
  p.pump();
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].ulpdu.size() == 1500);
  CHECK(segs[0].h.mo == 0);
  CHECK(segs[0].payload_len() == 1482);
  CHECK_FALSE(segs[0].h.last);
  CHECK(segs[1].h.mo == 1482);
  CHECK(segs[1].payload_len() == 566);
  CHECK(segs[1].h.last);
  CHECK(segs[0].h.msn == segs[1].h.msn);
  // Header octets of the first segment: T=0 L=0 DV=1, RV=1 Send, Inv 0, QN 0, MSN 1, MO 0.
  CHECK(hex(slice(segs[0].ulpdu, 0, 18)) == "014300000000000000000000000100000000");
  CHECK(hex(slice(segs[1].ulpdu, 0, 18)) == "4143000000000000000000000001000005ca");
  CHECK(dst.data == src.data);
}

TEST_CASE("DDP-053 DDP-054 an untagged message is delivered at its last segment, after every "
          "earlier message, with its length the last MO plus the last payload",
          "[qp][send]") {
  Dut d;
  Buf one = reg(d.mem, 4096);
  Buf two = reg(d.mem, 4096);
  REQUIRE(d.qp->post_recv(recv_wr(1, {one.all()})) == PostError::None);
  REQUIRE(d.qp->post_recv(recv_wr(2, {two.all()})) == PostError::None);
  // Message 1 in three segments, as MPA over TCP brings them: in order.
  d.feed(ulpdu(untagged(Opcode::Send, 1, 0, false), {}, pattern(500, 1)));
  CHECK_FALSE(d.qp->poll()); // placed, not delivered
  // Message 2 whole meanwhile: complete, but message 1 is not delivered yet.
  d.feed(ulpdu(untagged(Opcode::Send, 2), {}, pattern(7, 4)));
  CHECK_FALSE(d.qp->poll());
  d.feed(ulpdu(untagged(Opcode::Send, 1, 500, false), {}, pattern(500, 2)));
  CHECK_FALSE(d.qp->poll());
  d.feed(ulpdu(untagged(Opcode::Send, 1, 1000, true), {}, pattern(24, 3)));
  const std::optional<Completion> c1 = d.qp->poll();
  REQUIRE(c1);
  CHECK(c1->wr_id == 1);
  CHECK(c1->status == WcStatus::Success);
  CHECK(c1->byte_len == 1024);                       // MO 1000 + 24
  const std::optional<Completion> c2 = d.qp->poll(); // then message 2, in MSN order
  REQUIRE(c2);
  CHECK(c2->wr_id == 2);
  CHECK(c2->byte_len == 7);
  CHECK_FALSE(d.qp->poll());
  CHECK(Bytes(one.data.begin() + 500, one.data.begin() + 1000) == pattern(500, 2));
  CHECK(Bytes(one.data.begin() + 1000, one.data.begin() + 1024) == pattern(24, 3));
}

TEST_CASE("SD-001 Send with a gather list into a scattered receive buffer", "[qp][send]") {
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  Pair p(initiator_cfg(), responder_cfg(), {.io = io});
  Buf s1 = reg(p.ma(), pattern(500, 1), access::kLocalWrite);
  Buf s2 = reg(p.ma(), pattern(4000, 2), access::kLocalWrite, 1, Based::Zero);
  Buf r1 = reg(p.mb(), 1000, access::kLocalWrite);
  Buf r2 = reg(p.mb(), 3000, access::kLocalWrite, 1, Based::Zero);
  REQUIRE(p.b->post_recv(recv_wr(1, {r1.sge(0, 1000), r2.sge(0, 0), r2.sge(100, 2000), r1.sge(0, 0),
                                     r2.sge(2500, 500)})) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(2, {s1.sge(10, 100), s2.sge(0, 0), s2.sge(50, 3000)})) ==
          PostError::None);
  p.pump();
  const Bytes msg = cat(slice(s1.data, 10, 100), slice(s2.data, 50, 3000));
  CHECK(slice(r1.data, 0, 1000) == slice(msg, 0, 1000));
  CHECK(slice(r2.data, 100, 2000) == slice(msg, 1000, 2000));
  CHECK(slice(r2.data, 2500, 100) == slice(msg, 3000, 100));
  CHECK(all_zero(slice(r2.data, 0, 100)));
  CHECK(all_zero(slice(r2.data, 2600, 400)));
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  check_completion(cb[0], 1, WcStatus::Success, WcOpcode::Recv, 3100, true);
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 1);
  check_completion(ca[0], 2, WcStatus::Success, WcOpcode::Send, 3100, false);
  CHECK(p.segs_ab().size() == 3);
}

TEST_CASE("SD-001 inline Send: data copied at post time, limits enforced", "[qp][send]") {
  QpConfig icfg = initiator_cfg();
  icfg.max_inline = 200;
  Pair p(icfg, responder_cfg());
  Buf dst = reg(p.mb(), 256);
  REQUIRE(p.b->post_recv(recv_wr(1, {dst.all()})) == PostError::None);
  Bytes data = pattern(200, 9);
  // inline_data replaces the SGL when non-empty, with or without is_inline.
  const bool flag = GENERATE(false, true);
  Buf decoy = reg(p.ma(), pattern(256, 77));
  SendWr w = send_wr(2, {decoy.all()}); // an SGL that must be ignored
  w.inline_data = data;
  w.is_inline = flag;
  REQUIRE(p.a->post_send(w) == PostError::None);
  w.inline_data.assign(200, std::byte{0xee}); // the WR was copied at post time
  p.pump();
  CHECK(slice(dst.data, 0, 200) == data);
  CHECK(all_zero(slice(dst.data, 200, 56)));
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  CHECK(cb[0].byte_len == 200);
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 1);
  check_completion(ca[0], 2, WcStatus::Success, WcOpcode::Send, 200, false);

  SendWr big = send_wr(3, {});
  big.inline_data = pattern(201);
  big.is_inline = true;
  CHECK(p.a->post_send(big) == PostError::InvalidArgument); // max_inline 200
  // Whatever a QP allows, a work request holds at most kMaxInline octets (posting copies
  // it into a fixed slot).
  CHECK_FALSE(big.inline_data.assign(kMaxInline + 1, std::byte{1}));
  CHECK(big.inline_data.size() == 201);
  SendWr rd = read_wr(4, {}, 1, 0);
  rd.inline_data = pattern(4);
  rd.is_inline = true;
  CHECK(p.a->post_send(rd) == PostError::InvalidArgument);
  CHECK(p.a->sq_outstanding() == 0);
}

TEST_CASE("SD-005 Send with Invalidate: STag invalidated before the completion reports it",
          "[qp][send]") {
  const bool se = GENERATE(false, true);
  Pair p(initiator_cfg(), responder_cfg());
  Buf adv = reg(p.mb(), 64, kAllAccess); // advertised to a, invalidated by a
  Buf rb = reg(p.mb(), 64);
  Buf src = reg(p.ma(), pattern(16, 1));
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  SendWr w = send_wr(2, {src.all()}, WrOpcode::SendInvalidate);
  w.invalidate_stag = adv.stag;
  w.solicited = se;
  REQUIRE(p.a->post_send(w) == PostError::None);
  p.pump();
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].h.opcode ==
        static_cast<std::uint8_t>(se ? Opcode::SendSeInvalidate : Opcode::SendInvalidate));
  CHECK(segs[0].h.inval_stag == adv.stag);
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  check_completion(cb[0], 1, WcStatus::Success, WcOpcode::Recv, 16, true);
  REQUIRE(cb[0].invalidated.has_value());
  CHECK(*cb[0].invalidated == adv.stag);
  CHECK(cb[0].solicited == se);
  REQUIRE(p.mb().lookup(adv.stag).has_value());
  CHECK_FALSE(p.mb().lookup(adv.stag)->valid);

  // SD-006: the invalidated STag can no longer be written remotely.
  REQUIRE(p.a->post_send(write_wr(3, {src.all()}, adv.stag, adv.to(0))) == PostError::None);
  p.pump();
  CHECK(all_zero(adv.data));
  CHECK(p.b->state() == QpState::Error);
  REQUIRE(p.b->error());
  CHECK(p.b->error()->code == term::ddp_tagged_invalid_stag);
  CHECK(p.a->state() == QpState::Error);
  REQUIRE(p.a->error());
  CHECK(p.a->error()->remote);
  CHECK(p.a->error()->code == term::ddp_tagged_invalid_stag);
}

TEST_CASE("SD-004 Send with SE: solicited flag and event, plain Send has neither", "[qp][send]") {
  Pair p(initiator_cfg(), responder_cfg());
  Buf rb = reg(p.mb(), 64);
  Buf rb2 = reg(p.mb(), 64);
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  REQUIRE(p.b->post_recv(recv_wr(2, {rb2.all()})) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(3, {})) == PostError::None);
  p.pump();
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  CHECK_FALSE(cb[0].solicited);
  CHECK_FALSE(p.b->take_solicited());

  SendWr w = send_wr(4, {});
  w.solicited = true;
  REQUIRE(p.a->post_send(w) == PostError::None);
  p.pump();
  cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  CHECK(cb[0].wr_id == 2);
  CHECK(cb[0].solicited);
  CHECK(p.b->take_solicited());
  CHECK_FALSE(p.b->take_solicited());
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].h.opcode == static_cast<std::uint8_t>(Opcode::Send));
  CHECK(segs[1].h.opcode == static_cast<std::uint8_t>(Opcode::SendSe));
  CHECK(segs[1].h.msn == 2);
}

TEST_CASE("DDP-083 shared receive queue: two QPs take buffers in arrival order", "[qp][send]") {
  MemoryTable shared(5);
  SharedRecvQueue srq(8);
  Pair p1(initiator_cfg(), responder_cfg(), {.srq_b = &srq, .mem_b = &shared, .seed = 1});
  QpConfig c2 = responder_cfg();
  c2.qp_id = 3;
  Pair p2(initiator_cfg(), c2, {.srq_b = &srq, .mem_b = &shared, .seed = 2});
  std::vector<Buf> bufs;
  for (int i = 0; i < 4; ++i)
    bufs.push_back(reg(shared, 100));
  for (int i = 0; i < 4; ++i)
    REQUIRE(srq.post(recv_wr(100 + i, {bufs[i].all()})) == PostError::None);
  CHECK(p1.b->post_recv(recv_wr(1, {bufs[0].all()})) == PostError::InvalidArgument);
  Buf m1 = reg(p1.ma(), pattern(50, 1)), m2 = reg(p2.ma(), pattern(60, 2));
  REQUIRE(p1.a->post_send(send_wr(1, {m1.all()})) == PostError::None);
  REQUIRE(p1.a->post_send(send_wr(2, {m1.sge(0, 10)})) == PostError::None);
  p1.pump();
  REQUIRE(p2.a->post_send(send_wr(3, {m2.all()})) == PostError::None);
  p2.pump();
  REQUIRE(p1.a->post_send(send_wr(4, {m1.sge(0, 20)})) == PostError::None);
  p1.pump();
  auto c1 = drain_cq(*p1.b), c2q = drain_cq(*p2.b);
  REQUIRE(c1.size() == 3);
  REQUIRE(c2q.size() == 1);
  check_completion(c1[0], 100, WcStatus::Success, WcOpcode::Recv, 50, true);
  check_completion(c1[1], 101, WcStatus::Success, WcOpcode::Recv, 10, true);
  check_completion(c1[2], 103, WcStatus::Success, WcOpcode::Recv, 20, true);
  check_completion(c2q[0], 102, WcStatus::Success, WcOpcode::Recv, 60, true);
  CHECK(slice(bufs[2].data, 0, 60) == m2.data);
  CHECK(srq.size() == 0);
  // The SRQ empty: the next Send finds no buffer (HX-059).
  REQUIRE(p2.a->post_send(send_wr(5, {})) == PostError::None);
  p2.pump();
  CHECK(p2.b->state() == QpState::Error);
  REQUIRE(p2.b->error());
  CHECK(p2.b->error()->code == term::ddp_untagged_no_buffer);
}

TEST_CASE("SD-001 posting limits: SGE count, queue depths, ORD 0", "[qp][send]") {
  QpConfig c = Dut::dut_cfg();
  c.max_sge = 2;
  c.sq_depth = 2;
  c.rq_depth = 1;
  c.conn.ord = 0;
  Dut d(c);
  Buf b = reg(d.mem, 64);
  CHECK(d.qp->post_send(send_wr(1, {b.sge(0, 1), b.sge(1, 1), b.sge(2, 1)})) ==
        PostError::InvalidArgument);
  CHECK(d.qp->post_recv(recv_wr(2, {b.sge(0, 1), b.sge(1, 1), b.sge(2, 1)})) ==
        PostError::InvalidArgument);
  CHECK(d.qp->post_send(read_wr(3, {b.all()}, 1, 0)) == PostError::InvalidArgument);
  CHECK(d.qp->post_send(send_wr(4, {b.all()})) == PostError::None);
  CHECK(d.qp->post_send(send_wr(5, {b.all()})) == PostError::None);
  CHECK(d.qp->post_send(send_wr(6, {b.all()})) == PostError::QueueFull);
  CHECK(d.qp->post_recv(recv_wr(7, {b.all()})) == PostError::None);
  CHECK(d.qp->post_recv(recv_wr(8, {b.all()})) == PostError::QueueFull);
  CHECK(d.segs(d.drain()).size() == 2);
  auto cq = drain_cq(*d.qp);
  REQUIRE(cq.size() == 2);
  CHECK(cq[0].wr_id == 4);
  CHECK(cq[1].wr_id == 5);
  CHECK(d.qp->post_send(send_wr(6, {b.all()})) == PostError::None); // room again
}

// ---- Send with Invalidate from a hostile peer (RFC 5040 §5.3, §7.2; C-05, C-07) ----------

namespace {
Bytes send_inv(std::uint32_t stag, bool se = false) {
  DdpHeader s = untagged(se ? Opcode::SendSeInvalidate : Opcode::SendInvalidate, 1);
  s.inval_stag = stag;
  return ulpdu(s, {}, pattern(8, 1));
}
} // namespace

TEST_CASE("HX-083 Send with Invalidate naming an invalid STag: L0/E1/0x00, M D, no R",
          "[qp][send][hostile]") {
  Hostile h;
  h.arm();
  const bool se = GENERATE(false, true);
  std::uint32_t stag = 0;
  SECTION("unknown") { stag = 0x00fff000; }
  SECTION("already invalidated") {
    REQUIRE(h.d.mem.invalidate(h.w.stag));
    stag = h.w.stag;
  }
  Bytes u = send_inv(stag, se);
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_invalid_stag); // the Send was not delivered
}

TEST_CASE("HX-084 Send with Invalidate for another PD's STag: L0/E1/0x09, STag stays valid",
          "[qp][send][hostile]") {
  Hostile h;
  h.arm();
  Bytes u = send_inv(h.other.stag);
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_stag_cannot_invalidate);
  CHECK(h.d.mem.lookup(h.other.stag)->valid);
}

TEST_CASE("HX-085 Send with Invalidate for an STag bound to another stream: L0/E1/0x09",
          "[qp][send][hostile]") {
  Hostile h;
  h.arm();
  REQUIRE(h.d.mem.associate(h.w.stag, 4321));
  Bytes u = send_inv(h.w.stag);
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_stag_cannot_invalidate);
  CHECK(h.d.mem.lookup(h.w.stag)->valid);
}

TEST_CASE("SD-005 Send with Invalidate of a PD-wide or own-stream STag invalidates it",
          "[qp][send][hostile]") {
  Hostile h;
  h.arm(true, false);
  const bool bound = GENERATE(false, true);
  if (bound) REQUIRE(h.d.mem.associate(h.w.stag, h.d.cfg.qp_id));
  h.d.feed(send_inv(h.w.stag, true));
  h.expect_accepted();
  auto cq = drain_cq(h.qp());
  REQUIRE(cq.size() == 1);
  check_completion(cq[0], 100, WcStatus::Success, WcOpcode::Recv, 8, true);
  REQUIRE(cq[0].invalidated.has_value());
  CHECK(*cq[0].invalidated == h.w.stag);
  CHECK(cq[0].solicited);
  CHECK_FALSE(h.d.mem.lookup(h.w.stag)->valid);
}
