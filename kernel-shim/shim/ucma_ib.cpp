// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// IB-style connect, the shim's part (uiwarp/ib_connect.hpp, provider_api.hpp): the provider's
// QP went to RTR with the peer's GID and QPN; uiwarpd makes the connection (IbConnect) and the
// socket goes to the QP as an RDMA CM connection's does. The initiator tries again while
// nothing listens on the peer's port yet (its QP has not reached RTR, or its per-user uiwarpd
// is starting), as an IB requester retransmits to a responder QP that is not ready; every other
// failure is final and named.
#include "ucma_addr.hpp"
#include "ucma_emu.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/ib_connect.hpp"
#include "uiwarp/log.hpp"
#include "uiwarp/thread.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <thread>
#include <vector>

namespace uiwarp::ucma {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kRetryPause{100};

// How long a QP waits for its peer: UIWARP_IB_CONNECT_TIMEOUT_MS, else 30 s (a peer program
// may take a while between the out-of-band exchange and its modify to RTR).
std::chrono::milliseconds budget() {
  const long ms = Env::get().number(EnvVar::IbConnectTimeoutMs).value_or(0);
  return std::chrono::milliseconds(ms > 0 ? ms : 30000);
}

std::string describe(const IbTarget& t) {
  return "QP " + ib::qpn_string(t.local_qpn) + " -> " + proto::addr_string(t.peer) + " QP " +
         ib::qpn_string(t.peer_qpn);
}

} // namespace

int Ucma::ib_connect(std::uint32_t qp_num, const IbTarget& t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!provider_) return ENODEV;
  ib_cancel_locked(qp_num);
  const std::uint64_t id = kIbId | ((++ib_gen_ & 0xffffffffff) << 24) | (qp_num & 0xffffff);
  auto it = ib_.emplace(qp_num, IbPending{t, id, Clock::now() + budget()}).first;
  if (int err = ib_send(it->second)) {
    ib_.erase(it);
    return err;
  }
  return 0;
}

void Ucma::ib_cancel(std::uint32_t qp_num) {
  std::lock_guard<std::mutex> lock(mu_);
  ib_cancel_locked(qp_num);
}

void Ucma::ib_cancel_locked(std::uint32_t qp_num) {
  auto it = ib_.find(qp_num);
  if (it == ib_.end()) return;
  daemon.post(proto::Unlisten{it->second.id}); // ends uiwarpd's wait or connect
  ib_.erase(it);
}

// One attempt: the initiator passes its own socket, bound to its GID's address (the peer's
// uiwarpd matches the connection's source address against the GID its QP was given).
int Ucma::ib_send(IbPending& p) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.until - Clock::now());
  proto::IbConnect m{
      p.id,          p.t.local,
      p.t.peer,      p.t.local_qpn,
      p.t.peer_qpn,  p.t.ird,
      p.t.ord,       static_cast<std::uint32_t>(std::max<long long>(left.count(), 1)),
      p.t.initiator, p.t.same_host_offer};
  int fd = -1;
  if (p.t.initiator) {
    sockaddr_storage a = p.t.local;
    fd = bound_socket(a, -1);
    if (fd < 0) {
      int err = errno;
      log::error("ibv", "IB-style connect of " + describe(p.t) + ": cannot bind to " +
                            proto::addr_string(p.t.local) + ": " + std::strerror(err));
      return err;
    }
  }
  int err = daemon.send(m, fd);
  if (fd >= 0) sys_close(fd); // uiwarpd has its own copy
  return err;
}

void Ucma::ib_reply(const proto::ConnectReply& m, int fd, std::unique_lock<std::mutex>& lock) {
  const auto qp_num = static_cast<std::uint32_t>(m.id & 0xffffff);
  auto it = ib_.find(qp_num);
  if (it == ib_.end() || it->second.id != m.id) { // cancelled meanwhile
    if (fd >= 0) sys_close(fd);
    return;
  }
  if (!m.status && fd >= 0) {
    ib_.erase(it);
    if (int err = attach(qp_num, fd, m.params, lock)) // closes fd
      ib_fail(qp_num, err, std::string("cannot attach the connection: ") + std::strerror(err),
              lock);
    return;
  }
  if (fd >= 0) sys_close(fd);
  IbPending& p = it->second;
  // Refused or reset with no word from a uiwarpd (a Reject from one says why): nothing listens
  // there yet, or the listener closed with our connection in its backlog.
  const bool unheard =
      (m.status == ECONNREFUSED || m.status == ECONNRESET) && m.private_data.empty();
  if (p.t.initiator && unheard && Clock::now() + kRetryPause < p.until) {
    start_thread([this, qp_num, id = p.id] {
      std::this_thread::sleep_for(kRetryPause);
      ib_retry(qp_num, id);
    }).detach();
    return;
  }
  std::string why = m.private_data.empty()
                        ? m.reason
                        : "the peer's uiwarpd refused it: " +
                              std::string(m.private_data.begin(), m.private_data.end());
  if (m.status == ECONNREFUSED && m.private_data.empty())
    why += " (no uiwarp QP waited at " + proto::addr_string(p.t.peer) +
           " in time: is the peer uiwarp, with the same ib-connect-port, and did its QP reach "
           "RTR?)";
  ib_.erase(it);
  ib_fail(qp_num, m.status ? m.status : EPROTO, why, lock);
}

void Ucma::ib_retry(std::uint32_t qp_num, std::uint64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = ib_.find(qp_num);
  if (it == ib_.end() || it->second.id != id) return;
  if (int err = ib_send(it->second)) {
    ib_.erase(it);
    ib_fail(qp_num, err, std::string("uiwarpd: ") + std::strerror(err), lock);
  }
}

void Ucma::ib_fail(std::uint32_t qp_num, int status, const std::string& why,
                   std::unique_lock<std::mutex>& lock) {
  log::error("ibv", "IB-style connect of QP " + ib::qpn_string(qp_num) + " failed: " + why);
  const ProviderOps* ops = provider_;
  if (!ops) return;
  lock.unlock(); // the provider flushes the QP, which may call back (qp_event)
  ops->ib_failed(qp_num, status, why.c_str());
  lock.lock();
}

// uiwarpd went away (with the lock held, on the reader thread): connects it was making for
// waiting QPs will never be answered.
void Ucma::ib_lost() {
  std::vector<std::uint32_t> lost;
  for (const auto& [qpn, p] : ib_)
    lost.push_back(qpn);
  ib_.clear();
  const ProviderOps* ops = provider_;
  if (lost.empty() || !ops) return;
  start_thread([ops, lost] {
    for (std::uint32_t qpn : lost) {
      log::error("ibv", "IB-style connect of QP " + ib::qpn_string(qpn) +
                            " failed: uiwarpd went away before the peer connected");
      ops->ib_failed(qpn, ECONNABORTED, "uiwarpd went away");
    }
  }).detach();
}

} // namespace uiwarp::ucma
