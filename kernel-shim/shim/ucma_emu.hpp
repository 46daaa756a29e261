// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The emulated rdma_cm device of the process: the id/channel/event state (ucma_state.hpp),
// the link to uiwarpd (ucma_daemon.hpp) and the provider that takes connected sockets
// (provider_api.hpp), under one lock. The commands (ucma_cmd.cpp) work on it with the lock
// held; what touches fds, sockets, uiwarpd or the provider is here.
#pragma once

#include "ucma_daemon.hpp"
#include "ucma_state.hpp"
#include "uiwarp/provider_api.hpp"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <sys/types.h>

namespace uiwarp::ucma {

class Ucma final : DaemonLink::Handler, Signals {
  std::mutex mu_; // first: the link below is built with it
  std::condition_variable cv_;

public:
  static Ucma& get();

  int open_channel(int flags);
  bool is_channel(int fd);
  void closed(int fd);
  ssize_t command(int fd, const void* buf, std::size_t len); // ucma_cmd.cpp

  // The provider's half of the hand-shake (provider_api.hpp).
  bool register_provider(const ProviderOps* ops);
  void qp_event(std::uint32_t qp_num, QpEvent, const char*);

  // ---- for the commands, with the lock held ----
  State st{*this};
  DaemonLink daemon{mu_, cv_, *this};

  const ProviderOps* provider() const { return provider_; }
  // GET_EVENT: the next event of channel `fd` into `*out`, waiting unless O_NONBLOCK.
  int get_event(int fd, Event* out, std::unique_lock<std::mutex>& lock);
  // rdma_bind_addr (also the implicit binds of resolve and listen): checks the address,
  // finds its device, takes the port, and fails as the kernel does (see ucma_addr.hpp).
  int bind_id(Id& id, sockaddr_storage a);
  // What an id holds outside the state: its socket, uiwarpd's listener or request.
  void release(Id& id);
  void close_sock(Id& id);
  // Hands `fd` to the provider's QP (lock released: the provider may call back).
  int attach(std::uint32_t qp_num, int fd, const iwarp::ConnParams& p,
             std::unique_lock<std::mutex>& lock);

private:
  Ucma() = default;

  // Signals: a channel's eventfd counts its queued events; waiters in get_event wake.
  void queued(int channel) override;
  void taken(int channel) override;

  // DaemonLink::Handler
  void conn_request(const proto::ConnRequest& m) override;
  void connect_reply(const proto::ConnectReply& m, int fd,
                     std::unique_lock<std::mutex>& lock) override;
  void gone() override;
  void relisten();

  bool relistening_ = false; // relisten() runs
  const ProviderOps* provider_ = nullptr;
};

} // namespace uiwarp::ucma
