// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// UCMA emulation: every command librdmacm 44 issues, answered the way the
// kernel's rdma_cm answers them for an iWARP device (the commands: ucma_cmd.cpp):
//  - INIT_QP_ATTR masks of iw_cm_init_qp_attr (STATE|ACCESS|PORT, RTS: PORT);
//  - CONNECT completes with ESTABLISHED, never CONNECT_RESPONSE, and ACCEPT
//    returns once the MPA Reply is out and the QP is in RTS;
//  - DESTROY_ID reports exactly the events delivered for the id (a
//    CONNECT_REQUEST counts against the listener).
// This file: the channels' fds, what uiwarpd sends, and the provider hand-shake.
// Connection set-up is uiwarpd's (daemon_proto.hpp); the connected socket goes
// to the provider through the ops it registered (provider_api.hpp).
#include "ucma.hpp"

#include "ucma_addr.hpp"
#include "ucma_emu.hpp"
#include "uiwarp/daemon_start.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/log.hpp"
#include "uiwarp/thread.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace uiwarp::ucma {

namespace {

void log_error(const std::string& m) { log::error("rdma_cm", m); }

// The longest path text uiwarpd is sent (ShimOps::qp_path): a reason is a line.
constexpr std::size_t kMaxPathText = 256;

// rdma_ucm_conn_param::private_data_len is a u8: 255 at most (uiwarpd never passes more).
std::uint8_t private_data_len(std::size_t n) {
  return static_cast<std::uint8_t>(std::min<std::size_t>(n, 255));
}

// A peer's private data and IRD/ORD as the event's rdma_ucm_conn_param carries them
// (cma_iw_handler: the peer's IRD bounds our ORD and vice versa).
Event conn_event(const std::vector<std::uint8_t>& private_data, std::uint32_t ird,
                 std::uint32_t ord) {
  Event e;
  rdma_ucm_conn_param& c = e.resp.param.conn;
  c.private_data_len = private_data_len(private_data.size());
  std::memcpy(c.private_data, private_data.data(), c.private_data_len);
  c.initiator_depth = static_cast<std::uint8_t>(std::min<std::uint32_t>(ird, 255));
  c.responder_resources = static_cast<std::uint8_t>(std::min<std::uint32_t>(ord, 255));
  return e;
}

} // namespace

Ucma& Ucma::get() {
  static Ucma* u = [] {
    auto* made = new Ucma; // never destroyed: other threads may still be inside
    ::pthread_atfork(fork_prepare, fork_parent, fork_child);
    return made;
  }();
  return *u;
}

// fork(): the child keeps the ids it inherited (as the kernel's child shares the parent's
// rdma_cm files) but not the parent's uiwarpd link nor its IB-style connects, whose threads
// stayed in the parent. The lock is taken around fork when it is free, so that the child's copy
// of the state is whole; not when it is held, because the forking thread may hold it itself
// (starting uiwarpd again, ensure_daemon, forks under it). Per thread: two threads may fork.
namespace {
thread_local bool fork_locked = false;
}
void Ucma::fork_prepare() {
  // POSIX trylock (std::mutex::try_lock by its owner is undefined): EBUSY when held by anyone.
  fork_locked = ::pthread_mutex_trylock(get().mu_.native_handle()) == 0;
}
void Ucma::fork_parent() {
  if (fork_locked) get().mu_.unlock();
}
void Ucma::fork_child() {
  Ucma& u = get();
  u.daemon.forget_after_fork();
  u.ib_.clear();
  u.paths_.clear(); // the parent's connections: its provider reports them
  u.relistening_ = false;
  if (fork_locked) u.mu_.unlock();
}

int Ucma::open_channel(int flags) {
  int fd = ::eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC | ((flags & O_NONBLOCK) ? EFD_NONBLOCK : 0));
  if (fd < 0) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  st.open_channel(fd);
  return fd;
}

bool Ucma::is_channel(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  return st.is_channel(fd);
}

void Ucma::closed(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Id& id : st.close_channel(fd))
    release(id);
}

bool Ucma::register_provider(const ProviderOps* ops) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ops || ops->abi != kProviderAbi) {
    log_error("the provider is from another uiwarp installation (ABI " +
              std::to_string(ops ? ops->abi : 0) + ", the shim's " + std::to_string(kProviderAbi) +
              "): rdma_cm cannot attach connections to it");
    return false;
  }
  provider_ = ops;
  return true;
}

