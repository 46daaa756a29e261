// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// RDMA Write (RFC 5040 §5.1, RFC 5041 §5.2; requirements WR-, DDP-044): tagged
// segmentation at MULPDU, VA-based and zero-based regions, gather lists, zero-length
// Writes. Two Qps talk through the in-memory pipe of qp_harness.hpp.
#include "catch_compat.hpp"
#include "qp_harness.hpp"

using namespace qpt;

TEST_CASE("DDP-044 2048-octet tagged message at TO 16384: TO 16384 len 1486, TO 17870 len 562",
          "[qp][write]") {
  Pair p(initiator_cfg(1500), responder_cfg(1500));
  Buf src = reg(p.ma(), pattern(2048, 6));
  // A region whose first TO is 16384 (an arbitrary iova).
  Bytes mem(4096);
  const std::uint32_t rkey = p.mb().add(1, mem.data(), 16384, mem.size(), kAllAccess);
  REQUIRE(p.a->post_send(write_wr(2, {src.all()}, rkey, 16384)) == PostError::None);
  p.pump();
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].h.tagged);
  CHECK(segs[0].h.stag == rkey);
  CHECK(segs[0].h.to == 16384);
  CHECK(segs[0].payload_len() == 1486);
  CHECK(segs[0].ulpdu.size() == 1500);
  CHECK_FALSE(segs[0].h.last);
  CHECK(segs[1].h.to == 17870);
  CHECK(segs[1].payload_len() == 562);
  CHECK(segs[1].h.last);
  CHECK(std::to_integer<unsigned>(segs[0].ulpdu[0]) == 0x81); // T=1 L=0 DV=1
  CHECK(std::to_integer<unsigned>(segs[1].ulpdu[0]) == 0xc1); // T=1 L=1 DV=1
  CHECK(std::to_integer<unsigned>(segs[1].ulpdu[1]) == 0x40); // RV=1 Write
  CHECK(slice(mem, 0, 2048) == src.data);
  CHECK(all_zero(slice(mem, 2048, 2048)));
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 1);
  check_completion(ca[0], 2, WcStatus::Success, WcOpcode::RdmaWrite, 2048, false);
  CHECK(drain_cq(*p.b).empty()); // WR-004: a Write is placed, never delivered
}

TEST_CASE("WR-001 RDMA Write into VA-based and zero-based regions, gather list, not delivered",
          "[qp][write]") {
  const Based based = GENERATE(Based::Va, Based::Zero);
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  Pair p(initiator_cfg(), responder_cfg(), {.io = io});
  Buf s1 = reg(p.ma(), pattern(3000, 4), access::kLocalWrite, 1, based);
  Buf s2 = reg(p.ma(), pattern(3000, 5), access::kLocalWrite);
  Buf dst = reg(p.mb(), 8192, access::kRemoteWrite, 1, based);
  REQUIRE(p.a->post_send(write_wr(7, {s1.sge(0, 3000), s2.sge(1000, 2000)}, dst.stag,
                                  dst.to(100))) == PostError::None);
  p.pump();
  CHECK(all_zero(slice(dst.data, 0, 100)));
  CHECK(slice(dst.data, 100, 3000) == s1.data);
  CHECK(slice(dst.data, 3100, 2000) == slice(s2.data, 1000, 2000));
  CHECK(all_zero(slice(dst.data, 5100, 8192 - 5100)));
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 1);
  check_completion(ca[0], 7, WcStatus::Success, WcOpcode::RdmaWrite, 5000, false);
  CHECK(drain_cq(*p.b).empty());
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 4); // 1438 octets per tagged segment at MULPDU 1452
  for (std::size_t i = 0; i < segs.size(); ++i) {
    CHECK(segs[i].h.to == dst.to(100 + 1438 * i));
    CHECK(segs[i].h.stag == dst.stag);
  }
}

TEST_CASE("WR-003 zero-length RDMA Write, then a Send signals the earlier Writes", "[qp][write]") {
  Pair p(initiator_cfg(), responder_cfg());
  Buf src = reg(p.ma(), pattern(64, 1));
  Buf dst = reg(p.mb(), 64);
  Buf rb = reg(p.mb(), 16);
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  REQUIRE(p.a->post_send(write_wr(2, {}, dst.stag, dst.to(0))) == PostError::None);
  REQUIRE(p.a->post_send(write_wr(3, {src.all()}, dst.stag, dst.to(0))) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(4, {})) == PostError::None);
  p.pump();
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 3);
  CHECK(segs[0].h.tagged);
  CHECK(segs[0].ulpdu.size() == kTaggedHdrLen);
  CHECK(dst.data == src.data);
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 3);
  check_completion(ca[0], 2, WcStatus::Success, WcOpcode::RdmaWrite, 0, false);
  check_completion(ca[1], 3, WcStatus::Success, WcOpcode::RdmaWrite, 64, false);
  check_completion(ca[2], 4, WcStatus::Success, WcOpcode::Send, 0, false);
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 1);
  check_completion(cb[0], 1, WcStatus::Success, WcOpcode::Recv, 0, true);
}

TEST_CASE("a target has processed all a peer sent once its rx_ended reaches the peer's tx_framed",
          "[qp][write]") {
  // The same-host path copies only then (providers/uiwarp/qp_same_host.cpp): the count must
  // agree at both ends whatever the split, and stop short while an FPDU is partly received.
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  Pair p(initiator_cfg(), responder_cfg(), {.io = io});
  Buf src = reg(p.ma(), pattern(5000, 2));
  Buf dst = reg(p.mb(), 8192, access::kRemoteWrite);
  CHECK(p.a->tx_framed() == 0);
  CHECK(p.b->rx_ended() == 0);
  REQUIRE(p.a->post_send(write_wr(1, {src.all()}, dst.stag, dst.to(0))) == PostError::None);
  p.pump();
  CHECK(p.a->tx_framed() > 5000);
  CHECK(p.b->rx_ended() == p.a->tx_framed());
  // Half an FPDU: not yet.
  REQUIRE(p.a->post_send(write_wr(2, {src.sge(0, 100)}, dst.stag, dst.to(0))) == PostError::None);
  std::vector<ConstBytes> iov;
  p.a->tx_gather(iov);
  REQUIRE(iov.size() >= 1);
  const std::size_t part = std::min<std::size_t>(iov[0].size(), 6);
  REQUIRE(p.b->rx_feed(iov[0].first(part)) == part);
  p.a->tx_advance(part);
  CHECK(p.b->rx_ended() < p.a->tx_framed());
  p.pump();
  CHECK(p.b->rx_ended() == p.a->tx_framed());
}
