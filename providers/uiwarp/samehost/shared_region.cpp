// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The system calls around the shared STag table (shared_region.hpp): memfd, seals, mmap,
// getrandom and pidfds on the target's side; pidfd_getfd, mmap and process_vm_writev/readv on
// the initiator's. The protocol itself is stag_share.cpp's.
#include "shared_region.hpp"

#include "iwarp/dma.hpp"
#include "result.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>

namespace uiwarp::samehost {
namespace {

using detail::describe;
using detail::failed;
using detail::failed_call;
using detail::made;

constexpr int kSpins = 64;  // drained() polls before the first yield (each reads every slot)
constexpr int kYields = 16; // sched_yield rounds before sleeping
constexpr int kFirstNapNs = 50'000;
constexpr int kLongestNapNs = 1'000'000;
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
constexpr std::int64_t kAliveCheckNs = 1'000'000; // copy_vm(): how long a look at alive() holds
constexpr std::size_t kMaxLocal = 64; // local iovecs of one copy (the data path has up to 17)

// The system calls themselves: glibc 2.36 (Debian 12) declares its wrappers in <sys/pidfd.h>
// without extern "C", so C++ cannot link them. Both descriptors are close-on-exec, always.
int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0u)); }
int take_fd(int pidfd, int fd) {
  return static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0u));
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Closes a descriptor at the end of a scope.
struct Closer {
  int fd = -1;
  ~Closer() {
    if (fd >= 0) ::close(fd);
  }
};

} // namespace

// ---- target side ----------------------------------------------------------------------------

Result<PublishedRegion> PublishedRegion::create(Layout layout) {
  if (!layout.valid())
    return failed<PublishedRegion>(
        std::string("layout: ") + std::string(reason_name(AttachError::BadLayout)), EINVAL);
  PublishedRegion p; // its destructor closes what a failure leaves open
  p.fd_ = ::memfd_create("uiwarp-stags", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (p.fd_ < 0) return failed_call<PublishedRegion>(errno, "memfd_create");
  const std::size_t bytes = layout.bytes();
  if (::ftruncate(p.fd_, static_cast<off_t>(bytes)) != 0)
    return failed_call<PublishedRegion>(errno, "ftruncate");
  // A peer checks these before it maps: the file never shrinks under its mapping (SIGBUS),
  // never grows, and the set of seals is final.
  if (::fcntl(p.fd_, F_ADD_SEALS, kSeals) != 0)
    return failed_call<PublishedRegion>(errno, "F_ADD_SEALS");
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd_, 0);
  if (m == MAP_FAILED) return failed_call<PublishedRegion>(errno, "mmap");
  p.base_ = static_cast<std::byte*>(m);
  p.bytes_ = bytes;
  // The nonce proves to a peer that the pid it reached is the process that made the offer.
  std::uint64_t words[2];
  if (const ssize_t n = ::getrandom(words, sizeof words, 0); n != sizeof words)
    return failed_call<PublishedRegion>(n < 0 ? errno : EIO, "getrandom");
  p.nonce_ = {words[0], words[1]};
  if (!p.pub_.init({p.base_, bytes}, layout, p.nonce_))
    return failed<PublishedRegion>("the table does not fit its mapping", EINVAL);
  return made(std::move(p));
}

PublishedRegion::PublishedRegion(PublishedRegion&& o) noexcept { *this = std::move(o); }

PublishedRegion& PublishedRegion::operator=(PublishedRegion&& o) noexcept {
  if (this == &o) return *this;
  reset();
  fd_ = std::exchange(o.fd_, -1);
  base_ = std::exchange(o.base_, nullptr);
  bytes_ = std::exchange(o.bytes_, 0);
  nonce_ = std::exchange(o.nonce_, Nonce{});
  pub_ = std::exchange(o.pub_, Publisher{}); // its pointers name the mapping, which stays put
  watches_ = std::exchange(o.watches_, {});
  return *this;
}

PublishedRegion::~PublishedRegion() { reset(); }

void PublishedRegion::reset() noexcept {
  for (const Watch& w : watches_)
    ::close(w.pidfd);
  watches_.clear();
  pub_ = Publisher{};
  if (base_) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  base_ = nullptr;
  bytes_ = 0;
  nonce_ = {};
}

