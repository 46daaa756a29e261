// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The shared STag table of the same-host path (providers/uiwarp/samehost/stag_share.hpp) on
// heap memory, with threads standing in for the two processes: the layout, publish and pin,
// every refusal, invalidation and its drain (with a pin racing it, where no copy may follow a
// drain), revoked slots, dead peers, and regions attach() must refuse.
#include "catch_compat.hpp"
#include "iwarp/memory.hpp"
#include "samehost/stag_share.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace uiwarp::samehost;
using iwarp::access::kRemoteRead;
using iwarp::access::kRemoteWrite;

namespace {

constexpr std::uint32_t kPd = 7;
constexpr std::uint32_t kQp = 42;
constexpr std::uint64_t kBase = 0x10000; // the TO of the first octet (a VA-based region)
constexpr std::uint64_t kLength = 0x1000;
constexpr std::uint64_t kHost = 0x7f00'0000'0000;
constexpr Nonce kNonce{0x0123'4567'89ab'cdef, 0xfedc'ba98'7654'3210};
constexpr std::uint32_t kRw = kRemoteWrite | kRemoteRead;

constexpr std::uint32_t stag_of(std::uint32_t index, std::uint32_t key) { return index << 8 | key; }

EntryValue region(std::uint32_t stag, std::uint32_t rights = kRw, std::uint32_t qp = 0) {
  return {stag, kPd, rights, qp, kBase, kLength, kHost, {}};
}

// Heap memory standing in for the memfd: 8-octet words, zeroed.
struct Memory {
  explicit Memory(std::size_t bytes) : words((bytes + 7) / 8) {}
  std::span<std::byte> bytes() { return std::as_writable_bytes(std::span(words)); }
  std::vector<std::uint64_t> words;
};

// A published table and a peer attached to it.
struct Table {
  explicit Table(Layout l = {16, 4}) : memory(l.bytes()) {
    REQUIRE(pub.init(memory.bytes(), l, kNonce));
    REQUIRE(reader.attach(memory.bytes()) == AttachError::None);
  }
  std::uint32_t open() {
    const auto s = pub.open_slot();
    REQUIRE(s);
    return *s;
  }
  PinResult write(std::uint32_t slot, std::uint32_t stag, std::uint64_t to = kBase,
                  std::uint64_t len = 64) {
    return reader.pin(slot, stag, kPd, kQp, to, len, kRemoteWrite);
  }
  Memory memory;
  Publisher pub;
  Reader reader;
};

} // namespace

TEST_CASE("samehost: the layout ends the entries on a page and sizes every part", "[samehost]") {
  STATIC_REQUIRE(sizeof(Header) == 64);
  STATIC_REQUIRE(sizeof(Entry) == 128);
  STATIC_REQUIRE(sizeof(Slot) == 128);
  STATIC_REQUIRE(Layout::entries_offset() == 64);
  STATIC_REQUIRE(Layout{31, 1}.slots_offset() == 4096); // the header and 31 entries: one page
  STATIC_REQUIRE(Layout{32, 1}.slots_offset() == 8192);
  STATIC_REQUIRE(Layout{1, 32}.rings_offset() == 8192); // 32 slots: one page
  STATIC_REQUIRE(Layout{1, 33}.rings_offset() == 12288);
  STATIC_REQUIRE(Layout{1, 33}.bytes() == 12288 + 33 * kRingAreaBytes); // a ring per slot
  for (const Layout l : {Layout{1, 1}, Layout{63, 7}, Layout{64, 33}, Layout{1000, 100},
                         Layout{kMaxCapacity, kMaxSlots}}) {
    INFO(l.capacity << " entries, " << l.slots << " slots");
    CHECK(l.valid());
    CHECK(l.slots_offset() % kPage == 0);
    CHECK(l.bytes() % kPage == 0);
    CHECK(l.slots_offset() >= 64 + std::size_t{l.capacity} * sizeof(Entry));
    CHECK(l.slots_offset() - (64 + std::size_t{l.capacity} * sizeof(Entry)) < kPage);
    CHECK(l.rings_offset() >= l.slots_offset() + std::size_t{l.slots} * 128);
    CHECK(l.rings_offset() % kPage == 0);
    CHECK(l.bytes() == l.rings_offset() + std::size_t{l.slots} * kRingAreaBytes);
  }
  CHECK_FALSE(Layout{0, 1}.valid());
  CHECK_FALSE(Layout{1, 0}.valid());
  CHECK_FALSE(Layout{kMaxCapacity + 1, 1}.valid());
  CHECK_FALSE(Layout{1, kMaxSlots + 1}.valid());
}

