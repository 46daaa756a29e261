// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA startup, the interop matrix of requirements §6.1-§6.3: MPA revisions and enhanced mode
// (IM-), markers x CRC (MC-), private data and rejection (PD-), played by two MpaStartup
// endpoints or by one endpoint and a scripted peer that writes exact octets (mpa_harness.hpp).
#include "catch_compat.hpp"
#include "mpa_harness.hpp"

using namespace mpat;

// ==== 6.1 MPA revision / enhanced-mode combinations ====================================

TEST_CASE("IM-01 Rev1 initiator vs RFC 5044 responder: normal rev1 connection",
          "[mpa][negotiation]") {
  Link l = run(rev1(), rev1(), text("hello"));
  require_established(l.i);
  require_established(l.r);
  // "MPA ID Req Frame", M=0 C=1 R=0 S=0, Rev 1, PD_Length 5.
  CHECK(hex(l.request) ==
        hex(text("MPA ID Req Frame") +
            Bytes{std::byte{0x40}, std::byte{1}, std::byte{0}, std::byte{5}} + text("hello")));
  CHECK(hex(l.reply) == hex(text("MPA ID Rep Frame") +
                            Bytes{std::byte{0x40}, std::byte{1}, std::byte{0}, std::byte{0}}));
  CHECK(l.r.request().private_data == text("hello"));
  CHECK(l.r.result().peer_private_data == text("hello"));
  for (const MpaStartup* m : {&l.i, &l.r}) {
    CHECK(m->result().conn.version == kVersionIetf);
    CHECK(m->result().peer_rev == 1);
    CHECK_FALSE(m->result().enhanced);
    CHECK(m->result().conn.crc);
  }
}

TEST_CASE("IM-02 Rev1 initiator vs RFC 6581 responder: unenhanced Rev1 Reply, client-server",
          "[mpa][negotiation]") {
  Link l = run(rev1(), MpaPolicy{}, {}, [](MpaStartup& r) { r.accept(text("ok")); });
  require_established(l.i);
  require_established(l.r);
  CHECK(octet(l.reply, 16) == kC); // S=0
  CHECK(octet(l.reply, 17) == 1);
  CHECK(word(l.reply, 18) == 2); // the ULP's 2 octets, no enhanced data
  CHECK(l.i.result().peer_private_data == text("ok"));
  CHECK_FALSE(l.i.result().enhanced);
  CHECK_FALSE(l.i.result().conn.p2p); // client-server: the initiator's first FPDU is ULP data
  CHECK_FALSE(l.i.result().conn.peer_ird);
}

TEST_CASE("IM-03 EMPA-008 Rev2 S=1 vs rev2: enhanced Reply with IRD/ORD", "[mpa][negotiation]") {
  MpaPolicy ip, rp;
  ip.ird = 4;
  ip.ord = 3;
  rp.ird = 5;
  rp.ord = 2;
  Link l = run(ip, rp, text("abc"));
  require_established(l.i);
  require_established(l.r);
  CHECK(octet(l.request, 16) == (kC | kS));
  CHECK(octet(l.request, 17) == 2);
  CHECK(word(l.request, 18) == 7); // 4 enhanced + 3
  CHECK(word(l.request, 20) == 4); // A=0 B=0 IRD 4
  CHECK(word(l.request, 22) == 3); // C=0 D=0 ORD 3
  CHECK(octet(l.reply, 16) == (kC | kS));
  CHECK(octet(l.reply, 17) == 2);
  CHECK(word(l.reply, 18) == 4);
  CHECK(word(l.reply, 20) == 5);                    // responder IRD 5 >= initiator ORD 3
  CHECK(word(l.reply, 22) == 2);                    // responder ORD 2 <= initiator IRD 4
  CHECK(l.r.request().private_data == text("abc")); // enhanced data hidden from the ULP
  CHECK(l.i.result().enhanced);
  CHECK(l.r.result().enhanced);
  CHECK(l.i.result().conn.ird == 4);
  CHECK(l.i.result().conn.ord == 3);
  CHECK(l.i.result().conn.peer_ird == 5);
  CHECK(l.i.result().conn.peer_ord == 2);
  CHECK(l.r.result().conn.peer_ird == 4);
  CHECK(l.r.result().conn.peer_ord == 3);
}

