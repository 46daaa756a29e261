// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd: the uiwarp connection manager. Applications' rdma_cm emulation (the
// shim) asks it to listen, connect, accept and reject; it owns the TCP sockets
// until the MPA exchange (RFC 5044 §7.1, RFC 6581) is done, under the local
// policy, and then hands each connected socket to the application with
// SCM_RIGHTS. One instance per user and network namespace, or one system-wide
// (socket-activated by uiwarpd.socket, see uiwarpd(8)); one event loop.
#include "cm_proto.hpp"
#include "iwarp/mpa_startup.hpp"
#include "netmon.hpp"
#include "systemd_activation.hpp"
#include "uiwarp/state.hpp"
#include "uiwarpd_config.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <memory>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <optional>
#include <poll.h>
#include <set>
#include <signal.h>
#include <string>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace uiwarp::cm {

namespace {

using Clock = iwarp::MpaClock;

void log(const std::string& s) { std::fprintf(stderr, "uiwarpd: %s\n", s.c_str()); }

class Fd {
public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

private:
  int fd_;
};

// epoll data: what an fd is, and the fd.
enum class Kind : std::uint32_t { Unix = 1, Client, Listener, Session, Netlink };
std::uint64_t tag(Kind k, int fd) { return (std::uint64_t(k) << 32) | std::uint32_t(fd); }

struct Listener {
  Fd fd;
  int client;       // owner's Unix fd
  std::uint64_t id; // the shim's listen id
  sockaddr_storage addr{};
};

struct Session {
  Fd fd;
  int client = -1;
  std::uint64_t id = 0;    // initiator: the shim's connect id; responder: listen id
  std::uint64_t token = 0; // responder: handle for Accept/Reject
  std::optional<iwarp::MpaStartup> mpa;
  bool connecting = false;   // initiator: TCP connect in progress
  bool notified = false;     // responder: ConnRequest sent
  std::vector<std::byte> pd; // initiator: private data for the Request
  std::uint16_t ird = 0, ord = 0;
  Clock::time_point deadline;
  sockaddr_storage local{}, peer{};
  std::optional<Msg> held; // initiator: the ConnectReply held for first-fpdu-delay-ms
};

// An application connected to us (SO_PEERCRED).
struct Client {
  uid_t uid = 0;
  pid_t pid = 0;
};

// A connection handed to an application: kept for `uiwarp conn show` while its owner is
// connected to us and the kernel still has the TCP connection.
struct Handed {
  int client = -1;
  pid_t pid = 0;
  uid_t uid = 0;
  sockaddr_storage local{}, peer{};
  ConnParams params;
  Clock::time_point since;
};

struct Counters {
  std::uint64_t connects = 0, connected = 0, connect_failed = 0, rejected_by_peer = 0;
  std::uint64_t requests = 0, accepted = 0, rejected = 0;
  std::uint64_t mpa_errors = 0, timeouts = 0, refused_clients = 0, link_events = 0;
};

// rdma_set_option(RDMA_OPTION_ID_TOS) becomes the TCP connection's TOS / traffic class, as the
// kernel's iWARP drivers apply the cm_id's tos to their socket.
void set_tos(int fd, int family, int tos) {
  if (fd < 0 || tos < 0) return;
  if (family == AF_INET6)
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof tos);
  else
    ::setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
}

std::string process_name(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(f, name);
  return name.empty() ? "?" : name;
}

std::string describe(const ConnParams& p) {
  static const char* const rtr[] = {"send", "write", "read"};
  std::string s = std::string(p.version ? "IETF" : "RDMAC") + " crc " + (p.crc ? "on" : "off") +
                  " markers " + (p.markers_tx ? "tx" : "-") + "/" + (p.markers_rx ? "rx" : "-") +
                  " p2p ";
  // The initiator sends the RTR (RFC 6581 §7.1); the responder only waits for it.
  s += p.rtr < 0      ? "off"
       : !p.initiator ? "on"
       : p.rtr < 3    ? std::string("rtr ") + rtr[p.rtr]
                      : "on";
  return s + " ird " + std::to_string(p.ird) + " ord " + std::to_string(p.ord) +
         (p.large_fpdu ? " large-fpdu" : "");
}

