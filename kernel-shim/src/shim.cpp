// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// libuiwarp-shim.so: the LD_PRELOAD stand-in for the kernel interfaces that stock libibverbs and
// librdmacm (rdma-core 44) touch directly, so that the uiwarp provider works with no kernel RDMA
// support, no /dev/infiniband and no root. See shared/design/rdma-core-integration.md.
//
//  * open*/stat*/statx of /dev/infiniband/uverbsN (when the generated sysfs tree says the node is
//    ours: class/infiniband_verbs/uverbsN/dev is "1:7") are redirected to /dev/full, a real
//    character device 1:7, so libibverbs' S_ISCHR and st_rdev checks pass and any command that
//    reaches the "kernel" fails loudly (ENOSPC) instead of silently returning garbage.
//  * open of /dev/infiniband/rdma_cm fails with ENODEV (the UCMA emulation is a later step), so
//    librdmacm reports a clean error.
//  * write() of the uverbs command CREATE_COMP_CHANNEL (17) on such an fd is answered here with a
//    pipe: the read end is the channel fd, the provider gets the write end through
//    uiwarp_shim_comp_channel_wfd() (include/uiwarp/shim.h).
//  * close/dup/dup2/dup3/fcntl(F_DUPFD*) keep the table of those fds right.
//  * socket(AF_NETLINK, *, NETLINK_RDMA) fails with EPROTONOSUPPORT, so libibverbs and librdmacm
//    fall back to the sysfs tree (SYSFS_PATH) even on a host whose kernel has ib_core.
//  * open*/stat*/statx/opendir of /sys/class/infiniband/<uiwarp device>/... (and of the class
//    directory where the host has none) use the generated tree instead (sysfs_view.hpp), for
//    programs that read sysfs by its fixed path.
//
// Rules kept here: no C++ exceptions or RTTI (built with -fno-exceptions), no allocation after
// start-up, the fd table behind one pthread mutex, and a lock-free fast path (an atomic bitmap of
// tracked fd numbers) so that write/close/dup on ordinary fds cost one atomic load and stay
// async-signal-safe. The real functions come from dlsym(RTLD_NEXT).
#undef _FORTIFY_SOURCE
#include "uiwarp/shim.h"

#include "sysfs_view.hpp"
#include "ucma.hpp"

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define SHIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// ---------------------------------------------------------------------------------------------
// The real functions.

using open_fn = int (*)(const char*, int, ...);
using openat_fn = int (*)(int, const char*, int, ...);
using open2_fn = int (*)(const char*, int);
using openat2_fn = int (*)(int, const char*, int);
using stat_fn = int (*)(const char*, struct stat*);
using stat64_fn = int (*)(const char*, struct stat64*);
using fstatat_fn = int (*)(int, const char*, struct stat*, int);
using fstatat64_fn = int (*)(int, const char*, struct stat64*, int);
using xstat_fn = int (*)(int, const char*, void*);
using fxstatat_fn = int (*)(int, int, const char*, void*, int);
using statx_fn = int (*)(int, const char*, int, unsigned, struct statx*);
using write_fn = ssize_t (*)(int, const void*, size_t);
using fstat_fn = int (*)(int, struct stat*);
using fstat64_fn = int (*)(int, struct stat64*);
using close_fn = int (*)(int);
using dup_fn = int (*)(int);
using dup2_fn = int (*)(int, int);
using dup3_fn = int (*)(int, int, int);
using fcntl_fn = int (*)(int, int, ...);
using socket_fn = int (*)(int, int, int);
using opendir_fn = DIR* (*)(const char*);

// One lazily resolved pointer per interposed symbol. The constructor resolves them all; the lazy
// path covers calls made by other libraries' constructors that run before ours.
struct RealSym {
  const char* name;
  std::atomic<void*> ptr{nullptr};
  std::atomic<bool> tried{false};
};

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

RealSym* const kAllSyms[] = {
    &r_open,       &r_open64,  &r_openat,  &r_openat64, &r_open_2,   &r_open64_2,   &r_openat_2,
    &r_openat64_2, &r_stat,    &r_stat64,  &r_lstat,    &r_lstat64,  &r_fstatat,    &r_fstatat64,
    &r_xstat,      &r_xstat64, &r_lxstat,  &r_lxstat64, &r_fxstatat, &r_fxstatat64, &r_statx,
    &r_write,      &r_close,   &r_dup,     &r_dup2,     &r_dup3,     &r_fcntl,      &r_fcntl64,
    &r_socket,     &r_fstat,   &r_fstat64, &r_opendir,
};

