// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The shared STag table's protocol (stag_share.hpp). Why no copy touches memory the target has
// let go of, in two halves:
//  - Pin against invalidation (Dekker): begin_invalidate() stores the entry's state, then
//    drained() loads every holder; pin() stores its holder, then loads the state. All four are
//    seq_cst, so in their single total order either drained() sees the holder (and waits for
//    the unpin, whose release store orders the copy before drained()'s acquire of it), or the
//    pin's load comes later and sees the state changed (and the pin fails).
//  - Payload against republication (seqlock): publish() writes the payload only while the
//    entry is invalid, then sets valid. pin() loads state, the payload, then state again. The
//    payload words are stored with release and loaded with acquire (not relaxed with fences:
//    ThreadSanitizer does not model fences, and GCC warns of them under it): a payload load
//    that saw a later publish()'s store makes that publish's invalidation visible to the
//    second state load, so a torn snapshot is refused.
#include "stag_share.hpp"

#include <cstddef>
#include <cstdint>
#include <new>

namespace uiwarp::samehost {
namespace {

constexpr std::uint64_t kValid = 1;
constexpr std::uint64_t kDraining = 2;
// Above the largest index + 1 (2^24) and below the generation: a holder's closed bit.
constexpr std::uint64_t kRevokedBit = std::uint64_t{1} << 31;
constexpr std::uint64_t kPinMask = ~kRevokedBit;

constexpr std::uint32_t generation(std::uint64_t state) {
  return static_cast<std::uint32_t>(state >> 32);
}
constexpr std::uint64_t state_of(std::uint32_t gen, std::uint64_t bits) {
  return std::uint64_t{gen} << 32 | bits;
}
// Index + 1, so that an idle holder (0) names no entry. The generation guards against a pin of
// an old entry at the same index; it repeats after 2^32 invalidations of one entry, which no
// single pin (a few loads and a compare-exchange) can straddle in practice.
constexpr std::uint64_t pin_word(std::uint32_t index, std::uint32_t gen) {
  return state_of(gen, std::uint64_t{index} + 1);
}

bool word_aligned(const std::byte* p) {
  return reinterpret_cast<std::uintptr_t>(p) % alignof(Word) == 0;
}

// Orders the answer's words against the probe word that the kernel stores with a plain copy
// (process_vm_writev), which no atomic release or acquire pairs with. ThreadSanitizer models no
// fence (and GCC warns of one under it) nor that copy: its builds rely on the release stores
// and acquire loads around the fence, which order the tests' own probe stores.
void kernel_copy_fence([[maybe_unused]] std::memory_order order) {
#if !defined(__SANITIZE_THREAD__)
  std::atomic_thread_fence(order);
#endif
}

template <class T> T* at(std::byte* base, std::size_t offset) {
  return std::launder(reinterpret_cast<T*>(base + offset));
}

// The RFC 5040 §7.2 order the TCP path (iwarp::MemoryTable::resolve) follows.
Refusal check(const EntryValue& v, std::uint32_t stag, std::uint32_t pd, std::uint32_t qp,
              std::uint64_t to, std::uint64_t len, std::uint32_t need) {
  if (v.stag != stag) return Refusal::InvalidStag; // the key
  if (v.pd != pd || (v.qp != 0 && v.qp != qp)) return Refusal::NotAssociated;
  if ((v.access & need) != need) return Refusal::Access;
  if (to + len < to) return Refusal::Wrap;
  // Without to_base + length, which a garbage table could make wrap.
  if (to < v.to_base || to - v.to_base > v.length || len > v.length - (to - v.to_base))
    return Refusal::Bounds;
  return Refusal::None;
}

} // namespace

bool Publisher::init(std::span<std::byte> region, Layout layout, Nonce nonce) {
  *this = Publisher{};
  if (!layout.valid() || region.size() < layout.bytes() || !word_aligned(region.data()))
    return false;
  // Constructs the header and the slots (a std::atomic's default constructor zeroes it), one
  // object at a time: an array new-expression may want room of its own. The entries are not
  // constructed: the region is zeroed, and zero is every word's initial value (state 0:
  // generation 0, invalid, not draining), as the peer, which constructs nothing, reads them
  // too. Writing 2^18 entries here would make 16 MiB of the memfd resident for nothing.
  std::byte* base = region.data();
  header_ = new (base) Header;
  entries_ = at<Entry>(base, Layout::entries_offset());
  slots_ = at<Slot>(base, layout.slots_offset());
  for (std::uint32_t i = 0; i < layout.slots; ++i)
    new (slots_ + i) Slot;
  for (std::uint32_t i = 0; i < layout.slots; ++i) // closed until opened
    slots_[i].holder.store(kRevokedBit, std::memory_order_relaxed);
  layout_ = layout;
  header_->version.store(kVersion, std::memory_order_relaxed);
  header_->capacity.store(layout.capacity, std::memory_order_relaxed);
  header_->slots.store(layout.slots, std::memory_order_relaxed);
  header_->nonce_lo.store(nonce.lo, std::memory_order_relaxed);
  header_->nonce_hi.store(nonce.hi, std::memory_order_relaxed);
  header_->base.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_relaxed);
  // Last, with release: a Reader that sees the magic (acquire) sees the table laid out.
  header_->magic.store(kMagic, std::memory_order_release);
  return true;
}

