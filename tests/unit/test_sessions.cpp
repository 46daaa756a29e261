// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's sessions core (cm/daemon/sessions.hpp), the passive side: listeners, the MPA Request
// of a real initiator (iwarp::MpaStartup), the client's ConnRequest, its Accept or Reject, the
// Reply and the hand-over of the socket, and how a session ends when something goes away or
// takes too long (sessions_harness.hpp). The active side: test_sessions_active.cpp; the
// same-host offer: test_sessions_same_host.cpp.
#include "catch_compat.hpp"
#include "sessions_harness.hpp"

using namespace sesst;

TEST_CASE("uiwarpd sessions: Listen registers the socket, a missing socket is refused",
          "[sessions]") {
  Daemon d;
  d.s.on_listen(kClient, proto::Listen{kListenId, kLocal, 16, -1, {}, {}}, kListener, kLocal);
  auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 ListenReply"});
  const auto r = message<proto::ListenReply>(acts);
  CHECK(r.id == kListenId);
  CHECK(r.status == 0);
  CHECK(r.reason.empty());
  CHECK(d.s.interest(kListener) == Interest::Accept);
  REQUIRE(d.s.listeners().size() == 1);
  CHECK(d.s.listeners()[0].client == kClient);
  CHECK(addr(d.s.listeners()[0].addr) == "192.0.2.1:4791");

  d.s.on_listen(kClient, proto::Listen{kListenId + 1, kLocal, 16, -1, {}, {}}, -1, kLocal);
  acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 ListenReply"});
  CHECK(message<proto::ListenReply>(acts).id == kListenId + 1);
  CHECK(message<proto::ListenReply>(acts).status == EINVAL);
  CHECK(d.s.listeners().size() == 1);

  // Another client's Unlisten of the same id ends nothing; the owner's closes the socket.
  d.s.on_unlisten(kOther, proto::Unlisten{kListenId});
  CHECK(d.step().empty());
  d.s.on_unlisten(kClient, proto::Unlisten{kListenId});
  CHECK(d.step() == Lines{"close 20"});
  CHECK(d.s.listeners().empty());
  CHECK(d.s.interest(kListener) == Interest::None);

  // A connection accepted on a listener that is gone is closed at once.
  d.s.on_incoming(kListener, kSock, kLocal, kPeer, true, d.now);
  CHECK(d.step() == Lines{"close 21"});
  CHECK(d.s.sessions().empty());
}