template <typename F> F real(RealSym& s) { return reinterpret_cast<F>(resolve(s)); }

// The calls the shim itself needs; raw system calls if the symbol cannot be found at all.
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

// Our own fstat calls must not come back through the fstat interposer (g_mu may be held).
int sys_fstat(int fd, struct stat* st) { return static_cast<int>(syscall(SYS_fstat, fd, st)); }

int enosys() {
  errno = ENOSYS;
  return -1;
}

// ---------------------------------------------------------------------------------------------
// Configuration, captured once.

constexpr const char kBacking[] = "/dev/full"; // character device 1:7
constexpr unsigned kBackingMajor = 1, kBackingMinor = 7;
constexpr const char kCdevDir[] = "/dev/infiniband/";
constexpr std::uint32_t kCmdCreateCompChannel = 17; // IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL
#ifndef NETLINK_RDMA
constexpr int NETLINK_RDMA = 20;
#endif

bool g_debug = false;

void dbg(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void dbg(const char* fmt, ...) {
  if (!g_debug) return;
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "uiwarp-shim[%d]: ", static_cast<int>(getpid()));
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  if (m < 0) return;
  size_t len = static_cast<size_t>(n) + static_cast<size_t>(m);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  sys_write(2, buf, len);
}

// ---------------------------------------------------------------------------------------------
// Which paths are ours.

enum class PathKind { Other, Uverbs, RdmaCm };

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