TEST_CASE("samehost: a published region pins at its address, unpins, and pins again",
          "[samehost]") {
  Table t;
  CHECK(t.reader.layout() == Layout{16, 4});
  CHECK(t.reader.nonce() == kNonce);
  const std::uint32_t slot = t.open();
  const std::uint32_t stag = stag_of(5, 0x3c);
  REQUIRE(t.pub.publish(region(stag)));

  const PinResult w = t.write(slot, stag, kBase + 0x100, 0x200);
  REQUIRE(w);
  CHECK(w.pin.host == kHost + 0x100);
  CHECK(w.pin.length == 0x200);
  t.reader.unpin(slot);

  // The whole range, for a Read; then a zero-length Read at its end.
  const PinResult r = t.reader.pin(slot, stag, kPd, kQp, kBase, kLength, kRemoteRead);
  REQUIRE(r);
  CHECK(r.pin.host == kHost);
  CHECK(r.pin.length == kLength);
  t.reader.unpin(slot);
  const PinResult z = t.reader.pin(slot, stag, kPd, kQp, kBase + kLength, 0, kRemoteRead);
  REQUIRE(z);
  CHECK(z.pin.host == kHost + kLength);
  t.reader.unpin(slot);
  CHECK(z.pin.backing.kind == BackingKind::None); // anonymous memory: the system call

  // A region in memory the peer can map: the pin names the object, at TO's offset in it.
  const std::uint32_t shared = stag_of(6, 0x4d);
  EntryValue in_memfd = region(shared);
  in_memfd.backing = {BackingKind::Memfd, 9, 0x21, 0x5eed, 0x3000};
  REQUIRE(t.pub.publish(in_memfd));
  const PinResult m = t.write(slot, shared, kBase + 0x80, 0x100);
  REQUIRE(m);
  CHECK(m.pin.backing == Backing{BackingKind::Memfd, 9, 0x21, 0x5eed, 0x3080});
  t.reader.unpin(slot);

  // Every pin was dropped: invalidation has nothing to wait for.
  const Ticket tk = t.pub.begin_invalidate(5);
  CHECK(tk.pending);
  CHECK(t.pub.drained(tk));
}

