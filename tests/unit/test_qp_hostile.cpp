// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Hostile input to the DDP and RDMAP headers (requirements §7.3 and §7.4: HX-037 ..
// HX-073, RC-20, DDP-081): one Qp (the Hostile fixture of qp_harness.hpp) is fed hand-made
// FPDUs, and the Terminate it answers with is compared octet for octet (RFC 5040 §4.8,
// Fig. 10), then every outstanding WR must be flushed and every later segment dropped.
#include "catch_compat.hpp"
#include "qp_harness.hpp"

using namespace qpt;

TEST_CASE("HX-037 ULPDU shorter than a DDP header: L1/E0/0x00 without headers", "[qp][hostile]") {
  Hostile h;
  h.arm();
  Bytes full = ulpdu(untagged(Opcode::Send, 1));
  Bytes u;
  SECTION("zero-length ULPDU") {}
  SECTION("10 octets, T=1") { u = slice(ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, 0)), 0, 10); }
  SECTION("13 octets, T=1") { u = slice(ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, 0)), 0, 13); }
  SECTION("16 octets, T=0") { u = slice(full, 0, 16); }
  SECTION("17 octets, T=0") { u = slice(full, 0, 17); }
  h.d.feed(u);
  h.expect_bare_term(u, term::ddp_local_catastrophic);
}

TEST_CASE("HX-037 ULPDU shorter than the RDMAP header its opcode needs: L0/E2/0xFF",
          "[qp][hostile]") {
  Hostile h(cfg7306());
  h.arm();
  Bytes u;
  SECTION("Read Request with 20 of 28 header octets") {
    u = slice(ulpdu(untagged(Opcode::RdmaReadRequest, 1), rr_bytes({1, 2, 3, 4, 5})), 0, 38);
  }
  SECTION("Atomic Request with 40 of 52 header octets") {
    u = slice(ulpdu(untagged(Opcode::AtomicRequest, 1), atomic_bytes({})), 0, 58);
  }
  SECTION("Atomic Response with 6 of 12 header octets") {
    u = cat(ulpdu(untagged(Opcode::AtomicResponse, 1)), Bytes(6));
  }
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_op_unspecified);
}

TEST_CASE("HX-050 DDP version other than the negotiated one: L1/E1/0x04 or L1/E2/0x06",
          "[qp][hostile]") {
  Hostile h;
  h.arm();
  const std::uint8_t dv = GENERATE(0, 2, 3);
  SECTION("tagged") {
    DdpHeader t = tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(0));
    t.ddp_version = dv;
    Bytes u = ulpdu(t, {}, pattern(16));
    h.d.feed(u);
    CHECK(all_zero(h.w.data));
    h.expect_ddp_term(u, term::ddp_tagged_invalid_version);
  }
  SECTION("untagged, in the middle of the stream") {
    h.d.feed(ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(0)), {}, pattern(4)));
    h.expect_accepted();
    DdpHeader s = untagged(Opcode::Send, 1);
    s.ddp_version = dv;
    Bytes u = ulpdu(s, {}, pattern(16));
    h.d.feed(u);
    CHECK(all_zero(h.rbuf.data));
    h.expect_ddp_term(u, term::ddp_untagged_invalid_version);
  }
}

