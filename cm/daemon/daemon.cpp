// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's event loop (daemon.hpp).
#include "daemon.hpp"

#include "status.hpp"
#include "uiwarp/ip.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace uiwarp::daemon {

static_assert(kDefaultIbConnectPort == ib::kDefaultPort);

void log(const std::string& line) { std::fprintf(stderr, "uiwarpd: %s\n", line.c_str()); }

namespace {

std::uint64_t tag(std::uint32_t kind, int fd) {
  return (std::uint64_t{kind} << 32) | static_cast<std::uint32_t>(fd);
}

// A socket a client passed: TCP, and listening or not as `listening` says (it was made in the
// client's network namespace, which Clients::accept checked is ours).
bool tcp_socket(int fd, bool listening) {
  int type = 0, proto = 0, acc = 0;
  socklen_t l1 = sizeof type, l2 = sizeof proto, l3 = sizeof acc;
  return fd >= 0 && !::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l1) && type == SOCK_STREAM &&
         !::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l2) && proto == IPPROTO_TCP &&
         !::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l3) && (acc != 0) == listening;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// rdma_set_option(RDMA_OPTION_ID_TOS) becomes the TCP connection's TOS / traffic class, as the
// kernel's iWARP drivers apply the cm_id's tos to their socket.
void set_tos(int fd, int family, int tos) {
  if (tos < 0) return;
  if (family == AF_INET6)
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof tos);
  else
    ::setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
}

sockaddr_storage local_addr(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return a;
}

sockaddr_storage peer_addr(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return a;
}

std::uint32_t epoll_events(Interest i) {
  switch (i) {
  case Interest::None: return 0;
  case Interest::Hangup: return EPOLLRDHUP;
  case Interest::Readable: return EPOLLIN | EPOLLRDHUP;
  case Interest::Writable: return EPOLLOUT | EPOLLRDHUP;
  case Interest::Accept: return EPOLLIN;
  }
  return 0;
}

template <class... F> struct Overload : F... { using F::operator()...; };
template <class... F> Overload(F...) -> Overload<F...>; // clang 14 has no aggregate CTAD

} // namespace

Daemon::Daemon(Config cfg, Fd unix_fd, std::string socket_label, bool any_user)
    : cfg_(std::move(cfg)), unix_(std::move(unix_fd)), socket_label_(std::move(socket_label)),
      any_user_(any_user), ep_(::epoll_create1(EPOLL_CLOEXEC)), clients_(unix_.get(), any_user),
      sessions_(SessionPolicy{cfg_.mpa, cfg_.first_fpdu_delay}) {
  watch(unix_.get(), Kind::Unix, EPOLLIN, EPOLL_CTL_ADD);
  if (net_.ok())
    watch(net_.fd(), Kind::Netlink, EPOLLIN, EPOLL_CTL_ADD);
  else
    log(net_.error());
}

void Daemon::watch(int fd, Kind k, std::uint32_t events, int op) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag(static_cast<std::uint32_t>(k), fd);
  ::epoll_ctl(ep_.get(), op, fd, &ev);
}

int Daemon::run() {
  epoll_event evs[64];
  while (!stop_) {
    int timeout = -1;
    if (auto next = std::min(sessions_.deadline(), idle_deadline());
        next != Clock::time_point::max()) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<long long>(ms, 0, 60000));
    }
    int n = ::epoll_wait(ep_.get(), evs, 64, timeout);
    if (n < 0 && errno != EINTR) return 1;
    for (int i = 0; i < n; ++i) {
      int fd = static_cast<int>(evs[i].data.u64 & 0xffffffff);
      switch (static_cast<Kind>(evs[i].data.u64 >> 32)) {
      case Kind::Unix: accept_clients(); break;
      case Kind::Client: client_ready(fd, evs[i].events); break;
      case Kind::Socket: socket_ready(fd, evs[i].events); break;
      case Kind::Netlink: net_changed(); break;
      }
      run_actions();
    }
    if (auto now = Clock::now(); sessions_.deadline() <= now) {
      sessions_.on_timer(now);
      run_actions();
    }
    if (SockId l = sessions_.ib_listener(); l >= 0 && !sessions_.ib_listener_wanted()) {
      accept_tcp(l); // the backlog first: connects for QPs about to wait, held for them
      sessions_.on_listener_closed(l); // the port is free again
      run_actions();
    }
    if (clients_.size() || !socks_.empty()) {
      idle_since_ = Clock::time_point::max();
    } else if (idle_since_ == Clock::time_point::max()) {
      idle_since_ = Clock::now();
    } else if (idle_deadline() <= Clock::now()) {
      log("idle for " + std::to_string(cfg_.idle_exit.count()) +
          " s (no client, no connection): exiting; programs start it again when they need it");
      return 0;
    }
  }
  return 0;
}