bool Publisher::publish(const EntryValue& v) {
  const std::uint32_t index = v.stag >> 8;
  if (!header_ || index >= layout_.capacity) return false;
  if (v.to_base + v.length < v.to_base || v.host + v.length < v.host) return false;
  Entry& e = entries_[index];
  const std::uint64_t s = e.state.load(std::memory_order_relaxed); // only we store it
  if (s & (kValid | kDraining)) return false;
  // Release each: the invalidation's state store before them, for a Reader whose acquire
  // loads see them (it re-reads the state after, see the file comment).
  constexpr auto kRelease = std::memory_order_release;
  e.stag.store(v.stag, kRelease);
  e.pd.store(v.pd, kRelease);
  e.access.store(v.access, kRelease);
  e.qp.store(v.qp, kRelease);
  e.to_base.store(v.to_base, kRelease);
  e.length.store(v.length, kRelease);
  e.host.store(v.host, kRelease);
  e.backing_kind.store(static_cast<std::uint64_t>(v.backing.kind), kRelease);
  e.backing_id.store(v.backing.id, kRelease);
  e.backing_dev.store(v.backing.dev, kRelease);
  e.backing_ino.store(v.backing.ino, kRelease);
  e.backing_offset.store(v.backing.offset, kRelease);
  // Release: a Reader that sees valid (acquire) sees this payload.
  e.state.store(state_of(generation(s), kValid), std::memory_order_release);
  return true;
}

Ticket Publisher::begin_invalidate(std::uint32_t index) {
  if (!header_ || index >= layout_.capacity) return {};
  Entry& e = entries_[index];
  const std::uint64_t s = e.state.load(std::memory_order_relaxed);
  const std::uint32_t gen = generation(s);
  if (!(s & kValid)) return {index, gen - 1, (s & kDraining) != 0}; // already invalid
  // seq_cst: Dekker's first store, before drained()'s holder loads (see the file comment).
  e.state.store(state_of(gen + 1, kDraining), std::memory_order_seq_cst);
  return {index, gen, true};
}

bool Publisher::drained(const Ticket& t) {
  if (!t.pending || !header_ || t.index >= layout_.capacity) return true;
  const std::uint64_t pinned = pin_word(t.index, t.generation);
  for (std::uint32_t i = 0; i < layout_.slots; ++i) {
    // seq_cst: Dekker's load (see the file comment), and an acquire of the unpin's release.
    // The closed bit is masked off: a revoked slot's pin still runs until its unpin.
    if ((slots_[i].holder.load(std::memory_order_seq_cst) & kPinMask) == pinned) return false;
  }
  // A pin of this generation stored from now on re-reads the state and fails: publish() may
  // reuse the entry. Only if the ticket is still the entry's latest (no publish since).
  Entry& e = entries_[t.index];
  const std::uint64_t draining = state_of(t.generation + 1, kDraining);
  if (e.state.load(std::memory_order_relaxed) == draining)
    e.state.store(draining & ~kDraining, std::memory_order_relaxed);
  return true;
}

