// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Test harness for uiwarpd's sans-I/O sessions core (cm/daemon/sessions.hpp), shared by the
// test_sessions*.cpp files. The daemon's peer is a real iwarp::MpaStartup (mpa_harness.hpp); the
// test plays the event loop: it writes Sessions::output() and reports it with consume_output(),
// feeds the peer's octets to on_bytes() in chosen chunks, passes the time in explicitly and reads
// take_actions(), which it checks as one line per action (summary) and by the messages' fields.
#pragma once

#include "catch_compat.hpp"
#include "mpa_harness.hpp"
#include "sessions.hpp"
#include "uiwarp/daemon_proto.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace sesst {

using namespace mpat;
using namespace uiwarp::daemon;
namespace proto = uiwarp::proto;

// The event loop's handles.
constexpr ClientId kClient = 7, kOther = 8;
constexpr SockId kListener = 20, kSock = 21;
constexpr std::uint64_t kListenId = 0x1234, kConnectId = 0x5678;

inline sockaddr_storage v4(const char* ip, std::uint16_t port) {
  sockaddr_storage s{};
  auto* in = reinterpret_cast<sockaddr_in*>(&s);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &in->sin_addr); // (also at static initialisation: no REQUIRE)
  return s;
}
inline const sockaddr_storage kLocal = v4("192.0.2.1", 4791);
inline const sockaddr_storage kPeer = v4("192.0.2.2", 40001);

inline std::string addr(const sockaddr_storage& a) { return proto::addr_string(a); }

inline const char* message_name(const proto::Message& m) {
  static const char* const kNames[] = {"Hello",        "HelloReply",  "Listen",       "ListenReply",
                                       "Unlisten",     "Connect",     "ConnectReply", "ConnRequest",
                                       "Accept",       "AcceptReply", "Reject",       "Resolve",
                                       "ResolveReply", "Status",      "StatusLine",   "StatusEnd",
                                       "IbConnect",    "Closed",      "Attached",     "Path"};
  static_assert(std::size(kNames) == std::variant_size_v<proto::Message>);
  return kNames[m.index()];
}

// One line per action: "to 7 ConnRequest", "to 7 AcceptReply pass 21", "close 21", "flush 21",
// "log" (a log line's text is not part of the contract).
inline std::vector<std::string> summary(const std::vector<Action>& acts) {
  std::vector<std::string> out;
  for (const Action& a : acts) {
    if (const auto* t = std::get_if<ToClient>(&a)) {
      std::string s = "to " + std::to_string(t->client) + " " + message_name(t->msg);
      if (t->pass >= 0) s += " pass " + std::to_string(t->pass);
      out.push_back(s);
    } else if (const auto* c = std::get_if<Close>(&a)) {
      out.push_back("close " + std::to_string(c->sock));
    } else if (const auto* f = std::get_if<Flush>(&a)) {
      out.push_back("flush " + std::to_string(f->sock));
    } else {
      out.push_back("log");
    }
  }
  return out;
}
using Lines = std::vector<std::string>;

// The one message of type T among the actions (there must be exactly one).
template <class T> T message(const std::vector<Action>& acts) {
  const T* found = nullptr;
  int n = 0;
  for (const Action& a : acts)
    if (const auto* t = std::get_if<ToClient>(&a))
      if (const auto* m = std::get_if<T>(&t->msg)) found = m, ++n;
  REQUIRE(n == 1);
  return *found;
}

// Everything observable in the actions, the messages encoded: for comparing runs.
inline std::string describe(const std::vector<Action>& acts) {
  std::string out;
  const Lines lines = summary(acts);
  for (std::size_t i = 0; i < acts.size(); ++i) {
    out += lines[i];
    if (const auto* t = std::get_if<ToClient>(&acts[i])) {
      const proto::Bytes b = proto::encode(t->msg);
      out += " " + hex(std::as_bytes(std::span(b)));
    }
    out += "\n";
  }
  return out;
}

inline SessionPolicy policy(iwarp::MpaPolicy mpa = {}) {
  SessionPolicy p;
  p.mpa = mpa;
  p.mpa.timeout = std::chrono::milliseconds(1000);
  return p;
}

inline Bytes u8_to_bytes(const proto::Bytes& v) {
  Bytes b;
  for (std::uint8_t x : v)
    b.push_back(std::byte(x));
  return b;
}
inline proto::Bytes u8(std::string_view s) { return proto::Bytes(s.begin(), s.end()); }