TEST_CASE("samehost: every refusal, in the order of the TCP path, leaves the slot idle",
          "[samehost]") {
  Table t;
  const std::uint32_t slot = t.open();
  const std::uint32_t rw = stag_of(1, 0x11), ro = stag_of(2, 0x22), wo = stag_of(3, 0x33);
  const std::uint32_t window = stag_of(4, 0x44); // a type 2 window, bound to stream kQp
  REQUIRE(t.pub.publish(region(rw)));
  REQUIRE(t.pub.publish(region(ro, kRemoteRead)));
  REQUIRE(t.pub.publish(region(wo, kRemoteWrite)));
  REQUIRE(t.pub.publish(region(window, kRw, kQp)));
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  constexpr auto W = kRemoteWrite, R = kRemoteRead;

  struct Case {
    const char* what;
    std::uint32_t slot, stag, pd, qp;
    std::uint64_t to, len;
    std::uint32_t need;
    Refusal want;
  };
  const Case cases[] = {
      {"no such slot", 4, rw, kPd, kQp, kBase, 8, W, Refusal::BadSlot},
      {"index beyond capacity", slot, stag_of(16, 0x11), kPd, kQp, kBase, 8, W,
       Refusal::NotPublished},
      {"index never published", slot, stag_of(9, 0x11), kPd, kQp, kBase, 8, W,
       Refusal::InvalidStag},
      {"another key", slot, stag_of(1, 0x12), kPd, kQp, kBase, 8, W, Refusal::InvalidStag},
      {"another PD", slot, rw, kPd + 1, kQp, kBase, 8, W, Refusal::NotAssociated},
      {"a window of another stream", slot, window, kPd, kQp + 1, kBase, 8, W,
       Refusal::NotAssociated},
      {"a Write to read-only memory", slot, ro, kPd, kQp, kBase, 8, W, Refusal::Access},
      {"a Read of write-only memory", slot, wo, kPd, kQp, kBase, 8, R, Refusal::Access},
      {"a TO range that wraps", slot, rw, kPd, kQp, kMax - 3, 8, W, Refusal::Wrap},
      {"below the base", slot, rw, kPd, kQp, kBase - 1, 8, W, Refusal::Bounds},
      {"one past the end", slot, rw, kPd, kQp, kBase + kLength - 7, 8, W, Refusal::Bounds},
      {"starting past the end", slot, rw, kPd, kQp, kBase + kLength + 1, 0, W, Refusal::Bounds},
      {"another PD and no right: the PD first", slot, ro, kPd + 1, kQp, kBase, 8, W,
       Refusal::NotAssociated},
      {"no right and out of bounds: the right first", slot, ro, kPd, kQp, kMax, 8, W,
       Refusal::Access},
      {"wrap and out of bounds: the wrap first", slot, rw, kPd, kQp, kMax, 2, W, Refusal::Wrap},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const PinResult p = t.reader.pin(c.slot, c.stag, c.pd, c.qp, c.to, c.len, c.need);
    CHECK(p.refusal == c.want);
    CHECK_FALSE(p);
    // Nothing held: the slot pins the next good request.
    REQUIRE(t.write(slot, rw));
    t.reader.unpin(slot);
  }

  // The window's own stream may use it; a region with qp 0 takes any stream.
  CHECK(t.reader.pin(slot, window, kPd, kQp, kBase, 8, R));
  t.reader.unpin(slot);
  CHECK(t.reader.pin(slot, rw, kPd, kQp + 9, kBase, 8, R));

  // A slot that holds a pin is busy; a closed slot and one never opened are revoked.
  CHECK(t.write(slot, ro).refusal == Refusal::Access); // the entry's checks come first
  CHECK(t.write(slot, rw).refusal == Refusal::Busy);
  t.reader.unpin(slot);
  CHECK(t.write(slot + 1, rw).refusal == Refusal::Revoked);
  REQUIRE_FALSE(t.pub.close_slot(slot).pending);
  CHECK(t.write(slot, rw).refusal == Refusal::Revoked);
}

TEST_CASE("samehost: a pin after begin_invalidate fails, and the entry publishes again",
          "[samehost]") {
  Table t;
  const std::uint32_t slot = t.open();
  const std::uint32_t stag = stag_of(3, 0x5a);
  REQUIRE(t.pub.publish(region(stag)));
  CHECK_FALSE(t.pub.publish(region(stag))); // valid: not again
  const Ticket tk = t.pub.begin_invalidate(3);
  CHECK(t.write(slot, stag).refusal == Refusal::InvalidStag);
  CHECK_FALSE(t.pub.publish(region(stag))); // invalid, but not yet known drained
  CHECK(t.pub.drained(tk));
  REQUIRE(t.pub.publish(region(stag)));
  CHECK(t.write(slot, stag));
}

