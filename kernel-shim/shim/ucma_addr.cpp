// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// rdma_cm addresses and ports with the kernel's rules: see ucma_addr.hpp.
#include "ucma_addr.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/syscall.h>
#include <unistd.h>

namespace uiwarp::ucma {

namespace {

const sockaddr_in& v4(const sockaddr_storage& a) { return reinterpret_cast<const sockaddr_in&>(a); }
const sockaddr_in6& v6(const sockaddr_storage& a) {
  return reinterpret_cast<const sockaddr_in6&>(a);
}

} // namespace

bool is_wildcard(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return v4(a).sin_addr.s_addr == htonl(INADDR_ANY);
  if (a.ss_family == AF_INET6) return IN6_IS_ADDR_UNSPECIFIED(&v6(a).sin6_addr);
  return true;
}

bool is_loopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return (ntohl(v4(a).sin_addr.s_addr) >> 24) == 127;
  if (a.ss_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&v6(a).sin6_addr);
  return false;
}

socklen_t addr_len(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::uint16_t port_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? v6(a).sin6_port : v4(a).sin_port;
}

void set_port(sockaddr_storage& a, std::uint16_t port_be) {
  if (a.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6&>(a).sin6_port = port_be;
  else
    reinterpret_cast<sockaddr_in&>(a).sin_port = port_be;
}

sockaddr_storage any_addr(int family) {
  sockaddr_storage a{};
  a.ss_family = static_cast<sa_family_t>(family); // INADDR_ANY and in6addr_any are all zero
  return a;
}

int check_bind_address(const sockaddr_storage& a) {
  // cma_check_linklocal: a link-local IPv6 address means nothing without its interface.
  if (a.ss_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&v6(a).sin6_addr) && !v6(a).sin6_scope_id)
    return EINVAL;
  if (is_wildcard(a)) return 0;
  // rdma_translate_ip: the address must be one of this namespace's.
  return netdev_of(a).empty() ? EADDRNOTAVAIL : 0;
}

int bound_socket(sockaddr_storage& a, int v6only) {
  int s = ::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
  if (s < 0) return -1;
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (a.ss_family == AF_INET6 && v6only >= 0)
    ::setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
  socklen_t len = addr_len(a);
  if (::bind(s, reinterpret_cast<const sockaddr*>(&a), len) ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len)) {
    int err = errno;
    ::syscall(SYS_close, s); // the shim's close() interposer is not for our own fds
    errno = err;
    return -1;
  }
  return s;
}

int port_conflict(const Binding& mine, const Binding& other, bool reuseaddr) {
  if (port_of(mine.addr) != port_of(other.addr)) return 0;
  if (reuseaddr && other.reuseaddr) return 0;
  if (mine.afonly && other.afonly && mine.addr.ss_family != other.addr.ss_family) return 0;
  if (is_wildcard(mine.addr) || is_wildcard(other.addr)) return EADDRNOTAVAIL;
  return same_ip(mine.addr, other.addr) ? EADDRINUSE : 0;
}

bool default_afonly(int family) {
  if (family != AF_INET6) return true;
  std::ifstream f("/proc/sys/net/ipv6/bindv6only");
  int v = 0;
  return (f >> v) && v != 0;
}

} // namespace uiwarp::ucma