// uiwarpd's Sessions, the time, and what the event loop does with one socket.
struct Daemon {
  Sessions s;
  Clock::time_point now = t0;

  explicit Daemon(SessionPolicy p = policy()) : s(std::move(p)) {}

  Lines step() { return summary(s.take_actions()); }
  std::vector<Action> actions() { return s.take_actions(); }

  // Writes everything in output(sock) (or its first `n` octets): the octets written.
  Bytes write(SockId sock = kSock, std::size_t n = SIZE_MAX) {
    iwarp::ConstBytes out = s.output(sock);
    Bytes b(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(std::min(n, out.size())));
    s.consume_output(sock, b.size(), now);
    return b;
  }

  // Received octets, cut at `cuts` (offsets into `in`) as the reads return them; the loop stops
  // reading the socket once on_bytes leaves part of a read. Returns the octets taken.
  std::size_t feed(const Bytes& in, const std::vector<std::size_t>& cuts = {},
                   SockId sock = kSock) {
    std::size_t taken = 0, from = 0;
    for (std::size_t i = 0; i <= cuts.size(); ++i) {
      const std::size_t to = i < cuts.size() ? cuts[i] : in.size();
      const std::size_t n = s.on_bytes(sock, iwarp::ConstBytes(in.data() + from, to - from), now);
      taken += n;
      if (n < to - from) break;
      from = to;
    }
    return taken;
  }

  // ---- the passive side ----

  void listen(ClientId c = kClient, SockId l = kListener, std::uint64_t id = kListenId) {
    s.on_listen(c, proto::Listen{id, kLocal, 16, -1, {}, {}}, l, kLocal);
    REQUIRE(step() == Lines{"to " + std::to_string(c) + " ListenReply"});
  }
  // `on_host`: the edge's word that kPeer is this host's address (uiwarp::host_address).
  void incoming(SockId sock = kSock, SockId l = kListener, bool on_host = true) {
    s.on_incoming(l, sock, kLocal, kPeer, on_host, now);
    REQUIRE(step().empty());
  }
  // A listener, an incoming connection and `peer`'s whole Request: the ConnRequest.
  proto::ConnRequest request(MpaStartup& peer, SockId sock = kSock) {
    const Bytes req = mpat::take(peer);
    REQUIRE(feed(req, {}, sock) == req.size());
    const auto acts = actions();
    REQUIRE(summary(acts) == Lines{"to " + std::to_string(kClient) + " ConnRequest"});
    return message<proto::ConnRequest>(acts);
  }

  // ---- the active side ----

  proto::Connect connect_msg(proto::Bytes pd = {}, std::uint32_t ird = 0, std::uint32_t ord = 0,
                             std::uint32_t timeout_ms = 0) const {
    proto::Connect m;
    m.id = kConnectId;
    m.src = v4("192.0.2.1", 0);
    m.dst = kPeer;
    m.private_data = std::move(pd);
    m.ird = ird;
    m.ord = ord;
    m.timeout_ms = timeout_ms;
    return m;
  }
  // Connect and the TCP connection up (to a peer on this host, or not): the Request the daemon
  // wrote.
  Bytes connect(const proto::Connect& m, bool on_host = true) {
    s.on_connect(kClient, m, kSock, 0, now);
    REQUIRE(step().empty());
    REQUIRE(s.connecting(kSock));
    s.on_connected(kSock, kLocal, on_host, now);
    REQUIRE(step().empty());
    REQUIRE_FALSE(s.connecting(kSock));
    REQUIRE(s.interest(kSock) == Interest::Writable);
    Bytes req = write();
    REQUIRE(s.interest(kSock) == Interest::Readable);
    return req;
  }
};

// A responder of `p` that got `request`, with its own ULP's decision still to make.
inline MpaStartup peer_responder(const iwarp::MpaPolicy& p, const Bytes& request) {
  MpaStartup r = MpaStartup::responder(p, t0);
  REQUIRE(r.on_bytes(request) == request.size());
  REQUIRE(r.state() == MpaState::RequestReceived);
  return r;
}

// Octets of the data path after an MPA frame (the first FPDU); only their position matters.
inline const Bytes kFirstFpdu = Bytes{std::byte{0}, std::byte{12}} + text("first FPDU..");

} // namespace sesst