TEST_CASE("samehost: drained stays false while a pin is held and turns true at its unpin",
          "[samehost]") {
  Table t;
  const std::uint32_t slot = t.open(), other = t.open();
  const std::uint32_t a = stag_of(1, 0xa1), b = stag_of(2, 0xb2);
  REQUIRE(t.pub.publish(region(a)));
  REQUIRE(t.pub.publish(region(b)));
  REQUIRE(t.write(slot, a));
  REQUIRE(t.write(other, b));

  const Ticket ta = t.pub.begin_invalidate(1);
  for (int i = 0; i < 3; ++i)
    CHECK_FALSE(t.pub.drained(ta));
  CHECK_FALSE(t.pub.publish(region(stag_of(1, 0xa2)))); // not drained: refused
  // Invalidating again waits for the same pin.
  const Ticket again = t.pub.begin_invalidate(1);
  CHECK(again.generation == ta.generation);
  CHECK_FALSE(t.pub.drained(again));

  t.reader.unpin(slot);
  CHECK(t.pub.drained(ta));
  CHECK(t.pub.drained(again));
  // A pin of another entry never held this one's drain back, and is still held.
  const Ticket tb = t.pub.begin_invalidate(2);
  CHECK_FALSE(t.pub.drained(tb));
  t.reader.unpin(other);
  CHECK(t.pub.drained(tb));
}

TEST_CASE("samehost: re-registration at one index with a new key: the old STag fails, the new "
          "one pins",
          "[samehost]") {
  Table t;
  const std::uint32_t slot = t.open();
  const std::uint32_t old_stag = stag_of(6, 0x01), new_stag = stag_of(6, 0x02);
  REQUIRE(t.pub.publish(region(old_stag)));
  REQUIRE(t.write(slot, old_stag));
  t.reader.unpin(slot);

  const Ticket tk = t.pub.begin_invalidate(6); // deregistration
  REQUIRE(t.pub.drained(tk));
  REQUIRE(t.pub.publish(region(new_stag))); // the same memory, a new key
  CHECK(t.write(slot, old_stag).refusal == Refusal::InvalidStag);
  const PinResult p = t.write(slot, new_stag);
  REQUIRE(p);
  CHECK(p.pin.host == kHost);
  // The new generation's pin holds the next invalidation, not the old ticket.
  CHECK(t.pub.drained(tk));
  const Ticket next = t.pub.begin_invalidate(6);
  CHECK(next.generation == tk.generation + 1);
  CHECK_FALSE(t.pub.drained(next));
  t.reader.unpin(slot);
  CHECK(t.pub.drained(next));
}

