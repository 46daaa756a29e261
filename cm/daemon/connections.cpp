// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "connections.hpp"

#include <algorithm>

namespace uiwarp::daemon {

namespace {

// The program's rdma_cm id has the addresses as it sees them, which are the handed-over
// socket's: local and peer, in either order (a passive side's id names them as the request did).
bool same_conn(const HandedView& h, const sockaddr_storage& a, const sockaddr_storage& b) {
  auto same = [](const sockaddr_storage& x, const sockaddr_storage& y) {
    return proto::addr_string(x) == proto::addr_string(y);
  };
  return (same(h.local, a) && same(h.peer, b)) || (same(h.local, b) && same(h.peer, a));
}

} // namespace

void Connections::on_attached(ClientId c, const proto::Attached& m) {
  for (HandedView& h : handed_)
    if (h.client == c && !h.attached && same_conn(h, m.local, m.peer)) {
      h.qp_num = m.qp_num;
      h.device = m.device;
      h.attached = true;
      if (!m.path.empty()) h.path = m.path;
      return;
    }
}

void Connections::on_path(ClientId c, const proto::Path& m) {
  for (HandedView& h : handed_)
    if (h.client == c && same_conn(h, m.local, m.peer)) {
      h.path = m.text;
      return;
    }
}

void Connections::on_closed(ClientId c, const proto::Closed& m, uid_t uid, std::string process,
                            Clock::time_point now) {
  // Unknown or already forgotten (uiwarp conn show dropped it): recorded all the same.
  auto it = std::find_if(handed_.begin(), handed_.end(), [&](const HandedView& h) {
    return h.client == c && same_conn(h, m.local, m.peer);
  });
  ClosedView v{HandedView{c, m.local, m.peer, {}, now, m.qp_num, {}, false, {}},
               uid,
               std::move(process),
               m.qp_num,
               m.reason,
               now,
               m.drive};
  if (it != handed_.end()) {
    v.conn = *it;
    handed_.erase(it);
  }
  if (!m.path.empty()) v.conn.path = m.path; // the provider's last word
  closed_.push_back(std::move(v));
  while (closed_.size() > kClosedKept)
    closed_.pop_front();
}

} // namespace uiwarp::daemon
