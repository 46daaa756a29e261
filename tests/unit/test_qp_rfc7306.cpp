// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// RFC 7306 (requirements EXT-): Immediate Data, RDMA Write with Immediate, FetchAdd and
// CompareSwap, and their refusal unless negotiated; then RFC 7306 input from a hostile
// peer (OX-06, HX-087..091), answered with the exact Terminate.
#include "catch_compat.hpp"
#include "qp_harness.hpp"

#include <algorithm>
#include <thread>

using namespace qpt;

TEST_CASE("EXT-010 Immediate Data (with SE): 8 octets on QN 0, one receive buffer",
          "[qp][rfc7306]") {
  QpConfig ca = initiator_cfg(), cb = responder_cfg();
  ca.conn.rfc7306 = cb.conn.rfc7306 = true;
  Pair p(ca, cb);
  Buf rb = reg(p.mb(), 64);
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  SendWr w = send_wr(2, {}, WrOpcode::ImmediateData);
  w.immediate = 0x0102030405060708ull;
  w.solicited = true;
  REQUIRE(p.a->post_send(w) == PostError::None);
  p.pump();
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 1);
  CHECK(hex(segs[0].ulpdu) == "4149000000000000000000000001000000000102030405060708");
  auto cb_ = drain_cq(*p.b);
  REQUIRE(cb_.size() == 1);
  check_completion(cb_[0], 1, WcStatus::Success, WcOpcode::Recv, 0, true);
  REQUIRE(cb_[0].immediate.has_value());
  CHECK(*cb_[0].immediate == 0x0102030405060708ull);
  CHECK(cb_[0].solicited);
  CHECK(all_zero(rb.data));
  auto ca_ = drain_cq(*p.a);
  REQUIRE(ca_.size() == 1);
  check_completion(ca_[0], 2, WcStatus::Success, WcOpcode::Send, 0, false);
}

TEST_CASE("EXT-010 RDMA Write with Immediate: Write placed, then Immediate Data delivered",
          "[qp][rfc7306]") {
  QpConfig ca = initiator_cfg(), cb = responder_cfg();
  ca.conn.rfc7306 = cb.conn.rfc7306 = true;
  Pair p(ca, cb);
  Buf src = reg(p.ma(), pattern(3000, 4));
  Buf dst = reg(p.mb(), 3000);
  Buf rb = reg(p.mb(), 8);
  REQUIRE(p.b->post_recv(recv_wr(1, {rb.all()})) == PostError::None);
  SendWr w = write_wr(2, {src.all()}, dst.stag, dst.to(0));
  w.opcode = WrOpcode::RdmaWriteImmediate;
  w.immediate = 0xfeedfacecafebeefull;
  REQUIRE(p.a->post_send(w) == PostError::None);
  p.pump();
  CHECK(dst.data == src.data);
  auto segs = p.segs_ab();
  REQUIRE(segs.size() == 4);
  CHECK(segs[2].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaWrite));
  CHECK(segs[2].h.last);
  CHECK(segs[3].h.opcode == static_cast<std::uint8_t>(Opcode::ImmediateData));
  CHECK(segs[3].rdmap() == be64(0xfeedfacecafebeefull));
  auto cb_ = drain_cq(*p.b);
  REQUIRE(cb_.size() == 1);
  REQUIRE(cb_[0].immediate.has_value());
  CHECK(*cb_[0].immediate == 0xfeedfacecafebeefull);
  auto ca_ = drain_cq(*p.a);
  REQUIRE(ca_.size() == 1);
  check_completion(ca_[0], 2, WcStatus::Success, WcOpcode::RdmaWrite, 3000, false);
}

