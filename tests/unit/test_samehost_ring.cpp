// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The same-host stream ring (providers/uiwarp/samehost/stream_ring.hpp) on heap memory, with
// threads standing in for the two processes: where each slot's ring lies, octets in order
// across the ring's end, what the FPDUs in the ring leave out (their CRC), a full ring and its
// ring-back, the doorbell rule, a writer and a reader racing over megabytes, and the words a
// hostile peer can write (an impossible tail or head).
#include "catch_compat.hpp"
#include "samehost/stag_share.hpp"
#include "samehost/stream_ring.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

using namespace uiwarp::samehost;

namespace {

using Bytes = std::span<const std::byte>;

// A table's memory with its rings, 8-octet words, zeroed, as a fresh memfd is.
struct Table {
  explicit Table(Layout l = {16, 2}) : layout(l), words(l.bytes() / 8) {}
  std::byte* base() { return reinterpret_cast<std::byte*>(words.data()); }
  RingReader reader(std::uint32_t slot) {
    RingReader r(ring_header(base(), layout, slot), ring_data(base(), layout, slot));
    r.reset();
    return r;
  }
  RingWriter writer(std::uint32_t slot) {
    return {ring_header(base(), layout, slot), ring_data(base(), layout, slot)};
  }
  Layout layout;
  std::vector<std::uint64_t> words;
};

std::vector<std::byte> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::byte> v(n);
  std::minstd_rand g(seed);
  for (auto& b : v)
    b = static_cast<std::byte>(g());
  return v;
}

// Everything readable, in order, consumed.
std::vector<std::byte> drain(RingReader& r, bool* rung = nullptr) {
  std::span<const std::byte> s[2];
  REQUIRE(r.peek(s));
  std::vector<std::byte> out(s[0].begin(), s[0].end());
  out.insert(out.end(), s[1].begin(), s[1].end());
  const bool ring_back = r.consume(out.size());
  if (rung) *rung = ring_back;
  return out;
}

} // namespace

TEST_CASE("samehost ring: each slot's ring lies in the table, data on a page", "[samehost]") {
  const Layout l{100, 3};
  Table t(l);
  for (std::uint32_t s = 0; s < l.slots; ++s) {
    auto* h = reinterpret_cast<std::byte*>(ring_header(t.base(), l, s));
    std::byte* d = ring_data(t.base(), l, s);
    CHECK(h >= t.base() + l.rings_offset());
    CHECK(d == h + kPage);
    CHECK((d - t.base()) % kPage == 0);
    CHECK(d + kRingData <= t.base() + l.bytes());
  }
}

TEST_CASE("samehost ring: octets arrive in order across the ring's end", "[samehost]") {
  Table t;
  RingReader r = t.reader(0);
  RingWriter w = t.writer(0);
  CHECK(r.start() == 0);
  w.start(1234);
  CHECK(r.start() == 1235);
  // Three-quarters, read; then a ring's worth in two pieces, which wraps.
  const auto a = pattern(kRingData / 4 * 3, 1);
  CHECK(w.write(std::vector<Bytes>{a}) == a.size());
  CHECK(drain(r) == a);
  const auto b = pattern(kRingData / 2, 2), c = pattern(kRingData / 2, 3);
  CHECK(w.write(std::vector<Bytes>{b, c}) == kRingData);
  std::span<const std::byte> s[2];
  REQUIRE(r.peek(s));
  CHECK(s[0].size() == kRingData / 4); // up to the ring's end...
  CHECK(s[1].size() == kRingData / 4 * 3);
  auto got = drain(r);
  auto want = b;
  want.insert(want.end(), c.begin(), c.end());
  CHECK(got == want);
  CHECK(w.written() == kRingData / 4 * 3 + kRingData);
}

TEST_CASE("samehost ring: FPDUs without CRC only toward a reader that reads them", "[samehost]") {
  Table t;
  RingReader r = t.reader(0);
  RingWriter w = t.writer(0);
  CHECK(w.start(0) == kRingNoCrc); // this version's reader reads them
  CHECK(r.start() == 1);
  CHECK(r.framing() == kRingNoCrc);
  // A reader of a version that knows none (its `reads` word stays zero, as the memfd made it):
  // the FPDUs keep their CRC, and the reader of the next connection in the slot is told so.
  RingReader old = t.reader(1);
  ring_header(t.base(), t.layout, 1)->reads.store(0);
  CHECK(t.writer(1).start(7) == 0);
  CHECK(old.framing() == 0);
  // The slot's reopening clears what the last writer said; bits neither end knows are dropped.
  ring_header(t.base(), t.layout, 1)->framing.store(~std::uint64_t{0});
  CHECK(old.framing() == kRingFraming);
  RingReader again = t.reader(1);
  CHECK(again.start() == 0);
  CHECK(again.framing() == 0);
  ring_header(t.base(), t.layout, 1)->reads.store(~std::uint64_t{0});
  CHECK(t.writer(1).start(9) == kRingFraming);
}

TEST_CASE("samehost ring: a full ring takes what fits, and the reader rings back", "[samehost]") {
  Table t;
  RingReader r = t.reader(1);
  RingWriter w = t.writer(1);
  const auto a = pattern(kRingData + 100, 4);
  CHECK(w.write(std::vector<Bytes>{a}) == kRingData); // the rest waits
  CHECK(w.write(std::vector<Bytes>{Bytes(a).subspan(kRingData)}) == 0);
  CHECK(w.wait_for_room()); // still full: the reader will ring
  bool rung = false;
  CHECK(drain(r, &rung).size() == kRingData);
  CHECK(rung);
  CHECK(w.write(std::vector<Bytes>{Bytes(a).subspan(kRingData)}) == 100);
  CHECK_FALSE(w.wait_for_room()); // room now: no request left behind
  drain(r, &rung);
  CHECK_FALSE(rung); // nobody asked
}

