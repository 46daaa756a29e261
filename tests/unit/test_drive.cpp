// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The drive policy (providers/uiwarp/drive/drive.hpp) on a virtual clock: when a post is held for
// the next drive and when it goes, the receive back-off, parking, idle pollers' yields, the
// progress thread's poll_at(), and the Read Response path's timing rounds. The provider's own tests
// (tests/cm: test_datapath, test_poll_yield, test_close_order) run the same rules for real.
#include "catch_compat.hpp"
#include "drive.hpp"
#include "same_host_gate.hpp"

#include <cstdint>
#include <string>

using namespace uiwarp::drive;
using namespace uiwarp::drive::tuning;

namespace {

constexpr Ns kUs = 1'000;
constexpr Ns kStart = 1'000'000'000'000; // a monotonic clock that has run for a while

// A connected QP in RTS with a progress thread, whose send CQ was last polled at `polled`.
QpDrive::Post post_after(Ns polled, bool reads_only = false, bool outstanding = false) {
  QpDrive::Post p;
  p.reads_only = reads_only;
  p.reads_outstanding = outstanding;
  p.can_hold = true;
  p.has_progress = true;
  p.send_cq_polled = polled;
  return p;
}

// A post at `t` that transmits, taking `cost`.
QpDrive::PostAction post_sent(QpDrive& d, Ns polled, Ns t, Ns cost = 2 * kUs) {
  const auto a = d.on_post(post_after(polled), t);
  if (a == QpDrive::PostAction::Send) d.on_post_sent(t, t + cost);
  return a;
}

} // namespace

TEST_CASE("drive: a ping-pong, which polls between its posts, never holds one", "[drive]") {
  QpDrive d;
  Ns t = kStart;
  for (int i = 0; i < 100; ++i) {
    const Ns polled = t; // the completion of the previous message was polled
    CHECK(post_sent(d, polled, t + kUs) == QpDrive::PostAction::Send);
    t += 15 * kUs;
  }
  CHECK(d.counters().posts_sent == 100);
  CHECK(d.counters().posts_held == 0);
  CHECK_FALSE(d.deferred());
  CHECK(d.poll_at(t).at == kNever);
}

TEST_CASE("drive: a burst after a poll is held for the next drive, never past its deadline",
          "[drive]") {
  QpDrive d;
  const Ns polled = kStart;
  // The first post of the burst goes at once: nothing says another one follows.
  REQUIRE(post_sent(d, polled, kStart + kUs) == QpDrive::PostAction::Send);
  // The next, back to back with no poll between, is held; the first held one sets a deadline
  // the progress thread must be told of, the others do not.
  const Ns second = kStart + kUs + 2 * kUs + 500;
  REQUIRE(d.on_post(post_after(polled), second) == QpDrive::PostAction::HoldAndSchedule);
  CHECK(d.deferred());
  REQUIRE(d.on_post(post_after(polled), second + 200) == QpDrive::PostAction::Hold);
  const QpDrive::Wake w = d.poll_at(second);
  CHECK(w.urgent);
  CHECK(w.at > second);
  CHECK(w.at <= second + kFlushNs + 2 * kMaxTxCostNs);

  SECTION("the next poll's drive sends it, and the deadline finds nothing to do") {
    d.on_drive(Driver::Poll);
    d.on_transmit();
    CHECK_FALSE(d.deferred());
    CHECK(d.counters().held_sent_by[static_cast<std::size_t>(Driver::Poll)] == 1);
    const QpDrive::Timer t = d.on_timer(w.at, false);
    CHECK_FALSE(t.send_held);
    CHECK(d.counters().deadlines == 0);
    CHECK(d.poll_at(w.at).at == kNever);
  }
  SECTION("no poll comes: the progress thread sends it at the deadline, not before") {
    CHECK_FALSE(d.on_timer(w.at - 1, false).send_held);
    CHECK(d.on_timer(w.at, false).send_held);
    CHECK(d.counters().deadlines == 1);
    CHECK(d.poll_at(w.at).at == kNever);
  }
  CHECK(d.counters().posts_held == 2);
  CHECK(d.counters().posts_sent == 1);
}

