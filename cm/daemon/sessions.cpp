// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's sessions (sessions.hpp): listen, accept, connect, the MPA exchange and the
// hand-over, as a state machine over the event loop's socket and client handles.
#include "sessions.hpp"

#include "config.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace uiwarp::daemon {

std::vector<std::uint8_t> Sessions::to_u8(const std::vector<std::byte>& v) {
  std::vector<std::uint8_t> o(v.size());
  std::transform(v.begin(), v.end(), o.begin(), [](std::byte b) { return std::uint8_t(b); });
  return o;
}
std::vector<std::byte> Sessions::to_bytes(const std::vector<std::uint8_t>& v) {
  std::vector<std::byte> o(v.size());
  std::transform(v.begin(), v.end(), o.begin(), [](std::uint8_t b) { return std::byte(b); });
  return o;
}

namespace {

std::string errno_text(int e) { return std::strerror(e); }

} // namespace

// ---- listeners ----

void Sessions::on_listen(ClientId c, const proto::Listen& m, SockId sock,
                         const sockaddr_storage& addr) {
  proto::ListenReply r{m.id, 0, {}};
  iwarp::MpaPolicy policy = policy_.mpa;
  std::string why;
  if (sock < 0) {
    r.status = EINVAL;
    r.reason = "listen: the application passed no listening TCP socket";
  } else if (!apply_mpa_overrides(m.policy, policy, &why)) {
    r.status = EINVAL;
    r.reason = "listen on " + proto::addr_string(addr) + ": MPA policy '" + m.policy + "': " + why;
    actions_.push_back(Close{sock});
  } else {
    Listener l{c, m.id, addr, policy, {}};
    std::istringstream lines(m.device_policies);
    for (std::string line; r.status == 0 && std::getline(lines, line);) {
      const std::string netdev = line.substr(0, line.find(' '));
      const std::string device = line.size() > netdev.size() ? line.substr(netdev.size() + 1) : "";
      iwarp::MpaPolicy p = policy_.mpa;
      if (netdev.empty() || !apply_mpa_overrides(device, p, &why) ||
          !apply_mpa_overrides(m.policy, p, &why)) {
        r.status = EINVAL;
        r.reason = "listen on " + proto::addr_string(addr) + ": MPA policy of " + netdev + " '" +
                   device + "': " + why;
        actions_.push_back(Close{sock});
      }
      l.by_netdev[netdev] = p;
    }
    if (r.status == 0) listeners_[sock] = std::move(l);
  }
  actions_.push_back(ToClient{c, std::move(r)});
}

void Sessions::on_unlisten(ClientId c, const proto::Unlisten& m) {
  // An IbConnect's id: its wait, or its session before the hand-over.
  std::erase_if(ib_waits_, [&](const IbWait& w) { return w.client == c && w.id == m.id; });
  std::vector<SockId> ended;
  for (const auto& [fd, s] : sessions_)
    if (s.ib && s.client == c && s.id == m.id) ended.push_back(fd);
  for (SockId fd : ended)
    end(fd);
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (it->second.client == c && it->second.id == m.id) {
      actions_.push_back(Close{it->first});
      it = listeners_.erase(it);
    } else {
      ++it;
    }
  }
}

void Sessions::on_listener_closed(SockId sock) {
  if (sock == ib_listener_) ib_listener_ = -1;
  if (listeners_.erase(sock)) actions_.push_back(Close{sock});
}

void Sessions::on_incoming(SockId listener, SockId sock, const sockaddr_storage& local,
                           const sockaddr_storage& peer, bool peer_on_host, Clock::time_point now,
                           const std::string& netdev) {
  auto l = listeners_.find(listener);
  if (l == listeners_.end()) {
    actions_.push_back(Close{sock});
    return;
  }
  ++counters_.requests;
  Session s;
  s.client = l->second.client;
  s.id = l->second.id;
  s.token = next_token_++;
  s.ib = sock >= 0 && listener == ib_listener_;
  s.local = local;
  s.peer = peer;
  s.peer_on_host = peer_on_host;
  auto dev = l->second.by_netdev.find(netdev);
  s.policy = dev != l->second.by_netdev.end() ? dev->second : l->second.policy;
  s.mpa = iwarp::MpaStartup::responder(s.policy, now);
  sessions_[sock] = std::move(s);
}

