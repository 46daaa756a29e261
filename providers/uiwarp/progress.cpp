// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The progress thread: one per context, epoll over the connected QPs' sockets, for the
// work no application thread does — programs that block on completion channels, a CQ
// nobody polls, RDMA Read Responses and Terminates owed while the application sleeps,
// Writes into memory a program spins on.
//
// A busy poller never needs it: polling a CQ drives the sockets of its QPs in the caller's
// thread (Cq::drive), and answers the Read Requests of QPs whose CQs nobody polls (Cq::adopt). A QP
// whose polls keep coming back empty in a tight loop is parked: the progress thread stops watching
// its socket, so the two do not wake and contend for every message. It is unparked as soon as a
// poll hands out a completion (the program may now do something else, such as spin on memory an
// RDMA Write fills), by a timer when the polls stop (kIdleNs), when one of its CQs is armed for an
// event, or at once when its socket reports an error.
//
// A QP is reached through the pointer epoll hands back, with a reference held while epoll
// or the timer list has it; references are dropped between batches of events, never while
// a batch might still name the QP.
#include "provider.hpp"
#include "uiwarp/thread.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <utility>

namespace uiwarp {

namespace {

// Empty polls closer together than this form a streak; a streak this long parks the QP.
constexpr std::int64_t kPollGapNs = 10'000;
constexpr std::uint32_t kParkStreak = 16;
// A parked QP that nobody polled for this long is taken back; the timer ticks as often.
constexpr std::int64_t kIdleNs = 2'000'000;
constexpr int kTickMs = 2;
// A held-back post whose QP was locked at its deadline is looked at again this much later.
constexpr std::int64_t kFlushRetryNs = 10'000;

bool cq_armed(Qp* qp) {
  return qp->send_cq()->armed.load(std::memory_order_relaxed) ||
         qp->recv_cq()->armed.load(std::memory_order_relaxed);
}

} // namespace

Progress::Progress() {
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wakefd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epfd_ < 0 || wakefd_ < 0) {
    if (epfd_ >= 0) ::close(epfd_);
    epfd_ = -1;
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr; // the wake-up eventfd
  ::epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev);
  thread_ = start_thread([this] { run(); });
}

Progress::~Progress() {
  stop_ = true;
  kick();
  if (thread_.joinable()) thread_.join();
  for (Qp* qp : timers_)
    qp->unref();
  for (Qp* qp : released_)
    qp->unref();
  for (auto& f : flushes_)
    f.first->unref();
  if (epfd_ >= 0) ::close(epfd_);
  if (wakefd_ >= 0) ::close(wakefd_);
}

void Progress::kick() {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wakefd_, &one, sizeof one);
}

int Progress::add(Qp* qp) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.ptr = qp;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, qp->fd, &ev)) return errno;
  qp->ref();
  qp->in_epoll = true;
  qp->watched = ev.events;
  return 0;
}

void Progress::remove(Qp* qp) {
  if (!qp->in_epoll) return;
  ::epoll_ctl(epfd_, EPOLL_CTL_DEL, qp->fd, nullptr);
  qp->in_epoll = false;
  release(qp);
}

void Progress::release(Qp* qp) {
  {
    std::lock_guard lock(timers_mu_);
    released_.push_back(qp);
  }
  kick();
}

void Progress::sync(Qp* qp) {
  if (!qp->in_epoll) return;
  if (qp->peer_closed || !qp->connected()) {
    remove(qp); // nothing more will come; a closed socket would report EPOLLRDHUP forever
    return;
  }
  const bool held = qp->engine->rx_held();
  std::uint32_t want = 0;
  if (!qp->parked && !held) want |= EPOLLIN | EPOLLRDHUP; // a held stream is not read
  // Room in a full socket is this thread's to use, unless the QP is parked: its pollers
  // retry it then (Qp::drive), and the timer takes the QP back when they stop.
  if (qp->want_write && !qp->parked) want |= EPOLLOUT;
  if (want != qp->watched) {
    epoll_event ev{};
    ev.events = want;
    ev.data.ptr = qp;
    ::epoll_ctl(epfd_, EPOLL_CTL_MOD, qp->fd, &ev);
    qp->watched = want;
  }
  if ((qp->parked || held) && !qp->timed) add_timer(qp);
}

