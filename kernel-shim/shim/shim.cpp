// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// libuiwarp-shim.so: the LD_PRELOAD stand-in for the kernel interfaces that stock libibverbs and
// librdmacm (rdma-core 44) touch directly, so that the uiwarp provider works with no kernel RDMA
// support, no /dev/infiniband and no root. How the pieces fit: docs/architecture.md.
//
//  * open*/stat*/statx of /dev/infiniband/uverbsN (when the generated sysfs tree says the node is
//    ours: class/infiniband_verbs/uverbsN/dev is "1:7") are redirected to /dev/full, a real
//    character device 1:7, so libibverbs' S_ISCHR and st_rdev checks pass and any command that
//    reaches the "kernel" fails loudly (ENOSPC) instead of silently returning garbage.
//  * open of /dev/infiniband/rdma_cm returns an event channel of the rdma_cm emulation (ucma.hpp):
//    librdmacm's commands written to it are answered in this process, backed by uiwarpd.
//  * write() of the uverbs command CREATE_COMP_CHANNEL (17) on such an fd is answered here with a
//    pipe: the read end is the channel fd; the provider gets the write end through its
//    ShimOps (comp_channel_wfd, uiwarp/provider_api.hpp), and other code in the program through
//    uiwarp_shim_comp_channel_wfd() (include/uiwarp/shim.h).
//  * close/dup/dup2/dup3/fcntl(F_DUPFD*) keep the table of those fds right.
//  * socket(AF_NETLINK, *, NETLINK_RDMA) fails with EPROTONOSUPPORT, so libibverbs and librdmacm
//    fall back to the sysfs tree (SYSFS_PATH) even on a host whose kernel has ib_core.
//  * open*/stat*/statx/opendir of /sys/class/infiniband/<uiwarp device>/... (and of the class
//    directory where the host has none) use the generated tree instead (sysfs_view.hpp), for
//    programs that read sysfs by its fixed path.
//
// Rules kept here: no C++ exceptions or RTTI (built with -fno-exceptions), no allocation after
// start-up. This file: the interposed C ABI. The real functions: shim_real.hpp; which paths are
// ours: shim_paths.hpp; the fd table: shim_fds.hpp; the rdma_cm device: ucma.hpp.
#undef _FORTIFY_SOURCE
#include "uiwarp/shim.h"

#include "shim_fds.hpp"
#include "shim_paths.hpp"
#include "shim_real.hpp"
#include "ucma.hpp"
#include "ucma_emu.hpp"
#include "uiwarp/provider_api.hpp"

#include <cerrno>
#include <cstdarg>
#include <dirent.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHIM_EXPORT extern "C" __attribute__((visibility("default")))

using namespace uiwarp::shim;

namespace {

#ifndef NETLINK_RDMA
constexpr int NETLINK_RDMA = 20;
#endif

// Returns true if the open was handled here (result in *ret).
bool intercept_open(const char* path, int flags, int* ret) {
  switch (classify(path)) {
  case PathKind::Other: return false;
  case PathKind::RdmaCm: *ret = open_ucma(flags); return true;
  case PathKind::Uverbs: *ret = open_uverbs(path, flags); return true;
  }
  return false;
}

// Every open*: ours (of an absolute path, for the *at variants), or the real `s` called as
// call(f, path) with the path it really uses.
template <typename F, typename Call>
int open_via(RealSym& s, const char* path, int flags, bool at, Call call) {
  int ret;
  if ((!at || is_absolute(path)) && intercept_open(path, flags, &ret)) return ret;
  auto f = real<F>(s);
  Path p(path);
  return f ? call(f, p.p) : enosys();
}

mode_t mode_arg(int flags, va_list ap) {
  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
    return static_cast<mode_t>(va_arg(ap, int));
  return 0;
}

// Every stat*: the real `s` called as call(f, path) with the path it really uses (our
// /dev/infiniband/uverbsN look exactly like /dev/full).
template <typename F, typename Call> int stat_via(RealSym& s, const char* path, Call call) {
  auto f = real<F>(s);
  if (!f) return enosys();
  return call(f, is_ours_for_stat(path) ? kBacking : Path(path).p);
}

// The *at variants: call(f, dirfd, path); only an absolute path can be ours.
template <typename F, typename Call>
int stat_at_via(RealSym& s, int dirfd, const char* path, Call call) {
  auto f = real<F>(s);
  if (!f) return enosys();
  bool ours = is_absolute(path) && is_ours_for_stat(path);
  return call(f, ours ? AT_FDCWD : dirfd, ours ? kBacking : Path(path).p);
}

int fcntl_common(RealSym& sym, int fd, int cmd, void* arg) {
  auto f = real<fcntl_fn>(sym);
  if (!f) return enosys();
  if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && maybe_tracked(fd))
    return tracked_dup(fd, [&] { return f(fd, cmd, arg); });
  return f(fd, cmd, arg);
}

} // namespace

