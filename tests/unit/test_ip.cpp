// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp::host_address (uiwarp/ip.hpp): the edge's answer to "is the peer on this host?", on
// which uiwarpd's same-host offer depends: loopback by its class, the addresses of this network
// namespace's interfaces as getifaddrs lists them now, and nothing else.
#include "catch_compat.hpp"
#include "uiwarp/ip.hpp"

#include <arpa/inet.h>
#include <cstring>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <vector>

namespace {

sockaddr_storage ip(const char* text) {
  sockaddr_storage s{};
  if (std::strchr(text, ':')) {
    auto* in = reinterpret_cast<sockaddr_in6*>(&s);
    in->sin6_family = AF_INET6;
    REQUIRE(::inet_pton(AF_INET6, text, &in->sin6_addr) == 1);
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(&s);
    in->sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, text, &in->sin_addr) == 1);
  }
  return s;
}

// This namespace's interface addresses, as getifaddrs has them (a link-local one with its scope).
std::vector<sockaddr_storage> interface_addresses() {
  std::vector<sockaddr_storage> out;
  ifaddrs* ifa = nullptr;
  REQUIRE(::getifaddrs(&ifa) == 0);
  for (ifaddrs* i = ifa; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
      continue;
    sockaddr_storage s{};
    std::memcpy(&s, i->ifa_addr,
                i->ifa_addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    out.push_back(s);
  }
  ::freeifaddrs(ifa);
  return out;
}

} // namespace

TEST_CASE("host_address: loopback in every spelling, this namespace's addresses, nothing else",
          "[ip]") {
  using uiwarp::host_address;
  CHECK(host_address(ip("127.0.0.1")));
  CHECK(host_address(ip("127.4.5.6"))); // all of 127.0.0.0/8
  CHECK(host_address(ip("::1")));
  CHECK(host_address(ip("::ffff:127.0.0.1"))); // what a dual-stack socket reports
  // Documentation ranges (RFC 5737, RFC 3849): no host has them.
  CHECK_FALSE(host_address(ip("192.0.2.77")));
  CHECK_FALSE(host_address(ip("::ffff:192.0.2.77")));
  CHECK_FALSE(host_address(ip("2001:db8::77")));
  CHECK_FALSE(host_address(sockaddr_storage{})); // no address at all (getpeername failed)
  for (const sockaddr_storage& a : interface_addresses()) {
    CHECK(host_address(a));
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    if (a.ss_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&in6.sin6_addr)) {
      // The same link-local address on a link this namespace does not have is another host's.
      sockaddr_storage other = a;
      reinterpret_cast<sockaddr_in6&>(other).sin6_scope_id = in6.sin6_scope_id + 1000;
      CHECK_FALSE(host_address(other));
    }
  }
}
