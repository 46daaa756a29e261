// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// IP address helpers (uiwarp/ip.hpp).
#include "uiwarp/ip.hpp"

#include <cstring>
#include <ifaddrs.h>
#include <netinet/in.h>

namespace uiwarp {

namespace {
const sockaddr_in& v4(const sockaddr_storage& a) { return reinterpret_cast<const sockaddr_in&>(a); }
const sockaddr_in6& v6(const sockaddr_storage& a) {
  return reinterpret_cast<const sockaddr_in6&>(a);
}
} // namespace

bool same_ip(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) return v4(a).sin_addr.s_addr == v4(b).sin_addr.s_addr;
  if (a.ss_family == AF_INET6) return std::memcmp(&v6(a).sin6_addr, &v6(b).sin6_addr, 16) == 0;
  return false;
}

sockaddr_storage unmapped(const sockaddr_storage& a) {
  if (a.ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&v6(a).sin6_addr)) return a;
  sockaddr_storage s{};
  auto& in = reinterpret_cast<sockaddr_in&>(s);
  in.sin_family = AF_INET;
  in.sin_port = v6(a).sin6_port;
  std::memcpy(&in.sin_addr, v6(a).sin6_addr.s6_addr + 12, 4);
  return s;
}

std::string netdev_of(const sockaddr_storage& ip) {
  std::string name;
  ifaddrs* ifa = nullptr;
  if (::getifaddrs(&ifa) != 0) return name;
  for (ifaddrs* i = ifa; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
      continue;
    sockaddr_storage have{};
    std::memcpy(&have, i->ifa_addr,
                i->ifa_addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    if (same_ip(have, ip)) {
      name = i->ifa_name;
      break;
    }
  }
  ::freeifaddrs(ifa);
  return name;
}

} // namespace uiwarp
