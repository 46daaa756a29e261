// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA startup, requirements §6.4: RFC 6581 peer-to-peer mode, the RTR message types (RT-) and
// the IRD/ORD negotiation (IR-), between two endpoints or against a scripted peer.
#include "catch_compat.hpp"
#include "mpa_harness.hpp"

using namespace mpat;

// ==== 6.4 RFC 6581 P2P / RTR and IRD/ORD =====================================================

TEST_CASE("RT-01 A=0 both: client-server, the responder sends nothing but the Reply",
          "[mpa][p2p]") {
  Link l = run(MpaPolicy{}, MpaPolicy{});
  require_established(l.i);
  CHECK((word(l.request, 20) & 0xc000) == 0);
  CHECK((word(l.request, 22) & 0xc000) == 0);
  CHECK((word(l.reply, 20) & 0xc000) == 0);
  CHECK((word(l.reply, 22) & 0xc000) == 0);
  CHECK(hex(l.reply) == hex(l.r.sent_frame().encode()));
  CHECK_FALSE(l.i.result().conn.p2p);
  CHECK(l.i.output().empty());
}

TEST_CASE("RT-02 A=1 B / A=1 B: zero-length Send RTR", "[mpa][p2p]") {
  Link l = run(p2p({true, false, false}), p2p({true, false, false}));
  require_established(l.i);
  CHECK(word(l.request, 20) == (kA | kB | 16));
  CHECK(word(l.request, 22) == 16);
  CHECK(word(l.reply, 20) == (kA | kB | 16));
  CHECK(word(l.reply, 22) == 16);
  CHECK(l.i.result().conn.p2p);
  CHECK(l.r.result().conn.p2p);
  CHECK(l.i.result().conn.rtr == RtrType::Send);
}

TEST_CASE("RT-03 A=1 C / A=1 C: zero-length RDMA Write RTR", "[mpa][p2p]") {
  Link l = run(p2p({false, true, false}), p2p({false, true, false}));
  require_established(l.i);
  CHECK(word(l.request, 20) == (kA | 16));
  CHECK(word(l.request, 22) == (kCw | 16));
  CHECK(word(l.reply, 22) == (kCw | 16));
  CHECK(l.i.result().conn.rtr == RtrType::Write);
}

TEST_CASE("RT-04 A=1 D / A=1 D: zero-length Read RTR, IRD/ORD >= 1", "[mpa][p2p]") {
  MpaPolicy ip = p2p({false, false, true});
  ip.ord = 0; // the ULP itself does no Reads
  MpaPolicy rp = p2p({false, false, true});
  rp.ird = 0;
  Link l = run(ip, rp);
  require_established(l.i);
  CHECK(word(l.request, 22) == kD);
  CHECK(word(l.reply, 20) == (kA | 1)); // IRD raised to 1 for the Read RTR
  CHECK(word(l.reply, 22) == (kD | 16));
  CHECK(l.i.result().conn.rtr == RtrType::Read);
  CHECK(l.i.result().conn.ord == 1);
  CHECK(l.r.result().conn.ird == 1);
}