int PublishedRegion::watch_peer(std::uint32_t slot, pid_t pid) {
  if (!base_ || slot >= pub_.layout().slots || pid <= 0) return -EINVAL;
  // The pidfd names the process itself: unlike the pid, it never names a later process.
  const int pidfd = open_pidfd(pid);
  if (pidfd < 0) return -errno;
  unwatch_peer(slot);
  watches_.push_back({slot, pidfd});
  return 0;
}

void PublishedRegion::unwatch_peer(std::uint32_t slot) {
  const auto it = std::find_if(watches_.begin(), watches_.end(),
                               [slot](const Watch& w) { return w.slot == slot; });
  if (it == watches_.end()) return;
  ::close(it->pidfd);
  watches_.erase(it);
}

void PublishedRegion::release_ring(std::uint32_t slot) {
  const Layout l = pub_.layout();
  if (fd_ < 0 || slot >= l.slots) return;
  // Failing leaves the pages in use, nothing worse: the ring is reset when the slot reopens.
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
              static_cast<off_t>(l.rings_offset() + slot * kRingAreaBytes),
              static_cast<off_t>(kRingAreaBytes));
}

bool PublishedRegion::release_dead_peers(int timeout_ns) {
  std::vector<pollfd> fds;
  fds.reserve(watches_.size());
  for (const Watch& w : watches_)
    fds.push_back({w.pidfd, POLLIN, 0});
  if (fds.empty() && timeout_ns == 0) return false; // nothing to look at
  const timespec ts{0, timeout_ns};
  if (::ppoll(fds.data(), fds.size(), &ts, nullptr) <= 0) return false;
  bool released = false;
  for (std::size_t i = fds.size(); i-- > 0;) {
    // Readable: the whole process has exited, so none of its threads is inside a copy and
    // none will start one. Its slot is of no further use either way: closed for good.
    if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
    pub_.release_slot(watches_[i].slot);
    ::close(watches_[i].pidfd);
    watches_.erase(watches_.begin() + static_cast<std::ptrdiff_t>(i));
    released = true;
  }
  return released;
}

template <class Done> bool PublishedRegion::wait(Done done, Deadline deadline) {
  // A pin lasts one process_vm_* call, microseconds: most drains end while spinning.
  for (int i = 0; i < kSpins; ++i) {
    if (done()) return true;
    cpu_relax();
  }
  int nap_ns = kFirstNapNs;
  for (int round = 0;; ++round) {
    release_dead_peers(0);
    if (done()) return true;
    long long left_ns = kLongestNapNs;
    if (deadline) {
      left_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    *deadline - std::chrono::steady_clock::now())
                    .count();
      if (left_ns <= 0) return false;
    }
    if (round < kYields) {
      ::sched_yield();
      continue;
    }
    // Sleeps on the pidfds: a watched peer's exit ends the nap at once.
    release_dead_peers(static_cast<int>(std::min<long long>(nap_ns, left_ns)));
    nap_ns = std::min(nap_ns * 2, kLongestNapNs);
  }
}

bool PublishedRegion::wait_drained(const Ticket& t, Deadline deadline) {
  return wait([&] { return pub_.drained(t); }, deadline);
}

bool PublishedRegion::wait_drained(const SlotTicket& t, Deadline deadline) {
  return wait([&] { return pub_.drained(t); }, deadline);
}

// ---- initiator side -------------------------------------------------------------------------

Result<PeerRegion> PeerRegion::attach(pid_t pid, int remote_fd, Nonce expected) {
  const std::string who = "pid " + std::to_string(pid);
  const std::string what = "fd " + std::to_string(remote_fd) + " of " + who;
  PeerRegion p; // its destructor closes and unmaps what a failure leaves
  p.pid_ = pid;
  const Closer pidfd{open_pidfd(pid)};
  if (pidfd.fd < 0) return failed_call<PeerRegion>(errno, "pidfd_open(", who, ")");
  Closer fd{take_fd(pidfd.fd, remote_fd)};
  if (fd.fd < 0) {
    const int e = errno;
    const std::string step = "pidfd_getfd(" + what + ")";
    std::string why = describe(step, e);
    if (e == EPERM) // the ptrace access check (PTRACE_MODE_ATTACH_REALCREDS) refused
      why += " (ptrace_scope, a non-dumpable or setuid target, another user)";
    return failed<PeerRegion>(std::move(why), e);
  }
  // The target's address space, held from here on: its descriptor copies into that one only,
  // whatever the pid runs later. The same ptrace access check as process_vm_writev.
  const std::string mem = "/proc/" + std::to_string(pid) + "/mem";
  p.mem_fd_ = ::open(mem.c_str(), O_RDWR | O_CLOEXEC);
  if (p.mem_fd_ < 0) return failed_call<PeerRegion>(errno, "open(", mem, ")");
  return map_table(std::move(p), fd.fd, what, expected);
}