// ---- the active side ----

void Sessions::on_connect(ClientId c, const proto::Connect& m, SockId sock, int error,
                          Clock::time_point now, bool ib) {
  ++counters_.connects;
  iwarp::MpaPolicy policy = policy_.mpa;
  std::string why;
  if (sock >= 0 && !error && !apply_mpa_overrides(m.policy, policy, &why)) {
    ++counters_.connect_failed;
    proto::ConnectReply r;
    r.id = m.id;
    r.status = EINVAL;
    r.reason =
        "connect to " + proto::addr_string(m.dst) + ": MPA policy '" + m.policy + "': " + why;
    r.dst = m.dst;
    actions_.push_back(ToClient{c, std::move(r)});
    actions_.push_back(Close{sock});
    return;
  }
  if (sock < 0 || error) {
    ++counters_.connect_failed;
    proto::ConnectReply r;
    r.id = m.id;
    r.status = sock < 0 ? EINVAL : error;
    r.reason = sock < 0 ? "connect: the application passed no unconnected TCP socket"
                        : "connect to " + proto::addr_string(m.dst) + ": " + errno_text(error);
    r.dst = m.dst;
    actions_.push_back(ToClient{c, std::move(r)});
    if (sock >= 0) actions_.push_back(Close{sock});
    return;
  }
  Session s;
  s.client = c;
  s.id = m.id;
  s.phase = Phase::TcpConnect;
  s.ib = ib;
  s.pd = to_bytes(m.private_data);
  s.ird = static_cast<std::uint16_t>(m.ird);
  s.ord = static_cast<std::uint16_t>(m.ord);
  s.local = m.src;
  s.peer = m.dst;
  s.policy = policy;
  s.until = now + (m.timeout_ms ? std::chrono::milliseconds(m.timeout_ms) : policy.timeout);
  sessions_[sock] = std::move(s);
}

void Sessions::on_connected(SockId sock, const sockaddr_storage& local, bool peer_on_host,
                            Clock::time_point now) {
  Session* s = find(sock);
  if (!s || s->phase != Phase::TcpConnect) return;
  move(*s, {Phase::TcpConnect}, Phase::Exchange);
  s->local = local;
  s->peer_on_host = peer_on_host;
  s->until.reset();
  iwarp::MpaPolicy p = s->policy;
  if (s->ird) p.ird = s->ird;
  if (s->ord) p.ord = s->ord;
  s->mpa = iwarp::MpaStartup::initiator(p, std::move(s->pd), now);
  step(sock, *s, now);
}

void Sessions::connect_reply(Session& s, int status, const std::string& reason) {
  if (status) ++counters_.connect_failed;
  proto::ConnectReply r;
  r.id = s.id;
  r.status = status;
  r.reason = reason;
  r.src = s.local;
  r.dst = s.peer;
  if (s.mpa && (s.mpa->state() == iwarp::MpaState::Rejected ||
                s.mpa->state() == iwarp::MpaState::Established)) {
    r.private_data = to_u8(s.mpa->result().peer_private_data);
    r.params = params(s);
  }
  actions_.push_back(ToClient{s.client, std::move(r)});
}

iwarp::ConnParams Sessions::params(const Session& s) {
  iwarp::ConnParams p = s.mpa->result().conn;
  p.peer_off_host = !s.peer_on_host;
  return p;
}

// ---- the passive side ----

