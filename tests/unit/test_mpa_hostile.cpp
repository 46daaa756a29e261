// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA startup, requirements §7.1: hostile input before Full Operation (HX-001..020), each
// refused the way the specs say; then the byte stream itself: every split point of the input
// gives the same result as the whole.
#include "catch_compat.hpp"
#include "mpa_harness.hpp"

using namespace mpat;

// ==== 7.1 hostile input in the startup phase ================================================

TEST_CASE("HX-001 junk instead of a Request key fails at the first wrong octet", "[mpa][hostile]") {
  struct Junk {
    Bytes in;
    std::size_t bad; // first octet that cannot be a key
  };
  Bytes tls = {std::byte{0x16}, std::byte{0x03}, std::byte{0x01}, std::byte{0x02}, std::byte{0x00}};
  Bytes random = pattern(64, 0x2b);
  for (const Junk& j :
       {Junk{text("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 0}, Junk{tls, 0}, Junk{random, 0},
        Junk{text("MPA ID Rex Frame"), 9}, Junk{text("MPA ID Req Frame\n"), 99}}) {
    MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
    const std::size_t n = r.on_bytes(j.in);
    if (j.bad == 99) { // a good key: only the header is incomplete
      CHECK(r.state() == MpaState::AwaitRequest);
      continue;
    }
    CHECK(n == j.bad + 1);
    require_failed(r, term::mpa_invalid_frame,
                   "invalid MPA Request key: octet " + std::to_string(j.bad));
  }
  MpaStartup r = responder_vs(MpaPolicy{}, text("GET / HTTP/1.0"));
  CHECK(r.error().message ==
        "invalid MPA Request key: octet 0 is 0x47 ('G'), expected 'M' of \"MPA ID Req Frame\" "
        "(RFC 5044 §7.1.1)");
}

TEST_CASE("HX-002 Reply key mismatch: initiator closes with code 4", "[mpa][hostile]") {
  Bytes bad = raw_reply(kC, 1);
  bad[0] = std::byte{'m'};
  MpaStartup i = initiator_vs(rev1(), bad);
  require_failed(i, term::mpa_invalid_frame, "invalid MPA Reply key: octet 0");
  MpaStartup j = initiator_vs(rev1(), text("MPA ID Rep Fram!"));
  require_failed(j, term::mpa_invalid_frame, "octet 15 is 0x21 ('!')");
}

TEST_CASE("HX-003 Request key while awaiting the Reply: Initiator/Initiator detected",
          "[mpa][hostile]") {
  MpaStartup i = initiator_vs(MpaPolicy{}, raw_request(kC, 1));
  require_failed(i, term::mpa_invalid_frame,
                 "received an MPA Request while awaiting the MPA Reply");
  // A responder that gets a Reply key fails the same way.
  MpaStartup r = responder_vs(MpaPolicy{}, raw_reply(kC, 1));
  require_failed(r, term::mpa_invalid_frame, "received an MPA Reply while awaiting");
}

TEST_CASE("HX-004 no Request ever arrives: timeout", "[mpa][hostile]") {
  MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
  CHECK(r.deadline() == t0 + 10s); // MPA-069 default, as siw's initiator
  r.on_timer(t0 + 9s);
  CHECK(r.state() == MpaState::AwaitRequest);
  r.on_timer(t0 + 10s);
  require_failed(r, term::mpa_tcp_closed, "timed out after 10000 ms waiting for the MPA Request");
  // Same for an initiator whose Reply never comes, and a responder ULP that never decides.
  MpaStartup i = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  i.on_timer(t0 + 11s);
  require_failed(i, term::mpa_tcp_closed, "waiting for the MPA Reply");
  MpaStartup q = responder_vs(MpaPolicy{}, raw_request(kC, 1));
  q.on_timer(t0 + 10s);
  require_failed(q, term::mpa_tcp_closed, "waiting for the local accept or reject");
}

TEST_CASE("HX-005 frame trickled byte by byte: the deadline covers the whole exchange",
          "[mpa][hostile]") {
  MpaPolicy p;
  p.timeout = 10s;
  MpaStartup r = MpaStartup::responder(p, t0);
  const Bytes req = raw_request(kC, 1, pattern(100));
  for (std::size_t k = 0; k < 19; ++k) {
    r.on_bytes(ConstBytes(req).subspan(k, 1));
    r.on_timer(t0 + std::chrono::milliseconds(500 * k));
  }
  CHECK(r.state() == MpaState::AwaitRequest);
  r.on_timer(t0 + 10s);
  require_failed(r, term::mpa_tcp_closed, "(19 octets received)");
}

TEST_CASE("HX-006 PD_Length > 512: close + local error", "[mpa][hostile]") {
  MpaStartup i = initiator_vs(MpaPolicy{}, raw_frame(MpaKind::Reply, kC | kS, 2, {}, 600));
  CHECK(i.error().message == "MPA Reply PD_Length 600 exceeds 512 (RFC 5044 §7.1.1)");
  require_failed(i, term::mpa_invalid_frame, "PD_Length 600");
}

TEST_CASE("HX-007 peer closes before the PD is complete: malformed frame", "[mpa][hostile]") {
  MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
  const Bytes req = raw_request(kC, 1, pattern(100));
  r.on_bytes(ConstBytes(req).first(60));
  r.on_peer_closed();
  require_failed(r, term::mpa_invalid_frame, "MPA Request PD incomplete");
  CHECK(contains(r.error().message, "40 of 100"));
  MpaStartup h = MpaStartup::responder(MpaPolicy{}, t0);
  h.on_bytes(ConstBytes(req).first(12));
  h.on_peer_closed();
  require_failed(h, term::mpa_invalid_frame, "header incomplete");
  MpaStartup i = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  const Bytes rep = raw_reply(kC | kS, 2, enh(1, 1) + pattern(8));
  i.on_bytes(ConstBytes(rep).first(rep.size() - 1));
  i.on_peer_closed();
  require_failed(i, term::mpa_invalid_frame, "MPA Reply PD incomplete");
}

TEST_CASE("HX-008 PD longer than the local PD buffer: closed, buffer never exceeded",
          "[mpa][hostile]") {
  MpaPolicy p;
  p.max_private_data = 16;
  MpaStartup r = MpaStartup::responder(p, t0);
  const Bytes header = raw_frame(MpaKind::Request, kC, 1, {}, 17);
  CHECK(r.on_bytes(header) == header.size());
  require_failed(r, term::mpa_invalid_frame,
                 "MPA Request private data of 17 octets exceeds the local buffer of 16 octets");
  // The enhanced data does not count against the ULP's buffer.
  MpaStartup ok = responder_vs(p, raw_request(kC | kS, 2, enh(1, 1) + pattern(16)));
  CHECK(ok.state() == MpaState::RequestReceived);
  MpaStartup i = initiator_vs(p, raw_reply(kC | kS, 2, enh(1, 1) + pattern(17)));
  require_failed(i, term::mpa_invalid_frame, "MPA Reply private data of 17 octets");
}

TEST_CASE("HX-009 unsupported Rev: Rev0 non-permissive, Rev2 at rev-1-only, Rev>=3 at rev2",
          "[mpa][hostile]") {
  struct Case {
    MpaPolicy policy;
    std::uint8_t rev;
    std::string_view message;
  };
  for (const Case& c : {Case{MpaPolicy{}, 0, "Rev 0 (RDMAC peer)"},
                        Case{rev1(), 2, "Rev 2 is not supported (local maximum Rev 1"},
                        Case{MpaPolicy{}, 3, "Rev 3 is not supported (local maximum Rev 2"}}) {
    require_failed(responder_vs(c.policy, raw_request(kM | kC, c.rev)), term::mpa_invalid_frame,
                   c.message);
    MpaPolicy ip = c.policy;
    ip.enhanced = false;
    require_failed(initiator_vs(ip, raw_reply(kM | kC, c.rev)), term::mpa_invalid_frame, c.message);
  }
}

TEST_CASE("HX-010 R=1 in a Request and Res bits set: not checked", "[mpa][hostile]") {
  MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC | kR | 0x07, 1, text("p")));
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK_FALSE(r.request().reject);
  r.accept({});
  require_established(r);
  MpaStartup i = initiator_vs(rev1(), raw_reply(kC | 0x0f, 1));
  require_established(i);
}