TEST_CASE("RC-20 version mismatch after negotiation: DV/RV 0 on a V=1 stream and vice versa",
          "[qp][hostile]") {
  SECTION("V=1 stream, peer sends DV=0 RV=0") {
    Hostile h;
    h.arm();
    DdpHeader s = untagged(Opcode::Send, 1);
    s.ddp_version = s.rdmap_version = kVersionRdmac;
    Bytes u = ulpdu(s, {}, pattern(8));
    h.d.feed(u);
    h.expect_ddp_term(u, term::ddp_untagged_invalid_version);
  }
  SECTION("V=0 (RDMAC) stream, peer sends DV=1 RV=1; the Terminate itself says V=0") {
    QpConfig c = Dut::dut_cfg();
    c.conn.version = kVersionRdmac;
    Hostile h(c);
    h.arm();
    Bytes u = ulpdu(untagged(Opcode::Send, 1), {}, pattern(8));
    h.d.feed(u);
    Bytes t = terminate_ulpdu(term::ddp_untagged_invalid_version, 1, 1, 0, u, kVersionRdmac);
    CHECK(hex(slice(t, 0, 2)) == "4007");
    h.expect_ddp_term(u, term::ddp_untagged_invalid_version);
  }
  SECTION("V=0 pair works end to end") {
    QpConfig ca = initiator_cfg(), cb = responder_cfg();
    ca.conn.version = cb.conn.version = kVersionRdmac;
    Pair p(ca, cb);
    Buf src = reg(p.ma(), pattern(10, 1));
    Buf rb = reg(p.mb(), 10);
    REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
    REQUIRE(p.a->post_send(send_wr(2, {src.all()})) == PostError::None);
    p.pump();
    CHECK(rb.data == src.data);
    CHECK(hex(slice(p.segs_ab()[0].ulpdu, 0, 2)) == "4003");
  }
}

TEST_CASE("HX-051 DDP Rsvd bits and HX-073 RDMAP Rsv bits / stray Invalidate STag ignored",
          "[qp][hostile]") {
  Hostile h;
  h.arm(true, false);
  Bytes wr = ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(8)), {}, pattern(16, 2));
  wr[0] |= std::byte{0x3c};
  h.d.feed(wr);
  CHECK(slice(h.w.data, 8, 16) == pattern(16, 2));
  DdpHeader s = untagged(Opcode::Send, 1);
  s.inval_stag = 0x12345678;
  Bytes sd = ulpdu(s, {}, pattern(5, 3));
  sd[0] |= std::byte{0x3c};
  sd[1] |= std::byte{0x30};
  h.d.feed(sd);
  h.expect_accepted();
  auto cq = drain_cq(h.qp());
  REQUIRE(cq.size() == 1);
  check_completion(cq[0], 100, WcStatus::Success, WcOpcode::Recv, 5, true);
  CHECK_FALSE(cq[0].invalidated.has_value());
  CHECK(slice(h.rbuf.data, 0, 5) == pattern(5, 3));
  CHECK(h.d.drain().empty());
}

TEST_CASE("HX-052 Write to an unknown, invalidated or deregistered STag: L1/E1/0x00",
          "[qp][hostile]") {
  Hostile h;
  h.arm();
  std::uint32_t stag = 0;
  SECTION("wrong key") { stag = h.w.stag ^ 0x5a; }
  SECTION("unknown index") { stag = 0x00fff000; }
  SECTION("STag 0") { stag = 0; }
  SECTION("invalidated") {
    REQUIRE(h.d.mem.invalidate(h.w.stag));
    stag = h.w.stag;
  }
  SECTION("deregistered") {
    REQUIRE(h.d.mem.remove(h.w.stag));
    stag = h.w.stag;
  }
  Bytes u = ulpdu(tagged(Opcode::RdmaWrite, stag, h.w.to(0)), {}, pattern(16));
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  h.expect_ddp_term(u, term::ddp_tagged_invalid_stag);
}

TEST_CASE("HX-053 Write to an STag of another PD or bound to another stream: L1/E1/0x02",
          "[qp][hostile]") {
  Hostile h;
  h.arm();
  Bytes u;
  SECTION("another PD") {
    u = ulpdu(tagged(Opcode::RdmaWrite, h.other.stag, h.other.to(0)), {}, pattern(16));
    h.d.feed(u);
    CHECK(all_zero(h.other.data));
  }
  SECTION("bound to another QP") {
    REQUIRE(h.d.mem.associate(h.w.stag, 99));
    u = ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(0)), {}, pattern(16));
    h.d.feed(u);
    CHECK(all_zero(h.w.data));
  }
  h.expect_ddp_term(u, term::ddp_tagged_stag_not_assoc);
}

TEST_CASE("DDP-081 an STag bound to this stream is usable", "[qp][hostile]") {
  Hostile h;
  REQUIRE(h.d.mem.associate(h.w.stag, h.d.cfg.qp_id));
  h.d.feed(ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(0)), {}, pattern(16, 4)));
  h.expect_accepted();
  CHECK(slice(h.w.data, 0, 16) == pattern(16, 4));
}

