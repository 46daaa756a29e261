// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// RDMA Read (RFC 5040 §5.2; requirements RD-): Read Requests and Responses into
// multi-SGE sinks, zero-length Reads, several Reads outstanding, a source deregistered
// mid-Response; then Read Requests and Responses from a hostile peer (HX-074..082), each
// answered with the exact Terminate (with the RDMA header, R).
#include "catch_compat.hpp"
#include "qp_harness.hpp"

#include <numeric>
#include <set>

using namespace qpt;

TEST_CASE("RD-002 RDMA Read into a multi-SGE sink: Request header, Responses, data", "[qp][read]") {
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  Pair p(initiator_cfg(), responder_cfg(), {.io = io});
  Buf src = reg(p.mb(), pattern(8192, 8), access::kRemoteRead);
  Buf k1 = reg(p.ma(), 1000, access::kLocalWrite);
  Buf k2 = reg(p.ma(), 3000, access::kLocalWrite, 1, Based::Zero);
  REQUIRE(p.a->post_send(read_wr(5, {k1.sge(100, 900), k2.sge(0, 0), k2.sge(0, 3000)}, src.stag,
                                 src.to(7))) == PostError::None);
  p.pump();
  CHECK(all_zero(slice(k1.data, 0, 100)));
  CHECK(slice(k1.data, 100, 900) == slice(src.data, 7, 900));
  CHECK(slice(k2.data, 0, 3000) == slice(src.data, 907, 3000));
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 1);
  check_completion(ca[0], 5, WcStatus::Success, WcOpcode::RdmaRead, 3900, false);
  CHECK(drain_cq(*p.b).empty()); // RD-003: never delivered to the responder's ULP
  CHECK(p.a->reads_outstanding() == 0);

  auto rq = p.segs_ab();
  REQUIRE(rq.size() == 1);
  CHECK(rq[0].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadRequest));
  CHECK(rq[0].h.qn == kQnReadRequest);
  CHECK(rq[0].h.msn == 1);
  CHECK(rq[0].ulpdu.size() == kUntaggedHdrLen + kReadRequestHdrLen);
  ReadRequestHeader r = ReadRequestHeader::decode(rq[0].ulpdu.data() + kUntaggedHdrLen);
  CHECK(r.sink_stag == k1.stag);
  CHECK(r.sink_to == k1.to(100));
  CHECK(r.size == 3900);
  CHECK(r.src_stag == src.stag);
  CHECK(r.src_to == src.to(7));

  auto rs = p.segs_ba();
  REQUIRE(rs.size() == 3); // 1438 + 1438 + 1024
  std::size_t off = 0;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    CHECK(rs[i].h.tagged);
    CHECK(rs[i].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadResponse));
    CHECK(rs[i].h.stag == k1.stag);
    CHECK(rs[i].h.to == k1.to(100) + off);
    CHECK(rs[i].h.last == (i == 2));
    off += rs[i].payload_len();
  }
  CHECK(off == 3900);
}

TEST_CASE("RD-004 zero-length RDMA Read: garbage source not validated, zero-length Response",
          "[qp][read]") {
  Pair p(initiator_cfg(), responder_cfg());
  REQUIRE(p.a->post_send(read_wr(9, {}, 0xdeadbeef, 0xfffffffffffffff0ull)) == PostError::None);
  p.pump();
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 1);
  check_completion(ca[0], 9, WcStatus::Success, WcOpcode::RdmaRead, 0, false);
  auto rs = p.segs_ba();
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].h.tagged);
  CHECK(rs[0].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadResponse));
  CHECK(rs[0].h.last);
  CHECK(rs[0].ulpdu.size() == kTaggedHdrLen);
  CHECK(p.b->state() == QpState::Rts);
  CHECK(p.a->state() == QpState::Rts);
}

