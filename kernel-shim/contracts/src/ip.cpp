// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// IP address helpers (uiwarp/ip.hpp).
#include "uiwarp/ip.hpp"

#include <arpa/inet.h>
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

bool host_address(const sockaddr_storage& ip) {
  const sockaddr_storage a = unmapped(ip);
  if (a.ss_family == AF_INET && (ntohl(v4(a).sin_addr.s_addr) >> 24) == 127) return true;
  if (a.ss_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&v6(a).sin6_addr)) return true;
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
  // The addresses as they are now (one netlink dump): a list kept from earlier could miss one
  // added since, or keep one that left.
  ifaddrs* ifa = nullptr;
  if (::getifaddrs(&ifa) != 0) return false; // unknown: not counted as this host's
  const bool link_local = a.ss_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&v6(a).sin6_addr);
  bool found = false;
  for (ifaddrs* i = ifa; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != a.ss_family) continue;
    sockaddr_storage have{};
    std::memcpy(&have, i->ifa_addr,
                a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    // fe80::1 of one link is not fe80::1 of another: getifaddrs gives its interface as scope.
    found = same_ip(have, a) && (!link_local || v6(a).sin6_scope_id == 0 ||
                                 v6(have).sin6_scope_id == v6(a).sin6_scope_id);
  }
  ::freeifaddrs(ifa);
  return found;
}

} // namespace uiwarp