TEST_CASE("HX-054 Write outside the registered range: L1/E1/0x01, nothing placed",
          "[qp][hostile]") {
  Hostile h;
  h.arm();
  std::uint64_t to = 0;
  std::size_t len = 8;
  SECTION("TO one below the base") { to = h.w.base - 1; }
  SECTION("last octet one past the end") { to = h.w.to(249); }
  SECTION("TO at the end") {
    to = h.w.to(256);
    len = 1;
  }
  SECTION("far beyond") { to = h.w.to(1u << 20); }
  Bytes u = ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, to), {}, pattern(len));
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  h.expect_ddp_term(u, term::ddp_tagged_base_bounds);
}

TEST_CASE("HX-054 Write exactly filling the end of the range is accepted", "[qp][hostile]") {
  Hostile h;
  h.d.feed(ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(248)), {}, pattern(8, 5)));
  h.expect_accepted();
  CHECK(slice(h.w.data, 248, 8) == pattern(8, 5));
}

TEST_CASE("HX-055 Write whose TO + length wraps 2^64: L1/E1/0x03", "[qp][hostile]") {
  Hostile h;
  h.arm();
  Bytes u = ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, 0xfffffffffffffff8ull), {}, pattern(16));
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  h.expect_ddp_term(u, term::ddp_tagged_to_wrap);
}

TEST_CASE("HX-056 Write into an STag without remote write: L0/E1/0x02 (C-09)", "[qp][hostile]") {
  Hostile h;
  h.arm();
  Bytes u = ulpdu(tagged(Opcode::RdmaWrite, h.ro.stag, h.ro.to(0)), {}, pattern(16));
  h.d.feed(u);
  CHECK(all_zero(h.ro.data));
  h.expect_ddp_term(u, term::rdmap_access_rights);
}

TEST_CASE("HX-057 zero-length tagged segment: garbage STag/TO not checked", "[qp][hostile]") {
  Hostile h;
  h.arm(true, false);
  h.d.feed(ulpdu(tagged(Opcode::RdmaWrite, 0xdeadbeef, 0xffffffffffffffffull)));
  h.d.feed(ulpdu(tagged(Opcode::RdmaWrite, h.other.stag, 0)));
  h.expect_accepted();
  CHECK(h.d.drain().empty());
  h.d.feed(ulpdu(untagged(Opcode::Send, 1), {}, pattern(8, 1)));
  auto cq = drain_cq(h.qp());
  REQUIRE(cq.size() == 1);
  check_completion(cq[0], 100, WcStatus::Success, WcOpcode::Recv, 8, true);
}

TEST_CASE("HX-058 untagged QN not used by RDMAP: L1/E2/0x01", "[qp][hostile]") {
  const bool ext = GENERATE(false, true);
  Hostile h(ext ? cfg7306() : Dut::dut_cfg());
  h.arm();
  const std::uint32_t qn = GENERATE(3u, 4u, 9u, 0xffffffffu);
  if (ext && qn == kQnAtomicResponse) return; // a valid queue with RFC 7306
  DdpHeader s = untagged(Opcode::Send, 1);
  s.qn = qn;
  Bytes u = ulpdu(s, {}, pattern(8));
  h.d.feed(u);
  CHECK(all_zero(h.rbuf.data));
  h.expect_ddp_term(u, term::ddp_untagged_invalid_qn);
}

TEST_CASE("HX-059 Send with no receive buffer posted (zero-length too, C-10): L1/E2/0x02",
          "[qp][hostile]") {
  Hostile h;
  h.arm(false, true);
  const std::size_t n = GENERATE(0, 8);
  Bytes u = ulpdu(untagged(Opcode::Send, 1), {}, pattern(n));
  h.d.feed(u);
  h.expect_ddp_term(u, term::ddp_untagged_no_buffer);
}

