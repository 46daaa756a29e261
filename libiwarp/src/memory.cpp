// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "iwarp/memory.hpp"

#include <mutex>

namespace iwarp {

namespace {
constexpr std::uint32_t kIndexLimit = 1u << 24;
std::uint32_t index_of(std::uint32_t stag) { return stag >> 8; }
} // namespace

std::string_view mem_error_name(MemError e) {
  switch (e) {
  case MemError::InvalidStag: return "invalid STag";
  case MemError::NotAssociated: return "STag not associated with this stream or PD";
  case MemError::Access: return "access rights violation";
  case MemError::Bounds: return "base or bounds violation";
  case MemError::Wrap: return "TO wrap";
  case MemError::Permanent: return "STag of a type 1 memory window";
  }
  return "?";
}

TermCode ddp_tagged_code(MemError e) {
  switch (e) {
  case MemError::InvalidStag: return term::ddp_tagged_invalid_stag;
  case MemError::NotAssociated: return term::ddp_tagged_stag_not_assoc;
  case MemError::Access: return term::rdmap_access_rights; // C-09: no DDP code exists
  case MemError::Bounds: return term::ddp_tagged_base_bounds;
  case MemError::Wrap: return term::ddp_tagged_to_wrap;
  case MemError::Permanent: return term::ddp_tagged_invalid_stag; // not on this path
  }
  return term::ddp_local_catastrophic;
}

TermCode rdmap_protection_code(MemError e) {
  switch (e) {
  case MemError::InvalidStag: return term::rdmap_invalid_stag;
  case MemError::NotAssociated: return term::rdmap_stag_not_assoc; // C-08
  case MemError::Access: return term::rdmap_access_rights;
  case MemError::Bounds: return term::rdmap_base_bounds;
  case MemError::Wrap: return term::rdmap_to_wrap;
  case MemError::Permanent: return term::rdmap_stag_cannot_invalidate;
  }
  return term::rdmap_local_catastrophic;
}

MemoryTable::MemoryTable(std::uint64_t seed) : rng_(seed) {
  regions_.emplace_back(); // index 0 is never handed out: STag 0 is "none"
  regions_[0].valid = false;
}

std::uint8_t MemoryTable::next_key() { return static_cast<std::uint8_t>(rng_() & 0xff); }

void MemoryTable::withdraw(std::uint32_t index) {
  if (observer_) observer_->withdrawn(index);
}

void MemoryTable::republish(std::uint32_t index) {
  const MemoryRegion& r = regions_[index];
  if (observer_ && r.valid && r.host) observer_->published(r);
}

void MemoryTable::set_observer(MemoryObserver* o) {
  std::unique_lock lock(mu_);
  observer_ = o;
  for (std::uint32_t i = 1; i < regions_.size(); ++i)
    republish(i);
}

std::uint32_t MemoryTable::add(std::uint32_t pd, std::byte* host, std::uint64_t base,
                               std::uint64_t length, std::uint32_t access) {
  std::unique_lock lock(mu_);
  std::uint32_t index;
  std::uint8_t old_key = 0;
  bool reused = false;
  if (!free_.empty()) {
    // Reuse a random free slot so that indices do not hint at allocation order.
    std::size_t pick = rng_() % free_.size();
    index = free_[pick];
    free_[pick] = free_.back();
    free_.pop_back();
    old_key = static_cast<std::uint8_t>(regions_[index].stag & 0xff);
    reused = true;
  } else {
    if (regions_.size() >= kIndexLimit) return 0;
    index = static_cast<std::uint32_t>(regions_.size());
    regions_.emplace_back();
  }
  MemoryRegion& r = regions_[index];
  // A reused slot never gets its previous key back: the old STag stays dead
  // (RFC 5040 §8.1.1(6), HX-103).
  std::uint8_t key = next_key();
  if (reused && key == old_key) key = static_cast<std::uint8_t>(key + 1);
  r = MemoryRegion{(index << 8) | key, pd, access, host, base, length, 0, true};
  ++live_;
  republish(index);
  return r.stag;
}

std::optional<std::uint32_t> MemoryTable::modify(std::uint32_t stag, std::uint32_t pd,
                                                 std::byte* host, std::uint64_t base,
                                                 std::uint64_t length, std::uint32_t access,
                                                 bool rekey) {
  std::unique_lock lock(mu_);
  const MemoryRegion* found = find(stag);
  if (!found || found->kind != StagKind::Region) return std::nullopt;
  MemoryRegion& r = regions_[index_of(stag)];
  auto key = static_cast<std::uint8_t>(stag & 0xff);
  if (rekey) {
    key = next_key();
    if (key == (stag & 0xff)) key = static_cast<std::uint8_t>(key + 1);
  }
  withdraw(index_of(stag));
  r = MemoryRegion{(index_of(stag) << 8) | key, pd, access, host, base, length, r.qp, true};
  republish(index_of(stag));
  return r.stag;
}

bool MemoryTable::remove(std::uint32_t stag) {
  std::unique_lock lock(mu_);
  if (!find(stag)) return false;
  std::uint32_t index = index_of(stag);
  if (regions_[index].kind != StagKind::Region) --windows_;
  withdraw(index);
  // Keep the dead STag's value (host == nullptr marks the slot free) so that the
  // slot's next key differs from it.
  regions_[index] = MemoryRegion{};
  regions_[index].stag = stag;
  regions_[index].valid = false;
  free_.push_back(index);
  --live_;
  return true;
}

std::optional<MemError> MemoryTable::invalidate(std::uint32_t stag, std::uint32_t pd,
                                                std::uint32_t qp) {
  std::unique_lock lock(mu_);
  const MemoryRegion* r = find(stag);
  // A type 1 window is never invalidated by a peer (RDMAC verbs: only type 2 windows and
  // regions may be named by Send with Invalidate).
  if (!r || !r->valid) return MemError::InvalidStag;
  if (r->kind == StagKind::Window1) return MemError::Permanent;
  if (r->pd != pd || (r->qp != 0 && r->qp != qp)) return MemError::NotAssociated;
  withdraw(index_of(stag));
  regions_[index_of(stag)].valid = false;
  return std::nullopt;
}

bool MemoryTable::invalidate(std::uint32_t stag) {
  std::unique_lock lock(mu_);
  if (!find(stag)) return false;
  withdraw(index_of(stag));
  regions_[index_of(stag)].valid = false;
  return true;
}

std::optional<MemoryRegion> MemoryTable::lookup(std::uint32_t stag) const {
  std::shared_lock lock(mu_);
  const MemoryRegion* r = find(stag);
  if (!r) return std::nullopt;
  return *r;
}

std::size_t MemoryTable::size() const {
  std::shared_lock lock(mu_);
  return live_;
}

bool MemoryTable::associate(std::uint32_t stag, std::uint32_t qp) {
  std::unique_lock lock(mu_);
  if (!find(stag)) return false;
  withdraw(index_of(stag));
  regions_[index_of(stag)].qp = qp;
  republish(index_of(stag));
  return true;
}

const MemoryRegion* MemoryTable::find(std::uint32_t stag) const {
  std::uint32_t index = index_of(stag);
  if (index == 0 || index >= regions_.size()) return nullptr;
  const MemoryRegion& r = regions_[index];
  return r.stag == stag && (r.host != nullptr || r.kind != StagKind::Region) ? &r : nullptr;
}

std::uint32_t MemoryTable::add_window(std::uint32_t pd, StagKind kind) {
  // A dummy host address makes add() take the slot; the window stays unbound.
  static std::byte dummy;
  std::uint32_t stag = add(pd, &dummy, 0, 0, 0);
  if (!stag) return 0;
  std::unique_lock lock(mu_);
  MemoryRegion& r = regions_[index_of(stag)];
  r.host = nullptr;
  r.kind = kind;
  r.valid = false;
  ++windows_;
  return stag;
}

std::optional<MemError> MemoryTable::bind(const WindowBind& b) {
  std::unique_lock lock(mu_);
  const MemoryRegion* w = find(b.window);
  if (!w || w->kind == StagKind::Region || index_of(b.new_stag) != index_of(b.window))
    return MemError::InvalidStag;
  if (w->pd != b.pd) return MemError::NotAssociated;
  if (w->kind == StagKind::Window2 && w->valid) return MemError::InvalidStag; // not free
  MemoryRegion& win = regions_[index_of(b.window)];
  if (b.length == 0 && w->kind == StagKind::Window1) { // unbind
    withdraw(index_of(b.window));
    win.stag = b.new_stag;
    win.valid = false;
    win.host = nullptr;
    win.parent = 0;
    return std::nullopt;
  }
  const MemoryRegion* r = find(b.region);
  if (!r || !r->valid || r->kind != StagKind::Region) return MemError::InvalidStag;
  if (r->pd != b.pd) return MemError::NotAssociated;
  const std::uint32_t remote = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
  const bool writes = b.access & (access::kRemoteWrite | access::kRemoteAtomic);
  if (!(r->access & access::kMwBind) || (writes && !(r->access & access::kLocalWrite)))
    return MemError::Access;
  if (b.addr + b.length < b.addr) return MemError::Wrap;
  if (b.addr < r->base || b.addr + b.length > r->base + r->length) return MemError::Bounds;
  withdraw(index_of(b.window));
  win.stag = b.new_stag;
  win.host = r->host + (b.addr - r->base);
  win.base = (b.access & access::kZeroBased) ? 0 : b.addr;
  win.length = b.length;
  win.access = b.access & (remote | access::kZeroBased);
  win.qp = w->kind == StagKind::Window2 ? b.qp : 0;
  win.parent = r->stag;
  win.valid = true;
  republish(index_of(b.window));
  return std::nullopt;
}

bool MemoryTable::has_windows(std::uint32_t stag) const {
  std::shared_lock lock(mu_);
  if (windows_ == 0) return false;
  for (const MemoryRegion& r : regions_)
    if (r.kind != StagKind::Region && r.valid && r.parent == stag) return true;
  return false;
}

bool MemoryTable::remove_window(std::uint32_t stag) {
  std::uint32_t current = 0;
  {
    std::shared_lock lock(mu_);
    std::uint32_t index = index_of(stag);
    if (index == 0 || index >= regions_.size() || regions_[index].kind == StagKind::Region)
      return false;
    current = regions_[index].stag;
  }
  return remove(current);
}

std::optional<MemError> MemoryTable::invalidate_local(std::uint32_t stag, std::uint32_t pd) {
  std::unique_lock lock(mu_);
  const MemoryRegion* r = find(stag);
  if (!r || r->kind == StagKind::Window1) return MemError::InvalidStag;
  if (r->pd != pd) return MemError::NotAssociated;
  withdraw(index_of(stag));
  regions_[index_of(stag)].valid = false;
  return std::nullopt;
}

MemoryTable::Resolved MemoryTable::resolve(std::uint32_t stag, std::uint32_t pd, std::uint32_t qp,
                                           std::uint64_t to, std::uint64_t len, std::uint32_t need,
                                           bool local) const {
  // RFC 5041 §7.1 / RFC 5040 §7.2 order: STag, association, rights, bounds, wrap.
  std::shared_lock lock(mu_);
  const MemoryRegion* r = find(stag);
  if (!r || !r->valid || (local && r->kind != StagKind::Region))
    return {nullptr, MemError::InvalidStag};
  if (r->pd != pd || (r->qp != 0 && r->qp != qp)) return {nullptr, MemError::NotAssociated};
  if ((r->access & need) != need) return {nullptr, MemError::Access};
  if (to + len < to) return {nullptr, MemError::Wrap};
  if (to < r->base || to + len > r->base + r->length) return {nullptr, MemError::Bounds};
  return {r->host + (to - r->base), std::nullopt};
}

} // namespace iwarp