Sessions::Session* Sessions::by_token(ClientId c, std::uint64_t token, SockId* sock) {
  for (auto& [fd, s] : sessions_) {
    if (s.token == token && s.client == c && s.mpa && s.mpa->role() == iwarp::MpaRole::Responder) {
      *sock = fd;
      return &s;
    }
  }
  return nullptr;
}

void Sessions::request_received(Session& s) {
  proto::ConnRequest r;
  r.listen_id = s.id;
  r.token = s.token;
  r.src = s.local;
  r.dst = s.peer;
  r.private_data = to_u8(s.mpa->request().private_data);
  if (s.mpa->request().enhanced) {
    r.ird = s.mpa->request().enhanced->ird;
    r.ord = s.mpa->request().enhanced->ord;
  } else {
    // No IRD/ORD on the wire (RFC 5044 rev 1, or rev 2 without RFC 6581 §9.1's enhanced data):
    // nothing was negotiated, so the application decides. Report our own policy, not 0:
    // librdmacm's rdma_accept(NULL) caps the QP's ORD at the peer IRD reported here, and 0
    // would forbid every RDMA Read (rping's server fails).
    r.ird = s.policy.ord;
    r.ord = s.policy.ird;
  }
  // uiwarp's same-host bit, under a policy that answers it: the client's Accept may bring an
  // offer for the Reply (an RDMAC peer, revision 0, gets none: MpaStartup::accept). The offer
  // names this process (boot id, pid namespace, uid, pid) and is of use only on this host: a
  // peer at another address gets an ordinary Reply.
  r.same_host = s.mpa->request().same_host && s.policy.same_host && s.mpa->request().rev != 0 &&
                s.peer_on_host;
  move(s, {Phase::Exchange}, Phase::Notified);
  actions_.push_back(ToClient{s.client, std::move(r)});
}

void Sessions::on_accept(ClientId c, const proto::Accept& m, Clock::time_point now) {
  SockId sock = -1;
  Session* s = by_token(c, m.token, &sock);
  if (!s || s->phase != Phase::Notified || s->mpa->state() != iwarp::MpaState::RequestReceived) {
    proto::AcceptReply r;
    r.token = m.token;
    r.status = s ? ECONNRESET : ENOENT;
    r.reason = s ? "the connection failed before it was accepted" : "no such connection request";
    actions_.push_back(ToClient{c, std::move(r)});
    return;
  }
  // An offer the ConnRequest did not ask for (a peer elsewhere) stays out of the Reply.
  s->mpa->accept(to_bytes(m.private_data), static_cast<std::uint16_t>(m.ird),
                 static_cast<std::uint16_t>(m.ord),
                 s->peer_on_host ? m.same_host_offer : std::nullopt);
  move(*s, {Phase::Notified}, Phase::Accepted);
  // The AcceptReply (and the socket) go to the client once the MPA Reply is written: the
  // application's rdma_accept returns after it, and perftest posts at once.
  s->until = now + kDrainTimeout;
  actions_.push_back(Flush{sock});
  step(sock, *s, now);
}

void Sessions::on_reject(ClientId c, const proto::Reject& m, Clock::time_point now) {
  SockId sock = -1;
  Session* s = by_token(c, m.token, &sock);
  if (!s || s->phase != Phase::Notified || s->mpa->state() != iwarp::MpaState::RequestReceived)
    return;
  ++counters_.rejected;
  s->mpa->reject(to_bytes(m.private_data));
  move(*s, {Phase::Notified}, Phase::Closing);
  s->until = now + kDrainTimeout;
  actions_.push_back(Flush{sock});
  step(sock, *s, now);
}

// ---- both sides ----

std::size_t Sessions::on_bytes(SockId sock, iwarp::ConstBytes in, Clock::time_point now) {
  Session* s = find(sock);
  // Only the exchange reads: after it the bytes are the data path's, or nobody's.
  if (!s || !s->mpa || s->phase != Phase::Exchange) return 0;
  std::size_t used = s->mpa->on_bytes(in);
  step(sock, *s, now);
  return used;
}