TEST_CASE("MPA-063 uiwarpd passive side: Request, ConnRequest, Accept, Reply, then the hand-over",
          "[sessions]") {
  Daemon d;
  d.listen();
  d.incoming();
  // The responder writes nothing before the initiator's Request (RFC 5044 §7.1.2 r4).
  CHECK(d.s.output(kSock).empty());
  CHECK(d.s.interest(kSock) == Interest::Readable);
  REQUIRE(d.s.sessions().size() == 1);
  CHECK(d.s.sessions()[0].state == "awaiting MPA request");
  CHECK(d.s.counters().requests == 1);

  MpaPolicy ip;
  ip.ird = 6;
  ip.ord = 3;
  MpaStartup peer = MpaStartup::initiator(ip, text("hello"), t0);
  d.now += 5ms;
  const proto::ConnRequest cr = d.request(peer);
  CHECK(cr.listen_id == kListenId);
  CHECK(cr.token != 0);
  CHECK(addr(cr.src) == "192.0.2.1:4791");
  CHECK(addr(cr.dst) == "192.0.2.2:40001");
  CHECK(u8_to_bytes(cr.private_data) == text("hello"));
  CHECK(cr.ird == 6); // the initiator's, from the enhanced data
  CHECK(cr.ord == 3);
  // The client decides: only a hang-up is of interest now.
  CHECK(d.s.interest(kSock) == Interest::Hangup);
  CHECK(d.s.sessions()[0].state == "awaiting accept");

  d.now += 5ms;
  d.s.on_accept(kClient, proto::Accept{cr.token, u8("yes"), 8, 2}, d.now);
  CHECK(d.step() == Lines{"flush 21"});
  CHECK(d.s.interest(kSock) == Interest::Writable);
  CHECK(d.s.sessions()[0].state == "sending MPA reply");
  // "MPA ID Rep Frame", C=1 S=1 (R=0: accepted), Rev 2, IRD 8 ORD 2, then the client's octets.
  const Bytes reply(d.s.output(kSock).begin(), d.s.output(kSock).end());
  CHECK(hex(reply) == hex(raw_reply(kC | kS, 2, enh(8, 2) + text("yes"))));

  // Not handed over while any of the Reply is unwritten: the application may send at once.
  CHECK(d.write(kSock, reply.size() - 1) == Bytes(reply.begin(), reply.end() - 1));
  CHECK(d.step().empty());
  CHECK(d.s.counters().accepted == 0);
  CHECK(d.s.interest(kSock) == Interest::Writable);
  CHECK(d.write() == Bytes{reply.back()});
  const auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 AcceptReply pass 21"});
  const auto ar = message<proto::AcceptReply>(acts);
  CHECK(ar.token == cr.token);
  CHECK(ar.status == 0);
  CHECK(ar.reason.empty());
  CHECK(addr(ar.src) == "192.0.2.1:4791");
  CHECK(addr(ar.dst) == "192.0.2.2:40001");
  CHECK(ar.params.version == iwarp::kVersionIetf);
  CHECK(ar.params.crc);
  CHECK_FALSE(ar.params.markers_tx);
  CHECK_FALSE(ar.params.markers_rx);
  CHECK(ar.params.ird == 8);
  CHECK(ar.params.ord == 2);
  CHECK(ar.params.peer_ird == 6);
  CHECK(ar.params.peer_ord == 3);
  CHECK_FALSE(ar.params.initiator);
  CHECK_FALSE(ar.params.p2p);

  CHECK(d.s.counters().accepted == 1);
  CHECK(d.s.sessions().empty());
  CHECK(d.s.interest(kSock) == Interest::None);
  CHECK(d.s.deadline() == Clock::time_point::max());
  REQUIRE(d.s.connections().handed().size() == 1);
  CHECK(d.s.connections().handed()[0].client == kClient);
  CHECK(d.s.connections().handed()[0].params.ird == 8);
  CHECK(d.s.connections().handed()[0].since == d.now);

  SECTION("the QP that took it, as the provider reports it, names it in handed()") {
    CHECK_FALSE(d.s.connections().handed()[0].attached);
    // Another client's report, or another connection's, changes nothing.
    d.s.connections().on_attached(kClient + 1, proto::Attached{kLocal, kPeer, 0x11, "uiwarp0"});
    d.s.connections().on_attached(kClient,
                                  proto::Attached{kLocal, v4("192.0.2.3", 1), 0x11, "uiwarp0"});
    CHECK_FALSE(d.s.connections().handed()[0].attached);
    d.s.connections().on_attached(
        kClient, proto::Attached{kPeer, kLocal, 0x11, "uiwarp0", "tcp: not agreed"});
    CHECK(d.s.connections().handed()[0].attached);
    CHECK(d.s.connections().handed()[0].qp_num == 0x11);
    CHECK(d.s.connections().handed()[0].device == "uiwarp0");
    CHECK(d.s.connections().handed()[0].path == "tcp: not agreed");
    // The provider's later word on the path replaces it; another client's changes nothing.
    d.s.connections().on_path(kClient + 1, proto::Path{kLocal, kPeer, 0x11, "same-host"});
    CHECK(d.s.connections().handed()[0].path == "tcp: not agreed");
    d.s.connections().on_path(kClient, proto::Path{kLocal, kPeer, 0x11, "same-host"});
    CHECK(d.s.connections().handed()[0].path == "same-host");
    // Its end keeps what was known of it.
    d.s.connections().on_closed(kClient, proto::Closed{kLocal, kPeer, 0x11, "peer closed", "", ""},
                                0, "p", d.now);
    REQUIRE(d.s.connections().closed().size() == 1);
    CHECK(d.s.connections().closed()[0].conn.device == "uiwarp0");
    CHECK(d.s.connections().closed()[0].conn.path == "same-host");
  }

  SECTION("a Closed that names the path has the last word on it") {
    d.s.connections().on_attached(kClient, proto::Attached{kLocal, kPeer, 0x11, "uiwarp0", ""});
    CHECK(d.s.connections().handed()[0].path.empty());
    d.s.connections().on_closed(
        kClient, proto::Closed{kLocal, kPeer, 0x11, "peer closed", "", "tcp: off"}, 0, "p", d.now);
    REQUIRE(d.s.connections().closed().size() == 1);
    CHECK(d.s.connections().closed()[0].conn.path == "tcp: off");
  }

  SECTION("its end, as the provider reports it, leaves handed() for closed(), with why") {
    // The passive side's id names the addresses as the request did: either order matches.
    const auto later = d.now + std::chrono::seconds(3);
    d.s.connections().on_closed(kClient,
                                proto::Closed{kPeer, kLocal, 0x00a1b2, "connection reset or lost",
                                              "posts 3 sent at once, 0 held"},
                                1000, "pid 42 (rping)", later);
    CHECK(d.s.connections().handed().empty());
    REQUIRE(d.s.connections().closed().size() == 1);
    const ClosedView& c = d.s.connections().closed()[0];
    CHECK(c.conn.params.ird == 8); // the handed-over connection's own record
    CHECK(c.conn.since == d.now);
    CHECK(c.ended == later);
    CHECK(c.reason == "connection reset or lost");
    CHECK(c.process == "pid 42 (rping)");
    CHECK(c.uid == 1000);
    CHECK(c.qp_num == 0x00a1b2);
    CHECK(c.drive == "posts 3 sent at once, 0 held");
    // The last kClosedKept are kept, oldest dropped first.
    for (std::size_t i = 0; i < Connections::kClosedKept + 5; ++i)
      d.s.connections().on_closed(
          kClient, proto::Closed{kLocal, kPeer, static_cast<std::uint32_t>(i), "x", ""}, 1000, "p",
          later);
    REQUIRE(d.s.connections().closed().size() == Connections::kClosedKept);
    CHECK(d.s.connections().closed().front().qp_num == 5);
    CHECK(d.s.connections().closed().back().qp_num == Connections::kClosedKept + 4);
  }

  // The peer sees exactly the Reply the client asked for.
  REQUIRE(peer.on_bytes(reply) == reply.size());
  require_established(peer);
  CHECK(peer.result().peer_private_data == text("yes"));
  CHECK(peer.result().conn.ird == 6);
  CHECK(peer.result().conn.ord == 3);
  CHECK(peer.result().conn.peer_ird == 8);
  CHECK(peer.result().conn.peer_ord == 2);

  // The session is over: a second Accept of the token finds nothing.
  d.s.on_accept(kClient, proto::Accept{cr.token, {}, 0, 0}, d.now);
  const auto again = d.actions();
  REQUIRE(summary(again) == Lines{"to 7 AcceptReply"});
  CHECK(message<proto::AcceptReply>(again).status == ENOENT);
}

