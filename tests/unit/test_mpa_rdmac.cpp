// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA startup, requirements §6.5-§6.6: RDMAC (revision 0) and IETF endpoints, permissive or
// not, in every combination of IOP Figs. 2-4 (RC-), and other cross-implementation scenarios
// (OX-: initiator/initiator, responder/responder, siw's large-FPDU bit).
#include "catch_compat.hpp"
#include "iwarp/qp.hpp"
#include "mpa_harness.hpp"

using namespace mpat;

// ==== 6.5 RDMAC vs IETF (IOP Figs. 2-4) ========================================================

namespace {
// Both endpoints are ours and IETF: V=1, markers per M bits (IOP §5.4).
void check_v1(bool i_permissive, bool im, bool r_permissive, bool rm, bool crc) {
  INFO("I M=" << im << " R M=" << rm << " crc=" << crc);
  Link l = run(ietf(i_permissive, im, crc), ietf(r_permissive, rm, crc));
  require_established(l.i);
  require_established(l.r);
  CHECK(octet(l.request, 17) == 1);
  CHECK(octet(l.reply, 17) == 1);
  for (const MpaStartup* m : {&l.i, &l.r}) {
    CHECK(m->result().conn.version == kVersionIetf);
    CHECK(m->result().conn.crc == crc);
  }
  CHECK(l.i.result().conn.markers_rx == im);
  CHECK(l.r.result().conn.markers_rx == rm);
  CHECK(l.i.result().conn.markers_tx == rm);
  CHECK(l.r.result().conn.markers_tx == im);
}

// Our initiator against an RDMAC proxy Reply (IOP §5.3.2): V=0, markers and CRC on.
void check_vs_rdmac_responder(bool permissive, bool im) {
  Bytes request;
  MpaStartup i = initiator_vs(ietf(permissive, im, false), rdmac_reply(), &request);
  CHECK(octet(request, 16) == (im ? kM : 0));
  CHECK(octet(request, 17) == 1);
  if (!permissive) {
    require_failed(i, term::mpa_invalid_frame, "MPA Reply Rev 0 (RDMAC peer)");
    return;
  }
  require_established(i);
  CHECK(i.result().conn.version == kVersionRdmac);
  CHECK(i.result().conn.markers_rx); // on even though the Request said M=0
  CHECK(i.result().conn.markers_tx);
  CHECK(i.result().conn.crc);
}

// An RDMAC proxy's Request at our responder (IOP §5.2.1, §5.3.1).
void check_vs_rdmac_initiator(bool permissive, bool rm) {
  MpaStartup r = responder_vs(ietf(permissive, rm, false), rdmac_request());
  if (!permissive) {
    require_failed(r, term::mpa_invalid_frame, "permissive mode is off");
    CHECK(hex(take(r)) == hex(raw_reply((rm ? kM : 0) | kC | kR, 1)));
    return;
  }
  REQUIRE(r.state() == MpaState::RequestReceived);
  r.accept({});
  require_established(r);
  CHECK(hex(take(r)) == hex(raw_reply(kM | kC, 0))); // never M=0 to RDMAC
  CHECK(r.result().conn.version == kVersionRdmac);
  CHECK(r.result().conn.markers_rx);
  CHECK(r.result().conn.markers_tx);
  CHECK(r.result().conn.crc);
}
} // namespace

// RC-01 (RDMAC vs RDMAC) involves no IETF endpoint: nothing of ours to play.