TEST_CASE("HX-011 Reply with R=1: exit MPA, PD to the ULP, TCP left open", "[mpa][hostile]") {
  MpaStartup i = initiator_vs(p2p(), raw_reply(kC | kR | kS, 2, enh(kA | 2, 3) + text("busy")));
  CHECK(i.state() == MpaState::Rejected);
  CHECK(i.result().peer_private_data == text("busy"));
  CHECK(i.result().conn.peer_ird == 2);
  CHECK(i.result().conn.peer_ord == 3);
  CHECK(i.output().empty()); // no TERM: never in Full Operation
}

TEST_CASE("HX-012 S=1 but PD_Length < 4: improperly formatted", "[mpa][hostile]") {
  for (std::uint16_t len : {0, 2, 3}) {
    MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC | kS, 2, pattern(len)));
    require_failed(r, term::mpa_invalid_frame,
                   "S=1 but PD_Length " + std::to_string(len) + " cannot hold");
    MpaStartup i = initiator_vs(MpaPolicy{}, raw_reply(kC | kS, 2, pattern(len)));
    require_failed(i, term::mpa_invalid_frame, "MPA Reply has S=1 but PD_Length");
  }
}

TEST_CASE("HX-013 A=0 with B/C/D set: B/C/D ignored", "[mpa][hostile]") {
  MpaStartup i = initiator_vs(MpaPolicy{}, raw_reply(kC | kS, 2, enh(kB | 4, kCw | kD | 4)));
  require_established(i);
  CHECK(i.result().peer_rtr == RtrSet{});
  CHECK_FALSE(i.result().conn.p2p);
}