ConnParams params_of(const iwarp::MpaResult& r, iwarp::MpaRole role) {
  ConnParams p;
  p.version = r.version;
  p.crc = r.crc;
  p.markers_tx = r.markers_tx;
  p.markers_rx = r.markers_rx;
  p.ird = r.ird;
  p.ord = r.ord;
  p.initiator = role == iwarp::MpaRole::Initiator;
  p.rtr = r.p2p ? static_cast<std::int32_t>(r.rtr.value_or(iwarp::RtrType::Send)) : -1;
  p.peer_ird = r.peer_ird.value_or(0);
  p.peer_ord = r.peer_ord.value_or(0);
  p.large_fpdu = r.large_fpdu;
  return p;
}

std::vector<std::uint8_t> to_u8(const std::vector<std::byte>& v) {
  std::vector<std::uint8_t> o(v.size());
  std::transform(v.begin(), v.end(), o.begin(), [](std::byte b) { return std::uint8_t(b); });
  return o;
}
std::vector<std::byte> to_bytes(const std::vector<std::uint8_t>& v) {
  std::vector<std::byte> o(v.size());
  std::transform(v.begin(), v.end(), o.begin(), [](std::uint8_t b) { return std::byte(b); });
  return o;
}

class Daemon {
public:
  // any_user: the system-wide daemon (uiwarpd.socket) serves every local user; each client
  // still reaches only its own listeners and connections.
  Daemon(Config cfg, Fd unix_fd, std::string socket_path, bool any_user = false)
      : cfg_(std::move(cfg)), unix_(std::move(unix_fd)), socket_path_(std::move(socket_path)),
        any_user_(any_user) {
    ep_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    watch(unix_.get(), Kind::Unix, EPOLLIN);
    if (net_.ok())
      watch(net_.fd(), Kind::Netlink, EPOLLIN);
    else
      log(net_.error());
  }

