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

namespace {

constexpr std::chrono::seconds kDrainTimeout{2}; // as sessions.cpp's

} // namespace

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
           now + (m.timeout_ms ? std::chrono::milliseconds(m.timeout_ms) : policy_.mpa.timeout)};
  // Its peer may have come first: a held Request that names it.
  for (auto& [fd, s] : sessions_) {
    if (!s.ib_waiting) continue;
    ib_waits_.push_back(w);
    if (ib_match(fd, s, std::prev(ib_waits_.end()), now)) return;
    ib_waits_.pop_back();
  }
  ib_waits_.push_back(w);
}

// The Request is complete (RequestReceived): whose is it?
void Sessions::ib_request(SockId sock, Session& s, Clock::time_point now) {
  const auto& pd = s.mpa->request().private_data;
  std::vector<std::uint8_t> raw(pd.size());
  std::transform(pd.begin(), pd.end(), raw.begin(), [](std::byte b) { return std::uint8_t(b); });
  auto req = ib::decode(raw.data(), raw.size());
  if (!req) {
    ib_refuse(sock, s,
              "a connection from " + proto::addr_string(s.peer) +
                  " to ib-connect-port is not a uiwarp IB-style connect Request",
              now);
    return;
  }
  s.ib_req = *req;
  for (auto it = ib_waits_.begin(); it != ib_waits_.end(); ++it)
    if (ib_match(sock, s, it, now)) return;
  s.notified = true; // nobody to ask: hold it (Hangup) until its QP waits, or the timeout
  s.ib_waiting = true;
  s.until = now + s.policy.timeout;
}

// Accepts the Request for waiting QP `w` if it is the one it names (and then forgets `w`).
bool Sessions::ib_match(SockId sock, Session& s, std::vector<IbWait>::iterator w,
                        Clock::time_point now) {
  if (w->local_qpn != s.ib_req.dst_qpn || w->peer_qpn != s.ib_req.src_qpn ||
      !ib::same_host(w->peer, s.peer) || !ib::same_host(w->local, s.local))
    return false;
  s.client = w->client;
  s.id = w->id;
  s.ib_waiting = false;
  s.accepted = true;
  s.mpa->accept({}, w->ird ? w->ird : s.policy.ird, w->ord ? w->ord : s.policy.ord);
  s.until = now + kDrainTimeout;
  ib_waits_.erase(w);
  actions_.push_back(Flush{sock});
  step(sock, s, now);
  return true;
}

// An MPA Reject whose private data says why (RFC 5044 §7.1.2: a Reply with the Reject bit),
// then close: the initiator's uiwarpd reports it as final, no retry.
void Sessions::ib_refuse(SockId sock, Session& s, const std::string& why, Clock::time_point now) {
  log(why);
  ++counters_.rejected;
  const std::string text = why.substr(0, std::min<std::size_t>(policy_.mpa.max_private_data, 255));
  std::vector<std::byte> pd(text.size());
  std::transform(text.begin(), text.end(), pd.begin(), [](char c) { return std::byte(c); });
  s.ib_waiting = false;
  s.mpa->reject(std::move(pd));
  s.closing = true;
  s.until = now + kDrainTimeout;
  actions_.push_back(Flush{sock});
  step(sock, s, now);
}

} // namespace uiwarp::daemon
