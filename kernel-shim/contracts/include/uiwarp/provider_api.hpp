// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The in-process link between libuiwarp-shim.so (the rdma_cm emulation) and the provider
// libuiwarp-rdmav*.so, both built from this tree. libibverbs loads the provider RTLD_LOCAL and
// LD_PRELOAD put the shim in the global scope, so the provider finds the shim: when it is
// loaded, it looks up uiwarp_shim_register_provider() and calls it with its ops; the shim
// answers with its own, or nullptr when the ABI numbers differ (a shim and a provider from two
// different installations: the provider then runs without rdma_cm, and says so).
//
//   provider -> shim   register_provider(&ProviderOps)  -> &ShimOps
//   shim -> provider   attach(qp_num, socket, ConnParams)  a connected, negotiated socket
//                      disconnect(qp_num)                  rdma_disconnect
//   provider -> shim   qp_event(qp_num, event, reason,     the connection ended, why, and what
//                               drive)                  the drive policy decided for it
//   provider -> shim   ib_connect(qp_num, IbTarget)         IB-style connect (ib_connect.hpp):
//                                                       the QP went to RTR with an address
//                                                       vector; attach() or ib_failed() follows
//                      ib_cancel(qp_num)                    the QP left RTR/RTS or was destroyed
//   shim -> provider   ib_failed(qp_num, errno, reason)     the peer never came (QP to ERR)
//   provider -> shim   comp_channel_wfd(channel fd)         where a CQ's completion event is
//                                                       written (uiwarp/shim.h)
//   shim -> provider   same_host_offer(qp_num, &offer)      rdma_accept of a Request that asked
//                                                       for the same-host path: the QP's offer,
//                                                       which uiwarpd puts into the MPA Reply
//   provider -> shim   qp_path(qp_num, text)                how the QP's RDMA Writes and Reads
//                                                       move ("same-host", "tcp: why"), from
//                                                       attach() on, for uiwarp conn show
#pragma once

#include "iwarp/conn_params.hpp"

#include <cstdint>
#include <sys/socket.h>

namespace uiwarp {

// Raised whenever anything below changes shape.
inline constexpr std::uint32_t kProviderAbi = 8;

enum class QpEvent : std::uint32_t {
  Disconnected = 1, // graceful close finished, or the peer closed
  Error = 2,        // Terminate sent or received, or the connection lost
};

// A QP's IB-style connect: its GID's and the peer GID's addresses (ib::gid_address), both
// QPNs, the QP's IRD (max_dest_rd_atomic) and ORD, and whether it opens the connection.
struct IbTarget {
  sockaddr_storage local{}, peer{};
  std::uint32_t local_qpn = 0, peer_qpn = 0;
  std::uint32_t ird = 0, ord = 0;
  bool initiator = false;
  // The responder's same-host offer (the QP's slot, made at RTR), as same_host_offer makes it
  // for rdma_accept: the responder's uiwarpd accepts without asking the program.
  std::optional<iwarp::SameHostOffer> same_host_offer;
};

struct ProviderOps {
  std::uint32_t abi; // kProviderAbi
  // Gives connected socket `fd` to QP `qp_num`, which goes to RTS with what MPA negotiated.
  // 0 (the QP owns the socket now) or an errno (the caller still does; ENOENT: no such QP;
  // EINVAL: not in INIT/RTR).
  int (*attach)(std::uint32_t qp_num, int fd, const iwarp::ConnParams& params) noexcept;
  // rdma_disconnect: graceful close of the QP's connection (ENOTCONN: none).
  int (*disconnect)(std::uint32_t qp_num) noexcept;
  // IB-style connect failed (no peer in time, refused, uiwarpd gone): the QP goes to ERR, its
  // work requests flush, and IBV_EVENT_QP_FATAL reports it.
  void (*ib_failed)(std::uint32_t qp_num, int error, const char* reason) noexcept;
  // rdma_accept of a connection whose MPA Request asked for the same-host path: fills *out
  // with QP qp_num's offer (this process, its shared STag table, a slot for the connection).
  // false: no offer (turned off, no table, no such QP); the Reply then goes without one.
  bool (*same_host_offer)(std::uint32_t qp_num, iwarp::SameHostOffer* out) noexcept;
};

struct ShimOps {
  std::uint32_t abi; // kProviderAbi
  // `drive`: the QP's drive counters (drive::Counters::describe), for uiwarp conn show --closed.
  void (*qp_event)(std::uint32_t qp_num, QpEvent event, const char* reason,
                   const char* drive) noexcept;
  // 0 (attach() or ib_failed() follows, from another thread) or an errno, with the reason
  // logged (ENOTCONN: no uiwarpd).
  int (*ib_connect)(std::uint32_t qp_num, const IbTarget& target) noexcept;
  void (*ib_cancel)(std::uint32_t qp_num) noexcept;
  // The write end of completion channel `channel_fd` (ibv_comp_channel::fd), or -1: the CQ's
  // event is one 8-octet record, its ibv_cq* (uiwarp/shim.h has the rules).
  int (*comp_channel_wfd)(int channel_fd) noexcept;
  // How QP qp_num's RDMA Writes and Reads move, for `uiwarp conn show`: "same-host", or
  // "tcp" followed by ": <why the same-host path is not used>". From attach() or later, any
  // thread.
  void (*qp_path)(std::uint32_t qp_num, const char* path) noexcept;
};

// The shim's entry point, as the provider looks it up with dlsym(RTLD_DEFAULT, ...).
inline constexpr const char* kRegisterProviderSymbol = "uiwarp_shim_register_provider";
using RegisterProvider = const ShimOps* (*)(const ProviderOps* ops) noexcept;

} // namespace uiwarp