TEST_CASE("HX-059 with an SRQ: a far-future MSN does not drain it (HX-060/HX-104)",
          "[qp][hostile]") {
  SharedRecvQueue srq(8);
  Hostile h(Dut::dut_cfg(), &srq);
  Buf b = reg(h.d.mem, 64);
  for (int i = 0; i < 5; ++i)
    REQUIRE(srq.post(recv_wr(i, {b.all()})) == PostError::None);
  h.arm(false, true);
  Bytes u = ulpdu(untagged(Opcode::Send, 3), {}, pattern(8));
  h.d.feed(u);
  CHECK(srq.size() == 5);
  h.expect_ddp_term(u, term::ddp_untagged_msn_range);
  CHECK(srq.size() == 5);
}

TEST_CASE("HX-060 MSN outside the posted range (old, skipped, far future): L1/E2/0x03",
          "[qp][hostile]") {
  Hostile h;
  h.arm();
  const std::uint32_t msn = GENERATE(0u, 3u, 0x80000001u, 0xffffffffu);
  Bytes u = ulpdu(untagged(Opcode::Send, msn), {}, pattern(8));
  h.d.feed(u);
  CHECK(all_zero(h.rbuf.data));
  h.expect_ddp_term(u, term::ddp_untagged_msn_range);
}

TEST_CASE("HX-060 Read Request with an MSN out of order: L1/E2/0x03", "[qp][hostile]") {
  Hostile h;
  h.arm();
  Bytes u = ulpdu(untagged(Opcode::RdmaReadRequest, 2), rr_bytes({1, 0, 8, h.w.stag, h.w.to(0)}));
  h.d.feed(u);
  h.expect_ddp_term(u, term::ddp_untagged_msn_range);
}

TEST_CASE("HX-061 MO beyond the receive buffer: L1/E2/0x04", "[qp][hostile]") {
  Hostile h;
  h.arm();
  Bytes u = ulpdu(untagged(Opcode::Send, 1, 300), {}, pattern(8));
  h.d.feed(u);
  CHECK(all_zero(h.rbuf.data));
  h.expect_ddp_term(u, term::ddp_untagged_invalid_mo);
}

TEST_CASE("HX-062 Send larger than the receive buffer: L1/E2/0x05, nothing placed",
          "[qp][hostile]") {
  Hostile h;
  h.arm();
  Bytes u;
  SECTION("257 octets into 256") { u = ulpdu(untagged(Opcode::Send, 1), {}, pattern(257)); }
  SECTION("MO 250 + 8 octets") { u = ulpdu(untagged(Opcode::Send, 1, 250), {}, pattern(8)); }
  h.d.feed(u);
  CHECK(all_zero(h.rbuf.data));
  h.expect_ddp_term(u, term::ddp_untagged_too_long);
}

TEST_CASE("HX-063 a duplicated segment is placed again but the message delivered once",
          "[qp][hostile]") {
  Hostile h;
  h.arm(true, false);
  Bytes first = ulpdu(untagged(Opcode::Send, 1, 0, false), {}, pattern(10, 1));
  h.d.feed(first);
  h.d.feed(first);
  h.d.feed(ulpdu(untagged(Opcode::Send, 1, 10, true), {}, slice(pattern(15, 1), 10, 5)));
  h.expect_accepted();
  auto cq = drain_cq(h.qp());
  REQUIRE(cq.size() == 1);
  check_completion(cq[0], 100, WcStatus::Success, WcOpcode::Recv, 15, true);
  CHECK(slice(h.rbuf.data, 0, 15) == pattern(15, 1));
  CHECK(h.qp().rq_outstanding() == 0);
}

TEST_CASE("HX-063 (R) a last segment that does not carry the highest MO: L1/E2/0x04",
          "[qp][hostile]") {
  Hostile h;
  h.arm(true, false);
  // A segment at MO 8, then L=1 at MO 0: the message would end at 8 with 16 octets placed.
  h.d.feed(ulpdu(untagged(Opcode::Send, 1, 8, false), {}, pattern(8, 2)));
  Bytes last = ulpdu(untagged(Opcode::Send, 1, 0, true), {}, pattern(8, 3));
  h.d.feed(last);
  h.expect_ddp_term(last, term::ddp_untagged_invalid_mo);
}

