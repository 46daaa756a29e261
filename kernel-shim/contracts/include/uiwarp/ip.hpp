// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// IP addresses as the shim and uiwarpd both need them: comparing two, the IPv4 address an
// IPv4-mapped IPv6 one stands for (what a dual-stack socket reports for an IPv4 peer), the
// interface that has an address, and whether an address is this host's.
#pragma once

#include <string>
#include <sys/socket.h>

namespace uiwarp {

// Same family and address (ports ignored).
bool same_ip(const sockaddr_storage& a, const sockaddr_storage& b);
// ::ffff:a.b.c.d as a.b.c.d (the port kept); any other address unchanged.
sockaddr_storage unmapped(const sockaddr_storage& a);
// The interface that has `ip`, of the same family ("" when none does).
std::string netdev_of(const sockaddr_storage& ip);
// Whether `ip` is this host's: loopback (127.0.0.0/8, ::1, also as ::ffff:127.x.y.z), or an
// address of an interface of the caller's network namespace (a link-local one on the interface
// its scope names). A TCP peer with such an address runs in this network namespace: Linux routes
// to a local address through lo, never out (an address both namespaces had could not be reached).
bool host_address(const sockaddr_storage& ip);

} // namespace uiwarp
