// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The protocol between uiwarpd and its clients (the rdma_cm emulation in each program's shim,
// and the `uiwarp` CLI), over a Unix SOCK_SEQPACKET socket: one message per packet, explicit
// little-endian encoding, a socket passed beside a message with SCM_RIGHTS.
//
// Every client starts with Hello; uiwarpd answers HelloReply and refuses a client of another
// protocol version (and a client that says nothing else first), naming what to restart.
//
//   client -> uiwarpd                           uiwarpd -> client
//   Hello    {version, role}                    HelloReply   {version, status, reason}
//   Listen   {id, addr, backlog, tos, policy}   ListenReply  {id, status, reason}
//             + socket
//   Unlisten {id}
//   Connect  {id, src, dst, pd, ird, ord,       ConnectReply {id, status, reason, params,
//             timeout_ms, tos, policy} + socket               pd, src, dst} + socket
//                                               ConnRequest  {listen id, token, src, dst, pd,
//                                                             ird, ord, same_host}
//   Accept   {token, pd, ird, ord,              AcceptReply  {token, status, reason, params,
//             same_host_offer}                                src, dst} + socket
//   Reject   {token, pd}
//   Resolve  {id, dst}                          ResolveReply {id, status, src, netdev/reason}
//   Status   {connections_only, closed, json}   StatusLine   {text} ... StatusEnd
//   IbConnect {id, local, peer, local_qpn,      ConnectReply {id, ...} + socket
//              peer_qpn, ird, ord, timeout_ms,
//              initiator} (+ socket: initiator)
//   Unlisten {id}  also ends an IbConnect that is still waiting
//   Attached {local, peer, qp_num, device,      (no reply: the QP that took a handed-over
//             path}                              connection, for `uiwarp conn show`)
//   Closed   {local, peer, qp_num, reason,      (no reply: a handed-over connection ended, why,
//             drive, path}                       and what its drive policy decided, for
//                                                `uiwarp conn show --closed`)
//   Path     {local, peer, qp_num, text}        (no reply: how the QP's RDMA Writes and Reads
//                                                move changed after Attached, for conn show)
// (pd: private data; params: iwarp::ConnParams, with the same-host path's agreement, at an
// initiator the responder's offer, and uiwarpd's word whether the peer's address is this host's;
// policy: MPA policy overrides of the device and UIWARP_MPA_POLICY, "key=value ...", which
// uiwarpd applies over its own to that listener's or connection's MPA exchanges, or refuses,
// naming the key. same_host: the Request asked for uiwarp's same-host path, the listener's
// policy allows it and the peer's address is this host's, so an Accept may bring the
// provider's offer (iwarp::SameHostOffer) for the Reply. path: the provider's "same-host" or
// "tcp: why not", ShimOps::qp_path.) The listening and connecting sockets are the program's
// own: it bound them where its rdma_cm id is bound (cma_get_port), and uiwarpd listens or connects
// on them. IbConnect (ib_connect.hpp): a QP moved to RTR with the peer's GID and QPN; the
// initiator's uiwarpd connects the passed socket to the peer's ib-connect-port, the responder's
// waits for that connection; either way ConnectReply {id} brings the connected socket (or the
// failure).
#pragma once

#include "iwarp/conn_params.hpp"

#include <cstdint>
#include <netinet/in.h>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <variant>
#include <vector>

