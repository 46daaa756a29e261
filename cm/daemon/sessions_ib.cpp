// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's sessions, IB-style connect's responder half (sessions.hpp, uiwarp/ib_connect.hpp):
// QPs that wait for their peer, and the Requests on the rendezvous listener that name them.
// A Request is matched on all four of its QP pair's coordinates (both QPNs, both addresses);
// one that names no waiting QP is held for the startup timeout (the peer may reach RTR a
// moment later) and then rejected, with the reason as the Reject's private data.
#include "sessions.hpp"

#include <algorithm>
#include <cerrno>

namespace uiwarp::daemon {

void Sessions::on_ib_listen(SockId sock, const sockaddr_storage& addr) {
  ib_listener_ = sock;
  listeners_[sock] = Listener{-1, 0, addr, policy_.mpa, {}};
}

void Sessions::on_ib_wait(ClientId c, const proto::IbConnect& m, Clock::time_point now) {
  IbWait w{c,
           m.id,
           m.local_qpn,
           m.peer_qpn,
           m.local,
           m.peer,
           static_cast<std::uint16_t>(m.ird),
           static_cast<std::uint16_t>(m.ord),
           now + (m.timeout_ms ? std::chrono::milliseconds(m.timeout_ms) : policy_.mpa.timeout),
           m.same_host_offer};
  // Its peer may have come first: a held Request that names it.
  for (auto& [fd, s] : sessions_) {
    if (s.phase == Phase::IbWaiting && ib_names(s, w)) {
      ib_accept(fd, s, w, now);
      return;
    }
  }
  ib_waits_.push_back(w);
}

// The Request is complete (RequestReceived): whose is it?
void Sessions::ib_request(SockId sock, Session& s, Clock::time_point now) {
  const std::vector<std::uint8_t> pd = to_u8(s.mpa->request().private_data);
  auto req = ib::decode(pd.data(), pd.size());
  if (!req) {
    ib_refuse(sock, s,
              "a connection from " + proto::addr_string(s.peer) +
                  " to ib-connect-port is not a uiwarp IB-style connect Request",
              now);
    return;
  }
  s.ib_req = *req;
  auto it = std::find_if(ib_waits_.begin(), ib_waits_.end(),
                         [&](const IbWait& w) { return ib_names(s, w); });
  if (it != ib_waits_.end()) {
    const IbWait found = *it;
    ib_waits_.erase(it);
    ib_accept(sock, s, found, now);
    return;
  }
  // Nobody to ask: hold it (Hangup) until its QP waits, or the timeout.
  move(s, {Phase::Exchange}, Phase::IbWaiting);
  s.until = now + s.policy.timeout;
}

// Whether the Request names waiting QP `w`: both QPNs and both addresses.
bool Sessions::ib_names(const Session& s, const IbWait& w) {
  return w.local_qpn == s.ib_req.dst_qpn && w.peer_qpn == s.ib_req.src_qpn &&
         ib::same_host(w.peer, s.peer) && ib::same_host(w.local, s.local);
}

// Accepts the Request for waiting QP `w` (no longer among ib_waits_) without asking its client.
void Sessions::ib_accept(SockId sock, Session& s, const IbWait& w, Clock::time_point now) {
  s.client = w.client;
  s.id = w.id;
  move(s, {Phase::Exchange, Phase::IbWaiting}, Phase::Accepted);
  // The QP's offer, as rdma_accept's: only to a peer on this host (Sessions::request_received's
  // rule); MpaStartup::accept sends it only if the Request asked.
  s.mpa->accept({}, w.ird ? w.ird : s.policy.ird, w.ord ? w.ord : s.policy.ord,
                s.peer_on_host && s.policy.same_host ? w.same_host_offer : std::nullopt);
  s.until = now + kDrainTimeout;
  actions_.push_back(Flush{sock});
  step(sock, s, now);
}

// An MPA Reject whose private data says why (RFC 5044 §7.1.2: a Reply with the Reject bit),
// then close: the initiator's uiwarpd reports it as final, no retry.
void Sessions::ib_refuse(SockId sock, Session& s, const std::string& why, Clock::time_point now) {
  log(why);
  ++counters_.rejected;
  const std::string text = why.substr(0, std::min<std::size_t>(policy_.mpa.max_private_data, 255));
  std::vector<std::byte> pd = to_bytes({text.begin(), text.end()});
  s.mpa->reject(std::move(pd));
  move(s, {Phase::Exchange, Phase::IbWaiting}, Phase::Closing);
  s.until = now + kDrainTimeout;
  actions_.push_back(Flush{sock});
  step(sock, s, now);
}

} // namespace uiwarp::daemon
