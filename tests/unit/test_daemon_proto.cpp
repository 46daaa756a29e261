// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The uiwarpd client protocol (kernel-shim/contracts, daemon_proto.hpp). uiwarpd decodes what any
// local process of the same user (of any user, for the system daemon) sends it, so a message that
// is truncated, too long, over a limit or of an unknown type is refused, never misread.
#include "catch_compat.hpp"
#include "daemon_proto_samples.hpp"
#include "uiwarp/daemon_proto.hpp"

#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

using namespace uiwarp::proto;

namespace {

using uiwarp::test::v4;
using uiwarp::test::v6;

iwarp::ConnParams params() { return uiwarp::test::sample_params(); }

// One message of every type, every field set away from its default.
std::vector<Message> samples() {
  std::vector<Message> out;
  for (auto& [name, m] : uiwarp::test::daemon_proto_samples())
    out.push_back(std::move(m));
  return out;
}

} // namespace

TEST_CASE("daemon protocol: there is a sample of every message type", "[daemon_proto]") {
  CHECK(samples().size() == std::variant_size_v<Message>);
  for (std::size_t i = 0; i < samples().size(); ++i)
    CHECK(samples()[i].index() == i);
}

TEST_CASE("daemon protocol: every message survives encode/decode", "[daemon_proto]") {
  for (const Message& m : samples()) {
    INFO("type " << m.index() + 1);
    Bytes b = encode(m);
    auto d = decode(b.data(), b.size());
    REQUIRE(d);
    CHECK(d->index() == m.index());
    CHECK(encode(*d) == b);
  }
}

TEST_CASE("daemon protocol: the fields arrive as sent", "[daemon_proto]") {
  Message m = samples()[6]; // ConnectReply
  Bytes b = encode(m);
  auto d = decode(b.data(), b.size());
  REQUIRE(d);
  const auto& r = std::get<ConnectReply>(*d);
  CHECK(r.id == 9);
  CHECK(r.status == ECONNREFUSED);
  CHECK(r.reason == "rejected");
  CHECK(r.private_data == Bytes{1, 2, 3, 4, 5});
  CHECK(addr_string(r.src) == "10.0.0.1:1");
  CHECK(addr_string(r.dst) == "[fe80::1]:2");
  CHECK(r.params.version == 0);
  CHECK_FALSE(r.params.crc);
  CHECK(r.params.markers_tx);
  CHECK_FALSE(r.params.markers_rx);
  CHECK(r.params.ird == 16);
  CHECK(r.params.ord == 8);
  CHECK(r.params.peer_ird == 0x3fff);
  CHECK(r.params.peer_ord == 4);
  CHECK_FALSE(r.params.initiator);
  CHECK(r.params.p2p);
  CHECK(r.params.rtr == iwarp::RtrType::Read);
  CHECK(r.params.large_fpdu);
}

