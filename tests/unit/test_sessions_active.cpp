// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's sessions core (cm/daemon/sessions.hpp), the active side: Connect, the TCP connect,
// the MPA Request, a real responder's (iwarp::MpaStartup) Reply or rejection, the hand-over with
// the negotiated parameters, the first-fpdu-delay hold, and the timeouts; and, for both sides,
// that on_bytes takes exactly the MPA frame however the octets arrive (sessions_harness.hpp).
#include "catch_compat.hpp"
#include "sessions_harness.hpp"

using namespace sesst;

namespace {

// uiwarpd asks for markers and peer-to-peer mode with a Write or Read RTR.
MpaPolicy daemon_mpa() {
  MpaPolicy p;
  p.markers = true;
  p.p2p = true;
  p.rtr = {false, true, true};
  return p;
}
// The peer: peer-to-peer, Read RTR only, no markers.
MpaPolicy peer_mpa() {
  MpaPolicy p;
  p.p2p = true;
  p.rtr = {false, false, true};
  p.max_ird = 1; // cannot raise its IRD to the initiator's ORD 2 (IR-02)
  return p;
}

} // namespace

TEST_CASE("IR-01 uiwarpd active side: Request, the peer's Reply, the hand-over with its params",
          "[sessions]") {
  Daemon d(policy(daemon_mpa()));
  const proto::Connect m = d.connect_msg(u8("hi"), 4, 2);
  d.s.on_connect(kClient, m, kSock, 0, d.now);
  CHECK(d.step().empty());
  CHECK(d.s.connecting(kSock));
  CHECK(d.s.interest(kSock) == Interest::Writable); // the connect's end
  CHECK(d.s.output(kSock).empty());
  REQUIRE(d.s.sessions().size() == 1);
  CHECK(d.s.sessions()[0].state == "tcp connect");
  CHECK(d.s.counters().connects == 1);

  d.now += 3ms;
  d.s.on_connected(kSock, kLocal, true, d.now);
  CHECK(d.step().empty());
  CHECK_FALSE(d.s.connecting(kSock));
  // "MPA ID Req Frame", M=1 C=1 S=1, Rev 2; A=1, IRD 4 (the Connect's, not the policy's 16);
  // C, D (Write and Read RTR), ORD 2; the client's private data.
  const Bytes req = d.write();
  CHECK(hex(req) == hex(raw_request(kM | kC | kS, 2, enh(kA | 4, kCw | kD | 2) + text("hi"))));
  CHECK(d.step().empty());
  CHECK(d.s.interest(kSock) == Interest::Readable);
  CHECK(d.s.sessions()[0].state == "awaiting MPA reply");

  MpaStartup peer = peer_responder(peer_mpa(), req);
  CHECK(peer.request().private_data == text("hi"));
  peer.accept(text("ok"), 1, 3);
  const Bytes reply = take(peer);
  // The peer wants no markers; A=1, D (Read RTR), IRD 1, ORD 3.
  CHECK(hex(reply) == hex(raw_reply(kC | kS, 2, enh(kA | 1, kD | 3) + text("ok"))));

  d.now += 3ms;
  REQUIRE(d.feed(reply + kFirstFpdu) == reply.size());
  const auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 ConnectReply pass 21"});
  const auto r = message<proto::ConnectReply>(acts);
  CHECK(r.id == kConnectId);
  CHECK(r.status == 0);
  CHECK(r.reason.empty());
  CHECK(u8_to_bytes(r.private_data) == text("ok"));
  CHECK(addr(r.src) == "192.0.2.1:4791"); // on_connected's address, not the Connect's port 0
  CHECK(addr(r.dst) == "192.0.2.2:40001");
  CHECK(r.params.version == iwarp::kVersionIetf);
  CHECK(r.params.crc);
  CHECK(r.params.markers_rx);       // we asked (M=1 in the Request)
  CHECK_FALSE(r.params.markers_tx); // the peer did not
  CHECK(r.params.ird == 4);         // at least the responder's ORD 3
  CHECK(r.params.ord == 1);         // at most the responder's IRD 1
  CHECK(r.params.peer_ird == 1);
  CHECK(r.params.peer_ord == 3);
  CHECK(r.params.initiator);
  CHECK(r.params.p2p);
  CHECK(r.params.rtr == iwarp::RtrType::Read);
  CHECK_FALSE(r.params.large_fpdu);

  CHECK(d.s.counters().connected == 1);
  CHECK(d.s.counters().connect_failed == 0);
  CHECK(d.s.sessions().empty());
  REQUIRE(d.s.connections().handed().size() == 1);
  CHECK(d.s.connections().handed()[0].params.rtr == iwarp::RtrType::Read);
  CHECK(d.s.connections().handed()[0].since == d.now);
  // The session is gone: the data path's octets are not taken.
  CHECK(d.s.on_bytes(kSock, kFirstFpdu, d.now) == 0);
}

