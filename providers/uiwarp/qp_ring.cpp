// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A same-host connection's stream through shared memory (samehost/stream_ring.hpp): once both
// ends are on the same-host path, each writes its FPDUs into the ring of its slot in the
// peer's table instead of its socket, and reads the peer's from the ring of the peer's slot in
// its own. The engine sees the same stream either way, so Sends, Write with Immediate,
// Terminates and whatever else the copy path leaves to the stream are carried and completed
// exactly as over TCP (RFC 5040 §5.5 order included: one stream, one order), with no system
// call per message and, while a thread of the target polls, no wake-up. With `mu` held.
//
//   switch (ring_tx_ready): when every octet of ours is in the socket, the ring's first octet
//     is our next stream octet; the peer reads TCP up to there, then the ring (ring_rx_ready,
//     tcp_stream_octets). From there on the FPDUs carry no CRC where the reader takes that
//     (samehost::kRingNoCrc), so a Send's payload is copied once, into the ring. Only once the peer
//     attached our table too (its probe in our slot): then it can ring us back when we wait for
//     room.
//   doorbells: one octet on the socket, which after the switch carries nothing else. A writer
//     rings when no poll of the reader looked at the ring within samehost::kLookFreshNs (the
//     reader's progress thread looks by the last look + kLookNs: drive.hpp's ring_look); a
//     reader rings a writer that waits for room. A drive that took the doorbells and stopped at
//     its budget with octets left has the progress thread read on (QpDrive::on_ring_left): the
//     ring, unlike a socket, stays silent about what is left.
//   the end: TCP still says it (FIN, RST), read by the progress thread; after either, what the
//     ring holds is processed first, as the octets before a FIN are: the peer wrote them before
//     it closed (a close with doorbells unread is a reset, which a closing end avoids by reading
//     them first: detach).
#include "iwarp/dma.hpp"
#include "provider.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/log.hpp"
#include "uiwarp/provider_api.hpp"

#include <cerrno>
#include <sys/socket.h>

