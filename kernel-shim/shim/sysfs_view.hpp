// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Path rewriting for /sys/class/infiniband in libuiwarp-shim.so. libibverbs reads the generated
// tree through SYSFS_PATH, but some programs hard-code /sys/class/infiniband (rdma-core's own
// pyverbs tests: /sys/class/infiniband/<dev>/device/net/). The shim's open*/stat*/opendir
// interposers pass their path through sysfs_view():
//   /sys/class/infiniband/<dev>[/...]  -> $SYSFS_PATH/class/infiniband/<dev>[/...] when <dev> is
//                                         a directory there (a uiwarp device; kernel devices are
//                                         mirrored as symlinks and keep their real paths);
//   /sys/class/infiniband[/]            -> $SYSFS_PATH/class/infiniband[/] when the host has no
//                                         such directory (no kernel RDMA).
// Everything else is returned unchanged. No allocation; errno is preserved.
#pragma once

#include <cstddef>

namespace uiwarp::shim {

// Returns path, or buf (of size bytes) holding the rewritten path.
const char* sysfs_view(const char* path, char* buf, std::size_t size);

} // namespace uiwarp::shim
