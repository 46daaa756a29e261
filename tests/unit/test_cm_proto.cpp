// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The shim <-> uiwarpd message protocol (cm/cm_proto.hpp). uiwarpd decodes what any local process
// of the same user sends it, so a truncated or oversized message must be refused, never misread.
#include "cm_proto.hpp"

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <cstring>

using namespace uiwarp::cm;

namespace {

sockaddr_storage v4(const char* ip, std::uint16_t port) {
  sockaddr_storage s{};
  auto* in = reinterpret_cast<sockaddr_in*>(&s);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &in->sin_addr);
  return s;
}

sockaddr_storage v6(const char* ip, std::uint16_t port) {
  sockaddr_storage s{};
  auto* in = reinterpret_cast<sockaddr_in6*>(&s);
  in->sin6_family = AF_INET6;
  in->sin6_port = htons(port);
  ::inet_pton(AF_INET6, ip, &in->sin6_addr);
  return s;
}

Msg sample() {
  Msg m;
  m.type = MsgType::ConnectReply;
  m.id = 0x0102030405060708;
  m.token = 42;
  m.status = -5;
  m.src = v4("10.1.2.3", 4791);
  m.dst = v6("fe80::1", 7174);
  m.private_data = {1, 2, 3, 4, 5};
  m.ird = 16;
  m.ord = 8;
  m.backlog = 128;
  m.timeout_ms = 2000;
  m.params.version = 1;
  m.params.crc = 0;
  m.params.markers_tx = 1;
  m.params.rtr = 1;
  m.params.peer_ird = 0x3fff;
  m.params.large_fpdu = 1;
  m.reason = "the peer rejected the connection";
  m.tos = 0x20;
  m.afonly = 1;
  return m;
}

} // namespace

TEST_CASE("CM protocol: every field survives encode/decode", "[cm]") {
  Msg m = sample();
  auto b = encode(m);
  auto d = decode(b.data(), b.size());
  REQUIRE(d);
  CHECK(d->type == m.type);
  CHECK(d->id == m.id);
  CHECK(d->token == m.token);
  CHECK(d->status == m.status);
  CHECK(addr_string(d->src) == "10.1.2.3:4791");
  CHECK(addr_string(d->dst) == "[fe80::1]:7174");
  CHECK(d->private_data == m.private_data);
  CHECK(d->ird == 16);
  CHECK(d->ord == 8);
  CHECK(d->backlog == 128);
  CHECK(d->timeout_ms == 2000);
  CHECK(d->params.crc == 0);
  CHECK(d->params.markers_tx == 1);
  CHECK(d->params.rtr == 1);
  CHECK(d->params.peer_ird == 0x3fff);
  CHECK(d->params.large_fpdu == 1);
  CHECK(d->reason == m.reason);
  CHECK(d->tos == 0x20);
  CHECK(d->afonly == 1);
}

TEST_CASE("CM protocol: unset TOS/AFONLY and empty addresses round-trip", "[cm]") {
  Msg m;
  m.type = MsgType::Status;
  auto b = encode(m);
  auto d = decode(b.data(), b.size());
  REQUIRE(d);
  CHECK(d->tos == -1);
  CHECK(d->afonly == -1);
  CHECK(d->src.ss_family == 0);
  CHECK(d->private_data.empty());
}

TEST_CASE("CM protocol: every truncation of a message is refused", "[cm]") {
  auto b = encode(sample());
  for (std::size_t n = 0; n < b.size(); ++n) {
    INFO("length " << n);
    CHECK_FALSE(decode(b.data(), n));
  }
}

TEST_CASE("CM protocol: a private data length beyond the message is refused", "[cm]") {
  auto b = encode(sample());
  // The private data's length field follows type(2) id(8) token(8) status(4) and the two
  // addresses, each a u32 length and its bytes.
  std::size_t off = 2 + 8 + 8 + 4 + (4 + sizeof(sockaddr_in)) + (4 + sizeof(sockaddr_in6));
  std::uint32_t huge = 0xffffff00;
  std::memcpy(b.data() + off, &huge, sizeof huge); // little-endian, as the encoder writes
  CHECK_FALSE(decode(b.data(), b.size()));
}
