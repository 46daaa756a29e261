// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Terminate and the errors that lead to one (RFC 5040 §5.4, §6; RFC 5044 §8): a
// Terminate received from the peer (HX-092..095), MPA-level errors (HX-030, HX-036), a
// partly written FPDU finished before our Terminate (DDP-064), and local errors
// (RDMAP-041, RDMAP-042).
#include "catch_compat.hpp"
#include "iwarp/crc32c.hpp"
#include "qp_harness.hpp"

using namespace qpt;

// ---- Terminate received (RFC 5040 §5.4) --------------------------------------------------

namespace {
Bytes terminate_from_peer(const Bytes& body, std::uint32_t msn = 1, bool last = true) {
  return ulpdu(untagged(Opcode::Terminate, msn, 0, last), body);
}
Bytes term_body(std::uint8_t b0, std::uint8_t code, std::uint8_t hdrct, const Bytes& rest = {}) {
  return cat(Bytes{std::byte{b0}, std::byte{code}, std::byte{hdrct}, std::byte{0}}, rest);
}
} // namespace

TEST_CASE("HX-095 Terminate received: WRs complete in error, state Error, no reply",
          "[qp][terminate][hostile]") {
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

TEST_CASE("HX-095 the remote code maps onto the first WR's completion status",
          "[qp][terminate][hostile]") {
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

TEST_CASE("HX-092 a Send after the peer's own Terminate is not delivered",
          "[qp][terminate][hostile]") {
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

TEST_CASE("HX-093 malformed Terminate: surfaced, never answered", "[qp][terminate][hostile]") {
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

TEST_CASE("HX-094 only the first error is reported", "[qp][terminate][hostile]") {
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

TEST_CASE("HX-094 an error found on delivery (Read Request source) is also the only one",
          "[qp][terminate][hostile]") {
  Hostile h;
  h.arm();
  Bytes first = read_request(0x00fff000, 0, 8);
  h.d.feed_raw(cat(h.d.frame(first), h.d.frame(ulpdu(untagged(Opcode::Send, 9)))));
  h.expect_rdma_term(first, term::rdmap_invalid_stag);
}

// ---- MPA-level errors --------------------------------------------------------------------

TEST_CASE("HX-030 CRC error: L2/E0/0x02 without headers, nothing delivered",
          "[qp][terminate][hostile]") {
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

TEST_CASE("HX-036 ULPDU_Length over 64768: L2/E0/0x05, never buffered",
          "[qp][terminate][hostile]") {
  Hostile h;
  h.arm();
  h.d.feed_raw(Bytes{std::byte{0xff}, std::byte{0xff}, std::byte{0x41}, std::byte{0x43}});
  auto segs = h.d.segs(h.d.drain());
  REQUIRE(segs.size() == 1);
  CHECK(hex(segs[0].ulpdu) == hex(terminate_ulpdu(term::mpa_local_catastrophic, 0, 0, 0, {})));
  h.expect_flushed();
}

TEST_CASE("DDP-064 a partly written FPDU is finished (from a copy) before the Terminate",
          "[qp][terminate][hostile]") {
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

TEST_CASE("HX-030 a corrupted FPDU whose garbled header also looks invalid is a CRC error "
          "(MPA-004)",
          "[qp][terminate]") {
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

// ---- local errors ------------------------------------------------------------------------

TEST_CASE("RDMAP-042 local error building a message: WR fails, Terminate L0/E0 without headers",
          "[qp][terminate]") {
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

TEST_CASE("RDMAP-041 fail(): local catastrophic error, Terminate L0/E0 without headers",
          "[qp][terminate]") {
  Hostile h;
  h.arm();
  h.qp().fail(term::rdmap_local_catastrophic, "the RNIC caught fire");
  h.expect_bare_term({}, term::rdmap_local_catastrophic);
}

TEST_CASE("RDMAP-041 receive buffer with a bad lkey: that WR fails, Terminate L1/E0 (local)",
          "[qp][terminate]") {
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