std::optional<std::uint32_t> Publisher::open_slot() {
  for (std::uint32_t n = 0; header_ && n < layout_.slots; ++n) {
    const std::uint32_t i = (next_slot_ + n) % layout_.slots;
    Slot& s = slots_[i];
    // Closed with no pin: the holder is kRevokedBit alone.
    if (s.holder.load(std::memory_order_acquire) != kRevokedBit) continue;
    for (Word& w : s.answer)
      w.store(0, std::memory_order_relaxed);
    s.owner.store(0, std::memory_order_relaxed);
    s.consumed.store(0, std::memory_order_relaxed);
    s.epoch.fetch_add(1, std::memory_order_relaxed); // published by the holder's release
    s.holder.store(0, std::memory_order_release);    // the cleared answer before the slot opens
    next_slot_ = (i + 1) % layout_.slots;
    return i;
  }
  return std::nullopt;
}

SlotTicket Publisher::close_slot(std::uint32_t slot) {
  if (!header_ || slot >= layout_.slots) return {};
  // A read-modify-write of the holder, as pin()'s compare-exchange is: the two are ordered on
  // that word, so either the pin fails (it sees the bit) or this sees the pin.
  const std::uint64_t old = slots_[slot].holder.fetch_or(kRevokedBit, std::memory_order_seq_cst);
  return {slot, (old & kPinMask) != 0};
}

bool Publisher::drained(const SlotTicket& t) const {
  if (!t.pending || !header_ || t.slot >= layout_.slots) return true;
  // Acquire: the copy, before the unpin's release, happens before what the caller does next.
  return (slots_[t.slot].holder.load(std::memory_order_acquire) & kPinMask) == 0;
}

void Publisher::release_slot(std::uint32_t slot) {
  if (!header_ || slot >= layout_.slots) return;
  slots_[slot].holder.store(kRevokedBit, std::memory_order_seq_cst);
}

SlotAnswer Publisher::answer(std::uint32_t slot) const {
  if (!header_ || slot >= layout_.slots) return {};
  const Word* w = slots_[slot].answer;
  // The probe first: it is the ready flag. The peer stores the other words, then a release
  // fence, then has the kernel copy the probe word in (process_vm_writev: a plain store, not
  // an atomic release, hence the fences on both sides). A probe seen set means the words
  // below are the peer's; read before it, they could be a zero pid from before its answer.
  SlotAnswer a;
  a.probe = w[5].load(std::memory_order_acquire);
  if (a.probe == 0) return {};
  kernel_copy_fence(std::memory_order_acquire);
  const auto load = [&](int i) { return w[i].load(std::memory_order_acquire); };
  a.pid = load(0);
  a.table_fd = load(1);
  a.slot = load(2);
  a.nonce = {load(3), load(4)};
  return a;
}

void Publisher::set_owner(std::uint32_t slot, std::uint32_t pd, std::uint32_t stream) {
  if (!header_ || slot >= layout_.slots) return;
  slots_[slot].owner.store(std::uint64_t{pd} << 32 | stream, std::memory_order_release);
}

std::uint32_t Publisher::owner_stream(std::uint32_t slot) const {
  if (!header_ || slot >= layout_.slots) return 0;
  return static_cast<std::uint32_t>(slots_[slot].owner.load(std::memory_order_relaxed));
}

std::optional<std::uint32_t> Publisher::holder(const Ticket& t) const {
  if (!t.pending || !header_ || t.index >= layout_.capacity) return std::nullopt;
  const std::uint64_t pinned = pin_word(t.index, t.generation);
  for (std::uint32_t i = 0; i < layout_.slots; ++i)
    if ((slots_[i].holder.load(std::memory_order_relaxed) & kPinMask) == pinned) return i;
  return std::nullopt;
}

std::uint32_t Publisher::stag_at(std::uint32_t index) const {
  if (!header_ || index >= layout_.capacity) return 0;
  return static_cast<std::uint32_t>(entries_[index].stag.load(std::memory_order_relaxed));
}

void Publisher::set_consumed(std::uint32_t slot, std::uint64_t octets) {
  if (!header_ || slot >= layout_.slots) return;
  // Release: what processing those octets stored (placement, an invalidation) comes first.
  slots_[slot].consumed.store(octets, std::memory_order_release);
}