TEST_CASE("RD-005 several Reads: Responses in Request order, each into its own sink",
          "[qp][read]") {
  Pair p(initiator_cfg(), responder_cfg());
  Buf src = reg(p.mb(), pattern(20000, 2), access::kRemoteRead);
  std::vector<Buf> sinks;
  for (int i = 0; i < 5; ++i)
    sinks.push_back(reg(p.ma(), 1000 + 1000 * i));
  for (int i = 0; i < 5; ++i)
    REQUIRE(p.a->post_send(read_wr(i, {sinks[i].all()}, src.stag, src.to(i * 3000))) ==
            PostError::None);
  p.pump();
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 5);
  for (int i = 0; i < 5; ++i) {
    check_completion(ca[i], i, WcStatus::Success, WcOpcode::RdmaRead, 1000 + 1000 * i, false);
    CHECK(sinks[i].data == slice(src.data, i * 3000, 1000 + 1000 * i));
  }
  // Read Responses leave in the order the Requests arrived (RFC 5040 §5.2.2).
  std::uint32_t last_stag = 0;
  int seen = 0;
  for (const Seg& s : p.segs_ba()) {
    if (s.h.stag != last_stag) {
      REQUIRE(seen < 5);
      CHECK(s.h.stag == sinks[seen].stag);
      ++seen;
      last_stag = s.h.stag;
    }
  }
  CHECK(seen == 5);
}

TEST_CASE("RD-003 Read source deregistered while its Response is sent: rest not sent, Terminate",
          "[qp][read]") {
  Hostile h;
  h.arm(true, false);
  Buf big = reg(h.d.mem, pattern(40000, 6), access::kRemoteRead);
  h.d.feed(read_request(big.stag, big.to(0), 40000));
  std::vector<ConstBytes> iov;
  h.qp().tx_gather(iov);
  Bytes first;
  for (ConstBytes b : iov)
    first.insert(first.end(), b.begin(), b.end());
  h.qp().tx_advance(first.size());
  REQUIRE(h.d.mem.remove(big.stag));
  auto segs = h.d.segs(cat(first, h.d.drain()));
  REQUIRE(segs.size() >= 2);
  std::size_t off = 0;
  for (std::size_t i = 0; i + 1 < segs.size(); ++i) {
    CHECK(segs[i].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadResponse));
    CHECK(segs[i].h.to == 0x0102030405060708ull + off);
    CHECK_FALSE(segs[i].h.last);
    CHECK(segs[i].payload() == slice(big.data, off, segs[i].payload_len()));
    off += segs[i].payload_len();
  }
  CHECK(off < 40000);
  CHECK(hex(segs.back().ulpdu) == hex(terminate_ulpdu(term::rdmap_invalid_stag, 0, 0, 0, {})));
  CHECK(h.qp().state() == QpState::Error);
  h.expect_flushed();
}

TEST_CASE("RD-005 a Read Response's payload may go by reference, never a header, a CRC, a "
          "Send's or a Write's payload (tx_gather, by_ref), and with CRC on nothing does",
          "[qp][read]") {
  // The I/O edge hands flagged pieces to TCP without a copy: only memory that nothing
  // changes until the requester has it (a Read Response completes nothing at the Data
  // Source), never a buffer whose completion hands it back to the program (DDP-052). With
  // CRC on, every payload is copied into its frame, whose CRC covers that copy (MPA-028).
  const bool crc = GENERATE(false, true);
  INFO("crc " << crc);
  QpConfig cfg = Dut::dut_cfg();
  cfg.conn.crc = crc;
  Hostile h(cfg);
  h.arm(true, false);
  Buf big = reg(h.d.mem, pattern(40000, 6), access::kRemoteRead);
  Buf out = reg(h.d.mem, pattern(3000, 2));
  h.d.feed(read_request(big.stag, big.to(0), 40000));
  REQUIRE(h.qp().post_send(send_wr(1, {out.all()})) == PostError::None);
  REQUIRE(h.qp().post_send(write_wr(2, {out.all()}, 0x5eed0001, 0x1000)) == PostError::None);
  auto within = [](ConstBytes p, const Buf& b) {
    return p.data() >= b.data.data() && p.data() + p.size() <= b.data.data() + b.data.size();
  };
  std::size_t by_ref = 0, copied_out = 0;
  Bytes stream;
  std::vector<ConstBytes> iov;
  std::vector<std::uint8_t> flags;
  for (;;) {
    iov.clear();
    h.qp().tx_gather(iov, 7, &flags); // a few pieces at a time: partial frames too
    REQUIRE(flags.size() == iov.size());
    if (iov.empty()) break;
    for (std::size_t i = 0; i < iov.size(); ++i) {
      INFO("piece " << i << " of " << iov[i].size() << " octets");
      CHECK(static_cast<bool>(flags[i]) == within(iov[i], big));
      if (flags[i]) by_ref += iov[i].size();
      if (within(iov[i], out)) copied_out += iov[i].size();
      stream.insert(stream.end(), iov[i].begin(), iov[i].end());
    }
    h.qp().tx_advance(std::accumulate(iov.begin(), iov.end(), std::size_t{0},
                                      [](std::size_t n, ConstBytes b) { return n + b.size(); }));
  }
  CHECK(by_ref == (crc ? 0 : 40000));
  CHECK(copied_out == (crc ? 0 : 6000)); // referenced, for the kernel's copy; or copied here
  // What was gathered is the whole stream: the Response's segments, the Send and the Write.
  std::set<std::uint8_t> ops;
  for (const auto& seg : h.d.segs(stream))
    ops.insert(seg.h.opcode);
  CHECK(ops == std::set<std::uint8_t>{static_cast<std::uint8_t>(Opcode::RdmaWrite),
                                      static_cast<std::uint8_t>(Opcode::RdmaReadResponse),
                                      static_cast<std::uint8_t>(Opcode::Send)});
}

