// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's connection set-up, without I/O: the listeners clients registered, each TCP
// connection from accept or connect through its MPA exchange (RFC 5044 §7.1, RFC 6581) to the
// hand-over of the connected socket to the client (and then to Connections, connections.hpp,
// which `uiwarp conn show` reads). It has the
// shape of iwarp::MpaStartup: the event loop (daemon.cpp) reports what happened through on_*,
// writes output(), arms its timer for deadline(), waits for what interest() says, and carries
// out take_actions(). Sockets and clients are the event loop's handles (its file descriptors);
// the core never reads, writes or closes one.
//
// IB-style connect (uiwarp/ib_connect.hpp): an initiator's IbConnect is an on_connect whose
// Request carries both QPNs; a responder's is a wait (on_ib_wait) for the connection that
// arrives on the rendezvous listener (on_ib_listen) naming its QP, which is then accepted
// without asking the client, and reported with ConnectReply like an initiator's.
//
// Call order, per socket: on_listen, or on_incoming/on_connect to start a session; then any of
// on_connected (an active session's TCP connect finished), on_bytes, on_peer_closed,
// on_socket_error, consume_output; a session ends with an action naming its socket (Close, or
// a ToClient that passes it). Client requests (on_accept, on_reject, on_unlisten) and
// on_client_gone may come at any time; on_timer whenever deadline() has passed.
#pragma once

#include "connections.hpp"
#include "iwarp/conn_params.hpp"
#include "iwarp/mpa_startup.hpp"
#include "uiwarp/daemon_proto.hpp"
#include "uiwarp/ib_connect.hpp"

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <variant>
#include <vector>

namespace uiwarp::daemon {

using SockId = int; // the event loop's handle of a TCP socket (the descriptor)

struct SessionPolicy {
  iwarp::MpaPolicy mpa;
  // Initiator: hold an established connection this long before handing it over (uiwarpd.conf
  // first-fpdu-delay-ms: a work-around for Linux siw's passive-side start-up race).
  std::chrono::milliseconds first_fpdu_delay{0};
};

// A message for a client. `pass`: a socket goes with it (SCM_RIGHTS); the session is over and
// the event loop closes its own copy once the message is sent.
struct ToClient {
  ClientId client;
  proto::Message msg;
  SockId pass = -1;
};
// The core is done with a socket (a failed or rejected session, an ended listener): close it.
struct Close {
  SockId sock;
};
// A socket's output() or interest() changed outside one of its own events (e.g. on_accept
// queued the MPA Reply): write it and update what the loop waits for.
struct Flush {
  SockId sock;
};
// A line for the daemon's log (journal or stderr).
struct Log {
  std::string line;
};
using Action = std::variant<ToClient, Close, Flush, Log>;

// What the event loop waits for on a socket.
enum class Interest : std::uint8_t {
  None,     // nothing (a connection held for first_fpdu_delay: its bytes are the data path's)
  Hangup,   // only the peer going away (the Request is in, the client decides)
  Readable, // MPA frames (and hang-up)
  Writable, // the TCP connect's end, or room for output()
  Accept,   // a listener: incoming connections
};

struct Counters {
  std::uint64_t connects = 0, connected = 0, connect_failed = 0, rejected_by_peer = 0;
  std::uint64_t requests = 0, accepted = 0, rejected = 0;
  std::uint64_t mpa_errors = 0, timeouts = 0;
};

// For status: what is there now.
struct ListenerView {
  ClientId client;
  sockaddr_storage addr;
};
// A session's lifecycle, from the TCP connection to the hand-over (or the close):
//   initiator  TcpConnect -> Exchange -> [Held ->] handed over
//   responder  Exchange -> Notified -> Accepted -> handed over     (Notified -> Closing: Reject)
//   IB-style   Exchange -> [IbWaiting ->] Accepted -> handed over  (-> Closing: no such QP)
//   any        -> Closing (a failure, whose Terminate or Rev1 Reply drains) -> closed
enum class Phase : std::uint8_t {
  TcpConnect, // initiator: the TCP connect is in progress
  Exchange,   // the MPA Request and Reply on their way (either role)
  Notified,   // responder: ConnRequest sent, the client decides
  IbWaiting,  // responder, IB-style: the Request names a QP that does not wait (yet)
  Accepted,   // responder: accepted (by the client, or an IB-style QP), the Reply being written
  Held,       // initiator: established, held for first_fpdu_delay before the hand-over
  Closing,    // rejected, or failed: what the MPA machine still has to say drains, then close
};
const char* name(Phase p);

struct SessionView {
  ClientId client;
  sockaddr_storage local, peer;
  std::string state; // "tcp connect", "awaiting MPA request", ...
};
class Sessions {
public:
  explicit Sessions(SessionPolicy policy) : policy_(std::move(policy)) {}

