// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What the MPA negotiation hands the data path: the RFC 6581 RTR message and the
// responder's silence until the initiator speaks (RT-01..04, HX-018), markers and CRC in
// each direction (MC-), siw's large-FPDU flag, qp_config_from (IR-01).
#include "catch_compat.hpp"
#include "iwarp/crc32c.hpp"
#include "qp_harness.hpp"

using namespace qpt;

// ---- RFC 6581 RTR and the responder's silence (RFC 5044 §7.1.2 r4) -----------------------

TEST_CASE("RT-01 without P2P the responder sends nothing before the initiator's first FPDU "
          "(HX-018, MPA-063)",
          "[qp][startup]") {
  Pair p(initiator_cfg(), responder_cfg());
  Buf ra = reg(p.ma(), 64);
  Buf rb = reg(p.mb(), 64);
  Buf sb = reg(p.mb(), pattern(10, 1));
  REQUIRE(p.a->post_recv(recv_wr(1, {ra.all()})) == PostError::None);
  REQUIRE(p.b->post_recv(recv_wr(2, {rb.all()})) == PostError::None);
  REQUIRE(p.b->post_send(send_wr(3, {sb.all()})) == PostError::None);
  CHECK_FALSE(p.b->tx_pending());
  CHECK(p.b_to_a() == 0);
  CHECK(p.ba.empty());
  // Half an FPDU from the initiator is not enough (it must be validated).
  REQUIRE(p.a->post_send(send_wr(4, {})) == PostError::None);
  std::vector<ConstBytes> iov;
  p.a->tx_gather(iov);
  Bytes first;
  for (ConstBytes b : iov)
    first.insert(first.end(), b.begin(), b.end());
  REQUIRE(first.size() == 24);
  p.a->tx_advance(first.size());
  p.deliver(*p.b, ConstBytes(first).first(10));
  CHECK(p.b_to_a() == 0);
  p.deliver(*p.b, ConstBytes(first).subspan(10));
  CHECK(p.b_to_a() > 0);
  p.pump();
  CHECK(slice(ra.data, 0, 10) == sb.data);
  CHECK(drain_cq(*p.a).size() == 2);
  CHECK(drain_cq(*p.b).size() == 2);
}

namespace {

void rtr_case(RtrType t) {
  QpConfig ca = initiator_cfg();
  ca.conn.p2p = true;
  ca.conn.rtr = t;
  QpConfig cb = responder_cfg();
  cb.conn.p2p = true;
  Pair p(ca, cb);
  Buf ra = reg(p.ma(), 64);
  Buf rb = reg(p.mb(), 64);
  Buf rb2 = reg(p.mb(), 64);
  Buf sb = reg(p.mb(), pattern(10, 1));
  Buf sa = reg(p.ma(), pattern(20, 2));
  REQUIRE(p.a->post_recv(recv_wr(1, {ra.all()})) == PostError::None);
  REQUIRE(p.b->post_recv(recv_wr(2, {rb.all()})) == PostError::None);
  REQUIRE(p.b->post_recv(recv_wr(5, {rb2.all()})) == PostError::None);
  REQUIRE(p.b->post_send(send_wr(3, {sb.all()})) == PostError::None);
  // The first real message is a zero-length Send: whatever the RTR type, it is data.
  REQUIRE(p.a->post_send(send_wr(4, {})) == PostError::None);
  // HX-018: the responder is silent until the RTR arrived.
  CHECK(p.b_to_a() == 0);
  // EMPA-012: the RTR is the initiator's first FPDU, before the Send posted earlier.
  p.pump_a();
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 2);
  const Seg& rtr = segs[0];
  CHECK(rtr.h.last);
  switch (t) {
  case RtrType::Send:
    CHECK_FALSE(rtr.h.tagged);
    CHECK(rtr.h.opcode == static_cast<std::uint8_t>(Opcode::Send));
    CHECK(rtr.h.qn == kQnSend);
    CHECK(rtr.h.msn == 1);
    CHECK(rtr.ulpdu.size() == kUntaggedHdrLen);
    break;
  case RtrType::Write:
    CHECK(rtr.h.tagged);
    CHECK(rtr.h.opcode == static_cast<std::uint8_t>(Opcode::RdmaWrite));
    CHECK(rtr.ulpdu.size() == kTaggedHdrLen);
    break;
  case RtrType::Read: {
    CHECK(rtr.h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadRequest));
    CHECK(rtr.h.qn == kQnReadRequest);
    CHECK(rtr.h.msn == 1);
    REQUIRE(rtr.ulpdu.size() == kUntaggedHdrLen + kReadRequestHdrLen);
    CHECK(ReadRequestHeader::decode(rtr.ulpdu.data() + kUntaggedHdrLen).size == 0);
    break;
  }
  }
  CHECK(segs[1].h.opcode == static_cast<std::uint8_t>(Opcode::Send));
  CHECK(segs[1].h.msn == (t == RtrType::Send ? 2u : 1u));
  // RT-02: the RTR is invisible to the responder's ULP and consumes no buffer.
  auto cb_ = drain_cq(*p.b);
  REQUIRE(cb_.size() == 1);
  check_completion(cb_[0], 2, WcStatus::Success, WcOpcode::Recv, 0, true);
  p.pump();
  auto ca_ = drain_cq(*p.a); // the RTR itself completes nothing
  REQUIRE(ca_.size() == 2);
  check_completion(ca_[0], 4, WcStatus::Success, WcOpcode::Send, 0, false);
  check_completion(ca_[1], 1, WcStatus::Success, WcOpcode::Recv, 10, true);
  CHECK(p.a->reads_outstanding() == 0);
  auto back = p.segs_ba();
  if (t == RtrType::Read) {
    // RT-04: a zero-length Read Response (it may follow the Send posted earlier, ORD-09).
    REQUIRE(back.size() == 2);
    const Seg& rs = back[0].h.tagged ? back[0] : back[1];
    CHECK(rs.h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadResponse));
    CHECK(rs.ulpdu.size() == kTaggedHdrLen);
    CHECK(rs.h.last);
  } else {
    REQUIRE(back.size() == 1);
  }
  REQUIRE(p.a->post_send(send_wr(6, {sa.all()})) == PostError::None);
  p.pump();
  cb_ = drain_cq(*p.b);
  REQUIRE(cb_.size() == 2);
  check_completion(cb_[0], 3, WcStatus::Success, WcOpcode::Send, 10, false);
  check_completion(cb_[1], 5, WcStatus::Success, WcOpcode::Recv, 20, true);
  CHECK(slice(rb2.data, 0, 20) == sa.data);
  CHECK(p.a->state() == QpState::Rts);
  CHECK(p.b->state() == QpState::Rts);
}

} // namespace