TEST_CASE("HX-103 samehost: no copy runs after drained, with pins racing every invalidation",
          "[samehost]") {
  Table t({4, 2});
  const std::uint32_t slot = t.open();
  constexpr std::uint32_t kIndex = 1;
  constexpr std::uint64_t kPoison = 0xdead'dead'dead'dead;
  // 20,000 rounds take a quarter of a second alone. Each hands the CPU between the two threads
  // a few times, so on two cores shared with a build a round can cost scheduler slices of
  // milliseconds: the time bound keeps the test a race test, not a test of the machine's load.
  constexpr int kIterations = 20000;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // The target's registered memory: plain words, so ThreadSanitizer reports any copy that is
  // not ordered against the target's free (the poison).
  std::vector<std::uint64_t> target(64);
  std::atomic<std::uint32_t> advertised{0}; // the STag the target handed out
  std::atomic<bool> stop{false}, in_copy{false};
  std::atomic<std::uint64_t> attempts{0}, copies{0}, poison_seen{0};

  std::thread initiator([&] {
    while (!stop.load()) {
      const PinResult p =
          t.reader.pin(slot, advertised.load(), kPd, kQp, kBase, target.size() * 8, kRemoteWrite);
      attempts.fetch_add(1);
      if (!p) continue;
      in_copy.store(true);
      auto* dst = reinterpret_cast<std::uint64_t*>(p.pin.host); // process_vm_writev's copy
      for (std::size_t i = 0; i < target.size(); ++i) {
        if (dst[i] == kPoison) poison_seen.fetch_add(1);
        dst[i] = i;
      }
      in_copy.store(false);
      t.reader.unpin(slot);
      copies.fetch_add(1);
    }
  });

  std::minstd_rand rng(42);
  int copy_after_drain = 0, poison_overwritten = 0;
  int i = 0;
  for (; i < kIterations && (i % 64 != 0 || std::chrono::steady_clock::now() < deadline); ++i) {
    for (auto& w : target) // registration: live memory
      w = 1;
    const std::uint32_t stag = stag_of(kIndex, static_cast<std::uint32_t>(i) & 0xff);
    EntryValue v = region(stag);
    v.host = reinterpret_cast<std::uint64_t>(target.data());
    REQUIRE(t.pub.publish(v));
    advertised.store(stag);
    // Let a pin attempt start, then invalidate at a varying point of it.
    const std::uint64_t seen = attempts.load();
    while (attempts.load() == seen)
      std::this_thread::yield();
    for (unsigned spin = rng() % 64; spin > 0; --spin)
      (void)attempts.load();
    const Ticket tk = t.pub.begin_invalidate(kIndex);
    while (!t.pub.drained(tk))
      std::this_thread::yield();
    if (in_copy.load()) ++copy_after_drain;
    for (auto& w : target) // deregistration: the memory goes back
      w = kPoison;
    for (unsigned spin = rng() % 64; spin > 0; --spin)
      (void)attempts.load();
    for (const auto w : target)
      if (w != kPoison) ++poison_overwritten;
  }
  stop.store(true);
  initiator.join();
  CHECK(copy_after_drain == 0);
  CHECK(poison_overwritten == 0);
  CHECK(poison_seen.load() == 0);
  INFO(i << " rounds");
  CHECK(copies.load() > 0); // pins won the race, or the test proves nothing
}

TEST_CASE("samehost: closing a slot waits for its pin, and refuses pins through it", "[samehost]") {
  Table t({16, 2});
  const std::uint32_t slot = t.open(), spare = t.open();
  CHECK_FALSE(t.pub.open_slot()); // both taken
  const std::uint32_t stag = stag_of(2, 0x77);
  REQUIRE(t.pub.publish(region(stag)));
  REQUIRE(t.write(slot, stag));

  const SlotTicket closing = t.pub.close_slot(slot); // QP teardown, a copy in flight
  CHECK(closing.pending);
  CHECK_FALSE(t.pub.drained(closing));
  CHECK(t.write(slot, stag).refusal == Refusal::Revoked);
  // The pin through the closed slot still holds an invalidation of its entry back.
  const Ticket tk = t.pub.begin_invalidate(2);
  CHECK_FALSE(t.pub.drained(tk));
  CHECK_FALSE(t.pub.open_slot()); // not reusable while its pin runs

  t.reader.unpin(slot);
  CHECK(t.pub.drained(closing));
  CHECK(t.pub.drained(tk));
  REQUIRE(t.pub.publish(region(stag_of(2, 0x78))));
  CHECK(t.write(slot, stag_of(2, 0x78)).refusal == Refusal::Revoked); // stays closed
  CHECK(t.write(spare, stag_of(2, 0x78)));                            // other slots are untouched
  t.reader.unpin(spare);
  CHECK_FALSE(t.pub.close_slot(spare).pending); // idle: nothing to wait for

  // Closed and drained: a new connection may have it.
  const auto reopened = t.pub.open_slot();
  REQUIRE(reopened);
  CHECK(t.write(*reopened, stag_of(2, 0x78)));
}

