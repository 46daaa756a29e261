// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A connection's stream over shared memory. Once both ends of a same-host connection have
// attached each other's tables, each end stops sending its stream over TCP and writes it into
// the peer's ring instead: the ring of the slot the peer opened for the connection, in the
// peer's table (stag_share.hpp). The octets are the same FPDUs, in the same order, so every
// message (Sends, Write with Immediate, Terminate, a Read Request the copy path left to the
// stream) is carried and processed exactly as over TCP, without a system call and without
// waking the target when one of its threads polls. TCP stays open underneath: it carries the
// octets sent before the switch, then one-octet doorbells, and its FIN or RST still ends the
// connection. This file is the protocol over memory the caller hands in, with no system call,
// clock or thread (tests/unit/test_samehost_ring.cpp runs it on heap memory with threads).
//
// One writer (the peer, another process: nothing it writes is trusted) and one reader (the
// slot's owner). Their words, on cache lines of their own:
//   tail   octets the writer has written in all; the octets before it are the reader's to read.
//   head   octets the reader has consumed; the space before it is the writer's again.
//   start  the writer's stream offset of the ring's first octet, + 1 (0: not switched yet). The
//          reader reads TCP up to that offset, then the ring (RFC 5044 §6: one ordered stream).
//   looked when a thread of the reader last looked at the ring by polling (steady clock, ns;
//          0 when withdrawn: the thread is about to sleep on its completion channel); the
//          reader's progress thread looks again by looked + kLookNs. A writer that sees a
//          look that recent needs no doorbell; otherwise it sends one (Dekker: the writer
//          stores tail then loads looked, the reader stores looked then loads tail, all
//          seq_cst, so one of the two sees the other).
//   waits  the writer found the ring full: the reader, having consumed, rings it (the same
//          Dekker pair on waits and head).
//   reads  what the reader can read besides the FPDUs of TCP (kRingFraming bits), set when the
//          slot opens.
//   framing what the writer's FPDUs in the ring use of it, set before start; 0 from a writer
//          that knows none of it (zero-filled words of a version without them).
// Framing kRingNoCrc: the FPDUs from the ring's first octet on leave their CRC field unset and
// unchecked, as with CRC off (RFC 5044 §4.4, MPA-013). The CRC guards octets on a wire; here
// they go from one process's memory to the other's, and a peer that would forge them can forge
// a CRC as well. Without it a Send's payload is copied once into the ring, not into its frame
// first, and no end runs a CRC over it.
#pragma once

#include "stag_share.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace uiwarp::samehost {

// A look by a polling thread this recent spares the writer its doorbell: the reader's progress
// thread looks at the ring no later than this after the last such look.
inline constexpr std::int64_t kLookNs = 1'000'000;
// The writer rings when the last look is older than this (kLookNs less a margin for the
// moments between the two ends' clock reads).
inline constexpr std::int64_t kLookFreshNs = kLookNs / 2;

inline constexpr std::uint64_t kRingNoCrc = 1;
inline constexpr std::uint64_t kRingFraming = kRingNoCrc; // what this version reads and writes

struct RingHeader {
  Word tail, start, waits, framing;
  Word writer_pad[4];
  Word head, looked, reads;
  Word reader_pad[5];
};
static_assert(std::is_standard_layout_v<RingHeader> && sizeof(RingHeader) == 128);
inline constexpr std::size_t kRingData = kRingAreaBytes - kPage; // a power of two
static_assert((kRingData & (kRingData - 1)) == 0);

// The ring of `slot` in a table laid out as `layout` at `base`: header, then data on the next
// page.
RingHeader* ring_header(std::byte* base, const Layout& layout, std::uint32_t slot);
std::byte* ring_data(std::byte* base, const Layout& layout, std::uint32_t slot);

// The reader: the slot's owner, reading what its peer wrote. Not thread-safe: the caller
// serialises (the QP's lock).
class RingReader {
public:
  RingReader() = default;
  RingReader(RingHeader* h, std::byte* data) : h_(h), data_(data) {}
  explicit operator bool() const { return h_ != nullptr; }
  // At the slot's opening for a new connection, before the offer names it: an empty ring.
  void reset();
  // 0 while the writer has not switched; else its stream offset of the ring's first octet + 1.
  std::uint64_t start() const;
  // Once start() is not 0: the kRingFraming bits the writer's FPDUs in the ring use.
  std::uint64_t framing() const;
  // What is readable: up to two spans (the second when the octets wrap the ring's end). False
  // if the writer's tail is impossible (behind head, or more than the ring holds): the peer is
  // broken or hostile, and the caller ends the connection.
  bool peek(std::span<const std::byte> (&out)[2]) const;
  // `n` octets of what peek() showed are processed. True if the writer waits for room: ring it.
  bool consume(std::size_t n);
  // A polling thread looks at `now`: the writer needs no doorbell until kLookFreshNs later.
  // Call before peek() (the Dekker order above).
  void looked(std::int64_t now);
  std::int64_t looked_at() const;

private:
  RingHeader* h_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t head_ = 0; // ours alone: the shared word is its copy for the writer
};

// The writer: this end, writing its stream into the peer's ring. Not thread-safe either.
class RingWriter {
public:
  RingWriter() = default;
  RingWriter(RingHeader* h, std::byte* data) : h_(h), data_(data) {}
  explicit operator bool() const { return h_ != nullptr; }
  // The switch: the ring's first octet is stream octet `offset` (what went over TCP before).
  // Returns the kRingFraming bits the FPDUs written from now on must use: those the reader
  // reads.
  std::uint64_t start(std::uint64_t offset);
  // Copies as much of `pieces` as fits, in order: the octets written (0: full, or the reader's
  // head is impossible, see broken()).
  std::size_t write(std::span<const std::span<const std::byte>> pieces);
  // After a write: whether the reader must be rung (no thread of it looked recently), `now`
  // read after the write.
  bool needs_doorbell(std::int64_t now) const;
  // The ring was full: asks the reader to ring back once it consumed. False if room came
  // meanwhile (write again now).
  bool wait_for_room();
  // After wait_for_room, a look by a thread of ours (one load of the reader's head): true if
  // `want` octets are free again (or the head is impossible: write() says so). The request is
  // withdrawn then, so that a reader that has not yet seen it spares its doorbell; the next
  // write makes a new one if the ring fills again.
  bool room_again(std::size_t want);
  // The reader's head was impossible (ahead of tail, or behind it by more than the ring): a
  // broken or hostile peer.
  bool broken() const { return broken_; }
  std::uint64_t written() const { return tail_; }

private:
  RingHeader* h_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t tail_ = 0;
  bool broken_ = false;
};

} // namespace uiwarp::samehost