Clock::time_point Daemon::idle_deadline() const {
  if (cfg_.idle_exit.count() == 0 || idle_since_ == Clock::time_point::max())
    return Clock::time_point::max();
  return idle_since_ + cfg_.idle_exit;
}

// ---- clients ----

void Daemon::accept_clients() {
  for (;;) {
    std::string refused;
    ClientId c = clients_.accept(&refused);
    if (c >= 0) {
      watch(c, Kind::Client, EPOLLIN, EPOLL_CTL_ADD);
      continue;
    }
    if (refused.empty()) return;
    log(refused);
  }
}

void Daemon::client_ready(ClientId c, std::uint32_t events) {
  if ((events & EPOLLOUT) && clients_.on_writable(c)) {
    drop_client(c);
    return;
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    // A few messages per wake-up: others' events are served in between.
    for (int i = 0; i < 16; ++i) {
      proto::Packet p;
      std::string why;
      Clients::Read r = clients_.read(c, &p, &why);
      if (r == Clients::Read::Gone) {
        drop_client(c, why);
        return;
      }
      if (r == Clients::Read::Idle) break;
      if (r == Clients::Read::Message) dispatch(c, std::move(p));
      run_actions();
      if (!clients_.find(c)) return;
    }
  }
  if (clients_.find(c))
    watch(c, Kind::Client, clients_.blocked(c) ? EPOLLIN | EPOLLOUT : EPOLLIN, EPOLL_CTL_MOD);
}

void Daemon::drop_client(ClientId c, const std::string& why) {
  if (!clients_.find(c)) return;
  if (!why.empty()) log(why);
  ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, c, nullptr);
  sessions_.on_client_gone(c);
  clients_.drop(c);
}

void Daemon::reply(ClientId c, const proto::Message& m, int fd) {
  if (int e = clients_.send(c, m, fd))
    drop_client(c, e == ENOBUFS ? "dropped a client that does not read its replies" : "");
  else if (clients_.blocked(c))
    watch(c, Kind::Client, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
}

// One handler per request (the client -> uiwarpd half of daemon_proto.hpp).
void Daemon::dispatch(ClientId c, proto::Packet p) {
  Fd passed(p.fd); // Listen and Connect carry the client's socket; any other one is closed
  const auto now = Clock::now();
  std::visit(Overload{
                 [&](const proto::Listen& m) { listen(c, m, std::move(passed)); },
                 [&](const proto::Unlisten& m) { sessions_.on_unlisten(c, m); },
                 [&](const proto::Connect& m) { connect(c, m, std::move(passed)); },
                 [&](const proto::IbConnect& m) { ib_connect(c, m, std::move(passed)); },
                 [&](const proto::Accept& m) { sessions_.on_accept(c, m, now); },
                 [&](const proto::Reject& m) { sessions_.on_reject(c, m, now); },
                 [&](const proto::Resolve& m) { resolve(c, m); },
                 [&](const proto::Status& m) { status(c, m); },
                 [&](const proto::Closed& m) { closed(c, m); },
                 [&](const proto::Attached& m) { sessions_.connections().on_attached(c, m); },
                 [&](const proto::Path& m) { sessions_.connections().on_path(c, m); },
                 [&](const auto&) {
                   drop_client(c, "dropped a client that sent a message only uiwarpd sends");
                 },
             },
             p.msg);
}

// The client bound and listens on its own socket (the port is its rdma_cm id's, as the kernel's
// rdma_cm holds it); we accept on it and run MPA for each connection.
void Daemon::listen(ClientId c, const proto::Listen& m, Fd s) {
  if (!tcp_socket(s.get(), true)) {
    sessions_.on_listen(c, m, -1, {});
    return;
  }
  set_nonblocking(s.get());
  sockaddr_storage addr = local_addr(s.get());
  set_tos(s.get(), addr.ss_family, m.tos); // accepted sockets inherit it
  int fd = s.get();
  socks_[fd] = {std::move(s), 0};
  sessions_.on_listen(c, m, fd, addr);
  sync(fd);
}

// Connects the client's socket, bound to its rdma_cm id's address and port.
void Daemon::connect(ClientId c, const proto::Connect& m, Fd s, bool ib) {
  if (!tcp_socket(s.get(), false) || m.dst.ss_family != m.src.ss_family) {
    sessions_.on_connect(c, m, -1, 0, Clock::now(), ib);
    return;
  }
  set_nonblocking(s.get());
  set_tos(s.get(), m.dst.ss_family, m.tos);
  socklen_t len = m.dst.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  int err = 0;
  if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&m.dst), len) && errno != EINPROGRESS)
    err = errno;
  int fd = s.get();
  socks_[fd] = {std::move(s), 0};
  sessions_.on_connect(c, m, fd, err, Clock::now(), ib);
  sync(fd);
}

