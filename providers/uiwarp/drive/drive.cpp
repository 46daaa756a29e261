// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The drive policy (drive.hpp): decisions only; the callers do the I/O and read the clock.
#include "drive.hpp"

#include "same_host_gate.hpp"

#include <algorithm>

namespace uiwarp::drive {

using namespace tuning;

const char* name(Driver d) {
  static constexpr const char* kNames[] = {"post",     "poll",     "release",
                                           "writable", "progress", "arm"};
  static_assert(std::size(kNames) == kDrivers);
  return kNames[static_cast<std::size_t>(d)];
}

Counters& Counters::operator+=(const Counters& o) {
  posts_sent += o.posts_sent;
  posts_held += o.posts_held;
  reads_held += o.reads_held;
  deadlines += o.deadlines;
  for (std::size_t i = 0; i < kDrivers; ++i)
    held_sent_by[i] += o.held_sent_by[i];
  quiet += o.quiet;
  full += o.full;
  parks += o.parks;
  unparks += o.unparks;
  adopted += o.adopted;
  yields += o.yields;
  copied += o.copied;
  spliced += o.spliced;
  path_changes += o.path_changes;
  same_host += o.same_host;
  ring_octets += o.ring_octets;
  for (std::size_t i = 0; i < same_host_tcp.size(); ++i)
    same_host_tcp[i] += o.same_host_tcp[i];
  return *this;
}

std::string Counters::describe() const {
  auto n = [](std::uint64_t v) { return std::to_string(v); };
  std::string by;
  for (std::size_t i = 0; i < kDrivers; ++i)
    if (held_sent_by[i])
      by += std::string(by.empty() ? "" : ", ") + name(static_cast<Driver>(i)) + " " +
            n(held_sent_by[i]);
  std::uint64_t tcp = 0;
  std::string why;
  for (std::size_t i = 0; i < same_host_tcp.size(); ++i) {
    tcp += same_host_tcp[i];
    if (same_host_tcp[i])
      why += std::string(why.empty() ? "" : ", ") + name(static_cast<TcpReason>(i)) + " " +
             n(same_host_tcp[i]);
  }
  return "posts " + n(posts_sent) + " sent at once, " + n(posts_held) + " held" +
         (by.empty() ? "" : " (sent with a drive by " + by + ")") + ", Reads held " +
         n(reads_held) + ", deadlines " + n(deadlines) + "; quiet back-offs " + n(quiet) +
         ", full socket " + n(full) + "; parks " + n(parks) + ", unparks " + n(unparks) +
         ", adopted drives " + n(adopted) + ", yields " + n(yields) + "; Read Responses copied " +
         n(copied) + ", spliced " + n(spliced) + ", path changes " + n(path_changes) +
         (same_host || tcp
              ? "; same-host Writes and Reads " + n(same_host) + ", left to the stream " + n(tcp) +
                    (why.empty() ? "" : " (" + why + ")")
              : "") +
         (ring_octets ? "; stream through shared memory " + n(ring_octets) + " octets" : "");
}

// ---- posts ----
//
// Over TCP with TCP_NODELAY (which every iWARP stack sets: a Read Request or a last small
// message must not wait for an ACK) each sendmsg is a segment of its own through the whole
// receive path, so what a post adds is left for the next drive, which sends it with everything
// else ready in one sendmsg, when that drive is sure to come soon:
//  - RDMA Reads while earlier Reads are unanswered: the response that must come is read by
//    someone (a poll, or the progress thread), and each drive ends in a transmit;
//  - a post that follows the previous one back to back with no poll of the send CQ between, in
//    a burst that began at most kPollSoonNs after one (the program polls between bursts): its
//    next empty poll sends the burst, and the progress thread does at the deadline
//    (kFlushNs, or two posts' transmit time if longer) if no poll comes. A ping-pong polls for
//    each completion between its posts, so its posts always go at once.
// Back to back means sooner than a post that transmits takes (at least kBackToBackNs), so the
// rule follows the machine: under emulation a sendmsg takes far longer than a program's gap
// between posts (docs/performance.md).
// Nothing is held while the send CQ is armed: the program is about to sleep.
QpDrive::PostAction QpDrive::on_post(const Post& p, Ns now) {
  const bool back_to_back = now - post_end_ < std::max(kBackToBackNs, tx_cost_);
  const bool in_loop = p.send_cq_polled <= post_start_ &&
                       (in_burst_ || p.send_cq_polled > post_start_ - kPollSoonNs);
  PostAction a = PostAction::Send;
  bool burst = false;
  if (p.can_hold) {
    if (p.reads_only && p.reads_outstanding) {
      a = PostAction::Hold;
      ++c_.reads_held;
    } else if (p.has_progress && back_to_back && in_loop) {
      burst = true;
      a = PostAction::Hold;
      ++c_.posts_held;
      if (!flush_at_) {
        flush_at_ = now + std::max(kFlushNs, 2 * tx_cost_);
        a = PostAction::HoldAndSchedule;
      }
    }
  }
  in_burst_ = burst;
  post_start_ = now;
  if (a == PostAction::Send) {
    ++c_.posts_sent;
  } else {
    deferred_.store(true, std::memory_order_relaxed);
    post_end_ = now; // nothing was sent: the post ends where it began
  }
  return a;
}

bool QpDrive::copy_now(std::size_t octets, Ns now, Ns send_cq_polled, bool ring_write) const {
  if (octets >= (ring_write ? kRingCopyAlwaysOctets : kCopyAlwaysOctets)) return true;
  const bool back_to_back = now - post_end_ < kBackToBackNs;
  const bool in_loop =
      send_cq_polled <= post_start_ && (in_burst_ || send_cq_polled > post_start_ - kPollSoonNs);
  return !(back_to_back && in_loop);
}

void QpDrive::on_copied(Ns start, Ns end) {
  in_burst_ = false;
  post_start_ = start;
  post_end_ = end;
}

void QpDrive::on_post_sent(Ns start, Ns end) {
  post_end_ = end;
  tx_cost_ += (std::min(end - start, kMaxTxCostNs) - tx_cost_) / 8; // about the last eight
}

void QpDrive::on_drive(Driver who) {
  if (deferred()) ++c_.held_sent_by[static_cast<std::size_t>(who)];
}

// ---- receiving ----
//
// A poll that finds the socket empty costs a system call, and a busy poller polls millions of
// times a second (an RDMA Write sender's socket never has anything to read). A socket that
// returned data within kEagerNs is read on every poll (a ping-pong's answer comes within a
// round trip); one quiet for longer is tried again after a quarter of its quiet time, at most
// kMaxQuietNs later (the latency added to the first message after a pause).
void QpDrive::on_read(Driver who, bool got, Ns now) {
  switch (who) {
  case Driver::Poll:
    if (got) {
      rx_data_ = now;
    } else if (const Ns quiet = now - rx_data_; quiet > kEagerNs) {
      quiet_until_.store(now + std::min(quiet / 4, kMaxQuietNs), std::memory_order_relaxed);
      ++c_.quiet;
    }
    break;
  case Driver::Progress:
    if (got) rx_data_ = now;
    quiet_until_.store(0, std::memory_order_relaxed); // bytes came (or a close): look at once
    break;
  default: break;
  }
}

// A full socket is the progress thread's to retry (on EPOLLOUT), and a poller's only where
// there is no progress thread, or where the QP is parked: then its pollers retry every
// kFullRetryNs and the progress thread leaves EPOLLOUT unwatched, so a program that streams
// and spins does not keep a third thread waking for each EPOLLOUT. A full stream ring is
// retried by any drive that knows it has room again (`ring_ready`).
bool QpDrive::retry_full(Driver who, bool want_write, bool has_progress, Ns now,
                         bool ring_ready) const {
  if (ring_ready) return true;
  switch (who) {
  case Driver::Progress:
  case Driver::Writable: return true;
  case Driver::Poll: return !has_progress || (want_write && parked() && now >= full_retry_at_);
  default: return false;
  }
}

void QpDrive::on_full(Driver who, Ns now) {
  ++c_.full;
  if (who == Driver::Poll) full_retry_at_ = now + kFullRetryNs;
}

// ---- parking ----

QpDrive::Park QpDrive::on_poll(Ns now, bool empty, bool cq_armed) {
  Park r = Park::Keep;
  if (!empty) {
    poll_streak_ = 0;
    if (parked()) r = Park::Unpark;
  } else {
    poll_streak_ =
        now - polled_ns_.load(std::memory_order_relaxed) < kPollGapNs ? poll_streak_ + 1 : 0;
    if (poll_streak_ >= kParkStreak && !cq_armed && !parked()) r = Park::Park;
  }
  polled_ns_.store(now, std::memory_order_relaxed);
  return r;
}

void QpDrive::set_parked(bool p) {
  if (parked_.exchange(p, std::memory_order_relaxed) == p) return;
  ++(p ? c_.parks : c_.unparks);
}

bool QpDrive::keeps_parked(Ns now, bool socket_error) const {
  return now - polled_ns_.load(std::memory_order_relaxed) < kIdleNs && !socket_error;
}

// ---- held Sends ----

bool QpDrive::on_held(bool held, Ns now) {
  if (!held) {
    held_since_.store(0, std::memory_order_relaxed);
    return false;
  }
  if (held_since_.load(std::memory_order_relaxed)) return false;
  held_since_.store(now, std::memory_order_relaxed);
  return true;
}

// ---- the progress thread's timer ----

QpDrive::Wake QpDrive::poll_at(Ns) const {
  Wake w;
  if (flush_at_) w = {flush_at_, true};
  if (parked()) w.at = std::min(w.at, polled_ns_.load(std::memory_order_relaxed) + kIdleNs);
  if (const Ns since = held_since_.load(std::memory_order_relaxed); since)
    w.at = std::min(w.at, since + recv_wait_);
  if (ring_looked_ > ring_checked_) w.at = std::min(w.at, ring_looked_ + kRingLookNs);
  if (ring_left_) w = {0, true}; // due now
  return w;
}

QpDrive::Timer QpDrive::on_timer(Ns now, bool cq_armed) {
  Timer t;
  t.unpark = parked() && (now - polled_ns_.load(std::memory_order_relaxed) >= kIdleNs || cq_armed);
  const Ns since = held_since_.load(std::memory_order_relaxed);
  t.hold_expired = since && now - since >= recv_wait_;
  if (ring_left_) {
    t.ring_look = true;
    ring_left_ = false;
  }
  if (ring_looked_ > ring_checked_ && now >= ring_looked_ + kRingLookNs) {
    t.ring_look = true;
    ring_checked_ = ring_looked_;
  }
  if (flush_at_ && flush_at_ <= now) {
    flush_at_ = 0;
    t.send_held = deferred();
    if (t.send_held) ++c_.deadlines;
  }
  return t;
}

// ---- Read Responses: copy or by reference ----

QpDrive::Path QpDrive::choose_path(SpliceMode mode) const {
  if (mode == SpliceMode::Off) return Path::Copy;
  if (mode == SpliceMode::On) return Path::Splice;
  // Each timing round begins with kTrial octets of the path not preferred, so a change of what
  // is cheaper is seen within a round.
  const bool trying = path_octets_[0] + path_octets_[1] < kTrial;
  return prefer_splice_ != trying ? Path::Splice : Path::Copy;
}

void QpDrive::on_pushed(Path path, Ns ns, std::uint64_t octets) {
  if (!octets) return;
  const auto k = static_cast<std::size_t>(path);
  ++(path == Path::Splice ? c_.spliced : c_.copied);
  path_ns_[k] += ns;
  path_octets_[k] += octets;
  // A round ends once both paths were timed (a trial can be all of a long push); then the
  // path with less time per octet is preferred, the other by kSwitchMargin at least.
  if (path_octets_[0] + path_octets_[1] < (rounds_ ? kRound : kFirstRound) || !path_octets_[0] ||
      !path_octets_[1])
    return;
  ++rounds_;
  const double copy = static_cast<double>(path_ns_[0]) / static_cast<double>(path_octets_[0]);
  const double ref = static_cast<double>(path_ns_[1]) / static_cast<double>(path_octets_[1]);
  if (prefer_splice_ ? copy < kSwitchMargin * ref : ref < kSwitchMargin * copy) {
    prefer_splice_ = !prefer_splice_;
    ++c_.path_changes;
  }
  path_ns_ = {};
  path_octets_ = {};
}

void QpDrive::reset_connection() {
  deferred_.store(false, std::memory_order_relaxed);
  flush_at_ = 0;
  quiet_until_.store(0, std::memory_order_relaxed);
  held_since_.store(0, std::memory_order_relaxed);
  poll_streak_ = 0;
  ring_.store(false, std::memory_order_relaxed);
  ring_looked_ = ring_checked_ = 0;
  ring_left_ = false;
}

// ---- CQs ----

void CqDrive::on_handed_out(Ns now) {
  polled_ns_.store(now, std::memory_order_relaxed);
  empty_since_.store(0, std::memory_order_relaxed);
}

// A thread that spins on a CQ nobody completes to (perftest's on its control connection for a
// whole bandwidth run) holds a CPU that the progress threads placing the data need. So once
// the CQ has been empty for kIdleSpinNs, its poller yields at most every kYieldEveryNs (alone
// on its CPU the call returns at once); a Read responder's poller never does.
bool CqDrive::on_idle_poll(Ns now, Ns ctx_reads) {
  const Ns since = empty_since_.load(std::memory_order_relaxed);
  if (since == 0) {
    empty_since_.store(now, std::memory_order_relaxed);
    return false;
  }
  if (now - since < kIdleSpinNs || now - yielded_.load(std::memory_order_relaxed) < kYieldEveryNs ||
      responders_recent(now, ctx_reads))
    return false;
  yielded_.store(now, std::memory_order_relaxed);
  yields_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// An RDMA Read responder whose CQs nobody polls (its program spins on another CQ, as
// perftest's server does on its control connection) would wait for the progress thread for
// every batch of Read Requests; a poller of the same context answers them instead. Plain
// placement (a Write target) stays with the progress thread: a Write's initiator waits for
// nothing, and reading a streaming socket on every poll in small pieces is slower.
bool responders_recent(Ns now, Ns ctx_reads) { return now - ctx_reads < kResponderNs; }

bool adopts(Ns now, Ns qp_reads, Ns send_polled, Ns recv_polled, bool armed) {
  if (now - qp_reads > kResponderNs || armed) return false;
  return now - send_polled >= kOwnPollNs && now - recv_polled >= kOwnPollNs;
}

} // namespace uiwarp::drive
