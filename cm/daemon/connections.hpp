// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's record of the connections it handed over to their programs, and of the last ones
// that ended, for `uiwarp conn show` (status.hpp): what each program's provider said of them
// (the QP that took the socket, its path, why it ended). Without I/O, as Sessions (sessions.hpp),
// which hands each connection over here once its MPA exchange is done.
#pragma once

#include "iwarp/conn_params.hpp"
#include "iwarp/mpa_startup.hpp"
#include "uiwarp/daemon_proto.hpp"

#include <cstdint>
#include <deque>
#include <string>
#include <sys/socket.h>
#include <sys/types.h>
#include <vector>

namespace uiwarp::daemon {

using Clock = iwarp::MpaClock;
using ClientId = int; // the event loop's handle of a client (its Unix socket)

struct HandedView {
  ClientId client;
  sockaddr_storage local, peer;
  iwarp::ConnParams params;
  Clock::time_point since;
  // Set when the client's provider reports the QP that took the socket (proto::Attached).
  std::uint32_t qp_num = 0;
  std::string device;
  bool attached = false;
  // How its RDMA Writes and Reads move, as the provider said (Attached, Path): "same-host", or
  // "tcp: why not"; "" until it says.
  std::string path;
};

// A handed-over connection that ended, as its program's provider reported it (proto::Closed).
struct ClosedView {
  HandedView conn;
  uid_t uid;
  std::string process; // "pid 1234 (rping)"
  std::uint32_t qp_num;
  std::string reason;
  Clock::time_point ended;
  std::string drive; // what the drive policy decided for it
};

class Connections {
public:
  // A connection went to client `c`'s program with these parameters.
  void handed_over(HandedView v) { handed_.push_back(std::move(v)); }
  // Handed-over connections; forget_handed() drops those the kernel no longer has (the client
  // closed them).
  const std::vector<HandedView>& handed() const { return handed_; }
  template <class Pred> void forget_handed(Pred gone) { std::erase_if(handed_, gone); }
  // Client `c`'s provider says a connection it was handed ended, and why: it leaves handed()
  // for closed(), which keeps the last kClosedKept (`uiwarp conn show --closed`). `uid` and
  // `process` name the client, which may be gone when the record is read.
  void on_closed(ClientId c, const proto::Closed& m, uid_t uid, std::string process,
                 Clock::time_point now);
  // Client `c`'s provider gave a handed-over connection to QP m.qp_num (which is in RTS).
  void on_attached(ClientId c, const proto::Attached& m);
  // Client `c`'s provider says how a connection's RDMA Writes and Reads move now.
  void on_path(ClientId c, const proto::Path& m);
  // Client `c` is gone: so are its connections (what ended stays in closed()).
  void on_client_gone(ClientId c) {
    std::erase_if(handed_, [c](const HandedView& h) { return h.client == c; });
  }
  static constexpr std::size_t kClosedKept = 64;
  const std::deque<ClosedView>& closed() const { return closed_; }

private:
  std::vector<HandedView> handed_;
  std::deque<ClosedView> closed_; // oldest first
};

} // namespace uiwarp::daemon
