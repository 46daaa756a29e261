// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's status report (status.hpp).
#include "status.hpp"

#include "uiwarp/daemon_proto.hpp"

#include <algorithm>
#include <cstdio>

namespace uiwarp::daemon {

namespace {

std::string n(std::uint64_t v) { return std::to_string(v); }
const char* on(bool b) { return b ? "on" : "off"; }

std::string policy_line(const iwarp::MpaPolicy& p) {
  return "policy: MPA rev " + n(p.revision) + ", crc " + on(p.crc) + ", markers " + on(p.markers) +
         ", p2p " + on(p.p2p) + ", ird " + n(p.ird) + " ord " + n(p.ord) + ", permissive " +
         on(p.permissive) + ", large-fpdu " + on(p.large_fpdu) + ", rfc7306 " + on(p.rfc7306) +
         ", same-host " + on(p.same_host) + ", startup timeout " +
         n(static_cast<std::uint64_t>(p.timeout.count())) + " ms";
}

std::string counters_line(const Counters& k, std::uint64_t refused, std::uint64_t link_events) {
  return "counters: connect " + n(k.connects) + " (established " + n(k.connected) + ", failed " +
         n(k.connect_failed) + ", rejected by peer " + n(k.rejected_by_peer) + "), requests " +
         n(k.requests) + " (accepted " + n(k.accepted) + ", rejected " + n(k.rejected) +
         "), MPA errors " + n(k.mpa_errors) + ", timeouts " + n(k.timeouts) + ", refused clients " +
         n(refused) + ", link events " + n(link_events);
}

// A QPN as the provider's log lines print it: "0x00a1b2".
std::string qpn(std::uint32_t q) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%06x", q);
  return s;
}

// "qp 0x000011 dev uiwarp0 RTS", or "qp - handover" until the provider reports the QP that
// took the socket (proto::Attached).
std::string qp_part(const HandedView& h) {
  if (!h.attached) return "qp - handover";
  return "qp " + qpn(h.qp_num) + " dev " + (h.device.empty() ? "-" : h.device) + " RTS";
}

// "; path same-host", "; path tcp: why", last on the line as the text is the provider's; nothing
// until the shim reports it (proto::Attached, proto::Path).
std::string path_part(const HandedView& h) { return h.path.empty() ? "" : "; path " + h.path; }

} // namespace

std::vector<std::string> status_report(const StatusSnapshot& s) {
  using proto::addr_string;
  std::vector<std::string> out;
  // The owner of what client `c` made, if the asker may see it.
  auto owner = [&](ClientId c) -> const StatusSnapshot::Owner* {
    auto it = s.clients.find(c);
    if (it == s.clients.end()) return nullptr;
    if (s.any_user && s.asker != 0 && it->second.uid != s.asker) return nullptr;
    return &it->second;
  };
  auto age = [&](Clock::time_point t) {
    return n(static_cast<std::uint64_t>(
               std::chrono::duration_cast<std::chrono::seconds>(s.now - t).count())) +
           "s";
  };
  if (!s.connections_only) {
    out.push_back("uiwarpd pid " + n(static_cast<std::uint64_t>(s.pid)) + ", up " +
                  n(static_cast<std::uint64_t>(s.up.count())) + "s, socket " + s.socket);
    out.push_back(policy_line(s.policy));
    out.push_back(counters_line(s.counters, s.refused_clients, s.link_events));
    out.push_back("clients: " + n(s.clients.size()));
    std::vector<std::string> lines;
    for (const auto& l : s.listeners)
      if (auto* o = owner(l.client)) lines.push_back("  " + addr_string(l.addr) + " " + o->process);
    out.push_back("listeners: " + n(lines.size()));
    out.insert(out.end(), lines.begin(), lines.end());
  }
  if (s.closed_only) {
    // Newest first, as a user looks for the one that just failed.
    std::vector<std::string> lines;
    for (auto it = s.closed.rbegin(); it != s.closed.rend(); ++it) {
      if (s.any_user && s.asker != 0 && it->uid != s.asker) continue;
      lines.push_back("  " + addr_string(it->conn.local) + " " + addr_string(it->conn.peer) + " " +
                      it->process + " qp " + qpn(it->qp_num) + " ended " + age(it->ended) +
                      " ago after " +
                      n(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                                       it->ended - it->conn.since)
                                                       .count())) +
                      "s: " + it->reason + (it->drive.empty() ? "" : "; drive: " + it->drive) +
                      path_part(it->conn));
    }
    out.push_back("closed connections: " + n(lines.size()) + " (the last " +
                  n(Connections::kClosedKept) + " are kept)");
    out.insert(out.end(), lines.begin(), lines.end());
    return out;
  }
  std::vector<std::string> lines;
  for (const auto& h : s.handed) {
    auto* o = owner(h.client);
    if (!o) continue;
    std::string line = "  " + addr_string(h.local) + " " + addr_string(h.peer) + " " + o->process +
                       " " + qp_part(h) + " " + (h.params.initiator ? "active" : "passive") + " " +
                       iwarp::describe(h.params) + " age " + age(h.since);
    if (auto t = s.tcp.find({addr_string(h.local), addr_string(h.peer)}); t != s.tcp.end())
      line += " tcp " + t->second.state + " sendq " + n(t->second.send_queue) + " recvq " +
              n(t->second.recv_queue) + " retrans " + n(t->second.retransmits) + " rtt " +
              n(t->second.rtt_us) + "us";
    lines.push_back(line + path_part(h));
  }
  out.push_back("connections: " + n(lines.size()) +
                (s.tcp_error.empty() ? "" : " (TCP state unknown: " + s.tcp_error + ")"));
  out.insert(out.end(), lines.begin(), lines.end());
  lines.clear();
  for (const auto& ss : s.sessions)
    if (owner(ss.client))
      lines.push_back("  " + addr_string(ss.local) + " " + addr_string(ss.peer) + " " + ss.state);
  out.push_back("starting (MPA exchange): " + n(lines.size()));
  out.insert(out.end(), lines.begin(), lines.end());
  if (!s.connections_only) {
    out.push_back("links:");
    for (const auto& l : s.links)
      out.push_back("  " + l);
    if (!s.recent_link_events.empty()) out.push_back("recent link events:");
    for (const auto& l : s.recent_link_events)
      out.push_back("  " + l);
  }
  return out;
}

} // namespace uiwarp::daemon