void Sessions::on_peer_closed(SockId sock, Clock::time_point now) {
  Session* s = find(sock);
  if (!s) return;
  if (s->phase == Phase::Notified || s->phase == Phase::IbWaiting) {
    // The initiator left while the client decides: its Accept finds no request.
    end(sock);
    return;
  }
  if (!s->mpa || s->phase == Phase::Closing || s->phase == Phase::Held ||
      s->mpa->state() == iwarp::MpaState::Established) {
    fail(sock, *s, ECONNRESET, "the peer " + proto::addr_string(s->peer) + " closed the connection",
         now);
    return;
  }
  s->mpa->on_peer_closed();
  step(sock, *s, now);
}

void Sessions::on_socket_error(SockId sock, int error, Clock::time_point now) {
  Session* s = find(sock);
  if (!s) return;
  if (s->phase == Phase::TcpConnect) {
    connect_reply(*s, error,
                  "connect to " + proto::addr_string(s->peer) + ": " + errno_text(error));
    end(sock);
    return;
  }
  fail(sock, *s, ECONNRESET, // nothing more can be written
       "connection with " + proto::addr_string(s->peer) + ": " + errno_text(error), now, Drain::No);
}

iwarp::ConstBytes Sessions::output(SockId sock) const {
  const Session* s = find(sock);
  return s && s->mpa ? s->mpa->output() : iwarp::ConstBytes{};
}

void Sessions::consume_output(SockId sock, std::size_t n, Clock::time_point now) {
  Session* s = find(sock);
  if (!s || !s->mpa) return;
  s->mpa->consume_output(n);
  if (s->mpa->output().empty()) step(sock, *s, now);
}

// What the MPA machine's state asks for next.
void Sessions::step(SockId sock, Session& s, Clock::time_point now) {
  const bool drained = s.mpa->output().empty();
  if (s.phase == Phase::Closing) {
    if (drained) end(sock);
    return;
  }
  switch (s.mpa->state()) {
  case iwarp::MpaState::AwaitRequest:
  case iwarp::MpaState::AwaitReply: return;
  case iwarp::MpaState::RequestReceived:
    if (s.phase != Phase::Exchange) return; // asked already
    if (s.ib)
      ib_request(sock, s, now);
    else
      request_received(s);
    return;
  case iwarp::MpaState::Established:
    if (drained) established(sock, s, now);
    return;
  case iwarp::MpaState::Rejected: // only an initiator gets here: we reject in Closing
    ++counters_.rejected_by_peer;
    connect_reply(s, ECONNREFUSED, "the peer rejected the connection");
    end(sock);
    return;
  case iwarp::MpaState::Failed:
    log("MPA with " + proto::addr_string(s.peer) + " failed: " + s.mpa->error().message);
    ++counters_.mpa_errors;
    fail(sock, s, ECONNRESET, s.mpa->error().message, now);
    return;
  }
}

void Sessions::established(SockId sock, Session& s, Clock::time_point now) {
  if (s.mpa->role() == iwarp::MpaRole::Responder) {
    if (s.phase != Phase::Accepted) return;
    ++counters_.accepted;
    if (s.ib) { // IB-style connect: reported as the initiator's is
      proto::ConnectReply r;
      r.id = s.id;
      r.src = s.local;
      r.dst = s.peer;
      r.params = params(s);
      hand_over(sock, s, std::move(r), now);
      return;
    }
    proto::AcceptReply r;
    r.token = s.token;
    r.params = params(s);
    r.src = s.local;
    r.dst = s.peer;
    hand_over(sock, s, std::move(r), now);
    return;
  }
  if (s.phase == Phase::Exchange && policy_.first_fpdu_delay.count() > 0) {
    // Hold the connection, unread (the peer's first bytes are the data path's), until
    // on_timer hands it over; see SessionPolicy::first_fpdu_delay.
    move(s, {Phase::Exchange}, Phase::Held);
    s.until = now + policy_.first_fpdu_delay;
    actions_.push_back(Flush{sock});
    return;
  }
  if (s.phase == Phase::Held && now < *s.until) return;
  ++counters_.connected;
  proto::ConnectReply r;
  r.id = s.id;
  r.src = s.local;
  r.dst = s.peer;
  r.private_data = to_u8(s.mpa->result().peer_private_data);
  r.params = params(s);
  hand_over(sock, s, std::move(r), now);
}