TEST_CASE("RC-02 RDMAC initiator vs IETF non-permissive responder: Rev1 Reply, close",
          "[mpa][rdmac]") {
  check_vs_rdmac_initiator(false, false);
  check_vs_rdmac_initiator(false, true);
}
TEST_CASE("RC-03 IETF non-permissive initiator (M=0) vs RDMAC: close on Rev0", "[mpa][rdmac]") {
  check_vs_rdmac_responder(false, false);
}
TEST_CASE("RC-04 IETF non-permissive initiator (M=1) vs RDMAC: close on Rev0", "[mpa][rdmac]") {
  check_vs_rdmac_responder(false, true);
}
TEST_CASE("RC-05 IETF non-permissive M=0 vs non-permissive M=0: V=1, M=0/0", "[mpa][rdmac]") {
  check_v1(false, false, false, false, GENERATE(false, true));
}
TEST_CASE("RC-06 IETF non-permissive M=0 vs non-permissive M=1: V=1, M=0/1", "[mpa][rdmac]") {
  check_v1(false, false, false, true, GENERATE(false, true));
}
TEST_CASE("RC-07 IETF non-permissive M=1 vs non-permissive M=0: V=1, M=1/0", "[mpa][rdmac]") {
  check_v1(false, true, false, false, GENERATE(false, true));
}
TEST_CASE("RC-08 IETF non-permissive M=1 vs non-permissive M=1: V=1, M=1/1", "[mpa][rdmac]") {
  check_v1(false, true, false, true, GENERATE(false, true));
}
TEST_CASE("RC-09 RDMAC initiator vs IETF permissive (would-be M=0): replies Rev0 M=1 C=1",
          "[mpa][rdmac]") {
  check_vs_rdmac_initiator(true, false);
}
TEST_CASE("RC-10 RDMAC initiator vs IETF permissive (M=1): V=0, M=1/1", "[mpa][rdmac]") {
  check_vs_rdmac_initiator(true, true);
}
TEST_CASE("RC-11 permissive initiator (M=0) vs RDMAC responder: V=0, markers both ways",
          "[mpa][rdmac]") {
  check_vs_rdmac_responder(true, false);
}
TEST_CASE("RC-12 permissive initiator (M=1) vs RDMAC responder: V=0, M=1/1", "[mpa][rdmac]") {
  check_vs_rdmac_responder(true, true);
}
TEST_CASE("RC-13 IETF permissive M=0 vs permissive M=0: V=1, M=0/0", "[mpa][rdmac]") {
  check_v1(true, false, true, false, GENERATE(false, true));
}
TEST_CASE("RC-14 IETF permissive M=0 vs permissive M=1: V=1, M=0/1", "[mpa][rdmac]") {
  check_v1(true, false, true, true, GENERATE(false, true));
}
TEST_CASE("RC-15 IETF permissive M=1 vs permissive M=0: V=1, M=1/0", "[mpa][rdmac]") {
  check_v1(true, true, true, false, GENERATE(false, true));
}
TEST_CASE("RC-16 IETF permissive M=1 vs permissive M=1: V=1, M=1/1", "[mpa][rdmac]") {
  check_v1(true, true, true, true, GENERATE(false, true));
}
TEST_CASE("RC-17 IETF non-permissive (M=x) vs IETF permissive (M=y): V=1, M=x/y", "[mpa][rdmac]") {
  const bool crc = GENERATE(false, true);
  for (bool x : {false, true})
    for (bool y : {false, true})
      check_v1(false, x, true, y, crc);
}
TEST_CASE("RC-18 IETF permissive (M=x) vs IETF non-permissive (M=y): V=1, M=x/y", "[mpa][rdmac]") {
  const bool crc = GENERATE(false, true);
  for (bool x : {false, true})
    for (bool y : {false, true})
      check_v1(true, x, false, y, crc);
}
TEST_CASE("RC-19 every V=0 connection: CRC on both ways, version 0 for DDP and RDMAP",
          "[mpa][rdmac]") {
  // Even an RDMAC frame with C=0 and a local policy of no CRC end with CRC on.
  MpaPolicy p = ietf(true, false, false);
  MpaStartup i = initiator_vs(p, raw_reply(kM, 0));
  require_established(i);
  CHECK(i.result().conn.version == kVersionRdmac);
  CHECK(i.result().conn.crc);
  MpaStartup r = responder_vs(p, raw_request(kM, 0));
  r.accept({});
  require_established(r);
  CHECK(octet(take(r), 16) == (kM | kC));
  CHECK(r.result().conn.version == kVersionRdmac);
  CHECK(r.result().conn.crc);
  // A Terminate on a V=0 connection carries DV=RV=0 (never mixed).
  i.local_error("QP creation failed");
  REQUIRE(i.error().terminate_sent);
  CHECK(hex(take(i)) == hex(expected_term(5, true, true, kVersionRdmac)));
}
// RC-20 (peer switches DV/RV after negotiation) is checked by the data path.

// ==== 6.6 Other cross-implementation scenarios =================================================

TEST_CASE("OX-02 Initiator/Initiator: both detect a Request where a Reply is expected",
          "[mpa][rdmac]") {
  MpaStartup a = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  MpaStartup b = MpaStartup::initiator(rev1(), text("b"), t0);
  const Bytes from_a = take(a), from_b = take(b);
  a.on_bytes(from_b);
  b.on_bytes(from_a);
  for (const MpaStartup* m : {&a, &b})
    require_failed(*m, term::mpa_invalid_frame, "Initiator/Initiator");
}