namespace uiwarp {

static_assert(drive::tuning::kRingLookNs == samehost::kLookNs);

bool Qp::ring_tx_ready() {
  if (same_host.tx_ring) return true;
  if (same_host.state != SameHost::State::On || !same_host.outbound || !same_host.inbound_open)
    return false;
  // Not with UIWARP_SAME_HOST=copy: a peer with it still reads a ring this end writes.
  // (The environment is a snapshot of the process's start: read once, not at every push.)
  static const bool wanted = Env::get().same_host_ring();
  if (!wanted) return false;
  if (!same_host.peer_on) {
    // The responder attached ours before it went On; the initiator learns it from the
    // responder's probe in our slot (one load).
    if (!ctx()->same_host.answer(same_host.inbound_slot).probe) return false;
    same_host.peer_on = true;
  }
  // Everything before the switch must have left over TCP.
  if (engine->tx_pending() || tx.piped > 0 || conn.want_write) return false;
  if (same_host.forks != samehost::fork_generation())
    return false; // the peer's mapping is the parent's
  samehost::Reader& r = same_host.peer->reader();
  if (r.hold(same_host.outbound_slot) != samehost::Refusal::None) return false;
  const bool ours = r.epoch(same_host.outbound_slot) == same_host.owner.epoch;
  if (ours && (same_host.outbound.start(engine->tx_framed()) & samehost::kRingNoCrc))
    engine->tx_crc_off(); // the reader checks no CRC in the ring (stream_ring.hpp)
  r.unpin(same_host.outbound_slot);
  if (!ours) return false;
  same_host.tx_ring = true;
  report_same_host_path(this);
  return true;
}

// The peer's end is over (it closed its slot, TCP says so next), or ours is: what leaves now
// goes where octets sent into a socket its peer has closed go, nowhere, and is sent as far as
// this end can tell, as over TCP (a Write posted before the close was seen completes).
void Qp::ring_discard() {
  while (const std::size_t total = ring_gather())
    engine->tx_advance(total);
}

std::size_t Qp::ring_gather() {
  tx.pieces.clear();
  engine->tx_gather(tx.pieces, kMaxIov, &tx.by_ref);
  std::size_t total = 0;
  for (const auto& p : tx.pieces)
    total += p.size();
  return total;
}

// A child of fork() posting on a connection of its parent whose stream is in the rings: the
// peer's ring is not mapped here (MADV_DONTFORK) and the peer reads no stream from TCP, so
// nothing of the child's can reach it. The connection ends in the child, loudly; the parent's
// (its rings, its socket) is left as it was.
void Qp::ring_in_child() {
  log::error("same-host", endpoints() +
                              ": posted in a child of the process that connected, whose stream is "
                              "in shared memory: the connection ends in this process");
  engine->on_peer_closed(false);
  conn.peer_closed = true;
}

void Qp::push_ring() {
  if (same_host.forks != samehost::fork_generation()) return ring_in_child();
  if (same_host.tx_closed || !same_host.peer) return ring_discard();
  samehost::Reader& r = same_host.peer->reader();
  bool wrote = false;
  conn.want_write = false;
  while (const std::size_t total = ring_gather()) {
    // Held like a pin: the peer's close of the slot waits for the write, and a slot reopened
    // for another connection is not written.
    if (r.hold(same_host.outbound_slot) != samehost::Refusal::None) {
      same_host.tx_closed = true;
      return ring_discard();
    }
    std::size_t n = 0;
    if (r.epoch(same_host.outbound_slot) == same_host.owner.epoch) {
      const iwarp::DmaScope dma; // reads the program's sources
      n = same_host.outbound.write(tx.pieces);
    } else {
      same_host.tx_closed = true;
    }
    r.unpin(same_host.outbound_slot);
    if (n) {
      engine->tx_advance(n);
      policy.on_ring_written(n);
      wrote = true;
    }
    if (same_host.tx_closed) return ring_discard();
    if (same_host.outbound.broken()) {
      ring_broken("a read position past what was written");
      return;
    }
    if (n < total && same_host.outbound.wait_for_room()) {
      conn.want_write = true; // the peer rings back; pollers retry meanwhile
      break;
    }
  }
  // A ring-back owed from before the switch goes too (push_tx serves it only once switched):
  // a writer waiting for room, whose poller sleeps, has nothing else to wake it.
  const bool owed = std::exchange(same_host.ring_back, false);
  if (owed || (wrote && same_host.outbound.needs_doorbell(mono_ns()))) doorbell();
}

Qp::SocketEnd Qp::read_doorbells(bool& got) {
  char buf[256];
  for (;;) {
    const ssize_t n = ::recv(conn.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      got = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return SocketEnd::None;
    got = true;
    return n == 0 ? SocketEnd::Fin : SocketEnd::Reset; // RST or loss (RFC 5044 §8 code 1)
  }
}

void Qp::doorbell() {
  const char one = 0;
  // Full (EAGAIN): the peer has doorbells to read already. Any other failure: the connection
  // is going, and the next read says so.
  [[maybe_unused]] const ssize_t n = ::send(conn.fd, &one, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool Qp::ring_rx_ready() {
  if (same_host.rx_ring) return true;
  if (!same_host.inbound || !same_host.inbound_open ||
      same_host.forks != samehost::fork_generation())
    return false;
  const std::uint64_t start = same_host.inbound.start();
  if (start == 0 || start - 1 != same_host.rx_tcp) return false;
  same_host.rx_ring = true;
  if (same_host.inbound.framing() & samehost::kRingNoCrc) engine->rx_crc_off_from(start - 1);
  policy.set_ring();
  // A responder still waiting for the answer has it now: the initiator wrote it first.
  if (same_host.state == SameHost::State::Waiting) same_host_finish();
  return true;
}

bool Qp::ring_unlook() {
  if (!same_host.rx_ring || !same_host.inbound) return false;
  // A thread that arms its CQ goes to sleep on the channel: a poll's look a moment ago no
  // longer means anyone looks, and a writer that trusted it would leave the sleeper to the
  // progress thread's next look (kLookNs: rping's ping-pong at a millisecond a message).
  // Withdrawn, then the ring peeked: the doorbell rule's order (stream_ring.hpp), so a write
  // that saw the look still fresh is found here.
  same_host.inbound.looked(0);
  std::span<const std::byte> s[2];
  return !same_host.inbound.peek(s) || !s[0].empty();
}

std::size_t Qp::tcp_stream_octets(std::size_t got) {
  const std::uint64_t start =
      same_host.inbound && same_host.inbound_open ? same_host.inbound.start() : 0;
  std::size_t stream = got;
  if (start != 0) {
    if (start - 1 < same_host.rx_tcp) {
      ring_broken("a switch to the ring before what TCP already brought");
      return 0;
    }
    stream = static_cast<std::size_t>(std::min<std::uint64_t>(got, start - 1 - same_host.rx_tcp));
  }
  same_host.rx_tcp += stream;
  return stream;
}

bool Qp::pull_ring(Driver who, std::size_t budget, drive::Ns now) {
  if (same_host.forks != samehost::fork_generation()) {
    ring_in_child(); // the socket's doorbells and end are the parent's to read
    return true;
  }
  bool got_any = false;
  // The socket: doorbells, or the end. Not by a poller (a look must cost no system call: the
  // progress thread watches the socket) nor while a Send waits for a buffer (as over TCP).
  if (who != Driver::Poll && !same_host.rx_eof && !engine->rx_held()) {
    // A reset too: what the peer wrote into the ring it wrote before that, so the ring is read
    // first, as after a FIN (a program that exits with doorbells unread resets the connection
    // its last message went through).
    if (const SocketEnd end = read_doorbells(got_any); end != SocketEnd::None) {
      same_host.rx_eof = true;
      same_host.rx_reset = end == SocketEnd::Reset;
    }
    same_host.rung = got_any; // the peer's ring-back may be among them (Qp::drive retries)
  }
  if (!same_host.inbound) { // the path ended here: only the socket's end matters now
    if (same_host.rx_eof) {
      engine->on_peer_closed(!same_host.rx_reset);
      conn.peer_closed = true;
    }
    return got_any;
  }
  if (who == Driver::Poll) {
    same_host.inbound.looked(now); // before the peek: the doorbell rule's order (stream_ring.hpp)
    policy.on_ring_look(now);
  }
  bool empty = false;
  while (budget > 0) {
    std::span<const std::byte> s[2];
    if (!same_host.inbound.peek(s)) {
      ring_broken("a write position past the ring");
      return true;
    }
    empty = s[0].empty();
    if (empty) break;
    std::size_t fed = 0;
    bool held = false;
    for (const auto& span : s) {
      if (span.empty()) break;
      const auto take = span.first(std::min(span.size(), budget - fed));
      const std::size_t k = engine->rx_feed(take); // fewer: a Send waits for a buffer
      fed += k;
      if (k < take.size() || fed == budget) {
        held = k < take.size();
        break;
      }
    }
    if (fed == 0) break;
    got_any = true;
    if (same_host.inbound.consume(fed)) same_host.ring_back = true;
    budget -= fed;
    if (held) break;
  }
  // Stopped at the budget: what is left was rung for already, and this drive took the
  // doorbells (a poller's look brings the progress thread by itself).
  if (budget == 0 && who != Driver::Poll) {
    std::span<const std::byte> s[2];
    if (same_host.inbound.peek(s) && !s[0].empty()) policy.on_ring_left();
  }
  if (same_host.rx_eof && empty) {
    // What was posted before the close was seen leaves as it would into a socket whose peer
    // sent its FIN (TCP takes it, then the peer's close drops it): it completes, not flushed.
    if (same_host.tx_ring) ring_discard();
    engine->on_peer_closed(!same_host.rx_reset); // a reset stays one (RFC 5044 §8 code 1)
    conn.peer_closed = true;
  }
  if (policy.on_held(engine->rx_held(), now)) report_recv_wait();
  return got_any;
}

void Qp::ring_broken(const char* what) {
  log::error("same-host", endpoints() + ": the peer's stream ring is broken (" + what +
                              "): the connection ends");
  engine->on_peer_closed(false);
  conn.peer_closed = true;
  if (conn.fd >= 0) ::shutdown(conn.fd, SHUT_RDWR); // the peer learns it as from a reset
}

} // namespace uiwarp