TEST_CASE("daemon protocol: the same-host agreement and offers arrive as sent",
          "[daemon_proto][same-host]") {
  const iwarp::SameHostOffer o = uiwarp::test::sample_offer();
  auto round_trip = [](const Message& m) {
    Bytes b = encode(m);
    auto d = decode(b.data(), b.size());
    REQUIRE(d);
    return *d;
  };
  SECTION("ConnParams: same_host, the responder's offer octet for octet, peer_off_host") {
    const auto r = std::get<AcceptReply>(round_trip(AcceptReply{1, 0, "", params(), {}, {}}));
    CHECK(r.params.same_host);
    CHECK(r.params.rfc7306);
    CHECK(r.params.recv_wait_ms == 0);
    REQUIRE(r.params.peer_same_host);
    CHECK(*r.params.peer_same_host == o);
    std::byte sent[iwarp::kSameHostOfferLen], got[iwarp::kSameHostOfferLen];
    o.encode(sent);
    r.params.peer_same_host->encode(got);
    CHECK(std::memcmp(sent, got, sizeof sent) == 0);
    CHECK(r.params.peer_off_host);
    // The defaults: no agreement, no offer, a peer not known to be elsewhere.
    const auto c = std::get<ConnectReply>(round_trip(ConnectReply{}));
    CHECK_FALSE(c.params.same_host);
    CHECK_FALSE(c.params.peer_same_host);
    CHECK_FALSE(c.params.peer_off_host);
  }
  SECTION("ConnRequest.same_host, both ways") {
    CHECK(std::get<ConnRequest>(round_trip(ConnRequest{7, 42, {}, {}, {}, 1, 1, true})).same_host);
    CHECK_FALSE(
        std::get<ConnRequest>(round_trip(ConnRequest{7, 42, {}, {}, {}, 1, 1, false})).same_host);
  }
  SECTION("Accept with an offer, and without one") {
    const auto with = std::get<Accept>(round_trip(Accept{42, {1}, 4, 4, o}));
    REQUIRE(with.same_host_offer);
    CHECK(*with.same_host_offer == o);
    const auto without = std::get<Accept>(round_trip(Accept{42, {1}, 4, 4, std::nullopt}));
    CHECK_FALSE(without.same_host_offer);
    // A presence octet, then 64 octets only when present.
    CHECK(encode(Accept{42, {1}, 4, 4, o}).size() ==
          encode(Accept{42, {1}, 4, 4, std::nullopt}).size() + iwarp::kSameHostOfferLen);
  }
  SECTION("an offer whose magic or version is not uiwarp's is refused, as is a presence of 2") {
    Bytes b = encode(Accept{42, {}, 4, 4, o});
    const std::size_t at = b.size() - iwarp::kSameHostOfferLen; // the offer's first octet
    CHECK(b[at - 1] == 1);                                      // present
    CHECK(decode(b.data(), b.size()));
    Bytes bad = b;
    bad[at] = 'X'; // magic "UWSH"
    CHECK_FALSE(decode(bad.data(), bad.size()));
    bad = b;
    bad[at + 4] = iwarp::kSameHostVersion + 1;
    CHECK_FALSE(decode(bad.data(), bad.size()));
    Bytes absent = encode(Accept{42, {}, 4, 4, std::nullopt});
    absent.back() = 2;
    CHECK_FALSE(decode(absent.data(), absent.size()));
  }
  SECTION("the path of a connection: Attached, Closed and Path carry the provider's text") {
    CHECK(std::get<Attached>(round_trip(Attached{v4("10.0.0.1", 1), v4("10.0.0.2", 2), 0x11,
                                                 "uiwarp0", "same-host"}))
              .path == "same-host");
    CHECK(std::get<Closed>(round_trip(Closed{{}, {}, 0x11, "peer closed", "", "tcp: off"})).path ==
          "tcp: off");
    const auto p = std::get<Path>(
        round_trip(Path{v4("10.0.0.1", 1), v6("::1", 2), 0x12, "tcp: another host"}));
    CHECK(addr_string(p.local) == "10.0.0.1:1");
    CHECK(addr_string(p.peer) == "[::1]:2");
    CHECK(p.qp_num == 0x12);
    CHECK(p.text == "tcp: another host");
  }
}

TEST_CASE("daemon protocol: defaults and empty addresses round-trip", "[daemon_proto]") {
  Bytes b = encode(Listen{});
  auto d = decode(b.data(), b.size());
  REQUIRE(d);
  const auto& l = std::get<Listen>(*d);
  CHECK(l.tos == -1);
  CHECK(l.addr.ss_family == 0);
}

TEST_CASE("daemon protocol: every truncation, and any trailing octet, is refused",
          "[daemon_proto]") {
  for (const Message& m : samples()) {
    Bytes b = encode(m);
    for (std::size_t n = 0; n < b.size(); ++n) {
      INFO("type " << m.index() + 1 << " length " << n << " of " << b.size());
      CHECK_FALSE(decode(b.data(), n));
    }
    b.push_back(0);
    CHECK_FALSE(decode(b.data(), b.size()));
  }
}

TEST_CASE("daemon protocol: unknown types are refused", "[daemon_proto]") {
  for (std::uint16_t t :
       {std::uint16_t{0}, std::uint16_t{std::variant_size_v<Message> + 1}, std::uint16_t{0xffff}}) {
    Bytes b = {static_cast<std::uint8_t>(t), static_cast<std::uint8_t>(t >> 8)};
    CHECK_FALSE(decode(b.data(), b.size()));
  }
}