TEST_CASE("samehost ring: a writer that sees room again takes back its request", "[samehost]") {
  Table t;
  RingReader r = t.reader(1);
  RingWriter w = t.writer(1);
  Word& head = ring_header(t.base(), t.layout, 1)->head;
  const auto a = pattern(kRingData, 5);
  constexpr std::size_t k8 = kRingData / 8;
  CHECK(w.write(std::vector<Bytes>{a}) == kRingData);
  CHECK(w.wait_for_room());
  CHECK_FALSE(w.room_again(1)); // nothing read yet
  std::span<const std::byte> s[2];
  REQUIRE(r.peek(s));
  CHECK(r.consume(k8)); // the request was there: the reader rings
  CHECK(w.write(std::vector<Bytes>{Bytes(a).first(k8)}) == k8);
  CHECK(w.wait_for_room()); // full again: a new request
  // The reader consumes, the writer looks between the reader's store of head and its look at
  // the request (the stores are consume()'s): less than the writer wants leaves it standing...
  head.store(2 * k8);
  CHECK_FALSE(w.room_again(kRingData / 4));
  // ...enough takes it back, and the reader has nobody to ring.
  head.store(5 * k8);
  CHECK(w.room_again(kRingData / 4));
  CHECK_FALSE(r.consume(4 * k8));
  // An impossible head is room as far as the look goes: the write says what it is.
  head.store(kRingData * 3);
  CHECK(w.room_again(kRingData));
  CHECK(w.write(std::vector<Bytes>{a}) == 0);
  CHECK(w.broken());
}

TEST_CASE("samehost ring: the writer rings unless a poll looked recently", "[samehost]") {
  Table t;
  RingReader r = t.reader(0);
  RingWriter w = t.writer(0);
  const std::int64_t now = 10'000'000'000;
  CHECK(w.needs_doorbell(now)); // never looked
  r.looked(now - kLookFreshNs + 1);
  CHECK_FALSE(w.needs_doorbell(now));
  r.looked(now - kLookFreshNs);
  CHECK(w.needs_doorbell(now));
  r.looked(now + 1); // the future: a clock it cannot trust
  CHECK(w.needs_doorbell(now));
}

TEST_CASE("samehost ring: an impossible tail or head is refused, not followed", "[samehost]") {
  Table t;
  RingReader r = t.reader(0);
  RingWriter w = t.writer(0);
  RingHeader* h = ring_header(t.base(), t.layout, 0);
  std::span<const std::byte> s[2];
  h->tail.store(kRingData + 1); // more than the ring holds
  CHECK_FALSE(r.peek(s));
  CHECK(s[0].empty());
  h->tail.store(0);
  REQUIRE(r.peek(s));
  const auto a = pattern(64, 5);
  CHECK(w.write(std::vector<Bytes>{a}) == 64);
  h->head.store(65); // ahead of what was written
  CHECK(w.write(std::vector<Bytes>{a}) == 0);
  CHECK(w.broken());
}

TEST_CASE("samehost ring: a writer and a reader racing over megabytes", "[samehost]") {
  // Random piece sizes, some larger than the ring; the reader consumes random amounts. The
  // writer waits for room by the ring-back only (no polling of head), so a lost ring-back
  // would hang the test.
  Table t;
  RingReader r = t.reader(0);
  RingWriter w = t.writer(0);
  const auto stream = pattern(24 << 20, 6);
  std::atomic<int> rung{0}; // the doorbell: a count of ring-backs
  std::thread writer([&] {
    std::minstd_rand g(7);
    std::size_t off = 0;
    while (off < stream.size()) {
      const std::size_t n = std::min<std::size_t>(stream.size() - off, 1 + g() % (300 << 10));
      std::size_t done = 0;
      while (done < n) {
        const std::size_t k =
            w.write(std::vector<Bytes>{Bytes(stream).subspan(off + done, n - done)});
        done += k;
        if (k == 0) {
          const int seen = rung.load(std::memory_order_acquire);
          if (w.wait_for_room())
            while (rung.load(std::memory_order_acquire) == seen)
              std::this_thread::yield();
        }
      }
      off += n;
    }
  });
  std::vector<std::byte> got;
  got.reserve(stream.size());
  std::minstd_rand g(8);
  bool ok = true;
  while (got.size() < stream.size() && ok) {
    std::span<const std::byte> s[2];
    ok = r.peek(s);
    std::size_t take = std::min<std::size_t>(s[0].size() + s[1].size(), 1 + g() % (96 << 10));
    const std::size_t first = std::min(take, s[0].size());
    got.insert(got.end(), s[0].begin(), s[0].begin() + static_cast<std::ptrdiff_t>(first));
    got.insert(got.end(), s[1].begin(), s[1].begin() + static_cast<std::ptrdiff_t>(take - first));
    if (take > 0 && r.consume(take)) rung.fetch_add(1, std::memory_order_release);
    if (take == 0) std::this_thread::yield();
  }
  writer.join();
  CHECK(ok);
  CHECK(got.size() == stream.size());
  CHECK(std::memcmp(got.data(), stream.data(), stream.size()) == 0);
}