void Sessions::hand_over(SockId sock, Session& s, proto::Message reply, Clock::time_point now) {
  iwarp::ConnParams params = std::visit(
      [](const auto& m) {
        if constexpr (requires { m.params; })
          return m.params;
        else
          return iwarp::ConnParams{};
      },
      reply);
  conns_.handed_over(HandedView{s.client, s.local, s.peer, params, now, 0, {}, false, {}});
  actions_.push_back(ToClient{s.client, std::move(reply), sock});
  sessions_.erase(sock);
}

// The session failed: its client hears it (an initiator's connect, a responder's accept),
// what the MPA machine still has to say (a Terminate, a Rev1 Reply) drains, then it closes.
void Sessions::fail(SockId sock, Session& s, int status, const std::string& why,
                    Clock::time_point now, Drain drain) {
  // A session already closing has said what it had to (a reject, or an earlier failure).
  const bool accepted = s.phase == Phase::Accepted;
  const bool said = s.phase == Phase::Closing;
  if (!said && (!s.mpa || s.mpa->role() == iwarp::MpaRole::Initiator || (s.ib && accepted))) {
    connect_reply(s, status, why);
  } else if (!said && accepted) {
    proto::AcceptReply r;
    r.token = s.token;
    r.status = status;
    r.reason = why;
    actions_.push_back(ToClient{s.client, std::move(r)});
  }
  if (drain == Drain::No || s.phase == Phase::Closing || !s.mpa || s.mpa->output().empty()) {
    end(sock);
    return;
  }
  move(s,
       {Phase::TcpConnect, Phase::Exchange, Phase::Notified, Phase::IbWaiting, Phase::Accepted,
        Phase::Held},
       Phase::Closing);
  s.until = now + kDrainTimeout;
  actions_.push_back(Flush{sock});
}

void Sessions::end(SockId sock) {
  sessions_.erase(sock);
  actions_.push_back(Close{sock});
}

