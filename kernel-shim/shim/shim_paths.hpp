// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Which paths the shim answers for, and the path a call really uses: /dev/infiniband/rdma_cm
// (the UCMA emulation), /dev/infiniband/uverbsN of uiwarp devices (backed by /dev/full, a real
// character device 1:7), and /sys/class/infiniband (the generated tree, sysfs_view.hpp).
#pragma once

#include "sysfs_view.hpp"
#include "uiwarp/sysfs_layout.hpp"

#include <climits>

namespace uiwarp::shim {

constexpr const char* kBacking = sysfs::kUverbsBacking; // character device 1:7
constexpr unsigned kBackingMajor = sysfs::kUverbsBackingMajor;
constexpr unsigned kBackingMinor = sysfs::kUverbsBackingMinor;

enum class PathKind { Other, Uverbs, RdmaCm };

// /dev/infiniband/<name> with <name> "uverbs*" is ours if the generated sysfs tree describes it
// with dev "1:7" (kernel uverbs nodes are 231:N, so mirrored kernel devices keep their real
// nodes). With no tree to ask (SYSFS_PATH unset, or no such entry), it is ours if the host has
// no such node. errno is preserved.
PathKind classify(const char* path);

// Not inlined: glibc declares some callers' path parameters nonnull, and a null path must still
// reach the real function (which fails with EFAULT) rather than crash here.
[[gnu::noinline]] bool is_absolute(const char* path);

// stat of our /dev/infiniband/uverbsN looks exactly like /dev/full.
inline bool is_ours_for_stat(const char* path) { return classify(path) == PathKind::Uverbs; }

// The path an open/stat/opendir call really uses: /sys/class/infiniband shows the generated
// tree (sysfs_view.hpp); every other path is used as given.
struct Path {
  char buf[PATH_MAX];
  const char* p;
  explicit Path(const char* path) : p(sysfs_view(path, buf, sizeof buf)) {}
  Path(const Path&) = delete;
  Path& operator=(const Path&) = delete;
};

} // namespace uiwarp::shim
