// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The drive policy: who moves a connected QP's bytes, and when. A user-space iWARP stack has
// no softirq; its bytes move when some thread of the program calls into it (a post, a poll of
// a CQ) or when the context's progress thread wakes. Which one should, and when it may wait,
// is decided here, with no system call and no clock read: every input carries `now`, and the
// progress thread learns when to look at a QP again from poll_at(), as smoltcp's poll_at()
// tells its caller. The mechanisms live elsewhere: qp_io.cpp (sendmsg, recvmsg), qp_splice.cpp
// (the pipe), verbs_cq.cpp (the ring), progress.cpp (epoll); each asks this file.
//
// The decisions, and the counter each one feeds (Counters, printed at context close with
// VERBS_LOG_LEVEL=3, as LINUX_MIB_TCPAUTOCORKING counts TCP's autocorking):
//   hold a post for the next drive, or send it now     QpDrive::on_post
//   leave a quiet socket alone for a while              QpDrive::on_read, poll_skips
//   retry a full socket (or ring) from this drive       QpDrive::retry_full
//   park a QP with its pollers / give it back           QpDrive::on_poll, poll_at, on_timer
//   answer another CQ's Read Requests from a poller     adopts()
//   give the CPU away from a poller with nothing to do  CqDrive::on_idle_poll
//   copy a Read Response or pass it by reference        QpDrive::choose_path, on_pushed
// Unit tests on a virtual clock: tests/unit/test_drive.cpp.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace uiwarp::drive {

using Ns = std::int64_t; // monotonic nanoseconds
inline constexpr Ns kNever = std::numeric_limits<Ns>::max();

// Who drives a QP's socket, which decides how much it does:
//   Post      a post: transmits what the socket takes now; reads nothing.
//   Poll      an application thread polling a CQ: reads (unless the socket is quiet, see
//             poll_skips); retries a full socket only when retry_full says so.
//   Release   a post of a receive buffer a held Send waits for: reads what followed it; or
//             a CQ armed while its QP's stream ring holds octets (Qp::ring_unlook): reads them.
//   Writable  the progress thread, told of room in a full socket, or at the deadline of
//             posts held for a poll: transmits.
//   Progress  the progress thread: reads up to its budget, retries a full socket.
//   Arm       a CQ armed for an event (its thread is about to sleep): sends what is held.
enum class Driver : std::uint8_t { Post, Poll, Release, Writable, Progress, Arm };
inline constexpr std::size_t kDrivers = 6;
const char* name(Driver d);

// Every tuning constant of the policy, each with its reason. Measurements behind them are in
// docs/performance.md and the git log.
namespace tuning {
// Posting in a burst: TCP_NODELAY makes each sendmsg a segment of its own, so posts made back
// to back go together in the next drive's one sendmsg when that drive is sure to come soon.
inline constexpr Ns kBackToBackNs = 2'000; // closer than this (or a post's own cost): a burst
inline constexpr Ns kPollSoonNs = 50'000;  // a burst this soon after a poll: a poll loop
inline constexpr Ns kFlushNs = 50'000;     // held posts go by then if no poll comes
// A same-host Write or Read of this many octets or more is always copied (copy_now); smaller
// ones posted in a burst go with the stream, in one sendmsg for the burst. A Write's stream in
// the shared-memory ring takes a burst with no system call at all, which beats a copy's system
// call per message for larger Writes too (docs/performance.md); a Read through the ring waits
// for the target to answer it, so Reads keep the socket's limit.
inline constexpr std::size_t kCopyAlwaysOctets = 4096;
inline constexpr std::size_t kRingCopyAlwaysOctets = 32 << 10;
inline constexpr Ns kMaxTxCostNs = 200'000; // one preempted sendmsg must not widen the window
// Pollers' receive back-off: a poll that reads an empty socket costs a system call.
inline constexpr Ns kEagerNs = 50'000;    // data this recent: read on every poll
inline constexpr Ns kMaxQuietNs = 20'000; // the most a quiet socket's first message may wait
inline constexpr Ns kFullRetryNs = 5'000; // a parked QP's pollers retry a full socket this often
// Parking: a QP whose polls come back empty in a tight loop is its pollers' alone.
inline constexpr Ns kPollGapNs = 10'000;         // empty polls closer than this form a streak
inline constexpr std::uint32_t kParkStreak = 16; // a streak this long parks the QP
inline constexpr Ns kIdleNs = 2'000'000;         // unpolled this long: the progress thread's again
inline constexpr Ns kLockedRetryNs = 10'000;     // a due flush whose QP was busy: look again then
inline constexpr Ns kTickNs = 2'000'000;         // anything else whose QP was busy
// Adoption: a poller answers the Read Requests of QPs whose own CQs nobody polls.
inline constexpr Ns kOwnPollNs = 1'000'000;    // a CQ polled this recently has its own poller
inline constexpr Ns kResponderNs = 10'000'000; // Read Requests this recent: a responder
// Yields: a poller of a CQ nobody completes to gives the progress threads the CPU.
inline constexpr Ns kIdleSpinNs = 200'000;   // empty this long: waited on, not streamed from
inline constexpr Ns kYieldEveryNs = 200'000; // at most one sched_yield per this
// How much one drive reads, per driver: a poll returns what completed; the progress thread
// must not starve other connections.
inline constexpr std::size_t kPollBudget = 256 << 10;
inline constexpr std::size_t kReleaseBudget = 256 << 10;
inline constexpr std::size_t kProgressBudget = 4 << 20;
// Read Responses by reference (qp_splice.cpp): only pieces this large; each QP times both
// paths, choosing after kFirstRound octets and then every kRound, each round's first kTrial
// octets on the path not preferred; a path must be a tenth cheaper to be chosen.
inline constexpr std::size_t kSpliceMin = 16 << 10;
// The same-host stream ring (samehost/stream_ring.hpp, its kLookNs): a peer that saw a poll look
// at the ring this recently sends no doorbell, so the progress thread looks by then.
inline constexpr Ns kRingLookNs = 1'000'000;
inline constexpr std::uint64_t kFirstRound = 8 << 20;
inline constexpr std::uint64_t kRound = 256 << 20;
inline constexpr std::uint64_t kTrial = 4 << 20;
inline constexpr double kSwitchMargin = 0.9;
} // namespace tuning