TEST_CASE("IM-04 EMPA-008 Rev2 S=0 vs rev2: accepted, unenhanced Reply", "[mpa][negotiation]") {
  MpaPolicy ip;
  ip.enhanced = false;
  Link l = run(ip, MpaPolicy{}, text("x"));
  CHECK(octet(l.request, 16) == kC);
  CHECK(octet(l.request, 17) == 2);
  CHECK(word(l.request, 18) == 1);
  require_established(l.r);
  require_established(l.i);
  CHECK(octet(l.reply, 16) == kC); // S=0
  CHECK(octet(l.reply, 17) == 1);
  CHECK_FALSE(l.r.result().enhanced);
  CHECK(l.r.request().private_data == text("x"));
  CHECK_FALSE(l.i.result().enhanced);
}

TEST_CASE("IM-05 Rev2 S=0 vs rev1-only responder: close + local error, retry Rev1 works",
          "[mpa][negotiation]") {
  MpaPolicy ip;
  ip.enhanced = false;
  Link l = run(ip, rev1());
  require_failed(l.r, term::mpa_invalid_frame, "MPA Request Rev 2 is not supported");
  CHECK(l.reply.empty());
  REQUIRE(l.i.state() == MpaState::AwaitReply);
  l.i.on_peer_closed();
  require_failed(l.i, term::mpa_tcp_closed, "peer closed TCP before sending the MPA Reply");
  // RFC 6581 §10: the initiator MAY retry with RFC 5044 MPA.
  Link retry = run(rev1(), rev1());
  require_established(retry.i);
  require_established(retry.r);
}

TEST_CASE("IM-06 EMPA-009 Rev2 S=1 vs rev1-only responder: closed as malformed, retry unenhanced",
          "[mpa][negotiation]") {
  Link l = run(p2p(), rev1());
  require_failed(l.r, term::mpa_invalid_frame, "Rev 2 is not supported");
  l.i.on_peer_closed();
  require_failed(l.i, term::mpa_tcp_closed, "peer closed TCP");
  // Retry unenhanced: IRD/ORD and P2P are left to the ULP.
  Link retry = run(rev1(), rev1());
  require_established(retry.i);
  CHECK_FALSE(retry.i.result().enhanced);
  CHECK_FALSE(retry.i.result().conn.peer_ird);
  CHECK_FALSE(retry.i.result().conn.p2p);
}

TEST_CASE("IM-07 Rev>=3 at a rev2 endpoint: close + local error, no silent downgrade",
          "[mpa][negotiation]") {
  for (std::uint8_t rev : {3, 4, 255}) {
    MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC, rev));
    require_failed(r, term::mpa_invalid_frame,
                   "MPA Request Rev " + std::to_string(rev) + " is not supported");
    CHECK(r.output().empty());
    MpaStartup i = initiator_vs(MpaPolicy{}, raw_reply(kC | kS, rev, enh(1, 1)));
    require_failed(i, term::mpa_invalid_frame,
                   "MPA Reply Rev " + std::to_string(rev) + " is not supported");
    CHECK(i.output().empty());
  }
}

TEST_CASE("IM-08 RDMAC Rev0 Request at a non-permissive IETF responder: Rev1 Reply, then close",
          "[mpa][negotiation]") {
  MpaStartup r = responder_vs(MpaPolicy{}, rdmac_request());
  require_failed(r, term::mpa_invalid_frame, "Rev 0 (RDMAC peer) but permissive mode is off");
  // IOP §5.2.1: the Reply says Rev 1 (R=1: no Full Operation with this peer).
  CHECK(hex(take(r)) == hex(raw_reply(kC | kR, 1)));
  CHECK_FALSE(r.error().terminate_sent);
}