Result<PeerRegion> PeerRegion::attach_granted(pid_t pid, int table_fd, int mem_fd, Nonce expected) {
  PeerRegion p;
  p.pid_ = pid;
  p.mem_fd_ = mem_fd;
  p.reach_ = Reach::Granted;
  const Closer fd{table_fd};
  return map_table(std::move(p), fd.fd, "the table granted by pid " + std::to_string(pid),
                   expected);
}

Result<PeerRegion> PeerRegion::map_table(PeerRegion p, int table_fd, const std::string& what,
                                         Nonce expected) {
  const std::string who = "pid " + std::to_string(p.pid_);
  struct stat st {};
  if (::fstat(table_fd, &st) != 0) return failed_call<PeerRegion>(errno, "fstat(", what, ")");
  if (!S_ISREG(st.st_mode)) return failed<PeerRegion>(what + " is not a memfd (not a file)");
  const int seals = ::fcntl(table_fd, F_GET_SEALS);
  if (seals < 0) // only memfds (and their hugetlbfs kind) take seals
    return failed_call<PeerRegion>(errno, what, " is not a memfd: F_GET_SEALS");
  // Without them the target could shrink the file under our mapping: SIGBUS on a copy.
  if ((seals & kSeals) != kSeals) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%#x", static_cast<unsigned>(seals));
    return failed<PeerRegion>("seals missing: " + what +
                              " lacks F_SEAL_SHRINK, F_SEAL_GROW or F_SEAL_SEAL (has " + hex + ")");
  }
  if (static_cast<std::size_t>(st.st_size) < sizeof(Header))
    return failed<PeerRegion>(what + ": " + std::string(reason_name(AttachError::TooSmall)));

  // The layout, to know where the read-only part ends. Reader::attach checks the mapped header
  // again; a header that changes meanwhile is refused below.
  std::uint64_t h[sizeof(Header) / sizeof(std::uint64_t)];
  if (const ssize_t n = ::pread(table_fd, h, sizeof h, 0); n != sizeof h)
    return failed_call<PeerRegion>(n < 0 ? errno : EIO, "pread(", what, ")");
  constexpr std::size_t kW = sizeof(Word);
  const auto bad = [&](AttachError e) {
    return failed<PeerRegion>(what + ": " + std::string(reason_name(e)));
  };
  if (h[offsetof(Header, magic) / kW] != kMagic) return bad(AttachError::BadMagic);
  if (h[offsetof(Header, version) / kW] != kVersion) return bad(AttachError::BadVersion);
  const std::uint64_t capacity = h[offsetof(Header, capacity) / kW];
  const std::uint64_t slots = h[offsetof(Header, slots) / kW];
  if (capacity < 1 || capacity > kMaxCapacity || slots < 1 || slots > kMaxSlots)
    return bad(AttachError::BadLayout);
  const Layout layout{static_cast<std::uint32_t>(capacity), static_cast<std::uint32_t>(slots)};
  const std::size_t bytes = layout.bytes(), ro = layout.slots_offset();
  if (static_cast<std::size_t>(st.st_size) < bytes) return bad(AttachError::Truncated);
  if (const long page = ::sysconf(_SC_PAGESIZE); page <= 0 || ro % page != 0)
    return failed<PeerRegion>("page size " + std::to_string(page) +
                              ": the table's read-only part ends inside a page");

  // One reservation, then the two parts over it: adjacent, and nothing else in between.
  void* r = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return failed_call<PeerRegion>(errno, "mmap (reserve)");
  p.base_ = static_cast<std::byte*>(r);
  p.bytes_ = bytes;
  if (::mmap(p.base_, ro, PROT_READ, MAP_SHARED | MAP_FIXED, table_fd, 0) == MAP_FAILED)
    return failed_call<PeerRegion>(errno, "mmap (header and entries)");
  if (::mmap(p.base_ + ro, bytes - ro, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, table_fd,
             static_cast<off_t>(ro)) == MAP_FAILED)
    return failed_call<PeerRegion>(errno, "mmap (slots)");
  // A child we fork does not inherit the slots: it could pin through them after we exit, and
  // the target's pidfd watches us, not it.
  if (::madvise(p.base_, bytes, MADV_DONTFORK) != 0)
    return failed_call<PeerRegion>(errno, "madvise(MADV_DONTFORK)");
  p.forks_ = fork_generation();
  p.owner_ = ::getpid();

  if (const AttachError e = p.reader_.attach({p.base_, bytes}); e != AttachError::None)
    return bad(e);
  // A different layout would put the Reader's slots in the read-only part.
  if (p.reader_.layout() != layout) return failed<PeerRegion>(what + ": header changed");
  // Another process than the one that offered (a pid reused, a wrong pid): not our table.
  if (p.reader_.nonce() != expected)
    return failed<PeerRegion>("nonce mismatch: " + who + " is not the process that offered");
  // Bound to the process that offered: the table is mapped there, at the address it says.
  if (!p.alive())
    return failed<PeerRegion>("/proc/" + std::to_string(p.pid_) + "/mem: the table is not where " +
                              who + " says it is");
  return made(std::move(p));
}

