// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What the sysfs generator (sysfs.hpp) and the `uiwarp` CLI know of a network device: plain
// values, whoever read them (netdev.hpp reads them from the kernel; the tests make their own).
#pragma once

#include <array>
#include <cstdint>
#include <net/if.h>
#include <string>
#include <vector>

namespace uiwarp {

struct IpAddress {
  int family = 0;                      // AF_INET or AF_INET6
  std::array<std::uint8_t, 16> addr{}; // AF_INET: the first 4 bytes
  unsigned prefixlen = 0;

  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

struct NetdevInfo {
  std::string name;
  int ifindex = 0;
  std::vector<std::uint8_t> hwaddr; // as the kernel reports it (6 bytes for Ethernet and lo)
  unsigned mtu = 0;
  unsigned flags = 0;           // IFF_*
  std::uint8_t operstate = 0;   // IF_OPER_*
  std::vector<IpAddress> addrs; // IPv4 first, then IPv6; each family sorted

  // The netdev is administratively up and has carrier (IFF_UP and IFF_RUNNING): the RDMA port
  // is then ACTIVE / LinkUp, as siw reports it.
  bool port_active() const { return (flags & IFF_UP) && (flags & IFF_RUNNING); }
};

} // namespace uiwarp
