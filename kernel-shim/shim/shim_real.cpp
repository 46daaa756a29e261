// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The real functions behind the interposers, and the debug log: see shim_real.hpp.
#include "shim_real.hpp"

#include "uiwarp/env.hpp"
#include "uiwarp/log.hpp"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace uiwarp::shim {

void* resolve(RealSym& s) {
  void* p = s.ptr.load(std::memory_order_acquire);
  if (p || s.tried.load(std::memory_order_acquire)) return p;
  p = dlsym(RTLD_NEXT, s.name);
  // glibc >= 2.33 keeps __xstat and friends only as compat symbols, which dlsym cannot see.
  if (!p) p = dlvsym(RTLD_NEXT, s.name, "GLIBC_2.2.5");
  if (!p) p = dlvsym(RTLD_NEXT, s.name, "GLIBC_2.17");
  s.ptr.store(p, std::memory_order_release);
  s.tried.store(true, std::memory_order_release);
  return p;
}

RealSym r_open{"open"}, r_open64{"open64"}, r_openat{"openat"}, r_openat64{"openat64"};
RealSym r_open_2{"__open_2"}, r_open64_2{"__open64_2"};
RealSym r_openat_2{"__openat_2"}, r_openat64_2{"__openat64_2"};
RealSym r_stat{"stat"}, r_stat64{"stat64"}, r_lstat{"lstat"}, r_lstat64{"lstat64"};
RealSym r_fstatat{"fstatat"}, r_fstatat64{"fstatat64"};
RealSym r_xstat{"__xstat"}, r_xstat64{"__xstat64"}, r_lxstat{"__lxstat"}, r_lxstat64{"__lxstat64"};
RealSym r_fxstatat{"__fxstatat"}, r_fxstatat64{"__fxstatat64"};
RealSym r_statx{"statx"};
RealSym r_fstat{"fstat"}, r_fstat64{"fstat64"};
RealSym r_write{"write"}, r_close{"close"}, r_dup{"dup"}, r_dup2{"dup2"}, r_dup3{"dup3"};
RealSym r_fcntl{"fcntl"}, r_fcntl64{"fcntl64"}, r_socket{"socket"}, r_opendir{"opendir"};

namespace {

RealSym* const kAllSyms[] = {
    &r_open,       &r_open64,  &r_openat,  &r_openat64, &r_open_2,   &r_open64_2,   &r_openat_2,
    &r_openat64_2, &r_stat,    &r_stat64,  &r_lstat,    &r_lstat64,  &r_fstatat,    &r_fstatat64,
    &r_xstat,      &r_xstat64, &r_lxstat,  &r_lxstat64, &r_fxstatat, &r_fxstatat64, &r_statx,
    &r_write,      &r_close,   &r_dup,     &r_dup2,     &r_dup3,     &r_fcntl,      &r_fcntl64,
    &r_socket,     &r_fstat,   &r_fstat64, &r_opendir,
};

// Before the other libraries' code runs; the fd table initializes itself (shim_fds.cpp).
[[gnu::constructor(101)]] void resolve_all() {
  for (RealSym* s : kAllSyms)
    resolve(*s);
  const char* s = Env::get().value(EnvVar::SysfsPath);
  dbg("loaded, SYSFS_PATH=%s", s ? s : "(unset)");
}

} // namespace

int sys_openat(const char* path, int flags) {
  if (auto f = real<openat_fn>(r_openat)) return f(AT_FDCWD, path, flags, 0);
  return static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags, 0));
}
ssize_t sys_write(int fd, const void* buf, size_t n) {
  if (auto f = real<write_fn>(r_write)) return f(fd, buf, n);
  return syscall(SYS_write, fd, buf, n);
}
int sys_close(int fd) {
  if (auto f = real<close_fn>(r_close)) return f(fd);
  return static_cast<int>(syscall(SYS_close, fd));
}
int sys_stat(const char* path, struct stat* st) {
  if (auto f = real<stat_fn>(r_stat)) return f(path, st);
  return static_cast<int>(syscall(SYS_newfstatat, AT_FDCWD, path, st, 0));
}
int sys_fstat(int fd, struct stat* st) { return static_cast<int>(syscall(SYS_fstat, fd, st)); }

int enosys() {
  errno = ENOSYS;
  return -1;
}

void dbg(const char* fmt, ...) {
  if (!log::enabled(log::Level::Debug)) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n >= 0) log::debug("shim", buf);
}

} // namespace uiwarp::shim