// IB-style connect (uiwarp/ib_connect.hpp). The initiator connects the client's socket to the
// peer's ib-connect-port with a Request naming both QPs; the responder waits, with the
// rendezvous listener open while any QP waits.
void Daemon::ib_connect(ClientId c, const proto::IbConnect& m, Fd s) {
  auto refuse = [&](int status, std::string why) {
    proto::ConnectReply r;
    r.id = m.id;
    r.status = status;
    r.reason = std::move(why);
    r.dst = m.peer;
    reply(c, r);
  };
  if (!cfg_.ib_connect_port) {
    refuse(EOPNOTSUPP, "IB-style connect is off (uiwarpd.conf ib-connect-port = 0)");
    return;
  }
  if (m.initiator) {
    proto::Connect conn;
    conn.id = m.id;
    conn.src = m.local;
    conn.dst = m.peer;
    auto* port = m.peer.ss_family == AF_INET6
                     ? &reinterpret_cast<sockaddr_in6*>(&conn.dst)->sin6_port
                     : &reinterpret_cast<sockaddr_in*>(&conn.dst)->sin_port;
    *port = htons(cfg_.ib_connect_port);
    conn.private_data = ib::encode({m.local_qpn, m.peer_qpn});
    conn.ird = m.ird;
    conn.ord = m.ord;
    conn.timeout_ms = m.timeout_ms;
    connect(c, conn, std::move(s), true);
    return;
  }
  std::string why;
  if (sessions_.ib_listener() < 0 && open_ib_listener(&why)) {
    refuse(EADDRINUSE, why);
    return;
  }
  sessions_.on_ib_wait(c, m, Clock::now());
}