AttachError Reader::attach(std::span<std::byte> region) {
  *this = Reader{};
  if (region.size() < sizeof(Header)) return AttachError::TooSmall;
  if (!word_aligned(region.data())) return AttachError::Misaligned;
  const Header* h = at<const Header>(region.data(), 0);
  // Acquire: pairs with init()'s release of the magic, stored after the rest of the table.
  if (h->magic.load(std::memory_order_acquire) != kMagic) return AttachError::BadMagic;
  if (h->version.load(std::memory_order_relaxed) != kVersion) return AttachError::BadVersion;
  const std::uint64_t capacity = h->capacity.load(std::memory_order_relaxed);
  const std::uint64_t slots = h->slots.load(std::memory_order_relaxed);
  // Range first: no size arithmetic on a garbage count.
  if (capacity < 1 || capacity > kMaxCapacity || slots < 1 || slots > kMaxSlots)
    return AttachError::BadLayout;
  const Layout layout{static_cast<std::uint32_t>(capacity), static_cast<std::uint32_t>(slots)};
  if (region.size() < layout.bytes()) return AttachError::Truncated;
  header_ = h;
  entries_ = at<const Entry>(region.data(), Layout::entries_offset());
  slots_ = at<Slot>(region.data(), layout.slots_offset());
  layout_ = layout;
  return AttachError::None;
}

Nonce Reader::nonce() const {
  if (!header_) return {};
  return {header_->nonce_lo.load(std::memory_order_relaxed),
          header_->nonce_hi.load(std::memory_order_relaxed)};
}

PinResult Reader::pin(std::uint32_t slot, std::uint32_t stag, std::uint32_t pd, std::uint32_t qp,
                      std::uint64_t to, std::uint64_t len, std::uint32_t need_access) {
  if (!slots_ || slot >= layout_.slots) return {Refusal::BadSlot, {}};
  const std::uint32_t index = stag >> 8;
  if (index >= layout_.capacity) return {Refusal::NotPublished, {}};
  const Entry& e = entries_[index];
  // Acquire: pairs with publish()'s release of valid, so the payload below is at least that.
  const std::uint64_t s = e.state.load(std::memory_order_acquire);
  if (!(s & kValid)) return {Refusal::InvalidStag, {}};
  constexpr auto kAcquire = std::memory_order_acquire; // the seqlock's payload loads
  const EntryValue v{static_cast<std::uint32_t>(e.stag.load(kAcquire)),
                     static_cast<std::uint32_t>(e.pd.load(kAcquire)),
                     static_cast<std::uint32_t>(e.access.load(kAcquire)),
                     static_cast<std::uint32_t>(e.qp.load(kAcquire)),
                     e.to_base.load(kAcquire),
                     e.length.load(kAcquire),
                     e.host.load(kAcquire),
                     {static_cast<BackingKind>(e.backing_kind.load(kAcquire)),
                      e.backing_id.load(kAcquire), e.backing_dev.load(kAcquire),
                      e.backing_ino.load(kAcquire), e.backing_offset.load(kAcquire)}};
  // The seqlock's read side (see the file comment): unchanged state = a consistent payload,
  // so a refusal below is the entry's, not a torn read's.
  if (e.state.load(std::memory_order_relaxed) != s) return {Refusal::InvalidStag, {}};
  if (const Refusal r = check(v, stag, pd, qp, to, len, need_access); r != Refusal::None)
    return {r, {}};
  // From idle only: a closed slot (kRevokedBit) or one holding a pin refuses.
  Word& holder = slots_[slot].holder;
  std::uint64_t idle = 0;
  if (!holder.compare_exchange_strong(idle, pin_word(index, generation(s)),
                                      std::memory_order_seq_cst))
    return {(idle & kRevokedBit) ? Refusal::Revoked : Refusal::Busy, {}};
  // seq_cst: Dekker's load after our holder store (see the file comment). Unchanged: any
  // invalidation comes later in the total order, and its drained() sees this holder.
  if (e.state.load(std::memory_order_seq_cst) != s) {
    holder.fetch_and(kRevokedBit, std::memory_order_release); // keeps a close's bit
    return {Refusal::InvalidStag, {}};
  }
  Backing b = v.backing;
  b.offset += to - v.to_base; // a garbage offset only misses the peer's bounds check
  return {Refusal::None, {v.host + (to - v.to_base), len, b}};
}