TEST_CASE("OX-03 Responder/Responder: both time out", "[mpa][rdmac]") {
  MpaPolicy p;
  p.timeout = 5s;
  MpaStartup a = MpaStartup::responder(p, t0), b = MpaStartup::responder(p, t0 + 1s);
  CHECK(a.deadline() == t0 + 5s);
  a.on_timer(t0 + 4999ms);
  b.on_timer(t0 + 5s);
  CHECK(a.state() == MpaState::AwaitRequest);
  CHECK(b.state() == MpaState::AwaitRequest);
  a.on_timer(t0 + 5s);
  b.on_timer(t0 + 6s);
  for (const MpaStartup* m : {&a, &b})
    require_failed(*m, term::mpa_tcp_closed, "timed out after 5000 ms waiting for the MPA Request");
}

TEST_CASE("OX-10 siw's large-FPDU Res bit: used only when both set it, ignored otherwise",
          "[mpa][rdmac]") {
  MpaPolicy big;
  big.large_fpdu = true;
  Link both = run(big, big);
  require_established(both.i);
  CHECK(octet(both.request, 16) == (kC | kS | kMpaFlagLargeFpdu));
  CHECK(octet(both.reply, 16) == (kC | kS | kMpaFlagLargeFpdu));
  CHECK(both.i.result().conn.large_fpdu);
  CHECK(both.r.result().conn.large_fpdu);
  Link one = run(big, MpaPolicy{});
  require_established(one.i);
  CHECK(octet(one.reply, 16) == (kC | kS)); // not echoed
  CHECK_FALSE(one.i.result().conn.large_fpdu);
  CHECK_FALSE(one.r.result().conn.large_fpdu);
  MpaStartup i = initiator_vs(rev1(), raw_reply(kC | kMpaFlagLargeFpdu, 1));
  require_established(i);
  CHECK_FALSE(i.result().conn.large_fpdu);
}

TEST_CASE("OX-10 uiwarp's RFC 7306 Res bit: offered, echoed only to an offer, never to RDMAC",
          "[mpa][rdmac][rfc7306]") {
  MpaPolicy x;
  x.rfc7306 = true;
  Link both = run(x, x);
  require_established(both.i);
  CHECK(octet(both.request, 16) == (kC | kS | kMpaFlagRfc7306));
  CHECK(octet(both.reply, 16) == (kC | kS | kMpaFlagRfc7306 | kMpaFlagUiwarpReply));
  CHECK(both.i.result().conn.rfc7306);
  CHECK(both.r.result().conn.rfc7306);
  // A responder that is not uiwarp (or has it off) does not echo: neither end uses it.
  Link off = run(x, MpaPolicy{});
  require_established(off.i);
  CHECK(octet(off.reply, 16) == (kC | kS | kMpaFlagUiwarpReply)); // "uiwarp, and no"
  CHECK_FALSE(off.i.result().conn.rfc7306);
  CHECK_FALSE(off.r.result().conn.rfc7306);
  // A responder that offers it to a Request without it does not set it: an echo, not an offer.
  Link quiet = run(MpaPolicy{}, x);
  require_established(quiet.i);
  CHECK(octet(quiet.reply, 16) == (kC | kS));
  CHECK_FALSE(quiet.i.result().conn.rfc7306);
  CHECK_FALSE(quiet.r.result().conn.rfc7306);
  // RFC 7306 needs RDMAP version 1: an RDMAC (rev 0) peer never gets it, whatever its bits.
  MpaPolicy perm = x;
  perm.permissive = true;
  MpaStartup r = responder_vs(perm, raw_request(kM | kC | kMpaFlagRfc7306, 0));
  REQUIRE(r.state() == MpaState::RequestReceived);
  r.accept({});
  Bytes reply = take(r);
  require_established(r);
  CHECK((octet(reply, 16) & kMpaFlagRfc7306) == 0);
  CHECK_FALSE(r.result().conn.rfc7306);
  MpaStartup i = initiator_vs(perm, raw_reply(kM | kC | kMpaFlagRfc7306, 0));
  require_established(i);
  CHECK_FALSE(i.result().conn.rfc7306);
  // The negotiated flag reaches the QP's configuration.
  CHECK(qp_config_from(both.i.result().conn, 1448).conn.rfc7306);
  CHECK_FALSE(qp_config_from(off.i.result().conn, 1448).conn.rfc7306);
}