TEST_CASE("EXT-005 FetchAdd and CompareSwap: original value returned, target updated",
          "[qp][rfc7306]") {
  QpConfig ca = initiator_cfg(), cb = responder_cfg();
  ca.conn.rfc7306 = cb.conn.rfc7306 = true;
  Pair p(ca, cb);
  Buf target = reg(p.mb(), 32, kAllAccess, 1, Based::Zero);
  set_host_u64(target.data, 8, 100);
  Buf res = reg(p.ma(), 24);
  // The 8-octet result may be scattered over several SGEs.
  SendWr fa = send_wr(1, {res.sge(0, 3), res.sge(3, 5)}, WrOpcode::AtomicFetchAdd);
  fa.remote_stag = target.stag;
  fa.remote_addr = 8;
  fa.compare_add = 5;
  SendWr cs = send_wr(2, {res.sge(8, 8)}, WrOpcode::AtomicCompareSwap);
  cs.remote_stag = target.stag;
  cs.remote_addr = 8;
  cs.compare_add = 105;
  cs.swap = 7;
  SendWr miss = cs;
  miss.wr_id = 3;
  miss.sgl = {res.sge(16, 8)};
  miss.compare_add = 1;
  miss.swap = 9;
  REQUIRE(p.a->post_send(fa) == PostError::None);
  REQUIRE(p.a->post_send(cs) == PostError::None);
  REQUIRE(p.a->post_send(miss) == PostError::None);
  p.pump();
  CHECK(host_u64(target.data, 8) == 7);
  CHECK(host_u64(target.data, 0) == 0);
  CHECK(host_u64(target.data, 16) == 0);
  CHECK(host_u64(res.data, 0) == 100);
  CHECK(host_u64(res.data, 8) == 105);
  CHECK(host_u64(res.data, 16) == 7);
  auto cq = drain_cq(*p.a);
  REQUIRE(cq.size() == 3);
  check_completion(cq[0], 1, WcStatus::Success, WcOpcode::FetchAdd, 8, false);
  check_completion(cq[1], 2, WcStatus::Success, WcOpcode::CompareSwap, 8, false);
  check_completion(cq[2], 3, WcStatus::Success, WcOpcode::CompareSwap, 8, false);
  CHECK(drain_cq(*p.b).empty());

  auto req = p.segs_ab();
  REQUIRE(req.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(req[i].h.opcode == static_cast<std::uint8_t>(Opcode::AtomicRequest));
    CHECK(req[i].h.qn == kQnReadRequest);
    CHECK(req[i].h.msn == i + 1);
    CHECK(req[i].ulpdu.size() == kUntaggedHdrLen + kAtomicRequestHdrLen);
  }
  AtomicRequestHeader a0 = AtomicRequestHeader::decode(req[0].ulpdu.data() + kUntaggedHdrLen);
  CHECK(a0.aopcode == 0x0);
  CHECK(a0.remote_stag == target.stag);
  CHECK(a0.remote_to == 8);
  CHECK(a0.add_swap == 5);
  CHECK(a0.add_swap_mask == 0);
  AtomicRequestHeader a1 = AtomicRequestHeader::decode(req[1].ulpdu.data() + kUntaggedHdrLen);
  CHECK(a1.aopcode == 0x2);
  CHECK(a1.add_swap == 7);
  CHECK(a1.compare == 105);
  CHECK(a1.add_swap_mask == ~0ull);
  CHECK(a1.compare_mask == ~0ull);
  auto resp = p.segs_ba();
  REQUIRE(resp.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(resp[i].h.opcode == static_cast<std::uint8_t>(Opcode::AtomicResponse));
    CHECK(resp[i].h.qn == kQnAtomicResponse);
    CHECK(resp[i].h.msn == i + 1);
    REQUIRE(resp[i].ulpdu.size() == kUntaggedHdrLen + kAtomicResponseHdrLen);
  }
  AtomicResponseHeader r0 = AtomicResponseHeader::decode(resp[0].ulpdu.data() + kUntaggedHdrLen);
  CHECK(r0.orig_req_id == a0.req_id);
  CHECK(r0.orig_value == 100);
}

