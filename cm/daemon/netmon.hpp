// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What uiwarpd asks the kernel's network stack, through libnl: the route (and so the source
// address and netdev) to a peer, the netdevs and addresses as they change, and the TCP state and
// counters of the connections it handed over (sock_diag; the application owns those sockets).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <vector>

struct nl_cache;
struct nl_cache_mngr;
struct nl_object;

namespace uiwarp::daemon {

struct Route {
  sockaddr_storage src{}; // the preferred source address the kernel picks for the peer
  std::string netdev;     // the output netdev
  std::string gateway;    // empty when the peer is on-link
};

// `ip route get DST` (RTM_GETROUTE). nullopt and *err when there is no route.
std::optional<Route> route_to(const sockaddr_storage& dst, std::string* err);

// The kernel's view of one TCP connection (tcp_info), keyed by its local and peer address.
struct TcpState {
  std::string state;                            // "established", "close-wait", ...
  std::uint32_t send_queue = 0, recv_queue = 0; // bytes not yet acked / not yet read
  std::uint32_t retransmits = 0;
  std::uint32_t rtt_us = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0; // acknowledged by the peer / received
};
using TcpKey = std::pair<std::string, std::string>; // addr_string(local), addr_string(peer)
// Every TCP connection of this network namespace (sock_diag); empty with *err set when the
// kernel did not answer (then nothing may be concluded about any connection).
std::map<TcpKey, TcpState> tcp_connections(std::string* err);

// Netdev and address changes (rtnetlink multicast), for the daemon's event loop.
class LinkMonitor {
public:
  LinkMonitor();
  ~LinkMonitor();
  LinkMonitor(const LinkMonitor&) = delete;
  LinkMonitor& operator=(const LinkMonitor&) = delete;

  bool ok() const { return mngr_ != nullptr; }
  const std::string& error() const { return err_; }
  int fd() const;
  // Reads what is pending; returns one line per change ("link va1 down", ...).
  std::vector<std::string> process();
  // The netdevs now: "lo up 127.0.0.1 ::1", ...
  std::vector<std::string> snapshot() const;

private:
  static void on_change(nl_cache*, nl_object*, int action, void* self);
  nl_cache_mngr* mngr_ = nullptr;
  nl_cache* links_ = nullptr;
  nl_cache* addrs_ = nullptr;
  std::vector<std::string> changes_;
  std::map<int, bool> up_; // ifindex -> IFF_UP && IFF_RUNNING, to report only real transitions
  std::string err_;
};

} // namespace uiwarp::daemon