// [::]:ib-connect-port (IPv4 too, as mapped addresses), or 0.0.0.0 where IPv6 is off.
int Daemon::open_ib_listener(std::string* why) {
  int err = 0;
  for (int family : {AF_INET6, AF_INET}) {
    Fd l(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!l) {
      err = errno;
      continue;
    }
    int one = 1, zero = 0;
    ::setsockopt(l.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage a{};
    a.ss_family = static_cast<sa_family_t>(family);
    socklen_t len = sizeof(sockaddr_in);
    if (family == AF_INET6) {
      ::setsockopt(l.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      reinterpret_cast<sockaddr_in6*>(&a)->sin6_port = htons(cfg_.ib_connect_port);
      len = sizeof(sockaddr_in6);
    } else {
      reinterpret_cast<sockaddr_in*>(&a)->sin_port = htons(cfg_.ib_connect_port);
    }
    if (::bind(l.get(), reinterpret_cast<sockaddr*>(&a), len) || ::listen(l.get(), 128)) {
      err = errno;
      if (err == EADDRINUSE) break; // the other family would find the same
      continue;
    }
    int fd = l.get();
    socks_[fd] = {std::move(l), 0};
    sessions_.on_ib_listen(fd, a);
    sync(fd);
    return 0;
  }
  *why = "IB-style connect: cannot listen on TCP port " + std::to_string(cfg_.ib_connect_port) +
         " (uiwarpd.conf ib-connect-port): " + std::strerror(err) +
         (err == EADDRINUSE ? " (another program, or another user's uiwarpd, has it)" : "");
  return err;
}

void Daemon::resolve(ClientId c, const proto::Resolve& m) {
  proto::ResolveReply r;
  r.id = m.id;
  std::string err;
  if (auto route = route_to(m.dst, &err)) {
    r.src = route->src;
    r.netdev = route->netdev;
  } else {
    r.status = ENETUNREACH;
    r.netdev = err;
  }
  reply(c, r);
}

void Daemon::closed(ClientId c, const proto::Closed& m) {
  const Client* cl = clients_.find(c);
  const std::string who = cl ? cl->process : "a program";
  log("connection " + proto::addr_string(m.local) + " -> " + proto::addr_string(m.peer) + " of " +
      who + " ended: " + m.reason);
  sessions_.connections().on_closed(c, m, cl ? cl->uid : 0, who, Clock::now());
}

void Daemon::status(ClientId c, const proto::Status& m) {
  StatusSnapshot s;
  s.connections_only = m.connections_only || m.closed;
  s.closed_only = m.closed;
  s.any_user = any_user_;
  const Client* asker = clients_.find(c);
  s.asker = asker ? asker->uid : 0;
  s.now = Clock::now();
  s.pid = ::getpid();
  s.up = std::chrono::duration_cast<std::chrono::seconds>(s.now - started_);
  s.socket = socket_label_;
  s.policy = cfg_.mpa;
  s.counters = sessions_.counters();
  s.refused_clients = clients_.refused();
  s.link_events = link_events_;
  s.tcp = tcp_connections(&s.tcp_error);
  // Forget connections the kernel no longer has (the application closed them).
  if (s.tcp_error.empty())
    sessions_.connections().forget_handed([&](const HandedView& h) {
      auto t = s.tcp.find({proto::addr_string(h.local), proto::addr_string(h.peer)});
      return t == s.tcp.end() || t->second.state == "time-wait" || t->second.state == "close";
    });
  s.listeners = sessions_.listeners();
  const Connections& conns = sessions_.connections();
  s.handed = conns.handed();
  s.sessions = sessions_.sessions();
  s.closed.assign(conns.closed().begin(), conns.closed().end());
  auto add_owner = [&](ClientId id) {
    if (s.clients.count(id)) return;
    if (const Client* cl = clients_.find(id)) s.clients[id] = {cl->uid, cl->process};
  };
  for (const auto& l : s.listeners)
    add_owner(l.client);
  for (const auto& h : s.handed)
    add_owner(h.client);
  for (const auto& ss : s.sessions)
    add_owner(ss.client);
  if (!m.connections_only) {
    s.links = net_.snapshot();
    s.recent_link_events.assign(recent_.begin(), recent_.end());
  }
  if (m.json) {
    // One document, cut into packets the client joins (a line is at most kMaxPacket / 4).
    const std::string doc = status_json(s);
    for (std::size_t at = 0; at < doc.size(); at += proto::kMaxPacket / 4)
      reply(c, proto::StatusLine{doc.substr(at, proto::kMaxPacket / 4)});
  } else {
    for (auto& line : status_report(s))
      reply(c, proto::StatusLine{line.substr(0, proto::kMaxPacket / 4)});
  }
  reply(c, proto::StatusEnd{});
}

// ---- TCP sockets ----

void Daemon::socket_ready(SockId fd, std::uint32_t events) {
  if (!socks_.count(fd)) return;
  const auto now = Clock::now();
  if (sessions_.interest(fd) == Interest::Accept) {
    accept_tcp(fd);
  } else if (sessions_.connecting(fd)) {
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err)
      sessions_.on_socket_error(fd, err, now);
    else if (events & EPOLLOUT)
      sessions_.on_connected(fd, local_addr(fd), host_address(peer_addr(fd)), now);
  } else if (sessions_.interest(fd) == Interest::Readable) {
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) read_mpa(fd);
  } else if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    sessions_.on_peer_closed(fd, now);
  }
  sync(fd);
}

