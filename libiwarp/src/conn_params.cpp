// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "iwarp/conn_params.hpp"

namespace iwarp {

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
