// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What an MPA exchange negotiated for one connection, in the one type every layer carries:
// MpaStartup yields it (MpaResult::conn), uiwarpd sends it to the program's shim with the
// connected socket, the shim hands it to the provider unchanged, and the QP keeps it as its
// QpConfig::conn. Only the local limits (depths, SGEs, the ULPDU size) are added on the way.
#pragma once

#include "iwarp/wire.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace iwarp {

enum class RtrType : std::uint8_t { Send, Write, Read }; // RFC 6581 B, C, D

struct ConnParams {
  std::uint8_t version = kVersionIetf; // DDP/RDMAP version: 1 IETF, 0 RDMAC
  bool crc = true;                     // CRC32c both ways
  bool markers_tx = false;             // we insert markers (the peer asked)
  bool markers_rx = false;             // the peer inserts markers (we asked)
  std::uint16_t ird = 16;              // our IRD and ORD, as negotiated (RFC 6581 §9.1)
  std::uint16_t ord = 16;
  // What the peer's enhanced data announced, as received (EMPA-022: 0x3FFF kept; 0 when it sent
  // none, which MpaResult::enhanced tells apart). rdma_cm reports them.
  std::uint16_t peer_ird = 0;
  std::uint16_t peer_ord = 0;
  bool initiator = true;             // MPA role: the responder never sends first (RFC 5044 r4)
  bool p2p = false;                  // RFC 6581 peer-to-peer mode
  RtrType rtr = RtrType::Send;       // p2p, initiator: the RTR it sends first (RFC 6581 §9.2)
  bool large_fpdu = false;           // both ends set siw's flag: FPDUs may exceed the MSS
  bool rfc7306 = false;              // both ends are uiwarp and agreed on RFC 7306 (an extension)
  std::uint32_t recv_wait_ms = 2000; // local policy, not negotiated: MpaPolicy::recv_wait
  bool same_host = false; // both ends are uiwarp and agreed on the same-host path (an extension)
  std::optional<SameHostOffer> peer_same_host; // initiator: the responder's same-host offer
  // uiwarpd's word, not negotiated: the peer's address is not this host's. A uiwarpd responder
  // then makes no same-host offer; either end names it as the reason there is no such path.
  bool peer_off_host = false;
};

// Why a connection of `p` goes without the same-host path, as far as its set-up tells ("" when
// it was agreed): "the peer's address is not this host's", or "not agreed in the MPA exchange".
// Inline: the shim, built without the sanitizers the rest may have, must not link the
// compiled core for it (as SameHostOffer's encode and decode).
inline std::string same_host_refusal(const ConnParams& p) {
  if (p.same_host) return "";
  return p.peer_off_host ? "the peer's address is not this host's"
                         : "not agreed in the MPA exchange";
}

// One line for logs and `uiwarp conn show`: "IETF crc on markers -/- p2p rtr write ird 16 ...",
// " same-host" when both ends agreed on it.
std::string describe(const ConnParams& p);

} // namespace iwarp