TEST_CASE("uiwarpd passive side: an unenhanced Request reports the daemon's own IRD/ORD",
          "[sessions]") {
  MpaPolicy dp;
  dp.ird = 12;
  dp.ord = 5;
  Daemon d(policy(dp));
  d.listen();
  d.incoming();
  MpaStartup peer = MpaStartup::initiator(rev1(), {}, t0);
  const proto::ConnRequest cr = d.request(peer);
  // No IRD/ORD on the wire: the peer's IRD is reported as our ORD and vice versa, never 0.
  CHECK(cr.ird == 5);
  CHECK(cr.ord == 12);
  CHECK(cr.private_data.empty());
}

TEST_CASE("MPA-056 uiwarpd Reject: the Reply has R=1 and the client's private data, then close",
          "[sessions]") {
  Daemon d;
  d.listen();
  d.incoming();
  MpaStartup peer = MpaStartup::initiator(MpaPolicy{}, text("please"), t0);
  const proto::ConnRequest cr = d.request(peer);

  // Another client cannot reject it.
  d.s.on_reject(kOther, proto::Reject{cr.token, u8("x")}, d.now);
  CHECK(d.step().empty());
  CHECK(d.s.output(kSock).empty());

  d.s.on_reject(kClient, proto::Reject{cr.token, u8("no")}, d.now);
  CHECK(d.step() == Lines{"flush 21"});
  CHECK(d.s.counters().rejected == 1);
  CHECK(d.s.interest(kSock) == Interest::Writable);
  CHECK(d.s.sessions()[0].state == "closing");
  // Answered: a later Accept or Reject of it changes nothing (Closing leaves only to close).
  d.s.on_accept(kClient, proto::Accept{cr.token, {}, 1, 1}, d.now);
  d.s.on_reject(kClient, proto::Reject{cr.token, u8("again")}, d.now);
  CHECK(d.step() == Lines{"to 7 AcceptReply"}); // status ECONNRESET: it is gone
  CHECK(d.s.sessions()[0].state == "closing");
  CHECK(d.s.counters().rejected == 1);
  const Bytes reply = d.write();
  CHECK(hex(reply) == hex(raw_reply(kC | kR | kS, 2, enh(16, 16) + text("no"))));
  CHECK(d.step() == Lines{"close 21"});
  CHECK(d.s.sessions().empty());
  CHECK(d.s.connections().handed().empty());
  CHECK(d.s.counters().accepted == 0);

  REQUIRE(peer.on_bytes(reply) == reply.size());
  CHECK(peer.state() == MpaState::Rejected);
  CHECK(peer.result().peer_private_data == text("no"));
}

