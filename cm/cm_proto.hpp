// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The protocol between the rdma_cm emulation in each application (shim) and
// uiwarpd, over a Unix SOCK_SEQPACKET socket: one message per packet, explicit
// little-endian encoding, connected TCP sockets passed with SCM_RIGHTS.
//
//   shim -> uiwarpd                      uiwarpd -> shim
//   Listen   {id, addr, backlog}         ListenReply  {id, status, addr}
//   Unlisten {id}
//   Connect  {id, src, dst, pd, ird,     ConnectReply {id, status, params, pd,
//             ord, timeout}                            src, dst} + fd
//                                        ConnRequest  {listen id, token, src,
//                                                      dst, pd, ird, ord}
//   Accept   {token, pd, ird, ord}       AcceptReply  {token, status, params} + fd
//   Reject   {token, pd}
#pragma once

#include <cstdint>
#include <netinet/in.h>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <vector>

namespace uiwarp::cm {

enum class MsgType : std::uint16_t {
  Listen = 1,
  ListenReply,
  Unlisten,
  Connect,
  ConnectReply,
  ConnRequest,
  Accept,
  AcceptReply,
  Reject,
  Resolve, // shim -> daemon: route to `dst`; the reply's `src` is the source address
  ResolveReply,
  Status,     // CLI -> daemon: id 0 = everything, 1 = connections only
  StatusLine, // daemon -> CLI: one line of the report in `reason`
  StatusEnd,
};

// What MPA negotiated, as the provider needs it (see provider_api.h).
struct ConnParams {
  std::uint32_t version = 1;
  std::uint32_t crc = 1;
  std::uint32_t markers_tx = 0;
  std::uint32_t markers_rx = 0;
  std::uint32_t ird = 0;
  std::uint32_t ord = 0;
  std::uint32_t initiator = 0;
  std::int32_t rtr = -1;
  std::uint32_t peer_ird = 0;
  std::uint32_t peer_ord = 0;
  std::uint32_t large_fpdu = 0; // both ends set siw's large-FPDU flag
};

struct Msg {
  MsgType type{};
  std::uint64_t id = 0;    // listen or connect id (the shim's), or the daemon's token
  std::uint64_t token = 0; // ConnRequest: the daemon's handle for Accept/Reject
  std::int32_t status = 0; // 0 or an errno (ECONNREFUSED = rejected by the peer)
  sockaddr_storage src{};  // local address
  sockaddr_storage dst{};  // peer address
  std::vector<std::uint8_t> private_data;
  std::uint32_t ird = 0, ord = 0;
  std::uint32_t backlog = 0;
  std::uint32_t timeout_ms = 0;
  ConnParams params;
  std::string reason;       // a failure's cause, for the application's log
  std::int32_t tos = -1;    // Listen/Connect: rdma_set_option(RDMA_OPTION_ID_TOS), -1 = unset
  std::int32_t afonly = -1; // Listen: RDMA_OPTION_ID_AFONLY (IPV6_V6ONLY), -1 = unset
};

std::vector<std::uint8_t> encode(const Msg& m);
std::optional<Msg> decode(const std::uint8_t* p, std::size_t n);

// One message (and optionally one fd) per packet. send returns 0 or errno;
// recv returns the message, or nullopt with errno set (0 at orderly EOF).
int send_msg(int sock, const Msg& m, int fd = -1);
std::optional<Msg> recv_msg(int sock, int* fd_out);

inline constexpr std::size_t kMaxMsg = 4096;

std::string addr_string(const sockaddr_storage& a);

} // namespace uiwarp::cm