TEST_CASE("RT-05 A=1 B C D: the initiator picks a mutually supported type for every subset",
          "[mpa][p2p]") {
  for (int mask = 1; mask < 8; ++mask) {
    const RtrSet rset{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    INFO("responder supports mask " << mask);
    Link l = run(p2p(), p2p(rset));
    require_established(l.i);
    CHECK(l.i.result().peer_rtr == rset);
    REQUIRE(l.i.result().conn.p2p);
    CHECK(rset.has(l.i.result().conn.rtr));
    // Preference: Write, then Send, then Read.
    const RtrType want = rset.write ? RtrType::Write : rset.send ? RtrType::Send : RtrType::Read;
    CHECK(l.i.result().conn.rtr == want);
  }
}

TEST_CASE("RT-06 A=1 B / A=1 C: responder lists an unrequested type, initiator cannot: TERM 7",
          "[mpa][p2p]") {
  Link l = run(p2p({true, false, false}), p2p({false, true, false}));
  CHECK(word(l.reply, 20) == (kA | 16));
  CHECK(word(l.reply, 22) == (kCw | 16)); // EMPA-034: a type it supports, not requested
  CHECK(l.r.state() == MpaState::Established);
  CHECK(contains(l.i.error().message, "no matching RTR"));
  require_term(l.i, 7);
}

TEST_CASE("RT-07 A=1 B / A=1 none: responder violated the MUST, TERM 7", "[mpa][p2p]") {
  MpaStartup i = initiator_vs(p2p({true, false, false}), raw_reply(kC | kS, 2, enh(kA | 4, 4)));
  CHECK(contains(i.error().message, "the Reply listed none"));
  require_term(i, 7);
}

TEST_CASE("RT-08 EMPA-033 A=1 / A=0: the Reply does not echo A, TERM 7", "[mpa][p2p]") {
  MpaStartup i = initiator_vs(p2p(), raw_reply(kC | kS, 2, enh(4, 4)));
  CHECK(contains(i.error().message, "A=0 does not echo the Request's A=1"));
  require_term(i, 7);
}

TEST_CASE("RT-09 A=0 with B=1 (garbage flags): ignored, Reply A=0 B/C/D=0", "[mpa][p2p]") {
  MpaStartup r = responder_vs(p2p(), raw_request(kC | kS, 2, enh(kB | 2, kCw | kD | 2)));
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK_FALSE(r.request().enhanced->p2p);
  CHECK(r.result().peer_rtr == RtrSet{});
  r.accept({});
  const Bytes reply = take(r);
  CHECK((word(reply, 20) & 0xc000) == 0);
  CHECK((word(reply, 22) & 0xc000) == 0);
  CHECK_FALSE(r.result().conn.p2p);
}

TEST_CASE("RT-10 A=1 at a rev2 responder without P2P: still lists one RTR type", "[mpa][p2p]") {
  MpaPolicy rp;
  rp.p2p = false;
  rp.rtr = {false, false, false};
  Link l = run(p2p(), rp);
  require_established(l.r);
  CHECK((word(l.reply, 20) & kA) != 0);
  CHECK(l.r.sent_frame().enhanced->rtr_write); // C-12: at least one
  require_established(l.i);
  CHECK(l.i.result().conn.rtr == RtrType::Write);
}

TEST_CASE("IR-01 I(IRD 4, ORD 4) vs R(IRD 8, ORD 2): IRD >= 2, ORD <= 8, peers see values",
          "[mpa][p2p]") {
  MpaPolicy ip, rp;
  ip.ird = ip.ord = 4;
  rp.ird = 8;
  rp.ord = 2;
  Link l = run(ip, rp);
  require_established(l.i);
  CHECK(word(l.reply, 20) == 8);
  CHECK(word(l.reply, 22) == 2);
  CHECK(l.i.result().conn.ird == 4);
  CHECK(l.i.result().conn.ord == 4);
  CHECK(l.r.result().conn.ird == 8);
  CHECK(l.r.result().conn.ord == 2);
  CHECK(l.i.result().conn.peer_ird == 8);
  CHECK(l.i.result().conn.peer_ord == 2);
  CHECK(l.r.result().conn.peer_ird == 4);
  CHECK(l.r.result().conn.peer_ord == 4);
}

TEST_CASE("IR-02 EMPA-023 EMPA-026 I(IRD 1, ORD 16) vs R that can only do IRD 8: ORD clamped to 8",
          "[mpa][p2p]") {
  MpaPolicy ip, rp;
  ip.ird = 1;
  ip.ord = 16;
  rp.ird = 4;
  rp.max_ird = 8;
  rp.ord = 4;
  Link l = run(ip, rp);
  require_established(l.i);
  CHECK(word(l.reply, 20) == 8); // raised from 4 as far as it can
  CHECK(word(l.reply, 22) == 1); // at most the initiator IRD
  CHECK(l.r.result().conn.ird == 8);
  CHECK(l.r.result().conn.ord == 1);
  CHECK(l.i.result().conn.ord == 8);
  CHECK(l.i.result().conn.ird == 1);
}

TEST_CASE("IR-03 EMPA-024 I(IRD 2, ORD 0) with D only: responder raises IRD to 1", "[mpa][p2p]") {
  MpaPolicy ip = p2p({false, false, true});
  ip.ird = 2;
  ip.ord = 0;
  MpaPolicy rp;
  rp.ird = 0;
  Link l = run(ip, rp);
  require_established(l.r);
  CHECK(word(l.request, 20) == (kA | 2));
  CHECK(word(l.request, 22) == kD);
  CHECK(word(l.reply, 20) == (kA | 1));
  CHECK(word(l.reply, 22) == (kD | 2));
  CHECK(l.r.result().conn.ird == 1);
  require_established(l.i);
  CHECK(l.i.result().conn.rtr == RtrType::Read);
  CHECK(l.i.result().conn.ord == 1);
  // With other types possible, IRD stays 0 and Read is not offered.
  MpaPolicy all = p2p();
  all.ord = 0;
  Link other = run(all, rp);
  CHECK(word(other.reply, 20) == (kA | kB | 0));
  CHECK(word(other.reply, 22) == (kCw | 16));
}

TEST_CASE("IR-04 initiator ORD/IRD 0x3FFF: responder keeps local values, echoes 0x3FFF",
          "[mpa][p2p]") {
  MpaPolicy rp;
  rp.ird = 6;
  rp.ord = 7;
  SECTION("ORD 0x3FFF") {
    MpaPolicy ip;
    ip.ord = 0x3fff;
    ip.ird = 3;
    Link l = run(ip, rp);
    CHECK(word(l.reply, 20) == 0x3fff);
    CHECK(word(l.reply, 22) == 3);
    CHECK(l.r.result().conn.ird == 6);
    CHECK(l.r.result().conn.ord == 3);
  }
  SECTION("IRD 0x3FFF") {
    MpaPolicy ip;
    ip.ird = 0x3fff;
    ip.ord = 2;
    Link l = run(ip, rp);
    CHECK(word(l.reply, 20) == 6);
    CHECK(word(l.reply, 22) == 0x3fff);
    CHECK(l.r.result().conn.ird == 6);
    CHECK(l.r.result().conn.ord == 7);
  }
  SECTION("both") {
    MpaPolicy ip;
    ip.ird = ip.ord = 0x3fff;
    Link l = run(ip, rp);
    require_established(l.i);
    CHECK(word(l.reply, 20) == 0x3fff);
    CHECK(word(l.reply, 22) == 0x3fff);
    CHECK(l.r.result().conn.ird == 6);
    CHECK(l.r.result().conn.ord == 7);
    CHECK(l.i.result().conn.ird == 0x3fff);
    CHECK(l.i.result().conn.ord == 0x3fff);
  }
}

TEST_CASE("IR-05 responder IRD/ORD 0x3FFF: initiator keeps its local ORD/IRD", "[mpa][p2p]") {
  MpaPolicy ip;
  ip.ird = 3;
  ip.ord = 9;
  MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(0x3fff, 0x3fff)));
  require_established(i);
  CHECK(i.result().conn.ird == 3);
  CHECK(i.result().conn.ord == 9);
  CHECK(i.result().conn.peer_ird == 0x3fff);
  CHECK(i.result().conn.peer_ord == 0x3fff);
}

TEST_CASE("IR-06 responder ORD above the initiator's maximum IRD: TERM 6", "[mpa][p2p]") {
  MpaPolicy ip;
  ip.ird = 4;
  ip.max_ird = 8;
  MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(4, 9)));
  CHECK(contains(i.error().message, "responder ORD 9 exceeds the local maximum IRD 8"));
  CHECK(i.result().conn.peer_ord == 9);
  require_term(i, 6);
}

TEST_CASE("IR-07 EMPA-026 responder ORD above the advertised IRD: IRD raised (RFC 6581 §9.1 MUST)",
          "[mpa][p2p]") {
  // Decision: §9.1 says the initiator MUST set IRD >= responder ORD; we do while
  // max_ird allows (beyond it: IR-06). The ULP sees the peer's value too.
  MpaPolicy ip;
  ip.ird = 4;
  MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(16, 8)));
  require_established(i);
  CHECK(i.result().conn.ird == 8);
  CHECK(i.result().conn.peer_ord == 8);
}
