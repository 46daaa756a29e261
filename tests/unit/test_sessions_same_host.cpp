// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's sessions core (cm/daemon/sessions.hpp) and uiwarp's same-host path: whether a
// Request's bit gets an offer (the policy, and the peer's address, which must be this host's),
// the offer's octets at the end of the Reply, and what each end's client hears: the agreement,
// the responder's offer, or why there is none (sessions_harness.hpp).
#include "catch_compat.hpp"
#include "same_host_samples.hpp"
#include "sessions_harness.hpp"

using namespace sesst;

namespace {

MpaPolicy with_same_host(bool on) {
  MpaPolicy p;
  p.same_host = on;
  return p;
}

} // namespace

TEST_CASE("uiwarpd passive side, the same-host path: ConnRequest says whether an offer is wanted, "
          "Accept's offer goes into the Reply",
          "[sessions][same-host]") {
  const iwarp::SameHostOffer offer = uiwarp::test::sample_offer();
  SECTION("the Request asks and the policy answers: the offer's octets end the Reply") {
    Daemon d(policy(with_same_host(true)));
    d.listen();
    d.incoming();
    MpaStartup peer = MpaStartup::initiator(with_same_host(true), text("hi"), t0);
    const proto::ConnRequest cr = d.request(peer);
    CHECK(cr.same_host);
    CHECK(u8_to_bytes(cr.private_data) == text("hi")); // the bit is not private data
    d.s.on_accept(kClient, proto::Accept{cr.token, u8("yes"), 4, 4, offer}, d.now);
    CHECK(d.step() == Lines{"flush 21"});
    const Bytes reply = d.write();
    // The Reply as written: the same-host bit beside uiwarp's mark, the enhanced data, the
    // client's private data, then the 64 octets of the offer.
    const auto header = iwarp::MpaFrameHeader::decode(reply.data());
    REQUIRE(header);
    CHECK(header->kind == iwarp::MpaKind::Reply);
    CHECK((header->flags & iwarp::kMpaFlagSameHost) != 0);
    CHECK((header->flags & iwarp::kMpaFlagUiwarpReply) != 0);
    REQUIRE(reply.size() == iwarp::kMpaFrameHeaderLen + header->pd_length);
    CHECK(header->pd_length == iwarp::kEnhancedDataLen + 3 + iwarp::kSameHostOfferLen);
    Bytes want(iwarp::kSameHostOfferLen);
    offer.encode(want.data());
    CHECK(hex(Bytes(reply.end() - iwarp::kSameHostOfferLen, reply.end())) == hex(want));
    CHECK(iwarp::SameHostOffer::decode(reply.data() + reply.size() - iwarp::kSameHostOfferLen) ==
          offer);
    // The peer reads it as the responder's offer, the client's private data apart.
    REQUIRE(peer.on_bytes(reply) == reply.size());
    require_established(peer);
    CHECK(peer.result().conn.same_host);
    REQUIRE(peer.result().conn.peer_same_host);
    CHECK(*peer.result().conn.peer_same_host == offer);
    CHECK(peer.result().peer_private_data == text("yes"));
    // The responder's program hears that the path was agreed.
    const auto ar = message<proto::AcceptReply>(d.actions());
    CHECK(ar.status == 0);
    CHECK(ar.params.same_host);
    CHECK_FALSE(ar.params.peer_same_host); // the offer is the initiator's to take
    CHECK_FALSE(ar.params.peer_off_host);
    CHECK(d.s.connections().handed()[0].params.same_host);
  }
  SECTION("an Accept without an offer: a Reply without the bit or the trailer") {
    Daemon d(policy(with_same_host(true)));
    d.listen();
    d.incoming();
    MpaStartup peer = MpaStartup::initiator(with_same_host(true), text("hi"), t0);
    const proto::ConnRequest cr = d.request(peer);
    CHECK(cr.same_host);
    d.s.on_accept(kClient, proto::Accept{cr.token, u8("yes"), 4, 4, std::nullopt}, d.now);
    CHECK(d.step() == Lines{"flush 21"});
    const Bytes reply = d.write();
    const auto header = iwarp::MpaFrameHeader::decode(reply.data());
    REQUIRE(header);
    CHECK((header->flags & iwarp::kMpaFlagSameHost) == 0);
    CHECK(header->pd_length == iwarp::kEnhancedDataLen + 3);
    REQUIRE(peer.on_bytes(reply) == reply.size());
    require_established(peer);
    CHECK_FALSE(peer.result().conn.same_host);
    CHECK_FALSE(peer.result().conn.peer_same_host);
    CHECK(peer.result().peer_private_data == text("yes"));
    CHECK_FALSE(message<proto::AcceptReply>(d.actions()).params.same_host);
  }
  SECTION("the policy is off (uiwarpd's, or the listener's same-host=off): no offer is wanted, "
          "and one that comes anyway stays out of the Reply") {
    const bool daemon_on = GENERATE(false, true);
    Daemon d(policy(with_same_host(daemon_on)));
    if (daemon_on) { // the program's UIWARP_SAME_HOST=off, through the shim's policy string
      d.s.on_listen(kClient, proto::Listen{kListenId, kLocal, 16, -1, "same-host=off", {}},
                    kListener, kLocal);
      REQUIRE(d.step() == Lines{"to 7 ListenReply"});
    } else {
      d.listen();
    }
    d.incoming();
    MpaStartup peer = MpaStartup::initiator(with_same_host(true), {}, t0);
    const proto::ConnRequest cr = d.request(peer);
    CHECK_FALSE(cr.same_host);
    d.s.on_accept(kClient, proto::Accept{cr.token, {}, 4, 4, offer}, d.now);
    CHECK(d.step() == Lines{"flush 21"});
    const Bytes reply = d.write();
    const auto header = iwarp::MpaFrameHeader::decode(reply.data());
    REQUIRE(header);
    CHECK((header->flags & iwarp::kMpaFlagSameHost) == 0);
    CHECK(header->pd_length == iwarp::kEnhancedDataLen);
    REQUIRE(peer.on_bytes(reply) == reply.size());
    require_established(peer);
    CHECK_FALSE(peer.result().conn.same_host);
  }
  SECTION("a Request without the bit: no offer is wanted") {
    Daemon d(policy(with_same_host(true)));
    d.listen();
    d.incoming();
    MpaStartup peer = MpaStartup::initiator(with_same_host(false), {}, t0);
    CHECK_FALSE(d.request(peer).same_host);
  }
}

