// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "samehost/host.hpp"

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

Host::~Host() {
  if (region_) mem_.set_observer(nullptr);
}

bool Host::inherited_locked() {
  // The pid as well: a child made by clone() without fork() runs no pthread_atfork handler.
  if (!region_ || (generation_ == fork_generation() && owner_ == ::getpid())) return false;
  // The mapping and descriptor are this child's copies: dropping them touches nothing of the
  // parent's table.
  fast_pub_.store(nullptr, std::memory_order_release);
  region_.reset();
  return true;
}

Result<Host::Opened> Host::open(std::uint32_t pd, std::uint32_t stream) {
  std::lock_guard init(init_mu_);
  bool made_now = false;
  {
    std::lock_guard lock(mu_);
    inherited_locked();
    if (!region_) {
      auto r = PublishedRegion::create(kLayout);
      if (!r) {
        Result<Opened> out;
        out.error = "shared STag table: " + r.error;
        out.errnum = r.errnum;
        return out;
      }
      region_.emplace(std::move(*r.value));
      generation_ = fork_generation();
      owner_ = ::getpid();
      fast_pub_.store(&region_->publisher(), std::memory_order_release);
      made_now = true;
    }
  }
  // Outside mu_: set_observer publishes every entry, each through published(), which takes it.
  if (made_now) mem_.set_observer(this);
  std::lock_guard lock(mu_);
  if (!region_) return {std::nullopt, "shared STag table: gone", EIO};
  const auto slot = region_->publisher().open_slot();
  if (!slot) return {std::nullopt, "shared STag table: every slot in use", EBUSY};
  region_->publisher().set_owner(*slot, pd, stream);
  Result<Opened> out;
  out.value = Opened{*slot, region_->fd(), region_->nonce()};
  return out;
}

void Host::close(std::uint32_t slot) {
  std::lock_guard lock(mu_);
  if (!region_ || inherited_locked()) return;
  // The peer wrote its pid into the slot before its first pin: watch it now if nobody did (a
  // responder that never posted a Write or Read), so that a peer killed while it held a pin
  // cannot hold this drain forever.
  if (const SlotAnswer a = region_->publisher().answer(slot); a.probe != 0 && a.pid != 0)
    region_->watch_peer(slot, static_cast<pid_t>(a.pid));
  const SlotTicket t = region_->publisher().close_slot(slot);
  region_->wait_drained(t);
  region_->unwatch_peer(slot);
}

int Host::watch(std::uint32_t slot, pid_t pid) {
  std::lock_guard lock(mu_);
  if (!region_ || inherited_locked()) return -ENOENT;
  return region_->watch_peer(slot, pid);
}

Publisher* Host::publisher_here() const {
  // generation_ was written before fast_pub_'s release store; after a fork() the mapping is
  // still the parent's table (MAP_SHARED), so the child reads nothing from it and writes
  // nothing into it.
  Publisher* p = fast_pub_.load(std::memory_order_acquire);
  return p && generation_ == fork_generation() ? p : nullptr;
}

void Host::set_consumed(std::uint32_t slot, std::uint64_t octets) {
  // The Publisher's slot words are atomics; this one has a single writer, the slot's QP.
  if (Publisher* p = publisher_here()) p->set_consumed(slot, octets);
}

SlotAnswer Host::answer(std::uint32_t slot) const {
  // Without mu_, as set_consumed: a waiting responder asks at each Write or Read it posts, and
  // the answer's words are atomics of the slot's own.
  if (const Publisher* p = publisher_here()) return p->answer(slot);
  return {};
}

void Host::published(const iwarp::MemoryRegion& r) {
  // Only what a peer may reach: remote rights. Local-only regions stay out of its view.
  constexpr std::uint32_t kRemote = iwarp::access::kRemoteWrite | iwarp::access::kRemoteRead;
  if (!(r.access & kRemote)) return;
  std::lock_guard lock(mu_);
  if (!region_ || inherited_locked()) return;
  const EntryValue v{r.stag,
                     r.pd,
                     r.access,
                     r.qp,
                     r.base,
                     r.length,
                     static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(r.host))};
  Publisher& pub = region_->publisher();
  if (pub.publish(v)) return;
  // Still published (set_observer shows every entry): withdraw, then publish again. Beyond
  // the table's capacity it stays unpublished, and peers take TCP for it.
  region_->wait_drained(pub.begin_invalidate(r.stag >> 8));
  pub.publish(v);
}

void Host::withdrawn(std::uint32_t index) {
  std::lock_guard lock(mu_);
  if (!region_ || inherited_locked() || index >= kLayout.capacity) return;
  // RFC 5040 §5.3, as an RNIC's invalidation: once this returns, no peer's copy through the
  // old entry runs or will run, and the memory may go.
  region_->wait_drained(region_->publisher().begin_invalidate(index));
}

} // namespace uiwarp::samehost