TEST_CASE("HX-014 Reply A differs from Request A, or lists no usable RTR: TERM 7",
          "[mpa][hostile]") {
  SECTION("Request A=0, Reply A=1") {
    MpaStartup i = initiator_vs(MpaPolicy{}, raw_reply(kC | kS, 2, enh(kA | kB | 4, 4)));
    require_term(i, 7);
  }
  SECTION("no usable RTR, with markers toward the responder") {
    MpaPolicy ip = p2p({false, true, false});
    ip.crc = false;
    MpaStartup i = initiator_vs(ip, raw_reply(kM | kS, 2, enh(kA | kB | 4, kD | 4)));
    CHECK(i.result().conn.markers_tx);
    CHECK_FALSE(i.result().conn.crc);
    require_term(i, 7, false, true);
  }
  SECTION("Read listed but responder IRD 0") {
    MpaStartup i = initiator_vs(p2p({false, false, true}), raw_reply(kC | kS, 2, enh(kA, kD)));
    CHECK(contains(i.error().message, "Read needs responder IRD >= 1"));
    require_term(i, 7);
  }
}

TEST_CASE("HX-015 responder ORD exceeds the initiator's possible IRD: TERM 6", "[mpa][hostile]") {
  MpaPolicy ip;
  ip.max_ird = 16;
  MpaStartup i = initiator_vs(ip, raw_reply(kM | kC | kS, 2, enh(16, 17)));
  CHECK(i.result().conn.markers_tx);
  require_term(i, 6, true, true);
}

TEST_CASE("HX-016 absurd IRD/ORD such as 0x3FFE: clamped to local limits or rejected",
          "[mpa][hostile]") {
  MpaPolicy ip;
  ip.ird = 4;
  ip.ord = 5;
  SECTION("initiator: responder IRD 0x3FFE clamps nothing above the local ORD") {
    MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(0x3ffe, 2)));
    require_established(i);
    CHECK(i.result().conn.ord == 5);
    CHECK(i.result().conn.ird == 4);
  }
  SECTION("initiator: responder ORD 0x3FFE is beyond max_ird") {
    MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(4, 0x3ffe)));
    require_term(i, 6);
  }
  SECTION("responder: initiator ORD/IRD 0x3FFE") {
    MpaPolicy rp;
    rp.ird = 2;
    rp.ord = 3;
    rp.max_ird = 64;
    MpaStartup r = responder_vs(rp, raw_request(kC | kS, 2, enh(0x3ffe, 0x3ffe)));
    r.accept({});
    const Bytes reply = take(r);
    CHECK(word(reply, 20) == 64); // raised only as far as max_ird
    CHECK(word(reply, 22) == 3);
  }
}