void Ucma::qp_event(std::uint32_t qp_num, QpEvent, const char* reason, const char* drive) {
  std::lock_guard<std::mutex> lock(mu_);
  auto path = paths_.find(qp_num);
  // uiwarpd keeps why it ended (uiwarp conn show --closed); a link that is down loses it.
  for (const auto& [h, id] : st.ids())
    if (id.qp_num == qp_num && id.connected()) {
      daemon.post(proto::Closed{id.src, id.dst, qp_num, reason ? reason : "", drive ? drive : "",
                                path != paths_.end() ? path->second.text : ""});
      break;
    }
  st.qp_ended(qp_num);
  // During attach() the entry stays for its Attached, which then drops it.
  if (path != paths_.end() && path->second.announced)
    paths_.erase(path);
  else if (path != paths_.end())
    path->second.ended = true;
}

void Ucma::qp_path(std::uint32_t qp_num, const char* text) {
  if (!text) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = paths_.find(qp_num);
  if (it == paths_.end()) return; // no connection of the shim's: nobody to tell
  // uiwarpd takes strings of up to 1024 octets (proto::decode); a reason is a line, not a page.
  it->second.text = std::string(text).substr(0, kMaxPathText);
  if (it->second.announced)
    daemon.post(proto::Path{it->second.local, it->second.peer, qp_num, it->second.text});
}

void Ucma::queued(int channel) {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::syscall(SYS_write, channel, &one, sizeof one);
  cv_.notify_all();
}

void Ucma::taken(int channel) {
  std::uint64_t v;
  [[maybe_unused]] ssize_t n = ::syscall(SYS_read, channel, &v, sizeof v); // one per event
}

int Ucma::get_event(int fd, Event* out, std::unique_lock<std::mutex>& lock) {
  const int flags = ::fcntl(fd, F_GETFL);
  const bool nonblock = flags >= 0 && (flags & O_NONBLOCK);
  // The shim's write() found `fd` to be a channel (the kernel's fdget) before this thread
  // took the lock; a channel missing now was closed in between (rping's CM thread asks for
  // its next event while main tears down). The kernel's write holds the file and sleeps on.
  const std::optional<std::uint64_t> gen = st.generation(fd);
  while (st.take_event(fd, gen, out) != State::Take::Delivered) {
    if (nonblock) return EAGAIN;
    cv_.wait(lock);
  }
  return 0;
}

// uiwarpd exited (or was restarted): established connections are the application's own and
// carry on; a connect still in the MPA exchange will never be answered, so it fails now, as
// the kernel's iw_cm reports a lost connect (CONNECT_ERROR). Waiters in await() see the link
// down. The next command that needs the daemon connects again, and listeners are registered
// again with a new daemon at once (relisten()).
void Ucma::gone() {
  for (const auto& [h, id] : st.ids())
    if (id.listening() && !relistening_) {
      relistening_ = true;
      start_thread([this] { relisten(); }).detach();
    }
  if (st.fail_connects(-ECONNABORTED))
    log_error("uiwarpd went away while connecting; connect failed");
  ib_lost();
}

// Listening ids outlive their uiwarpd: their sockets still listen (the kernel queues new
// connections in the backlog), so a new daemon takes them over. The per-user daemon that
// uiwarp-run started is started again (UIWARPD_RESTART); systemd starts the system one when its
// socket is connected to. Tries with a growing pause (20 ms to 1 s) until every listener is
// registered or none is left; a daemon that refuses (another protocol version) is named once.
void Ucma::relisten() {
  std::string said;
  for (int pause_ms = 20;; pause_ms = std::min(pause_ms * 2, 1000)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    std::string err;
    const char* sock = Env::get().nonempty(EnvVar::DaemonSocket);
    const char* start = Env::get().nonempty(EnvVar::DaemonRestart);
    if (sock && start) ensure_daemon(start, sock, &err);
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<std::uint32_t> listening;
    for (auto& [h, id] : st.ids())
      if (id.listening() && id.sock >= 0) listening.push_back(h);
    if (listening.empty()) {
      relistening_ = false;
      return;
    }
    if (!daemon.connected() && !daemon.connect(&err)) {
      if (err != said) log_error("uiwarpd went away: " + err);
      said = err;
      continue;
    }
    for (std::uint32_t h : listening) {
      Id* id = st.find(h);
      if (!id || !id->listening() || id->sock < 0 || !daemon.connected()) continue;
      std::optional<proto::Packet> p;
      if (!daemon.post(proto::Listen{h, id->src, id->backlog, id->tos,
                                     mpa_overrides(id->dev, id->src), device_policies(id->src)},
                       id->sock))
        p = daemon.await<proto::ListenReply>(h, lock);
      if (p && std::get<proto::ListenReply>(p->msg).status)
        log_error("uiwarpd refused the listener on " + proto::addr_string(id->src) + ": " +
                  std::get<proto::ListenReply>(p->msg).reason);
    }
    if (daemon.connected()) {
      log::info("rdma_cm", "uiwarpd went away; " + std::to_string(listening.size()) +
                               " listener(s) registered again with the new uiwarpd");
      relistening_ = false;
      return;
    }
  }
}

