// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "host.hpp"

#include "backing.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

namespace uiwarp::samehost {

namespace {

// A process's state as /proc/PID/stat's third field says it, in the words ps(1) uses.
std::string process_state(pid_t pid) {
  char path[32], buf[512];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "re");
  if (!f) return "gone";
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // "pid (comm) S ...": the command may hold spaces and parentheses, the last ')' ends it.
  const char* close = std::strrchr(buf, ')');
  if (!close || close[1] != ' ') return "unknown";
  switch (close[2]) {
  case 'R': return "running";
  case 'S': return "sleeping";
  case 'D': return "in uninterruptible sleep";
  case 'T': return "stopped";
  case 't': return "stopped by its tracer";
  case 'Z': return "a zombie";
  default: return std::string("state ") + close[2];
  }
}

// settle()'s pause between looks: spin briefly (a pin lasts one copy, microseconds), then
// yield, then sleep up to a millisecond (a stopped peer may hold it for minutes).
void nap(int round) {
  if (round < 16) {
    ::sched_yield();
    return;
  }
  const long ns = std::min(50'000L << std::min(round - 16, 5), 1'000'000L);
  const timespec ts{0, ns};
  ::nanosleep(&ts, nullptr);
}

} // namespace

Host::~Host() {
  if (region_) mem_.set_observer(nullptr);
}

bool Host::inherited_locked() {
  // The pid as well: a child made by clone() without fork() runs no pthread_atfork handler.
  if (!region_ || (generation_ == fork_generation() && owner_ == ::getpid())) return false;
  // The mapping and descriptor are this child's copies: dropping them touches nothing of the
  // parent's table.
  fast_pub_.store(nullptr, std::memory_order_release);
  grant_.reset(); // the child's copies of the descriptors; the parent's listener stays
  region_.reset();
  pending_.clear(); // the parent's withdrawals and closes, its threads' to wait for
  pending_n_.store(0, std::memory_order_relaxed);
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
      // The grant is for peers the kernel keeps out of this process (grant.hpp); without it
      // (no /proc, the name taken) they take TCP.
      if (auto g = GrantServer::listen(region_->fd(), region_->nonce()))
        grant_.emplace(std::move(*g.value));
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
  region_->release_dead_peers(0); // a slot whose peer died holding a pin becomes free
  reap_locked(0);
  const auto slot = region_->publisher().open_slot();
  if (!slot) return {std::nullopt, "shared STag table: every slot in use", EBUSY};
  // A slot reopens only once no pin is held: a close still pending for it is over, and its
  // watch goes before the new connection's comes.
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].is_slot && pending_[i].slot.slot == *slot) {
      erase_pending(i);
      break;
    }
  }
  region_->unwatch_peer(*slot);
  region_->publisher().set_owner(*slot, pd, stream);
  // Empty before the offer names the slot: its last writer's pin has ended (open_slot).
  RingReader inbound(ring_header(region_->address(), kLayout, *slot),
                     ring_data(region_->address(), kLayout, *slot));
  inbound.reset();
  Result<Opened> out;
  out.value = Opened{*slot, region_->fd(), region_->nonce(), inbound};
  return out;
}

void Host::erase_pending(std::size_t i) {
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  pending_n_.fetch_sub(1, std::memory_order_relaxed);
}

Host::Pending* Host::pending_entry(std::uint32_t index) {
  for (Pending& p : pending_)
    if (!p.is_slot && p.entry.index == index) return &p;
  return nullptr;
}

void Host::add_pending(Pending p) {
  p.tid = ::gettid();
  pending_.push_back(std::move(p));
  pending_n_.fetch_add(1, std::memory_order_relaxed);
}

void Host::close(std::uint32_t slot) {
  std::lock_guard lock(mu_);
  if (!region_ || inherited_locked()) return;
  // The peer wrote its pid into the slot before its first pin: watch it now if nobody did (a
  // responder that never posted a Write or Read), so that a peer killed while it held a pin
  // cannot hold the slot forever.
  if (const SlotAnswer a = region_->publisher().answer(slot); a.probe != 0 && a.pid != 0)
    region_->watch_peer(slot, static_cast<pid_t>(a.pid));
  const SlotTicket t = region_->publisher().close_slot(slot);
  if (region_->publisher().drained(t)) {
    region_->unwatch_peer(slot);
    region_->release_ring(slot);
    return;
  }
  Pending p;
  p.is_slot = true;
  p.slot = t;
  add_pending(std::move(p));
}

int Host::grant_fd() {
  std::lock_guard lock(mu_);
  return grant_ && !inherited_locked() ? grant_->fd() : -1;
}