TEST_CASE("IM-09 RDMAC Rev0 Request at a permissive responder: Rev0 M=1 C=1, V=0",
          "[mpa][negotiation]") {
  MpaPolicy rp;
  rp.permissive = true;
  rp.markers = false;
  rp.crc = false;
  MpaStartup r = responder_vs(rp, rdmac_request(text("pd")));
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK(r.request().rev == 0);
  CHECK(r.request().private_data == text("pd"));
  r.accept({});
  require_established(r);
  CHECK(hex(take(r)) == hex(raw_reply(kM | kC, 0)));
  CHECK(r.result().conn.version == kVersionRdmac);
  CHECK(r.result().peer_rev == 0);
  CHECK(r.result().conn.markers_tx);
  CHECK(r.result().conn.markers_rx);
  CHECK(r.result().conn.crc);
}

TEST_CASE("IM-10 Rev1 initiator vs RDMAC proxy Reply: non-permissive closes, permissive V=0",
          "[mpa][negotiation]") {
  SECTION("non-permissive") {
    MpaStartup i = initiator_vs(rev1(), rdmac_reply());
    require_failed(i, term::mpa_invalid_frame, "MPA Reply Rev 0 (RDMAC peer)");
    CHECK(i.output().empty());
  }
  SECTION("permissive") {
    MpaPolicy ip = ietf(true, false, false);
    MpaStartup i = initiator_vs(ip, rdmac_reply());
    require_established(i);
    CHECK(i.result().conn.version == kVersionRdmac);
    CHECK(i.result().conn.markers_tx);
    CHECK(i.result().conn.markers_rx);
    CHECK(i.result().conn.crc);
  }
}

TEST_CASE("IM-11 C-17 enhanced Request answered unenhanced: fallback only when policy allows",
          "[mpa][negotiation]") {
  const Bytes reply = GENERATE(raw_reply(kC, 1, text("r")), raw_reply(kC, 2, text("r")));
  SECTION("accept_unenhanced_reply (default): unenhanced fallback") {
    MpaPolicy ip = p2p();
    ip.ird = 3;
    ip.ord = 2;
    MpaStartup i = initiator_vs(ip, reply);
    require_established(i);
    CHECK_FALSE(i.result().enhanced);
    CHECK_FALSE(i.result().conn.p2p); // no RTR: left to the ULP
    CHECK_FALSE(i.result().conn.peer_ird);
    CHECK(i.result().conn.ird == 3);
    CHECK(i.result().conn.ord == 2);
    CHECK(i.result().peer_private_data == text("r"));
  }
  SECTION("strict: close") {
    MpaPolicy ip;
    ip.accept_unenhanced_reply = false;
    MpaStartup i = initiator_vs(ip, reply);
    require_failed(i, term::mpa_invalid_frame, "MPA Reply is not enhanced");
    CHECK(i.output().empty());
  }
}

TEST_CASE("IM-12 C-17 Rev1 Request with S=1: S treated as reserved, processed unenhanced",
          "[mpa][negotiation]") {
  const Bytes pd = enh(kA | 4, kCw | 4); // looks like enhanced data, but Rev 1
  MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC | kS, 1, pd));
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK_FALSE(r.request().enhanced);
  CHECK(r.request().private_data == pd); // all of it is ULP private data
  CHECK_FALSE(r.result().conn.peer_ird);
  r.accept({});
  require_established(r);
  const Bytes reply = take(r);
  CHECK(octet(reply, 16) == kC);
  CHECK(octet(reply, 17) == 1);
  CHECK(word(reply, 18) == 0);
  CHECK_FALSE(r.result().enhanced);
}

// ==== 6.2 Markers x CRC ===================================================================

