// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Which paths are the shim's: see shim_paths.hpp.
#include "shim_paths.hpp"

#include "shim_real.hpp"
#include "uiwarp/env.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace uiwarp::shim {

namespace {

constexpr const char kCdevDir[] = "/dev/infiniband/";

// Reads a small file into buf (NUL-terminated, trailing newline removed); false if unreadable.
bool read_small_file(const char* path, char* buf, size_t size) {
  int fd = sys_openat(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n;
  do {
    n = syscall(SYS_read, fd, buf, size - 1);
  } while (n < 0 && errno == EINTR);
  sys_close(fd);
  if (n < 0) return false;
  buf[n] = '\0';
  if (n > 0 && buf[n - 1] == '\n') buf[n - 1] = '\0';
  return true;
}

} // namespace

PathKind classify(const char* path) {
  if (!path || std::strncmp(path, kCdevDir, sizeof kCdevDir - 1) != 0) return PathKind::Other;
  const char* name = path + sizeof kCdevDir - 1;
  if (*name == '\0' || std::strchr(name, '/')) return PathKind::Other;
  if (std::strcmp(name, "rdma_cm") == 0) return PathKind::RdmaCm;
  if (std::strncmp(name, "uverbs", 6) != 0) return PathKind::Other;

  int saved_errno = errno;
  // As libibverbs reads it (once, at its first device listing).
  const char* sysfs = Env::get().value(EnvVar::SysfsPath);
  PathKind kind = PathKind::Other;
  bool decided = false;
  if (sysfs && *sysfs) {
    char p[PATH_MAX], val[32];
    int n = std::snprintf(p, sizeof p, "%s/%s/%s/dev", sysfs, sysfs::kUverbsDir, name);
    if (n > 0 && static_cast<size_t>(n) < sizeof p && read_small_file(p, val, sizeof val)) {
      kind = std::strcmp(val, sysfs::kUverbsDev) == 0 ? PathKind::Uverbs : PathKind::Other;
      decided = true;
    }
  }
  if (!decided) {
    struct stat st;
    if (sys_stat(path, &st) != 0 && errno == ENOENT) kind = PathKind::Uverbs;
  }
  errno = saved_errno;
  return kind;
}

bool is_absolute(const char* path) { return path && path[0] == '/'; }

} // namespace uiwarp::shim