// What the policy decided, summed per QP (and per CQ for yields); a context adds up those of
// the QPs and CQs it destroyed.
struct Counters {
  std::uint64_t posts_sent = 0; // posts that transmitted at once
  std::uint64_t posts_held = 0; // posts held for the next drive (a burst)
  std::uint64_t reads_held = 0; // RDMA Reads held while earlier ones are unanswered
  std::uint64_t deadlines = 0;  // held posts the progress thread sent at their deadline
  std::array<std::uint64_t, kDrivers> held_sent_by{}; // who sent held posts, by Driver
  std::uint64_t quiet = 0; // a poll found the socket quiet and backed off
  std::uint64_t full = 0;  // the socket was full (EAGAIN)
  std::uint64_t parks = 0, unparks = 0;
  std::uint64_t adopted = 0;             // drives by a poller of another CQ (a Read responder)
  std::uint64_t yields = 0;              // sched_yield calls of idle pollers
  std::uint64_t copied = 0, spliced = 0; // pushes of large Read Responses, by path
  std::uint64_t path_changes = 0;
  // RDMA Writes and Reads copied by the same-host path, and those it left to the stream (TCP,
  // or the stream ring), by reason (same_host_gate.hpp's TcpReason: behind, burst, refused,
  // fault, fork, stopped); octets this end wrote into the peer's stream ring.
  std::uint64_t same_host = 0;
  std::array<std::uint64_t, 6> same_host_tcp{};
  std::uint64_t ring_octets = 0;

  Counters& operator+=(const Counters& o);
  // "posts 10 sent, 30 held (sent by poll 28, deadline 2), ..." — only what happened.
  std::string describe() const;
};

// A QP's share of the policy. Written with the QP's lock held; the atomics are also read
// without it by pollers (poll_skips, deferred) and the progress thread (parked).
class QpDrive {
public:
  // ---- posts ----
  struct Post {
    bool reads_only = false;        // the post was of RDMA Reads alone...
    bool reads_outstanding = false; // ...and earlier Reads wait for their responses
    bool can_hold = false;          // connected, RTS, the peer open, the send CQ not armed
    bool has_progress = false;      // a progress thread will honour a deadline
    Ns send_cq_polled = 0;          // the send CQ's last poll
  };
  // Send now (and call on_post_sent after), or hold for the next drive: the progress thread
  // sends held posts at poll_at() if none comes, and must be told of a new deadline (Schedule)
  // once per burst, not per post.
  enum class PostAction { Send, Hold, HoldAndSchedule };
  PostAction on_post(const Post& p, Ns now);
  void on_post_sent(Ns start, Ns end); // a post transmitted between start and end
  // Posts wait for the next drive (read without the lock by pollers).
  bool deferred() const { return deferred_.load(std::memory_order_relaxed); }
  // A drive by `who` is about to transmit: held posts go with it (counted).
  void on_drive(Driver who);
  void on_transmit() { deferred_.store(false, std::memory_order_relaxed); }