void Progress::set_parked(Qp* qp, bool parked) {
  if (qp->parked.load(std::memory_order_relaxed) == parked) return;
  qp->parked = parked;
  for (Cq* cq : {qp->send_cq(), qp->recv_cq()})
    cq->parked.fetch_add(parked ? 1 : -1, std::memory_order_relaxed);
  sync(qp);
}

void Progress::polled(Qp* qp, std::int64_t now, bool empty) {
  if (!empty) {
    qp->poll_streak = 0;
    set_parked(qp, false);
  } else {
    qp->poll_streak =
        now - qp->polled_ns.load(std::memory_order_relaxed) < kPollGapNs ? qp->poll_streak + 1 : 0;
    if (qp->poll_streak >= kParkStreak && !cq_armed(qp)) set_parked(qp, true);
  }
  qp->polled_ns.store(now, std::memory_order_relaxed);
}

void Progress::add_timer(Qp* qp) {
  qp->timed = true;
  qp->ref();
  bool first;
  {
    std::lock_guard lock(timers_mu_);
    first = timers_.empty();
    timers_.push_back(qp);
  }
  // The thread may be in an epoll_wait without a timeout, chosen while the list was empty: a
  // QP parked by a poller then had no event (its socket unwatched) and no tick to take it
  // back, and its peer's Reads went unanswered once the polls stopped.
  if (first) kick();
}