  // ---- inputs ----

  // Listen on `sock`, the client's listening TCP socket bound at `addr`; -1: the client passed
  // none (the reply says so). m.policy (and a Connect's) overrides uiwarpd's MPA policy for
  // the sessions that start there; one that does not parse is refused, naming the key.
  void on_listen(ClientId c, const proto::Listen& m, SockId sock, const sockaddr_storage& addr);
  void on_unlisten(ClientId c, const proto::Unlisten& m);
  // The listening socket no longer listens (its owner shut it down before its Unlisten).
  void on_listener_closed(SockId sock);
  // The loop accepted `sock` on listener `listener`: an MPA responder session. `peer_on_host`:
  // the peer's address is this host's (uiwarp::host_address): only then does a Request's
  // same-host bit get an offer, which names this process to the peer. `netdev`: the interface
  // that has `local` (a wildcard listener's device policy).
  void on_incoming(SockId listener, SockId sock, const sockaddr_storage& local,
                   const sockaddr_storage& peer, bool peer_on_host, Clock::time_point now,
                   const std::string& netdev = {});
  // Connect: the loop has started connecting `sock` (the client's socket) to m.dst. -1: the
  // client passed no usable socket; `error`: connect() failed at once (errno). `ib`: an
  // IbConnect initiator (its Unlisten ends it).
  void on_connect(ClientId c, const proto::Connect& m, SockId sock, int error,
                  Clock::time_point now, bool ib = false);
  // IB-style connect, responder: `sock` listens on ib-connect-port for every waiting QP.
  void on_ib_listen(SockId sock, const sockaddr_storage& addr);
  // A responder QP waits (m.timeout_ms) for its peer's connection.
  void on_ib_wait(ClientId c, const proto::IbConnect& m, Clock::time_point now);
  // Whether a QP waits for its peer. When none does, the loop takes what the rendezvous
  // listener's backlog holds (on_incoming: a peer's connect for a QP that reaches RTR a moment
  // later, held for it; closing with it queued would reset it), then closes the listener
  // (on_listener_closed). Sessions it accepted outlive it.
  bool ib_listener_wanted() const { return !ib_waits_.empty(); }
  // Whether on_incoming for `listener` needs the netdev of the local address.
  bool wants_netdev(SockId listener) const {
    auto it = listeners_.find(listener);
    return it != listeners_.end() && !it->second.by_netdev.empty();
  }
  SockId ib_listener() const { return ib_listener_; }
  // An active session's TCP connection is up; `local` is its address, `peer_on_host` whether the
  // peer's is this host's (it tells the client why a same-host offer did not come).
  void on_connected(SockId sock, const sockaddr_storage& local, bool peer_on_host,
                    Clock::time_point now);
  // Received bytes: returns how many the MPA exchange took (read exactly those; what follows
  // belongs to the data path).
  std::size_t on_bytes(SockId sock, iwarp::ConstBytes in, Clock::time_point now);
  void on_peer_closed(SockId sock, Clock::time_point now);
  // The socket failed (connect refused, reset, a write error): errno.
  void on_socket_error(SockId sock, int error, Clock::time_point now);
  void on_accept(ClientId c, const proto::Accept& m, Clock::time_point now);
  void on_reject(ClientId c, const proto::Reject& m, Clock::time_point now);
  // The client went away: its listeners and sessions end (Close actions).
  void on_client_gone(ClientId c);
  void on_timer(Clock::time_point now);

  // ---- outputs ----

  iwarp::ConstBytes output(SockId sock) const;
  void consume_output(SockId sock, std::size_t n, Clock::time_point now);
  Interest interest(SockId sock) const;
  // An active session waiting for its TCP connect (writable then means connected or failed).
  bool connecting(SockId sock) const;
  Clock::time_point deadline() const;
  std::vector<Action> take_actions() { return std::exchange(actions_, {}); }

  // ---- status ----