// Two QPs (two streams, as two connections would be) run FetchAdds on one target from two
// threads: none may be lost. `offset` 1 puts the target's host address off 8-octet alignment
// (a zero-based region may), which takes the other of atomic_exec.cpp's two paths.
void concurrent_fetch_adds(std::size_t offset) {
  constexpr std::uint64_t kEach = 3000;
  MemoryTable target_mem(7);
  Bytes backing(64 + offset);
  std::byte* host = backing.data() + offset;
  const std::uint32_t stag = target_mem.add(1, host, 0, 32, kAllAccess | access::kZeroBased);
  REQUIRE(stag != 0);
  auto run = [&](std::uint64_t seed, std::vector<std::uint64_t>* seen) {
    QpConfig ca = initiator_cfg(), cb = responder_cfg();
    ca.conn.rfc7306 = cb.conn.rfc7306 = true;
    Pair::Options o;
    o.mem_b = &target_mem;
    o.seed = seed;
    Pair p(ca, cb, o);
    Buf res = reg(p.ma(), 8);
    for (std::uint64_t i = 0; i < kEach; ++i) {
      SendWr fa = send_wr(i, {res.sge(0, 8)}, WrOpcode::AtomicFetchAdd);
      fa.remote_stag = stag;
      fa.remote_addr = 8;
      fa.compare_add = 1;
      if (p.a->post_send(fa) != PostError::None) return;
      p.pump();
      if (drain_cq(*p.a).size() != 1) return;
      seen->push_back(host_u64(res.data, 0));
    }
  };
  std::vector<std::uint64_t> one, two;
  std::thread t([&] { run(11, &two); });
  run(12, &one);
  t.join();
  REQUIRE(one.size() == kEach);
  REQUIRE(two.size() == kEach);
  std::uint64_t final_value;
  std::memcpy(&final_value, host + 8, 8);
  CHECK(final_value == 2 * kEach);
  // Every original value handed out once: no two FetchAdds saw the same one.
  std::vector<std::uint64_t> all = one;
  all.insert(all.end(), two.begin(), two.end());
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  CHECK(all.back() == 2 * kEach - 1);
}

TEST_CASE("EXT-005 FetchAdds from two QPs in two threads on one target: none lost (IBV_ATOMIC_HCA)",
          "[qp][rfc7306]") {
  SECTION("target 8-octet aligned in memory") { concurrent_fetch_adds(0); }
  SECTION("target not aligned in memory (zero-based region)") { concurrent_fetch_adds(1); }
}

TEST_CASE("EXT-001 RFC 7306 work requests refused unless rfc7306 is enabled", "[qp][rfc7306]") {
  Pair p(initiator_cfg(), responder_cfg());
  for (WrOpcode op : {WrOpcode::ImmediateData, WrOpcode::RdmaWriteImmediate,
                      WrOpcode::AtomicFetchAdd, WrOpcode::AtomicCompareSwap})
    CHECK(p.a->post_send(send_wr(1, {}, op)) == PostError::InvalidArgument);
  CHECK(p.a->sq_outstanding() == 0);
  CHECK_FALSE(p.a->tx_pending());
}

// ---- RFC 7306 input from a hostile peer --------------------------------------------------

TEST_CASE("OX-06 RFC 7306 opcodes at a peer without RFC 7306: L0/E2/0x06",
          "[qp][rfc7306][hostile]") {
  Hostile h;
  h.arm();
  Bytes u;
  SECTION("Immediate Data") { u = ulpdu(untagged(Opcode::ImmediateData, 1), be64(42)); }
  SECTION("Immediate Data with SE") { u = ulpdu(untagged(Opcode::ImmediateDataSe, 1), be64(1)); }
  SECTION("FetchAdd(Add=0) probe") {
    AtomicRequestHeader a;
    a.remote_stag = h.w.stag;
    a.remote_to = h.w.to(0);
    u = ulpdu(untagged(Opcode::AtomicRequest, 1), atomic_bytes(a));
  }
  SECTION("Atomic Response") {
    u = ulpdu(untagged(Opcode::AtomicResponse, 1), Bytes(kAtomicResponseHdrLen));
  }
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_unexpected_opcode);
}