void Ucma::conn_request(const proto::ConnRequest& m) {
  Id* listener =
      m.listen_id <= UINT32_MAX ? st.find(static_cast<std::uint32_t>(m.listen_id)) : nullptr;
  if (!listener || !listener->listening()) {
    daemon.post(proto::Reject{m.token, {}});
    return;
  }
  Id child;
  child.uid = listener->uid; // until ACCEPT names the child's own uid
  child.channel = listener->channel;
  child.ps = listener->ps;
  child.qp_type = listener->qp_type;
  child.src = m.src;
  child.dst = m.dst;
  child.state = IdState::Connect; // cma_ib_new_conn_id: a request's id is born connecting
  child.iw = true;
  child.child = true;
  child.token = m.token;
  child.same_host = m.same_host;
  child.dev = listener->dev ? listener->dev : device_for(m.src);
  Event e = conn_event(m.private_data, m.ird, m.ord);
  e.charged_to = listener->handle;     // counts against the listener (DESTROY_ID)
  e.resp.id = st.add_id(child).handle; // std::map: `listener` stays valid
  st.queue(*listener, RDMA_CM_EVENT_CONNECT_REQUEST, 0, e);
}

void Ucma::connect_reply(const proto::ConnectReply& m, int fd, std::unique_lock<std::mutex>& lock) {
  if (m.id & kIbId) {
    ib_reply(m, fd, lock);
    return;
  }
  const auto handle = static_cast<std::uint32_t>(m.id);
  Id* id = st.find(handle);
  if (!id || !id->connecting()) {
    if (fd >= 0) sys_close(fd);
    return;
  }
  Event e = conn_event(m.private_data, m.params.peer_ird, m.params.peer_ord);
  // uiwarpd connected the id's own socket and passes it back; the QP will own it.
  if (fd < 0) std::swap(fd, id->sock);
  close_sock(*id);
  if (m.status) {
    if (fd >= 0) sys_close(fd);
    if (!m.reason.empty()) log_error(m.reason);
    std::uint32_t ev = (m.status == ECONNREFUSED || m.status == ECONNRESET) ? RDMA_CM_EVENT_REJECTED
                       : m.status == ETIMEDOUT ? RDMA_CM_EVENT_UNREACHABLE
                                               : RDMA_CM_EVENT_CONNECT_ERROR;
    id->state = IdState::AddrResolved; // the connect failed: the id may be destroyed or reused
    st.queue(*id, ev, -m.status, e);
    return;
  }
  int err = attach(id->qp_num, fd, m.params, lock);
  id = st.find(handle);
  if (!id) return;
  if (err) {
    log_error("cannot attach the connection to QP " + std::to_string(id->qp_num) + ": " +
              std::strerror(err));
    id->state = IdState::AddrResolved;
    st.queue(*id, RDMA_CM_EVENT_CONNECT_ERROR, -err, e);
    return;
  }
  established(*id, e);
}

void Ucma::established(Id& id, Event e) {
  // Only a connecting id reaches here (the reply's and accept's checks above): anything else
  // is the emulation's own mistake, said, and no ESTABLISHED goes to the program.
  if (!st.connected(id, e))
    log_error("rdma_cm emulation: id " + std::to_string(id.handle) +
              " became established in "
              "state " +
              name(id.state) + "; no ESTABLISHED event was queued");
}

