// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Closing a QP (RFC 5041 §5.4, RFC 5044 §8): the graceful close that drains the SQ
// (DDP-062), a local flush (DDP-064), and the connection going away under it (HX-038).
#include "catch_compat.hpp"
#include "qp_harness.hpp"

using namespace qpt;

TEST_CASE("DDP-062 graceful close drains the SQ, then wants_disconnect, later WRs flush",
          "[qp][close]") {
  Pair p(initiator_cfg(), responder_cfg());
  Buf src = reg(p.ma(), pattern(3000, 1));
  Buf rsrc = reg(p.mb(), pattern(100, 2), access::kRemoteRead);
  Buf sink = reg(p.ma(), 100);
  std::vector<Buf> rbs;
  for (int i = 0; i < 4; ++i) {
    rbs.push_back(reg(p.mb(), 3000));
    REQUIRE(p.b->post_recv(recv_wr(50 + i, {rbs.back().all()})) == PostError::None);
  }
  for (int i = 0; i < 3; ++i)
    REQUIRE(p.a->post_send(send_wr(i, {src.all()})) == PostError::None);
  REQUIRE(p.a->post_send(read_wr(3, {sink.all()}, rsrc.stag, rsrc.to(0))) == PostError::None);
  p.a->close();
  CHECK(p.a->state() == QpState::Closing);
  CHECK_FALSE(p.a->wants_disconnect());
  // Posted after close(): completes flushed and is never sent.
  REQUIRE(p.a->post_send(send_wr(9, {src.all()})) == PostError::None);
  p.pump_a();
  CHECK(p.a->state() == QpState::Closing); // the Read is not answered yet
  CHECK_FALSE(p.a->wants_disconnect());
  p.pump();
  CHECK(p.a->state() == QpState::Closed);
  CHECK(p.a->wants_disconnect());
  CHECK_FALSE(p.a->error().has_value());
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 5);
  for (int i = 0; i < 3; ++i)
    check_completion(ca[i], i, WcStatus::Success, WcOpcode::Send, 3000, false);
  check_completion(ca[3], 3, WcStatus::Success, WcOpcode::RdmaRead, 100, false);
  check_completion(ca[4], 9, WcStatus::Flushed, WcOpcode::Send, 0, false);
  CHECK(sink.data == rsrc.data);
  CHECK(p.segs_ab().size() == 3 * 3 + 1);
  CHECK(drain_cq(*p.b).size() == 3);
  // The FIN reaches b (a graceful close at an FPDU boundary): its leftovers flush.
  p.b->on_peer_closed(true);
  CHECK(p.b->state() == QpState::Error);
  REQUIRE(p.b->error());
  CHECK(p.b->error()->code == term::mpa_tcp_closed);
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  check_completion(cb[0], 53, WcStatus::Flushed, WcOpcode::Recv, 0, true);
  // b's FIN back: a, already Closed, is not in error.
  p.a->on_peer_closed(true);
  CHECK(p.a->state() == QpState::Closed);
  CHECK_FALSE(p.a->error().has_value());
}

TEST_CASE("DDP-064 flush(): local abort, every WR flushed, no Terminate", "[qp][close]") {
  Hostile h;
  h.arm();
  h.qp().flush();
  CHECK(h.qp().state() == QpState::Error);
  CHECK(h.qp().wants_disconnect());
  CHECK(h.d.drain().empty());
  REQUIRE(h.qp().error().has_value());
  CHECK_FALSE(h.qp().error()->remote);
  h.expect_flushed();
  h.expect_dropped();
}

TEST_CASE("HX-038 peer closed or reset, mid-FPDU or not: outstanding WRs flushed, no Terminate",
          "[qp][close][hostile]") {
  Hostile h;
  h.arm();
  Bytes f = h.d.frame(ulpdu(untagged(Opcode::Send, 1), {}, pattern(40)));
  const bool graceful = GENERATE(false, true);
  const bool mid = GENERATE(false, true);
  if (mid) h.d.feed_raw(slice(f, 0, 30));
  h.qp().on_peer_closed(graceful);
  CHECK(h.qp().state() == QpState::Error);
  CHECK(h.qp().wants_disconnect());
  REQUIRE(h.qp().error().has_value());
  CHECK(h.qp().error()->code == term::mpa_tcp_closed);
  CHECK(h.qp().error()->remote);
  CHECK(h.d.drain().empty());
  h.expect_flushed();
}

TEST_CASE("HX-038 connection lost while our Terminate is queued: it is dropped",
          "[qp][close][hostile]") {
  Hostile h;
  h.arm();
  h.d.feed(ulpdu(tagged(Opcode::RdmaWrite, 0x00fff000, 0), {}, pattern(8)));
  CHECK(h.qp().state() == QpState::Terminate);
  h.qp().on_peer_closed(false);
  CHECK(h.qp().state() == QpState::Error);
  CHECK(h.qp().wants_disconnect());
  CHECK(h.d.drain().empty());
  CHECK(h.qp().error()->code == term::ddp_tagged_invalid_stag);
  h.expect_flushed();
}