namespace {
// One MC row: M and C of each side, then who inserts markers and whether CRC is on.
void check_mc(bool im, bool ic, bool rm, bool rc, bool crc_on) {
  Link l = run(rev1(im, ic), rev1(rm, rc));
  require_established(l.i);
  require_established(l.r);
  CHECK(octet(l.request, 16) == ((im ? kM : 0) | (ic ? kC : 0)));
  CHECK(octet(l.reply, 16) == ((rm ? kM : 0) | (rc ? kC : 0)));
  // RFC 5044 §7.1.1 (MPA-032): M in the Request asks for markers in R->I FPDUs.
  CHECK(l.i.result().conn.markers_rx == im);
  CHECK(l.r.result().conn.markers_tx == im);
  CHECK(l.r.result().conn.markers_rx == rm);
  CHECK(l.i.result().conn.markers_tx == rm);
  CHECK(l.i.result().conn.crc == crc_on);
  CHECK(l.r.result().conn.crc == crc_on);
}
} // namespace

TEST_CASE("MC-01 MPA-021 M0 C0 vs M0 C0: no markers, CRC off", "[mpa][negotiation]") {
  check_mc(false, false, false, false, false);
}
TEST_CASE("MC-02 M1 C0 vs M0 C0: markers R->I only, CRC off", "[mpa][negotiation]") {
  check_mc(true, false, false, false, false);
}
TEST_CASE("MC-03 M0 C0 vs M1 C0: markers I->R only, CRC off", "[mpa][negotiation]") {
  check_mc(false, false, true, false, false);
}
TEST_CASE("MC-04 M1 C1 vs M1 C1: markers both ways, CRC on", "[mpa][negotiation]") {
  check_mc(true, true, true, true, true);
}
TEST_CASE("MC-05 MPA-021 M0 C1 vs M0 C0: CRC on both ways", "[mpa][negotiation]") {
  // The responder's own preference is C=0, but it sees C=1 and says so in its Reply.
  Link l = run(rev1(false, true), rev1(false, false));
  require_established(l.i);
  CHECK(octet(l.reply, 16) == kC);
  CHECK(l.i.result().conn.crc);
  CHECK(l.r.result().conn.crc);
}
TEST_CASE("MC-06 MPA-021 M0 C0 vs M0 C1: CRC on both ways", "[mpa][negotiation]") {
  check_mc(false, false, false, true, true);
}
TEST_CASE("MC-07 always-CRC side receives C=0: replies C=1, CRC on both ways",
          "[mpa][negotiation]") {
  MpaPolicy always = rev1(false, false);
  always.crc_always = true;
  SECTION("responder") {
    Link l = run(rev1(false, false), always);
    CHECK(octet(l.request, 16) == 0);
    CHECK(octet(l.reply, 16) == kC);
    CHECK(l.i.result().conn.crc);
    CHECK(l.r.result().conn.crc);
  }
  SECTION("initiator") {
    Link l = run(always, rev1(false, false));
    CHECK(octet(l.request, 16) == kC);
    CHECK(l.i.result().conn.crc);
    CHECK(l.r.result().conn.crc);
  }
  SECTION("initiator against a scripted C=0 Reply") {
    MpaStartup i = initiator_vs(always, raw_reply(0, 1));
    require_established(i);
    CHECK(i.result().conn.crc);
  }
}

// ==== 6.3 Private data and rejection ========================================================