TEST_CASE("HX-017 FPDUs right after the Request/Reply are left to the data path",
          "[mpa][hostile]") {
  const Bytes fpdu = pattern(40, 0x55);
  const Bytes req = raw_request(kC | kS, 2, enh(2, 2) + text("pd"));
  MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
  CHECK(r.on_bytes(req + fpdu) == req.size());
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK(r.on_bytes(fpdu) == 0); // still not the startup machine's
  const Bytes rep = raw_reply(kC | kS, 2, enh(2, 2));
  MpaStartup i = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  CHECK(i.on_bytes(rep + fpdu) == rep.size());
  require_established(i);
}

TEST_CASE("HX-018 our responder sends nothing before the initiator's first FPDU",
          "[mpa][hostile]") {
  MpaStartup i = MpaStartup::initiator(p2p(), {}, t0);
  MpaStartup r = MpaStartup::responder(p2p(), t0);
  r.on_bytes(take(i));
  CHECK(r.output().empty()); // nothing before accept()
  r.accept(text("hi"));
  require_established(r);
  // Only the Reply: no marker, no FPDU (RFC 5044 §7.1.2 r4, RFC 6581 §5).
  CHECK(hex(r.output()) == hex(r.sent_frame().encode()));
  CHECK(r.output().size() == kMpaFrameHeaderLen + 4 + 2);
}

TEST_CASE("HX-019 the chosen RTR is always one both ends listed", "[mpa][hostile]") {
  // Decision (data path): the responder accepts any valid first FPDU as the RTR;
  // the startup machine guarantees our initiator only picks a negotiated type.
  for (int im = 1; im < 8; ++im) {
    for (int rm = 0; rm < 8; ++rm) {
      const RtrSet is{(im & 1) != 0, (im & 2) != 0, (im & 4) != 0};
      const RtrSet rs{(rm & 1) != 0, (rm & 2) != 0, (rm & 4) != 0};
      INFO("initiator " << im << " responder " << rm);
      Link l = run(p2p(is), p2p(rs));
      require_established(l.r);
      const MpaEnhanced& listed = *l.r.sent_frame().enhanced;
      const RtrSet lset{listed.rtr_send, listed.rtr_write, listed.rtr_read};
      CHECK(lset.any());
      if (l.i.state() == MpaState::Established) {
        REQUIRE(l.i.result().conn.p2p);
        CHECK(is.has(l.i.result().conn.rtr));
        CHECK(lset.has(l.i.result().conn.rtr));
      } else {
        CHECK(l.i.error().code == term::mpa_no_matching_rtr);
        const bool mutual =
            (is.send && lset.send) || (is.write && lset.write) || (is.read && lset.read);
        CHECK_FALSE(mutual);
      }
    }
  }
}

TEST_CASE("HX-020 EMPA-039 local failure during enhanced setup: TERM 5 once in Full Operation",
          "[mpa][hostile]") {
  SECTION("initiator after the Reply") {
    Link l = run(p2p(), p2p());
    require_established(l.i);
    l.i.local_error("cannot create the QP");
    CHECK(l.i.error().message == "cannot create the QP");
    require_term(l.i, 5);
  }
  SECTION("responder after accept: the TERM follows the Reply") {
    MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kM | kC | kS, 2, enh(1, 1)));
    r.accept({});
    r.local_error("out of memory");
    REQUIRE(r.state() == MpaState::Failed);
    CHECK(r.error().terminate_sent);
    CHECK(hex(take(r)) == hex(r.sent_frame().encode() + expected_term(5, true, true)));
  }
  SECTION("before Full Operation: no TERM") {
    MpaStartup i = MpaStartup::initiator(MpaPolicy{}, {}, t0);
    take(i);
    i.local_error("route lost");
    require_failed(i, term::mpa_local_catastrophic, "route lost");
    CHECK_FALSE(i.error().terminate_sent);
    CHECK(i.output().empty());
  }
}

// ==== byte stream handling ===================================================================

