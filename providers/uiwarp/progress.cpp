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
// RDMA Write fills), by a timer when the polls stop (drive.hpp's kIdleNs), when one of its CQs is
// armed for an event, or at once when its socket reports an error.
//
// A QP is reached through the pointer epoll hands back, with a reference held while epoll
// or the timer list has it; references are dropped between batches of events, never while
// a batch might still name the QP.
#include "iwarp/dma.hpp"
#include "provider.hpp"
#include "uiwarp/log.hpp"
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

// A QP handed to epoll_ctl comes back from the wait in this thread: the kernel orders the two.
// ThreadSanitizer sees that for epoll_wait but not for epoll_pwait2, which it does not intercept
// (GCC 12), so the hand-over is told to it here. Empty in other builds.
#if defined(IWARP_TSAN)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
void handed_to_epoll(Progress* p) { __tsan_release(p); }
void taken_from_epoll(Progress* p) { __tsan_acquire(p); }
#else
void handed_to_epoll(Progress*) {}
void taken_from_epoll(Progress*) {}
#endif

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
  handed_to_epoll(this);
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, qp->conn.fd, &ev)) return errno;
  qp->ref();
  qp->watch.in_epoll = true;
  qp->watch.events = ev.events;
  return 0;
}

void Progress::remove(Qp* qp) {
  if (!qp->watch.in_epoll) return;
  ::epoll_ctl(epfd_, EPOLL_CTL_DEL, qp->conn.fd, nullptr);
  qp->watch.in_epoll = false;
  release(qp);
}

void Progress::release(Qp* qp) {
  {
    std::lock_guard lock(timers_mu_);
    released_.push_back(qp);
  }
  kick();
}

void Progress::sync(Qp* qp, drive::Ns now) {
  if (!qp->watch.in_epoll) return;
  if (qp->conn.peer_closed || !qp->connected()) {
    remove(qp); // nothing more will come; a closed socket would report EPOLLRDHUP forever
    return;
  }
  const bool held = qp->engine->rx_held();
  const bool parked = qp->policy.parked();
  const bool ring = qp->same_host.rx_ring;
  std::uint32_t want = 0;
  // A held stream is not read. A QP reading the ring is watched even when parked: its socket
  // brings only doorbells and the end, which its pollers do not read (qp_ring.cpp).
  if ((!parked || ring) && !held) want |= EPOLLIN | EPOLLRDHUP;
  // Room in a full socket is this thread's to use, unless the QP is parked: its pollers
  // retry it then (QpDrive::retry_full), and the timer takes the QP back when they stop. A
  // full ring has no EPOLLOUT: the peer rings back.
  if (qp->conn.want_write && !parked && !qp->same_host.tx_ring) want |= EPOLLOUT;
  if (want != qp->watch.events) {
    epoll_event ev{};
    ev.events = want;
    ev.data.ptr = qp;
    handed_to_epoll(this);
    ::epoll_ctl(epfd_, EPOLL_CTL_MOD, qp->conn.fd, &ev);
    qp->watch.events = want;
  }
  // Once on the list, the QP is looked at by its poll_at() of then, and every look computes it
  // again: taking the list's lock on each drive of a parked QP would be a lock shared by the
  // context on every message.
  if ((parked || held || qp->policy.ring_look_due()) && !qp->watch.timed) schedule(qp, now);
  // Octets left in the ring by a drive that took their doorbells: read on now, even if the QP
  // was on the list for later (schedule() brings its time forward and wakes this thread).
  else if (qp->policy.ring_left())
    schedule(qp, now);
}

void Progress::set_parked(Qp* qp, bool parked, drive::Ns now) {
  if (qp->policy.parked() == parked) return;
  qp->policy.set_parked(parked);
  for (Cq* cq : {qp->send_cq(), qp->recv_cq()})
    cq->parked.fetch_add(parked ? 1 : -1, std::memory_order_relaxed);
  sync(qp, now);
}