TEST_CASE("drive: a lone post after a pause, or one while the CQ is armed, goes at once",
          "[drive]") {
  QpDrive d;
  REQUIRE(post_sent(d, kStart, kStart + kUs) == QpDrive::PostAction::Send);
  // A millisecond later: not back to back.
  CHECK(post_sent(d, kStart, kStart + 1'000 * kUs) == QpDrive::PostAction::Send);
  // Back to back, but the program armed the send CQ (it is about to sleep).
  QpDrive::Post armed = post_after(kStart);
  armed.can_hold = false;
  CHECK(d.on_post(armed, kStart + 1'000 * kUs + 2 * kUs + 100) == QpDrive::PostAction::Send);
  // No progress thread would honour a deadline: nothing is held for a poll.
  QpDrive e;
  REQUIRE(post_sent(e, kStart, kStart + kUs) == QpDrive::PostAction::Send);
  QpDrive::Post alone = post_after(kStart);
  alone.has_progress = false;
  CHECK(e.on_post(alone, kStart + kUs + 2 * kUs + 100) == QpDrive::PostAction::Send);
}

TEST_CASE("drive: RDMA Reads wait for the next drive while earlier Reads are unanswered",
          "[drive]") {
  QpDrive d;
  CHECK(d.on_post(post_after(0, true, true), kStart) == QpDrive::PostAction::Hold);
  CHECK(d.counters().reads_held == 1);
  CHECK(d.poll_at(kStart).at == kNever); // the response's reader sends it: no deadline
  d.on_transmit();
  CHECK(d.on_post(post_after(0, true, false), kStart + kUs) == QpDrive::PostAction::Send);
}

TEST_CASE("drive: back to back follows the machine: a slow sendmsg widens the window", "[drive]") {
  QpDrive d;
  REQUIRE(post_sent(d, kStart, kStart + kUs) == QpDrive::PostAction::Send);
  // Posts that each take 100 us to transmit (a sendmsg under emulation).
  Ns t = kStart + kUs;
  for (int i = 0; i < 32; ++i) {
    d.on_post_sent(t, t + 100 * kUs);
    t += 100 * kUs;
  }
  // The program posts again 20 us after the last one returned, no poll between: a burst.
  REQUIRE(post_sent(d, kStart, t + 20 * kUs) != QpDrive::PostAction::Send);
}

TEST_CASE("drive: a quiet socket is left alone by pollers for a while", "[drive]") {
  QpDrive d;
  d.on_read(Driver::Poll, true, kStart);
  // Data 10 us ago: every poll reads.
  d.on_read(Driver::Poll, false, kStart + 10 * kUs);
  CHECK_FALSE(d.poll_skips(kStart + 11 * kUs));
  // Quiet for 100 us: polls skip it for a quarter of that, at most kMaxQuietNs.
  const Ns t = kStart + 100 * kUs;
  d.on_read(Driver::Poll, false, t);
  CHECK(d.counters().quiet == 1);
  CHECK(d.poll_skips(t + 10 * kUs));
  CHECK_FALSE(d.poll_skips(t + kMaxQuietNs));
  // Held posts make a poll take the QP all the same.
  d.on_post(post_after(0, true, true), t + kUs);
  CHECK_FALSE(d.poll_skips(t + 2 * kUs));
  d.on_transmit();
  CHECK(d.poll_skips(t + 2 * kUs));
  // The progress thread read something: pollers look at once.
  d.on_read(Driver::Progress, true, t + 3 * kUs);
  CHECK_FALSE(d.poll_skips(t + 4 * kUs));
}

TEST_CASE("drive: a full socket is retried by pollers only where nobody else will", "[drive]") {
  QpDrive d;
  CHECK(d.retry_full(Driver::Progress, true, true, kStart));
  CHECK(d.retry_full(Driver::Writable, true, true, kStart));
  CHECK_FALSE(d.retry_full(Driver::Post, true, true, kStart));
  CHECK_FALSE(d.retry_full(Driver::Poll, true, true, kStart)); // the progress thread's
  CHECK(d.retry_full(Driver::Poll, true, false, kStart));      // no progress thread
  // Parked: its pollers retry, at most every kFullRetryNs.
  d.set_parked(true);
  CHECK(d.retry_full(Driver::Poll, true, true, kStart));
  d.on_full(Driver::Poll, kStart);
  CHECK_FALSE(d.retry_full(Driver::Poll, true, true, kStart + kFullRetryNs - 1));
  CHECK(d.retry_full(Driver::Poll, true, true, kStart + kFullRetryNs));
  CHECK(d.counters().full == 1);
}

TEST_CASE("drive: a full stream ring is retried by a drive that knows it has room again",
          "[drive]") {
  // The peer's ring-back is a doorbell on the socket, which any drive that reads the socket
  // takes: a Release drive of a program that arms its CQ (qperf's rc_bi_bw) that then left the
  // ring full waited for a ring-back already taken, and the close behind it never came.
  QpDrive d;
  for (Driver who : {Driver::Post, Driver::Poll, Driver::Release, Driver::Arm, Driver::Progress,
                     Driver::Writable})
    CHECK(d.retry_full(who, true, true, kStart, true));
  // Or a look at the ring's head found room (RingWriter::room_again): a poller writes on
  // without waiting for the ring-back. Without either, a poll or a post does not retry (each
  // retry of a full ring asks the peer to ring back again).
  CHECK_FALSE(d.retry_full(Driver::Post, true, true, kStart, false));
  CHECK_FALSE(d.retry_full(Driver::Release, true, true, kStart, false));
  CHECK_FALSE(d.retry_full(Driver::Poll, true, true, kStart, false));
}

TEST_CASE("drive: empty polls in a tight loop park the QP, a completion or silence unparks it",
          "[drive]") {
  QpDrive d;
  Ns t = kStart;
  int polls = 0;
  while (d.on_poll(t, true, false) != QpDrive::Park::Park) {
    ++polls;
    t += kUs;
    REQUIRE(polls < 100);
  }
  CHECK(polls == static_cast<int>(kParkStreak));
  d.set_parked(true);
  CHECK(d.counters().parks == 1);
  // Parked, its pollers still polling: the progress thread leaves it until kIdleNs after the
  // last poll.
  CHECK(d.keeps_parked(t + kUs, false));
  CHECK_FALSE(d.keeps_parked(t + kUs, true)); // the socket reported an error
  CHECK(d.poll_at(t).at == t + kIdleNs);
  CHECK_FALSE(d.on_timer(t + kIdleNs - 1, false).unpark);
  CHECK(d.on_timer(t + kIdleNs - 1, true).unpark); // a CQ was armed: its thread sleeps

  SECTION("a poll that hands out a completion unparks it") {
    CHECK(d.on_poll(t + kUs, false, false) == QpDrive::Park::Unpark);
  }
  SECTION("the polls stop: the progress thread takes it back") {
    CHECK(d.on_timer(t + kIdleNs, false).unpark);
    d.set_parked(false);
    CHECK(d.counters().unparks == 1);
    CHECK(d.poll_at(t + kIdleNs).at == kNever);
  }
  SECTION("empty polls far apart never park") {
    QpDrive e;
    for (int i = 0; i < 100; ++i)
      CHECK(e.on_poll(kStart + i * kPollGapNs, true, false) == QpDrive::Park::Keep);
  }
  SECTION("nor while a CQ is armed") {
    QpDrive e;
    for (int i = 0; i < 100; ++i)
      CHECK(e.on_poll(kStart + i * kUs, true, true) == QpDrive::Park::Keep);
  }
}

TEST_CASE("drive: a Send held for a receive buffer ends in the Terminate after recv_wait",
          "[drive]") {
  QpDrive d;
  d.set_recv_wait(2'000 * 1'000'000LL);
  CHECK(d.on_held(true, kStart)); // the wait starts: reported once
  CHECK_FALSE(d.on_held(true, kStart + kUs));
  CHECK(d.held());
  CHECK(d.poll_at(kStart).at == kStart + d.recv_wait());
  CHECK_FALSE(d.on_timer(kStart + d.recv_wait() - 1, false).hold_expired);
  CHECK(d.on_timer(kStart + d.recv_wait(), false).hold_expired);
  CHECK_FALSE(d.on_held(false, kStart + d.recv_wait()));
  CHECK(d.poll_at(kStart).at == kNever);
}

TEST_CASE("drive: an idle poller yields at most every 200 us, never while Reads are recent",
          "[drive]") {
  CqDrive c;
  const Ns no_reads = 0;
  CHECK_FALSE(c.on_idle_poll(kStart, no_reads)); // the CQ is empty from now
  CHECK_FALSE(c.on_idle_poll(kStart + kIdleSpinNs - 1, no_reads));
  CHECK(c.on_idle_poll(kStart + kIdleSpinNs, no_reads));
  CHECK_FALSE(c.on_idle_poll(kStart + kIdleSpinNs + kYieldEveryNs - 1, no_reads));
  CHECK(c.on_idle_poll(kStart + kIdleSpinNs + kYieldEveryNs, no_reads));
  CHECK(c.yields() == 2);
  // This context answered Read Requests a moment ago: its pollers may be the responder.
  const Ns t = kStart + 10 * kIdleSpinNs;
  CHECK_FALSE(c.on_idle_poll(t, t - kUs));
  // A poll that hands out completions starts the idle time again.
  c.on_handed_out(t);
  CHECK_FALSE(c.on_idle_poll(t + kUs, no_reads));
  CHECK_FALSE(c.on_idle_poll(t + kIdleSpinNs, no_reads));
  CHECK(c.on_idle_poll(t + kUs + kIdleSpinNs, no_reads));
}

TEST_CASE("drive: a poller adopts a recent Read responder whose own CQs nobody polls", "[drive]") {
  const Ns t = kStart;
  CHECK(responders_recent(t, t - kUs));
  CHECK_FALSE(responders_recent(t, t - kResponderNs));
  CHECK(adopts(t, t - kUs, t - kOwnPollNs, t - kOwnPollNs, false));
  CHECK_FALSE(adopts(t, t - kUs, t - kUs, t - kOwnPollNs, false));       // its send CQ is polled
  CHECK_FALSE(adopts(t, t - kUs, t - kOwnPollNs, t - kUs, false));       // its receive CQ is
  CHECK_FALSE(adopts(t, t - kUs, t - kOwnPollNs, t - kOwnPollNs, true)); // armed: a sleeper
  CHECK_FALSE(adopts(t, t - kResponderNs - 1, 0, 0, false));             // no Reads lately
}

TEST_CASE("drive: Read Responses take the cheaper path, timed in rounds", "[drive]") {
  constexpr std::uint64_t kMiB = 1 << 20;
  QpDrive d;
  CHECK(d.choose_path(QpDrive::SpliceMode::On) == QpDrive::Path::Splice);
  CHECK(d.choose_path(QpDrive::SpliceMode::Off) == QpDrive::Path::Copy);
  // Pushes of 1 MiB on the path chosen, at `copy` and `splice` ns per octet; returns the
  // octets each path carried.
  auto run = [&](std::uint64_t octets, Ns copy, Ns splice) {
    std::uint64_t on[2] = {0, 0};
    for (std::uint64_t done = 0; done < octets; done += kMiB) {
      const QpDrive::Path p = d.choose_path(QpDrive::SpliceMode::Auto);
      const Ns per = p == QpDrive::Path::Copy ? copy : splice;
      d.on_pushed(p, per * static_cast<Ns>(kMiB), kMiB);
      on[static_cast<int>(p)] += kMiB;
    }
    return std::pair{on[0], on[1]};
  };
  // The first round: kTrial octets on the path not preferred (splice), then copy; copying is
  // cheaper here, so it stays.
  auto [c1, s1] = run(kFirstRound, 1, 2);
  CHECK(s1 == kTrial);
  CHECK(c1 == kFirstRound - kTrial);
  CHECK(d.counters().path_changes == 0);
  // The machine changes (splicing is now cheaper): the next round, trying splice again,
  // switches, and the one after tries copy.
  auto [c2, s2] = run(kRound, 2, 1);
  CHECK(s2 == kTrial);
  CHECK(d.counters().path_changes == 1);
  CHECK(d.choose_path(QpDrive::SpliceMode::Auto) == QpDrive::Path::Copy); // the trial
  auto [c3, s3] = run(kRound, 2, 1);
  CHECK(c3 == kTrial);
  CHECK(s3 == kRound - kTrial);
  CHECK(d.counters().path_changes == 1);
  // Less than kSwitchMargin apart: no change.
  run(kRound, 1, 1);
  CHECK(d.counters().path_changes == 1);
  CHECK(d.counters().spliced > 0);
  CHECK(d.counters().copied > 0);
}

TEST_CASE("drive: the counters add up and describe what happened", "[drive]") {
  QpDrive d;
  post_sent(d, kStart, kStart + kUs);
  d.on_post(post_after(kStart), kStart + 3 * kUs);
  d.on_drive(Driver::Arm);
  Counters total;
  total += d.counters();
  total += d.counters();
  CHECK(total.posts_sent == 2);
  CHECK(total.posts_held == 2);
  const std::string s = total.describe();
  CHECK(s.find("posts 2 sent at once, 2 held (sent with a drive by arm 2)") == 0);
  CHECK(s.find("yields 0") != std::string::npos);
}

TEST_CASE("drive: the same-host path copies all but small posts back to back in a poll loop",
          "[drive]") {
  QpDrive d;
  Ns t = kStart;
  // A ping-pong polls between its posts: every small Write is copied.
  for (int i = 0; i < 10; ++i) {
    REQUIRE(d.copy_now(64, t, t - kUs));
    d.on_copied(t, t + kUs);
    t += 5 * kUs;
  }
  // A loop of small posts with no poll between: the first is copied, those that follow it back
  // to back go with a burst over TCP.
  const Ns polled = t;
  t += kUs;
  REQUIRE(d.copy_now(64, t, polled));
  d.on_copied(t, t + kUs);
  t += kUs + 100;
  CHECK_FALSE(d.copy_now(64, t, polled));
  // A large one is copied whatever came before: a system call per message costs it little.
  CHECK(d.copy_now(kCopyAlwaysOctets, t, polled));
  // A Write whose stream goes through the ring costs no system call there: larger Writes of a
  // burst go with it too.
  CHECK_FALSE(d.copy_now(kCopyAlwaysOctets, t, polled, true));
  CHECK_FALSE(d.copy_now(kRingCopyAlwaysOctets - 1, t, polled, true));
  CHECK(d.copy_now(kRingCopyAlwaysOctets, t, polled, true));
  // A pause longer than back to back: copied again.
  CHECK(d.copy_now(64, t + kBackToBackNs + kUs, polled));
  d.on_same_host_copied();
  d.on_same_host_tcp(static_cast<std::uint8_t>(TcpReason::Burst));
  d.on_same_host_tcp(static_cast<std::uint8_t>(TcpReason::Refused));
  d.on_same_host_tcp(static_cast<std::uint8_t>(TcpReason::Refused));
  CHECK(d.counters().same_host == 1);
  CHECK(d.counters().same_host_tcp[static_cast<std::size_t>(TcpReason::Refused)] == 2);
  CHECK(d.counters().describe().find(
            "same-host Writes and Reads 1, left to the stream 3 (burst 1, refused 2)") !=
        std::string::npos);
}

namespace {
// A QP behind nothing, its target caught up: what each case below changes one fact of.
GateFacts idle(Ns now) {
  GateFacts f;
  f.framed = f.consumed = 4096;
  f.rtr_octets = 24;
  f.octets = kCopyAlwaysOctets;
  f.now = now;
  f.send_cq_polled = now - kUs;
  return f;
}
} // namespace

TEST_CASE("drive: the same-host gate copies only behind nothing, and says why not", "[drive]") {
  QpDrive d;
  const Ns t = kStart;
  CHECK(decide(idle(t), d).copy);
  const auto why = [&](GateFacts f) {
    const Gate g = decide(f, d);
    CHECK_FALSE(g.copy);
    return g.why;
  };
  GateFacts f = idle(t);
  f.forked = true;
  CHECK(why(f) == TcpReason::Fork);
  f = idle(t);
  f.sq_outstanding = 1; // an earlier WR (a Send, a Read over TCP) not complete
  CHECK(why(f) == TcpReason::Behind);
  f = idle(t);
  f.completions_ready = 1; // its completion not yet in the CQ
  CHECK(why(f) == TcpReason::Behind);
  f = idle(t);
  f.tx_pending = true;
  CHECK(why(f) == TcpReason::Behind);
  f = idle(t);
  f.piped = 100;
  CHECK(why(f) == TcpReason::Behind);
  f = idle(t);
  f.consumed = 4000; // the target has not processed every octet sent to it
  CHECK(why(f) == TcpReason::Behind);
  // Only the RTR sent, which places nothing: copied though the target has not processed it.
  f = idle(t);
  f.framed = f.rtr_octets;
  f.consumed = 0;
  CHECK(decide(f, d).copy);
  // A small post back to back after a copy, in a poll loop: with its burst, over TCP.
  d.on_copied(t, t + kUs);
  f = idle(t + kUs + 100);
  f.octets = 64;
  f.send_cq_polled = t - kUs;
  CHECK(why(f) == TcpReason::Burst);
  f.octets = kCopyAlwaysOctets; // copied, unless the stream goes through the ring
  CHECK(decide(f, d).copy);
  f.ring_write = true;
  CHECK(why(f) == TcpReason::Burst);
  for (std::size_t r = 0; r < kTcpReasons; ++r) // each reason has a name of its own
    for (std::size_t q = 0; q < r; ++q)
      CHECK(std::string(name(static_cast<TcpReason>(r))) != name(static_cast<TcpReason>(q)));
}

TEST_CASE("drive: octets a drive left in the stream ring bring the progress thread at once, once",
          "[drive]") {
  QpDrive d;
  const Ns t = kStart;
  d.set_ring();
  CHECK_FALSE(d.ring_look_due());
  CHECK(d.poll_at(t).at == kNever);
  // A drive that took the doorbells stopped at its budget: due now, and urgent (a QP whose
  // lock is busy is looked at again within kLockedRetryNs, not kTickNs).
  d.on_ring_left();
  CHECK(d.ring_left());
  CHECK(d.ring_look_due());
  const QpDrive::Wake w = d.poll_at(t);
  CHECK(w.at <= t);
  CHECK(w.urgent);
  CHECK(d.on_timer(t, false).ring_look);
  // Taken: nothing more is due until another drive leaves octets again.
  CHECK_FALSE(d.ring_left());
  CHECK(d.poll_at(t).at == kNever);
  CHECK_FALSE(d.on_timer(t + kRingLookNs, false).ring_look);
  // A poll's look still brings the progress thread kRingLookNs after it, as before.
  d.on_ring_look(t);
  CHECK(d.poll_at(t).at == t + kRingLookNs);
  CHECK_FALSE(d.on_timer(t + kRingLookNs - 1, false).ring_look);
  CHECK(d.on_timer(t + kRingLookNs, false).ring_look);
  d.on_ring_left();
  d.reset_connection();
  CHECK_FALSE(d.ring_left());
}
