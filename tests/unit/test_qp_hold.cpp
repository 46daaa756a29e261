// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// HX-059's transparent recovery (QpConfig::hold_for_buffer): a Send that finds no receive
// buffer holds the stream instead of ending the connection, until a buffer is posted or
// the edge gives up (then the no-buffer Terminate of RFC 5041 §7.2 goes out after all).
// iWARP has no RNR; with the stream held, TCP holds the sender back, so programs written
// for InfiniBand's RNR retry (qperf rc_bi_bw) survive a late post.
#include "catch_compat.hpp"
#include "qp_harness.hpp"

using namespace qpt;

namespace {

QpConfig holding_responder() {
  QpConfig c = responder_cfg();
  c.hold_for_buffer = true;
  return c;
}

bool has_terminate(const std::vector<Seg>& segs) {
  for (const Seg& s : segs)
    if (s.h.opcode == static_cast<std::uint8_t>(Opcode::Terminate)) return true;
  return false;
}

} // namespace

TEST_CASE("HX-059 hold: a Send with no buffer waits, and lands once one is posted", "[qp][hold]") {
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  CAPTURE(io_name(io));
  Pair p(initiator_cfg(), holding_responder(), {.io = io});
  Buf src = reg(p.ma(), pattern(5000, 3));
  Buf d1 = reg(p.mb(), 5000);
  Buf d2 = reg(p.mb(), 5000);
  REQUIRE(p.b->post_recv(recv_wr(1, {d1.all()})) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(10, {src.sge(0, 3000)})) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(11, {src.sge(3000, 2000)})) == PostError::None);
  p.pump();
  CHECK(p.b->rx_held());
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  check_completion(cb[0], 1, WcStatus::Success, WcOpcode::Recv, 3000, true);
  CHECK(p.b->state() == QpState::Rts);

  REQUIRE(p.b->post_recv(recv_wr(2, {d2.all()})) == PostError::None);
  CHECK_FALSE(p.b->rx_held());
  p.pump();
  cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  check_completion(cb[0], 2, WcStatus::Success, WcOpcode::Recv, 2000, true);
  CHECK(slice(d1.data, 0, 3000) == slice(src.data, 0, 3000));
  CHECK(slice(d2.data, 0, 2000) == slice(src.data, 3000, 2000));
  CHECK(drain_cq(*p.a).size() == 2);
  CHECK(p.a->state() == QpState::Rts);
  CHECK(p.b->state() == QpState::Rts);
  CHECK_FALSE(has_terminate(p.segs_ba()));
}

TEST_CASE("HX-059 hold: a zero-length Send (C-10) waits for its buffer too", "[qp][hold]") {
  Pair p(initiator_cfg(), holding_responder());
  Buf d = reg(p.mb(), 64);
  REQUIRE(p.a->post_send(send_wr(10, {})) == PostError::None);
  p.pump();
  CHECK(p.b->rx_held());
  CHECK(drain_cq(*p.b).empty());
  REQUIRE(p.b->post_recv(recv_wr(1, {d.all()})) == PostError::None);
  p.pump();
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  check_completion(cb[0], 1, WcStatus::Success, WcOpcode::Recv, 0, true);
}

TEST_CASE("HX-059 hold: what follows the waiting Send waits with it, in order", "[qp][hold]") {
  Pair p(initiator_cfg(), holding_responder());
  Buf src = reg(p.ma(), pattern(4000, 5));
  Buf win = reg(p.mb(), 4000, access::kLocalWrite | access::kRemoteWrite);
  Buf d = reg(p.mb(), 100);
  REQUIRE(p.a->post_send(send_wr(10, {src.sge(0, 100)})) == PostError::None);
  REQUIRE(p.a->post_send(write_wr(11, {src.sge(0, 4000)}, win.stag, win.to(0))) == PostError::None);
  p.pump();
  CHECK(p.b->rx_held());
  CHECK(all_zero(win.data)); // the Write is behind the Send in the stream
  REQUIRE(p.b->post_recv(recv_wr(1, {d.all()})) == PostError::None);
  p.pump();
  CHECK(win.data == src.data);
  CHECK(drain_cq(*p.b).size() == 1);
}

TEST_CASE("HX-059 hold: giving up sends the no-buffer Terminate (L1/E2/0x02)", "[qp][hold]") {
  Pair p(initiator_cfg(), holding_responder());
  Buf src = reg(p.ma(), pattern(100, 1));
  REQUIRE(p.a->post_send(send_wr(10, {src.sge(0, 100)})) == PostError::None);
  p.pump();
  REQUIRE(p.b->rx_held());
  p.b->rx_hold_expired();
  CHECK_FALSE(p.b->rx_held());
  p.pump();
  REQUIRE(p.b->error().has_value());
  CHECK(p.b->error()->code == term::ddp_untagged_no_buffer);
  CHECK_FALSE(p.b->error()->remote);
  REQUIRE(p.a->error().has_value());
  CHECK(p.a->error()->code == term::ddp_untagged_no_buffer);
  CHECK(p.a->error()->remote);
  CHECK(has_terminate(p.segs_ba()));
}

TEST_CASE("HX-059 hold with an SRQ: a post to the SRQ and rx_retry release the Send",
          "[qp][hold]") {
  SharedRecvQueue srq(4);
  Pair p(initiator_cfg(), holding_responder(), {.srq_b = &srq});
  Buf src = reg(p.ma(), pattern(300, 9));
  Buf d = reg(p.mb(), 300);
  REQUIRE(p.a->post_send(send_wr(10, {src.sge(0, 300)})) == PostError::None);
  p.pump();
  REQUIRE(p.b->rx_held());
  p.b->rx_retry(); // still nothing posted: holds on
  CHECK(p.b->rx_held());
  REQUIRE(srq.post(recv_wr(7, {d.all()})) == PostError::None);
  p.b->rx_retry();
  CHECK_FALSE(p.b->rx_held());
  p.pump();
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  check_completion(cb[0], 7, WcStatus::Success, WcOpcode::Recv, 300, true);
  CHECK(d.data == src.data);
}

TEST_CASE("HX-059 without hold (the default): the Terminate at once", "[qp][hold]") {
  Pair p(initiator_cfg(), responder_cfg());
  Buf src = reg(p.ma(), pattern(100, 1));
  REQUIRE(p.a->post_send(send_wr(10, {src.sge(0, 100)})) == PostError::None);
  p.pump();
  CHECK_FALSE(p.b->rx_held());
  REQUIRE(p.b->error().has_value());
  CHECK(p.b->error()->code == term::ddp_untagged_no_buffer);
}
