// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A connected QP's socket I/O, done with the QP's lock held by whichever thread drives it:
// a thread polling one of its CQs, a thread posting to it, or the progress thread.
// libiwarp says where each received octet goes, so payload is read from the socket
// straight into registered memory; headers and small payloads come through a staging
// buffer, many frames per system call. What is ready to send goes out in one sendmsg.
#include "provider.hpp"
#include "uiwarp/provider_api.hpp"

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

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
// against 65,578 octets per Write drift by 42 octets a Write): in ib_write_bw -s 65536, 1-23%
// of the receiver's reads took 64 KiB twice through a copy. So after a direct read, a staged read
// takes only what is left of the span and kDirectTail more, until a staged read comes back
// full (the stream has small frames again, which a full kStaging read batches).
constexpr std::size_t kDirectRead = 16 << 10;
constexpr std::size_t kDirectTail = 1024;
// How much one drive reads, per driver (Driver in provider.hpp).
constexpr std::size_t kPollBudget = 256 << 10;    // then the poll returns what completed
constexpr std::size_t kReleaseBudget = 256 << 10; // what follows a Send that waited
constexpr std::size_t kProgressBudget = 4 << 20;  // so one connection does not starve others
// Pollers' receive back-off. A poll that finds the socket empty costs a system call (about
// a microsecond here), and a busy poller polls millions of times a second: an RDMA Write
// sender, whose socket never has anything to read, spent most of its time in recvmsg
// saying EAGAIN. A socket that returned data within kEagerNs is read on every poll (a
// ping-pong's answer comes within a round trip); one quiet for longer is tried again after
// a quarter of its quiet time, at most kMaxQuietNs later (the latency added to the first
// message after a pause).
constexpr std::int64_t kEagerNs = 50'000;
constexpr std::int64_t kMaxQuietNs = 20'000;
// The pollers of a parked QP send what waits for room in its full socket, tried again this
// often; the progress thread leaves EPOLLOUT unwatched while they do (Progress::sync), and
// takes it back when the polls stop. A program that streams large Writes and spins on its
// CQ kept the sender's progress thread waking for every EPOLLOUT next to the spinning
// poller and the receiver: three busy threads on two CPUs (64 KiB ib_write_bw went from
// 1206-1530 to 1559-1755 MB/s, 4 KiB from 604-719 to 844-903).
constexpr std::int64_t kFullRetryNs = 5'000;

} // namespace

std::int64_t mono_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void Qp::drive(Driver who) {
  if (!connected()) return;
  // A Send waiting for an SRQ buffer looks again: a post may have come from any thread.
  if (srq && engine->rx_held()) engine->rx_retry();
  bool retry_full = who == Driver::Progress || who == Driver::Writable ||
                    (who == Driver::Poll && !ctx()->progress);
  // What posts held back for this drive (drive_posted) leaves before anything is read: sent
  // at once, it would have gone before a close that this read may find, and a close found
  // first flushes it. ibv_srq_pingpong's last Send was flushed so, 2 runs in 100 on a busy
  // machine: the peer, done, had closed while the Send waited for the poll.
  if (tx_deferred.load(std::memory_order_relaxed)) push_tx(retry_full);
  std::int64_t now = 0;
  switch (who) {
  case Driver::Post: break;
  case Driver::Poll: {
    now = mono_ns();
    if (want_write && parked.load(std::memory_order_relaxed) && now >= full_retry_ns)
      retry_full = true;
    if (pull_rx(kPollBudget)) {
      rx_data_ns = now;
    } else if (const std::int64_t quiet = now - rx_data_ns; quiet > kEagerNs) {
      rx_quiet_until.store(now + std::min(quiet / 4, kMaxQuietNs), std::memory_order_relaxed);
    }
    break;
  }
  case Driver::Release: pull_rx(kReleaseBudget); break;
  case Driver::Writable: break;
  case Driver::Progress:
    if (pull_rx(kProgressBudget)) rx_data_ns = mono_ns();
    // Bytes came (or the socket closed): pollers look at once.
    rx_quiet_until.store(0, std::memory_order_relaxed);
    break;
  }
  if (engine->inbound_reads_queued()) {
    const std::int64_t t = mono_ns();
    reads_ns.store(t, std::memory_order_relaxed);
    ctx()->reads_ns.store(t, std::memory_order_relaxed);
  }
  // A full socket is tried again by the progress thread on EPOLLOUT, or by the pollers of a
  // parked QP every kFullRetryNs (not a failing system call per poll).
  push_tx(retry_full);
  if (who == Driver::Poll && want_write) full_retry_ns = now + kFullRetryNs;
  after_io();
  if (Progress* p = ctx()->progress.get()) p->sync(this);
}