void Sessions::on_client_gone(ClientId c) {
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (it->second.client == c) {
      actions_.push_back(Close{it->first});
      it = listeners_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.client == c) {
      actions_.push_back(Close{it->first});
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  conns_.on_client_gone(c);
  std::erase_if(ib_waits_, [c](const IbWait& w) { return w.client == c; });
}

// ---- the lifecycle ----

const char* name(Phase p) {
  static constexpr const char* kNames[] = {
      "tcp connect",       "MPA exchange",      "awaiting accept", "awaiting IB-style QP",
      "sending MPA reply", "established, held", "closing"};
  static_assert(std::size(kNames) == static_cast<std::size_t>(Phase::Closing) + 1);
  return kNames[static_cast<std::size_t>(p)];
}

bool Sessions::move(Session& s, std::initializer_list<Phase> from, Phase to) {
  if (std::find(from.begin(), from.end(), s.phase) != from.end()) {
    s.phase = to;
    return true;
  }
  log(std::string("uiwarpd: a session with ") + proto::addr_string(s.peer) + " in phase \"" +
      name(s.phase) + "\" cannot go to \"" + name(to) + "\"; it stays");
  return false;
}

// ---- time ----

Clock::time_point Sessions::session_deadline(const Session& s) const {
  if (s.until) return *s.until;
  return s.mpa ? s.mpa->deadline() : Clock::time_point::max();
}

Clock::time_point Sessions::deadline() const {
  auto next = Clock::time_point::max();
  for (const auto& [fd, s] : sessions_)
    next = std::min(next, session_deadline(s));
  for (const IbWait& w : ib_waits_)
    next = std::min(next, w.until);
  return next;
}

void Sessions::on_timer(Clock::time_point now) {
  for (auto it = ib_waits_.begin(); it != ib_waits_.end();) {
    if (it->until > now) {
      ++it;
      continue;
    }
    ++counters_.timeouts;
    proto::ConnectReply r;
    r.id = it->id;
    r.status = ETIMEDOUT;
    r.reason = "IB-style connect: QP " + ib::qpn_string(it->peer_qpn) + " at " +
               proto::addr_string(it->peer) + " did not connect to QP " +
               ib::qpn_string(it->local_qpn) + " in time (is the peer a uiwarp QP in RTR?)";
    r.dst = it->peer;
    actions_.push_back(ToClient{it->client, std::move(r)});
    it = ib_waits_.erase(it);
  }
  std::vector<SockId> late;
  for (const auto& [fd, s] : sessions_)
    if (session_deadline(s) <= now) late.push_back(fd);
  for (SockId sock : late) {
    Session& s = sessions_.at(sock);
    if (s.phase == Phase::Held) {
      established(sock, s, now);
      continue;
    }
    if (s.phase == Phase::Closing) {
      end(sock);
      continue;
    }
    if (s.phase == Phase::IbWaiting) {
      ib_refuse(sock, s,
                "IB-style connect from " + proto::addr_string(s.peer) + " (QP " +
                    ib::qpn_string(s.ib_req.src_qpn) + "): no QP " +
                    ib::qpn_string(s.ib_req.dst_qpn) + " here waits for it",
                now);
      continue;
    }
    std::string why = "MPA startup timed out with " + proto::addr_string(s.peer);
    log(why);
    ++counters_.timeouts;
    if (s.mpa) s.mpa->on_timer(now);
    fail(sock, s, ETIMEDOUT, why, now, Drain::No); // a peer that does not answer gets nothing more
  }
}

// ---- what the loop waits for, and status ----

Sessions::Session* Sessions::find(SockId sock) {
  auto it = sessions_.find(sock);
  return it == sessions_.end() ? nullptr : &it->second;
}
const Sessions::Session* Sessions::find(SockId sock) const {
  auto it = sessions_.find(sock);
  return it == sessions_.end() ? nullptr : &it->second;
}

Interest Sessions::interest(SockId sock) const {
  if (listeners_.count(sock)) return Interest::Accept;
  const Session* s = find(sock);
  if (!s || s->phase == Phase::Held) return Interest::None;
  if (s->phase == Phase::TcpConnect || (s->mpa && !s->mpa->output().empty()))
    return Interest::Writable;
  if (s->phase == Phase::Notified || s->phase == Phase::IbWaiting || s->phase == Phase::Closing)
    return Interest::Hangup;
  return Interest::Readable;
}

bool Sessions::connecting(SockId sock) const {
  const Session* s = find(sock);
  return s && s->phase == Phase::TcpConnect;
}

std::vector<ListenerView> Sessions::listeners() const {
  std::vector<ListenerView> out;
  for (const auto& [fd, l] : listeners_)
    if (l.client >= 0) out.push_back(ListenerView{l.client, l.addr});
  return out;
}

std::vector<SessionView> Sessions::sessions() const {
  std::vector<SessionView> out;
  for (const auto& [fd, s] : sessions_) {
    std::string st = s.phase != Phase::Exchange                   ? name(s.phase)
                     : s.mpa->role() == iwarp::MpaRole::Initiator ? "awaiting MPA reply"
                                                                  : "awaiting MPA request";
    out.push_back(SessionView{s.client, s.local, s.peer, st});
  }
  return out;
}

} // namespace uiwarp::daemon
