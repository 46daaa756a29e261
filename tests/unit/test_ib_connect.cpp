// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// IB-style connect (a uiwarp extension; uiwarp/ib_connect.hpp): what both ends agree on (GIDs
// as addresses, which end connects, the Request's private data), and uiwarpd's responder half
// (cm/daemon/sessions_ib.cpp) against a real MPA initiator: a Request matched with the QP that
// waits for it, in either order; one naming no waiting QP held, then rejected with the reason;
// a wait that times out; a wait or a session ended by Unlisten (sessions_harness.hpp).
#include "catch_compat.hpp"
#include "daemon_proto_samples.hpp"
#include "same_host_samples.hpp"
#include "sessions_harness.hpp"
#include "uiwarp/ib_connect.hpp"

using namespace sesst;
namespace ib = uiwarp::ib;

namespace {

constexpr SockId kIbListener = 30;
constexpr std::uint64_t kWaitId = (1ull << 63) | 0x42;
constexpr std::uint32_t kMine = 0x0a0b0c, kTheirs = 0x010203;

using uiwarp::test::v6;

ib::Gid gid(const sockaddr_storage& a) { return ib::address_gid(a); }

Bytes as_bytes(const std::vector<std::uint8_t>& v) {
  Bytes b;
  for (std::uint8_t x : v)
    b.push_back(std::byte(x));
  return b;
}

// The responder's QP kMine on kLocal waits for QP kTheirs on kPeer's host.
proto::IbConnect wait_msg(std::uint32_t timeout_ms = 5000) {
  proto::IbConnect m;
  m.id = kWaitId;
  m.local = v4("192.0.2.1", 0);
  m.peer = v4("192.0.2.2", 0);
  m.local_qpn = kMine;
  m.peer_qpn = kTheirs;
  m.ird = 4;
  m.timeout_ms = timeout_ms;
  return m;
}

// A daemon whose rendezvous listener accepted kSock from kPeer.
Daemon ib_daemon() {
  Daemon d;
  d.s.on_ib_listen(kIbListener, v6("::", 4791));
  CHECK(d.s.interest(kIbListener) == Interest::Accept);
  CHECK(d.s.listeners().empty()); // not a client's: status lists it apart
  d.s.on_incoming(kIbListener, kSock, kLocal, kPeer, true, d.now);
  REQUIRE(d.step().empty());
  return d;
}

MpaStartup ib_initiator(std::uint32_t src, std::uint32_t dst) {
  return MpaStartup::initiator(MpaPolicy{}, as_bytes(ib::encode({src, dst})), t0);
}

// The Request in, the QP waiting: the Reply goes out, then ConnectReply with the socket.
void expect_handed_over(Daemon& d, MpaStartup& peer) {
  Bytes reply = d.write();
  REQUIRE(peer.on_bytes(reply) == reply.size());
  CHECK(peer.state() == MpaState::Established);
  auto acts = d.actions();
  REQUIRE(summary(acts) == Lines{"to 7 ConnectReply pass 21"});
  const auto r = message<proto::ConnectReply>(acts);
  CHECK(r.id == kWaitId);
  CHECK(r.status == 0);
  CHECK_FALSE(r.params.initiator);
  CHECK(r.params.ird >= 4); // ours, raised to the initiator's ORD (RFC 6581 §9.1)
  CHECK_FALSE(d.s.ib_listener_wanted());
}

} // namespace