RingWriter PeerRegion::ring(std::uint32_t slot) const {
  const Layout l = reader_.layout();
  if (!base_ || slot >= l.slots) return {};
  return {ring_header(base_, l, slot), ring_data(base_, l, slot)};
}

PeerRegion::PeerRegion(PeerRegion&& o) noexcept { *this = std::move(o); }

PeerRegion& PeerRegion::operator=(PeerRegion&& o) noexcept {
  if (this == &o) return *this;
  reset();
  pid_ = std::exchange(o.pid_, 0);
  mem_fd_ = std::exchange(o.mem_fd_, -1);
  alive_at_.store(o.alive_at_.exchange(0, std::memory_order_relaxed), std::memory_order_relaxed);
  base_ = std::exchange(o.base_, nullptr);
  bytes_ = std::exchange(o.bytes_, 0);
  forks_ = std::exchange(o.forks_, 0);
  owner_ = std::exchange(o.owner_, 0);
  reach_ = std::exchange(o.reach_, Reach::ProcessVm);
  reader_ = std::exchange(o.reader_, Reader{}); // its pointers name the mapping, which stays
  return *this;
}

PeerRegion::~PeerRegion() { reset(); }

void PeerRegion::reset() noexcept {
  reader_ = Reader{};
  // In a child of fork() (or clone()) the range was never inherited (MADV_DONTFORK): whatever
  // the child has mapped there since is its own, not ours to unmap.
  if (base_ && made_here(forks_, owner_)) ::munmap(base_, bytes_);
  if (mem_fd_ >= 0) ::close(mem_fd_);
  alive_at_.store(0, std::memory_order_relaxed);
  pid_ = 0;
  mem_fd_ = -1;
  base_ = nullptr;
  bytes_ = 0;
  forks_ = 0;
  owner_ = 0;
  reach_ = Reach::ProcessVm;
}

bool PeerRegion::alive() const {
  // The header's nonce, read through the address space the descriptor was opened on: it reads
  // nothing once that process has exited or exec'd (the kernel drops the old address space).
  const std::uint64_t at = reader_.target_address(offsetof(Header, nonce_lo));
  std::uint64_t word = 0;
  return mem_fd_ >= 0 &&
         ::pread(mem_fd_, &word, sizeof word, static_cast<off_t>(at)) ==
             static_cast<ssize_t>(sizeof word) &&
         word == reader_.nonce().lo;
}