void Progress::polled(Qp* qp, drive::Ns now, bool empty) {
  switch (qp->policy.on_poll(now, empty, cq_armed(qp))) {
  case drive::QpDrive::Park::Park: set_parked(qp, true, now); break;
  case drive::QpDrive::Park::Unpark: set_parked(qp, false, now); break;
  case drive::QpDrive::Park::Keep: break;
  }
}

void Progress::schedule(Qp* qp, drive::Ns now) {
  const drive::QpDrive::Wake w = qp->policy.poll_at(now);
  if (w.at == drive::kNever) return;
  bool wake;
  {
    std::lock_guard lock(timers_mu_);
    if (!qp->watch.timed) {
      qp->watch.timed = true;
      qp->ref(); // the list's, dropped once the thread has no more reason to look
      qp->watch.at = w;
      timers_.push_back(qp);
    } else if (w.at < qp->watch.at.at) {
      qp->watch.at = w;
    }
    // Asleep past the new time (an awake thread computes its sleep again). The thread may be
    // in an epoll_wait without a timeout, chosen while the list was empty: a QP parked by a
    // poller then had no event (its socket unwatched) and nothing to take it back.
    wake = w.at < wake_at_;
  }
  if (wake) kick();
}

void Progress::run() {
  epoll_event evs[64];
  while (!stop_) {
    const drive::Ns wait = sleep_ns(mono_ns());
    int n;
    if (wait < 0) {
      n = ::epoll_wait(epfd_, evs, 64, -1);
    } else {
      // Deadlines of held posts are tens of microseconds away: epoll_wait counts milliseconds.
      const timespec ts{static_cast<time_t>(wait / 1'000'000'000), wait % 1'000'000'000};
      n = ::epoll_pwait2(epfd_, evs, 64, &ts, nullptr);
      if (n < 0 && errno == ENOSYS) // before Linux 5.11, or a seccomp profile without it
        n = ::epoll_wait(epfd_, evs, 64, static_cast<int>(wait / 1'000'000) + 1);
    }
    if (n < 0 && errno != EINTR) break;
    if (n > 0) taken_from_epoll(this);
    const std::int64_t now = mono_ns();
    if (n > 0) take_events(n, evs, now);
    check_timers(now);
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

void Progress::watch_grants(samehost::Host& host) {
  const int fd = host.grant_fd();
  std::lock_guard lock(timers_mu_);
  if (fd < 0 || fd == grant_fd_) return;
  grants_.store(&host, std::memory_order_release);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &grants_;
  handed_to_epoll(this);
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0) grant_fd_ = fd;
}

void Progress::take_events(int n, const epoll_event* evs, drive::Ns now) {
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.ptr == &grants_) { // a same-host peer asks for this process's grant
      if (samehost::Host* h = grants_.load(std::memory_order_acquire)) h->serve_grant();
      continue;
    }
    auto* qp = static_cast<Qp*>(evs[i].data.ptr);
    if (!qp) {
      std::uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(wakefd_, &v, sizeof v);
      continue;
    }
    std::lock_guard lock(qp->mu);
    if (!qp->connected()) continue;
    if (qp->policy.parked()) {
      // Room in its socket, an error or a hang-up reach a parked QP: send what waits for
      // the room; take the QP back on an error or hang-up, or once its pollers stopped.
      if (qp->policy.keeps_parked(now, evs[i].events & (EPOLLERR | EPOLLHUP))) {
        if (evs[i].events & EPOLLOUT) qp->drive(Driver::Writable, now);
        // A doorbell or the end for a QP that reads the ring: its pollers never read the socket.
        if (qp->same_host.rx_ring && (evs[i].events & (EPOLLIN | EPOLLRDHUP)))
          qp->drive(Driver::Progress, now);
        continue;
      }
      set_parked(qp, false, now);
    }
    qp->drive(Driver::Progress, now);
  }
}