// Posting in a burst. Over TCP with TCP_NODELAY (which every iWARP stack sets: a Read
// Request or a last small message must not wait for an ACK) each sendmsg is a segment of its
// own through the whole TCP receive path: one per 4 KiB message capped a stream at about a
// third of what the same messages reach in 64 KiB segments (tests/bench/tcp_stream.cpp), and
// a 44-octet Read Request cost the responder a recvmsg each. So what a post adds is left for
// the next drive, which sends it with everything else ready in one sendmsg, when that drive
// is sure to come soon:
//  - RDMA Reads while earlier Reads are unanswered: the response that must come is read by
//    someone (a poll, or the progress thread), and each drive ends in push_tx;
//  - any post that follows the previous post of the QP back to back with no poll of the send
//    CQ in between, in a burst that began at most kPollSoonNs after one (the program polls
//    between bursts): its next poll that finds the CQ empty sends the burst (Cq::drive takes
//    such a QP even when its socket is quiet), and the progress thread sends it after
//    kFlushNs (or two posts' transmit time, if longer) if no poll comes (a program that
//    posts two Writes and then spins on memory). A ping-pong polls for each completion
//    between its posts, so its posts always go at once.
// Back to back means sooner than a post that transmits takes (tx_cost_ns, at least
// kBackToBackNs): a program that posts faster than sendmsg returns is held up by the system
// calls, and one that posts slower loses nothing by each post going at once. So the rule
// follows the machine: in the siw guest (TCG emulation) a sendmsg takes 60-200 us and
// perftest posts 2-5 us apart, which a fixed window of 2 us never saw.
// A post with none of these, and any post while the send CQ is armed for an event (the
// program is about to sleep), goes at once: a lone post's latency is unchanged.
namespace {
constexpr std::int64_t kBackToBackNs = 2'000;
constexpr std::int64_t kPollSoonNs = 50'000;
constexpr std::int64_t kFlushNs = 50'000;
// A post's cost counts up to this much (one preempted sendmsg must not widen the window for
// long), averaged over the last eight or so.
constexpr std::int64_t kMaxTxCostNs = 200'000;
} // namespace

void Qp::drive_posted(bool reads_only) {
  Progress* p = ctx()->progress.get();
  const std::int64_t now = mono_ns();
  const bool back_to_back = now - post_end_ns < std::max(kBackToBackNs, tx_cost_ns);
  // No poll of the send CQ since the previous post began (a ping-pong polls for each
  // completion between its posts), and the burst began soon after one (this post may be its
  // second).
  const std::int64_t polled = send_cq()->polled_ns.load(std::memory_order_relaxed);
  const bool in_loop =
      polled <= post_start_ns && (in_burst || polled > post_start_ns - kPollSoonNs);
  bool defer = false, burst = false;
  if (connected() && !peer_closed && engine->state() == iwarp::QpState::Rts &&
      !send_cq()->armed.load(std::memory_order_relaxed)) {
    if (reads_only && engine->reads_outstanding() > 0) {
      defer = true;
    } else if (p && back_to_back && in_loop) {
      defer = burst = true;
      if (!flush_queued) {
        flush_queued = true;
        ref(); // the progress thread's, dropped once it has looked
        p->flush_by(this, now + std::max(kFlushNs, 2 * tx_cost_ns));
      }
    }
  }
  in_burst = burst;
  post_start_ns = now;
  if (defer) {
    tx_deferred.store(true, std::memory_order_relaxed);
    post_end_ns = now; // nothing was sent: the post ends where it began
  } else {
    drive(Driver::Post);
    post_end_ns = mono_ns();
    tx_cost_ns += (std::min(post_end_ns - now, kMaxTxCostNs) - tx_cost_ns) / 8;
  }
}

void Qp::push_tx(bool retry_full) {
  tx_deferred.store(false, std::memory_order_relaxed);
  if (!connected() || peer_closed) return;
  // A full socket is retried by the progress thread on EPOLLOUT, or by a parked QP's pollers
  // now and then (Qp::drive), not by every post or poll: that would be a failing system
  // call each.
  if (want_write && !retry_full) return;
  iovec iov[kMaxIov];
  PushClock clock{this}; // times pushes of large Read Responses (qp_splice.cpp)
  for (;;) {
    // What the pipe holds goes first: it is the stream's next octets (qp_splice.cpp).
    if (tx_piped > 0 && !drain_pipe()) return;
    tx_pieces.clear();
    engine->tx_gather(tx_pieces, kMaxIov, &tx_by_ref);
    if (tx_pieces.empty()) break;
    if (want_splice(clock)) {
      if (const std::size_t n = fill_pipe(); n > 0) {
        engine->tx_advance(n);
        clock.octets += n;
        continue;
      }
    }
    for (std::size_t i = 0; i < tx_pieces.size(); ++i)
      iov[i] = {const_cast<std::byte*>(tx_pieces[i].data()), tx_pieces[i].size()};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = tx_pieces.size();
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      tx_error(errno);
      return;
    }
    want_write = false;
    engine->tx_advance(static_cast<std::size_t>(n));
    clock.octets += static_cast<std::size_t>(n);
  }
  want_write = false;
}