void Daemon::accept_tcp(SockId listener) {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    Fd s(::accept4(listener, reinterpret_cast<sockaddr*>(&peer), &len,
                   SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!s) {
      // EINVAL: the application shut the socket down (rdma_destroy_id); its Unlisten follows.
      if (errno == EINVAL) sessions_.on_listener_closed(listener);
      return;
    }
    int fd = s.get();
    sockaddr_storage local = local_addr(fd);
    socks_[fd] = {std::move(s), 0};
    // Whether the peer is on this host (the same-host offer); a wildcard listener's device
    // policy: the interface of the address the peer reached (a dual-stack listener reports an
    // IPv4 one as ::ffff:a.b.c.d).
    sessions_.on_incoming(listener, fd, local, peer, host_address(peer), Clock::now(),
                          sessions_.wants_netdev(listener) ? netdev_of(unmapped(local))
                                                           : std::string());
    sync(fd);
  }
}

// Peeks, then consumes exactly the MPA frame: what follows belongs to the data path.
void Daemon::read_mpa(SockId fd) {
  std::byte buf[2048];
  ssize_t n = ::recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  const auto now = Clock::now();
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) {
    sessions_.on_socket_error(fd, errno, now);
  } else if (n == 0) {
    sessions_.on_peer_closed(fd, now);
  } else {
    std::size_t used =
        sessions_.on_bytes(fd, iwarp::ConstBytes(buf, static_cast<std::size_t>(n)), now);
    [[maybe_unused]] ssize_t k = ::recv(fd, buf, used, MSG_DONTWAIT);
  }
}

// Writes what the session has to say, as far as the socket takes it, and waits for what the
// session waits for.
void Daemon::sync(SockId fd) {
  auto it = socks_.find(fd);
  if (it == socks_.end()) return;
  for (iwarp::ConstBytes out = sessions_.output(fd); !out.empty(); out = sessions_.output(fd)) {
    ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sessions_.consume_output(fd, static_cast<std::size_t>(n), Clock::now());
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) sessions_.on_socket_error(fd, errno, Clock::now());
    break;
  }
  std::uint32_t want = epoll_events(sessions_.interest(fd));
  std::uint32_t& have = it->second.second;
  if (want == have) return;
  if (!want)
    ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, fd, nullptr);
  else
    watch(fd, Kind::Socket, want, have ? EPOLL_CTL_MOD : EPOLL_CTL_ADD);
  have = want;
}

void Daemon::forget(SockId fd) {
  auto it = socks_.find(fd);
  if (it == socks_.end()) return;
  if (it->second.second) ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, fd, nullptr);
  socks_.erase(it); // closes it
}

void Daemon::run_actions() {
  for (auto actions = sessions_.take_actions(); !actions.empty();
       actions = sessions_.take_actions()) {
    for (auto& a : actions)
      std::visit(Overload{
                     [&](ToClient& m) {
                       if (clients_.find(m.client)) reply(m.client, m.msg, m.pass);
                       if (m.pass >= 0) forget(m.pass); // the client has its own copy now
                     },
                     [&](Close& m) { forget(m.sock); },
                     [&](Flush& m) { sync(m.sock); },
                     [&](Log& m) { log(m.line); },
                 },
                 a);
  }
}

// ---- links ----

void Daemon::net_changed() {
  for (auto& line : net_.process()) {
    log(line);
    ++link_events_;
    recent_.push_back(line);
    if (recent_.size() > 16) recent_.pop_front();
  }
}

} // namespace uiwarp::daemon
