// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's status as one JSON document (`uiwarp -j status`, `-j conn show [--closed]`), as
// rdma(8)'s -j prints its objects: the same snapshot as status.cpp's lines, with names for
// every field. Built with nlohmann::json (Debian's nlohmann-json3-dev, header-only), which gets
// the escaping of program names and reasons right.
#include "status.hpp"
#include "uiwarp/daemon_proto.hpp"

#include <chrono>
#include <nlohmann/json.hpp>

namespace uiwarp::daemon {

namespace {

using nlohmann::json;

std::int64_t seconds(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

json params_json(const iwarp::ConnParams& p) {
  static const char* const kRtr[] = {"send", "write", "read"};
  return {{"version", p.version ? "IETF" : "RDMAC"},
          {"crc", p.crc},
          {"markers_tx", p.markers_tx},
          {"markers_rx", p.markers_rx},
          {"p2p", p.p2p},
          {"rtr", p.p2p && p.initiator ? json(kRtr[static_cast<int>(p.rtr)]) : json(nullptr)},
          {"ird", p.ird},
          {"ord", p.ord},
          {"large_fpdu", p.large_fpdu},
          {"rfc7306", p.rfc7306},
          {"same_host", p.same_host},
          {"recv_wait_ms", p.recv_wait_ms}};
}

// "same-host", "tcp: why", or null until the shim reports it.
json path_json(const HandedView& h) { return h.path.empty() ? json(nullptr) : json(h.path); }

json policy_json(const iwarp::MpaPolicy& p) {
  std::string rtr;
  for (auto [on, name] :
       {std::pair{p.rtr.send, "send"}, {p.rtr.write, "write"}, {p.rtr.read, "read"}})
    if (on) rtr += (rtr.empty() ? "" : ",") + std::string(name);
  return {{"mpa_revision", p.revision},
          {"crc", p.crc},
          {"markers", p.markers},
          {"p2p", p.p2p},
          {"rtr", rtr},
          {"ird", p.ird},
          {"ord", p.ord},
          {"permissive", p.permissive},
          {"large_fpdu", p.large_fpdu},
          {"rfc7306", p.rfc7306},
          {"same_host", p.same_host},
          {"startup_timeout_ms", p.timeout.count()},
          {"recv_wait_ms", p.recv_wait.count()}};
}

} // namespace

std::string status_json(const StatusSnapshot& s) {
  using proto::addr_string;
  auto owner = [&](ClientId c) -> const StatusSnapshot::Owner* {
    auto it = s.clients.find(c);
    if (it == s.clients.end()) return nullptr;
    if (s.any_user && s.asker != 0 && it->second.uid != s.asker) return nullptr;
    return &it->second;
  };
  json out = json::object();
  if (s.closed_only) {
    json closed = json::array();
    for (auto it = s.closed.rbegin(); it != s.closed.rend(); ++it) {
      if (s.any_user && s.asker != 0 && it->uid != s.asker) continue;
      closed.push_back({{"local", addr_string(it->conn.local)},
                        {"peer", addr_string(it->conn.peer)},
                        {"process", it->process},
                        {"qpn", it->qp_num},
                        {"ended_s_ago", seconds(s.now - it->ended)},
                        {"lived_s", seconds(it->ended - it->conn.since)},
                        {"reason", it->reason},
                        {"drive", it->drive},
                        {"path", path_json(it->conn)}});
    }
    out["closed"] = std::move(closed);
    return out.dump();
  }
  if (!s.connections_only) {
    out["pid"] = s.pid;
    out["up_s"] = s.up.count();
    out["socket"] = s.socket;
    out["policy"] = policy_json(s.policy);
    const Counters& k = s.counters;
    out["counters"] = {{"connects", k.connects},
                       {"established", k.connected},
                       {"connect_failed", k.connect_failed},
                       {"rejected_by_peer", k.rejected_by_peer},
                       {"requests", k.requests},
                       {"accepted", k.accepted},
                       {"rejected", k.rejected},
                       {"mpa_errors", k.mpa_errors},
                       {"timeouts", k.timeouts},
                       {"refused_clients", s.refused_clients},
                       {"link_events", s.link_events}};
    out["clients"] = s.clients.size();
    json listeners = json::array();
    for (const auto& l : s.listeners)
      if (auto* o = owner(l.client))
        listeners.push_back({{"addr", addr_string(l.addr)}, {"process", o->process}});
    out["listeners"] = std::move(listeners);
  }
  json conns = json::array();
  for (const auto& h : s.handed) {
    auto* o = owner(h.client);
    if (!o) continue;
    json c = {{"local", addr_string(h.local)},
              {"peer", addr_string(h.peer)},
              {"process", o->process},
              {"qpn", h.attached ? json(h.qp_num) : json(nullptr)},
              {"device", h.attached && !h.device.empty() ? json(h.device) : json(nullptr)},
              {"state", h.attached ? "RTS" : "handover"},
              {"role", h.params.initiator ? "active" : "passive"},
              {"mpa", params_json(h.params)},
              {"age_s", seconds(s.now - h.since)},
              {"path", path_json(h)},
              {"tcp", nullptr}};
    if (auto t = s.tcp.find({addr_string(h.local), addr_string(h.peer)}); t != s.tcp.end())
      c["tcp"] = {{"state", t->second.state},
                  {"send_queue", t->second.send_queue},
                  {"recv_queue", t->second.recv_queue},
                  {"retransmits", t->second.retransmits},
                  {"rtt_us", t->second.rtt_us},
                  {"bytes_sent", t->second.bytes_sent},
                  {"bytes_received", t->second.bytes_received}};
    conns.push_back(std::move(c));
  }
  out["connections"] = std::move(conns);
  if (!s.tcp_error.empty()) out["tcp_error"] = s.tcp_error;
  json starting = json::array();
  for (const auto& ss : s.sessions)
    if (owner(ss.client))
      starting.push_back(
          {{"local", addr_string(ss.local)}, {"peer", addr_string(ss.peer)}, {"state", ss.state}});
  out["starting"] = std::move(starting);
  if (!s.connections_only) {
    out["links"] = s.links;
    out["recent_link_events"] = s.recent_link_events;
  }
  return out.dump();
}

} // namespace uiwarp::daemon