// The kernel copies program memory here, which ThreadSanitizer cannot see ordered: the pin,
// the unpin and the target's drain order it (iwarp/dma.hpp).
ssize_t PeerRegion::copy(bool write, std::uint32_t slot, const Pin& pin,
                         std::span<const iovec> local) const {
  iwarp::DmaScope dma;
  if (pin.length > kMemCopyMax && reach_ == Reach::ProcessVm)
    return copy_vm(write, slot, pin, local);
  // One system call, and exact: the descriptor's address space or nothing. As fast as
  // process_vm_* for small copies, slower for large ones (it goes a page at a time). The file
  // has no range of its own, as process_vm_*'s remote iovec is: the local octets are cut at
  // the pin's length here, so that nothing beyond the pinned range is touched.
  iovec l[kMaxLocal];
  int n = 0;
  for (std::size_t i = 0, left = pin.length; i < local.size() && left > 0; ++i) {
    if (n == static_cast<int>(kMaxLocal)) return -EINVAL;
    l[n] = {local[i].iov_base, std::min(local[i].iov_len, left)};
    left -= l[n++].iov_len;
  }
  const auto off = static_cast<off_t>(pin.host);
  const ssize_t got = write ? ::pwritev(mem_fd_, l, n, off) : ::preadv(mem_fd_, l, n, off);
  if (got < 0) return -errno;
  // 0 at an address space that is gone; a short count inside one that is not.
  return got == 0 && pin.length != 0 && !alive() ? -ESRCH : got;
}

bool PeerRegion::alive_lately() const {
  // alive() costs a system call, as much as a small copy itself; a pid is given to another
  // process only after the kernel has handed out every other one (it allocates them cyclically
  // up to pid_max, 4194304 by default), which no machine does within kAliveCheckNs of the
  // target's exit.
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  if (now - alive_at_.load(std::memory_order_relaxed) < kAliveCheckNs) return true;
  if (!alive()) return false;
  alive_at_.store(now, std::memory_order_relaxed);
  return true;
}

ssize_t PeerRegion::copy_vm(bool write, std::uint32_t slot, const Pin& pin,
                            std::span<const iovec> local) const {
  // The pid must still name the target.
  if (!alive_lately()) return -ESRCH;
  // Between two looks the target may exec: process_vm_* then reaches the new image, by pid.
  // Its first iovec is the table's own mapping, which the new image lacks there: the call
  // faults on it before any octet of the data moves (it copies the iovecs in order, all in
  // the address space it found at its start). A Read checks that it read the nonce.
  if (local.size() >= kMaxLocal) return -EINVAL;
  iovec l[kMaxLocal];
  iovec r[2];
  std::uint64_t canary = reader_.nonce().lo;
  l[0] = {&canary, sizeof canary};
  std::copy(local.begin(), local.end(), l + 1);
  r[0] = {reinterpret_cast<void*>(reader_.target_address(write ? reader_.canary_offset(slot)
                                                               : offsetof(Header, nonce_lo))),
          sizeof canary};
  r[1] = {reinterpret_cast<void*>(pin.host), pin.length};
  const ssize_t got = write ? ::process_vm_writev(pid_, l, local.size() + 1, r, 2, 0)
                            : ::process_vm_readv(pid_, l, local.size() + 1, r, 2, 0);
  if (got < 0) return -errno;
  if (got < static_cast<ssize_t>(sizeof canary)) return -EFAULT;
  if (!write && canary != reader_.nonce().lo) return -ESRCH; // another image answered
  return got - static_cast<ssize_t>(sizeof canary);
}

ssize_t PeerRegion::write(std::uint32_t slot, const Pin& pin, std::span<const iovec> local) const {
  return copy(true, slot, pin, local);
}

ssize_t PeerRegion::read(std::uint32_t slot, const Pin& pin, std::span<const iovec> local) const {
  return copy(false, slot, pin, local);
}

int PeerRegion::probe(std::uint32_t slot, std::uint64_t value) const {
  if (slot >= reader_.layout().slots) return -EINVAL;
  if (reach_ != Reach::ProcessVm) { // every copy goes through the descriptor: so does the probe
    const Pin word{reader_.target_address(reader_.probe_offset(slot)), sizeof value, {}};
    const iovec local{&value, sizeof value};
    const ssize_t n = copy(true, slot, word, {&local, 1});
    if (n < 0) return static_cast<int>(n);
    return n == sizeof value ? 0 : -EIO;
  }
  // process_vm_writev, as large copies go (copy_vm): a seccomp filter may refuse it while it
  // lets /proc/PID/mem open.
  const iovec remote{reinterpret_cast<void*>(reader_.target_address(reader_.probe_offset(slot))),
                     sizeof value};
  const iovec local{&value, sizeof value};
  iwarp::DmaScope dma;
  const ssize_t n = ::process_vm_writev(pid_, &local, 1, &remote, 1, 0);
  if (n < 0) return -errno;
  return n == sizeof value ? 0 : -EIO;
}

} // namespace uiwarp::samehost