TEST_CASE("RT-02 EMPA-041 P2P Send RTR: zero-length Send QN0 MSN1, hidden, no buffer used",
          "[qp][startup]") {
  rtr_case(RtrType::Send);
}

TEST_CASE("RT-03 EMPA-041 P2P Write RTR: zero-length RDMA Write, not validated, hidden",
          "[qp][startup]") {
  rtr_case(RtrType::Write);
}

TEST_CASE(
    "RT-04 EMPA-041 P2P Read RTR: zero-length Read Request answered by a zero-length Response",
    "[qp][startup]") {
  rtr_case(RtrType::Read);
}

TEST_CASE("HX-018 a responder that has not heard from the initiator sends no Terminate",
          "[qp][startup][hostile]") {
  QpConfig c = responder_cfg();
  SECTION("local failure before any FPDU arrived") {
    Hostile h(c);
    h.arm(true, false);
    h.qp().fail(term::rdmap_local_catastrophic, "local trouble");
    CHECK(h.qp().state() == QpState::Error);
    CHECK(h.d.drain().empty());
    CHECK(h.qp().wants_disconnect());
    h.expect_flushed();
  }
  SECTION("a bad first FPDU is answered (the initiator is in Full Operation)") {
    Hostile h(c);
    h.arm(true, false);
    Bytes u = ulpdu(tagged(Opcode::RdmaWrite, 0x00fff000, 0), {}, pattern(8));
    h.d.feed(u);
    h.expect_ddp_term(u, term::ddp_tagged_invalid_stag);
  }
}

// ---- markers and CRC ---------------------------------------------------------------------

TEST_CASE("MC-04 markers and CRC on or off in each direction (MC-01..MC-04)", "[qp][startup]") {
  const bool crc = GENERATE(false, true);
  const bool m_ab = GENERATE(false, true);
  const bool m_ba = GENERATE(false, true);
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  INFO("crc " << crc << " markers a->b " << m_ab << " b->a " << m_ba << " io " << io_name(io));
  QpConfig ca = initiator_cfg(), cb = responder_cfg();
  ca.conn.crc = cb.conn.crc = crc;
  ca.conn.markers_tx = cb.conn.markers_rx = m_ab;
  cb.conn.markers_tx = ca.conn.markers_rx = m_ba;
  Pair p(ca, cb, {.io = io});
  Buf sa = reg(p.ma(), pattern(3000, 1));
  Buf rb = reg(p.mb(), 3000);
  Buf wa = reg(p.ma(), 2000); // b writes here
  Buf sb = reg(p.mb(), pattern(2000, 2));
  Buf src = reg(p.mb(), pattern(1500, 3)); // a reads this
  Buf sink = reg(p.ma(), 1500);
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(2, {sa.all()})) == PostError::None);
  REQUIRE(p.a->post_send(read_wr(3, {sink.all()}, src.stag, src.to(0))) == PostError::None);
  p.pump();
  REQUIRE(p.b->post_send(write_wr(4, {sb.all()}, wa.stag, wa.to(0))) == PostError::None);
  p.pump();
  CHECK(rb.data == sa.data);
  CHECK(sink.data == src.data);
  CHECK(wa.data == sb.data);
  CHECK(drain_cq(*p.a).size() == 2);
  CHECK(drain_cq(*p.b).size() == 2);
  // The streams decode with exactly the negotiated options (CRC and markers verified).
  CHECK(p.segs_ab().size() == 4);
  CHECK(p.segs_ba().size() >= 3);
  // A marker opens the stream when markers are on (FPDUPTR 0), else the ULPDU_Length.
  REQUIRE(p.ab.size() > 1024);
  CHECK(all_zero(slice(p.ab, 0, 4)) == m_ab);
  CHECK(all_zero(slice(p.ba, 0, 4)) == m_ba);
  if (m_ab) CHECK(all_zero(slice(p.ab, 512, 2))); // RESERVED half of the next marker
  if (!crc && !m_ab) {
    // MPA-013: the CRC field is present and zero. First FPDU: 2 + 1452 + 2 pad + CRC.
    CHECK(all_zero(slice(p.ab, 2 + 1452 + 2, 4)));
  }
}