// ---------------------------------------------------------------------------------------------
// The interposed C ABI.

SHIM_EXPORT int uiwarp_shim_comp_channel_wfd(int channel_fd) {
  return comp_channel_wfd(channel_fd);
}

// The shim's half of the provider hand-shake (provider_api.hpp): its ops, if the ABIs agree.
namespace {
void qp_event(std::uint32_t qp_num, uiwarp::QpEvent event, const char* reason,
              const char* drive) noexcept {
  uiwarp::ucma::Ucma::get().qp_event(qp_num, event, reason, drive);
}
int ib_connect(std::uint32_t qp_num, const uiwarp::IbTarget& t) noexcept {
  return uiwarp::ucma::Ucma::get().ib_connect(qp_num, t);
}
void ib_cancel(std::uint32_t qp_num) noexcept { uiwarp::ucma::Ucma::get().ib_cancel(qp_num); }
int channel_wfd(int channel_fd) noexcept { return comp_channel_wfd(channel_fd); }
void qp_path(std::uint32_t qp_num, const char* path) noexcept {
  uiwarp::ucma::Ucma::get().qp_path(qp_num, path);
}
constexpr uiwarp::ShimOps kShimOps = {uiwarp::kProviderAbi, qp_event, ib_connect, ib_cancel,
                                      channel_wfd,          qp_path};
} // namespace

SHIM_EXPORT const uiwarp::ShimOps*
uiwarp_shim_register_provider(const uiwarp::ProviderOps* ops) noexcept {
  return uiwarp::ucma::Ucma::get().register_provider(ops) ? &kShimOps : nullptr;
}

SHIM_EXPORT int uiwarp_shim_is_uverbs_fd(int fd) { return kind_of(fd) == kUverbs; }

SHIM_EXPORT int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_via<open_fn>(r_open, path, flags, false,
                           [&](auto f, const char* p) { return f(p, flags, mode); });
}

SHIM_EXPORT int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_via<open_fn>(r_open64, path, flags, false,
                           [&](auto f, const char* p) { return f(p, flags, mode); });
}

SHIM_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_via<openat_fn>(r_openat, path, flags, true,
                             [&](auto f, const char* p) { return f(dirfd, p, flags, mode); });
}

SHIM_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_via<openat_fn>(r_openat64, path, flags, true,
                             [&](auto f, const char* p) { return f(dirfd, p, flags, mode); });
}

SHIM_EXPORT int __open_2(const char* path, int flags) {
  return open_via<open2_fn>(r_open_2, path, flags, false,
                            [&](auto f, const char* p) { return f(p, flags); });
}

SHIM_EXPORT int __open64_2(const char* path, int flags) {
  return open_via<open2_fn>(r_open64_2, path, flags, false,
                            [&](auto f, const char* p) { return f(p, flags); });
}

SHIM_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  return open_via<openat2_fn>(r_openat_2, path, flags, true,
                              [&](auto f, const char* p) { return f(dirfd, p, flags); });
}

SHIM_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  return open_via<openat2_fn>(r_openat64_2, path, flags, true,
                              [&](auto f, const char* p) { return f(dirfd, p, flags); });
}

SHIM_EXPORT int stat(const char* path, struct stat* buf) noexcept {
  return stat_via<stat_fn>(r_stat, path, [&](auto f, const char* p) { return f(p, buf); });
}

SHIM_EXPORT int stat64(const char* path, struct stat64* buf) noexcept {
  return stat_via<stat64_fn>(r_stat64, path, [&](auto f, const char* p) { return f(p, buf); });
}

SHIM_EXPORT int lstat(const char* path, struct stat* buf) noexcept {
  return stat_via<stat_fn>(r_lstat, path, [&](auto f, const char* p) { return f(p, buf); });
}

SHIM_EXPORT int lstat64(const char* path, struct stat64* buf) noexcept {
  return stat_via<stat64_fn>(r_lstat64, path, [&](auto f, const char* p) { return f(p, buf); });
}

SHIM_EXPORT int fstatat(int dirfd, const char* path, struct stat* buf, int flags) noexcept {
  return stat_at_via<fstatat_fn>(r_fstatat, dirfd, path,
                                 [&](auto f, int d, const char* p) { return f(d, p, buf, flags); });
}

SHIM_EXPORT int fstatat64(int dirfd, const char* path, struct stat64* buf, int flags) noexcept {
  return stat_at_via<fstatat64_fn>(
      r_fstatat64, dirfd, path, [&](auto f, int d, const char* p) { return f(d, p, buf, flags); });
}

// The pre-2.33 glibc entry points, still used by binaries built against older glibc.
SHIM_EXPORT int __xstat(int ver, const char* path, void* buf) {
  return stat_via<xstat_fn>(r_xstat, path, [&](auto f, const char* p) { return f(ver, p, buf); });
}

SHIM_EXPORT int __xstat64(int ver, const char* path, void* buf) {
  return stat_via<xstat_fn>(r_xstat64, path, [&](auto f, const char* p) { return f(ver, p, buf); });
}