TEST_CASE("IB-style connect: GIDs as addresses, which end connects, the Request's data", "[ib]") {
  ib::Gid g4{};
  g4[10] = g4[11] = 0xff;
  g4[12] = 10, g4[15] = 7;
  auto a = ib::gid_address(g4);
  REQUIRE(a);
  CHECK(addr(*a) == "10.0.0.7:0");
  CHECK(ib::address_gid(*a) == g4);
  ib::Gid g6 = gid(v6("2001:db8::5", 0));
  REQUIRE(ib::gid_address(g6));
  CHECK(addr(*ib::gid_address(g6)) == "[2001:db8::5]:0");
  // Not addresses: the MAC-derived fe80:: GID 0, unspecified, multicast, 0.0.0.0.
  CHECK_FALSE(ib::gid_address(gid(v6("fe80::9a4c:67ff:fe00:be3", 0))));
  CHECK_FALSE(ib::gid_address(ib::Gid{}));
  CHECK_FALSE(ib::gid_address(gid(v6("ff02::1", 0))));
  CHECK_FALSE(ib::gid_address(gid(v4("0.0.0.0", 0))));
  CHECK(ib::same_host(v4("10.0.0.7", 1), v6("::ffff:10.0.0.7", 2)));
  CHECK_FALSE(ib::same_host(v4("10.0.0.7", 1), v4("10.0.0.8", 1)));

  // The lower (GID, QPN) connects; both ends reach the same answer; a QP is not its own peer.
  const ib::Gid lo = gid(v4("10.0.0.1", 0)), hi = gid(v4("10.0.0.2", 0));
  CHECK(ib::role(lo, 900, hi, 5) == ib::Role::Initiator);
  CHECK(ib::role(hi, 5, lo, 900) == ib::Role::Responder);
  CHECK(ib::role(lo, 5, lo, 6) == ib::Role::Initiator);
  CHECK(ib::role(lo, 6, lo, 5) == ib::Role::Responder);
  CHECK_FALSE(ib::role(lo, 5, lo, 5));

  const auto pd = ib::encode({0x123456, 0xabcdef});
  REQUIRE(pd.size() == ib::kRequestLen);
  auto r = ib::decode(pd.data(), pd.size());
  REQUIRE(r);
  CHECK(r->src_qpn == 0x123456);
  CHECK(r->dst_qpn == 0xabcdef);
  for (std::size_t n = 0; n < pd.size(); ++n) // every truncation
    CHECK_FALSE(ib::decode(pd.data(), n));
  auto bad = pd;
  bad[0] ^= 1;
  CHECK_FALSE(ib::decode(bad.data(), bad.size()));
  bad = pd;
  bad[8] = 2; // another version
  CHECK_FALSE(ib::decode(bad.data(), bad.size()));
  CHECK(ib::qpn_string(0x1a2b) == "0x001a2b");
}

TEST_CASE("IB-style connect, uiwarpd responder: the Request meets the QP that waits for it",
          "[ib][sessions]") {
  SECTION("the QP waits first") {
    Daemon d = ib_daemon();
    d.s.on_ib_wait(kClient, wait_msg(), d.now);
    CHECK(d.step().empty());
    CHECK(d.s.ib_listener_wanted());
    MpaStartup peer = ib_initiator(kTheirs, kMine);
    const Bytes req = mpat::take(peer);
    REQUIRE(d.feed(req) == req.size());
    CHECK(d.step() == Lines{"flush 21"}); // accepted without asking the client
    expect_handed_over(d, peer);
  }
  SECTION("the Request comes first, and is held until the QP waits") {
    Daemon d = ib_daemon();
    MpaStartup peer = ib_initiator(kTheirs, kMine);
    const Bytes req = mpat::take(peer);
    REQUIRE(d.feed(req) == req.size());
    CHECK(d.step().empty());
    CHECK(d.s.interest(kSock) == Interest::Hangup);
    REQUIRE(d.s.sessions().size() == 1);
    CHECK(d.s.sessions()[0].state == "awaiting IB-style QP");
    d.now += 500ms;
    d.s.on_ib_wait(kClient, wait_msg(), d.now);
    CHECK(d.step() == Lines{"flush 21"});
    expect_handed_over(d, peer);
  }
}

