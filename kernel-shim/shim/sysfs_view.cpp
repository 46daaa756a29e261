// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The generated sysfs tree seen at /sys/class/infiniband, for programs that read sysfs by its
// fixed path instead of through libibverbs (rdma-core's pyverbs tests look for
// /sys/class/infiniband/<dev>/device/net/<netdev>; ibstat-like tools list the class directory).
// See sysfs_view.hpp for the rule.
#include "sysfs_view.hpp"

#include "uiwarp/env.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace uiwarp::shim {

namespace {

constexpr char kClass[] = "/sys/class/infiniband";
constexpr size_t kClassLen = sizeof kClass - 1;

// lstat by system call: the interposed stat functions must not come back here.
bool raw_lstat(const char* path, struct stat* st) {
  return syscall(SYS_newfstatat, AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW) == 0;
}

} // namespace

const char* sysfs_view(const char* path, char* buf, size_t size) {
  if (!path || std::strncmp(path, kClass, kClassLen) != 0) return path;
  const char* rest = path + kClassLen;            // "", "/", or "/<name>[/...]"
  if (*rest != '\0' && *rest != '/') return path; // e.g. /sys/class/infiniband_verbs
  const int saved_errno = errno;
  const char* result = path;
  const char* tree = Env::get().value(EnvVar::SysfsPath);
  if (tree && *tree) {
    const char* name = rest;
    while (*name == '/')
      ++name;
    const char* end = std::strchr(name, '/');
    const size_t name_len = end ? static_cast<size_t>(end - name) : std::strlen(name);
    struct stat st;
    bool ours = false;
    if (name_len == 0) {
      // The class directory itself: the generated one lists uiwarp's devices and mirrors the
      // kernel's, so it stands in only where the host has none.
      ours = !raw_lstat(kClass, &st);
    } else {
      // A device whose entry in the generated tree is a directory (kernel devices are mirrored
      // there as symlinks to their real sysfs directories, so those keep their own paths).
      int n = std::snprintf(buf, size, "%s/class/infiniband/%.*s", tree, static_cast<int>(name_len),
                            name);
      ours = n > 0 && static_cast<size_t>(n) < size && raw_lstat(buf, &st) && S_ISDIR(st.st_mode);
    }
    if (ours) {
      int n = std::snprintf(buf, size, "%s/class/infiniband%s", tree, rest);
      if (n > 0 && static_cast<size_t>(n) < size) result = buf;
    }
  }
  errno = saved_errno;
  return result;
}

} // namespace uiwarp::shim