TEST_CASE("uiwarpd passive side, the same-host path: a peer whose address is not this host's gets "
          "an ordinary Reply, whatever its Request and the client's Accept say",
          "[sessions][same-host]") {
  // The offer names this process (boot id, pid namespace, uid, pid): it goes only to a peer on
  // this host, which the event loop tells (uiwarp::host_address of the accepted socket's peer).
  Daemon d(policy(with_same_host(true)));
  d.listen();
  d.incoming(kSock, kListener, /*on_host=*/false);
  MpaStartup peer = MpaStartup::initiator(with_same_host(true), text("hi"), t0);
  const proto::ConnRequest cr = d.request(peer);
  CHECK_FALSE(cr.same_host); // no offer is wanted
  // A client that sends one anyway: it stays out of the Reply.
  d.s.on_accept(kClient, proto::Accept{cr.token, u8("yes"), 4, 4, uiwarp::test::sample_offer()},
                d.now);
  CHECK(d.step() == Lines{"flush 21"});
  const Bytes reply = d.write();
  const auto header = iwarp::MpaFrameHeader::decode(reply.data());
  REQUIRE(header);
  CHECK((header->flags & iwarp::kMpaFlagSameHost) == 0);
  CHECK(header->pd_length == iwarp::kEnhancedDataLen + 3);
  REQUIRE(peer.on_bytes(reply) == reply.size());
  require_established(peer);
  CHECK_FALSE(peer.result().conn.same_host);
  CHECK_FALSE(peer.result().conn.peer_same_host);
  CHECK(peer.result().peer_private_data == text("yes"));
  // The program's path says why.
  const auto ar = message<proto::AcceptReply>(d.actions());
  CHECK(ar.status == 0);
  CHECK_FALSE(ar.params.same_host);
  CHECK(ar.params.peer_off_host);
  CHECK(iwarp::same_host_refusal(ar.params) == "the peer's address is not this host's");
}

TEST_CASE("uiwarpd active side, the same-host path: the Request asks, the responder's offer "
          "reaches the client in ConnectReply's params",
          "[sessions][same-host]") {
  iwarp::SameHostOffer offer;
  offer.pid = 4242;
  offer.slot = 7;
  offer.nonce[0] = std::byte{0x5a};
  MpaPolicy on;
  on.same_host = true;
  const bool daemon_on = GENERATE(true, false);
  Daemon d(policy(daemon_on ? on : MpaPolicy{}));
  const Bytes req = d.connect(d.connect_msg());
  const auto header = iwarp::MpaFrameHeader::decode(req.data());
  REQUIRE(header);
  CHECK(((header->flags & iwarp::kMpaFlagSameHost) != 0) == daemon_on);
  MpaStartup peer = peer_responder(on, req);
  CHECK(peer.request().same_host == daemon_on);
  peer.accept({}, {}, {}, offer);
  const Bytes reply = take(peer);
  REQUIRE(d.feed(reply) == reply.size());
  const auto r = message<proto::ConnectReply>(d.actions());
  CHECK(r.status == 0);
  CHECK(r.params.same_host == daemon_on);
  CHECK_FALSE(r.params.peer_off_host);
  if (daemon_on) {
    REQUIRE(r.params.peer_same_host);
    CHECK(*r.params.peer_same_host == offer);
    CHECK(d.s.connections().handed()[0].params.same_host);
  } else {
    CHECK_FALSE(r.params.peer_same_host);
  }
}

TEST_CASE("uiwarpd active side, the same-host path: to a peer whose address is not this host's, "
          "the client hears why no offer came",
          "[sessions][same-host]") {
  Daemon d(policy(with_same_host(true)));
  const Bytes req = d.connect(d.connect_msg(), /*on_host=*/false);
  MpaStartup peer = peer_responder(with_same_host(true), req);
  peer.accept({}, {}, {}); // a uiwarp responder makes no offer to a peer elsewhere
  const Bytes reply = take(peer);
  REQUIRE(d.feed(reply) == reply.size());
  const auto r = message<proto::ConnectReply>(d.actions());
  CHECK(r.status == 0);
  CHECK_FALSE(r.params.same_host);
  CHECK(r.params.peer_off_host);
  CHECK(iwarp::same_host_refusal(r.params) == "the peer's address is not this host's");
  CHECK(d.s.connections().handed()[0].params.peer_off_host);
}