TEST_CASE("HX-063 (R) a segment beyond a message's last one: L1/E2/0x04", "[qp][hostile]") {
  Hostile h;
  h.arm(true, false);
  // Two receive buffers; message 1 stays incomplete, so message 2 waits behind it.
  REQUIRE(h.qp().post_recv(recv_wr(101, {h.w.all()})) == PostError::None);
  h.d.feed(ulpdu(untagged(Opcode::Send, 1, 0, false), {}, pattern(4, 1)));
  h.d.feed(ulpdu(untagged(Opcode::Send, 2, 0, true), {}, pattern(8, 2)));
  Bytes beyond = ulpdu(untagged(Opcode::Send, 2, 8, false), {}, pattern(8, 3));
  h.d.feed(beyond);
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 1);
  CHECK(hex(segs[0].ulpdu) ==
        hex(terminate_ulpdu(term::ddp_untagged_invalid_mo, 1, 1, 0, beyond, h.d.cfg.conn.version)));
  auto cq = drain_cq(h.qp());
  REQUIRE(cq.size() == 2); // both receives, flushed: neither message was delivered
  for (const Completion& c : cq)
    CHECK(c.status == WcStatus::Flushed);
}

TEST_CASE("HX-070 RDMAP version other than the negotiated one: L0/E2/0x05", "[qp][hostile]") {
  Hostile h;
  h.arm();
  const std::uint8_t rv = GENERATE(0, 2, 3);
  DdpHeader t = tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(0));
  t.rdmap_version = rv;
  Bytes u = ulpdu(t, {}, pattern(16));
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  h.expect_ddp_term(u, term::rdmap_invalid_version);
}

TEST_CASE("HX-071 reserved opcodes: L0/E2/0x06", "[qp][hostile]") {
  const bool ext = GENERATE(false, true);
  Hostile h(ext ? cfg7306() : Dut::dut_cfg());
  h.arm();
  const std::uint8_t op = GENERATE(0xc, 0xd, 0xe, 0xf);
  const bool t = GENERATE(false, true);
  DdpHeader hd = t ? tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(0)) : untagged(Opcode::Send, 1);
  hd.opcode = op;
  Bytes u = ulpdu(hd, {}, pattern(8));
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  CHECK(all_zero(h.rbuf.data));
  h.expect_ddp_term(u, term::rdmap_unexpected_opcode);
}

TEST_CASE("HX-072 opcode inconsistent with the T bit or the QN: L0/E2/0x06", "[qp][hostile]") {
  Hostile h;
  h.arm();
  Bytes u;
  SECTION("Send with T=1") { u = ulpdu(tagged(Opcode::Send, h.w.stag, h.w.to(0)), {}, pattern(8)); }
  SECTION("Write with T=0") {
    DdpHeader s = untagged(Opcode::Send, 1);
    s.opcode = static_cast<std::uint8_t>(Opcode::RdmaWrite);
    u = ulpdu(s, {}, pattern(8));
  }
  SECTION("Read Response with T=0") {
    DdpHeader s = untagged(Opcode::Send, 1);
    s.opcode = static_cast<std::uint8_t>(Opcode::RdmaReadResponse);
    u = ulpdu(s, {}, pattern(8));
  }
  SECTION("Read Request on QN 0") {
    DdpHeader s = untagged(Opcode::RdmaReadRequest, 1);
    s.qn = kQnSend;
    u = ulpdu(s, rr_bytes({1, 0, 8, h.w.stag, h.w.to(0)}));
  }
  SECTION("Send on QN 2") {
    DdpHeader s = untagged(Opcode::Send, 1);
    s.qn = kQnTerminate;
    u = ulpdu(s, {}, pattern(8));
  }
  SECTION("Send on QN 1") {
    DdpHeader s = untagged(Opcode::Send, 1);
    s.qn = kQnReadRequest;
    u = ulpdu(s, {}, pattern(8));
  }
  SECTION("Terminate on QN 0") {
    DdpHeader s = untagged(Opcode::Terminate, 1);
    s.qn = kQnSend;
    u = ulpdu(s, Bytes{std::byte{0x11}, std::byte{0}, std::byte{0}, std::byte{0}});
  }
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  CHECK(all_zero(h.rbuf.data));
  h.expect_ddp_term(u, term::rdmap_unexpected_opcode);
}