TEST_CASE("uiwarpd passive side: Accept of another client's token is an error, not a hand-over",
          "[sessions]") {
  Daemon d;
  d.listen();
  d.incoming();
  MpaStartup peer = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  const proto::ConnRequest cr = d.request(peer);

  for (auto [client, token] : {std::pair{kOther, cr.token}, std::pair{kClient, cr.token + 99}}) {
    d.s.on_accept(client, proto::Accept{token, u8("mine"), 4, 4}, d.now);
    const auto acts = d.actions();
    REQUIRE(summary(acts) == Lines{"to " + std::to_string(client) + " AcceptReply"});
    const auto r = message<proto::AcceptReply>(acts);
    CHECK(r.token == token);
    CHECK(r.status == ENOENT);
    CHECK(r.reason == "no such connection request");
    // The request is still the owner's to decide, and nothing was written.
    CHECK(d.s.output(kSock).empty());
    CHECK(d.s.interest(kSock) == Interest::Hangup);
  }
  d.s.on_accept(kClient, proto::Accept{cr.token, {}, 4, 4}, d.now);
  CHECK(d.step() == Lines{"flush 21"});
  d.write();
  CHECK(d.step() == Lines{"to 7 AcceptReply pass 21"});
}

TEST_CASE("uiwarpd: a client that goes away ends its listeners and sessions, not others'",
          "[sessions]") {
  Daemon d;
  d.listen();
  d.listen(kOther, 30, 99);
  d.incoming(21);
  d.incoming(22);
  d.incoming(31, 30);
  MpaStartup peer = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  const proto::ConnRequest cr = d.request(peer, 22); // 22: the client decides; 21: no Request yet
  REQUIRE(d.s.sessions().size() == 3);

  d.s.on_client_gone(kClient);
  CHECK(d.step() == Lines{"close 20", "close 21", "close 22"});
  REQUIRE(d.s.listeners().size() == 1);
  CHECK(d.s.listeners()[0].client == kOther);
  REQUIRE(d.s.sessions().size() == 1);
  CHECK(d.s.sessions()[0].client == kOther);
  CHECK(d.s.output(22).empty());
  CHECK(d.s.interest(22) == Interest::None);
  // Nothing is left of the request (the event loop would not deliver this, but no harm done).
  d.s.on_accept(kClient, proto::Accept{cr.token, {}, 0, 0}, d.now);
  CHECK(message<proto::AcceptReply>(d.actions()).status == ENOENT);
  d.s.on_client_gone(kOther);
  CHECK(d.step() == Lines{"close 30", "close 31"});
}

