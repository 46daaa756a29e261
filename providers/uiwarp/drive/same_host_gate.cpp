// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "same_host_gate.hpp"

namespace uiwarp::drive {

const char* name(TcpReason r) {
  switch (r) {
  case TcpReason::Behind: return "behind";
  case TcpReason::Burst: return "burst";
  case TcpReason::Refused: return "refused";
  case TcpReason::Fault: return "fault";
  case TcpReason::Fork: return "fork";
  case TcpReason::Stopped: return "stopped";
  }
  return "?";
}

bool queue_idle(const GateFacts& f) {
  return !f.forked && f.sq_outstanding == 0 && f.completions_ready == 0 && f.piped == 0 &&
         !f.tx_pending;
}

Gate decide(const GateFacts& f, const QpDrive& d) {
  if (f.forked) return {false, TcpReason::Fork};
  // Every framed octet processed by the target, or nothing framed but the RTR.
  const bool processed = f.consumed == f.framed || f.framed == f.rtr_octets;
  if (!queue_idle(f) || !processed) return {false, TcpReason::Behind};
  if (!d.copy_now(f.octets, f.now, f.send_cq_polled, f.ring_write))
    return {false, TcpReason::Burst};
  return {true, TcpReason::Behind};
}

} // namespace uiwarp::drive