  // ---- receiving and the full socket ----
  // A drive read (`got`: bytes or a close came) at `now`.
  void on_read(Driver who, bool got, Ns now);
  // A poll at `now` may skip the QP without its lock: its socket was quiet a moment ago
  // and nothing is held for it to send.
  bool poll_skips(Ns now) const {
    return !ring_.load(std::memory_order_relaxed) &&
           now < quiet_until_.load(std::memory_order_relaxed) && !deferred();
  }
  // Whether a drive by `who` retries a socket found full (else the progress thread waits for
  // EPOLLOUT: not a failing sendmsg per poll). `ring_ready`: our stream ring in the peer's
  // table has room again, as far as this drive knows: it read the peer's doorbells, among
  // which may be its ring-back (whichever drive read it retries, a Release drive of a program
  // that arms its CQ say, else nothing rings again), or one load of the ring's head found a
  // quarter of it free (a poller then writes on without waiting for the ring-back's round
  // trip through the progress thread). Not every poll on a ring still full: each retry of a
  // full ring asks the peer to ring back once more, a system call at its end.
  bool retry_full(Driver who, bool want_write, bool has_progress, Ns now,
                  bool ring_ready = false) const;
  void on_full(Driver who, Ns now); // a drive by `who` left the socket full
  void on_reads_queued(Ns now) { reads_ns_.store(now, std::memory_order_relaxed); }
  Ns reads_at() const { return reads_ns_.load(std::memory_order_relaxed); }

  // ---- parking (who moves the bytes: the pollers or the progress thread) ----
  enum class Park { Keep, Park, Unpark };
  // A poll drove the QP at `now` and its CQ was `empty` after it; `cq_armed`: one of the QP's
  // CQs is armed (its thread sleeps: the progress thread must serve it).
  Park on_poll(Ns now, bool empty, bool cq_armed);
  void on_skipped_poll(Ns now) { polled_ns_.store(now, std::memory_order_relaxed); }
  void set_parked(bool p);
  bool parked() const { return parked_.load(std::memory_order_relaxed); }
  // An epoll event for a parked QP: true if its pollers still have it (they polled within
  // kIdleNs and the socket reports no error).
  bool keeps_parked(Ns now, bool socket_error) const;
  void on_adopted() { ++c_.adopted; }

  // ---- a Send waiting for a receive buffer (HX-059) ----
  void set_recv_wait(Ns wait) { recv_wait_ = wait; }
  Ns recv_wait() const { return recv_wait_; }
  // The engine holds a Send (`held`) or not, at `now`: true when a wait starts. Told at the end
  // of every read, and whenever a posted buffer ends a hold: a QP let go and held again by the
  // same drive waits its full receive wait again, not what is left of the last one.
  bool on_held(bool held, Ns now);
  bool held() const { return held_since() != 0; }
  Ns held_since() const { return held_since_.load(std::memory_order_relaxed); } // 0: not held

  // ---- the same-host stream ring: the peer's stream comes through memory, not the socket ----
  // From now on the QP reads a ring (no poll skips it: a look costs no system call).
  void set_ring() { ring_.store(true, std::memory_order_relaxed); }
  bool ring() const { return ring_.load(std::memory_order_relaxed); }
  // A poll looked at the ring at `now`: the peer may write without a doorbell until
  // kRingLookNs later, so the progress thread looks then unless another poll did (poll_at).
  void on_ring_look(Ns now) { ring_looked_ = now; }
  bool ring_look_due() const { return ring_looked_ > ring_checked_ || ring_left_; }
  // A drive that took the doorbells read the ring up to its budget and left octets in it:
  // nothing rings for those any more (a socket would stay readable; the ring's doorbells are
  // gone), so the progress thread reads on at once.
  void on_ring_left() { ring_left_ = true; }
  bool ring_left() const { return ring_left_; }

