// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The report `uiwarp status` and `uiwarp conn show` print, one line per StatusLine: the daemon,
// its policy and counters, listeners, handed-over connections with the kernel's TCP state, the
// connections still in their MPA exchange, and the links. Made from a snapshot, without I/O.
#pragma once

#include "netmon.hpp"
#include "sessions.hpp"

#include <chrono>
#include <map>
#include <string>
#include <sys/types.h>
#include <vector>

namespace uiwarp::daemon {

struct StatusSnapshot {
  bool connections_only = false;
  bool closed_only = false; // the connections that ended, with why (conn show --closed)
  // The system daemon serves every user: each sees only their own (root sees all).
  bool any_user = false;
  uid_t asker = 0;

  pid_t pid = 0;
  std::chrono::seconds up{0};
  std::string socket;
  iwarp::MpaPolicy policy;
  Counters counters;
  std::uint64_t refused_clients = 0, link_events = 0;
  struct Owner {
    uid_t uid;
    std::string process; // "pid 1234 (rping)"
  };
  std::map<ClientId, Owner> clients;
  std::vector<ListenerView> listeners;
  std::vector<HandedView> handed;
  std::vector<SessionView> sessions;
  std::vector<ClosedView> closed; // oldest first
  std::map<TcpKey, TcpState> tcp;
  std::string tcp_error; // why the TCP states are unknown
  std::vector<std::string> links, recent_link_events;
  Clock::time_point now;
};

std::vector<std::string> status_report(const StatusSnapshot& s);
// The same as one JSON document (status_json.cpp).
std::string status_json(const StatusSnapshot& s);

} // namespace uiwarp::daemon