Refusal Reader::hold(std::uint32_t slot) {
  if (!slots_ || slot >= layout_.slots) return Refusal::BadSlot;
  std::uint64_t idle = 0;
  // An index no entry has: no Ticket's drained() waits for it, a SlotTicket's does.
  if (!slots_[slot].holder.compare_exchange_strong(idle, pin_word(kMaxCapacity, 0),
                                                   std::memory_order_seq_cst))
    return (idle & kRevokedBit) ? Refusal::Revoked : Refusal::Busy;
  return Refusal::None;
}

void Reader::unpin(std::uint32_t slot) {
  if (!slots_ || slot >= layout_.slots) return;
  // Release: the copy before drained()'s acquire of this store. Keeps a close's bit, so a
  // revoked slot stays closed.
  slots_[slot].holder.fetch_and(kRevokedBit, std::memory_order_release);
}

void Reader::write_answer(std::uint32_t slot, const SlotAnswer& a) {
  if (!slots_ || slot >= layout_.slots) return;
  Word* w = slots_[slot].answer;
  const std::uint64_t words[] = {a.pid, a.table_fd, a.slot, a.nonce.lo, a.nonce.hi};
  for (std::size_t i = 0; i < std::size(words); ++i)
    w[i].store(words[i], std::memory_order_release);
  // The probe word last, after the fence: a store of it (here, or the kernel's copy of
  // PeerRegion::probe after this returns) is seen only with the words above (see answer()).
  kernel_copy_fence(std::memory_order_release);
  w[5].store(a.probe, std::memory_order_release);
}

Reader::Owner Reader::owner(std::uint32_t slot) const {
  if (!slots_ || slot >= layout_.slots) return {};
  const std::uint64_t o = slots_[slot].owner.load(std::memory_order_acquire);
  return {static_cast<std::uint32_t>(o >> 32), static_cast<std::uint32_t>(o),
          slots_[slot].epoch.load(std::memory_order_acquire)};
}

std::uint64_t Reader::epoch(std::uint32_t slot) const {
  if (!slots_ || slot >= layout_.slots) return 0;
  return slots_[slot].epoch.load(std::memory_order_acquire);
}

std::uint64_t Reader::consumed(std::uint32_t slot) const {
  if (!slots_ || slot >= layout_.slots) return 0;
  // Acquire: pairs with set_consumed(), so a copy after it comes after that processing.
  return slots_[slot].consumed.load(std::memory_order_acquire);
}

std::uint64_t Reader::target_address(std::size_t offset) const {
  return header_ ? header_->base.load(std::memory_order_relaxed) + offset : 0;
}

std::size_t Reader::probe_offset(std::uint32_t slot) const {
  return layout_.slots_offset() + std::size_t{slot} * sizeof(Slot) + offsetof(Slot, answer) +
         5 * sizeof(Word);
}

std::size_t Reader::canary_offset(std::uint32_t slot) const {
  return layout_.slots_offset() + std::size_t{slot} * sizeof(Slot) + offsetof(Slot, canary);
}

std::string_view reason_name(AttachError e) {
  switch (e) {
  case AttachError::None: return "attached";
  case AttachError::TooSmall: return "region smaller than a header";
  case AttachError::Misaligned: return "region not 8-octet aligned";
  case AttachError::BadMagic: return "not a shared STag table";
  case AttachError::BadVersion: return "shared STag table of another version";
  case AttachError::BadLayout: return "capacity or slot count out of range";
  case AttachError::Truncated: return "region smaller than its layout";
  }
  return "unknown attach error";
}

std::string_view reason_name(Refusal r) {
  switch (r) {
  case Refusal::None: return "pinned";
  case Refusal::NotPublished: return "STag index not published";
  case Refusal::InvalidStag: return "invalid STag";
  case Refusal::NotAssociated: return "STag not associated with this stream or PD";
  case Refusal::Access: return "access rights violation";
  case Refusal::Wrap: return "TO wrap";
  case Refusal::Bounds: return "base or bounds violation";
  case Refusal::Revoked: return "slot revoked";
  case Refusal::Busy: return "slot already holds a pin";
  case Refusal::BadSlot: return "no such slot";
  }
  return "unknown refusal";
}

} // namespace uiwarp::samehost
