// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "mapping.hpp"

#include "backing.hpp" // ipc_namespace
#include "iwarp/dma.hpp"
#include "shared_region.hpp" // fork_generation, made_here

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

namespace uiwarp::samehost {

namespace {

struct Made {
  std::byte* base = nullptr;
  std::size_t bytes = 0;
};

// A memfd of process `pid`: its descriptor opened anew, checked to be the object the target
// published (a descriptor number may have been closed and reused), unable to shrink.
Made map_memfd(pid_t pid, const Backing& b) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%llu", static_cast<int>(pid),
                static_cast<unsigned long long>(b.id));
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return {};
  Made m;
  struct stat st {};
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (::fstat(fd, &st) == 0 && st.st_dev == b.dev && st.st_ino == b.ino && seals >= 0 &&
      (seals & F_SEAL_SHRINK) && st.st_size > 0) {
    const auto bytes = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) m = {static_cast<std::byte*>(p), bytes};
  }
  ::close(fd);
  return m;
}

// A SysV segment, attached in this IPC namespace only if it is the target's.
Made map_sysv(const Backing& b) {
  if (b.dev == 0 || ipc_namespace() != b.dev) return {};
  const auto id = static_cast<int>(b.id);
  shmid_ds ds{};
  if (static_cast<std::uint64_t>(id) != b.id || ::shmctl(id, IPC_STAT, &ds) != 0 ||
      ds.shm_segsz == 0)
    return {};
  void* p = ::shmat(id, nullptr, 0);
  if (p == reinterpret_cast<void*>(-1)) return {};
  return {static_cast<std::byte*>(p), ds.shm_segsz};
}

void unmap(const Backing& key, std::byte* base, std::size_t bytes) {
  if (key.kind == BackingKind::SysV)
    ::shmdt(base);
  else
    ::munmap(base, bytes);
}

} // namespace

SharedMappings::Map* SharedMappings::find_or_make(pid_t pid, const Backing& key) {
  Map* lru = &maps_[0];
  for (Map& m : maps_) {
    if ((m.base || m.failed) && m.key == key) return &m;
    if (m.used < lru->used) lru = &m;
  }
  drop(*lru);
  Made made = key.kind == BackingKind::Memfd  ? map_memfd(pid, key)
              : key.kind == BackingKind::SysV ? map_sysv(key)
                                              : Made{};
  // A child of fork() must not copy into the target through it (its pins would be its
  // parent's); as the table's mapping, it does not inherit it.
  if (made.base && ::madvise(made.base, made.bytes, MADV_DONTFORK) != 0) {
    unmap(key, made.base, made.bytes);
    made = {};
  }
  lru->key = key;
  lru->base = made.base;
  lru->bytes = made.bytes;
  lru->failed = made.base == nullptr;
  return lru;
}

std::byte* SharedMappings::at(pid_t pid, const Backing& b, std::uint64_t length) {
  if (b.kind == BackingKind::None) return nullptr;
  if (!made_here(forks_, owner_)) { // first use, or a fork()'s child: nothing of ours is mapped
    maps_ = {};
    forks_ = fork_generation();
    owner_ = ::getpid();
  }
  Backing key = b;
  key.offset = 0;
  Map* m = find_or_make(pid, key);
  m->used = ++uses_;
  if (!m->base || b.offset > m->bytes || length > m->bytes - b.offset) return nullptr;
  return m->base + b.offset;
}

std::string SharedMappings::kinds() const {
  bool memfd = false, sysv = false;
  for (const Map& m : maps_) {
    if (!m.base) continue;
    memfd = memfd || m.key.kind == BackingKind::Memfd;
    sysv = sysv || m.key.kind == BackingKind::SysV;
  }
  if (memfd && sysv) return "memfd and SysV segment";
  return memfd ? "memfd" : sysv ? "SysV segment" : "";
}

void SharedMappings::drop(Map& m) {
  if (m.base && made_here(forks_, owner_)) unmap(m.key, m.base, m.bytes);
  m = Map{};
}

void SharedMappings::clear() {
  for (Map& m : maps_)
    drop(m);
}

// The octets are the program's and the target's, which a completion or the peer's next message
// orders, as an RNIC's DMA (iwarp/dma.hpp): out of ThreadSanitizer's view.
IWARP_DMA void place(bool write, std::byte* target, std::span<const iovec> local,
                     std::uint64_t length) {
  iwarp::DmaScope dma;
  std::uint64_t done = 0;
  for (const iovec& v : local) {
    if (done == length) break;
    auto* mine = static_cast<std::byte*>(v.iov_base);
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(v.iov_len, length - done));
    const bool last = done + n == length;
    if (last && write && n > 0) --n; // the final octet goes alone, below
    if (write)
      std::memcpy(target + done, mine, n);
    else
      std::memcpy(mine, target + done, n);
    done += n;
    if (last && write && done < length) {
      // After every other octet: a release store orders them before it (on x86 a plain store
      // in program order; elsewhere the barrier this is).
      std::atomic_ref<std::byte>(target[done]).store(mine[n], std::memory_order_release);
      ++done;
    }
  }
}

} // namespace uiwarp::samehost