TEST_CASE("uiwarpd active side: Connect without a socket, or a connect that fails at once",
          "[sessions]") {
  Daemon d;
  d.s.on_connect(kClient, d.connect_msg(), -1, 0, d.now);
  auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 ConnectReply"}); // no socket to close
  CHECK(message<proto::ConnectReply>(acts).status == EINVAL);
  CHECK(message<proto::ConnectReply>(acts).id == kConnectId);

  d.s.on_connect(kClient, d.connect_msg(), kSock, ENETUNREACH, d.now);
  acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 ConnectReply", "close 21"});
  const auto r = message<proto::ConnectReply>(acts);
  CHECK(r.status == ENETUNREACH);
  CHECK(addr(r.dst) == "192.0.2.2:40001");
  CHECK(d.s.counters().connects == 2);
  CHECK(d.s.counters().connect_failed == 2);
  CHECK(d.s.sessions().empty());

  // Refused after a while: the errno reaches the client.
  d.s.on_connect(kClient, d.connect_msg(), kSock, 0, d.now);
  CHECK(d.step().empty());
  d.s.on_socket_error(kSock, ECONNREFUSED, d.now);
  acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 ConnectReply", "close 21"});
  CHECK(message<proto::ConnectReply>(acts).status == ECONNREFUSED);
  CHECK(d.s.counters().connect_failed == 3);
}

TEST_CASE("EMPA-022 uiwarpd active side: a rejecting peer's private data and IRD/ORD reach the "
          "client",
          "[sessions]") {
  Daemon d;
  const Bytes req = d.connect(d.connect_msg(u8("may I"), 4, 2));
  MpaStartup peer = peer_responder(MpaPolicy{}, req);
  peer.reject(text("go away"), 9);
  const Bytes reply = take(peer);
  REQUIRE(octet(reply, 16) == (kC | kR | kS));

  REQUIRE(d.feed(reply) == reply.size());
  const auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 ConnectReply", "close 21"});
  const auto r = message<proto::ConnectReply>(acts);
  CHECK(r.status == ECONNREFUSED);
  CHECK(u8_to_bytes(r.private_data) == text("go away"));
  CHECK(r.params.peer_ord == 9); // the ORD the responder requires
  CHECK(r.params.peer_ird == 16);
  CHECK(d.s.counters().rejected_by_peer == 1);
  CHECK(d.s.counters().connect_failed == 1);
  CHECK(d.s.counters().connected == 0);
  CHECK(d.s.connections().handed().empty());
}

TEST_CASE("HX-005 uiwarpd initiator: a Reply that stalls times out, the client hears ETIMEDOUT",
          "[sessions]") {
  Daemon d;
  d.s.on_connect(kClient, d.connect_msg(), kSock, 0, d.now);
  d.now += 40ms;
  // The MPA exchange's timeout runs from the TCP connection, not from Connect.
  const Bytes req = d.connect(d.connect_msg());
  CHECK(d.s.deadline() == t0 + 40ms + 1000ms);
  MpaStartup peer = peer_responder(MpaPolicy{}, req);
  peer.accept(text("slow reply"));
  const Bytes reply = take(peer);
  REQUIRE(d.feed(Bytes(reply.begin(), reply.end() - 3)) == reply.size() - 3);
  CHECK(d.step().empty());

  d.s.on_timer(t0 + 1039ms);
  CHECK(d.step().empty());
  d.s.on_timer(t0 + 1040ms);
  const auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"log", "to 7 ConnectReply", "close 21"});
  const auto r = message<proto::ConnectReply>(acts);
  CHECK(r.id == kConnectId);
  CHECK(r.status == ETIMEDOUT);
  CHECK(r.reason == "MPA startup timed out with 192.0.2.2:40001");
  CHECK(d.s.counters().timeouts == 1);
  CHECK(d.s.counters().connect_failed == 1);
  CHECK(d.s.sessions().empty());
}

