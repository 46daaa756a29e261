// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The names of the generated sysfs tree that its writer (uiwarp-run and `uiwarp link`, through
// kernel-shim/host/sysfs_gen.cpp) and its readers (the shim's device list and uverbs rule, the
// provider's device) agree on; kernel-shim/include/uiwarp/sysfs.hpp describes the whole tree.
// Paths are relative to SYSFS_PATH, attribute names relative to a device's directory.
#pragma once

namespace uiwarp::sysfs {

inline constexpr char kDevicesDir[] = "class/infiniband";      // <dev>/ per device
inline constexpr char kUverbsDir[] = "class/infiniband_verbs"; // uverbs<N>/ per device

// A device's attributes: the standard ones uiwarp reads, and two of its own.
inline constexpr char kAttrNodeGuid[] = "node_guid";   // "xxxx:xxxx:xxxx:xxxx" (guid.hpp)
inline constexpr char kAttrNetdev[] = "uiwarp_netdev"; // the netdev it serves
inline constexpr char kAttrMpa[] = "uiwarp_mpa";       // its MPA policy overrides, if any
inline constexpr char kAttrPortNdev0[] = "ports/1/gid_attrs/ndevs/0"; // a kernel device's netdev
inline constexpr char kAttrPortGids[] = "ports/1/gids/";              // GID <i>

// uverbs<N>/dev of a uiwarp device: the device number of /dev/full, which backs
// /dev/infiniband/uverbs<N> (kernel uverbs nodes are 231:N, so the two never meet).
inline constexpr char kUverbsDev[] = "1:7";
inline constexpr char kUverbsBacking[] = "/dev/full";
inline constexpr unsigned kUverbsBackingMajor = 1, kUverbsBackingMinor = 7;

} // namespace uiwarp::sysfs
