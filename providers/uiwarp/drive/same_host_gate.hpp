// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The same-host path's gate: whether an RDMA Write or Read posted now is copied straight into or
// out of the peer (qp_same_host.cpp), or goes over TCP, and why. Facts in, a decision out: no
// system call, no clock read, no lock, as the rest of the drive policy (drive.hpp). The edge
// gathers the facts under the QP's lock and counts each decision (Counters::same_host_tcp, per
// reason, in `uiwarp conn show --closed`).
//
// Ordering is the reason most of it exists. RFC 5040 §5.5 lets a Write be placed in any order
// among the Writes around it, but a Send, a Read Response, a Terminate or a Read posted after it
// must find it placed, and the target's placements of the octets sent before it over TCP must
// come first. So a copy runs only when the QP is behind nothing: its send queue is empty and
// every completion has gone to the CQ, nothing is left to send or in the pipe, and the target has
// processed every octet this end framed (its `consumed` word in the slot; the RFC 6581 RTR alone
// excepted, as it places nothing).
#pragma once

#include "drive.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>

namespace uiwarp::drive {

// Why a Write or Read went over TCP, though the connection had the path.
enum class TcpReason : std::uint8_t {
  Behind,  // something before it unfinished, or not yet processed by the target
  Burst,   // a small post in a burst: it leaves with the burst, in one sendmsg or through the
           // stream ring (copy_now)
  Refused, // the target's table refused it (invalid STag, rights, bounds): TCP says so exactly
  Fault,   // the copy failed (the target gone, memory unmapped): TCP from here on
  Fork,    // posted in a child of fork(): the pins and the mapping are the parent's
  Stopped, // the path has stopped: the target ended the connection and reused its slot
};
inline constexpr std::size_t kTcpReasons = 6;
static_assert(kTcpReasons == std::tuple_size_v<decltype(Counters::same_host_tcp)>);
const char* name(TcpReason r);

// What the edge knows at a post.
struct GateFacts {
  bool forked = false;                 // the QP's path was set up before a fork() of this process
  std::uint32_t sq_outstanding = 0;    // WRs of the engine not yet complete
  std::uint32_t completions_ready = 0; // completions not yet reaped to the CQ
  bool tx_pending = false;             // the engine has octets to send
  std::size_t piped = 0;               // octets in the splice pipe, not yet in the socket
  std::uint64_t framed = 0;            // stream octets this end has framed
  std::uint64_t consumed = 0;          // ... the target has processed (its slot's word)
  std::uint64_t rtr_octets = 0;        // what set-up sent first: the RTR, which places nothing
  std::size_t octets = 0;              // the WR's length
  bool ring_write = false;             // a Write, and the stream goes through the ring
  Ns now = 0, send_cq_polled = 0;      // for the burst test (QpDrive::copy_now)
};

struct Gate {
  bool copy = false;
  TcpReason why = TcpReason::Behind; // when !copy
};

// Whether the QP's own queue lets a copy through (fork, queue, pipe, tx): the facts the edge
// has without touching the peer's slot. The edge reads `consumed` (a cache line the target
// writes) and resolves the WR's memory only when this is true: most posts of a busy QP stop here.
bool queue_idle(const GateFacts& f);
// The decision before the copy; the edge then pins (Refused), copies (Fault) and checks the
// slot's epoch (Stopped), and reports those itself.
Gate decide(const GateFacts& f, const QpDrive& d);

} // namespace uiwarp::drive