// /dev/infiniband/<name> with <name> "uverbs*" is ours if the generated sysfs tree describes it
// with dev "1:7" (kernel uverbs nodes are 231:N, so mirrored kernel devices keep their real
// nodes). With no tree to ask (SYSFS_PATH unset, or no such entry), it is ours if the host has no
// such node.
PathKind classify(const char* path) {
  if (!path || std::strncmp(path, kCdevDir, sizeof kCdevDir - 1) != 0) return PathKind::Other;
  const char* name = path + sizeof kCdevDir - 1;
  if (*name == '\0' || std::strchr(name, '/')) return PathKind::Other;
  if (std::strcmp(name, "rdma_cm") == 0) return PathKind::RdmaCm;
  if (std::strncmp(name, "uverbs", 6) != 0) return PathKind::Other;

  int saved_errno = errno;
  // Read when needed, as libibverbs does (which reads it at its first device listing).
  const char* sysfs = getenv("SYSFS_PATH");
  PathKind kind = PathKind::Other;
  bool decided = false;
  if (sysfs && *sysfs) {
    char p[PATH_MAX], val[32];
    int n = std::snprintf(p, sizeof p, "%s/class/infiniband_verbs/%s/dev", sysfs, name);
    if (n > 0 && static_cast<size_t>(n) < sizeof p && read_small_file(p, val, sizeof val)) {
      char expect[32];
      std::snprintf(expect, sizeof expect, "%u:%u", kBackingMajor, kBackingMinor);
      kind = std::strcmp(val, expect) == 0 ? PathKind::Uverbs : PathKind::Other;
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

// ---------------------------------------------------------------------------------------------
// The fd table.

enum Kind : std::uint8_t { kNone = 0, kUverbs = 1, kCompChannel = 2, kUcma = 3 };

struct Entry {
  int fd;
  Kind kind;
  int chan; // index into g_chans for kCompChannel
  dev_t dev;
  ino_t ino;
};

struct Chan {
  int wfd;  // write end of the pipe
  int refs; // table entries (the read end and its dups) that point here; 0 = free slot
  dev_t dev;
  ino_t ino;
};

constexpr int kMaxEntries = 4096;
constexpr int kHintFds = 65536;
constexpr int kHintWords = kHintFds / 64;

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
Entry g_entries[kMaxEntries];
int g_nentries = 0;
Chan g_chans[kMaxEntries];
std::atomic<std::uint64_t> g_hint[kHintWords]; // bit set: fd may be in the table
std::atomic<int> g_big{0};                     // entries with fd >= kHintFds

struct Lock {
  Lock() { pthread_mutex_lock(&g_mu); }
  ~Lock() { pthread_mutex_unlock(&g_mu); }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
};

bool maybe_tracked(int fd) {
  if (fd < 0) return false;
  if (fd < kHintFds) return (g_hint[fd / 64].load(std::memory_order_acquire) >> (fd % 64)) & 1u;
  return g_big.load(std::memory_order_acquire) > 0;
}

void hint_set(int fd, bool on) {
  if (fd >= kHintFds) {
    g_big.fetch_add(on ? 1 : -1, std::memory_order_acq_rel);
    return;
  }
  std::uint64_t bit = std::uint64_t{1} << (fd % 64);
  if (on)
    g_hint[fd / 64].fetch_or(bit, std::memory_order_acq_rel);
  else
    g_hint[fd / 64].fetch_and(~bit, std::memory_order_acq_rel);
}

// All below: with g_mu held.
int find(int fd) {
  for (int i = 0; i < g_nentries; ++i)
    if (g_entries[i].fd == fd) return i;
  return -1;
}

bool same_file(int fd, dev_t dev, ino_t ino) {
  struct stat st;
  return sys_fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

bool add_entry(int fd, Kind kind, int chan, dev_t dev, ino_t ino) {
  if (g_nentries == kMaxEntries) {
    dbg("fd table full, fd %d not tracked", fd);
    return false;
  }
  g_entries[g_nentries++] = Entry{fd, kind, chan, dev, ino};
  if (kind == kCompChannel) ++g_chans[chan].refs;
  hint_set(fd, true);
  return true;
}

// Drops entry i. The last entry of a comp channel closes its write end (if that fd is still the
// pipe: an application may have closed it behind our back and reused the number).
void remove_entry(int i) {
  Entry e = g_entries[i];
  g_entries[i] = g_entries[--g_nentries];
  hint_set(e.fd, false);
  if (e.kind == kCompChannel) {
    Chan& c = g_chans[e.chan];
    if (--c.refs == 0) {
      if (same_file(c.wfd, c.dev, c.ino)) sys_close(c.wfd);
      c.wfd = -1;
    }
  }
}

// newfd is a dup of the tracked oldfd (index i).
void copy_entry(int i, int newfd) {
  Entry e = g_entries[i];
  add_entry(newfd, e.kind, e.chan, e.dev, e.ino);
}

// Before reusing fd as something new (our open/pipe just returned it, so any entry is stale).
void forget_stale(int fd) {
  int i = find(fd);
  if (i >= 0) remove_entry(i);
}

int alloc_chan() {
  for (int i = 0; i < kMaxEntries; ++i)
    if (g_chans[i].refs == 0) return i;
  return -1;
}

// ---------------------------------------------------------------------------------------------
// The emulated operations.

int open_uverbs(const char* path, int flags) {
  int fd = sys_openat(kBacking, flags & (O_ACCMODE | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd < 0) return -1;
  struct stat st;
  if (sys_fstat(fd, &st) != 0) {
    int e = errno;
    sys_close(fd);
    errno = e;
    return -1;
  }
  Lock l;
  forget_stale(fd);
  add_entry(fd, kUverbs, -1, st.st_dev, st.st_ino);
  dbg("open %s -> fd %d (%s)", path, fd, kBacking);
  return fd;
}

// /dev/infiniband/rdma_cm: an event channel of the UCMA emulation (ucma.cpp).
int open_ucma(int flags) {
  int fd = uiwarp::ucma::open_channel(flags);
  if (fd < 0) return -1;
  struct stat st;
  if (sys_fstat(fd, &st) != 0) st = {};
  Lock l;
  forget_stale(fd);
  add_entry(fd, kUcma, -1, st.st_dev, st.st_ino);
  dbg("open rdma_cm -> fd %d", fd);
  return fd;
}

// Kind of a tracked fd (kNone if not tracked).
Kind kind_of(int fd) {
  if (!maybe_tracked(fd)) return kNone;
  Lock l;
  int i = find(fd);
  return i < 0 ? kNone : g_entries[i].kind;
}

// Returns true if the open was handled here (result in *ret).
bool intercept_open(const char* path, int flags, int* ret) {
  switch (classify(path)) {
  case PathKind::Other: return false;
  case PathKind::RdmaCm: *ret = open_ucma(flags); return true;
  case PathKind::Uverbs: *ret = open_uverbs(path, flags); return true;
  }
  return false;
}

// Not inlined: glibc declares some callers' path parameters nonnull, and a null path must still
// reach the real function (which fails with EFAULT) rather than crash here.
[[gnu::noinline]] bool is_absolute(const char* path) { return path && path[0] == '/'; }

bool is_ours_for_stat(const char* path) { return classify(path) == PathKind::Uverbs; }

// The path an open/stat/opendir call really uses: /sys/class/infiniband shows the generated
// tree (sysfs_view.hpp); every other path is used as given.
struct Path {
  char buf[PATH_MAX];
  const char* p;
  explicit Path(const char* path) : p(uiwarp::shim::sysfs_view(path, buf, sizeof buf)) {}
  Path(const Path&) = delete;
  Path& operator=(const Path&) = delete;
};

// The uverbs write path. Returns true if handled (result in *ret).
bool uverbs_write(int fd, const void* buf, size_t n, ssize_t* ret) {
  Lock l;
  int i = find(fd);
  if (i < 0 || g_entries[i].kind != kUverbs) return false;
  struct stat st;
  if (sys_fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) || st.st_ino != g_entries[i].ino ||
      st.st_rdev != makedev(kBackingMajor, kBackingMinor)) {
    remove_entry(i); // stale: the number now names something else
    return false;
  }
  std::uint32_t hdr[2] = {0, 0}; // command, in_words | out_words << 16
  if (n >= sizeof hdr) std::memcpy(hdr, buf, sizeof hdr);
  if (n < 16 || hdr[0] != kCmdCreateCompChannel) {
    dbg("uverbs write on fd %d: command %u (%zu bytes) not emulated", fd, hdr[0], n);
    return false; // reaches /dev/full: ENOSPC
  }
  std::uint16_t out_words = static_cast<std::uint16_t>(hdr[1] >> 16);
  std::uint64_t response;
  std::memcpy(&response, static_cast<const char*>(buf) + 8, sizeof response);
  if (response == 0 || out_words * 4u < sizeof(std::uint32_t)) {
    errno = response == 0 ? EFAULT : ENOSPC;
    *ret = -1;
    return true;
  }
  int chan = alloc_chan();
  if (chan < 0 || g_nentries == kMaxEntries) {
    errno = EMFILE;
    *ret = -1;
    return true;
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    *ret = -1;
    return true;
  }
  auto f = real<fcntl_fn>(r_fcntl);
  int fl = f ? f(p[1], F_GETFL) : -1;
  if (fl >= 0 && f) f(p[1], F_SETFL, fl | O_NONBLOCK);
  if (sys_fstat(p[0], &st) != 0) {
    int e = errno;
    sys_close(p[0]);
    sys_close(p[1]);
    errno = e;
    *ret = -1;
    return true;
  }
  forget_stale(p[0]);
  forget_stale(p[1]);
  g_chans[chan] = Chan{p[1], 0, st.st_dev, st.st_ino};
  add_entry(p[0], kCompChannel, chan, st.st_dev, st.st_ino);
  std::uint32_t resp_fd = static_cast<std::uint32_t>(p[0]);
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(response)), &resp_fd, sizeof resp_fd);
  dbg("CREATE_COMP_CHANNEL on fd %d -> channel fd %d (write end %d)", fd, p[0], p[1]);
  *ret = static_cast<ssize_t>(n);
  return true;
}

// close/dup bookkeeping; both run the real call with g_mu held so that fd numbers cannot be
// reused under the table's feet by our own open/pipe.
int tracked_close(int fd) {
  bool ucma = false;
  {
    Lock l;
    int i = find(fd);
    ucma = i >= 0 && g_entries[i].kind == kUcma;
  }
  // An rdma_cm channel stays known as one until the real close: a GET_EVENT write racing this
  // close (rping's CM thread) then sleeps on, as the kernel's write holding the file does, or
  // after it gets EBADF; never the EINVAL of a write to the eventfd behind the channel.
  if (ucma) uiwarp::ucma::closed(fd);
  Lock l;
  if (int i = find(fd); i >= 0) {
    dbg("close fd %d", fd);
    remove_entry(i);
  }
  return sys_close(fd);
}

// Runs a dup-like call `op` that makes a (new or given) fd number a copy of oldfd.
// Any entry for the resulting number is stale: dup2/dup3 closed the old newfd implicitly.
template <typename Op> int tracked_dup(int oldfd, Op op) {
  Lock l;
  int r = op();
  if (r < 0 || r == oldfd) return r;
  forget_stale(r);
  int i = find(oldfd);
  if (i >= 0) {
    copy_entry(i, r);
    dbg("dup fd %d -> %d", oldfd, r);
  }
  return r;
}

[[gnu::constructor(101)]] void shim_init() {
  for (RealSym* s : kAllSyms)
    resolve(*s);
  const char* d = getenv("UIWARP_DEBUG");
  g_debug = d && *d && std::strcmp(d, "0") != 0;
  // A fork() while another thread holds g_mu must not leave the child's table locked.
  pthread_atfork([] { pthread_mutex_lock(&g_mu); }, [] { pthread_mutex_unlock(&g_mu); },
                 [] { pthread_mutex_unlock(&g_mu); });
  for (auto& c : g_chans)
    c.wfd = -1;
  const char* s = getenv("SYSFS_PATH");
  dbg("loaded, SYSFS_PATH=%s", s ? s : "(unset)");
}

mode_t mode_arg(int flags, va_list ap) {
  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
    return static_cast<mode_t>(va_arg(ap, int));
  return 0;
}

} // namespace

// ---------------------------------------------------------------------------------------------
// The interposed C ABI.

SHIM_EXPORT int uiwarp_shim_comp_channel_wfd(int channel_fd) {
  if (!maybe_tracked(channel_fd)) {
    errno = EBADF;
    return -1;
  }
  Lock l;
  int i = find(channel_fd);
  if (i < 0 || g_entries[i].kind != kCompChannel) {
    errno = EBADF;
    return -1;
  }
  return g_chans[g_entries[i].chan].wfd;
}

SHIM_EXPORT int uiwarp_shim_is_uverbs_fd(int fd) {
  if (!maybe_tracked(fd)) return 0;
  Lock l;
  int i = find(fd);
  return i >= 0 && g_entries[i].kind == kUverbs;
}

SHIM_EXPORT int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  va_list ap;
  va_start(ap, flags);
  mode = mode_arg(flags, ap);
  va_end(ap);
  int ret;
  if (intercept_open(path, flags, &ret)) return ret;
  auto f = real<open_fn>(r_open);
  Path p(path);
  return f ? f(p.p, flags, mode) : enosys();
}