SHIM_EXPORT int __lxstat(int ver, const char* path, void* buf) {
  return stat_via<xstat_fn>(r_lxstat, path, [&](auto f, const char* p) { return f(ver, p, buf); });
}

SHIM_EXPORT int __lxstat64(int ver, const char* path, void* buf) {
  return stat_via<xstat_fn>(r_lxstat64, path,
                            [&](auto f, const char* p) { return f(ver, p, buf); });
}

SHIM_EXPORT int __fxstatat(int ver, int dirfd, const char* path, void* buf, int flags) {
  return stat_at_via<fxstatat_fn>(r_fxstatat, dirfd, path, [&](auto f, int d, const char* p) {
    return f(ver, d, p, buf, flags);
  });
}

SHIM_EXPORT int __fxstatat64(int ver, int dirfd, const char* path, void* buf, int flags) {
  return stat_at_via<fxstatat_fn>(r_fxstatat64, dirfd, path, [&](auto f, int d, const char* p) {
    return f(ver, d, p, buf, flags);
  });
}

SHIM_EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask,
                      struct statx* buf) noexcept {
  return stat_at_via<statx_fn>(r_statx, dirfd, path, [&](auto f, int d, const char* p) {
    return f(d, p, flags, mask, buf);
  });
}

SHIM_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  if (maybe_tracked(fd)) {
    // A channel closed behind the shim's back is not one any more: the write then fails (or
    // reaches whatever the program opened in its place), as with the kernel's rdma_cm.
    if (kind_of(fd) == kUcma && !forget_if_closed_ucma(fd))
      return uiwarp::ucma::command(fd, buf, n);
    ssize_t ret;
    if (uverbs_write(fd, buf, n, &ret)) return ret;
  }
  return sys_write(fd, buf, n);
}

// fstat of an rdma_cm channel: librdmacm's open_cdev wants a character device.
SHIM_EXPORT int fstat(int fd, struct stat* buf) noexcept {
  auto f = real<fstat_fn>(r_fstat);
  if (!f) return enosys();
  int r = f(fd, buf);
  if (r == 0 && kind_of(fd) == kUcma) uiwarp::ucma::fix_stat(buf);
  return r;
}

SHIM_EXPORT int fstat64(int fd, struct stat64* buf) noexcept {
  auto f = real<fstat64_fn>(r_fstat64);
  if (!f) return enosys();
  int r = f(fd, buf);
  if (r == 0 && kind_of(fd) == kUcma) {
    struct stat st {};
    uiwarp::ucma::fix_stat(&st);
    buf->st_mode = st.st_mode;
    buf->st_rdev = st.st_rdev;
  }
  return r;
}

SHIM_EXPORT int close(int fd) {
  if (maybe_tracked(fd)) return tracked_close(fd);
  return sys_close(fd);
}

SHIM_EXPORT int dup(int oldfd) noexcept {
  auto f = real<dup_fn>(r_dup);
  if (!f) return enosys();
  if (!maybe_tracked(oldfd)) return f(oldfd);
  return tracked_dup(oldfd, [&] { return f(oldfd); });
}

SHIM_EXPORT int dup2(int oldfd, int newfd) noexcept {
  auto f = real<dup2_fn>(r_dup2);
  if (!f) return enosys();
  if (!maybe_tracked(oldfd) && !maybe_tracked(newfd)) return f(oldfd, newfd);
  return tracked_dup(oldfd, [&] { return f(oldfd, newfd); });
}

SHIM_EXPORT int dup3(int oldfd, int newfd, int flags) noexcept {
  auto f = real<dup3_fn>(r_dup3);
  if (!f) return enosys();
  if (!maybe_tracked(oldfd) && !maybe_tracked(newfd)) return f(oldfd, newfd, flags);
  return tracked_dup(oldfd, [&] { return f(oldfd, newfd, flags); });
}

// The third argument is an int, a long or a pointer depending on cmd; like glibc itself, pass
// it on as a pointer-sized value.
SHIM_EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return fcntl_common(r_fcntl, fd, cmd, arg);
}

SHIM_EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return fcntl_common(r_fcntl64, fd, cmd, arg);
}

SHIM_EXPORT DIR* opendir(const char* path) {
  auto f = real<opendir_fn>(r_opendir);
  if (!f) {
    errno = ENOSYS;
    return nullptr;
  }
  Path p(path);
  return f(p.p);
}

SHIM_EXPORT int socket(int domain, int type, int protocol) noexcept {
  if (domain == AF_NETLINK && protocol == NETLINK_RDMA) {
    dbg("socket(AF_NETLINK, NETLINK_RDMA) refused: the generated sysfs tree is used");
    errno = EPROTONOSUPPORT;
    return -1;
  }
  auto f = real<socket_fn>(r_socket);
  if (!f) return enosys();
  return f(domain, type, protocol);
}
