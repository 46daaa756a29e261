// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Ordering and completion (RFC 5040 §5.5; requirements ORD-, RDMAP-032): unsignalled
// work requests, SQ completions in posting order, ORD and IRD limits, the fence.
#include "catch_compat.hpp"
#include "qp_harness.hpp"

using namespace qpt;

TEST_CASE("ORD-12 unsignalled WRs complete silently unless they fail", "[qp][order]") {
  Pair p(initiator_cfg(), responder_cfg());
  Buf src = reg(p.ma(), pattern(100, 1));
  Buf dst = reg(p.mb(), 100);
  Buf rb = reg(p.mb(), 200);
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  REQUIRE(p.b->post_recv(recv_wr(2, {rb.all()})) == PostError::None);
  SendWr s1 = send_wr(10, {src.all()});
  s1.signaled = false;
  SendWr w1 = write_wr(11, {src.all()}, dst.stag, dst.to(0));
  w1.signaled = false;
  REQUIRE(p.a->post_send(s1) == PostError::None);
  REQUIRE(p.a->post_send(w1) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(12, {src.all()})) == PostError::None);
  p.pump();
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 1);
  check_completion(ca[0], 12, WcStatus::Success, WcOpcode::Send, 100, false);
  CHECK(p.a->sq_outstanding() == 0);
  CHECK(dst.data == src.data);
  CHECK(drain_cq(*p.b).size() == 2);

  // An unsignalled WR that fails still completes (in error).
  Buf sk = reg(p.ma(), 100);
  SendWr rd = read_wr(13, {sk.all()}, 0x1234, 0);
  rd.signaled = false;
  REQUIRE(p.a->post_send(rd) == PostError::None);
  p.pump_a();
  p.a->flush();
  ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 1);
  check_completion(ca[0], 13, WcStatus::Flushed, WcOpcode::RdmaRead, 100, false);
}

TEST_CASE("ORD-12 SQ completions in posting order: a Send done before an earlier Read waits",
          "[qp][order]") {
  Pair p(initiator_cfg(), responder_cfg());
  Buf src = reg(p.mb(), pattern(5000, 2), access::kRemoteRead);
  Buf sink = reg(p.ma(), 5000);
  Buf msg = reg(p.ma(), pattern(10, 3));
  Buf rb = reg(p.mb(), 10);
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  REQUIRE(p.a->post_send(read_wr(20, {sink.all()}, src.stag, src.to(0))) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(21, {msg.all()})) == PostError::None);
  p.pump_a();
  // The Send is fully written (done) but the Read before it is not: nothing completes.
  CHECK(p.a->completions_ready() == 0);
  CHECK(p.a->sq_outstanding() == 2);
  CHECK(p.a->reads_outstanding() == 1);
  p.pump();
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 2);
  check_completion(ca[0], 20, WcStatus::Success, WcOpcode::RdmaRead, 5000, false);
  check_completion(ca[1], 21, WcStatus::Success, WcOpcode::Send, 10, false);
  CHECK(sink.data == src.data);
}

TEST_CASE("RDMAP-032 ORD: Reads beyond the outbound limit wait, later WRs keep their order",
          "[qp][order]") {
  QpConfig ca = initiator_cfg();
  ca.conn.ord = 2;
  QpConfig cb = responder_cfg();
  cb.conn.ird = 2;
  Pair p(ca, cb);
  Buf src = reg(p.mb(), pattern(3000, 2), access::kRemoteRead);
  std::vector<Buf> sinks;
  for (int i = 0; i < 3; ++i)
    sinks.push_back(reg(p.ma(), 1000));
  Buf rb = reg(p.mb(), 10);
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  for (int i = 0; i < 3; ++i)
    REQUIRE(p.a->post_send(read_wr(i, {sinks[i].all()}, src.stag, src.to(i * 1000))) ==
            PostError::None);
  REQUIRE(p.a->post_send(send_wr(3, {})) == PostError::None);
  p.pump_a();
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 2); // the third Read and the Send wait for a Response
  CHECK(segs[0].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadRequest));
  CHECK(segs[1].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadRequest));
  CHECK(p.a->reads_outstanding() == 2);
  p.pump();
  segs = p.segs_ab();
  REQUIRE(segs.size() == 4);
  CHECK(segs[2].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadRequest));
  CHECK(segs[2].h.msn == 3);
  CHECK(segs[3].h.opcode == static_cast<std::uint8_t>(Opcode::Send));
  auto cq = drain_cq(*p.a);
  REQUIRE(cq.size() == 4);
  for (int i = 0; i < 3; ++i) {
    check_completion(cq[i], i, WcStatus::Success, WcOpcode::RdmaRead, 1000, false);
    CHECK(sinks[i].data == slice(src.data, i * 1000, 1000));
  }
  check_completion(cq[3], 3, WcStatus::Success, WcOpcode::Send, 0, false);
  CHECK(p.b->state() == QpState::Rts); // never more than IRD=2 at the responder
}

TEST_CASE("ORD-09 fence: a fenced Send waits for earlier Reads, an unfenced one does not",
          "[qp][order]") {
  const bool fence = GENERATE(false, true);
  Pair p(initiator_cfg(), responder_cfg());
  Buf src = reg(p.mb(), pattern(100, 2), access::kRemoteRead);
  Buf sink = reg(p.ma(), 100);
  Buf rb = reg(p.mb(), 10);
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  REQUIRE(p.a->post_send(read_wr(1, {sink.all()}, src.stag, src.to(0))) == PostError::None);
  SendWr s = send_wr(2, {});
  s.fence = fence;
  REQUIRE(p.a->post_send(s) == PostError::None);
  p.pump_a();
  CHECK(p.segs_ab().size() == (fence ? 1u : 2u));
  p.pump();
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 2);
  CHECK(segs[1].h.opcode == static_cast<std::uint8_t>(Opcode::Send));
  CHECK(drain_cq(*p.a).size() == 2);
  CHECK(drain_cq(*p.b).size() == 1);
}

TEST_CASE("RDMAP-032 IRD: a peer within IRD gets every Read answered", "[qp][order]") {
  QpConfig ca = initiator_cfg();
  ca.conn.ord = 3;
  QpConfig cb = responder_cfg();
  cb.conn.ird = 3;
  const Io io = GENERATE(Io::Feed, Io::Partial);
  Pair p(ca, cb, {.io = io});
  Buf src = reg(p.mb(), pattern(40000, 2), access::kRemoteRead);
  std::vector<Buf> sinks;
  for (int i = 0; i < 8; ++i)
    sinks.push_back(reg(p.ma(), 5000));
  for (int i = 0; i < 8; ++i)
    REQUIRE(p.a->post_send(read_wr(i, {sinks[i].all()}, src.stag, src.to(i * 5000))) ==
            PostError::None);
  p.pump();
  auto cq = drain_cq(*p.a);
  REQUIRE(cq.size() == 8);
  for (int i = 0; i < 8; ++i) {
    CHECK(cq[i].status == WcStatus::Success);
    CHECK(sinks[i].data == slice(src.data, i * 5000, 5000));
  }
  CHECK(p.b->state() == QpState::Rts);
}