TEST_CASE("uiwarpd initiator: the TCP connect times out after the Connect's timeout_ms",
          "[sessions]") {
  Daemon d;
  d.s.on_connect(kClient, d.connect_msg({}, 0, 0, 250), kSock, 0, d.now);
  CHECK(d.step().empty());
  CHECK(d.s.deadline() == t0 + 250ms);
  d.s.on_timer(t0 + 249ms);
  CHECK(d.step().empty());
  d.s.on_timer(t0 + 250ms);
  const auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"log", "to 7 ConnectReply", "close 21"});
  CHECK(message<proto::ConnectReply>(acts).status == ETIMEDOUT);
  CHECK(d.s.counters().timeouts == 1);
  CHECK(d.s.counters().connect_failed == 1);

  // Without one, the policy's startup timeout bounds the TCP connect too.
  d.now = t0 + 250ms;
  d.s.on_connect(kClient, d.connect_msg(), kSock, 0, d.now);
  CHECK(d.s.deadline() == t0 + 250ms + 1000ms);
}

TEST_CASE("HX-007 uiwarpd initiator: the peer closes during the exchange, the client is told",
          "[sessions]") {
  Daemon d;
  const Bytes req = d.connect(d.connect_msg());
  MpaStartup peer = peer_responder(MpaPolicy{}, req);
  peer.accept(text("cut short"));
  const Bytes reply = take(peer);

  SECTION("before any of the Reply") {
    d.s.on_peer_closed(kSock, d.now);
    const auto acts = d.actions();
    REQUIRE(summary(acts) == Lines{"log", "to 7 ConnectReply", "close 21"});
    const auto r = message<proto::ConnectReply>(acts);
    CHECK(r.status == ECONNRESET);
    CHECK(r.reason == "peer closed TCP before sending the MPA Reply");
  }
  SECTION("with the private data incomplete") {
    REQUIRE(d.feed(Bytes(reply.begin(), reply.end() - 2)) == reply.size() - 2);
    d.s.on_peer_closed(kSock, d.now);
    const auto acts = d.actions();
    REQUIRE(summary(acts) == Lines{"log", "to 7 ConnectReply", "close 21"});
    const auto r = message<proto::ConnectReply>(acts);
    CHECK(r.status == ECONNRESET);
    CHECK(r.reason.find("private data") != std::string::npos);
  }
  CHECK(d.s.counters().mpa_errors == 1);
  CHECK(d.s.counters().connect_failed == 1);
  CHECK(d.s.sessions().empty());
}

TEST_CASE("HX-014 uiwarpd initiator: no usable RTR: the client is told, the Terminate drains",
          "[sessions]") {
  MpaPolicy p;
  p.p2p = true;
  Daemon d(policy(p));
  d.connect(d.connect_msg());
  // A=1 but not one RTR type listed.
  const Bytes reply = raw_reply(kC | kS, 2, enh(kA | 8, 8));
  REQUIRE(d.feed(reply + kFirstFpdu) == reply.size());
  const auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"log", "to 7 ConnectReply", "flush 21"});
  CHECK(message<proto::ConnectReply>(acts).status == ECONNRESET);
  // The Terminate (L2, MPA code 7) goes out before the socket closes, and nothing more is read.
  CHECK(d.s.interest(kSock) == Interest::Writable);
  CHECK(d.s.on_bytes(kSock, kFirstFpdu, d.now) == 0);
  CHECK(hex(d.write()) == hex(expected_term(7, true, false)));
  CHECK(d.step() == Lines{"close 21"});
  CHECK(d.s.counters().mpa_errors == 1);
}

