// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "iwarp/conn_params.hpp"

namespace iwarp {

ConnParams conn_params(const MpaResult& r, MpaRole role, const MpaPolicy& local) {
  ConnParams p;
  p.version = r.version;
  p.crc = r.crc;
  p.markers_tx = r.markers_tx;
  p.markers_rx = r.markers_rx;
  p.ird = r.ird;
  p.ord = r.ord;
  p.peer_ird = r.peer_ird.value_or(0);
  p.peer_ord = r.peer_ord.value_or(0);
  p.initiator = role == MpaRole::Initiator;
  p.p2p = r.p2p;
  p.rtr = r.rtr.value_or(RtrType::Send);
  p.large_fpdu = r.large_fpdu;
  p.rfc7306 = r.rfc7306;
  p.recv_wait_ms = static_cast<std::uint32_t>(local.recv_wait.count());
  p.same_host = r.same_host;
  p.peer_same_host = r.peer_same_host;
  return p;
}

std::string describe(const ConnParams& p) {
  static const char* const kRtr[] = {"send", "write", "read"};
  std::string s = std::string(p.version ? "IETF" : "RDMAC") + " crc " + (p.crc ? "on" : "off") +
                  " markers " + (p.markers_tx ? "tx" : "-") + "/" + (p.markers_rx ? "rx" : "-") +
                  " p2p ";
  // The initiator sends the RTR (RFC 6581 §7.1); the responder only waits for it.
  s += !p.p2p ? "off" : p.initiator ? std::string("rtr ") + kRtr[static_cast<int>(p.rtr)] : "on";
  return s + " ird " + std::to_string(p.ird) + " ord " + std::to_string(p.ord) +
         (p.large_fpdu ? " large-fpdu" : "") + (p.rfc7306 ? " rfc7306" : "") +
         (p.same_host ? " same-host" : "") + " recv-wait " + std::to_string(p.recv_wait_ms) + "ms";
}

} // namespace iwarp