TEST_CASE("IB-style connect takes the same-host path as the RDMA CM's: the bit asked, and "
          "answered with the waiting QP's offer for a peer on this host",
          "[ib][sessions]") {
  MpaPolicy on;
  on.same_host = true;
  // The responder: its QP's offer goes with its wait (made at RTR), into the Reply.
  for (bool peer_on_host : {true, false}) {
    INFO((peer_on_host ? "a peer on this host" : "a peer elsewhere"));
    Daemon d(policy(on));
    d.s.on_ib_listen(kIbListener, v6("::", 4791));
    d.s.on_incoming(kIbListener, kSock, kLocal, kPeer, peer_on_host, d.now);
    REQUIRE(d.step().empty());
    proto::IbConnect w = wait_msg();
    w.same_host_offer = uiwarp::test::sample_offer();
    d.s.on_ib_wait(kClient, w, d.now);
    CHECK(d.step().empty());
    MpaStartup peer = MpaStartup::initiator(on, as_bytes(ib::encode({kTheirs, kMine})), t0);
    const Bytes req = mpat::take(peer);
    REQUIRE(d.feed(req) == req.size());
    CHECK(d.step() == Lines{"flush 21"});
    const Bytes reply = d.write();
    const auto header = iwarp::MpaFrameHeader::decode(reply.data());
    REQUIRE(header);
    CHECK(((header->flags & iwarp::kMpaFlagSameHost) != 0) == peer_on_host);
    REQUIRE(peer.on_bytes(reply) == reply.size());
    CHECK(peer.result().conn.same_host == peer_on_host);
    if (peer_on_host) {
      REQUIRE(peer.result().conn.peer_same_host);
      CHECK(peer.result().conn.peer_same_host->pid == uiwarp::test::sample_offer().pid);
    }
    // The offer is uiwarp's: none of it reaches the program as the Reply's private data.
    CHECK(peer.result().peer_private_data.empty());
  }
  // The initiator: its Request asks.
  Daemon d(policy(on));
  d.s.on_connect(kClient, d.connect_msg(), kSock, 0, d.now, true);
  REQUIRE(d.step().empty());
  d.s.on_connected(kSock, kLocal, true, d.now);
  REQUIRE(d.step().empty());
  const Bytes req = d.write();
  const auto header = iwarp::MpaFrameHeader::decode(req.data());
  REQUIRE(header);
  CHECK((header->flags & iwarp::kMpaFlagSameHost) != 0);
}

TEST_CASE("IB-style connect, uiwarpd responder: Requests that name no waiting QP are refused",
          "[ib][sessions]") {
  SECTION("another QPN, or the right QPN from another host: held, then an MPA Reject") {
    for (bool other_host : {false, true}) {
      Daemon d = ib_daemon();
      proto::IbConnect w = wait_msg();
      if (other_host) w.peer = v4("192.0.2.99", 0);
      d.s.on_ib_wait(kClient, w, d.now);
      CHECK(d.step().empty());
      MpaStartup peer = ib_initiator(other_host ? kTheirs : kTheirs + 1, kMine);
      const Bytes req = mpat::take(peer);
      REQUIRE(d.feed(req) == req.size());
      CHECK(d.step().empty()); // held: its QP may be about to wait
      d.now += 1001ms;         // the startup timeout (policy(): 1 s)
      d.s.on_timer(d.now);
      CHECK(d.step() == Lines{"log", "flush 21"});
      Bytes reply = d.write();
      REQUIRE(peer.on_bytes(reply) == reply.size());
      REQUIRE(peer.state() == MpaState::Rejected);
      const auto& why = peer.result().peer_private_data;
      const std::string text(reinterpret_cast<const char*>(why.data()), why.size());
      CHECK(text.find("no QP 0x0a0b0c here waits for it") != std::string::npos);
      CHECK(d.step() == Lines{"close 21"});
      CHECK(d.s.ib_listener_wanted()); // the waiting QP still waits
    }
  }
  SECTION("private data that is not an IB-style Request: rejected at once") {
    Daemon d = ib_daemon();
    MpaStartup peer = MpaStartup::initiator(MpaPolicy{}, text("rdma_cm data"), t0);
    const Bytes req = mpat::take(peer);
    REQUIRE(d.feed(req) == req.size());
    CHECK(d.step() == Lines{"log", "flush 21"});
    Bytes reply = d.write();
    REQUIRE(peer.on_bytes(reply) == reply.size());
    CHECK(peer.state() == MpaState::Rejected);
  }
}