void Host::serve_grant() {
  std::lock_guard lock(mu_);
  if (grant_ && !inherited_locked()) grant_->serve_one();
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
  // A peer copies into the object the region lies in, if it can map it (backing.hpp). Looked
  // up now, as the program mapped it at registration (an RNIC too keeps the pages it pinned),
  // and outside mu_: it reads /proc/self/maps.
  const Backing backing = find_backing(r.host, r.length);
  std::lock_guard lock(mu_);
  if (!region_ || inherited_locked()) return;
  const EntryValue v{r.stag,
                     r.pd,
                     r.access,
                     r.qp,
                     r.base,
                     r.length,
                     static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(r.host)),
                     backing};
  Publisher& pub = region_->publisher();
  const std::uint32_t index = r.stag >> 8;
  if (index >= kLayout.capacity) return; // beyond the table: peers take TCP for it
  if (Pending* p = pending_entry(index)) {
    // Its old entry still drains: published when the drain ends (reap_locked).
    if (pub.drained(p->entry) && pub.publish(v))
      p->deferred.reset(); // reap_locked ends it
    else
      p->deferred = v;
    return;
  }
  if (pub.publish(v)) return;
  // Still published (set_observer shows every entry): withdraw, publish once drained.
  const Ticket t = pub.begin_invalidate(index);
  if (pub.drained(t) && pub.publish(v)) return;
  Pending p;
  p.entry = t;
  p.deferred = v;
  add_pending(std::move(p));
}

void Host::withdrawn(std::uint32_t index) {
  std::lock_guard lock(mu_);
  if (!region_ || inherited_locked() || index >= kLayout.capacity) return;
  // RFC 5040 §5.3, as an RNIC's invalidation: no new pin succeeds from here on; a copy already
  // pinned finishes, and settle() in this thread waits for it before the memory may go.
  Publisher& pub = region_->publisher();
  const Ticket t = pub.begin_invalidate(index);
  if (Pending* p = pending_entry(index)) {
    // Withdrawn again before its last drain ended: what had waited to be published is not
    // the table's any more, and was never a peer's to copy through.
    p->deferred.reset();
    return;
  }
  if (pub.drained(t)) return; // nobody held it: the usual case, nothing to wait for
  Pending p;
  p.entry = t;
  add_pending(std::move(p));
}

bool Host::reap_locked(pid_t tid) {
  bool mine_left = false;
  Publisher& pub = region_->publisher();
  for (std::size_t i = pending_.size(); i-- > 0;) {
    Pending& p = pending_[i];
    const bool done = p.is_slot ? pub.drained(p.slot) : pub.drained(p.entry);
    if (!done) {
      mine_left = mine_left || p.tid == tid;
      continue;
    }
    if (p.is_slot) {
      region_->unwatch_peer(p.slot.slot);
      region_->release_ring(p.slot.slot);
    } else if (p.deferred)
      pub.publish(*p.deferred);
    erase_pending(i);
  }
  return !mine_left;
}

std::string Host::describe_wait_locked(const Pending& p, std::uint32_t& qp_num) {
  Publisher& pub = region_->publisher();
  const std::optional<std::uint32_t> slot = p.is_slot ? p.slot.slot : pub.holder(p.entry);
  qp_num = slot ? pub.owner_stream(*slot) : 0;
  const std::uint64_t pid = slot ? pub.answer(*slot).pid : 0;
  char into[64];
  if (p.is_slot)
    std::snprintf(into, sizeof into, "through the connection of QP %#x", qp_num);
  else
    std::snprintf(into, sizeof into, "into MR %#x", pub.stag_at(p.entry.index));
  if (pid == 0) return std::string("waiting for a peer to finish a copy ") + into;
  return "waiting for pid " + std::to_string(pid) + " (" + process_state(static_cast<pid_t>(pid)) +
         ") to finish a copy " + into;
}

void Host::settle() {
  if (!unsettled()) return;
  const pid_t tid = ::gettid();
  const auto start = std::chrono::steady_clock::now();
  std::uint32_t reported_qp = 0;
  bool reported = false;
  for (int round = 0;; ++round) {
    std::string why;
    {
      std::lock_guard lock(mu_);
      if (!region_ || inherited_locked()) return;
      if (round > 0) region_->release_dead_peers(0); // a dead peer's pin is no copy
      if (reap_locked(tid)) break;
      if (!reported && std::chrono::steady_clock::now() - start >= std::chrono::seconds(1)) {
        for (const Pending& p : pending_) {
          if (p.tid != tid) continue;
          why = describe_wait_locked(p, reported_qp);
          reported = true;
          break;
        }
      }
    }
    // Outside mu_: the report reaches the shim, and the observer calls of other threads, and
    // their settle(), go on meanwhile.
    if (!why.empty() && report_) report_(reported_qp, why.c_str());
    nap(round);
  }
  if (reported && report_) report_(reported_qp, nullptr);
}

} // namespace uiwarp::samehost