TEST_CASE("HX-004 uiwarpd responder: no Request comes, the startup timeout closes the socket",
          "[sessions]") {
  Daemon d;
  d.listen();
  d.now += 100ms;
  d.incoming();
  CHECK(d.s.deadline() == t0 + 1100ms);
  d.s.on_timer(t0 + 1099ms);
  CHECK(d.step().empty());
  d.s.on_timer(t0 + 1100ms);
  // The client never heard of the connection, so only the socket closes.
  CHECK(d.step() == Lines{"log", "close 21"});
  CHECK(d.s.counters().timeouts == 1);
  CHECK(d.s.sessions().empty());
  CHECK(d.s.deadline() == Clock::time_point::max());
}

TEST_CASE("HX-005 uiwarpd responder: a Request trickling in times out with the whole exchange",
          "[sessions]") {
  Daemon d;
  d.listen();
  d.incoming();
  MpaStartup peer = MpaStartup::initiator(MpaPolicy{}, text("slow"), t0);
  const Bytes req = take(peer);
  // One octet every 100 ms: each is taken, but none moves the deadline (a slowloris).
  for (std::size_t i = 0; i + 1 < req.size() && d.now < t0 + 1000ms; ++i) {
    REQUIRE(d.feed(Bytes{req[i]}) == 1);
    CHECK(d.step().empty());
    CHECK(d.s.deadline() == t0 + 1000ms);
    d.now += 100ms;
  }
  d.s.on_timer(d.now);
  CHECK(d.step() == Lines{"log", "close 21"});
  CHECK(d.s.counters().timeouts == 1);
  CHECK(d.s.counters().mpa_errors == 0);
}

TEST_CASE("MPA-069 uiwarpd responder: the request times out while the client decides",
          "[sessions]") {
  Daemon d;
  d.listen();
  d.incoming();
  MpaStartup peer = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  const proto::ConnRequest cr = d.request(peer);
  CHECK(d.s.deadline() == t0 + 1000ms);
  d.s.on_timer(t0 + 1000ms);
  CHECK(d.step() == Lines{"log", "close 21"});
  CHECK(d.s.counters().timeouts == 1);
  // A late Accept is told the request is gone.
  d.s.on_accept(kClient, proto::Accept{cr.token, {}, 0, 0}, d.now);
  CHECK(message<proto::AcceptReply>(d.actions()).status == ENOENT);
}

TEST_CASE("MPA-069 uiwarpd responder: a Reply the peer never reads fails the Accept in time",
          "[sessions]") {
  Daemon d;
  d.listen();
  d.incoming();
  MpaStartup peer = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  const proto::ConnRequest cr = d.request(peer);
  d.now += 300ms;
  d.s.on_accept(kClient, proto::Accept{cr.token, {}, 0, 0}, d.now);
  CHECK(d.step() == Lines{"flush 21"});
  d.write(kSock, 5); // the peer's window closes after 5 octets
  CHECK(d.step().empty());
  CHECK(d.s.deadline() == t0 + 300ms + 2s);
  d.s.on_timer(t0 + 300ms + 2s);
  const auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"log", "to 7 AcceptReply", "close 21"});
  const auto r = message<proto::AcceptReply>(acts);
  CHECK(r.token == cr.token);
  CHECK(r.status == ETIMEDOUT);
  CHECK(d.s.counters().timeouts == 1);
  CHECK(d.s.counters().accepted == 0);
  CHECK(d.s.connections().handed().empty());
}