SHIM_EXPORT int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  va_list ap;
  va_start(ap, flags);
  mode = mode_arg(flags, ap);
  va_end(ap);
  int ret;
  if (intercept_open(path, flags, &ret)) return ret;
  auto f = real<open_fn>(r_open64);
  Path p(path);
  return f ? f(p.p, flags, mode) : enosys();
}

SHIM_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  mode_t mode = 0;
  va_list ap;
  va_start(ap, flags);
  mode = mode_arg(flags, ap);
  va_end(ap);
  int ret;
  if (is_absolute(path) && intercept_open(path, flags, &ret)) return ret;
  auto f = real<openat_fn>(r_openat);
  Path p(path);
  return f ? f(dirfd, p.p, flags, mode) : enosys();
}

SHIM_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  mode_t mode = 0;
  va_list ap;
  va_start(ap, flags);
  mode = mode_arg(flags, ap);
  va_end(ap);
  int ret;
  if (is_absolute(path) && intercept_open(path, flags, &ret)) return ret;
  auto f = real<openat_fn>(r_openat64);
  Path p(path);
  return f ? f(dirfd, p.p, flags, mode) : enosys();
}

SHIM_EXPORT int __open_2(const char* path, int flags) {
  int ret;
  if (intercept_open(path, flags, &ret)) return ret;
  auto f = real<open2_fn>(r_open_2);
  Path p(path);
  return f ? f(p.p, flags) : enosys();
}