TEST_CASE("MPA startup: byte-at-a-time and every split point give the same result",
          "[mpa][hostile]") {
  const Bytes tail = pattern(9, 0x77); // the first FPDU octets, never consumed
  auto responder = [](MpaPolicy p = {}) { return [p] { return MpaStartup::responder(p, t0); }; };
  auto initiator = [](MpaPolicy p = {}) {
    return [p] {
      MpaStartup i = MpaStartup::initiator(p, {}, t0);
      i.consume_output(i.output().size());
      return i;
    };
  };
  SECTION("enhanced Request with PD") {
    require_split_invariant(responder(),
                            raw_request(kC | kS, 2, enh(kA | kB | 3, 4) + pattern(30)) + tail);
  }
  SECTION("Reply accepted") {
    require_split_invariant(initiator(p2p()),
                            raw_reply(kC | kS, 2, enh(kA | 8, kCw | 2) + text("yes")) + tail);
  }
  SECTION("Reply leading to TERM 7") {
    require_split_invariant(initiator(p2p()), raw_reply(kC | kS, 2, enh(4, 4)) + tail);
  }
  SECTION("Reply rejected") {
    require_split_invariant(initiator(), raw_reply(kC | kR | kS, 2, enh(1, 9)) + text("no"));
  }
  SECTION("HTTP junk") { require_split_invariant(responder(), text("GET / HTTP/1.1\r\n\r\n")); }
  SECTION("almost a key") {
    require_split_invariant(responder(), text("MPA ID Req Frame") + tail);
    require_split_invariant(responder(), text("MPA ID Req Fram?") + tail);
  }
  SECTION("PD_Length 600") {
    require_split_invariant(responder(), raw_frame(MpaKind::Request, kC, 1, pattern(30), 600));
  }
  SECTION("RDMAC Request at non-permissive and permissive responders") {
    require_split_invariant(responder(), rdmac_request(pattern(5)) + tail);
    MpaPolicy p;
    p.permissive = true;
    require_split_invariant(responder(p), rdmac_request(pattern(5)) + tail);
  }
  SECTION("Initiator/Initiator") {
    require_split_invariant(initiator(), raw_request(kC, 1) + tail);
  }
}

TEST_CASE("MPA startup: output is written piecewise and bytes after the end are ignored",
          "[mpa][hostile]") {
  MpaStartup i = MpaStartup::initiator(rev1(), text("abc"), t0);
  const std::size_t total = i.output().size();
  REQUIRE(total == kMpaFrameHeaderLen + 3);
  i.consume_output(3);
  CHECK(i.output().size() == total - 3);
  CHECK(std::to_integer<char>(i.output()[0]) == ' '); // "MPA ID Req Frame" from octet 3
  i.consume_output(total - 3);
  CHECK(i.output().empty());
  i.on_bytes(raw_reply(kC, 1));
  require_established(i);
  CHECK(i.on_bytes(pattern(4)) == 0);
  i.on_peer_closed(); // after the exchange: the data path's business
  i.on_timer(t0 + 1000s);
  require_established(i);
  CHECK(i.deadline() == MpaClock::time_point::max());
}

TEST_CASE("MPA startup: invalid local use fails clearly", "[mpa][hostile]") {
  MpaPolicy p;
  p.revision = 3;
  require_failed(MpaStartup::responder(p, t0), term::mpa_local_catastrophic,
                 "local policy MPA revision 3 is not supported");
  MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC | kS, 2, enh(1, 1)));
  r.accept(pattern(509));
  require_failed(r, term::mpa_local_catastrophic,
                 "MPA Reply private data of 509 octets exceeds 508");
  MpaPolicy plain;
  plain.enhanced = false;
  MpaStartup e = responder_vs(plain, raw_request(kC | kS, 2, enh(1, 1)));
  require_failed(e, term::mpa_invalid_frame, "enhanced connection setup is disabled locally");
  MpaStartup s = initiator_vs(rev1(), raw_reply(kC | kS, 1, enh(1, 1))); // Rev1: S reserved
  require_established(s);
  MpaStartup t = initiator_vs(
      [] {
        MpaPolicy q;
        q.enhanced = false;
        return q;
      }(),
      raw_reply(kC | kS, 2, enh(1, 1)));
  require_failed(t, term::mpa_invalid_frame, "MPA Reply is enhanced (S=1) but the Request was not");
}