TEST_CASE("IB-style connect, uiwarpd: a wait times out, Unlisten ends a wait or a session",
          "[ib][sessions]") {
  Daemon d = ib_daemon();
  d.s.on_ib_wait(kClient, wait_msg(2000), d.now);
  CHECK(d.step().empty());
  CHECK(d.s.deadline() <= d.now + 2000ms);
  d.now += 2001ms;
  d.s.on_timer(d.now);
  auto acts = d.actions();
  const auto r = message<proto::ConnectReply>(acts);
  CHECK(r.id == kWaitId);
  CHECK(r.status == ETIMEDOUT);
  CHECK(r.reason.find("did not connect to QP 0x0a0b0c") != std::string::npos);
  CHECK_FALSE(d.s.ib_listener_wanted());

  // Unlisten (the QP was reset or destroyed) ends a wait: no reply later.
  d.s.on_ib_wait(kClient, wait_msg(2000), d.now);
  d.s.on_unlisten(kClient, proto::Unlisten{kWaitId});
  CHECK_FALSE(d.s.ib_listener_wanted());
  d.now += 5s;
  d.s.on_timer(d.now);
  for (const auto& line : d.step())
    CHECK(line.find("ConnectReply") == std::string::npos);

  // ... and an initiator's session: its socket closes.
  Daemon a;
  proto::Connect m = a.connect_msg(proto::Bytes(ib::encode({kMine, kTheirs})));
  m.id = kWaitId;
  a.s.on_connect(kClient, m, kSock, 0, a.now, true);
  CHECK(a.step().empty());
  a.s.on_unlisten(kOther, proto::Unlisten{kWaitId}); // another client's id: nothing
  CHECK(a.step().empty());
  a.s.on_unlisten(kClient, proto::Unlisten{kWaitId});
  CHECK(a.step() == Lines{"close 21"});
}

TEST_CASE("IB-style connect, uiwarpd responder: a Request taken from the backlog as the "
          "listener closes waits for its QP",
          "[ib][sessions]") {
  // Peer QPs of `ib_write_bw -q 4` connect one by one while ours reach RTR one by one: when the
  // last wait has just been met, the next QP's connect may sit in the listener's backlog. The
  // loop takes it (on_incoming) before it closes the listener, and it is held for its QP.
  Daemon d = ib_daemon();
  d.s.on_ib_wait(kClient, wait_msg(), d.now);
  MpaStartup first = ib_initiator(kTheirs, kMine);
  const Bytes req1 = mpat::take(first);
  REQUIRE(d.feed(req1) == req1.size());
  CHECK(d.step() == Lines{"flush 21"});
  expect_handed_over(d, first); // no QP waits now
  constexpr SockId kNext = 22;
  d.s.on_incoming(kIbListener, kNext, kLocal, kPeer, true, d.now);
  d.s.on_listener_closed(kIbListener);
  CHECK(d.step() == Lines{"close " + std::to_string(kIbListener)});
  MpaStartup next = ib_initiator(kTheirs + 1, kMine + 1);
  const Bytes req2 = mpat::take(next);
  REQUIRE(d.feed(req2, {}, kNext) == req2.size());
  CHECK(d.step().empty()); // held: its QP is about to wait
  d.now += 100ms;
  proto::IbConnect w = wait_msg();
  w.id = kWaitId + 1;
  w.local_qpn = kMine + 1;
  w.peer_qpn = kTheirs + 1;
  d.s.on_ib_wait(kClient, w, d.now);
  CHECK(d.step() == Lines{"flush 22"}); // accepted without asking the client
  CHECK_FALSE(d.s.ib_listener_wanted());
}