TEST_CASE("PD-01 PD_Length 0, 1, 511, 512 and 508 + 4 enhanced: handed over intact",
          "[mpa][negotiation]") {
  for (std::size_t n : {0, 1, 511, 512}) {
    INFO("PD " << n);
    const Bytes req_pd = pattern(n, 3), rep_pd = pattern(n, 5);
    Link l = run(rev1(), rev1(), req_pd, [&](MpaStartup& r) { r.accept(rep_pd); });
    require_established(l.i);
    CHECK(word(l.request, 18) == n);
    CHECK(l.r.result().peer_private_data == req_pd);
    CHECK(l.i.result().peer_private_data == rep_pd);
  }
  const Bytes req_pd = pattern(508, 7), rep_pd = pattern(508, 9);
  Link l = run(MpaPolicy{}, MpaPolicy{}, req_pd, [&](MpaStartup& r) { r.accept(rep_pd); });
  require_established(l.i);
  CHECK(word(l.request, 18) == 512);
  CHECK(word(l.reply, 18) == 512);
  CHECK(l.r.request().private_data == req_pd);
  CHECK(l.i.result().peer_private_data == rep_pd);
  // 509 octets of ULP data do not fit next to the enhanced data: local error at once.
  MpaStartup big = MpaStartup::initiator(MpaPolicy{}, pattern(509), t0);
  require_failed(big, term::mpa_local_catastrophic, "private data of 509 octets exceeds 508");
  CHECK(big.output().empty());
}

TEST_CASE("PD-02 PD_Length 513..65535: receiver closes at the header", "[mpa][negotiation]") {
  for (std::uint16_t len : {513, 600, 1000, 65535}) {
    INFO("PD_Length " << len);
    // Only the header arrives: the error must not wait for the private data.
    MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
    const Bytes header = raw_frame(MpaKind::Request, kC, 1, {}, len);
    CHECK(r.on_bytes(header) == header.size());
    require_failed(r, term::mpa_invalid_frame,
                   "MPA Request PD_Length " + std::to_string(len) + " exceeds 512");
    MpaStartup i = initiator_vs(rev1(), raw_frame(MpaKind::Reply, kC, 1, {}, len));
    require_failed(i, term::mpa_invalid_frame,
                   "MPA Reply PD_Length " + std::to_string(len) + " exceeds 512");
  }
}

TEST_CASE("PD-03 responder ULP rejects with PD: both exit MPA, TCP left open",
          "[mpa][negotiation]") {
  Link l =
      run(rev1(), rev1(), text("please"), [](MpaStartup& r) { r.reject(text("no such service")); });
  CHECK(l.r.state() == MpaState::Rejected);
  CHECK(l.i.state() == MpaState::Rejected);
  CHECK(octet(l.reply, 16) == (kC | kR));
  CHECK(octet(l.reply, 17) == 1);
  CHECK(l.i.reply().reject);
  CHECK(l.i.result().peer_private_data == text("no such service"));
  CHECK(l.i.deadline() == MpaClock::time_point::max());
  CHECK(l.r.deadline() == MpaClock::time_point::max());
}

TEST_CASE("PD-04 reject for insufficient initiator IRD: required ORD in the responder ORD",
          "[mpa][negotiation]") {
  MpaPolicy ip;
  ip.ird = 1;
  ip.ord = 4;
  MpaPolicy rp;
  rp.ird = 6;
  Link l = run(ip, rp, {}, [](MpaStartup& r) {
    REQUIRE(r.result().conn.peer_ird == 1); // the ULP sees the initiator IRD before deciding
    r.reject(text("need ORD 8"), 8);
  });
  CHECK(l.r.state() == MpaState::Rejected);
  REQUIRE(l.i.state() == MpaState::Rejected);
  CHECK(octet(l.reply, 16) == (kC | kR | kS));
  CHECK(octet(l.reply, 17) == 2);
  CHECK(word(l.reply, 20) == 6); // responder IRD
  CHECK(word(l.reply, 22) == 8); // required ORD (C-11: no TERM before Full Operation)
  // EMPA-022: the initiator passes IRD/ORD to its ULP for a Reject too.
  CHECK(l.i.result().conn.peer_ird == 6);
  CHECK(l.i.result().conn.peer_ord == 8);
  CHECK(l.i.result().peer_private_data == text("need ORD 8"));
  CHECK(l.i.output().empty());
}