// ---- hostile Read Requests (RFC 5040 §5.2.1, §7.2): Terminate with the RDMA header (R) ----

TEST_CASE("HX-074 Read Request with an invalid source STag: L0/E1/0x00, M D R, no Response",
          "[qp][read][hostile]") {
  Hostile h;
  h.arm();
  std::uint32_t stag = 0;
  SECTION("unknown") { stag = 0x00fff000; }
  SECTION("wrong key") { stag = h.w.stag ^ 0x01; }
  SECTION("invalidated") {
    REQUIRE(h.d.mem.invalidate(h.w.stag));
    stag = h.w.stag;
  }
  Bytes u = read_request(stag, h.w.to(0), 16);
  h.d.feed(u);
  h.expect_rdma_term(u, term::rdmap_invalid_stag);
}

TEST_CASE("HX-075 Read Request source STag of another PD or stream: L0/E1/0x03 (C-08)",
          "[qp][read][hostile]") {
  Hostile h;
  h.arm();
  Bytes u;
  SECTION("another PD") { u = read_request(h.other.stag, h.other.to(0), 16); }
  SECTION("bound to another QP") {
    REQUIRE(h.d.mem.associate(h.w.stag, 1234));
    u = read_request(h.w.stag, h.w.to(0), 16);
  }
  h.d.feed(u);
  h.expect_rdma_term(u, term::rdmap_stag_not_assoc);
}

TEST_CASE("HX-076 Read Request source range outside the region: L0/E1/0x01",
          "[qp][read][hostile]") {
  Hostile h;
  h.arm();
  Bytes u;
  SECTION("SrcTO below base") { u = read_request(h.w.stag, h.w.base - 1, 8); }
  SECTION("SrcTO + size one past the end") { u = read_request(h.w.stag, h.w.to(200), 57); }
  SECTION("huge size") { u = read_request(h.w.stag, h.w.to(0), 0xffffffffu); }
  h.d.feed(u);
  h.expect_rdma_term(u, term::rdmap_base_bounds);
}

TEST_CASE("HX-077 Read Request whose SrcTO + size wraps: L0/E1/0x04", "[qp][read][hostile]") {
  Hostile h;
  h.arm();
  Bytes u = read_request(h.w.stag, 0xfffffffffffffffcull, 8);
  h.d.feed(u);
  h.expect_rdma_term(u, term::rdmap_to_wrap);
}

TEST_CASE("HX-078 Read Request from a region without remote read: L0/E1/0x02",
          "[qp][read][hostile]") {
  Hostile h;
  h.arm();
  Bytes u = read_request(h.rbuf.stag, h.rbuf.to(0), 8);
  h.d.feed(u);
  h.expect_rdma_term(u, term::rdmap_access_rights);
}

TEST_CASE("HX-079 zero-length Read Request: garbage source not validated, zero-length Response",
          "[qp][read][hostile]") {
  Hostile h;
  h.d.feed(read_request(0xdeadbeef, 0xffffffffffffffffull, 0));
  h.expect_accepted();
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 1);
  // T=1 L=1 DV=1, RV=1 Read Response, the Request's sink STag and TO copied verbatim.
  CHECK(hex(segs[0].ulpdu) == "c142abcd00010102030405060708");
  h.expect_accepted();
}