  int run() {
    epoll_event evs[64];
    while (!stop_) {
      int n = ::epoll_wait(ep_.get(), evs, 64, timeout_ms());
      if (n < 0 && errno != EINTR) return 1;
      for (int i = 0; i < n; ++i) {
        int fd = static_cast<int>(evs[i].data.u64 & 0xffffffff);
        switch (static_cast<Kind>(evs[i].data.u64 >> 32)) {
        case Kind::Unix: accept_client(); break;
        case Kind::Client: client_ready(fd); break;
        case Kind::Listener: accept_tcp(fd); break;
        case Kind::Session: session_ready(fd, evs[i].events); break;
        case Kind::Netlink: net_changed(); break;
        }
      }
      expire();
    }
    return 0;
  }
  void stop() { stop_ = true; }

private:
  void watch(int fd, Kind k, std::uint32_t events, int op = EPOLL_CTL_ADD) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag(k, fd);
    ::epoll_ctl(ep_.get(), op, fd, &ev);
  }

  int timeout_ms() const {
    if (sessions_.empty()) return -1;
    auto next = Clock::time_point::max();
    for (const auto& [fd, s] : sessions_)
      next = std::min(next, s.deadline);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60000));
  }

  // ---- applications ----

  void accept_client() {
    Fd c(::accept4(unix_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (c.get() < 0) return;
    // One user's connections are not another's (SO_PEERCRED).
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) ||
        (!any_user_ && cred.uid != ::geteuid() && cred.uid != 0)) {
      log("refused a client of uid " + std::to_string(cred.uid));
      ++counters_.refused_clients;
      return;
    }
    // Its TCP connections would be made from our network namespace, not its own.
    if (!same_netns(unix_.get(), c.get())) {
      log("refused a client (pid " + std::to_string(cred.pid) + ") from another network namespace");
      return;
    }
    watch(c.get(), Kind::Client, EPOLLIN);
    clients_[c.get()] = Client{cred.uid, cred.pid};
    c.release();
  }

  void drop_client(int c) {
    ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, c, nullptr);
    for (auto it = listeners_.begin(); it != listeners_.end();)
      it = it->second.client == c ? listeners_.erase(it) : std::next(it);
    for (auto it = sessions_.begin(); it != sessions_.end();)
      it = it->second.client == c ? sessions_.erase(it) : std::next(it);
    std::erase_if(handed_, [c](const Handed& h) { return h.client == c; });
    clients_.erase(c);
    ::close(c);
  }

  void client_ready(int c) {
    auto m = recv_msg(c, nullptr);
    if (!m) {
      if (errno != EAGAIN) drop_client(c);
      return;
    }
    switch (m->type) {
    case MsgType::Listen: listen(c, *m); break;
    case MsgType::Unlisten:
      for (auto it = listeners_.begin(); it != listeners_.end();)
        it = (it->second.client == c && it->second.id == m->id) ? listeners_.erase(it)
                                                                : std::next(it);
      break;
    case MsgType::Connect: connect(c, *m); break;
    case MsgType::Accept: accept(c, *m); break;
    case MsgType::Reject: reject(c, *m); break;
    case MsgType::Resolve: resolve(c, *m); break;
    case MsgType::Status: status(c, m->id == 1); break;
    default: log("unexpected message " + std::to_string(int(m->type))); break;
    }
  }

  void reply(int c, Msg m, int fd = -1) {
    if (int err = send_msg(c, m, fd)) log(std::string("reply failed: ") + std::strerror(err));
  }

  // ---- passive side ----

  void listen(int c, const Msg& m) {
    Msg r;
    r.type = MsgType::ListenReply;
    r.id = m.id;
    Fd s(::socket(m.src.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    int one = 1;
    ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    set_tos(s.get(), m.src.ss_family, m.tos); // accepted sockets inherit it
    if (m.afonly >= 0 && m.src.ss_family == AF_INET6)
      ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &m.afonly, sizeof m.afonly);
    socklen_t alen = m.src.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (s.get() < 0 || ::bind(s.get(), reinterpret_cast<const sockaddr*>(&m.src), alen) ||
        ::listen(s.get(), static_cast<int>(m.backlog ? m.backlog : 128))) {
      r.status = errno;
      r.reason = "listen on " + addr_string(m.src) + ": " + std::strerror(errno);
      reply(c, r);
      return;
    }
    socklen_t len = sizeof r.src;
    ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&r.src), &len);
    watch(s.get(), Kind::Listener, EPOLLIN);
    int fd = s.get();
    listeners_[fd] = Listener{std::move(s), c, m.id, r.src};
    reply(c, r);
  }

  void accept_tcp(int lfd) {
    auto it = listeners_.find(lfd);
    if (it == listeners_.end()) return;
    for (;;) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      Fd s(::accept4(lfd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (s.get() < 0) return;
      ++counters_.requests;
      Session ss;
      ss.client = it->second.client;
      ss.id = it->second.id;
      ss.token = next_token_++;
      ss.peer = peer;
      len = sizeof ss.local;
      ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&ss.local), &len);
      ss.mpa = iwarp::MpaStartup::responder(cfg_.mpa, Clock::now());
      ss.deadline = ss.mpa->deadline();
      watch(s.get(), Kind::Session, EPOLLIN | EPOLLRDHUP);
      int fd = s.get();
      ss.fd = std::move(s);
      sessions_[fd] = std::move(ss);
    }
  }

  Session* by_token(int c, std::uint64_t token) {
    for (auto& [fd, s] : sessions_)
      if (s.token == token && s.client == c) return &s;
    return nullptr;
  }

  void accept(int c, const Msg& m) {
    Msg r;
    r.type = MsgType::AcceptReply;
    r.id = m.token;
    Session* s = by_token(c, m.token);
    if (!s || !s->mpa || s->mpa->state() != iwarp::MpaState::RequestReceived) {
      r.status = s ? ECONNRESET : ENOENT;
      r.reason = s ? "the connection failed before it was accepted" : "no such connection request";
      reply(c, r);
      return;
    }
    s->mpa->accept(to_bytes(m.private_data), static_cast<std::uint16_t>(m.ird),
                   static_cast<std::uint16_t>(m.ord));
    // The Reply goes out before the application's rdma_accept returns (perftest
    // posts right after it): write it synchronously.
    if (!flush_output(*s, true) || s->mpa->state() != iwarp::MpaState::Established) {
      r.status = ECONNRESET;
      r.reason = s->mpa->state() == iwarp::MpaState::Failed ? s->mpa->error().message
                                                            : "could not send the MPA Reply";
      reply(c, r);
      close_session(s->fd.get());
      return;
    }
    r.params = params_of(s->mpa->result(), iwarp::MpaRole::Responder);
    r.src = s->local;
    r.dst = s->peer;
    ++counters_.accepted;
    hand_over(*s, r);
  }

  void reject(int c, const Msg& m) {
    Session* s = by_token(c, m.token);
    if (!s || !s->mpa || s->mpa->state() != iwarp::MpaState::RequestReceived) return;
    ++counters_.rejected;
    s->mpa->reject(to_bytes(m.private_data));
    flush_output(*s, true);
    close_session(s->fd.get());
  }

  // ---- active side ----

  void connect(int c, const Msg& m) {
    Msg r;
    r.type = MsgType::ConnectReply;
    r.id = m.id;
    ++counters_.connects;
    Fd s(::socket(m.dst.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    socklen_t alen = m.dst.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    set_tos(s.get(), m.dst.ss_family, m.tos);
    if (s.get() >= 0 && m.src.ss_family == m.dst.ss_family)
      ::bind(s.get(), reinterpret_cast<const sockaddr*>(&m.src), alen); // best effort: source IP
    if (s.get() < 0 || (::connect(s.get(), reinterpret_cast<const sockaddr*>(&m.dst), alen) &&
                        errno != EINPROGRESS)) {
      r.status = errno;
      r.reason = "connect to " + addr_string(m.dst) + ": " + std::strerror(errno);
      ++counters_.connect_failed;
      reply(c, r);
      return;
    }
    Session ss;
    ss.client = c;
    ss.id = m.id;
    ss.connecting = true;
    ss.pd = to_bytes(m.private_data);
    ss.ird = static_cast<std::uint16_t>(m.ird);
    ss.ord = static_cast<std::uint16_t>(m.ord);
    ss.peer = m.dst;
    auto timeout = m.timeout_ms ? std::chrono::milliseconds(m.timeout_ms) : cfg_.mpa.timeout;
    ss.deadline = Clock::now() + timeout;
    watch(s.get(), Kind::Session, EPOLLOUT | EPOLLIN | EPOLLRDHUP);
    int fd = s.get();
    ss.fd = std::move(s);
    sessions_[fd] = std::move(ss);
  }

  void connect_reply(Session& s, int status, const std::string& reason) {
    if (status) ++counters_.connect_failed;
    Msg r;
    r.type = MsgType::ConnectReply;
    r.id = s.id;
    r.status = status;
    r.reason = reason;
    r.dst = s.peer;
    r.src = s.local;
    if (s.mpa && (s.mpa->state() == iwarp::MpaState::Rejected ||
                  s.mpa->state() == iwarp::MpaState::Established)) {
      r.private_data = to_u8(s.mpa->result().peer_private_data);
      r.params = params_of(s.mpa->result(), iwarp::MpaRole::Initiator);
    }
    reply(s.client, r);
  }

  // ---- sessions ----

  // Writes the MPA machine's output; `block` waits (briefly) for room.
  bool flush_output(Session& s, bool block) {
    while (!s.mpa->output().empty()) {
      iwarp::ConstBytes out = s.mpa->output();
      ssize_t n = ::send(s.fd.get(), out.data(), out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        s.mpa->consume_output(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && block) {
        pollfd p{s.fd.get(), POLLOUT, 0};
        if (::poll(&p, 1, 2000) > 0) continue;
      }
      return n < 0 && errno == EAGAIN; // the rest on EPOLLOUT
    }
    return true;
  }

  void hand_over(Session& s, Msg& r) {
    int fd = s.fd.get();
    auto cl = clients_.find(s.client);
    handed_.push_back(Handed{s.client, cl != clients_.end() ? cl->second.pid : 0,
                             cl != clients_.end() ? cl->second.uid : 0, s.local, s.peer, r.params,
                             Clock::now()});
    ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, fd, nullptr);
    reply(s.client, r, fd);
    sessions_.erase(fd); // closes our copy; the application has its own
  }

  void close_session(int fd) {
    ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, fd, nullptr);
    sessions_.erase(fd);
  }

  void fail_session(Session& s, int status, const std::string& why) {
    if (s.mpa && s.mpa->role() == iwarp::MpaRole::Initiator) connect_reply(s, status, why);
    if (s.mpa && !s.mpa->output().empty()) flush_output(s, false); // e.g. a TERM, or a Rev1 Reply
    close_session(s.fd.get());
  }

  void session_ready(int fd, std::uint32_t events) {
    auto it = sessions_.find(fd);
    if (it == sessions_.end()) return;
    Session& s = it->second;
    if (s.connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err) {
        connect_reply(s, err, "connect to " + addr_string(s.peer) + ": " + std::strerror(err));
        close_session(fd);
        return;
      }
      if (!(events & EPOLLOUT)) return;
      s.connecting = false;
      len = sizeof s.local;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&s.local), &len);
      iwarp::MpaPolicy p = cfg_.mpa;
      if (s.ird) p.ird = s.ird;
      if (s.ord) p.ord = s.ord;
      s.mpa = iwarp::MpaStartup::initiator(p, std::move(s.pd), Clock::now());
      if (s.mpa->state() == iwarp::MpaState::Failed) {
        fail_session(s, EINVAL, s.mpa->error().message);
        return;
      }
      watch(fd, Kind::Session, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
    }
    if (!flush_output(s, false)) {
      fail_session(s, ECONNRESET, "write failed");
      return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) read_mpa(s);
  }

  void read_mpa(Session& s) {
    if (s.notified) {
      // Waiting for the application's Accept/Reject: only notice a peer that leaves.
      char c;
      if (::recv(s.fd.get(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) close_session(s.fd.get());
      return;
    }
    std::byte buf[2048];
    // Peek, then consume exactly the MPA frame: what follows belongs to the data path.
    ssize_t n = ::recv(s.fd.get(), buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      s.mpa->on_peer_closed();
    } else {
      std::size_t used = s.mpa->on_bytes(iwarp::ConstBytes(buf, static_cast<std::size_t>(n)));
      [[maybe_unused]] ssize_t k = ::recv(s.fd.get(), buf, used, MSG_DONTWAIT);
    }
    step(s);
  }

  void step(Session& s) {
    switch (s.mpa->state()) {
    case iwarp::MpaState::AwaitRequest:
    case iwarp::MpaState::AwaitReply: flush_output(s, false); return;
    case iwarp::MpaState::RequestReceived: {
      Msg r;
      r.type = MsgType::ConnRequest;
      r.id = s.id;
      r.token = s.token;
      r.src = s.local;
      r.dst = s.peer;
      r.private_data = to_u8(s.mpa->request().private_data);
      if (s.mpa->request().enhanced) {
        r.ird = s.mpa->request().enhanced->ird;
        r.ord = s.mpa->request().enhanced->ord;
      } else {
        // No IRD/ORD on the wire (RFC 5044 rev 1, or rev 2 without RFC 6581 §9.1's
        // enhanced data): nothing was negotiated, so the application decides. Report our
        // own policy, not 0: librdmacm's rdma_accept(NULL) caps the QP's ORD at the peer
        // IRD reported here, and 0 would forbid every RDMA Read (rping's server fails).
        r.ird = cfg_.mpa.ord;
        r.ord = cfg_.mpa.ird;
      }
      s.notified = true;
      reply(s.client, r);
      return;
    }
    case iwarp::MpaState::Established: {
      flush_output(s, true);
      Msg r;
      r.type = MsgType::ConnectReply;
      r.id = s.id;
      r.src = s.local;
      r.dst = s.peer;
      r.private_data = to_u8(s.mpa->result().peer_private_data);
      r.params = params_of(s.mpa->result(), iwarp::MpaRole::Initiator);
      ++counters_.connected;
      if (cfg_.first_fpdu_delay.count() > 0) {
        // Hold the connection (unread: the peer's first bytes are the data path's) until
        // expire() hands it over; see Config::first_fpdu_delay.
        ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, s.fd.get(), nullptr);
        s.held = std::move(r);
        s.deadline = Clock::now() + cfg_.first_fpdu_delay;
        return;
      }
      hand_over(s, r);
      return;
    }
    case iwarp::MpaState::Rejected:
      ++counters_.rejected_by_peer;
      connect_reply(s, ECONNREFUSED, "the peer rejected the connection");
      close_session(s.fd.get());
      return;
    case iwarp::MpaState::Failed:
      log("MPA with " + addr_string(s.peer) + " failed: " + s.mpa->error().message);
      ++counters_.mpa_errors;
      fail_session(s, ECONNRESET, s.mpa->error().message);
      return;
    }
  }

  // ---- routes, links, status ----

  void resolve(int c, const Msg& m) {
    Msg r;
    r.type = MsgType::ResolveReply;
    r.id = m.id;
    std::string err;
    if (auto route = route_to(m.dst, &err)) {
      r.src = route->src;
      r.reason = route->netdev;
    } else {
      r.status = ENETUNREACH;
      r.reason = err;
    }
    reply(c, r);
  }

  void net_changed() {
    for (auto& line : net_.process()) {
      log(line);
      ++counters_.link_events;
      recent_.push_back(line);
      if (recent_.size() > 16) recent_.pop_front();
    }
  }

  void status(int c, bool connections_only) {
    std::vector<std::string> out;
    // The system daemon serves every user: each sees only their own (root sees all).
    auto cl = clients_.find(c);
    const uid_t asker = cl != clients_.end() ? cl->second.uid : 0;
    auto mine = [&](uid_t owner) { return !any_user_ || asker == 0 || owner == asker; };
    auto age = [](Clock::time_point t) {
      return std::to_string(
                 std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t).count()) +
             "s";
    };
    auto owner = [](pid_t pid) {
      return "pid " + std::to_string(pid) + " (" + process_name(pid) + ")";
    };
    if (!connections_only) {
      const auto& p = cfg_.mpa;
      out.push_back("uiwarpd pid " + std::to_string(::getpid()) + ", up " + age(started_) +
                    ", socket " + socket_path_);
      out.push_back("policy: MPA rev " + std::to_string(p.revision) + ", crc " +
                    (p.crc ? "on" : "off") + ", markers " + (p.markers ? "on" : "off") + ", p2p " +
                    (p.p2p ? "on" : "off") + ", ird " + std::to_string(p.ird) + " ord " +
                    std::to_string(p.ord) + ", permissive " + (p.permissive ? "on" : "off") +
                    ", startup timeout " + std::to_string(p.timeout.count()) + " ms");
      const auto& k = counters_;
      out.push_back("counters: connect " + std::to_string(k.connects) + " (established " +
                    std::to_string(k.connected) + ", failed " + std::to_string(k.connect_failed) +
                    ", rejected by peer " + std::to_string(k.rejected_by_peer) + "), requests " +
                    std::to_string(k.requests) + " (accepted " + std::to_string(k.accepted) +
                    ", rejected " + std::to_string(k.rejected) + "), MPA errors " +
                    std::to_string(k.mpa_errors) + ", timeouts " + std::to_string(k.timeouts) +
                    ", refused clients " + std::to_string(k.refused_clients) + ", link events " +
                    std::to_string(k.link_events));
      out.push_back("clients: " + std::to_string(clients_.size()));
      std::vector<std::string> lines;
      for (const auto& [fd, l] : listeners_) {
        auto lc = clients_.find(l.client);
        if (lc != clients_.end() && mine(lc->second.uid))
          lines.push_back("  " + addr_string(l.addr) + " " + owner(lc->second.pid));
      }
      out.push_back("listeners: " + std::to_string(lines.size()));
      out.insert(out.end(), lines.begin(), lines.end());
    }
    std::string err;
    auto tcp = tcp_connections(&err);
    // Forget connections the kernel no longer has (the application closed them).
    std::erase_if(handed_, [&](const Handed& h) {
      auto t = tcp.find({addr_string(h.local), addr_string(h.peer)});
      return err.empty() &&
             (t == tcp.end() || t->second.state == "time-wait" || t->second.state == "close");
    });
    out.push_back("connections: " +
                  std::to_string(std::count_if(handed_.begin(), handed_.end(),
                                               [&](const Handed& h) { return mine(h.uid); })) +
                  (err.empty() ? "" : " (TCP state unknown: " + err + ")"));
    for (const auto& h : handed_) {
      if (!mine(h.uid)) continue;
      std::string line = "  " + addr_string(h.local) + " " + addr_string(h.peer) + " " +
                         owner(h.pid) + " " + (h.params.initiator ? "active" : "passive") + " " +
                         describe(h.params) + " age " + age(h.since);
      if (auto t = tcp.find({addr_string(h.local), addr_string(h.peer)}); t != tcp.end())
        line += " tcp " + t->second.state + " sendq " + std::to_string(t->second.send_queue) +
                " recvq " + std::to_string(t->second.recv_queue) + " retrans " +
                std::to_string(t->second.retransmits) + " rtt " + std::to_string(t->second.rtt_us) +
                "us";
      out.push_back(line);
    }
    out.push_back("starting (MPA exchange): " + std::to_string(sessions_.size()));
    for (const auto& [fd, ss] : sessions_) {
      auto sc = clients_.find(ss.client);
      if (sc == clients_.end() || !mine(sc->second.uid)) continue;
      std::string st = ss.connecting                                 ? "tcp connect"
                       : !ss.mpa                                     ? "?"
                       : ss.notified                                 ? "awaiting accept"
                       : ss.mpa->role() == iwarp::MpaRole::Initiator ? "awaiting MPA reply"
                                                                     : "awaiting MPA request";
      out.push_back("  " + addr_string(ss.local) + " " + addr_string(ss.peer) + " " + st);
    }
    if (!connections_only) {
      out.push_back("links:");
      for (auto& l : net_.snapshot())
        out.push_back("  " + l);
      if (!recent_.empty()) out.push_back("recent link events:");
      for (auto& l : recent_)
        out.push_back("  " + l);
    }
    for (auto& line : out) {
      Msg m;
      m.type = MsgType::StatusLine;
      m.reason = line.substr(0, kMaxMsg / 2);
      reply(c, m);
    }
    Msg end;
    end.type = MsgType::StatusEnd;
    reply(c, end);
  }

  void expire() {
    auto now = Clock::now();
    std::vector<int> late;
    for (auto& [fd, s] : sessions_)
      if (s.deadline <= now) late.push_back(fd);
    for (int fd : late) {
      Session& s = sessions_[fd];
      if (s.held) {
        hand_over(s, *s.held);
        continue;
      }
      std::string why = "MPA startup timed out with " + addr_string(s.peer);
      log(why);
      ++counters_.timeouts;
      if (s.mpa) s.mpa->on_timer(now);
      if (s.mpa && s.mpa->role() == iwarp::MpaRole::Initiator)
        connect_reply(s, ETIMEDOUT, why);
      else if (!s.mpa)
        connect_reply(s, ETIMEDOUT, why);
      close_session(fd);
    }
  }

  Config cfg_;
  Fd unix_;
  std::string socket_path_;
  bool any_user_;
  Fd ep_;
  LinkMonitor net_;
  bool stop_ = false;
  Clock::time_point started_ = Clock::now();
  Counters counters_;
  std::deque<std::string> recent_; // the last link and address changes
  std::vector<Handed> handed_;
  std::map<int, Client> clients_;
  std::map<int, Listener> listeners_;
  std::map<int, Session> sessions_;
  std::uint64_t next_token_ = 1;
};