SHIM_EXPORT int __open64_2(const char* path, int flags) {
  int ret;
  if (intercept_open(path, flags, &ret)) return ret;
  auto f = real<open2_fn>(r_open64_2);
  Path p(path);
  return f ? f(p.p, flags) : enosys();
}

SHIM_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  int ret;
  if (is_absolute(path) && intercept_open(path, flags, &ret)) return ret;
  auto f = real<openat2_fn>(r_openat_2);
  Path p(path);
  return f ? f(dirfd, p.p, flags) : enosys();
}

SHIM_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  int ret;
  if (is_absolute(path) && intercept_open(path, flags, &ret)) return ret;
  auto f = real<openat2_fn>(r_openat64_2);
  Path p(path);
  return f ? f(dirfd, p.p, flags) : enosys();
}

// stat and friends: our /dev/infiniband/uverbsN look exactly like /dev/full.
SHIM_EXPORT int stat(const char* path, struct stat* buf) noexcept {
  auto f = real<stat_fn>(r_stat);
  if (!f) return enosys();
  return f(is_ours_for_stat(path) ? kBacking : Path(path).p, buf);
}

SHIM_EXPORT int stat64(const char* path, struct stat64* buf) noexcept {
  auto f = real<stat64_fn>(r_stat64);
  if (!f) return enosys();
  return f(is_ours_for_stat(path) ? kBacking : Path(path).p, buf);
}