TEST_CASE("RD-003 valid Read Request answered from the source region", "[qp][read][hostile]") {
  Hostile h;
  const Bytes src = pattern(256, 7);
  std::copy(src.begin(), src.end(), h.w.data.begin()); // same storage, still registered
  h.d.feed(read_request(h.w.stag, h.w.to(10), 100));
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].h.stag == 0xabcd0001);
  CHECK(segs[0].h.to == 0x0102030405060708ull);
  CHECK(segs[0].payload() == slice(h.w.data, 10, 100));
  h.expect_accepted();
}

TEST_CASE("HX-080 Read Request with trailing payload: L0/E2/0xFF", "[qp][read][hostile]") {
  Hostile h;
  h.arm();
  Bytes u = cat(read_request(h.w.stag, h.w.to(0), 8), pattern(4));
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_op_unspecified);
}

TEST_CASE("HX-081 more Read Requests than IRD: L1/E2/0x02 on the first one over (IR-07)",
          "[qp][read][hostile]") {
  QpConfig c = Dut::dut_cfg();
  c.conn.ird = 2;
  Hostile h(c);
  h.arm();
  h.d.feed(read_request(h.w.stag, h.w.to(0), 8, 1));
  h.d.feed(read_request(h.w.stag, h.w.to(8), 8, 2));
  h.expect_accepted();
  CHECK(h.qp().inbound_reads_queued() == 2);
  Bytes u = read_request(h.w.stag, h.w.to(16), 8, 3);
  h.d.feed(u);
  h.expect_ddp_term(u, term::ddp_untagged_no_buffer); // and no Read Response went out
}

TEST_CASE("HX-082 unsolicited or mismatched Read Response", "[qp][read][hostile]") {
  SECTION("no Read outstanding: L0/E2/0x06") {
    Hostile h;
    h.arm(true, false);
    Bytes u = ulpdu(tagged(Opcode::RdmaReadResponse, h.sink.stag, h.sink.to(0)), {}, pattern(8));
    h.d.feed(u);
    CHECK(all_zero(h.sink.data));
    h.expect_ddp_term(u, term::rdmap_unexpected_opcode);
  }
  SECTION("STag other than the Request's sink: L1/E1/0x00") {
    Hostile h;
    h.arm();
    Bytes u = ulpdu(tagged(Opcode::RdmaReadResponse, h.w.stag, h.sink.to(0)), {}, pattern(8));
    h.d.feed(u);
    CHECK(all_zero(h.sink.data));
    CHECK(all_zero(h.w.data));
    h.expect_ddp_term(u, term::ddp_tagged_invalid_stag);
  }
  SECTION("beyond the Read's length: L1/E1/0x01") {
    Hostile h;
    h.arm();
    Bytes u = ulpdu(tagged(Opcode::RdmaReadResponse, h.sink.stag, h.sink.to(60)), {}, pattern(8));
    h.d.feed(u);
    CHECK(all_zero(h.sink.data));
    h.expect_ddp_term(u, term::ddp_tagged_base_bounds);
  }
  SECTION("before the sink's TO: L1/E1/0x01") {
    Hostile h;
    h.arm();
    Bytes u = ulpdu(tagged(Opcode::RdmaReadResponse, h.sink.stag, h.sink.base - 8), {}, pattern(8));
    h.d.feed(u);
    CHECK(all_zero(h.sink.data));
    h.expect_ddp_term(u, term::ddp_tagged_base_bounds);
  }
  SECTION("the matching Response completes the Read") {
    Hostile h;
    h.arm(false, true);
    h.d.feed(ulpdu(tagged(Opcode::RdmaReadResponse, h.sink.stag, h.sink.to(0), false), {},
                   pattern(40, 2)));
    CHECK(h.qp().completions_ready() == 0);
    h.d.feed(ulpdu(tagged(Opcode::RdmaReadResponse, h.sink.stag, h.sink.to(40)), {},
                   slice(pattern(64, 2), 40, 24)));
    h.expect_accepted();
    auto cq = drain_cq(h.qp());
    REQUIRE(cq.size() == 1);
    check_completion(cq[0], 200, WcStatus::Success, WcOpcode::RdmaRead, 64, false);
    CHECK(slice(h.sink.data, 0, 40) == pattern(40, 2));
    CHECK(slice(h.sink.data, 40, 24) == slice(pattern(64, 2), 40, 24));
  }
}