Daemon* g_daemon = nullptr;
void on_signal(int) {
  if (g_daemon) g_daemon->stop();
}

// Runs the daemon on listening socket `s`; unlinks `socket_path` (ours, not systemd's) at exit.
int serve(Config cfg, Fd s, bool system, const std::string& socket_path) {
  ::signal(SIGPIPE, SIG_IGN);
  Daemon d(std::move(cfg), std::move(s), system ? "the system socket" : socket_path, system);
  g_daemon = &d;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  systemd_notify_ready(system ? "serving the system socket" : "serving " + socket_path);
  int rc = d.run();
  systemd_notify_stopping();
  if (!socket_path.empty()) ::unlink(socket_path.c_str());
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string config_file = kDefaultConfigFile;
  std::string socket_path;
  bool daemonize = false;
  CLI::App app{"uiwarpd: the uiwarp iWARP connection manager"};
  app.add_option("-c,--config", config_file, "configuration file")->capture_default_str();
  app.add_option("-s,--socket", socket_path,
                 "Unix socket (default: in the uiwarp state directory)");
  app.add_flag("-d,--daemon", daemonize, "detach and run in the background");
  add_policy_options(app, cfg);
  CLI11_PARSE(app, argc, argv);
  std::string err;
  if (!load_config(config_file, cfg, app, &err)) {
    log(err);
    return 2;
  }

  // Started by systemd (uiwarpd.socket): its socket; no lock (systemd runs one), no daemon().
  if (int fd = systemd_listen_socket(&err); fd != -1) {
    if (fd == -2) {
      log(err);
      return 1;
    }
    return serve(std::move(cfg), Fd(fd), true, "");
  }

  std::string dir;
  if (socket_path.empty()) {
    dir = uiwarp::state_dir(&err);
    if (dir.empty()) {
      log(err);
      return 1;
    }
    socket_path = dir + "/uiwarpd.sock";
  } else {
    dir = socket_path.substr(0, socket_path.rfind('/'));
  }
  // One daemon per state directory: a second one exits at once.
  Fd lock(::open((socket_path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (lock.get() < 0 || ::flock(lock.get(), LOCK_EX | LOCK_NB)) {
    log("another uiwarpd serves " + socket_path);
    return 0;
  }
  ::unlink(socket_path.c_str());
  Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof sun.sun_path) {
    log("socket path too long: " + socket_path);
    return 1;
  }
  std::memcpy(sun.sun_path, socket_path.c_str(), socket_path.size());
  mode_t old = ::umask(0077);
  bool bound = ::bind(s.get(), reinterpret_cast<sockaddr*>(&sun), sizeof sun) == 0;
  ::umask(old);
  if (!bound || ::listen(s.get(), 64)) {
    log("cannot listen on " + socket_path + ": " + std::strerror(errno));
    return 1;
  }
  if (daemonize) {
    if (::daemon(0, 0)) {
      log(std::string("daemon: ") + std::strerror(errno));
      return 1;
    }
  }
  return serve(std::move(cfg), std::move(s), false, socket_path);
}

} // namespace uiwarp::cm

int main(int argc, char** argv) { return uiwarp::cm::main(argc, argv); }