TEST_CASE("daemon protocol: lengths and values over their limits are refused", "[daemon_proto]") {
  SECTION("a private data length beyond the message") {
    Bytes b = encode(Reject{42, {1, 2, 3}});
    std::uint32_t huge = 0xffffff00;
    std::memcpy(b.data() + 2 + 8, &huge, sizeof huge); // after type and token, little-endian
    CHECK_FALSE(decode(b.data(), b.size()));
  }
  SECTION("a string over 1024 octets") {
    CHECK(decode(encode(StatusLine{std::string(1024, 'x')}).data(),
                 encode(StatusLine{std::string(1024, 'x')}).size()));
    Bytes b = encode(StatusLine{std::string(1025, 'x')});
    CHECK_FALSE(decode(b.data(), b.size()));
  }
  SECTION("an address whose length is not its family's") {
    Bytes b = encode(Resolve{1, v4("10.0.0.1", 1)});
    b[2 + 8 + 4 + 0] = AF_INET6; // sa_family of a 16-octet sockaddr_in
    CHECK_FALSE(decode(b.data(), b.size()));
  }
  SECTION("a boolean other than 0 or 1") {
    Bytes b = encode(Status{true});
    b[2] = 2;
    CHECK_FALSE(decode(b.data(), b.size()));
  }
  SECTION("an RTR type past Read") {
    Bytes b = encode(AcceptReply{1, 0, "", params(), {}, {}});
    // type, token, status, reason (length 0), then 12 u16 parameters; rtr is the 11th.
    std::size_t rtr = 2 + 8 + 4 + 4 + 10 * 2;
    CHECK(b[rtr] == 2);
    b[rtr] = 3;
    CHECK_FALSE(decode(b.data(), b.size()));
  }
}

TEST_CASE("daemon protocol: a socket travels beside its message", "[daemon_proto]") {
  int sp[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  REQUIRE(send(sp[0], ListenReply{3, 0, ""}, pipefd[1]) == 0);
  REQUIRE(send(sp[0], StatusEnd{}) == 0);
  auto p = recv(sp[1]);
  REQUIRE(p);
  CHECK(std::get<ListenReply>(p->msg).id == 3);
  REQUIRE(p->fd >= 0);
  CHECK(::write(p->fd, "x", 1) == 1); // the pipe's write end, passed
  char c = 0;
  CHECK(::read(pipefd[0], &c, 1) == 1);
  CHECK(c == 'x');
  ::close(p->fd);
  p = recv(sp[1]);
  REQUIRE(p);
  CHECK(std::holds_alternative<StatusEnd>(p->msg));
  CHECK(p->fd == -1);
  SECTION("a packet that does not decode is EBADMSG, its socket closed") {
    const std::uint8_t junk[] = {0xff, 0xff};
    REQUIRE(::send(sp[0], junk, sizeof junk, 0) == 2);
    CHECK_FALSE(recv(sp[1]));
    CHECK(errno == EBADMSG);
  }
  SECTION("an orderly end is errno 0") {
    ::close(sp[0]);
    sp[0] = -1;
    CHECK_FALSE(recv(sp[1]));
    CHECK(errno == 0);
  }
  for (int fd : {sp[0], sp[1], pipefd[0], pipefd[1]})
    if (fd >= 0) ::close(fd);
}

TEST_CASE("daemon protocol: connect_daemon reports what the daemon answers", "[daemon_proto]") {
  char dir[] = "/tmp/uiwarp-proto-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  const std::string path = std::string(dir) + "/d.sock";
  int l = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  std::strcpy(sun.sun_path, path.c_str());
  REQUIRE(::bind(l, reinterpret_cast<sockaddr*>(&sun), sizeof sun) == 0);
  REQUIRE(::listen(l, 4) == 0);
  // A daemon: answers the first hello, refuses the second as another version.
  std::thread daemon([l] {
    for (int i = 0; i < 2; ++i) {
      int c = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
      auto p = recv(c);
      bool hello = p && std::holds_alternative<Hello>(p->msg) &&
                   std::get<Hello>(p->msg).version == kVersion &&
                   std::get<Hello>(p->msg).role == Role::Cli;
      HelloReply r{kVersion, 0, ""};
      if (!hello || i == 1) r = HelloReply{kVersion, EPROTO, "uiwarpd speaks protocol 99"};
      send(c, r);
      ::close(c);
    }
  });
  std::string err;
  int s = connect_daemon(path, Role::Cli, &err);
  CHECK(s >= 0);
  CHECK(err.empty());
  if (s >= 0) ::close(s);
  CHECK(connect_daemon(path, Role::Cli, &err) == -1);
  CHECK(err.find("uiwarpd speaks protocol 99") != std::string::npos);
  daemon.join();
  ::close(l);
  ::unlink(path.c_str());
  CHECK(connect_daemon(path, Role::Cli, &err) == -1);
  CHECK(err.find("cannot reach uiwarpd at " + path) != std::string::npos);
  ::rmdir(dir);
}
