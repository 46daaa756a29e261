// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A connected QP's socket I/O, done with the QP's lock held by whichever thread drives it:
// a thread polling one of its CQs, a thread posting to it, or the progress thread.
// libiwarp says where each received octet goes, so payload is read from the socket
// straight into registered memory; headers and small payloads come through a staging
// buffer, many frames per system call. What is ready to send goes out in one sendmsg.
#include "iwarp/dma.hpp"
#include "provider.hpp"
#include "uiwarp/provider_api.hpp"

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <utility>

namespace uiwarp {

namespace {

// Spans at least this large are read straight into place; smaller ones (headers, pad,
// CRC, payloads of small messages) come through the staging buffer, up to kStaging
// octets (many frames) per system call: copying a few KiB costs less than a system call
// each. A direct read stages only kDirectTail octets after its span (the CRC and the next
// header), so the next large payload is read in place as well.
// In a stream of large frames a read that stops short can leave less than kDirectRead of a
// payload, or a frame's tail in a short frame (a 64 KiB Write is a 64,754-octet and a
// 782-octet FPDU). A full kStaging read from there takes most of the next large payload
// through the staging buffer, and the next read starts inside a payload again (64 KiB reads
// against 65,578 octets per Write drift by 42 octets a Write), and the receiver copied many
// payloads twice. So after a direct read, a staged read
// takes only what is left of the span and kDirectTail more, until a staged read comes back
// full (the stream has small frames again, which a full kStaging read batches).
constexpr std::size_t kDirectRead = 16 << 10;
constexpr std::size_t kDirectTail = 1024;
} // namespace

std::int64_t mono_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void Qp::drive(Driver who, drive::Ns now) {
  if (!connected()) return;
  // A responder on the same-host path takes the initiator's answer as soon as it is there,
  // so that both streams can move to the ring (qp_ring.cpp).
  if (same_host.state == SameHost::State::Waiting) same_host_finish();
  // A Send waiting for an SRQ buffer looks again: a post may have come from any thread.
  retry_srq_hold(now);
  const bool has_progress = ctx()->progress() != nullptr;
  bool retry_full = policy.retry_full(who, conn.want_write, has_progress, now);
  // What posts held back for this drive (drive_posted) leaves before anything is read: sent
  // at once, it would have gone before a close that this read may find, and a close found
  // first flushes it (ibv_srq_pingpong's last Send, when the peer, done, had closed while the
  // Send waited for the poll; test_close_order.cpp).
  policy.on_drive(who);
  if (policy.deferred()) push_tx(retry_full);
  switch (who) {
  case Driver::Poll: policy.on_read(who, pull_rx(who, drive::tuning::kPollBudget, now), now); break;
  case Driver::Release: pull_rx(who, drive::tuning::kReleaseBudget, now); break;
  case Driver::Progress:
    policy.on_read(who, pull_rx(who, drive::tuning::kProgressBudget, now), now);
    break;
  case Driver::Post:
  case Driver::Writable:
  case Driver::Arm: break;
  }
  // Our ring in the peer's table, full at the last write, may have room again: the peer's
  // ring-back among the doorbells this drive read, or its head moved by a quarter of the ring.
  const bool rung = std::exchange(same_host.rung, false);
  if (rung || (conn.want_write && same_host.tx_ring && same_host.outbound &&
               same_host.outbound.room_again(samehost::kRingData / 4)))
    retry_full = policy.retry_full(who, conn.want_write, has_progress, now, true);
  if (engine->inbound_reads_queued()) {
    policy.on_reads_queued(now);
    ctx()->reads_ns.store(now, std::memory_order_relaxed);
  }
  push_tx(retry_full);
  if (conn.want_write) policy.on_full(who, now);
  after_io();
  if (Progress* p = ctx()->progress()) p->sync(this, now);
}

bool Qp::retry_srq_hold(drive::Ns now) {
  if (!srq || !engine || !engine->rx_held()) return false;
  engine->rx_retry();
  if (engine->rx_held()) return false;
  policy.on_held(false, now);
  return true;
}

void Qp::drive_posted(bool reads_only) {
  Progress* p = ctx()->progress();
  const drive::Ns now = mono_ns();
  Cq* scq = send_cq();
  drive::QpDrive::Post post;
  post.reads_only = reads_only;
  post.reads_outstanding = reads_only && connected() && engine->reads_outstanding() > 0;
  post.can_hold = connected() && !conn.peer_closed && engine->state() == iwarp::QpState::Rts &&
                  !scq->armed.load(std::memory_order_relaxed);
  post.has_progress = p != nullptr;
  post.send_cq_polled = scq->policy.polled_at();
  switch (policy.on_post(post, now)) {
  case drive::QpDrive::PostAction::HoldAndSchedule: p->schedule(this, now); break;
  case drive::QpDrive::PostAction::Hold: break;
  case drive::QpDrive::PostAction::Send:
    drive(Driver::Post, now);
    policy.on_post_sent(now, mono_ns());
    break;
  }
}

void Qp::push_tx(bool retry_full) {
  policy.on_transmit();
  if (!connected() || conn.peer_closed) return;
  // The peer waits for room in our ring, which a read of it made (qp_ring.cpp).
  if (same_host.ring_back && same_host.tx_ring) {
    same_host.ring_back = false;
    doorbell();
  }
  // A full socket is retried by the progress thread on EPOLLOUT, or by a parked QP's pollers
  // now and then (Qp::drive), not by every post or poll: that would be a failing system
  // call each. A full ring is retried when the peer rings back, by the drive that read it.
  if (conn.want_write && !retry_full) return;
  if (ring_tx_ready()) return push_ring();
  iovec iov[kMaxIov];
  PushClock clock{this}; // times pushes of large Read Responses (qp_splice.cpp)
  for (;;) {
    // What the pipe holds goes first: it is the stream's next octets (qp_splice.cpp).
    if (tx.piped > 0 && !drain_pipe()) return;
    tx.pieces.clear();
    engine->tx_gather(tx.pieces, kMaxIov, &tx.by_ref);
    if (tx.pieces.empty()) break;
    if (want_splice(clock)) {
      if (const std::size_t n = fill_pipe(); n > 0) {
        engine->tx_advance(n);
        clock.octets += n;
        continue;
      }
    }
    for (std::size_t i = 0; i < tx.pieces.size(); ++i)
      iov[i] = {const_cast<std::byte*>(tx.pieces[i].data()), tx.pieces[i].size()};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = tx.pieces.size();
    ssize_t n;
    {
      const iwarp::DmaScope dma; // the kernel reads the program's sources
      n = ::sendmsg(conn.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      tx_error(errno);
      return;
    }
    conn.want_write = false;
    engine->tx_advance(static_cast<std::size_t>(n));
    clock.octets += static_cast<std::size_t>(n);
  }
  conn.want_write = false;
  // The peer waits for room in our ring, and our stream was still on TCP, where a doorbell
  // would be a stream octet: TCP holds all of it now, so switch and ring (push_ring).
  if (same_host.ring_back && ring_tx_ready()) push_ring();
}

void Qp::tx_error(int err) {
  if (err == EAGAIN) {
    conn.want_write = true;
  } else {
    engine->on_peer_closed(false); // RST or loss (RFC 5044 §8 code 1)
    conn.peer_closed = true;
  }
}

bool Qp::pull_rx(Driver who, std::size_t budget, drive::Ns now) {
  if (!connected() || conn.peer_closed) return false;
  if (same_host.rx_ring) return pull_ring(who, budget, now);
  bool drained = false, got_any = false;
  for (;;) {
    // Every octet the peer sent over TCP before its switch is processed: the ring's are next.
    if (rx.pos == rx.end && ring_rx_ready()) return pull_ring(who, budget, now) || got_any;
    if (rx.pos < rx.end) {
      // feed() places the staged octets and CRCs them in runs, not per field; it takes
      // fewer than offered when a Send starts waiting for a receive buffer.
      rx.pos += engine->rx_feed(iwarp::ConstBytes(rx.staging.get() + rx.pos, rx.end - rx.pos));
      if (rx.pos < rx.end) break; // held: the rest stays staged
      continue;
    }
    iwarp::MutBytes dst = engine->rx_next();
    // Staged octets are used up before the budget counts: epoll cannot see them.
    // After a short read the socket is empty; level-triggered epoll calls again,
    // so the extra recv() that would only say EAGAIN is skipped.
    if (dst.empty() || budget == 0 || drained) break;
    // A large span is read straight into place; whatever follows it (CRC, the
    // next header) lands in the staging buffer in the same system call.
    bool direct = dst.size() >= kDirectRead;
    std::size_t stage = rx.after_direct ? std::min(kStaging, dst.size() + kDirectTail) : kStaging;
    iovec iov[2];
    iov[0] = direct ? iovec{dst.data(), dst.size()} : iovec{rx.staging.get(), stage};
    iov[1] = {rx.staging.get(), kDirectTail};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = direct ? 2 : 1;
    ssize_t n;
    {
      const iwarp::DmaScope dma; // the kernel places into the program's memory
      n = ::recvmsg(conn.fd, &msg, MSG_DONTWAIT);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) {
        // RST or loss (RFC 5044 §8 code 1); a peer that switched to the ring wrote there
        // before it: read it first (pull_ring).
        if (ring_rx_ready()) {
          same_host.rx_eof = same_host.rx_reset = true;
          return pull_ring(who, budget, now) || got_any;
        }
        engine->on_peer_closed(false);
        conn.peer_closed = true;
      }
      break;
    }
    got_any = true;
    if (n == 0) {
      // A peer that switched to the ring wrote there before its FIN: read it first.
      if (ring_rx_ready()) {
        same_host.rx_eof = true;
        return pull_ring(who, budget, now) || got_any;
      }
      engine->on_peer_closed(true);
      conn.peer_closed = true;
      break;
    }
    auto got = static_cast<std::size_t>(n);
    budget -= std::min(budget, got);
    drained = got < iov[0].iov_len + (direct ? iov[1].iov_len : 0);
    if (direct)
      rx.after_direct = true;
    else if (!drained)
      rx.after_direct = false;
    const std::size_t stream = tcp_stream_octets(got); // past the peer's switch: doorbells
    if (conn.peer_closed) break;
    std::size_t placed = direct ? std::min(stream, dst.size()) : 0;
    if (placed) engine->rx_advance(placed);
    rx.pos = 0;
    rx.end = stream - placed;
  }
  if (policy.on_held(engine->rx_held(), now)) report_recv_wait();
  return got_any;
}

void Qp::after_io() {
  if (!engine) return;
  // What completed before the connection ended, then its CM event, then the flushed rest: the
  // kernel's order (siw_cm_work_handler upcalls IW_CM_EVENT_CLOSE before siw_qp_llp_close
  // flushes), so a program released by its flush completions (rping's main joins its CQ thread)
  // finds DISCONNECTED already delivered to its CM thread.
  reap(true);
  if (srq) {
    // One event per arming (IB semantics), whichever QP notices first.
    std::uint32_t lim = srq->limit.load(std::memory_order_relaxed);
    if (lim && srq->q->size() < lim && srq->limit.compare_exchange_strong(lim, 0))
      ctx()->post_async_event(reinterpret_cast<std::uintptr_t>(&srq->ibv),
                              IBV_EVENT_SRQ_LIMIT_REACHED);
  }
  iwarp::QpState s = engine->state();
  // The same-host peer copies past what we sent only once we have processed it.
  if (same_host.inbound_open)
    ctx()->same_host.set_consumed(same_host.inbound_slot, engine->rx_ended());
  // Our own close (Closing, then Closed) ends our sending only: until the peer's end, what it
  // wrote into our ring is read and its Writes are placed, as over TCP (RFC 5040 §6.2.1), and
  // what we posted before the close still goes through its ring.
  const bool over =
      s == iwarp::QpState::Error || s == iwarp::QpState::Terminate || conn.peer_closed;
  if (over && same_host.inbound_open) same_host_end("the connection ended");
  bool entered_err = false;
  if (s == iwarp::QpState::Error || s == iwarp::QpState::Terminate) {
    if (state != IBV_QPS_ERR && state != IBV_QPS_RESET) {
      set_state(IBV_QPS_ERR);
      entered_err = true;
      // A Terminate (either way) or a local error is fatal; the end of the TCP connection (FIN
      // or RST) is not, nor the program's own move to ERR (Qp::flush): mlx5 and rxe raise
      // nothing for a consumer's transition.
      const auto& e = engine->error();
      if (!(e && e->consumer) && !(conn.peer_closed && e && e->code == iwarp::term::mpa_tcp_closed))
        ctx()->post_async_event(reinterpret_cast<std::uintptr_t>(&vqp.qp), IBV_EVENT_QP_FATAL);
    }
  }
  if (engine->wants_disconnect() && !conn.fin_sent && conn.fd >= 0 && tx.piped == 0) {
    // Graceful close done or Terminate written: FIN (RFC 5040 §6.2.1).
    ::shutdown(conn.fd, SHUT_WR);
    conn.fin_sent = true;
  }
  if (!conn.event_reported && (conn.peer_closed || s == iwarp::QpState::Error) &&
      (s == iwarp::QpState::Error || s == iwarp::QpState::Closed)) {
    conn.event_reported = true;
    bool graceful = conn.peer_closed && engine->error() &&
                    engine->error()->code == iwarp::term::mpa_tcp_closed && engine->error()->remote;
    const char* why = engine->error() ? engine->error()->message.c_str() : "connection closed";
    if (!graceful) report_end();
    if (const ShimOps* sh = shim())
      sh->qp_event(vqp.qp.qp_num, graceful ? QpEvent::Disconnected : QpEvent::Error, why,
                   policy.counters().describe().c_str());
  }
  reap();
  if (entered_err) last_wqe_reached(); // after the flushed completions
}

void Qp::last_wqe_reached() {
  // A QP of an SRQ in ERR whose last completion is in its CQ: IBA's Last WQE Reached, which
  // ib_drain_qp (__ib_drain_srq in the kernel's verbs.c) and programs that free such a QP only
  // after it wait for. rxe (flush_recv_queue) and cxgb4 (__flush_qp) raise it at every entry
  // into ERR, the consumer's modify to ERR included.
  if (srq)
    ctx()->post_async_event(reinterpret_cast<std::uintptr_t>(&vqp.qp),
                            IBV_EVENT_QP_LAST_WQE_REACHED);
}

void Qp::reap(bool until_flushed) {
  if (!engine) return;
  // A Send with Invalidate, Local Invalidate or Bind the engine just processed withdrew its
  // STag: a same-host peer's copy through it ends before the completion says it is invalid
  // (RFC 5040 §5.3). Only this QP waits (the table's lock and Context::mu are free).
  if (Context* c = ctx(); c->same_host.unsettled()) c->same_host.settle();
  ibv_qp& q = vqp.qp;
  for (const iwarp::Completion* next = engine->peek(); next; next = engine->peek()) {
    if (until_flushed && next->status == iwarp::WcStatus::Flushed) break;
    auto c = engine->poll();
    Cq* cq = c->recv ? recv_cq() : send_cq();
    cq->push(to_ibv_wc(*c, q.qp_num), c->solicited);
  }
}

void Qp::flush() {
  if (engine) {
    engine->flush();
    reap();
  }
  for (; !early.recv.empty(); early.recv.pop_front())
    flush_completion(early.recv.front());
  for (; !early.send.empty(); early.send.pop_front())
    flush_completion(early.send.front());
}

void Qp::flush_completion(const iwarp::RecvWr& w) {
  const auto c =
      iwarp::Completion::make(w.wr_id, iwarp::WcStatus::Flushed, iwarp::WcOpcode::Recv, 0, true);
  recv_cq()->push(to_ibv_wc(c, vqp.qp.qp_num), false);
}

void Qp::flush_completion(const iwarp::SendWr& w) {
  const auto c = iwarp::Completion::make(w.wr_id, iwarp::WcStatus::Flushed,
                                         iwarp::completion_opcode(w.opcode), 0, false);
  send_cq()->push(to_ibv_wc(c, vqp.qp.qp_num), false);
}

void Qp::detach() {
  const bool doorbells = same_host.rx_ring.load(std::memory_order_relaxed);
  same_host_end(nullptr);
  if (conn.fd >= 0) {
    if (Progress* p = ctx()->progress()) p->remove(this);
    // Doorbells of the ring left unread would make the close a reset (RFC 793 §3.5, Linux's
    // tcp_close), which ends the peer's side before it has read what we wrote last: they
    // carry nothing, so they go first and the close is a FIN.
    if (doorbells) {
      bool got = false;
      read_doorbells(got);
    }
    ::close(conn.fd);
  }
  conn.fd = -1;
  close_pipe();
  engine.reset();
  conn.want_write = conn.fin_sent = conn.peer_closed = conn.event_reported =
      conn.recv_wait_reported = false;
  rx.pos = rx.end = 0;
  policy.reset_connection();
  if (policy.parked()) {
    policy.set_parked(false);
    for (Cq* cq : {send_cq(), recv_cq()})
      cq->parked.fetch_sub(1, std::memory_order_relaxed);
  }
}

void Qp::unref() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  detach();
  ctx()->add_drive_counters(policy.counters());
  delete this;
}

} // namespace uiwarp