TEST_CASE("HX-087 Immediate Data with other than 8 octets: L0/E2/0xFF", "[qp][rfc7306][hostile]") {
  Hostile h(cfg7306());
  h.arm();
  const std::size_t n = GENERATE(0, 4, 7, 9, 16);
  Bytes u = ulpdu(untagged(Opcode::ImmediateData, 1), pattern(n));
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_op_unspecified);
}

namespace {
Bytes atomic_request(std::uint8_t aop, std::uint32_t stag, std::uint64_t to, std::uint64_t add,
                     std::uint32_t req_id = 9, std::uint32_t msn = 1) {
  AtomicRequestHeader a;
  a.aopcode = aop;
  a.req_id = req_id;
  a.remote_stag = stag;
  a.remote_to = to;
  a.add_swap = add;
  a.add_swap_mask = 0;
  return ulpdu(untagged(Opcode::AtomicRequest, msn), atomic_bytes(a));
}
} // namespace

TEST_CASE("HX-088 Atomic Request at a TO not 8-octet aligned: L0/E2/0x07, memory untouched",
          "[qp][rfc7306][hostile]") {
  Hostile h(cfg7306());
  h.arm();
  const std::uint64_t off = GENERATE(1, 4, 7, 12);
  Bytes u = atomic_request(0, h.w.stag, h.w.to(off), 1);
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  h.expect_ddp_term(u, term::rdmap_catastrophic_stream);
}

TEST_CASE("HX-089 Atomic Request with an unsupported AOpCode: L0/E2/0x06",
          "[qp][rfc7306][hostile]") {
  Hostile h(cfg7306());
  h.arm();
  const std::uint8_t aop = GENERATE(1, 3, 0xf);
  Bytes u = atomic_request(aop, h.w.stag, h.w.to(0), 1);
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  h.expect_ddp_term(u, term::rdmap_unexpected_opcode);
}

TEST_CASE("HX-090 Atomic Request with a bad STag, bounds or rights: L0/E1 codes",
          "[qp][rfc7306][hostile]") {
  Hostile h(cfg7306());
  h.arm();
  Bytes u;
  TermCode code{};
  SECTION("invalid STag") {
    u = atomic_request(0, 0x00fff000, 0, 1);
    code = term::rdmap_invalid_stag;
  }
  SECTION("another PD") {
    u = atomic_request(0, h.other.stag, h.other.to(0), 1);
    code = term::rdmap_stag_not_assoc;
  }
  SECTION("no remote atomic right") {
    u = atomic_request(0, h.ro.stag, h.ro.to(0), 1);
    code = term::rdmap_access_rights;
  }
  SECTION("beyond the region") {
    u = atomic_request(0, h.w.stag, h.w.to(256), 1);
    code = term::rdmap_base_bounds;
  }
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  CHECK(all_zero(h.ro.data));
  CHECK(all_zero(h.other.data));
  h.expect_ddp_term(u, code);
}

