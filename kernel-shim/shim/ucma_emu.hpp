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

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
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
  void qp_event(std::uint32_t qp_num, QpEvent, const char* reason, const char* drive);
  // How QP qp_num's RDMA Writes and Reads move (ShimOps::qp_path), for uiwarp conn show.
  void qp_path(std::uint32_t qp_num, const char* text);
  // IB-style connect (ucma_ib.cpp): a QP in RTR with an address vector waits for its peer.
  int ib_connect(std::uint32_t qp_num, const IbTarget& t);
  void ib_cancel(std::uint32_t qp_num);

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
  // rdma_accept of a Request that asked for the same-host path: QP qp_num's offer for the
  // Reply, if the provider makes one (lock released: the provider takes the QP's).
  std::optional<iwarp::SameHostOffer> same_host_offer(std::uint32_t qp_num,
                                                      std::unique_lock<std::mutex>& lock);
  // A connect or accept attached: Connect -> Established, ESTABLISHED queued.
  void established(Id& id, Event e = {});

private:
  Ucma() = default;
  static void fork_prepare();
  static void fork_parent();
  static void fork_child();

  // Signals: a channel's eventfd counts its queued events; waiters in get_event wake.
  void queued(int channel) override;
  void taken(int channel) override;

  // DaemonLink::Handler
  void conn_request(const proto::ConnRequest& m) override;
  void connect_reply(const proto::ConnectReply& m, int fd,
                     std::unique_lock<std::mutex>& lock) override;
  void gone() override;
  void relisten();

  // IB-style connect (ucma_ib.cpp). Its uiwarpd ids have the top bit set (rdma_cm ids are
  // 32-bit handles), then a generation, then the QPN: a late reply for a cancelled attempt
  // finds nothing.
  static constexpr std::uint64_t kIbId = 1ull << 63;
  struct IbPending {
    IbTarget t;
    std::uint64_t id;
    std::chrono::steady_clock::time_point until;
  };
  int ib_send(IbPending& p);
  void ib_cancel_locked(std::uint32_t qp_num);
  void ib_reply(const proto::ConnectReply& m, int fd, std::unique_lock<std::mutex>& lock);
  void ib_retry(std::uint32_t qp_num, std::uint64_t id);
  void ib_fail(std::uint32_t qp_num, int status, const std::string& why,
               std::unique_lock<std::mutex>& lock);
  void ib_lost(); // uiwarpd went away: waiting QPs fail (from another thread)
  std::map<std::uint32_t, IbPending> ib_; // by QPN
  std::uint64_t ib_gen_ = 0;

  bool relistening_ = false; // relisten() runs
  const ProviderOps* provider_ = nullptr;

  // The path of each connection handed to a QP (ShimOps::qp_path), by QPN, until it ends: it
  // goes to uiwarpd in Attached, and any later change in a Path message.
  struct QpPath {
    sockaddr_storage local{}, peer{}; // the connection's, as Attached names them
    std::string text;                 // "same-host", or "tcp: why not"
    bool announced = false;           // uiwarpd has the connection's Attached
    bool ended = false;               // the provider reported its end during attach()
  };
  std::map<std::uint32_t, QpPath> paths_;
};

} // namespace uiwarp::ucma