TEST_CASE("uiwarpd first-fpdu-delay: the connection is held unread, handed over at the deadline",
          "[sessions]") {
  SessionPolicy sp = policy();
  sp.first_fpdu_delay = std::chrono::milliseconds(50);
  Daemon d(sp);
  const Bytes req = d.connect(d.connect_msg());
  MpaStartup peer = peer_responder(MpaPolicy{}, req);
  peer.accept({});
  const Bytes reply = take(peer);

  d.now += 10ms;
  REQUIRE(d.feed(reply + kFirstFpdu) == reply.size());
  CHECK(d.step() == Lines{"flush 21"});
  // Held: nothing to wait for (the peer's next octets are the data path's), none taken.
  CHECK(d.s.interest(kSock) == Interest::None);
  CHECK(d.s.on_bytes(kSock, kFirstFpdu, d.now) == 0);
  REQUIRE(d.s.sessions().size() == 1);
  CHECK(d.s.sessions()[0].state == "established, held");
  CHECK(d.s.deadline() == t0 + 60ms);
  CHECK(d.s.counters().connected == 0);

  d.s.on_timer(t0 + 59ms);
  CHECK(d.step().empty());
  d.s.on_timer(t0 + 60ms);
  const auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 ConnectReply pass 21"});
  CHECK(message<proto::ConnectReply>(acts).status == 0);
  CHECK(message<proto::ConnectReply>(acts).params.initiator);
  CHECK(d.s.counters().connected == 1);
  CHECK(d.s.counters().timeouts == 0);
  REQUIRE(d.s.connections().handed().size() == 1);
  CHECK(d.s.connections().handed()[0].since == t0 + 60ms);
}

// ---- both sides: every split of the peer's octets ----------------------------------------

namespace {

// Everything the daemon did with `in` (the peer's frame and the first FPDU) cut at `cuts`.
std::string passive_run(const Bytes& in, const std::vector<std::size_t>& cuts) {
  Daemon d;
  d.listen();
  d.incoming();
  std::string out = "taken " + std::to_string(d.feed(in, cuts)) + "\n";
  auto acts = d.actions();
  if (summary(acts) == Lines{"to 7 ConnRequest"}) {
    d.s.on_accept(kClient, proto::Accept{message<proto::ConnRequest>(acts).token, u8("y"), 2, 2},
                  d.now);
    out += "reply " + hex(d.write()) + "\n";
  }
  const auto more = d.actions();
  acts.insert(acts.end(), more.begin(), more.end());
  return out + describe(acts);
}

std::string active_run(const Bytes& reply_in, const std::vector<std::size_t>& cuts) {
  Daemon d(policy(daemon_mpa()));
  d.connect(d.connect_msg(u8("hi"), 4, 2));
  const std::size_t taken = d.feed(reply_in, cuts);
  return "taken " + std::to_string(taken) + "\n" + describe(d.actions());
}

void require_split_invariant(
    const std::function<std::string(const Bytes&, const std::vector<std::size_t>&)>& run,
    const Bytes& in) {
  const std::string whole = run(in, {});
  for (std::size_t k = 1; k < in.size(); ++k) {
    INFO("split at " << k);
    REQUIRE(run(in, {k}) == whole);
  }
  std::vector<std::size_t> every;
  for (std::size_t k = 1; k < in.size(); ++k)
    every.push_back(k);
  REQUIRE(run(in, every) == whole);
}

} // namespace

TEST_CASE("HX-017 uiwarpd takes exactly the MPA frame in any split: the FPDU after it stays",
          "[sessions]") {
  SECTION("passive side: the Request, then the initiator's first FPDU") {
    MpaStartup peer = MpaStartup::initiator(MpaPolicy{}, text("request pd"), t0);
    const Bytes req = take(peer);
    const std::string whole = passive_run(req + kFirstFpdu, {});
    CHECK(whole.rfind("taken " + std::to_string(req.size()) + "\nreply ", 0) == 0);
    CHECK(whole.find("to 7 AcceptReply pass 21") != std::string::npos);
    require_split_invariant(passive_run, req + kFirstFpdu);
  }
  SECTION("active side: the Reply, then the responder's first FPDU") {
    Daemon d(policy(daemon_mpa()));
    MpaStartup peer = peer_responder(peer_mpa(), d.connect(d.connect_msg(u8("hi"), 4, 2)));
    peer.accept(text("reply pd"), 1, 3);
    const Bytes reply = take(peer);
    const std::string whole = active_run(reply + kFirstFpdu, {});
    CHECK(whole.rfind("taken " + std::to_string(reply.size()) + "\nto 7 ConnectReply pass 21", 0) ==
          0);
    require_split_invariant(active_run, reply + kFirstFpdu);
  }
  SECTION("a failing frame fails the same way in any split") {
    require_split_invariant(passive_run, text("MPA ID Req FrXme") + kFirstFpdu);
    require_split_invariant(active_run, raw_reply(kC | kS, 2, Bytes(600))); // PD_Length > 512
  }
}