  const Counters& counters() const { return counters_; }
  std::vector<ListenerView> listeners() const;
  std::vector<SessionView> sessions() const;
  // The connections handed over, and those that ended since (connections.hpp).
  Connections& connections() { return conns_; }
  const Connections& connections() const { return conns_; }

private:
  struct Listener {
    ClientId client;
    std::uint64_t id; // the client's rdma_cm id
    sockaddr_storage addr;
    iwarp::MpaPolicy policy; // uiwarpd's, with the Listen's overrides
    // A wildcard listener: by netdev, uiwarpd's with that device's overrides, then the Listen's.
    std::map<std::string, iwarp::MpaPolicy> by_netdev;
  };
  struct IbWait {
    ClientId client;
    std::uint64_t id;
    std::uint32_t local_qpn, peer_qpn;
    sockaddr_storage local, peer;
    std::uint16_t ird, ord;
    Clock::time_point until;
    std::optional<iwarp::SameHostOffer> same_host_offer;
  };
  struct Session {
    ClientId client = -1;    // -1: an IB-style connect not yet matched with its QP
    std::uint64_t id = 0;    // initiator: the client's connect id; responder: its listen id
    std::uint64_t token = 0; // responder: the handle Accept and Reject name
    std::optional<iwarp::MpaStartup> mpa;
    iwarp::MpaPolicy policy;       // uiwarpd's, with the listener's or the Connect's overrides
    Phase phase = Phase::Exchange; // changed by move() only
    std::vector<std::byte> pd;     // initiator: private data for the Request
    std::uint16_t ird = 0, ord = 0;
    bool ib = false; // IB-style connect (either role)
    ib::Request ib_req;
    // Instead of the MPA machine's deadline: the TCP connect's, the hold's, or how long a
    // Reply or Terminate may take to drain (the peer does not read).
    std::optional<Clock::time_point> until;
    sockaddr_storage local{}, peer{};
    bool peer_on_host = false; // the edge's word: the peer's address is this host's
  };

  // Moves `s` to `to` if it is in one of `from` and says true; else says false, logs the
  // refused transition (a mistake of uiwarpd's own) and leaves the session as it was.
  bool move(Session& s, std::initializer_list<Phase> from, Phase to);
  // Whether fail() still drains what the MPA machine has to say, or closes at once.
  enum class Drain { Yes, No };

  // How long a Reply (accepted or rejected) or a Terminate may take to drain before the
  // session gives up on a peer that does not read.
  static constexpr std::chrono::seconds kDrainTimeout{2};
  // Private data as the protocol (octets) and the MPA machine (std::byte) hold it.
  static std::vector<std::uint8_t> to_u8(const std::vector<std::byte>& v);
  static std::vector<std::byte> to_bytes(const std::vector<std::uint8_t>& v);

  Session* find(SockId sock);
  const Session* find(SockId sock) const;
  Session* by_token(ClientId c, std::uint64_t token, SockId* sock);
  void step(SockId sock, Session& s, Clock::time_point now);
  void request_received(Session& s);
  void ib_request(SockId sock, Session& s, Clock::time_point now);
  static bool ib_names(const Session& s, const IbWait& w); // the Request is for that QP
  void ib_accept(SockId sock, Session& s, const IbWait& w, Clock::time_point now);
  void ib_refuse(SockId sock, Session& s, const std::string& why, Clock::time_point now);
  void established(SockId sock, Session& s, Clock::time_point now);
  // What the session's exchange negotiated, for the client, with uiwarpd's own word on the peer.
  static iwarp::ConnParams params(const Session& s);
  void hand_over(SockId sock, Session& s, proto::Message reply, Clock::time_point now);
  void connect_reply(Session& s, int status, const std::string& reason);
  void fail(SockId sock, Session& s, int status, const std::string& why, Clock::time_point now,
            Drain drain = Drain::Yes);
  void end(SockId sock);
  void log(std::string line) { actions_.push_back(Log{std::move(line)}); }
  Clock::time_point session_deadline(const Session& s) const;

  SessionPolicy policy_;
  std::map<SockId, Listener> listeners_;
  SockId ib_listener_ = -1;
  std::vector<IbWait> ib_waits_;
  std::map<SockId, Session> sessions_;
  Connections conns_;
  std::vector<Action> actions_;
  Counters counters_;
  std::uint64_t next_token_ = 1;
};

} // namespace uiwarp::daemon
