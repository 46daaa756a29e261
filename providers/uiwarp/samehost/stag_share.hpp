// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The STag table a process publishes to same-host peers. Two uiwarp processes on one host can
// move RDMA Write and Read data with process_vm_writev/readv instead of TCP; the initiator then
// needs the target's STag table (regions and windows: PD, stream, rights, TO range, host
// address), and the target needs to know that no copy still touches memory it lets go of
// (deregistration, reregistration, window invalidation, QP teardown). This is that table as a
// protocol over shared memory the caller hands in, with no system call, clock or thread: the
// edges (memfd, mmap, pidfd, process_vm_*) live elsewhere, and the unit tests
// (tests/unit/test_samehost_share.cpp) run it on heap memory with threads.
//
// The region: a Header, `capacity` Entries (entry i is STag index i, STag >> 8), padding to a
// page, then `slots` Slots, padding to a page, then a stream ring per slot (stream_ring.hpp).
// The peer maps the header and entries read-only and the slots and rings read-write. The target
// (Publisher) writes entries; an initiator (Reader) pins an entry by naming it in its slot's holder
// word before it copies, and unpins after. Invalidation marks the entry invalid, then waits until
// no slot names its old generation (drained()). Every shared word is a lock-free
// std::atomic<uint64_t>: two processes, one protocol.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

namespace uiwarp::samehost {

inline constexpr std::uint64_t kMagic = 0x73'67'61'74'73'77'69'75; // "uiwstags", little-endian
// 2: a stream ring per slot (stream_ring.hpp); 3: an entry names its region's Backing.
inline constexpr std::uint64_t kVersion = 3;
inline constexpr std::size_t kPage = 4096;
inline constexpr std::uint32_t kMaxCapacity = 1u << 24; // the STag index is 24 bits
inline constexpr std::uint32_t kMaxSlots = 1u << 12;
// Each slot's stream ring (stream_ring.hpp): a page of header, then the data.
inline constexpr std::size_t kRingAreaBytes = kPage + (1 << 20);

using Word = std::atomic<std::uint64_t>;
static_assert(Word::is_always_lock_free, "shared between processes: must not hide a lock");

struct Nonce {
  std::uint64_t lo = 0, hi = 0;
  friend bool operator==(const Nonce&, const Nonce&) = default;
};

struct Header {
  Word magic, version, capacity, slots;
  Word nonce_lo, nonce_hi; // the target's: the peer echoes it to prove it mapped this table
  Word base;               // the table's address in the target, for the peer's probe
  Word reserved[1];
};

// Where a published region's memory lies when the target maps it from an object a peer can
// map too (backing.hpp): the peer then copies with loads and stores into its own mapping of
// it (mapping.hpp) instead of a system call per copy. kind None: anonymous or private memory,
// reached through the target's address space only.
enum class BackingKind : std::uint8_t {
  None = 0,
  Memfd = 1, // a shmem file sealed against shrinking: id is the target's descriptor number
  SysV = 2,  // a System V segment: id is its shmid
};
struct Backing {
  BackingKind kind = BackingKind::None;
  std::uint64_t id = 0;
  // Which object id named when the target published it: a Memfd's st_dev and st_ino (the
  // descriptor number may be closed and reused meanwhile), a SysV segment's IPC namespace
  // inode (a shmid means nothing in another one) and 0.
  std::uint64_t dev = 0, ino = 0;
  std::uint64_t offset = 0; // the object's offset of the region's first octet (in a Pin: of TO)
  friend bool operator==(const Backing&, const Backing&) = default;
};

// state = generation << 32 | draining << 1 | valid. Invalidation bumps the generation and sets
// draining, which drained() clears: publish() needs both bits clear. The payload words are
// written only while the entry is invalid, and read seqlock style (validated by re-reading
// state; see stag_share.cpp).
struct Entry {
  Word state;
  Word stag, pd, access, qp, to_base, length, host;
  Word backing_kind, backing_id, backing_dev, backing_ino, backing_offset;
  Word reserved[3];
};

// holder: 0 = open and idle; (generation << 32 | index + 1) = pinned; kRevokedBit set = closed
// (with the pin bits still set until that pin is dropped). owner: the target's end of the
// connection, pd << 32 | stream (the QP number), which pins through the slot must name.
// consumed: the target's count of stream octets it has processed to the end of an FPDU,
// which the peer compares with what it sent over TCP before a copy may pass it. epoch: bumped
// each time the slot opens, so a peer of an earlier connection through it can tell. answer:
// the peer's words from connection set-up (SlotAnswer), on a cache line of their own. canary:
// the peer's to write, first in each large copy's system call (PeerRegion), meaning nothing.
struct Slot {
  Word holder;
  Word owner, consumed, epoch;
  Word canary;
  Word reserved[3];
  Word answer[8];
};

static_assert(std::is_standard_layout_v<Header> && sizeof(Header) == 64);
static_assert(std::is_standard_layout_v<Entry> && sizeof(Entry) == 128);
static_assert(std::is_standard_layout_v<Slot> && sizeof(Slot) == 128);

constexpr std::size_t page_up(std::size_t n) { return (n + kPage - 1) / kPage * kPage; }

struct Layout {
  std::uint32_t capacity = 0; // entries: STag indexes [0, capacity) are published
  std::uint32_t slots = 0;    // holder slots: one per connection of a peer

