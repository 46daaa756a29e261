// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The DDP/RDMAP engine (RFC 5040, RFC 5041, RFC 7306) over the MPA framer:
// requirements §3 (DDP-), §4 (RDMAP-, WR-, RD-, SD-, TM-, ORD-, EXT-), §6.4 RT-,
// §6.2 MC-, §7.2-§7.4 HX-, decisions C-05..C-10. Two Qps talk through an
// in-memory pipe (qp_harness.hpp), or one Qp is fed hand-made FPDUs and the
// Terminate it answers with is compared octet for octet.
#include "iwarp/crc32c.hpp"
#include "qp_harness.hpp"

#include <catch2/catch.hpp>
#include <cstring>

using namespace qpt;

namespace {

std::uint64_t host_u64(const Bytes& b, std::size_t off) {
  std::uint64_t v;
  std::memcpy(&v, b.data() + off, 8);
  return v;
}
void set_host_u64(Bytes& b, std::size_t off, std::uint64_t v) {
  std::memcpy(b.data() + off, &v, 8);
}

void check_completion(const Completion& c, std::uint64_t id, WcStatus st, WcOpcode op,
                      std::uint32_t len, bool recv) {
  INFO(describe(c));
  CHECK(c.wr_id == id);
  CHECK(c.status == st);
  CHECK(c.opcode == op);
  CHECK(c.byte_len == len);
  CHECK(c.recv == recv);
}

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

// =====================================================================================
// Happy paths
// =====================================================================================

TEST_CASE("SD-001 Send/Recv of 0, 1, MULPDU-boundary and 1 MiB messages", "[qp]") {
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  const std::size_t n =
      GENERATE(as<std::size_t>{}, 0, 1, 1434, 1435, 2868, 2869, std::size_t{1} << 20);
  send_and_check(io, n);
}

TEST_CASE("DDP-044 2048-octet untagged message at MULPDU 1500: MO 0 len 1482, MO 1482 len 566",
          "[qp]") {
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

TEST_CASE("DDP-044 2048-octet tagged message at TO 16384: TO 16384 len 1486, TO 17870 len 562",
          "[qp]") {
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

TEST_CASE("SD-001 Send with a gather list into a scattered receive buffer", "[qp]") {
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

TEST_CASE("SD-001 inline Send: data copied at post time, limits enforced", "[qp]") {
  Pair p(initiator_cfg(), responder_cfg());
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
  big.inline_data = pattern(257);
  big.is_inline = true;
  CHECK(p.a->post_send(big) == PostError::InvalidArgument); // max_inline 256
  SendWr rd = read_wr(4, {}, 1, 0);
  rd.inline_data = pattern(4);
  rd.is_inline = true;
  CHECK(p.a->post_send(rd) == PostError::InvalidArgument);
  CHECK(p.a->sq_outstanding() == 0);
}

TEST_CASE("WR-001 RDMA Write into VA-based and zero-based regions, gather list, not delivered",
          "[qp]") {
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

TEST_CASE("WR-003 zero-length RDMA Write, then a Send signals the earlier Writes", "[qp]") {
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

TEST_CASE("RD-002 RDMA Read into a multi-SGE sink: Request header, Responses, data", "[qp]") {
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
          "[qp]") {
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

TEST_CASE("RD-005 several Reads: Responses in Request order, each into its own sink", "[qp]") {
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

TEST_CASE("SD-005 Send with Invalidate: STag invalidated before the completion reports it",
          "[qp]") {
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
  REQUIRE(p.mb().find(adv.stag) != nullptr);
  CHECK_FALSE(p.mb().find(adv.stag)->valid);

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

TEST_CASE("SD-004 Send with SE: solicited flag and event; plain Send has neither", "[qp]") {
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

TEST_CASE("ORD-12 unsignalled WRs complete silently unless they fail", "[qp]") {
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
          "[qp]") {
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
          "[qp]") {
  QpConfig ca = initiator_cfg();
  ca.ord = 2;
  QpConfig cb = responder_cfg();
  cb.ird = 2;
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

TEST_CASE("ORD-09 fence: a fenced Send waits for earlier Reads, an unfenced one does not", "[qp]") {
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

TEST_CASE("RDMAP-032 IRD: a peer within IRD gets every Read answered", "[qp]") {
  QpConfig ca = initiator_cfg();
  ca.ord = 3;
  QpConfig cb = responder_cfg();
  cb.ird = 3;
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

TEST_CASE("DDP-083 shared receive queue: two QPs take buffers in arrival order", "[qp]") {
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

// ---- RFC 6581 RTR and the responder's silence (RFC 5044 §7.1.2 r4) -------------------

TEST_CASE("RT-01 without P2P the responder sends nothing before the initiator's first FPDU "
          "(HX-018, MPA-063)",
          "[qp]") {
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
  ca.rtr = t;
  QpConfig cb = responder_cfg();
  cb.expect_rtr = true;
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

TEST_CASE("RT-02 P2P Send RTR: zero-length Send QN0 MSN1, hidden, no buffer used", "[qp]") {
  rtr_case(RtrType::Send);
}
TEST_CASE("RT-03 P2P Write RTR: zero-length RDMA Write, not validated, hidden", "[qp]") {
  rtr_case(RtrType::Write);
}
TEST_CASE("RT-04 P2P Read RTR: zero-length Read Request answered by a zero-length Response",
          "[qp]") {
  rtr_case(RtrType::Read);
}

// ---- markers and CRC ------------------------------------------------------------------

TEST_CASE("MC-04 markers and CRC on or off in each direction (MC-01..MC-04)", "[qp]") {
  const bool crc = GENERATE(false, true);
  const bool m_ab = GENERATE(false, true);
  const bool m_ba = GENERATE(false, true);
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  INFO("crc " << crc << " markers a->b " << m_ab << " b->a " << m_ba << " io " << io_name(io));
  QpConfig ca = initiator_cfg(), cb = responder_cfg();
  ca.crc = cb.crc = crc;
  ca.markers_tx = cb.markers_rx = m_ab;
  cb.markers_tx = ca.markers_rx = m_ba;
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

// ---- RFC 7306 ---------------------------------------------------------------------------

TEST_CASE("EXT-010 Immediate Data (with SE): 8 octets on QN 0, one receive buffer", "[qp]") {
  QpConfig ca = initiator_cfg(), cb = responder_cfg();
  ca.rfc7306 = cb.rfc7306 = true;
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
          "[qp]") {
  QpConfig ca = initiator_cfg(), cb = responder_cfg();
  ca.rfc7306 = cb.rfc7306 = true;
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

TEST_CASE("EXT-005 FetchAdd and CompareSwap: original value returned, target updated", "[qp]") {
  QpConfig ca = initiator_cfg(), cb = responder_cfg();
  ca.rfc7306 = cb.rfc7306 = true;
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

TEST_CASE("EXT-001 RFC 7306 work requests refused unless rfc7306 is enabled", "[qp]") {
  Pair p(initiator_cfg(), responder_cfg());
  for (WrOpcode op : {WrOpcode::ImmediateData, WrOpcode::RdmaWriteImmediate,
                      WrOpcode::AtomicFetchAdd, WrOpcode::AtomicCompareSwap})
    CHECK(p.a->post_send(send_wr(1, {}, op)) == PostError::InvalidArgument);
  CHECK(p.a->sq_outstanding() == 0);
  CHECK_FALSE(p.a->tx_pending());
}

// ---- life cycle -----------------------------------------------------------------------

TEST_CASE("DDP-062 graceful close drains the SQ, then wants_disconnect; later WRs flush", "[qp]") {
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

TEST_CASE("RDMAP-042 local error building a message: WR fails, Terminate L0/E0 without headers",
          "[qp]") {
  Dut d;
  Buf ok = reg(d.mem, pattern(10, 1));
  Buf nolw = reg(d.mem, 64, access::kRemoteRead); // no local write: not a Read sink
  const bool read = GENERATE(false, true);
  if (read)
    REQUIRE(d.qp->post_send(read_wr(2, {nolw.all()}, 0x1234, 0)) == PostError::None);
  else
    REQUIRE(d.qp->post_send(send_wr(2, {Sge{ok.base, 10, ok.stag ^ 0x5a}})) == PostError::None);
  REQUIRE(d.qp->post_send(send_wr(3, {ok.all()})) == PostError::None);
  auto segs = d.segs(d.drain());
  REQUIRE(segs.size() == 1);
  CHECK(hex(segs[0].ulpdu) ==
        hex(terminate_ulpdu(term::rdmap_local_catastrophic, false, false, false, {})));
  CHECK(d.qp->state() == QpState::Error);
  REQUIRE(d.qp->error());
  CHECK_FALSE(d.qp->error()->remote);
  auto cq = drain_cq(*d.qp);
  REQUIRE(cq.size() == 2);
  check_completion(cq[0], 2, read ? WcStatus::LocalAccess : WcStatus::LocalProtection,
                   read ? WcOpcode::RdmaRead : WcOpcode::Send, 0, false);
  check_completion(cq[1], 3, WcStatus::Flushed, WcOpcode::Send, 0, false);
}

// =====================================================================================
// Hostile input: one Qp, hand-made FPDUs, the exact Terminate it answers with
// =====================================================================================

namespace {

// A DUT with memory to aim at and work outstanding to watch being flushed.
struct Hostile {
  Dut d;
  Buf w;     // PD 1, every right, 256 octets: the legitimate target
  Buf other; // PD 2
  Buf ro;    // remote read only
  Buf rbuf;  // receive buffer, local write only
  Buf sink;  // RDMA Read sink, local write only
  bool armed_recv = false, armed_read = false;
  bool has_srq = false;

  explicit Hostile(QpConfig c = Dut::dut_cfg(), SharedRecvQueue* srq = nullptr)
      : d(c, srq), has_srq(srq != nullptr) {
    w = reg(d.mem, 256);
    other = reg(d.mem, 256, kAllAccess, 2);
    ro = reg(d.mem, 256, access::kRemoteRead);
    rbuf = reg(d.mem, 256, access::kLocalWrite);
    sink = reg(d.mem, 64, access::kLocalWrite);
  }
  Qp& qp() { return *d.qp; }

  // A receive buffer (wr 100) and an RDMA Read awaiting its Response (wr 200).
  void arm(bool recv = true, bool read = true) {
    if (recv) REQUIRE(qp().post_recv(recv_wr(100, {rbuf.all()})) == PostError::None);
    if (read) {
      REQUIRE(qp().post_send(read_wr(200, {sink.all()}, 0x5eed0001, 0x1000)) == PostError::None);
      auto segs = d.segs(d.drain());
      REQUIRE(segs.size() == 1);
      REQUIRE(segs[0].h.opcode == static_cast<std::uint8_t>(Opcode::RdmaReadRequest));
    }
    armed_recv = recv;
    armed_read = read;
  }

  // Every outstanding WR completed: the first with `first`, the rest flushed.
  void expect_flushed(WcStatus first = WcStatus::Flushed) {
    auto cq = drain_cq(qp());
    std::size_t i = 0;
    REQUIRE(cq.size() == std::size_t{armed_read} + std::size_t{armed_recv});
    if (armed_read) {
      check_completion(cq[i++], 200, first, WcOpcode::RdmaRead, 64, false);
      first = WcStatus::Flushed;
    }
    if (armed_recv) check_completion(cq[i++], 100, WcStatus::Flushed, WcOpcode::Recv, 0, true);
    CHECK(qp().sq_outstanding() == 0);
    CHECK(qp().rq_outstanding() == 0);
    CHECK(qp().reads_outstanding() == 0);
    CHECK(qp().inbound_reads_queued() == 0);
  }

  // HX-064: after the error every later segment is dropped unread.
  void expect_dropped() {
    const Bytes before = w.data, rbefore = rbuf.data;
    d.feed(ulpdu(tagged(Opcode::RdmaWrite, w.stag, w.to(0)), {}, pattern(32, 9)));
    d.feed(ulpdu(untagged(Opcode::Send, 1), {}, pattern(8, 1)));
    d.feed(ulpdu(untagged(Opcode::RdmaReadRequest, 1), rr_bytes({0x1111, 0, 8, w.stag, w.to(0)})));
    CHECK(w.data == before);
    CHECK(rbuf.data == rbefore);
    CHECK(drain_cq(qp()).empty());
    CHECK(d.drain().empty());
    // TM-003: nothing goes out after the Terminate; new work completes flushed.
    REQUIRE(qp().post_send(send_wr(300, {})) == PostError::None);
    if (!has_srq) REQUIRE(qp().post_recv(recv_wr(301, {rbuf.all()})) == PostError::None);
    auto cq = drain_cq(qp());
    REQUIRE(cq.size() == (has_srq ? 1u : 2u));
    for (const Completion& c : cq)
      CHECK(c.status == WcStatus::Flushed);
    CHECK(d.drain().empty());
  }

  // The DUT answered `offending` with exactly one Terminate of this content.
  void expect_terminate(const Bytes& offending, TermCode code, bool m, bool dd, bool r) {
    INFO("offending ULPDU " << hex(offending));
    CHECK(qp().state() == QpState::Terminate);
    CHECK_FALSE(qp().wants_disconnect());
    auto segs = d.segs(d.drain());
    REQUIRE(segs.size() == 1);
    CHECK(hex(segs[0].ulpdu) == hex(terminate_ulpdu(code, m, dd, r, offending, d.cfg.version)));
    CHECK(qp().state() == QpState::Error);
    CHECK(qp().wants_disconnect());
    REQUIRE(qp().error().has_value());
    CHECK(qp().error()->code == code);
    CHECK_FALSE(qp().error()->remote);
    expect_flushed();
    expect_dropped();
  }
  // Shorthands for the Fig. 10 header sets.
  void expect_ddp_term(const Bytes& off, TermCode code) { expect_terminate(off, code, 1, 1, 0); }
  void expect_rdma_term(const Bytes& off, TermCode code) { expect_terminate(off, code, 1, 1, 1); }
  void expect_bare_term(const Bytes& off, TermCode code) { expect_terminate(off, code, 0, 0, 0); }

  // Nothing wrong: no Terminate, still RTS.
  void expect_accepted() {
    CHECK(qp().state() == QpState::Rts);
    CHECK_FALSE(qp().error().has_value());
  }
};

QpConfig cfg7306() {
  QpConfig c = Dut::dut_cfg();
  c.rfc7306 = true;
  return c;
}

} // namespace

TEST_CASE("HX-037 ULPDU shorter than a DDP header: L1/E0/0x00 without headers", "[qp]") {
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

TEST_CASE("HX-037 ULPDU shorter than the RDMAP header its opcode needs: L0/E2/0xFF", "[qp]") {
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

TEST_CASE("HX-050 DDP version other than the negotiated one: L1/E1/0x04 or L1/E2/0x06", "[qp]") {
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
          "[qp]") {
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
    c.version = kVersionRdmac;
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
    ca.version = cb.version = kVersionRdmac;
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
          "[qp]") {
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

TEST_CASE("HX-052 Write to an unknown, invalidated or deregistered STag: L1/E1/0x00", "[qp]") {
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

TEST_CASE("HX-053 Write to an STag of another PD or bound to another stream: L1/E1/0x02", "[qp]") {
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

TEST_CASE("DDP-081 an STag bound to this stream is usable", "[qp]") {
  Hostile h;
  REQUIRE(h.d.mem.associate(h.w.stag, h.d.cfg.qp_id));
  h.d.feed(ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(0)), {}, pattern(16, 4)));
  h.expect_accepted();
  CHECK(slice(h.w.data, 0, 16) == pattern(16, 4));
}

TEST_CASE("HX-054 Write outside the registered range: L1/E1/0x01, nothing placed", "[qp]") {
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

TEST_CASE("HX-054 Write exactly filling the end of the range is accepted", "[qp]") {
  Hostile h;
  h.d.feed(ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(248)), {}, pattern(8, 5)));
  h.expect_accepted();
  CHECK(slice(h.w.data, 248, 8) == pattern(8, 5));
}

TEST_CASE("HX-055 Write whose TO + length wraps 2^64: L1/E1/0x03", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u = ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, 0xfffffffffffffff8ull), {}, pattern(16));
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  h.expect_ddp_term(u, term::ddp_tagged_to_wrap);
}

TEST_CASE("HX-056 Write into an STag without remote write: L0/E1/0x02 (C-09)", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u = ulpdu(tagged(Opcode::RdmaWrite, h.ro.stag, h.ro.to(0)), {}, pattern(16));
  h.d.feed(u);
  CHECK(all_zero(h.ro.data));
  h.expect_ddp_term(u, term::rdmap_access_rights);
}

TEST_CASE("HX-057 zero-length tagged segment: garbage STag/TO not checked", "[qp]") {
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

TEST_CASE("HX-058 untagged QN not used by RDMAP: L1/E2/0x01", "[qp]") {
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

TEST_CASE("HX-059 Send with no receive buffer posted (zero-length too, C-10): L1/E2/0x02", "[qp]") {
  Hostile h;
  h.arm(false, true);
  const std::size_t n = GENERATE(0, 8);
  Bytes u = ulpdu(untagged(Opcode::Send, 1), {}, pattern(n));
  h.d.feed(u);
  h.expect_ddp_term(u, term::ddp_untagged_no_buffer);
}

TEST_CASE("HX-059 with an SRQ: a far-future MSN does not drain it (HX-060/HX-104)", "[qp]") {
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

TEST_CASE("HX-060 MSN outside the posted range (old, skipped, far future): L1/E2/0x03", "[qp]") {
  Hostile h;
  h.arm();
  const std::uint32_t msn = GENERATE(0u, 3u, 0x80000001u, 0xffffffffu);
  Bytes u = ulpdu(untagged(Opcode::Send, msn), {}, pattern(8));
  h.d.feed(u);
  CHECK(all_zero(h.rbuf.data));
  h.expect_ddp_term(u, term::ddp_untagged_msn_range);
}

TEST_CASE("HX-060 Read Request with an MSN out of order: L1/E2/0x03", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u = ulpdu(untagged(Opcode::RdmaReadRequest, 2), rr_bytes({1, 0, 8, h.w.stag, h.w.to(0)}));
  h.d.feed(u);
  h.expect_ddp_term(u, term::ddp_untagged_msn_range);
}

TEST_CASE("HX-061 MO beyond the receive buffer: L1/E2/0x04", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u = ulpdu(untagged(Opcode::Send, 1, 300), {}, pattern(8));
  h.d.feed(u);
  CHECK(all_zero(h.rbuf.data));
  h.expect_ddp_term(u, term::ddp_untagged_invalid_mo);
}

TEST_CASE("HX-062 Send larger than the receive buffer: L1/E2/0x05, nothing placed", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u;
  SECTION("257 octets into 256") { u = ulpdu(untagged(Opcode::Send, 1), {}, pattern(257)); }
  SECTION("MO 250 + 8 octets") { u = ulpdu(untagged(Opcode::Send, 1, 250), {}, pattern(8)); }
  h.d.feed(u);
  CHECK(all_zero(h.rbuf.data));
  h.expect_ddp_term(u, term::ddp_untagged_too_long);
}

TEST_CASE("HX-063 a duplicated segment is placed again but the message delivered once", "[qp]") {
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

TEST_CASE("HX-070 RDMAP version other than the negotiated one: L0/E2/0x05", "[qp]") {
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

TEST_CASE("HX-071 reserved opcodes: L0/E2/0x06", "[qp]") {
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

TEST_CASE("OX-06 RFC 7306 opcodes at a peer without RFC 7306: L0/E2/0x06", "[qp]") {
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

TEST_CASE("HX-072 opcode inconsistent with the T bit or the QN: L0/E2/0x06", "[qp]") {
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

// ---- Read Requests (RFC 5040 §5.2.1, §7.2): Terminate with the RDMA header (R) --------

namespace {
Bytes read_request(std::uint32_t src_stag, std::uint64_t src_to, std::uint32_t size,
                   std::uint32_t msn = 1) {
  return ulpdu(untagged(Opcode::RdmaReadRequest, msn),
               rr_bytes({0xabcd0001, 0x0102030405060708ull, size, src_stag, src_to}));
}
} // namespace

TEST_CASE("HX-074 Read Request with an invalid source STag: L0/E1/0x00, M D R, no Response",
          "[qp]") {
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

TEST_CASE("HX-075 Read Request source STag of another PD or stream: L0/E1/0x03 (C-08)", "[qp]") {
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

TEST_CASE("HX-076 Read Request source range outside the region: L0/E1/0x01", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u;
  SECTION("SrcTO below base") { u = read_request(h.w.stag, h.w.base - 1, 8); }
  SECTION("SrcTO + size one past the end") { u = read_request(h.w.stag, h.w.to(200), 57); }
  SECTION("huge size") { u = read_request(h.w.stag, h.w.to(0), 0xffffffffu); }
  h.d.feed(u);
  h.expect_rdma_term(u, term::rdmap_base_bounds);
}

TEST_CASE("HX-077 Read Request whose SrcTO + size wraps: L0/E1/0x04", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u = read_request(h.w.stag, 0xfffffffffffffffcull, 8);
  h.d.feed(u);
  h.expect_rdma_term(u, term::rdmap_to_wrap);
}

TEST_CASE("HX-078 Read Request from a region without remote read: L0/E1/0x02", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u = read_request(h.rbuf.stag, h.rbuf.to(0), 8);
  h.d.feed(u);
  h.expect_rdma_term(u, term::rdmap_access_rights);
}

TEST_CASE("HX-079 zero-length Read Request: garbage source not validated, zero-length Response",
          "[qp]") {
  Hostile h;
  h.d.feed(read_request(0xdeadbeef, 0xffffffffffffffffull, 0));
  h.expect_accepted();
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 1);
  // T=1 L=1 DV=1, RV=1 Read Response, the Request's sink STag and TO copied verbatim.
  CHECK(hex(segs[0].ulpdu) == "c142abcd00010102030405060708");
  h.expect_accepted();
}

TEST_CASE("RD-003 valid Read Request answered from the source region", "[qp]") {
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

TEST_CASE("HX-080 Read Request with trailing payload: L0/E2/0xFF", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u = cat(read_request(h.w.stag, h.w.to(0), 8), pattern(4));
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_op_unspecified);
}

TEST_CASE("HX-081 more Read Requests than IRD: L1/E2/0x02 on the first one over (IR-07)", "[qp]") {
  QpConfig c = Dut::dut_cfg();
  c.ird = 2;
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

TEST_CASE("HX-082 unsolicited or mismatched Read Response", "[qp]") {
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

// ---- Send with Invalidate (RFC 5040 §5.3, §7.2; C-05, C-07) ------------------------------

namespace {
Bytes send_inv(std::uint32_t stag, bool se = false) {
  DdpHeader s = untagged(se ? Opcode::SendSeInvalidate : Opcode::SendInvalidate, 1);
  s.inval_stag = stag;
  return ulpdu(s, {}, pattern(8, 1));
}
} // namespace

TEST_CASE("HX-083 Send with Invalidate naming an invalid STag: L0/E1/0x00, M D, no R", "[qp]") {
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
          "[qp]") {
  Hostile h;
  h.arm();
  Bytes u = send_inv(h.other.stag);
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_stag_cannot_invalidate);
  CHECK(h.d.mem.find(h.other.stag)->valid);
}

TEST_CASE("HX-085 Send with Invalidate for an STag bound to another stream: L0/E1/0x09", "[qp]") {
  Hostile h;
  h.arm();
  REQUIRE(h.d.mem.associate(h.w.stag, 4321));
  Bytes u = send_inv(h.w.stag);
  h.d.feed(u);
  h.expect_ddp_term(u, term::rdmap_stag_cannot_invalidate);
  CHECK(h.d.mem.find(h.w.stag)->valid);
}

TEST_CASE("SD-005 Send with Invalidate of a PD-wide or own-stream STag invalidates it", "[qp]") {
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
  CHECK_FALSE(h.d.mem.find(h.w.stag)->valid);
}

// ---- RFC 7306 hostile input -----------------------------------------------------------

TEST_CASE("HX-087 Immediate Data with other than 8 octets: L0/E2/0xFF", "[qp]") {
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
          "[qp]") {
  Hostile h(cfg7306());
  h.arm();
  const std::uint64_t off = GENERATE(1, 4, 7, 12);
  Bytes u = atomic_request(0, h.w.stag, h.w.to(off), 1);
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  h.expect_ddp_term(u, term::rdmap_catastrophic_stream);
}

TEST_CASE("HX-089 Atomic Request with an unsupported AOpCode: L0/E2/0x06", "[qp]") {
  Hostile h(cfg7306());
  h.arm();
  const std::uint8_t aop = GENERATE(1, 3, 0xf);
  Bytes u = atomic_request(aop, h.w.stag, h.w.to(0), 1);
  h.d.feed(u);
  CHECK(all_zero(h.w.data));
  h.expect_ddp_term(u, term::rdmap_unexpected_opcode);
}

TEST_CASE("HX-090 Atomic Request with a bad STag, bounds or rights: L0/E1 codes", "[qp]") {
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

TEST_CASE("EXT-005 masked FetchAdd and CompareSwap from a raw Atomic Request", "[qp]") {
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

TEST_CASE("HX-091 unsolicited or mismatched Atomic Response: L0/E2/0x06", "[qp]") {
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

// ---- Terminate received (RFC 5040 §5.4) -------------------------------------------------

namespace {
Bytes terminate_from_peer(const Bytes& body, std::uint32_t msn = 1, bool last = true) {
  return ulpdu(untagged(Opcode::Terminate, msn, 0, last), body);
}
Bytes term_body(std::uint8_t b0, std::uint8_t code, std::uint8_t hdrct, const Bytes& rest = {}) {
  return cat(Bytes{std::byte{b0}, std::byte{code}, std::byte{hdrct}, std::byte{0}}, rest);
}
} // namespace

TEST_CASE("HX-095 Terminate received: WRs complete in error, state Error, no reply", "[qp]") {
  Hostile h;
  h.arm();
  Bytes body;
  SECTION("DDP tagged invalid STag with M and D (variable layout)") {
    Bytes hdr = ulpdu(tagged(Opcode::RdmaWrite, 0x1234, 0));
    body = term_body(0x11, 0x00, 0xc0, cat(Bytes{std::byte{0}, std::byte{30}}, hdr));
  }
  SECTION("same code in the fixed, zero-padded layout (C-06)") {
    body = term_body(0x11, 0x00, 0x00, Bytes(2 + 18 + 28));
  }
  h.d.feed(terminate_from_peer(body));
  CHECK(h.qp().state() == QpState::Error);
  CHECK(h.qp().wants_disconnect());
  REQUIRE(h.qp().error().has_value());
  CHECK(h.qp().error()->remote);
  CHECK(h.qp().error()->code == term::ddp_tagged_invalid_stag);
  CHECK(h.d.drain().empty());
  h.expect_flushed(WcStatus::RemoteAccess);
  // HX-092: whatever the peer sends after its Terminate is dropped.
  h.expect_dropped();
}

TEST_CASE("HX-095 the remote code maps onto the first WR's completion status", "[qp]") {
  struct Row {
    std::uint8_t b0, code;
    WcStatus st;
  };
  const Row row = GENERATE(
      Row{0x12, 0x05, WcStatus::RemoteInvalidRequest}, Row{0x02, 0x06, WcStatus::RemoteOperation},
      Row{0x01, 0x02, WcStatus::RemoteAccess}, Row{0x20, 0x02, WcStatus::Fatal});
  Hostile h;
  h.arm();
  h.d.feed(terminate_from_peer(term_body(row.b0, row.code, 0)));
  REQUIRE(h.qp().error().has_value());
  CHECK(h.qp().error()->code == TermCode{static_cast<TermLayer>(row.b0 >> 4),
                                         static_cast<std::uint8_t>(row.b0 & 0xf), row.code});
  CHECK(h.d.drain().empty());
  h.expect_flushed(row.st);
}

TEST_CASE("HX-092 a Send after the peer's own Terminate is not delivered", "[qp]") {
  Hostile h;
  h.arm(true, false);
  Bytes both = cat(h.d.frame(terminate_from_peer(term_body(0x02, 0x06, 0))),
                   h.d.frame(ulpdu(untagged(Opcode::Send, 1), {}, pattern(8))));
  h.d.feed_raw(both);
  auto cq = drain_cq(h.qp());
  REQUIRE(cq.size() == 1);
  CHECK(cq[0].status == WcStatus::Flushed);
  CHECK(all_zero(h.rbuf.data));
  CHECK(h.d.drain().empty());
}

TEST_CASE("HX-093 malformed Terminate: surfaced, never answered", "[qp]") {
  Hostile h;
  h.arm();
  Bytes u;
  SECTION("D set but no DDP header follows") {
    u = terminate_from_peer(term_body(0x11, 0x00, 0x40));
  }
  SECTION("R set but the RDMA header is cut short") {
    u = terminate_from_peer(term_body(0x01, 0x00, 0x20, Bytes(10)));
  }
  SECTION("unknown layer") { u = terminate_from_peer(term_body(0x51, 0x00, 0)); }
  SECTION("unknown RDMAP EType") { u = terminate_from_peer(term_body(0x05, 0x00, 0)); }
  SECTION("LLP EType other than 0") { u = terminate_from_peer(term_body(0x21, 0x01, 0)); }
  SECTION("shorter than the control field") {
    u = terminate_from_peer(Bytes{std::byte{0x11}, std::byte{0}});
  }
  SECTION("longer than any Terminate") {
    u = terminate_from_peer(term_body(0x11, 0x00, 0, Bytes(100)));
  }
  SECTION("not the last segment") { u = terminate_from_peer(term_body(0x11, 0, 0), 1, false); }
  h.d.feed(u);
  CHECK(h.qp().state() == QpState::Error);
  CHECK(h.d.drain().empty());
  CHECK(h.qp().wants_disconnect());
  REQUIRE(h.qp().error().has_value());
  CHECK(h.qp().error()->remote);
  CHECK(h.qp().error()->code == term::rdmap_op_unspecified);
  h.expect_flushed(WcStatus::RemoteOperation);
  h.expect_dropped();
}

TEST_CASE("HX-094 only the first error is reported", "[qp]") {
  Hostile h;
  h.arm();
  Bytes first = ulpdu(tagged(Opcode::RdmaWrite, 0x00fff000, 0), {}, pattern(8));
  Bytes second = ulpdu(untagged(Opcode::Send, 7), {}, pattern(8));
  SECTION("two bad segments in one read") {
    h.d.feed_raw(cat(h.d.frame(first), h.d.frame(second)));
  }
  SECTION("a bad segment, then a local failure before the Terminate went out") {
    h.d.feed(first);
    h.qp().fail(term::rdmap_local_catastrophic, "later local trouble");
  }
  SECTION("a bad segment, then the peer's Terminate") {
    h.d.feed(first);
    h.d.feed(terminate_from_peer(term_body(0x02, 0x06, 0)));
  }
  h.expect_ddp_term(first, term::ddp_tagged_invalid_stag);
}

TEST_CASE("HX-094 an error found on delivery (Read Request source) is also the only one", "[qp]") {
  Hostile h;
  h.arm();
  Bytes first = read_request(0x00fff000, 0, 8);
  h.d.feed_raw(cat(h.d.frame(first), h.d.frame(ulpdu(untagged(Opcode::Send, 9)))));
  h.expect_rdma_term(first, term::rdmap_invalid_stag);
}

// ---- MPA-level errors and the connection going away ------------------------------------

TEST_CASE("HX-030 CRC error: L2/E0/0x02 without headers, nothing delivered", "[qp]") {
  Hostile h;
  h.arm();
  Bytes f = h.d.frame(ulpdu(untagged(Opcode::Send, 1), {}, pattern(8)));
  f.back() ^= std::byte{0x01};
  h.d.feed_raw(f);
  CHECK(h.qp().state() == QpState::Terminate);
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 1);
  CHECK(hex(segs[0].ulpdu) == hex(terminate_ulpdu(term::mpa_crc_error, 0, 0, 0, {})));
  REQUIRE(h.qp().error());
  CHECK(h.qp().error()->code == term::mpa_crc_error);
  h.expect_flushed();
  h.expect_dropped();
}

TEST_CASE("HX-036 ULPDU_Length over 64768: L2/E0/0x05, never buffered", "[qp]") {
  Hostile h;
  h.arm();
  h.d.feed_raw(Bytes{std::byte{0xff}, std::byte{0xff}, std::byte{0x41}, std::byte{0x43}});
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 1);
  CHECK(hex(segs[0].ulpdu) == hex(terminate_ulpdu(term::mpa_local_catastrophic, 0, 0, 0, {})));
  h.expect_flushed();
}

// Found against siw (tests/interop/siw, large-fpdu-on): with its private large-FPDU flag
// negotiated, siw sizes FPDUs to its TCP GSO segment (mss * gso_segs, siw_qp_tx.c), so a
// 64 KiB RDMA Write arrives as one FPDU of about 65 KB, above RFC 5044's 64768.
TEST_CASE("siw's large-FPDU flag negotiated: ULPDU_Length up to 65535 is placed (HX-036 "
          "without it)",
          "[qp]") {
  const bool large = GENERATE(false, true);
  QpConfig c = Dut::dut_cfg();
  c.large_fpdu = large;
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

TEST_CASE("siw's large-FPDU flag: qp_config_from_mpa carries it", "[qp]") {
  MpaResult r;
  r.large_fpdu = true;
  CHECK(qp_config_from_mpa(r, MpaRole::Responder, 1448).large_fpdu);
  r.large_fpdu = false;
  CHECK_FALSE(qp_config_from_mpa(r, MpaRole::Responder, 1448).large_fpdu);
}

TEST_CASE("HX-038 peer closed or reset, mid-FPDU or not: outstanding WRs flushed, no Terminate",
          "[qp]") {
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

TEST_CASE("HX-038 connection lost while our Terminate is queued: it is dropped", "[qp]") {
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

TEST_CASE("DDP-064 a partly written FPDU is finished (from a copy) before the Terminate", "[qp]") {
  Hostile h;
  h.arm(false, false);
  SendWr s = send_wr(1, {});
  s.inline_data = pattern(200, 4);
  s.is_inline = true;
  REQUIRE(h.qp().post_send(std::move(s)) == PostError::None);
  SendWr s2 = send_wr(2, {h.w.all()}); // queued behind it, never started on the wire
  REQUIRE(h.qp().post_send(std::move(s2)) == PostError::None);
  std::vector<ConstBytes> iov;
  h.qp().tx_gather(iov);
  Bytes head;
  for (ConstBytes b : iov)
    head.insert(head.end(), b.begin(), b.end());
  REQUIRE(head.size() > 250);
  h.qp().tx_advance(50);
  Bytes bad = ulpdu(tagged(Opcode::RdmaWrite, 0x00fff000, 0), {}, pattern(8));
  h.d.feed(bad);
  // The flushed WR's memory goes away; the rest of its FPDU must not need it.
  auto cq = drain_cq(h.qp());
  REQUIRE(cq.size() == 2);
  check_completion(cq[0], 1, WcStatus::Flushed, WcOpcode::Send, 200, false);
  check_completion(cq[1], 2, WcStatus::Flushed, WcOpcode::Send, 256, false);
  Bytes stream = cat(slice(head, 0, 50), h.d.drain());
  auto segs = h.d.segs(stream);
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].h.opcode == static_cast<std::uint8_t>(Opcode::Send));
  CHECK(segs[0].payload() == pattern(200, 4));
  CHECK(hex(segs[1].ulpdu) == hex(terminate_ulpdu(term::ddp_tagged_invalid_stag, 1, 1, 0, bad)));
  CHECK(h.qp().state() == QpState::Error);
}

TEST_CASE("HX-018 a responder that has not heard from the initiator sends no Terminate", "[qp]") {
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

// =====================================================================================
// Local actions, configuration, and a randomized soak
// =====================================================================================

TEST_CASE("RDMAP-041 fail(): local catastrophic error, Terminate L0/E0 without headers", "[qp]") {
  Hostile h;
  h.arm();
  h.qp().fail(term::rdmap_local_catastrophic, "the RNIC caught fire");
  h.expect_bare_term({}, term::rdmap_local_catastrophic);
}

TEST_CASE("DDP-064 flush(): local abort, every WR flushed, no Terminate", "[qp]") {
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

TEST_CASE("RD-003 Read source deregistered while its Response is sent: rest not sent, Terminate",
          "[qp]") {
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

TEST_CASE("IR-01 qp_config_from_mpa carries the negotiated options into the QP", "[qp]") {
  MpaResult r;
  r.version = kVersionIetf;
  r.crc = false;
  r.markers_tx = true;
  r.markers_rx = false;
  r.ird = 5;
  r.ord = 6;
  r.p2p = true;
  r.rtr = RtrType::Write;
  QpConfig ci = qp_config_from_mpa(r, MpaRole::Initiator, 50);
  CHECK(ci.initiator);
  CHECK(ci.mulpdu == kMinMulpdu);
  CHECK_FALSE(ci.crc);
  CHECK(ci.markers_tx);
  CHECK_FALSE(ci.markers_rx);
  CHECK(ci.ird == 5);
  CHECK(ci.ord == 6);
  REQUIRE(ci.rtr.has_value());
  CHECK(*ci.rtr == RtrType::Write);
  CHECK_FALSE(ci.expect_rtr);
  QpConfig cr = qp_config_from_mpa(r, MpaRole::Responder, 100000);
  CHECK_FALSE(cr.initiator);
  CHECK(cr.mulpdu == kMaxUlpdu);
  CHECK_FALSE(cr.rtr.has_value());
  CHECK(cr.expect_rtr);
  r.p2p = false;
  QpConfig cn = qp_config_from_mpa(r, MpaRole::Responder, 1452);
  CHECK_FALSE(cn.expect_rtr);
  CHECK(cn.mulpdu == 1452);
}

TEST_CASE("SD-001 posting limits: SGE count, queue depths, ORD 0", "[qp]") {
  QpConfig c = Dut::dut_cfg();
  c.max_sge = 2;
  c.sq_depth = 2;
  c.rq_depth = 1;
  c.ord = 0;
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

TEST_CASE("ORD-12 soak: random Sends, Writes, Reads, atomics both ways; order and data hold",
          "[qp]") {
  const Io io = GENERATE(Io::Feed, Io::Chunks, Io::Partial);
  const std::uint64_t seed = GENERATE(range(1, 6));
  std::mt19937_64 rng(seed * 7919 + static_cast<unsigned>(io));
  const std::size_t mulpdus[] = {128, 200, 1452, 9000};
  QpConfig ca = initiator_cfg(mulpdus[rng() % 4]), cb = responder_cfg(mulpdus[rng() % 4]);
  ca.crc = cb.crc = rng() % 2;
  ca.markers_tx = cb.markers_rx = rng() % 2;
  cb.markers_tx = ca.markers_rx = rng() % 2;
  ca.rfc7306 = cb.rfc7306 = true;
  ca.ord = cb.ird = static_cast<std::uint16_t>(1 + rng() % 4);
  cb.ord = ca.ird = static_cast<std::uint16_t>(1 + rng() % 4);
  INFO("seed " << seed << " io " << io_name(io) << " mulpdu " << ca.mulpdu << "/" << cb.mulpdu
               << " crc " << ca.crc << " markers " << ca.markers_tx << cb.markers_tx << " ord "
               << ca.ord << "/" << cb.ord);
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

TEST_CASE("HX-030 a corrupted FPDU whose garbled header also looks invalid is a CRC error "
          "(MPA-004)",
          "[qp]") {
  Hostile h;
  h.arm();
  Bytes f;
  SECTION("STag bit flipped in a Write") {
    f = h.d.frame(ulpdu(tagged(Opcode::RdmaWrite, h.w.stag, h.w.to(0)), {}, pattern(16)));
    f[2 + 2] ^= std::byte{0x80};
  }
  SECTION("opcode bit flipped in a Send") {
    f = h.d.frame(ulpdu(untagged(Opcode::Send, 1), {}, pattern(16)));
    f[2 + 1] ^= std::byte{0x08};
  }
  SECTION("ULPDU_Length cut to 10") {
    f = h.d.frame(ulpdu(untagged(Opcode::Send, 1), {}, pattern(16)));
    f[1] = std::byte{10};
    f.resize(2 + 10 + 0 + 4);
  }
  h.d.feed_raw(f);
  CHECK(all_zero(h.w.data));
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 1);
  CHECK(hex(segs[0].ulpdu) == hex(terminate_ulpdu(term::mpa_crc_error, 0, 0, 0, {})));
  h.expect_flushed();
}

TEST_CASE("RDMAP-041 receive buffer with a bad lkey: that WR fails, Terminate L1/E0 (local)",
          "[qp]") {
  Hostile h;
  const bool access_only = GENERATE(false, true);
  Sge bad = access_only ? h.ro.sge(0, 64) // exists, but no local write
                        : Sge{h.rbuf.base, 64, 0x00fff000};
  REQUIRE(h.qp().post_recv(recv_wr(100, {bad})) == PostError::None);
  h.armed_recv = false;
  h.d.feed(ulpdu(untagged(Opcode::Send, 1), {}, pattern(8)));
  CHECK(all_zero(h.ro.data));
  CHECK(h.qp().state() == QpState::Terminate);
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 1);
  CHECK(hex(segs[0].ulpdu) == hex(terminate_ulpdu(term::ddp_local_catastrophic, 0, 0, 0, {})));
  auto cq = drain_cq(h.qp());
  REQUIRE(cq.size() == 1);
  check_completion(cq[0], 100, access_only ? WcStatus::LocalAccess : WcStatus::LocalProtection,
                   WcOpcode::Recv, 0, true);
}
