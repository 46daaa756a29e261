// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "identity.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

namespace uiwarp::samehost {

namespace {

// "0f1e2d3c-..." (36 characters) -> 16 octets; false if it is not one.
bool parse_uuid(const char* s, std::array<std::byte, 16>& out) {
  std::size_t n = 0;
  for (const char* p = s; *p && *p != '\n' && n < 32; ++p) {
    if (*p == '-') continue;
    int v = 0;
    if (std::sscanf(p, "%1x", &v) != 1) return false;
    if (n % 2 == 0)
      out[n / 2] = std::byte(v << 4);
    else
      out[n / 2] |= std::byte(v);
    ++n;
  }
  return n == 32;
}

std::atomic<std::uint32_t> g_forks{0};

} // namespace

Identity identity() {
  Identity id;
  id.uid = static_cast<std::uint32_t>(::geteuid());
  id.pid = static_cast<std::uint32_t>(::getpid());
  char buf[64] = {};
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "re")) {
    const bool ok = std::fgets(buf, sizeof buf, f) && parse_uuid(buf, id.boot_id);
    std::fclose(f);
    if (!ok) id.error = "/proc/sys/kernel/random/boot_id: not a UUID";
  } else {
    id.error = std::string("/proc/sys/kernel/random/boot_id: ") + std::strerror(errno);
  }
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) == 0)
    id.pid_ns = st.st_ino;
  else if (id.error.empty())
    id.error = std::string("/proc/self/ns/pid: ") + std::strerror(errno);
  return id;
}

std::array<std::byte, 16> to_bytes(Nonce n) {
  std::array<std::byte, 16> b{};
  for (int i = 0; i < 8; ++i) {
    b[i] = std::byte(n.lo >> (8 * i));
    b[8 + i] = std::byte(n.hi >> (8 * i));
  }
  return b;
}

Nonce to_nonce(const std::array<std::byte, 16>& b) {
  Nonce n;
  for (int i = 0; i < 8; ++i) {
    n.lo |= std::uint64_t(b[i]) << (8 * i);
    n.hi |= std::uint64_t(b[8 + i]) << (8 * i);
  }
  return n;
}

std::string mismatch(const iwarp::SameHostOffer& offer, const Identity& self) {
  if (!self.error.empty()) return self.error;
  if (offer.boot_id != self.boot_id) return "the peer runs on another host (boot id)";
  if (offer.pid_ns != self.pid_ns) return "the peer is in another pid namespace";
  if (offer.uid != self.uid) return "the peer runs as another user";
  return {};
}

std::uint32_t fork_generation() {
  // Registered by the first call, which comes before anything is made that a child must not
  // touch (a table, a peer's mapping): so every fork() after it counts.
  static const bool registered = [] {
    ::pthread_atfork(nullptr, nullptr, [] { g_forks.fetch_add(1, std::memory_order_relaxed); });
    return true;
  }();
  (void)registered;
  return g_forks.load(std::memory_order_relaxed);
}

bool made_here(std::uint32_t generation, pid_t pid) {
  return generation == fork_generation() && pid == ::getpid();
}

} // namespace uiwarp::samehost
