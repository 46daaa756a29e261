// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The stream ring's protocol (stream_ring.hpp). A single-producer single-consumer byte ring:
// the writer copies, then publishes tail with release; the reader loads tail with acquire,
// copies out, then publishes head with release, so neither end reads octets the other is still
// writing. Positions are counts of octets since the slot opened (never wrapped: 2^64 octets),
// the data index is the count modulo the ring's size. What one end reads of the other's words
// is checked before use: a peer process can write anything there.
#include "stream_ring.hpp"

#include <algorithm>
#include <cstring>

namespace uiwarp::samehost {

RingHeader* ring_header(std::byte* base, const Layout& layout, std::uint32_t slot) {
  return std::launder(
      reinterpret_cast<RingHeader*>(base + layout.rings_offset() + slot * kRingAreaBytes));
}

std::byte* ring_data(std::byte* base, const Layout& layout, std::uint32_t slot) {
  return base + layout.rings_offset() + slot * kRingAreaBytes + kPage;
}

void RingReader::reset() {
  // No writer holds the slot now (it is opening): plain order, published by the slot's opening.
  for (Word* w : {&h_->tail, &h_->start, &h_->waits, &h_->framing, &h_->head, &h_->looked})
    w->store(0, std::memory_order_relaxed);
  h_->reads.store(kRingFraming, std::memory_order_relaxed);
  head_ = 0;
}

std::uint64_t RingReader::start() const { return h_->start.load(std::memory_order_acquire); }

// Stored before start, which published it (acquire in start()). Bits this version does not
// know would be a writer's bug or a lie: only the known ones are taken.
std::uint64_t RingReader::framing() const {
  return h_->framing.load(std::memory_order_relaxed) & kRingFraming;
}

bool RingReader::peek(std::span<const std::byte> (&out)[2]) const {
  out[0] = out[1] = {};
  // seq_cst: the second half of looked()'s Dekker pair. Acquire at least: the octets before it.
  const std::uint64_t tail = h_->tail.load(std::memory_order_seq_cst);
  if (tail < head_ || tail - head_ > kRingData) return false;
  const std::size_t n = tail - head_;
  const std::size_t at = head_ % kRingData;
  const std::size_t first = std::min(n, kRingData - at);
  out[0] = {data_ + at, first};
  out[1] = {data_, n - first};
  return true;
}

bool RingReader::consume(std::size_t n) {
  head_ += n;
  // Release: our reads of the octets before the writer reuses their space. seq_cst: the
  // Dekker pair with wait_for_room() (store head, load waits).
  h_->head.store(head_, std::memory_order_seq_cst);
  if (h_->waits.load(std::memory_order_seq_cst) == 0) return false;
  return h_->waits.exchange(0, std::memory_order_seq_cst) != 0;
}

void RingReader::looked(std::int64_t now) {
  h_->looked.store(static_cast<std::uint64_t>(now), std::memory_order_seq_cst);
}

std::int64_t RingReader::looked_at() const {
  return static_cast<std::int64_t>(h_->looked.load(std::memory_order_relaxed));
}

std::uint64_t RingWriter::start(std::uint64_t offset) {
  // The reader set `reads` at the slot's opening, before its offer named the slot.
  const std::uint64_t framing = h_->reads.load(std::memory_order_relaxed) & kRingFraming;
  h_->framing.store(framing, std::memory_order_relaxed);
  // Release: a reader that sees it sees framing and tail (0); the octets written after are
  // published by tail itself.
  h_->start.store(offset + 1, std::memory_order_release);
  return framing;
}

std::size_t RingWriter::write(std::span<const std::span<const std::byte>> pieces) {
  if (broken_) return 0;
  const std::uint64_t head = h_->head.load(std::memory_order_acquire);
  if (head > tail_ || tail_ - head > kRingData) {
    broken_ = true;
    return 0;
  }
  std::size_t room = kRingData - (tail_ - head), done = 0;
  for (const auto& p : pieces) {
    std::size_t off = 0;
    while (off < p.size() && room > 0) {
      const std::size_t at = (tail_ + done) % kRingData;
      const std::size_t n = std::min({p.size() - off, room, kRingData - at});
      std::memcpy(data_ + at, p.data() + off, n);
      off += n;
      done += n;
      room -= n;
    }
    if (off < p.size()) break;
  }
  if (done == 0) return 0;
  tail_ += done;
  // Release: the octets before tail. seq_cst: the Dekker pair with looked() (store tail, then
  // needs_doorbell() loads looked).
  h_->tail.store(tail_, std::memory_order_seq_cst);
  return done;
}

bool RingWriter::needs_doorbell(std::int64_t now) const {
  const auto looked = static_cast<std::int64_t>(h_->looked.load(std::memory_order_seq_cst));
  // A look in the future is the peer's clock, or garbage: ring.
  return looked > now || now - looked >= kLookFreshNs;
}

bool RingWriter::wait_for_room() {
  h_->waits.store(1, std::memory_order_seq_cst);
  const std::uint64_t head = h_->head.load(std::memory_order_seq_cst);
  if (head > tail_ || tail_ - head > kRingData) {
    broken_ = true;
    return true; // write() says so
  }
  if (tail_ - head < kRingData) { // room came before the reader could see the request
    h_->waits.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool RingWriter::room_again(std::size_t want) {
  const std::uint64_t head = h_->head.load(std::memory_order_acquire);
  if (head > tail_ || tail_ - head > kRingData) return true; // write() finds it broken
  if (kRingData - (tail_ - head) < want) return false;
  h_->waits.store(0, std::memory_order_relaxed); // a reader that read 1 already rings anyway
  return true;
}

} // namespace uiwarp::samehost