drive::Ns Progress::sleep_ns(drive::Ns now) {
  std::lock_guard lock(timers_mu_);
  drive::Ns wait = released_.empty() ? -1 : 0;
  for (Qp* qp : timers_) {
    const drive::Ns d = std::max<drive::Ns>(qp->watch.at.at - now, 0);
    wait = wait < 0 ? d : std::min(wait, d);
  }
  // Under the lock with timers_: schedule() either sees this or its time is counted above.
  wake_at_ = wait < 0 ? drive::kNever : now + wait;
  return wait;
}

// Every timed QP is looked at on each wake-up (a kick may mean a CQ was armed), and asked what
// is due: a parked QP whose pollers stopped, a held Send that waited long enough, held posts
// at their deadline. A QP whose lock is taken is being driven right now (a poller spinning on
// its CQ holds it most of the time): it is looked at again a little later rather than waited
// for, which would hold up every other QP's events behind that poller.
void Progress::check_timers(drive::Ns now) {
  std::vector<Qp*> list;
  {
    std::lock_guard lock(timers_mu_);
    if (timers_.empty()) return;
    list.swap(timers_);
  }
  std::vector<Qp*> keep, done;
  for (Qp* qp : list) {
    std::unique_lock lock(qp->mu, std::try_to_lock);
    if (!lock) {
      std::lock_guard tl(timers_mu_);
      if (qp->watch.at.at <= now)
        qp->watch.at.at =
            now + (qp->watch.at.urgent ? drive::tuning::kLockedRetryNs : drive::tuning::kTickNs);
      keep.push_back(qp);
      continue;
    }
    drive::QpDrive::Wake next;
    if (qp->connected()) {
      // A buffer posted to its SRQ while another thread drove the QP (post_srq_recv then
      // only kicks this thread): the Send that waited takes it, and what followed is read.
      // Before the timer's look: a buffer posted before the wait ran out ends the wait.
      if (qp->retry_srq_hold(now)) qp->drive(Driver::Release, now);
      const drive::QpDrive::Timer t = qp->policy.on_timer(now, cq_armed(qp));
      if (t.unpark) {
        set_parked(qp, false, now); // level-triggered epoll reports what is already waiting
        qp->drive(Driver::Progress, now);
      }
      if (t.hold_expired) {
        qp->engine->rx_hold_expired(); // HX-059: the Terminate after all
        qp->drive(Driver::Progress, now);
      }
      if (t.send_held) qp->drive(Driver::Writable, now);
      // The ring's last look by a poll is old: what came after it came without a doorbell.
      if (t.ring_look) qp->drive(Driver::Progress, now);
      if (qp->connected()) next = qp->policy.poll_at(now);
    }
    qp->watch.timed = next.at != drive::kNever;
    {
      std::lock_guard tl(timers_mu_);
      qp->watch.at = next;
    }
    (qp->watch.timed ? keep : done).push_back(qp);
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
  if (!progress_owner || !progress_owner->inherited()) return;
  // librdmacm keeps one context per device for the life of the process, so a child of a
  // program that used the RDMA CM connects on its parent's context: it gets a thread of its
  // own, and the parent's is forgotten (a leak of one object per fork that used it).
  progress_owner->abandon();
  progress_run.store(nullptr, std::memory_order_release);
  [[maybe_unused]] Progress* forgotten = progress_owner.release();
}

int Context::start_progress() {
  std::lock_guard lock(mu);
  drop_inherited_progress();
  if (progress_owner) return 0;
  auto p = std::make_unique<Progress>();
  if (!p->ok()) return ENOMEM;
  progress_owner = std::move(p);
  progress_run.store(progress_owner.get(), std::memory_order_release);
  return 0;
}

void Context::add_drive_counters(const drive::Counters& c) {
  std::lock_guard lock(mu);
  drive_totals += c;
}

Context::~Context() {
  drop_inherited_progress();
  progress_run.store(nullptr, std::memory_order_release);
  progress_owner.reset(); // drops the thread's last references: those QPs count too
  if (log::enabled(log::Level::Info) && (drive_totals.posts_sent || drive_totals.posts_held))
    log::info("drive", std::string(dev ? dev->ibdev : "a device") +
                           " context closed: " + drive_totals.describe());
}

} // namespace uiwarp
