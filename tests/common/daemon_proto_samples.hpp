// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// One uiwarpd protocol message of each type (daemon_proto.hpp), in the order of proto::Message,
// every field set away from its default, each with a name: the unit tests' round trips
// (test_daemon_proto.cpp) and the fuzz target's seed corpus (make_corpus.cpp) use the same ones.
// Header-only, on the contracts library's public API alone.
#pragma once

#include "same_host_samples.hpp"
#include "uiwarp/daemon_proto.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <netinet/in.h>
#include <sys/socket.h>
#include <utility>
#include <vector>

namespace uiwarp::test {

inline sockaddr_storage v4(const char* ip, std::uint16_t port) {
  sockaddr_storage s{};
  auto* in = reinterpret_cast<sockaddr_in*>(&s);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &in->sin_addr);
  return s;
}

inline sockaddr_storage v6(const char* ip, std::uint16_t port) {
  sockaddr_storage s{};
  auto* in = reinterpret_cast<sockaddr_in6*>(&s);
  in->sin6_family = AF_INET6;
  in->sin6_port = htons(port);
  ::inet_pton(AF_INET6, ip, &in->sin6_addr);
  return s;
}

// Negotiated parameters with every field away from its default.
inline iwarp::ConnParams sample_params() {
  iwarp::ConnParams p;
  p.version = 0;
  p.crc = false;
  p.markers_tx = true;
  p.ird = 16;
  p.ord = 8;
  p.peer_ird = 0x3fff;
  p.peer_ord = 4;
  p.initiator = false;
  p.p2p = true;
  p.rtr = iwarp::RtrType::Read;
  p.large_fpdu = true;
  p.rfc7306 = true;
  p.recv_wait_ms = 0;
  p.same_host = true;
  p.peer_same_host = sample_offer();
  p.peer_off_host = true;
  return p;
}

inline std::vector<std::pair<const char*, proto::Message>> daemon_proto_samples() {
  using namespace proto;
  const Bytes pd = {1, 2, 3, 4, 5};
  const iwarp::ConnParams cp = sample_params();
  return {
      {"hello", Hello{kVersion, Role::Cli}},
      {"hello_reply", HelloReply{kVersion, EPROTO, "restart uiwarpd"}},
      {"listen", Listen{7, v6("::", 4791), 128, 0x20, "mpa-revision=1", "eth0 rtr=read\n"}},
      {"listen_reply", ListenReply{7, EADDRINUSE, "in use"}},
      {"unlisten", Unlisten{7}},
      {"connect", Connect{0x0102030405060708, v4("10.1.2.3", 4791), v4("10.1.2.4", 7174), pd, 16, 8,
                          2000, 4, "rtr=read crc=off"}},
      {"connect_reply",
       ConnectReply{9, ECONNREFUSED, "rejected", cp, pd, v4("10.0.0.1", 1), v6("fe80::1", 2)}},
      {"conn_request", ConnRequest{7, 42, v4("10.0.0.1", 1), v4("10.0.0.2", 2), pd, 3, 2, true}},
      {"accept", Accept{42, pd, 16, 16, sample_offer()}},
      {"accept_reply", AcceptReply{42, 0, "", cp, v6("::1", 5), v6("::1", 6)}},
      {"reject", Reject{42, pd}},
      {"resolve", Resolve{11, v4("192.0.2.1", 0)}},
      {"resolve_reply", ResolveReply{11, 0, v4("192.0.2.2", 0), "eth0"}},
      {"status", Status{true, true, true}},
      {"status_line", StatusLine{"uiwarpd pid 1"}},
      {"status_end", StatusEnd{}},
      {"ib_connect", IbConnect{13, v4("10.0.0.1", 0), v6("2001:db8::2", 0), 0x1234, 0xabcdef, 4, 2,
                               5000, false, sample_offer()}},
      {"closed", Closed{v4("10.0.0.1", 4791), v6("fe80::1", 7174), 0xa1b2c3,
                        "MPA: CRC error (Terminate sent: layer 2 LLP, type 0, code 2)",
                        "posts 10 sent at once, 2 held", "tcp: the peer is on another host"}},
      {"attached",
       Attached{v4("10.0.0.1", 4791), v4("10.0.0.2", 40000), 0x000011, "uiwarp0", "same-host"}},
      {"path", Path{v4("10.0.0.1", 4791), v6("2001:db8::2", 40000), 0x000012,
                    "tcp: the peer's process is in another pid namespace"}},
  };
}

} // namespace uiwarp::test
