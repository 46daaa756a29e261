// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Reads what the sysfs generator and the `uiwarp` CLI need to know about a network device
// (netdev_info.hpp) with rtnetlink (libnl-route-3), in the caller's network namespace.
#pragma once

#include "uiwarp/netdev_info.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace uiwarp {

// Looks `name` up in the current network namespace. nullopt and *err set if it does not exist
// or rtnetlink fails.
std::optional<NetdevInfo> query_netdev(const std::string& name, std::string* err);

// The inode number of the caller's network namespace (/proc/self/ns/net), 0 if unknown.
std::uint64_t current_netns_inode();

} // namespace uiwarp