TEST_CASE("EXT-005 masked FetchAdd and CompareSwap from a raw Atomic Request",
          "[qp][rfc7306][hostile]") {
  Hostile h(cfg7306());
  set_host_u64(h.w.data, 0, 0x00000001ffffffffull);
  set_host_u64(h.w.data, 8, 0x1122334455667788ull);
  AtomicRequestHeader fa;
  fa.aopcode = 0;
  fa.req_id = 77;
  fa.remote_stag = h.w.stag;
  fa.remote_to = h.w.to(0);
  fa.add_swap = 0x0000000100000001ull;
  fa.add_swap_mask = 0x8000000080000000ull; // two 32-bit fields: carries stop at bit 31
  h.d.feed(ulpdu(untagged(Opcode::AtomicRequest, 1), atomic_bytes(fa)));
  AtomicRequestHeader cs;
  cs.aopcode = 2;
  cs.req_id = 78;
  cs.remote_stag = h.w.stag;
  cs.remote_to = h.w.to(8);
  cs.compare = 0xffffffffffff7788ull;
  cs.compare_mask = 0xffff;
  cs.add_swap = 0xaaaaaaaaaaaaaaaaull;
  cs.add_swap_mask = 0xff00;
  h.d.feed(ulpdu(untagged(Opcode::AtomicRequest, 2), atomic_bytes(cs)));
  AtomicRequestHeader miss = cs;
  miss.req_id = 79;
  miss.compare = 0x1234;
  h.d.feed(ulpdu(untagged(Opcode::AtomicRequest, 3), atomic_bytes(miss)));
  h.expect_accepted();
  CHECK(host_u64(h.w.data, 0) == 0x0000000200000000ull);
  CHECK(host_u64(h.w.data, 8) == 0x112233445566aa88ull);
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 3);
  CHECK(hex(segs[0].ulpdu) == "414b"
                              "00000000"
                              "00000003"
                              "00000001"
                              "00000000"
                              "0000004d"
                              "00000001ffffffff");
  CHECK(hex(segs[1].ulpdu) == "414b"
                              "00000000"
                              "00000003"
                              "00000002"
                              "00000000"
                              "0000004e"
                              "1122334455667788");
  CHECK(hex(segs[2].ulpdu) == "414b"
                              "00000000"
                              "00000003"
                              "00000003"
                              "00000000"
                              "0000004f"
                              "112233445566aa88");
  CHECK(drain_cq(h.qp()).empty()); // EXT-007: never delivered to the responder's ULP
}

TEST_CASE("HX-091 unsolicited or mismatched Atomic Response: L0/E2/0x06",
          "[qp][rfc7306][hostile]") {
  SECTION("nothing outstanding") {
    Hostile h(cfg7306());
    h.arm();
    Bytes u = ulpdu(untagged(Opcode::AtomicResponse, 1), cat(Bytes(4), be64(5)));
    h.d.feed(u);
    h.expect_ddp_term(u, term::rdmap_unexpected_opcode);
  }
  for (const bool bad_msn : {false, true}) {
    INFO("bad MSN " << bad_msn);
    Hostile h(cfg7306());
    h.arm(true, false);
    Buf res = reg(h.d.mem, 8);
    SendWr fa = send_wr(200, {res.all()}, WrOpcode::AtomicFetchAdd);
    fa.remote_stag = 0x1234;
    fa.compare_add = 1;
    REQUIRE(h.qp().post_send(fa) == PostError::None);
    auto req = h.d.segs(h.d.drain());
    REQUIRE(req.size() == 1);
    const std::uint32_t id =
        AtomicRequestHeader::decode(req[0].ulpdu.data() + kUntaggedHdrLen).req_id;
    h.armed_read = true; // the atomic is the outstanding SQ WR
    Bytes resp(4);
    store_be32(resp.data(), bad_msn ? id : id + 1);
    Bytes u = ulpdu(untagged(Opcode::AtomicResponse, bad_msn ? 2 : 1), cat(resp, be64(5)));
    h.d.feed(u);
    CHECK(all_zero(res.data));
    CHECK(h.qp().state() == QpState::Terminate);
    auto segs = h.d.segs(h.d.drain());
    REQUIRE(segs.size() == 1);
    CHECK(hex(segs[0].ulpdu) == hex(terminate_ulpdu(term::rdmap_unexpected_opcode, 1, 1, 0, u)));
    auto cq = drain_cq(h.qp());
    REQUIRE(cq.size() == 2);
    check_completion(cq[0], 200, WcStatus::Flushed, WcOpcode::FetchAdd, 8, false);
    check_completion(cq[1], 100, WcStatus::Flushed, WcOpcode::Recv, 0, true);
  }
}