SHIM_EXPORT int lstat(const char* path, struct stat* buf) noexcept {
  auto f = real<stat_fn>(r_lstat);
  if (!f) return enosys();
  return f(is_ours_for_stat(path) ? kBacking : Path(path).p, buf);
}

SHIM_EXPORT int lstat64(const char* path, struct stat64* buf) noexcept {
  auto f = real<stat64_fn>(r_lstat64);
  if (!f) return enosys();
  return f(is_ours_for_stat(path) ? kBacking : Path(path).p, buf);
}

SHIM_EXPORT int fstatat(int dirfd, const char* path, struct stat* buf, int flags) noexcept {
  auto f = real<fstatat_fn>(r_fstatat);
  if (!f) return enosys();
  bool ours = is_absolute(path) && is_ours_for_stat(path);
  return f(ours ? AT_FDCWD : dirfd, ours ? kBacking : Path(path).p, buf, flags);
}

SHIM_EXPORT int fstatat64(int dirfd, const char* path, struct stat64* buf, int flags) noexcept {
  auto f = real<fstatat64_fn>(r_fstatat64);
  if (!f) return enosys();
  bool ours = is_absolute(path) && is_ours_for_stat(path);
  return f(ours ? AT_FDCWD : dirfd, ours ? kBacking : Path(path).p, buf, flags);
}

// The pre-2.33 glibc entry points, still used by binaries built against older glibc.
SHIM_EXPORT int __xstat(int ver, const char* path, void* buf) {
  auto f = real<xstat_fn>(r_xstat);
  if (!f) return enosys();
  return f(ver, is_ours_for_stat(path) ? kBacking : Path(path).p, buf);
}

SHIM_EXPORT int __xstat64(int ver, const char* path, void* buf) {
  auto f = real<xstat_fn>(r_xstat64);
  if (!f) return enosys();
  return f(ver, is_ours_for_stat(path) ? kBacking : Path(path).p, buf);
}

SHIM_EXPORT int __lxstat(int ver, const char* path, void* buf) {
  auto f = real<xstat_fn>(r_lxstat);
  if (!f) return enosys();
  return f(ver, is_ours_for_stat(path) ? kBacking : Path(path).p, buf);
}

SHIM_EXPORT int __lxstat64(int ver, const char* path, void* buf) {
  auto f = real<xstat_fn>(r_lxstat64);
  if (!f) return enosys();
  return f(ver, is_ours_for_stat(path) ? kBacking : Path(path).p, buf);
}

SHIM_EXPORT int __fxstatat(int ver, int dirfd, const char* path, void* buf, int flags) {
  auto f = real<fxstatat_fn>(r_fxstatat);
  if (!f) return enosys();
  bool ours = is_absolute(path) && is_ours_for_stat(path);
  return f(ver, ours ? AT_FDCWD : dirfd, ours ? kBacking : Path(path).p, buf, flags);
}

SHIM_EXPORT int __fxstatat64(int ver, int dirfd, const char* path, void* buf, int flags) {
  auto f = real<fxstatat_fn>(r_fxstatat64);
  if (!f) return enosys();
  bool ours = is_absolute(path) && is_ours_for_stat(path);
  return f(ver, ours ? AT_FDCWD : dirfd, ours ? kBacking : Path(path).p, buf, flags);
}

SHIM_EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask,
                      struct statx* buf) noexcept {
  auto f = real<statx_fn>(r_statx);
  if (!f) return enosys();
  bool ours = is_absolute(path) && is_ours_for_stat(path);
  return f(ours ? AT_FDCWD : dirfd, ours ? kBacking : Path(path).p, flags, mask, buf);
}

SHIM_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  if (maybe_tracked(fd)) {
    if (kind_of(fd) == kUcma) return uiwarp::ucma::command(fd, buf, n);
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

namespace {
int fcntl_common(RealSym& sym, int fd, int cmd, void* arg) {
  auto f = real<fcntl_fn>(sym);
  if (!f) return enosys();
  if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && maybe_tracked(fd))
    return tracked_dup(fd, [&] { return f(fd, cmd, arg); });
  return f(fd, cmd, arg);
}
} // namespace

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