int Ucma::attach(std::uint32_t qp_num, int fd, const iwarp::ConnParams& p,
                 std::unique_lock<std::mutex>& lock) {
  const ProviderOps* ops = provider_;
  if (!ops) {
    sys_close(fd);
    return ENODEV;
  }
  // uiwarpd lists the connection with the QP that took it (uiwarp conn show); the addresses are
  // read now, as the QP owns the socket once attach() returns.
  proto::Attached a{{}, {}, qp_num, {}, {}};
  socklen_t la = sizeof a.local, pa = sizeof a.peer;
  const bool named = ::getsockname(fd, reinterpret_cast<sockaddr*>(&a.local), &la) == 0 &&
                     ::getpeername(fd, reinterpret_cast<sockaddr*>(&a.peer), &pa) == 0;
  // The path until the provider says otherwise (qp_path, from attach() on): without the MPA
  // exchange's agreement it can only be TCP.
  paths_[qp_num] = QpPath{a.local, a.peer,
                          p.same_host                       ? ""
                          : !Env::get().same_host_enabled() ? "tcp: UIWARP_SAME_HOST=off"
                                                            : "tcp: " + iwarp::same_host_refusal(p),
                          false, false};
  st.set_attaching(qp_num, true);
  lock.unlock();
  int err = ops->attach(qp_num, fd, p);
  if (!err && named) {
    if (auto d = device_for(a.local)) a.device = d->name;
  }
  lock.lock();
  st.set_attaching(qp_num, false);
  auto path = paths_.find(qp_num);
  if (err) {
    sys_close(fd);
    if (path != paths_.end()) paths_.erase(path);
    return err;
  }
  if (path != paths_.end()) {
    a.path = path->second.text;
    path->second.announced = named;
  }
  if (named) daemon.post(a);
  if (path != paths_.end() && (!named || path->second.ended)) paths_.erase(path);
  return err;
}

std::optional<iwarp::SameHostOffer> Ucma::same_host_offer(std::uint32_t qp_num,
                                                          std::unique_lock<std::mutex>& lock) {
  const ProviderOps* ops = provider_;
  if (!ops || !ops->same_host_offer) return std::nullopt;
  iwarp::SameHostOffer offer;
  lock.unlock();
  const bool made = ops->same_host_offer(qp_num, &offer);
  lock.lock();
  if (!made) return std::nullopt;
  if (!offer.valid()) { // uiwarpd would refuse the Accept as a malformed message
    log_error("the provider's same-host offer for QP " + std::to_string(qp_num) +
              " has the wrong magic or version; the MPA Reply goes without one");
    return std::nullopt;
  }
  return offer;
}

void Ucma::release(Id& id) {
  if (id.listening()) daemon.post(proto::Unlisten{id.handle});
  // uiwarpd holds a copy of a listening socket until it reads the Unlisten; the kernel frees
  // the port when rdma_destroy_id returns (cma_release_port), and perftest binds it again at
  // once. shutdown() ends the listen for every copy (inet_shutdown -> tcp_disconnect).
  if (id.listening() && id.sock >= 0) ::shutdown(id.sock, SHUT_RDWR);
  close_sock(id);
  // The kernel rejects a request whose id is destroyed unanswered.
  if (id.child && !id.accepted) daemon.post(proto::Reject{id.token, {}});
}

int Ucma::bind_id(Id& id, sockaddr_storage a) {
  if (id.bound) return EINVAL; // cma_comp_exch(IDLE, ADDR_BOUND)
  if (int err = check_bind_address(a)) return err;
  std::optional<DeviceInfo> dev = device_for(a);
  if (!dev) return ENODEV; // cma_acquire_dev_by_src_ip: no uiwarp device on that netdev
  if (int err = st.bind_conflict(id, a)) return err;
  int s = bound_socket(a, id.afonly);
  if (s < 0) return errno;
  id.sock = s;
  id.src = a;
  id.dev = dev;
  id.bound = true;
  return 0;
}

void Ucma::close_sock(Id& id) {
  if (id.sock >= 0) sys_close(id.sock);
  id.sock = -1;
}

int open_channel(int flags) { return Ucma::get().open_channel(flags); }
bool is_channel(int fd) { return Ucma::get().is_channel(fd); }
ssize_t command(int fd, const void* buf, std::size_t len) {
  return Ucma::get().command(fd, buf, len);
}
void closed(int fd) { Ucma::get().closed(fd); }
void fix_stat(struct stat* st) {
  st->st_mode = S_IFCHR | 0666;
  st->st_rdev = makedev(10, 58); // misc device, as the kernel's rdma_cm
}

} // namespace uiwarp::ucma