namespace uiwarp::proto {

// Raised whenever a message changes shape; both ends must agree exactly.
inline constexpr std::uint32_t kVersion = 9;
inline constexpr std::size_t kMaxPacket = 4096;

using Bytes = std::vector<std::uint8_t>;

enum class Role : std::uint8_t { Shim = 1, Cli = 2 };

struct Hello {
  std::uint32_t version = kVersion;
  Role role = Role::Shim;
};
struct HelloReply {
  std::uint32_t version = kVersion;
  std::int32_t status = 0; // EPROTO: versions differ (reason says what to restart)
  std::string reason;
};
struct Listen {
  std::uint64_t id = 0; // the shim's rdma_cm id
  sockaddr_storage addr{};
  std::uint32_t backlog = 0;
  std::int32_t tos = -1; // RDMA_OPTION_ID_TOS, -1 = unset
  std::string policy;
  // A wildcard listener: the devices' own overrides, "NETDEV KEY=VALUE...\n" per device that
  // has any, for the connections that arrive on that netdev's addresses (before `policy`).
  std::string device_policies;
};
struct ListenReply {
  std::uint64_t id = 0;
  std::int32_t status = 0;
  std::string reason;
};
struct Unlisten {
  std::uint64_t id = 0;
};
struct Connect {
  std::uint64_t id = 0;
  sockaddr_storage src{}, dst{};
  Bytes private_data;
  std::uint32_t ird = 0, ord = 0; // responder_resources, initiator_depth
  std::uint32_t timeout_ms = 0;   // 0: uiwarpd's startup timeout
  std::int32_t tos = -1;
  std::string policy;
};
struct ConnectReply {
  std::uint64_t id = 0;
  std::int32_t status = 0; // ECONNREFUSED: rejected by the peer; ETIMEDOUT: unreachable
  std::string reason;
  iwarp::ConnParams params;
  Bytes private_data; // the peer's, in its Reply
  sockaddr_storage src{}, dst{};
};
struct ConnRequest {
  std::uint64_t listen_id = 0;
  std::uint64_t token = 0; // uiwarpd's handle for Accept/Reject
  sockaddr_storage src{}, dst{};
  Bytes private_data;
  std::uint32_t ird = 0, ord = 0;
  // The Request carried uiwarp's same-host bit (iwarp::kMpaFlagSameHost), the listener's
  // policy has same-host on, and the peer's address is this host's: an offer in the Accept goes
  // into the Reply.
  bool same_host = false;
};
struct Accept {
  std::uint64_t token = 0;
  Bytes private_data;
  std::uint32_t ird = 0, ord = 0;
  // The accepting QP's offer (ProviderOps::same_host_offer), only to a ConnRequest with
  // same_host; uiwarpd appends it to the Reply (iwarp::MpaStartup::accept).
  std::optional<iwarp::SameHostOffer> same_host_offer{};
};
struct AcceptReply {
  std::uint64_t token = 0;
  std::int32_t status = 0;
  std::string reason;
  iwarp::ConnParams params;
  sockaddr_storage src{}, dst{};
};
struct Reject {
  std::uint64_t token = 0;
  Bytes private_data;
};
struct Resolve {
  std::uint64_t id = 0;
  sockaddr_storage dst{};
};
struct ResolveReply {
  std::uint64_t id = 0;
  std::int32_t status = 0;
  sockaddr_storage src{}; // the route's source address
  std::string netdev;     // its interface, or the reason of a failure
};
struct Status {
  bool connections_only = false;
  bool closed = false; // the connections that ended, with their reasons, instead
  bool json = false;   // one JSON document, in StatusLines to be joined, instead of lines
};
struct StatusLine {
  std::string text;
};
struct StatusEnd {};
struct IbConnect {
  std::uint64_t id = 0;
  sockaddr_storage local{}, peer{}; // the two GIDs' addresses (ports ignored)
  std::uint32_t local_qpn = 0, peer_qpn = 0;
  std::uint32_t ird = 0, ord = 0;
  std::uint32_t timeout_ms = 0; // how long to wait for (or retry) the peer
  bool initiator = false;       // ib::role(): this side opens the connection
  // The responder's same-host offer, made at RTR (it accepts without asking its client): sent
  // in the Reply if the Request asks for it and the peer's address is this host's.
  std::optional<iwarp::SameHostOffer> same_host_offer{};
};

struct Attached {
  sockaddr_storage local{}, peer{}; // the connection's addresses, as the socket has them
  std::uint32_t qp_num = 0;
  std::string device; // the uiwarp device of the local address ("" if none is known)
  std::string path{}; // how its RDMA Writes and Reads move, as far as known (ShimOps::qp_path)
};

struct Closed {
  sockaddr_storage local{}, peer{}; // the connection's addresses, as handed over
  std::uint32_t qp_num = 0;
  std::string reason; // the provider's: the Terminate sent or received, or the local cause
  std::string drive;  // the QP's drive counters (providers/uiwarp/drive.hpp), as one line
  std::string path{}; // how its RDMA Writes and Reads moved (ShimOps::qp_path), "" if unknown
};

// The provider's later word on how a QP's RDMA Writes and Reads move (ShimOps::qp_path), for a
// connection whose Attached went before it.
struct Path {
  sockaddr_storage local{}, peer{};
  std::uint32_t qp_num = 0;
  std::string text; // "same-host", or "tcp: <why the same-host path is not used>"
};

using Message =
    std::variant<Hello, HelloReply, Listen, ListenReply, Unlisten, Connect, ConnectReply,
                 ConnRequest, Accept, AcceptReply, Reject, Resolve, ResolveReply, Status,
                 StatusLine, StatusEnd, IbConnect, Closed, Attached, Path>;

// A message as it travels: the socket beside it, if any, is owned by the receiver (-1: none).
struct Packet {
  Message msg;
  int fd = -1;
};

Bytes encode(const Message& m);
// nullopt: not a message of this version (unknown type, truncated, trailing octets, a field
// over its limit).
std::optional<Message> decode(const std::uint8_t* p, std::size_t n);

// One message (and optionally one socket) per packet: 0 or an errno.
int send(int sock, const Message& m, int fd = -1);
// The next packet, or nullopt with errno set (0 at an orderly end, EBADMSG for a packet that
// does not decode; a socket that came with it is closed then).
std::optional<Packet> recv(int sock);

// Connects to uiwarpd at `path` and exchanges Hello: the connected socket, or -1 with *err
// naming the cause (no daemon, another protocol version and what to restart).
int connect_daemon(const std::string& path, Role role, std::string* err);

std::string addr_string(const sockaddr_storage& a);

} // namespace uiwarp::proto