TEST_CASE("samehost: a peer that dies holding a pin is released, and the drain completes",
          "[samehost]") {
  Table t({16, 1});
  const std::uint32_t slot = t.open();
  const std::uint32_t stag = stag_of(7, 0x99);
  REQUIRE(t.pub.publish(region(stag)));
  REQUIRE(t.write(slot, stag)); // ... and the peer is killed before it unpins
  const Ticket tk = t.pub.begin_invalidate(7);
  const SlotTicket closing = t.pub.close_slot(slot);
  CHECK_FALSE(t.pub.drained(tk));
  CHECK_FALSE(t.pub.drained(closing));

  t.pub.release_slot(slot); // its pidfd said so
  CHECK(t.pub.drained(tk));
  CHECK(t.pub.drained(closing));
  REQUIRE(t.pub.publish(region(stag_of(7, 0x9a))));
  CHECK(t.write(slot, stag_of(7, 0x9a)).refusal == Refusal::Revoked); // closed
  // The slot goes to the next connection, its answer area cleared.
  t.reader.write_answer(slot, {1234, 5, slot, kNonce, 0x55});
  t.pub.release_slot(slot);
  const auto again = t.pub.open_slot();
  REQUIRE(again);
  CHECK(*again == slot);
  CHECK(t.pub.answer(slot) == SlotAnswer{});
  CHECK(t.write(slot, stag_of(7, 0x9a)));
}

TEST_CASE("samehost: a slot's answer area carries the peer's words to the target", "[samehost]") {
  Table t;
  const std::uint32_t slot = t.open();
  const SlotAnswer a{4321, 17, slot, kNonce, 0xfeed};
  t.reader.write_answer(slot, a);
  CHECK(t.pub.answer(slot) == a);
  CHECK(t.pub.answer(slot + 1) == SlotAnswer{}); // another slot: untouched
}

TEST_CASE("samehost: publish and init refuse what the table cannot hold", "[samehost]") {
  Table t;
  CHECK_FALSE(t.pub.publish(region(stag_of(16, 1)))); // index beyond capacity
  EntryValue wraps = region(stag_of(1, 1));
  wraps.to_base = std::numeric_limits<std::uint64_t>::max() - 10;
  CHECK_FALSE(t.pub.publish(wraps));
  EntryValue host_wraps = region(stag_of(1, 1));
  host_wraps.host = std::numeric_limits<std::uint64_t>::max() - 10;
  CHECK_FALSE(t.pub.publish(host_wraps));
  CHECK(t.pub.publish(region(stag_of(1, 1)))); // nothing was written by the refusals

  Memory m(Layout{16, 4}.bytes() + kPage);
  Publisher p;
  CHECK_FALSE(p.init(m.bytes().first(Layout{16, 4}.bytes() - 1), {16, 4}, kNonce));
  CHECK_FALSE(p.init(m.bytes().subspan(4), {1, 1}, kNonce)); // misaligned
  CHECK_FALSE(p.init(m.bytes(), {0, 4}, kNonce));
  CHECK_FALSE(p.publish(region(stag_of(1, 1)))); // never laid out
  CHECK_FALSE(p.open_slot());
}

