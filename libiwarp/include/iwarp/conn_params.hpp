// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What an MPA exchange negotiated for one connection, as the data path needs it. libiwarp
// makes it from the MPA result (conn_params), uiwarpd sends it to the program's shim with the
// connected socket, the shim hands it to the provider unchanged, and qp_config_from (qp.hpp)
// turns it into the QP's configuration: one type, one mapping, from the wire to the engine.
#pragma once

#include "iwarp/mpa_startup.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace iwarp {

struct ConnParams {
  std::uint8_t version = kVersionIetf; // DDP/RDMAP version: 1 IETF, 0 RDMAC
  bool crc = true;                     // CRC32c both ways
  bool markers_tx = false;             // we insert markers (the peer asked)
  bool markers_rx = false;             // the peer inserts markers (we asked)
  std::uint16_t ird = 0;               // our IRD and ORD, as negotiated (RFC 6581 §9.1)
  std::uint16_t ord = 0;
  std::uint16_t peer_ird = 0; // what the peer announced (0: nothing; rdma_cm reports them)
  std::uint16_t peer_ord = 0;
  bool initiator = true;             // MPA role: the responder never sends first (RFC 5044 r4)
  bool p2p = false;                  // RFC 6581 peer-to-peer mode
  RtrType rtr = RtrType::Send;       // p2p: the RTR the initiator sends first (RFC 6581 §9.2)
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

// The parameters `role`'s end of an exchange got, with the local policy's receive wait.
ConnParams conn_params(const MpaResult& r, MpaRole role, const MpaPolicy& local = {});

// One line for logs and `uiwarp conn show`: "IETF crc on markers -/- p2p rtr write ird 16 ...",
// " same-host" when both ends agreed on it.
std::string describe(const ConnParams& p);

} // namespace iwarp