  // ---- the progress thread's timer ----
  // When the progress thread must look at this QP next (kNever: no need), and whether it is
  // a deadline of held posts (urgent: a busy QP is looked at again within kLockedRetryNs).
  struct Wake {
    Ns at = kNever;
    bool urgent = false;
  };
  Wake poll_at(Ns now) const;
  // What the progress thread must do for the QP at `now` (the QP's lock held):
  struct Timer {
    bool unpark = false;       // its pollers stopped, or a CQ was armed: read it now
    bool hold_expired = false; // the held Send waited recv_wait: Terminate (HX-059)
    bool send_held = false;    // held posts reached their deadline: send them
    bool ring_look = false;    // the last poll's look at the ring is kRingLookNs old: look
  };
  Timer on_timer(Ns now, bool cq_armed);

  // ---- the same-host path (qp_same_host.cpp): a Write or Read copied, or left to the stream ----
  // Whether a Write or Read of `octets` posted at `now` is copied at once, or is better left
  // to the stream with the burst it belongs to: a copy is a system call per message, and a
  // burst of small posts leaves in one sendmsg, or in none through the stream ring
  // (`ring_write`: a Write, and the stream goes through the ring). Small messages posted back
  // to back in a polling loop (the burst test of on_post) go faster with the stream; anything
  // else is copied.
  bool copy_now(std::size_t octets, Ns now, Ns send_cq_polled, bool ring_write = false) const;
  // A copy ran from `start` to `end`: a post, for the burst test of the next one.
  void on_copied(Ns start, Ns end);
  void on_same_host_copied() { ++c_.same_host; }
  void on_ring_written(std::size_t octets) { c_.ring_octets += octets; }
  // `reason`: a same_host_gate.hpp TcpReason.
  void on_same_host_tcp(std::uint8_t reason) { ++c_.same_host_tcp.at(reason); }

  // ---- Read Responses: copy or by reference ----
  enum class Path : std::uint8_t { Copy = 0, Splice = 1 };
  enum class SpliceMode { Auto, On, Off };
  // A push that carries large by-reference pieces starts: which path it takes.
  Path choose_path(SpliceMode mode) const;
  // It ended: `ns` and `octets` on `path` count towards the next choice.
  void on_pushed(Path path, Ns ns, std::uint64_t octets);

  const Counters& counters() const { return c_; }
  void reset_connection(); // detach: what belonged to the connection goes

private:
  // posts
  std::atomic<bool> deferred_{false};
  Ns flush_at_ = 0; // the progress thread sends held posts then (0: no deadline)
  bool in_burst_ = false;
  Ns post_start_ = 0, post_end_ = 0;
  Ns tx_cost_ = 0; // how long a post that transmits takes, averaged
  // receiving
  Ns rx_data_ = 0;
  std::atomic<Ns> quiet_until_{0};
  Ns full_retry_at_ = 0;
  std::atomic<Ns> reads_ns_{0};
  // parking
  std::atomic<Ns> polled_ns_{0};
  std::uint32_t poll_streak_ = 0;
  std::atomic<bool> parked_{false};
  // the stream ring
  std::atomic<bool> ring_{false};
  Ns ring_looked_ = 0, ring_checked_ = 0;
  bool ring_left_ = false;
  // held Sends
  std::atomic<Ns> held_since_{0};
  Ns recv_wait_ = 0;
  // path choice
  bool prefer_splice_ = false;
  std::uint32_t rounds_ = 0;
  std::array<Ns, 2> path_ns_{};
  std::array<std::uint64_t, 2> path_octets_{};
  Counters c_;
};

// A CQ's share: when its pollers last looked, and whether an idle one gives way.
class CqDrive {
public:
  void on_poll(Ns now) { polled_ns_.store(now, std::memory_order_relaxed); }
  Ns polled_at() const { return polled_ns_.load(std::memory_order_relaxed); }
  // A poll handed out completions at `now`: its poller is busy (no adoption, not idle).
  void on_handed_out(Ns now);
  // A poll found nothing at `now`: true if its poller should sched_yield now. Never while
  // the context answered Read Requests within kResponderNs (`ctx_reads`): this poller may be
  // the responder (adopts()).
  bool on_idle_poll(Ns now, Ns ctx_reads);
  std::uint64_t yields() const { return yields_.load(std::memory_order_relaxed); }

private:
  std::atomic<Ns> polled_ns_{0};
  std::atomic<Ns> empty_since_{0}, yielded_{0};
  std::atomic<std::uint64_t> yields_{0};
};

// Adoption: a poller of another CQ of the context drives a QP that answered Read Requests
// recently (`qp_reads`) when neither of its own CQs is polled (within kOwnPollNs) or armed.
bool responders_recent(Ns now, Ns ctx_reads);
bool adopts(Ns now, Ns qp_reads, Ns send_polled, Ns recv_polled, bool armed);

} // namespace uiwarp::drive