void Progress::run() {
  epoll_event evs[64];
  while (!stop_) {
    const std::int64_t wait = sleep_ns(mono_ns());
    int n;
    if (wait < 0) {
      n = ::epoll_wait(epfd_, evs, 64, -1);
    } else {
      // Flush deadlines are tens of microseconds away: epoll_wait counts milliseconds.
      const timespec ts{static_cast<time_t>(wait / 1'000'000'000), wait % 1'000'000'000};
      n = ::epoll_pwait2(epfd_, evs, 64, &ts, nullptr);
      if (n < 0 && errno == ENOSYS) // before Linux 5.11, or a seccomp profile without it
        n = ::epoll_wait(epfd_, evs, 64, static_cast<int>(wait / 1'000'000) + 1);
    }
    if (n < 0 && errno != EINTR) break;
    const std::int64_t now = mono_ns();
    if (n > 0) take_events(n, evs, now);
    check_timers(now);
    check_flushes(now);
    // Only now, with no event of this batch left to look at, may references go.
    std::vector<Qp*> drop;
    {
      std::lock_guard lock(timers_mu_);
      drop.swap(released_);
    }
    for (Qp* qp : drop)
      qp->unref();
  }
}

void Progress::take_events(int n, const epoll_event* evs, std::int64_t now) {
  for (int i = 0; i < n; ++i) {
    auto* qp = static_cast<Qp*>(evs[i].data.ptr);
    if (!qp) {
      std::uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(wakefd_, &v, sizeof v);
      continue;
    }
    std::lock_guard lock(qp->mu);
    if (!qp->connected()) continue;
    if (qp->parked) {
      // Room in its socket, an error or a hang-up reach a parked QP: send what waits for
      // the room; take the QP back on an error or hang-up.
      if (now - qp->polled_ns.load(std::memory_order_relaxed) < kIdleNs &&
          !(evs[i].events & (EPOLLERR | EPOLLHUP))) {
        if (evs[i].events & EPOLLOUT) qp->drive(Driver::Writable);
        continue;
      }
      set_parked(qp, false);
    }
    qp->drive(Driver::Progress);
  }
}

std::int64_t Progress::sleep_ns(std::int64_t now) {
  std::lock_guard lock(timers_mu_);
  std::int64_t wait = timers_.empty() && released_.empty() ? -1 : kTickMs * 1'000'000LL;
  for (const auto& f : flushes_) {
    const std::int64_t d = std::max<std::int64_t>(f.second - now, 0);
    wait = wait < 0 ? d : std::min(wait, d);
  }
  // Under the lock with flushes_: flush_by either sees this or its entry is counted above.
  wake_at_ = wait < 0 ? std::numeric_limits<std::int64_t>::max() : now + wait;
  return wait;
}

void Progress::flush_by(Qp* qp, std::int64_t deadline) {
  bool wake;
  {
    std::lock_guard lock(timers_mu_);
    flushes_.emplace_back(qp, deadline);
    wake = deadline < wake_at_; // asleep past the deadline (an awake thread looks again)
  }
  if (wake) kick();
}

// Posts held back for a poll that did not come (Qp::drive_posted): sent now.
void Progress::check_flushes(std::int64_t now) {
  std::vector<std::pair<Qp*, std::int64_t>> list, keep;
  {
    std::lock_guard lock(timers_mu_);
    if (flushes_.empty()) return;
    list.swap(flushes_);
  }
  std::vector<Qp*> done;
  for (const auto& f : list) {
    Qp* qp = f.first;
    if (f.second > now) {
      keep.push_back(f);
      continue;
    }
    // A taken lock is a thread posting to the QP or driving it: look again shortly.
    std::unique_lock lock(qp->mu, std::try_to_lock);
    if (!lock) {
      keep.emplace_back(qp, now + kFlushRetryNs);
      continue;
    }
    qp->flush_queued = false;
    if (qp->tx_deferred.load(std::memory_order_relaxed)) qp->drive(Driver::Writable);
    done.push_back(qp);
  }
  {
    std::lock_guard lock(timers_mu_);
    flushes_.insert(flushes_.end(), keep.begin(), keep.end());
  }
  for (Qp* qp : done)
    qp->unref();
}

void Progress::check_timers(std::int64_t now) {
  std::vector<Qp*> list;
  {
    std::lock_guard lock(timers_mu_);
    if (timers_.empty()) return;
    list.swap(timers_);
  }
  std::vector<Qp*> keep, done;
  for (Qp* qp : list) {
    {
      // A QP whose lock is taken is being driven right now (a poller spinning on its CQ
      // holds it most of the time): look again at the next tick rather than wait here,
      // which would hold up every other QP's events behind that poller.
      std::unique_lock lock(qp->mu, std::try_to_lock);
      if (!lock) {
        keep.push_back(qp);
        continue;
      }
      if (qp->connected()) {
        if (qp->parked &&
            (now - qp->polled_ns.load(std::memory_order_relaxed) >= kIdleNs || cq_armed(qp))) {
          set_parked(qp, false); // level-triggered epoll reports what is already waiting
          qp->drive(Driver::Progress);
        }
        if (qp->held_since_ns && now - qp->held_since_ns >= qp->recv_wait_ns) {
          qp->engine->rx_hold_expired(); // HX-059: the Terminate after all
          qp->drive(Driver::Progress);
        }
      }
      qp->timed = qp->connected() && (qp->parked || qp->held_since_ns);
      (qp->timed ? keep : done).push_back(qp);
    }
  }
  {
    std::lock_guard lock(timers_mu_);
    timers_.insert(timers_.end(), keep.begin(), keep.end());
  }
  for (Qp* qp : done)
    qp->unref();
}

void Progress::abandon() {
  for (int* fd : {&epfd_, &wakefd_})
    if (*fd >= 0) ::close(std::exchange(*fd, -1));
}

void Context::drop_inherited_progress() {
  if (!progress || !progress->inherited()) return;
  // librdmacm keeps one context per device for the life of the process, so a child of a
  // program that used the RDMA CM connects on its parent's context: it gets a thread of its
  // own, and the parent's is forgotten (a leak of one object per fork that used it).
  progress->abandon();
  [[maybe_unused]] Progress* forgotten = progress.release();
}

int Context::start_progress() {
  std::lock_guard lock(mu);
  drop_inherited_progress();
  if (progress) return 0;
  auto p = std::make_unique<Progress>();
  if (!p->ok()) return ENOMEM;
  progress = std::move(p);
  return 0;
}

Context::~Context() {
  drop_inherited_progress();
  progress.reset();
}

} // namespace uiwarp