  constexpr bool valid() const {
    return capacity >= 1 && capacity <= kMaxCapacity && slots >= 1 && slots <= kMaxSlots;
  }
  static constexpr std::size_t entries_offset() { return sizeof(Header); }
  // Header and entries end on a page: the edge maps them read-only, the slots read-write.
  constexpr std::size_t slots_offset() const {
    return page_up(entries_offset() + std::size_t{capacity} * sizeof(Entry));
  }
  constexpr std::size_t rings_offset() const {
    return page_up(slots_offset() + std::size_t{slots} * sizeof(Slot));
  }
  constexpr std::size_t bytes() const {
    return rings_offset() + std::size_t{slots} * kRingAreaBytes;
  }
  friend bool operator==(const Layout&, const Layout&) = default;
};
static_assert(Layout{kMaxCapacity, kMaxSlots}.bytes() < (std::size_t{1} << 40)); // no overflow

// One published STag. access holds iwarp::access bits (libiwarp/include/iwarp/memory.hpp);
// qp 0 = any stream of the PD, else the one stream (a type 2 window, a region bound to a QP);
// host is the target's address of TO to_base; backing what it lies in, if a peer can map it.
struct EntryValue {
  std::uint32_t stag = 0, pd = 0, access = 0, qp = 0;
  std::uint64_t to_base = 0, length = 0, host = 0;
  Backing backing;
  friend bool operator==(const EntryValue&, const EntryValue&) = default;
};

// The peer's words in its slot, written during connection set-up (the handshake is elsewhere).
struct SlotAnswer {
  std::uint64_t pid = 0, table_fd = 0, slot = 0;
  Nonce nonce; // the target's Header nonce, echoed
  std::uint64_t probe = 0;
  friend bool operator==(const SlotAnswer&, const SlotAnswer&) = default;
};

// Wait for copies through (index, generation) to end: drained(Ticket).
struct Ticket {
  std::uint32_t index = 0, generation = 0;
  bool pending = false; // false: nothing to wait for (never valid, drained, not published)
};
// Wait for the pin of a closed slot to end: drained(SlotTicket).
struct SlotTicket {
  std::uint32_t slot = 0;
  bool pending = false;
};

// Target side, one per device context. Not thread-safe: the caller serialises its calls (its
// STag table lock); Readers in any thread or process run against it.
class Publisher {
public:
  // Lays out a fresh table in `region` (at least layout.bytes(), 8-octet aligned, and zeroed,
  // as a new memfd is: an entry of all zeros is invalid, so the entries are left untouched
  // and cost no memory until published). Every slot starts closed. False if the layout or
  // region does not fit.
  bool init(std::span<std::byte> region, Layout layout, Nonce nonce);
  Layout layout() const { return layout_; }

  // Publishes `v` at index v.stag >> 8. False (and nothing written) unless that index is
  // below capacity, its entry invalid and drained (begin_invalidate, then drained() true), and
  // neither TO range nor host range wraps 2^64.
  bool publish(const EntryValue& v);
  // Marks the entry at `index` invalid: no new pin succeeds. Copies already pinned finish;
  // wait for drained(ticket) before the memory or the STag goes. Invalidating an entry already
  // invalid gives the ticket of its last valid generation again.
  Ticket begin_invalidate(std::uint32_t index);
  // True once no slot holds the ticket's generation: no copy through it runs or will run.
  // The first true also lets publish() reuse the entry.
  bool drained(const Ticket& t);

