// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What a program is told, unasked, about its connections: why one ended other than by an
// orderly close, and the first time one leaned on the receive wait, which iWARP does not
// have. An RNIC or siw would have ended such a connection with a Terminate, so a program
// that works here only because of the wait would fail there; the line says so. One line
// each on the log (stderr unless VERBS_LOG_FILE says otherwise; UIWARP_LOG=quiet or
// VERBS_LOG_LEVEL=0 silences it), naming the connection by its addresses and QP number.
#include "provider.hpp"
#include "uiwarp/daemon_proto.hpp"
#include "uiwarp/ip.hpp"
#include "uiwarp/log.hpp"

#include <cstdio>
#include <sys/socket.h>

namespace uiwarp {

void Qp::note_endpoints() {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  conn.addresses.clear();
  // Taken while the connection is up: once it ends, getpeername no longer answers.
  if (conn.fd >= 0 && !::getsockname(conn.fd, reinterpret_cast<sockaddr*>(&local), &ll) &&
      !::getpeername(conn.fd, reinterpret_cast<sockaddr*>(&peer), &pl))
    conn.addresses =
        proto::addr_string(unmapped(local)) + " -> " + proto::addr_string(unmapped(peer));
}

std::string Qp::endpoints() const {
  char qpn[16];
  std::snprintf(qpn, sizeof qpn, "0x%06x", vqp.qp.qp_num);
  return "connection " + (conn.addresses.empty() ? "" : conn.addresses + ", ") + "QP " + qpn;
}

void Qp::report_end() const {
  const auto& e = engine->error();
  if (!e || e->consumer) return; // the program itself ended it
  log::error("provider", endpoints() + " ended: " + iwarp::describe(*e, engine->terminate_sent()));
}

void Qp::report_recv_wait() {
  if (conn.recv_wait_reported) return;
  conn.recv_wait_reported = true;
  log::error("provider", endpoints() + ": a Send arrived with no receive posted; it waits up to " +
                             std::to_string(policy.recv_wait() / 1'000'000) +
                             " ms for one (recv-wait-ms): an iWARP RNIC or siw would have "
                             "terminated here (UIWARP_RECV_WAIT_MS=0 does so too)");
}

} // namespace uiwarp
