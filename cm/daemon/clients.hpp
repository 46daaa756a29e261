// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's clients: the programs' shims and the `uiwarp` CLI, each on its own connection to
// the daemon's Unix socket. Who may connect (SO_PEERCRED: this user, or root, or anyone for the
// system daemon; and only from the daemon's network namespace, where its TCP sockets live), and
// the hello every client starts with (daemon_proto.hpp): a client of another protocol version is
// told so, and which side to restart, and dropped.
#pragma once

#include "sessions.hpp"
#include "uiwarp/daemon_proto.hpp"
#include "uiwarp/fd.hpp"

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <sys/types.h>

namespace uiwarp::daemon {

struct Client {
  uid_t uid = 0;
  pid_t pid = 0;
  // "pid 1234 (rping)", read when it connected: a program that reports a connection's end and
  // exits is gone from /proc by the time its message is read.
  std::string process;
  bool greeted = false; // its Hello was of our version
  proto::Role role = proto::Role::Shim;
  // Messages its socket had no room for, in order, with the socket each passes (a copy).
  std::deque<std::pair<proto::Message, Fd>> backlog;
};

class Clients {
public:
  // `listener`: the daemon's Unix socket (borrowed). any_user: the system-wide daemon.
  Clients(int listener, bool any_user) : listener_(listener), any_user_(any_user) {}
  ~Clients();
  Clients(const Clients&) = delete;
  Clients& operator=(const Clients&) = delete;

  // Accepts one waiting connection: its handle (a non-blocking descriptor the loop watches),
  // or -1 when none waits or it was refused (*refused says why; empty when none waited).
  ClientId accept(std::string* refused);

  enum class Read {
    Idle,    // no message now
    Handled, // the client's hello, answered
    Message, // *out is a request
    Gone,    // the client left or was dropped (*log says why, if it is worth a line): drop()
  };
  Read read(ClientId c, proto::Packet* out, std::string* log);
  // Sends, or queues when the client's socket is full (the loop never waits for a client): 0,
  // or an errno when the client is gone or lets too much pile up (then drop() it). `fd` goes
  // with the message; the caller still closes its own copy.
  int send(ClientId c, const proto::Message& m, int fd = -1);
  // Whether messages wait for room (watch the client for EPOLLOUT), and sends them.
  bool blocked(ClientId c) const;
  int on_writable(ClientId c);
  void drop(ClientId c);

  const Client* find(ClientId c) const;
  std::size_t size() const { return clients_.size(); }
  std::uint64_t refused() const { return refused_; }

private:
  Read hello(ClientId c, Client& cl, std::optional<proto::Packet> p, std::string* log);
  int listener_;
  bool any_user_;
  std::map<ClientId, Client> clients_;
  std::uint64_t refused_ = 0;
};

// "pid 1234 (rping)"
std::string describe_process(pid_t pid);

} // namespace uiwarp::daemon