  // A slot for a new connection of a peer, or none free.
  std::optional<std::uint32_t> open_slot();
  // Revokes the slot: later pins through it fail. A pin already held ends at its unpin; the
  // slot is reusable once drained(ticket).
  SlotTicket close_slot(std::uint32_t slot);
  bool drained(const SlotTicket& t) const;
  // The peer that used `slot` is dead (its pidfd said so): drops its pin and closes the slot.
  // Only once the peer can no longer run: a live peer could still be copying.
  void release_slot(std::uint32_t slot);
  SlotAnswer answer(std::uint32_t slot) const;
  // The connection's end here, and how far this end has processed the peer's stream.
  void set_owner(std::uint32_t slot, std::uint32_t pd, std::uint32_t stream);
  std::uint32_t owner_stream(std::uint32_t slot) const;
  // For a wait that lasts: the slot whose pin holds `t` back (none: drained, or a look that
  // raced the unpin), and the STag the entry at `index` was published with.
  std::optional<std::uint32_t> holder(const Ticket& t) const;
  std::uint32_t stag_at(std::uint32_t index) const;
  void set_consumed(std::uint32_t slot, std::uint64_t octets);

private:
  Header* header_ = nullptr;
  Entry* entries_ = nullptr;
  Slot* slots_ = nullptr;
  Layout layout_;
  std::uint32_t next_slot_ = 0; // open_slot() goes round: a slot just closed is reused last
};

enum class AttachError : std::uint8_t {
  None,
  TooSmall,   // smaller than a header
  Misaligned, // not on an 8-octet boundary
  BadMagic,   // not a table, or not laid out yet
  BadVersion,
  BadLayout, // capacity or slots out of range
  Truncated, // smaller than its header's layout needs
};

enum class Refusal : std::uint8_t {
  None,
  NotPublished,  // index >= capacity: not in the table (take the TCP path)
  InvalidStag,   // invalid, invalidated meanwhile, or another key
  NotAssociated, // another PD, or another stream
  Access,        // lacks the needed right
  Wrap,          // TO + length wraps 2^64
  Bounds,        // outside the registered range
  Revoked,       // the slot is closed
  Busy,          // the slot already holds a pin
  BadSlot,       // no such slot
};

std::string_view reason_name(AttachError e);
std::string_view reason_name(Refusal r);

// Where to copy: the target's address of `to`, the length, and the object `to` lies in (its
// offset there) if the target published one.
struct Pin {
  std::uint64_t host = 0, length = 0;
  Backing backing;
};
struct PinResult {
  Refusal refusal = Refusal::None;
  Pin pin;
  explicit operator bool() const { return refusal == Refusal::None; }
};

// Initiator side: thread-safe as long as each thread pins through a slot of its own. Reads
// the header and entries only, so they may be mapped read-only.
class Reader {
public:
  // Checks a table another process laid out; reads nothing outside `region`, whatever it holds.
  // The layout is read once here: a table changing its header later cannot widen it.
  AttachError attach(std::span<std::byte> region);
  Layout layout() const { return layout_; }
  Nonce nonce() const;

  // Pins the entry of `stag` for a copy of `len` octets at TO `to` for a stream `qp` of PD
  // `pd` that needs `need_access` (iwarp::access::kRemoteWrite for a Write, kRemoteRead for
  // a Read). The checks are the RFC 5040 §7.2 order of the TCP path. On success copy, then
  // unpin(slot); on a refusal nothing is held.
  PinResult pin(std::uint32_t slot, std::uint32_t stag, std::uint32_t pd, std::uint32_t qp,
                std::uint64_t to, std::uint64_t len, std::uint32_t need_access);
  // Holds the slot itself for a write into its stream ring (stream_ring.hpp), as a pin holds
  // an entry: a close of the slot waits for it, and the slot is not reopened meanwhile. Then
  // check epoch() against the connection's, write, and unpin(slot). Revoked, Busy or BadSlot.
  Refusal hold(std::uint32_t slot);
  void unpin(std::uint32_t slot);
  // Writes the answer's words. The handshake writes them with probe 0, then the probe itself
  // with process_vm_writev (PeerRegion::probe): the target takes the answer once it is set.
  void write_answer(std::uint32_t slot, const SlotAnswer& a);
  // The target's end of the slot's connection: {pd, stream}, and the slot's epoch then.
  struct Owner {
    std::uint32_t pd = 0, stream = 0;
    std::uint64_t epoch = 0;
  };
  Owner owner(std::uint32_t slot) const;
  // The slot's epoch now. Read while holding a pin, it cannot change (the slot reopens only
  // once no pin is held): a value other than Owner::epoch means the pin is through a later
  // connection's slot, and must be dropped.
  std::uint64_t epoch(std::uint32_t slot) const;
  std::uint64_t consumed(std::uint32_t slot) const;
  // The target's address of the octet at `offset` in the table, and the probe word's offset.
  std::uint64_t target_address(std::size_t offset) const;
  std::size_t probe_offset(std::uint32_t slot) const;
  std::size_t canary_offset(std::uint32_t slot) const;

private:
  const Header* header_ = nullptr;
  const Entry* entries_ = nullptr;
  Slot* slots_ = nullptr;
  Layout layout_;
};

} // namespace uiwarp::samehost