void Qp::tx_error(int err) {
  if (err == EAGAIN) {
    want_write = true;
  } else {
    engine->on_peer_closed(false); // RST or loss (RFC 5044 §8 code 1)
    peer_closed = true;
  }
}

bool Qp::pull_rx(std::size_t budget) {
  if (!connected() || peer_closed) return false;
  bool drained = false, got_any = false;
  for (;;) {
    if (staged_pos < staged_end) {
      // feed() places the staged octets and CRCs them in runs, not per field; it takes
      // fewer than offered when a Send starts waiting for a receive buffer.
      staged_pos +=
          engine->rx_feed(iwarp::ConstBytes(staging.get() + staged_pos, staged_end - staged_pos));
      if (staged_pos < staged_end) break; // held: the rest stays staged
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
    std::size_t stage = after_direct ? std::min(kStaging, dst.size() + kDirectTail) : kStaging;
    iovec iov[2];
    iov[0] = direct ? iovec{dst.data(), dst.size()} : iovec{staging.get(), stage};
    iov[1] = {staging.get(), kDirectTail};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = direct ? 2 : 1;
    ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) {
        engine->on_peer_closed(false); // RST or loss (RFC 5044 §8 code 1)
        peer_closed = true;
      }
      break;
    }
    got_any = true;
    if (n == 0) {
      engine->on_peer_closed(true);
      peer_closed = true;
      break;
    }
    auto got = static_cast<std::size_t>(n);
    budget -= std::min(budget, got);
    drained = got < iov[0].iov_len + (direct ? iov[1].iov_len : 0);
    if (direct)
      after_direct = true;
    else if (!drained)
      after_direct = false;
    std::size_t placed = direct ? std::min(got, dst.size()) : 0;
    if (placed) engine->rx_advance(placed);
    staged_pos = 0;
    staged_end = got - placed;
  }
  if (engine->rx_held()) {
    if (!held_since_ns) {
      held_since_ns = mono_ns();
      report_recv_wait();
    }
  } else {
    held_since_ns = 0;
  }
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
  if (s == iwarp::QpState::Error || s == iwarp::QpState::Terminate) {
    if (state != IBV_QPS_ERR && state != IBV_QPS_RESET) {
      state = IBV_QPS_ERR;
      vqp.qp.state = IBV_QPS_ERR;
      if (!peer_closed || engine->error()->code != iwarp::term::mpa_tcp_closed)
        ctx()->post_async_event(reinterpret_cast<std::uintptr_t>(&vqp.qp), IBV_EVENT_QP_FATAL);
    }
  }
  if (engine->wants_disconnect() && !fin_sent && fd >= 0 && tx_piped == 0) {
    // Graceful close done or Terminate written: FIN (RFC 5040 §6.2.1).
    ::shutdown(fd, SHUT_WR);
    fin_sent = true;
  }
  if (!event_reported && (peer_closed || s == iwarp::QpState::Error) &&
      (s == iwarp::QpState::Error || s == iwarp::QpState::Closed)) {
    event_reported = true;
    bool graceful = peer_closed && engine->error() &&
                    engine->error()->code == iwarp::term::mpa_tcp_closed && engine->error()->remote;
    const char* why = engine->error() ? engine->error()->message.c_str() : "connection closed";
    if (!graceful) report_end();
    if (const ShimOps* sh = shim())
      sh->qp_event(vqp.qp.qp_num, graceful ? QpEvent::Disconnected : QpEvent::Error, why);
  }
  reap();
}

void Qp::reap(bool until_flushed) {
  if (!engine) return;
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
  while (!pending_recv.empty()) {
    iwarp::Completion c = iwarp::Completion::make(
        pending_recv.front().wr_id, iwarp::WcStatus::Flushed, iwarp::WcOpcode::Recv, 0, true);
    recv_cq()->push(to_ibv_wc(c, vqp.qp.qp_num), false);
    pending_recv.pop_front();
  }
  while (!pending_send.empty()) {
    const iwarp::SendWr& w = pending_send.front();
    iwarp::Completion c = iwarp::Completion::make(w.wr_id, iwarp::WcStatus::Flushed,
                                                  iwarp::completion_opcode(w.opcode), 0, false);
    send_cq()->push(to_ibv_wc(c, vqp.qp.qp_num), false);
    pending_send.pop_front();
  }
}

void Qp::detach() {
  if (fd >= 0) {
    if (Progress* p = ctx()->progress.get()) p->remove(this);
    ::close(fd);
  }
  fd = -1;
  close_pipe();
  engine.reset();
  want_write = fin_sent = peer_closed = event_reported = recv_wait_reported = false;
  staged_pos = staged_end = 0;
  held_since_ns = 0;
  if (parked.exchange(false))
    for (Cq* cq : {send_cq(), recv_cq()})
      cq->parked.fetch_sub(1, std::memory_order_relaxed);
}

void Qp::unref() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  detach();
  delete this;
}

} // namespace uiwarp
