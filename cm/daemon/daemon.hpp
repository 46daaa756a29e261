// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's event loop: one thread, one epoll set over the daemon's Unix socket, its clients,
// the TCP sockets of listeners and starting connections, and rtnetlink. It turns readiness into
// the inputs of Clients and Sessions and carries out what they ask; it never waits on a socket
// (a slow client's messages queue, a peer that does not read gets a deadline).
#pragma once

#include "clients.hpp"
#include "config.hpp"
#include "netmon.hpp"
#include "sessions.hpp"
#include "uiwarp/fd.hpp"

#include <csignal>
#include <deque>
#include <map>
#include <string>

namespace uiwarp::daemon {

// uiwarpd's one log: a line "uiwarpd: ..." on its standard error, which is the journal under
// systemd (uiwarpd.service) and uiwarpd.log in the state directory of a per-user daemon that
// uiwarp-run or the shim started.
void log(const std::string& line);

class Daemon {
public:
  // `unix_fd`: the listening Unix socket (ours or systemd's); `socket_label` names it in the
  // status report; any_user: the system-wide daemon (uiwarpd.socket) serves every local user,
  // each reaching only their own listeners and connections.
  Daemon(Config cfg, Fd unix_fd, std::string socket_label, bool any_user);
  int run();
  void stop() { stop_ = 1; } // async-signal-safe

private:
  enum class Kind : std::uint32_t { Unix = 1, Client, Socket, Netlink };
  void watch(int fd, Kind k, std::uint32_t events, int op);

  // clients
  void accept_clients();
  void client_ready(ClientId c, std::uint32_t events);
  void drop_client(ClientId c, const std::string& why = {});
  void dispatch(ClientId c, proto::Packet p);
  void listen(ClientId c, const proto::Listen& m, Fd s);
  void connect(ClientId c, const proto::Connect& m, Fd s, bool ib = false);
  void ib_connect(ClientId c, const proto::IbConnect& m, Fd s);
  int open_ib_listener(std::string* why);
  void resolve(ClientId c, const proto::Resolve& m);
  void status(ClientId c, const proto::Status& m);
  void closed(ClientId c, const proto::Closed& m);
  void reply(ClientId c, const proto::Message& m, int fd = -1);

  // TCP sockets
  void socket_ready(SockId fd, std::uint32_t events);
  void accept_tcp(SockId listener);
  void read_mpa(SockId fd);
  void sync(SockId fd);
  void forget(SockId fd);
  void run_actions();

  void net_changed();
  // When run() may return for idleness (Clock::time_point::max(): not now).
  Clock::time_point idle_deadline() const;

  Config cfg_;
  Fd unix_;
  std::string socket_label_;
  bool any_user_;
  Fd ep_;
  Clients clients_;
  Sessions sessions_;
  LinkMonitor net_;
  volatile std::sig_atomic_t stop_ = 0;
  Clock::time_point started_ = Clock::now();
  Clock::time_point idle_since_ = started_; // since when nothing is in the daemon's care
  std::uint64_t link_events_ = 0;
  std::deque<std::string> recent_;                       // the last link and address changes
  std::map<SockId, std::pair<Fd, std::uint32_t>> socks_; // owned TCP sockets, epoll events
};

} // namespace uiwarp::daemon