// ---- negotiated options ------------------------------------------------------------------

// Found against siw (tests/interop/siw, large-fpdu-on): with its private large-FPDU flag
// negotiated, siw sizes FPDUs to its TCP GSO segment (mss * gso_segs, siw_qp_tx.c), so a
// 64 KiB RDMA Write arrives as one FPDU of about 65 KB, above RFC 5044's 64768.
TEST_CASE("siw's large-FPDU flag negotiated: ULPDU_Length up to 65535 is placed (HX-036 "
          "without it)",
          "[qp][startup][hostile]") {
  const bool large = GENERATE(false, true);
  QpConfig c = Dut::dut_cfg();
  c.conn.large_fpdu = large;
  Hostile h(c);
  Buf big = reg(h.d.mem, 65535);
  // The largest FPDU the 16-bit field allows: a tagged RDMA Write of 65535 - 14 octets.
  Bytes payload = pattern(kMaxUlpduLargeFpdu - kTaggedHdrLen, 3);
  Bytes u = ulpdu(tagged(Opcode::RdmaWrite, big.stag, big.to(0)), {}, payload);
  REQUIRE(u.size() == 65535);
  Bytes f(2);
  store_be16(f.data(), 65535);
  f = cat(f, u);
  f.resize(f.size() + fpdu_pad(u.size()) + kCrcLen);
  store_crc_le(f.data() + f.size() - kCrcLen, crc32c(ConstBytes(f).first(f.size() - kCrcLen)));
  h.d.feed_raw(f);
  if (large) {
    CHECK_FALSE(h.qp().error());
    CHECK(hex(slice(big.data, 0, payload.size())) == hex(payload));
    CHECK(h.d.drain().empty());
  } else {
    auto segs = h.d.segs(h.d.drain());
    REQUIRE(segs.size() == 1);
    CHECK(hex(segs[0].ulpdu) == hex(terminate_ulpdu(term::mpa_local_catastrophic, 0, 0, 0, {})));
  }
}

TEST_CASE("siw's large-FPDU flag: qp_config_from carries it", "[qp][startup][hostile]") {
  ConnParams p;
  p.large_fpdu = true;
  CHECK(qp_config_from(p, 1448).conn.large_fpdu);
  CHECK(qp_config_from(p, 1448).mulpdu == kMaxUlpdu);
  p.large_fpdu = false;
  CHECK_FALSE(qp_config_from(p, 1448).conn.large_fpdu);
}

TEST_CASE("IR-01 qp_config_from carries the negotiated options into the QP", "[qp][startup]") {
  ConnParams p;
  p.version = kVersionIetf;
  p.crc = false;
  p.markers_tx = true;
  p.markers_rx = false;
  p.ird = 5;
  p.ord = 6;
  p.p2p = true;
  p.rtr = RtrType::Write;
  p.initiator = true;
  QpConfig ci = qp_config_from(p, 50);
  CHECK(ci.conn.initiator);
  CHECK(ci.mulpdu == kMinMulpdu);
  CHECK_FALSE(ci.conn.crc);
  CHECK(ci.conn.markers_tx);
  CHECK_FALSE(ci.conn.markers_rx);
  CHECK(ci.conn.ird == 5);
  CHECK(ci.conn.ord == 6);
  CHECK(ci.conn.p2p);
  CHECK(ci.conn.rtr == RtrType::Write);
  p.initiator = false;
  QpConfig cr = qp_config_from(p, 100000);
  CHECK_FALSE(cr.conn.initiator);
  CHECK(cr.mulpdu == kMaxUlpdu);
  CHECK(qp_config_from(p, 1452).mulpdu == 1452);
}