TEST_CASE("HX-007 uiwarpd responder: the peer goes away during the exchange", "[sessions]") {
  Daemon d;
  d.listen();
  d.incoming();
  MpaStartup peer = MpaStartup::initiator(MpaPolicy{}, text("pd"), t0);

  SECTION("in the middle of the Request: an MPA error, the socket closes") {
    const Bytes req = take(peer);
    REQUIRE(d.feed(Bytes(req.begin(), req.begin() + 20)) == 20);
    d.s.on_peer_closed(kSock, d.now);
    CHECK(d.step() == Lines{"log", "close 21"});
    CHECK(d.s.counters().mpa_errors == 1);
  }
  SECTION("while the client decides: the socket closes, a later Accept finds nothing") {
    const proto::ConnRequest cr = d.request(peer);
    d.s.on_peer_closed(kSock, d.now);
    CHECK(d.step() == Lines{"close 21"});
    d.s.on_accept(kClient, proto::Accept{cr.token, {}, 0, 0}, d.now);
    CHECK(message<proto::AcceptReply>(d.actions()).status == ENOENT);
  }
  SECTION("while the Reply is written: the client's Accept fails, no socket is passed") {
    const proto::ConnRequest cr = d.request(peer);
    d.s.on_accept(kClient, proto::Accept{cr.token, {}, 0, 0}, d.now);
    CHECK(d.step() == Lines{"flush 21"});
    d.s.on_peer_closed(kSock, d.now);
    const auto acts = d.actions();
    REQUIRE(summary(acts) == Lines{"to 7 AcceptReply", "flush 21"});
    CHECK(message<proto::AcceptReply>(acts).status == ECONNRESET);
    d.write(); // what is left of the Reply drains, then the socket closes
    CHECK(d.step() == Lines{"close 21"});
    CHECK(d.s.connections().handed().empty());
  }
  SECTION("a socket error while the Reply is written: the Accept fails at once") {
    const proto::ConnRequest cr = d.request(peer);
    d.s.on_accept(kClient, proto::Accept{cr.token, {}, 0, 0}, d.now);
    CHECK(d.step() == Lines{"flush 21"});
    d.s.on_socket_error(kSock, EPIPE, d.now);
    const auto acts = d.actions();
    REQUIRE(summary(acts) == Lines{"to 7 AcceptReply", "close 21"});
    CHECK(message<proto::AcceptReply>(acts).status == ECONNRESET);
  }
}

TEST_CASE("HX-001 uiwarpd responder: junk instead of a Request closes the socket", "[sessions]") {
  Daemon d;
  d.listen();
  d.incoming();
  const Bytes junk = text("GET / HTTP/1.1\r\nHost: uiwarp\r\n\r\n");
  const std::size_t taken = d.feed(junk);
  CHECK(taken == 1); // "G" is not the key's "M": nothing after it is read
  CHECK(d.step() == Lines{"log", "close 21"});
  CHECK(d.s.counters().mpa_errors == 1);
  CHECK(d.s.counters().timeouts == 0);
}

TEST_CASE("uiwarpd sessions: MPA policy overrides of a listener, per device on a wildcard one, "
          "and a Listen whose overrides do not parse",
          "[sessions]") {
  for (const char* netdev : {"eth9", "eth0"}) {
    INFO(netdev);
    Daemon d;
    d.s.on_listen(kClient, proto::Listen{kListenId, kLocal, 16, -1, {}, "eth9 crc=off\n"},
                  kListener, kLocal);
    REQUIRE(d.step() == Lines{"to 7 ListenReply"});
    CHECK(d.s.wants_netdev(kListener));
    d.s.on_incoming(kListener, kSock, kLocal, kPeer, true, d.now, netdev);
    REQUIRE(d.step().empty());
    MpaPolicy ip;
    ip.crc = false;
    MpaStartup peer = MpaStartup::initiator(ip, {}, t0);
    const proto::ConnRequest cr = d.request(peer);
    d.s.on_accept(kClient, proto::Accept{cr.token, {}, 4, 4}, d.now);
    CHECK(d.step() == Lines{"flush 21"});
    d.write();
    auto acts = d.actions();
    REQUIRE(summary(acts) == Lines{"to 7 AcceptReply pass 21"});
    // eth9's device asks no CRC, so neither end does; elsewhere uiwarpd's policy asks for it.
    CHECK(message<proto::AcceptReply>(acts).params.crc == (std::string(netdev) != "eth9"));
  }
  Daemon d;
  d.s.on_listen(kClient, proto::Listen{kListenId, kLocal, 16, -1, "rtr=sideways", {}}, kListener,
                kLocal);
  auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"close 20", "to 7 ListenReply"});
  CHECK(message<proto::ListenReply>(acts).status == EINVAL);
  CHECK(message<proto::ListenReply>(acts).reason.find("bad value 'sideways' for rtr") !=
        std::string::npos);
  CHECK(d.s.listeners().empty());
}