TEST_CASE("samehost: attach refuses truncated, misaligned and garbage regions", "[samehost]") {
  const Layout l{100, 8};
  Memory m(l.bytes() + kPage);
  Publisher pub;
  Reader r;
  // Header words: magic, version, capacity, slots.
  auto word = [&](std::size_t i) -> std::uint64_t& { return m.words[i]; };

  CHECK(r.attach(m.bytes()) == AttachError::BadMagic); // zeroes: never laid out
  CHECK(r.attach(m.bytes().first(63)) == AttachError::TooSmall);
  REQUIRE(pub.init(m.bytes(), l, kNonce));
  CHECK(r.attach(m.bytes()) == AttachError::None);
  CHECK(r.attach(m.bytes().subspan(1)) == AttachError::Misaligned);
  CHECK(r.attach(m.bytes().first(l.bytes())) == AttachError::None);
  CHECK(r.attach(m.bytes().first(l.bytes() - 1)) == AttachError::Truncated);
  CHECK(r.attach(m.bytes().first(l.slots_offset())) == AttachError::Truncated);

  const std::uint64_t good[] = {word(0), word(1), word(2), word(3)};
  struct Case {
    const char* what;
    std::size_t index;
    std::uint64_t value;
    AttachError want;
  };
  const Case cases[] = {
      {"another magic", 0, good[0] ^ 1, AttachError::BadMagic},
      {"another version", 1, good[1] + 1, AttachError::BadVersion},
      {"no entries", 2, 0, AttachError::BadLayout},
      {"more entries than an index names", 2, kMaxCapacity + 1, AttachError::BadLayout},
      {"a capacity whose size overflows", 2, std::uint64_t{1} << 58, AttachError::BadLayout},
      {"no slots", 3, 0, AttachError::BadLayout},
      {"a slot count whose size overflows", 3, ~std::uint64_t{0}, AttachError::BadLayout},
      {"more entries than the region holds", 2, 1000, AttachError::Truncated},
      {"more slots than the region holds", 3, 1000, AttachError::Truncated},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    word(c.index) = c.value;
    CHECK(r.attach(m.bytes()) == c.want);
    CHECK(r.pin(0, stag_of(0, 0), kPd, kQp, kBase, 8, kRw).refusal == Refusal::BadSlot);
    word(c.index) = good[c.index];
  }
  REQUIRE(r.attach(m.bytes()) == AttachError::None);

  // Random counts and random entries: attach takes only what fits, and every pin stays
  // inside the region (the sanitizer tree checks the bounds).
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    word(2) = rng() % 4 == 0 ? rng() : rng() % 400;
    word(3) = rng() % 4 == 0 ? rng() : rng() % 40;
    for (std::size_t w = 8; w < 8 + 400 * 8 && w < m.words.size(); ++w)
      m.words[w] = rng() % 2 ? rng() : rng() % 4;
    const AttachError e = r.attach(m.bytes());
    if (e != AttachError::None) {
      CHECK((e == AttachError::Truncated || e == AttachError::BadLayout));
      continue;
    }
    REQUIRE(r.layout().bytes() <= m.bytes().size());
    for (std::uint32_t index = 0; index < r.layout().capacity; ++index)
      (void)r.pin(0, stag_of(index, 0), kPd, kQp, rng(), rng() % 64, kRw);
  }
}

TEST_CASE("samehost: every reason has a name of its own", "[samehost]") {
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(AttachError::Truncated); ++i) {
    const auto n = reason_name(static_cast<AttachError>(i));
    CHECK_FALSE(n.empty());
    CHECK(names.insert(std::string(n)).second);
  }
  for (int i = 0; i <= static_cast<int>(Refusal::BadSlot); ++i) {
    const auto n = reason_name(static_cast<Refusal>(i));
    CHECK_FALSE(n.empty());
    CHECK(names.insert(std::string(n)).second);
  }
}

TEST_CASE("samehost: a reopened slot has a new epoch, which a pin of the old connection sees",
          "[samehost]") {
  Table t;
  REQUIRE(t.pub.publish(region(stag_of(7, 0x9a))));
  const std::uint32_t slot = t.open();
  const std::uint64_t first = t.reader.owner(slot).epoch;
  t.pub.close_slot(slot);
  t.pub.release_slot(slot);
  // Round robin: the other slots go first, then this one again.
  std::optional<std::uint32_t> again;
  for (std::uint32_t i = 0; i < t.pub.layout().slots && (!again || *again != slot); ++i)
    again = t.pub.open_slot();
  REQUIRE(again);
  REQUIRE(*again == slot);
  // A peer of the first connection pins through it (the slot is open): the epoch tells it apart.
  REQUIRE(t.write(slot, stag_of(7, 0x9a)));
  CHECK(t.reader.epoch(slot) != first);
  CHECK(t.reader.epoch(slot) == t.reader.owner(slot).epoch);
}
