// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The shim's fd table and the emulated uverbs/rdma_cm fds: see shim_fds.hpp.
#include "shim_fds.hpp"

#include "shim_paths.hpp"
#include "shim_real.hpp"
#include "ucma.hpp"
#include "uiwarp/fd.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <initializer_list>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace uiwarp::shim {

namespace {

constexpr std::uint32_t kCmdCreateCompChannel = 17; // IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL

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

[[gnu::constructor(101)]] void init_table() {
  // A fork() while another thread holds g_mu must not leave the child's table locked.
  pthread_atfork([] { pthread_mutex_lock(&g_mu); }, [] { pthread_mutex_unlock(&g_mu); },
                 [] { pthread_mutex_unlock(&g_mu); });
  for (auto& c : g_chans)
    c.wfd = -1;
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

// A new fd of ours: any entry for its number is stale.
void track(int fd, Kind kind, int chan, const struct stat& st) {
  forget_stale(fd);
  add_entry(fd, kind, chan, st.st_dev, st.st_ino);
}

// -1 with errno, closing `fds` (what a failed emulated call opened) first.
int fail_closing(std::initializer_list<int> fds) {
  int e = errno;
  for (int fd : fds)
    sys_close(fd);
  errno = e;
  return -1;
}

} // namespace

TableLock::TableLock() { pthread_mutex_lock(&g_mu); }
TableLock::~TableLock() { pthread_mutex_unlock(&g_mu); }

bool maybe_tracked(int fd) {
  if (fd < 0) return false;
  if (fd < kHintFds) return (g_hint[fd / 64].load(std::memory_order_acquire) >> (fd % 64)) & 1u;
  return g_big.load(std::memory_order_acquire) > 0;
}

Kind kind_of(int fd) {
  if (!maybe_tracked(fd)) return kNone;
  TableLock l;
  int i = find(fd);
  return i < 0 ? kNone : g_entries[i].kind;
}

int open_uverbs(const char* path, int flags) {
  int fd = sys_openat(kBacking, flags & (O_ACCMODE | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd < 0) return -1;
  struct stat st;
  if (sys_fstat(fd, &st) != 0) return fail_closing({fd});
  TableLock l;
  track(fd, kUverbs, -1, st);
  dbg("open %s -> fd %d (%s)", path, fd, kBacking);
  return fd;
}

int open_ucma(int flags) {
  int fd = uiwarp::ucma::open_channel(flags);
  if (fd < 0) return -1;
  struct stat st;
  if (sys_fstat(fd, &st) != 0) st = {};
  TableLock l;
  track(fd, kUcma, -1, st);
  dbg("open rdma_cm -> fd %d", fd);
  return fd;
}

bool uverbs_write(int fd, const void* buf, size_t n, ssize_t* ret) {
  TableLock l;
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
  *ret = -1;
  std::uint16_t out_words = static_cast<std::uint16_t>(hdr[1] >> 16);
  std::uint64_t response;
  std::memcpy(&response, static_cast<const char*>(buf) + 8, sizeof response);
  if (response == 0 || out_words * 4u < sizeof(std::uint32_t)) {
    errno = response == 0 ? EFAULT : ENOSPC;
    return true;
  }
  int chan = alloc_chan();
  if (chan < 0 || g_nentries == kMaxEntries) {
    errno = EMFILE;
    return true;
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return true;
  auto f = real<fcntl_fn>(r_fcntl);
  int fl = f ? f(p[1], F_GETFL) : -1;
  if (fl >= 0 && f) f(p[1], F_SETFL, fl | O_NONBLOCK);
  if (sys_fstat(p[0], &st) != 0) {
    fail_closing({p[0], p[1]});
    return true;
  }
  forget_stale(p[1]);
  g_chans[chan] = Chan{p[1], 0, st.st_dev, st.st_ino};
  track(p[0], kCompChannel, chan, st);
  std::uint32_t resp_fd = static_cast<std::uint32_t>(p[0]);
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(response)), &resp_fd, sizeof resp_fd);
  dbg("CREATE_COMP_CHANNEL on fd %d -> channel fd %d (write end %d)", fd, p[0], p[1]);
  *ret = static_cast<ssize_t>(n);
  return true;
}

int comp_channel_wfd(int fd) {
  if (maybe_tracked(fd)) {
    TableLock l;
    int i = find(fd);
    if (i >= 0 && g_entries[i].kind == kCompChannel) return g_chans[g_entries[i].chan].wfd;
  }
  errno = EBADF;
  return -1;
}

bool forget_if_closed_ucma(int fd) {
  {
    TableLock l;
    int i = find(fd);
    if (i < 0 || g_entries[i].kind != kUcma) return false;
    if (same_file(fd, g_entries[i].dev, g_entries[i].ino)) return false;
    remove_entry(i);
  }
  dbg("rdma_cm channel fd %d was closed behind the shim", fd);
  uiwarp::ucma::closed(fd);
  return true;
}

int tracked_close(int fd) {
  bool ucma = kind_of(fd) == kUcma;
  // An rdma_cm channel stays known as one until the real close: a GET_EVENT write racing this
  // close (rping's CM thread) then sleeps on, as the kernel's write holding the file does, or
  // after it gets EBADF; never the EINVAL of a write to the eventfd behind the channel.
  if (ucma) uiwarp::ucma::closed(fd);
  TableLock l;
  if (int i = find(fd); i >= 0) {
    dbg("close fd %d", fd);
    remove_entry(i);
  }
  return sys_close(fd);
}

void duplicated(int oldfd, int newfd) {
  forget_stale(newfd);
  int i = find(oldfd);
  if (i >= 0) {
    Entry e = g_entries[i];
    add_entry(newfd, e.kind, e.chan, e.dev, e.ino);
    dbg("dup fd %d -> %d", oldfd, newfd);
  }
}

} // namespace uiwarp::shim
