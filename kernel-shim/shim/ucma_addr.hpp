// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Addresses and ports of rdma_cm ids, with the kernel's rules (drivers/infiniband/core/cma.c):
// rdma_bind_addr checks the address (cma_check_linklocal, rdma_translate_ip) and takes a port
// in the RDMA_PS_TCP space at bind time (cma_get_port: port 0 is an ephemeral port,
// cma_alloc_any_port; a port below 1024 needs CAP_NET_BIND_SERVICE, cma_use_port). On iWARP
// that port becomes a TCP port, so uiwarp holds it as one: each bound id owns a TCP socket
// bound to its address with SO_REUSEADDR (as siw binds its sockets), and that socket is the
// one that later listens or connects. Port conflicts between ids follow cma_check_port.
#pragma once

#include "uiwarp/ip.hpp"

#include <cstdint>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>

namespace uiwarp::ucma {

bool is_wildcard(const sockaddr_storage& a);
bool is_loopback(const sockaddr_storage& a); // 127.0.0.0/8, ::1
using uiwarp::same_ip;
socklen_t addr_len(const sockaddr_storage& a);
std::uint16_t port_of(const sockaddr_storage& a); // network byte order
void set_port(sockaddr_storage& a, std::uint16_t port_be);
sockaddr_storage any_addr(int family); // the wildcard address of `family`, port 0

using uiwarp::netdev_of; // the interface that has `ip` ("" when none does)

// rdma_bind_addr's checks of the address itself: 0, EINVAL (an IPv6 link-local address
// without a scope id) or EADDRNOTAVAIL (a specific address no interface has).
int check_bind_address(const sockaddr_storage& a);

// Opens a TCP socket bound to `a` (port 0: an ephemeral one) and writes the bound address
// back to `a`. `v6only` < 0 leaves IPV6_V6ONLY at the system default. Returns the fd, or -1
// with errno (EADDRINUSE, EACCES below port 1024 without the capability, ...).
int bound_socket(sockaddr_storage& a, int v6only);

// What an id's binding is, for cma_check_port.
struct Binding {
  sockaddr_storage addr{};
  bool reuseaddr = false;
  bool afonly = false;
};

// cma_check_port: 0, EADDRNOTAVAIL (a wildcard meets another binding of the port) or
// EADDRINUSE (the same address), unless both ids allow reuse or their families are kept apart.
int port_conflict(const Binding& mine, const Binding& other, bool reuseaddr);

// The id's afonly when RDMA_OPTION_ID_AFONLY was not set (rdma_bind_addr): AF_INET ids are
// IPv4 only, AF_INET6 ids follow net.ipv6.bindv6only.
bool default_afonly(int family);

} // namespace uiwarp::ucma
