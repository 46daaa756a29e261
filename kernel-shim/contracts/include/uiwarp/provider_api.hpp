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
//   provider -> shim   qp_event(qp_num, event, reason)     the connection ended
#pragma once

#include "iwarp/conn_params.hpp"

#include <cstdint>

namespace uiwarp {

// Raised whenever anything below changes shape.
inline constexpr std::uint32_t kProviderAbi = 4;

enum class QpEvent : std::uint32_t {
  Disconnected = 1, // graceful close finished, or the peer closed
  Error = 2,        // Terminate sent or received, or the connection lost
};

struct ProviderOps {
  std::uint32_t abi; // kProviderAbi
  // Gives connected socket `fd` to QP `qp_num`, which goes to RTS with what MPA negotiated.
  // 0 (the QP owns the socket now) or an errno (the caller still does; ENOENT: no such QP;
  // EINVAL: not in INIT/RTR).
  int (*attach)(std::uint32_t qp_num, int fd, const iwarp::ConnParams& params) noexcept;
  // rdma_disconnect: graceful close of the QP's connection (ENOTCONN: none).
  int (*disconnect)(std::uint32_t qp_num) noexcept;
};

struct ShimOps {
  std::uint32_t abi; // kProviderAbi
  void (*qp_event)(std::uint32_t qp_num, QpEvent event, const char* reason) noexcept;
};

// The shim's entry point, as the provider looks it up with dlsym(RTLD_DEFAULT, ...).
inline constexpr const char* kRegisterProviderSymbol = "uiwarp_shim_register_provider";
using RegisterProvider = const ShimOps* (*)(const ProviderOps* ops) noexcept;

} // namespace uiwarp
