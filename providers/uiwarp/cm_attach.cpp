// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The CM's entry points into the provider (provider_api.hpp): the shim hands a connected,
// MPA-negotiated socket to the QP named by conn_param.qp_num (attach), and asks for a
// graceful close (disconnect). Registered with the shim when the provider is loaded.
#include "provider.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/log.hpp"
#include "uiwarp/provider_api.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <new>
#include <sys/socket.h>

namespace uiwarp {

namespace {

// How long a Send that finds no receive waits for one: the program's UIWARP_RECV_WAIT_MS, else
// the connection's policy (uiwarpd.conf, the device, UIWARP_MPA_POLICY: recv-wait-ms).
std::int64_t recv_wait_ms(const iwarp::ConnParams& p) {
  return Env::get().number(EnvVar::RecvWaitMs).value_or(p.recv_wait_ms);
}

// What the connection negotiated (iwarp::qp_config_from) and this QP's own limits.
iwarp::QpConfig config_for(const Qp* qp, int fd, const iwarp::ConnParams& p) {
  // MPA-040: MULPDU from the EMSS (TCP MSS), markers included; qp_config_from ignores it when
  // both ends agreed on large FPDUs.
  int mss = 0;
  socklen_t len = sizeof mss;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) || mss <= 0) mss = 1460;
  iwarp::QpConfig c =
      iwarp::qp_config_from(p, iwarp::mulpdu_for_emss(static_cast<std::size_t>(mss), p.markers_tx));
  c.qp_id = qp->vqp.qp.qp_num;
  c.pd = qp->pd_id;
  c.conn.ird = std::min<std::uint16_t>(c.conn.ird, Limits::kMaxOrdIrd);
  c.conn.ord = std::min<std::uint16_t>(c.conn.ord, Limits::kMaxOrdIrd);
  c.sq_depth = std::max<std::uint32_t>(qp->cap.max_send_wr, 1);
  c.rq_depth = std::max<std::uint32_t>(qp->cap.max_recv_wr, 1);
  c.max_sge = std::max(qp->cap.max_send_sge, qp->cap.max_recv_sge);
  c.max_inline = qp->cap.max_inline_data;
  // No RNR in iWARP: a Send that finds no buffer waits (TCP holds the sender) rather than
  // ending the connection at once; HX-059 allows it. 0 (uiwarpd's recv-wait-ms, or
  // UIWARP_RECV_WAIT_MS, which wins) terminates at once, as an RNIC or siw does.
  c.hold_for_buffer = recv_wait_ms(p) > 0;
  return c;
}

// The QP a CM call names, held for the call.
struct QpRef {
  explicit QpRef(std::uint32_t qp_num) : qp(find_qp(qp_num)) {}
  ~QpRef() {
    if (qp) qp->unref();
  }
  QpRef(const QpRef&) = delete;
  QpRef& operator=(const QpRef&) = delete;
  Qp* qp;
};

int attach(std::uint32_t qp_num, int fd, const iwarp::ConnParams& p) noexcept {
  QpRef ref(qp_num);
  Qp* qp = ref.qp;
  if (!qp) return ENOENT;
  Context* ctx = qp->ctx();
  if (int err = ctx->start_progress()) return err;
  std::lock_guard lock(qp->mu);
  // An RDMA CM connection comes to a QP in INIT or RTR; an IB-style one to the QP that waits
  // for it, in RTR or already in RTS.
  const bool ib = qp->ib.pending;
  if (qp->engine || (ib ? qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS
                        : qp->state != IBV_QPS_INIT && qp->state != IBV_QPS_RTR))
    return EINVAL;
  try {
    qp->engine = std::make_unique<iwarp::Qp>(config_for(qp, fd, p), ctx->mem,
                                             qp->srq ? qp->srq->q.get() : nullptr);
    qp->rx.staging = std::make_unique_for_overwrite<std::byte[]>(Qp::kStaging);
    qp->tx.pieces.reserve(Qp::kMaxIov);
    qp->tx.by_ref.reserve(Qp::kMaxIov);
  } catch (const std::bad_alloc&) {
    qp->engine.reset();
    return ENOMEM;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  while (!qp->early.recv.empty()) {
    qp->engine->post_recv(qp->early.recv.front());
    qp->early.recv.pop_front();
  }
  qp->conn.fd = fd;
  qp->policy.set_recv_wait(recv_wait_ms(p) * 1'000'000);
  qp->note_endpoints();
  if (int err = ctx->progress()->add(qp)) {
    qp->engine.reset();
    qp->conn.fd = -1;
    qp->set_state(IBV_QPS_ERR);
    qp->last_wqe_reached();
    return err;
  }
  if (!ib) qp->set_state(IBV_QPS_RTS);
  qp->ib.pending = false;
  // Before the first FPDU leaves: the responder takes the answer as soon as data comes.
  qp->same_host_attach(p);
  // Sends posted while an IB-style connect was under way, in order.
  for (; !qp->early.send.empty(); qp->early.send.pop_front()) {
    const iwarp::SendWr& w = qp->early.send.front();
    if ((iwarp::is_rfc7306(w.opcode) && !qp->engine->config().conn.rfc7306) ||
        qp->engine->post_send(w) != iwarp::PostError::None) {
      iwarp::Completion c = iwarp::Completion::make(w.wr_id, iwarp::WcStatus::LocalQpOperation,
                                                    iwarp::completion_opcode(w.opcode), 0, false);
      qp->send_cq()->push(to_ibv_wc(c, qp->vqp.qp.qp_num), false);
    }
  }
  qp->drive(Driver::Post, mono_ns()); // the RTR, if P2P (RFC 6581 §9.2), and those Sends
  qp->same_host_started();
  return 0;
}

int disconnect(std::uint32_t qp_num) noexcept {
  QpRef ref(qp_num);
  Qp* qp = ref.qp;
  if (!qp) return ENOENT;
  std::lock_guard lock(qp->mu);
  if (!qp->engine) return ENOTCONN;
  qp->engine->close();
  qp->drive(Driver::Post, mono_ns());
  return 0;
}

const ShimOps* g_shim = nullptr;

constexpr ProviderOps kProviderOps = {kProviderAbi, attach, disconnect, ib_failed, same_host_offer};

__attribute__((constructor)) void register_with_shim() {
  auto reg = reinterpret_cast<RegisterProvider>(::dlsym(RTLD_DEFAULT, kRegisterProviderSymbol));
  if (!reg) return; // not run under uiwarp-run: verbs work, rdma_cm is not ours
  g_shim = reg(&kProviderOps);
  if (!g_shim)
    log::error("provider", "libuiwarp-shim.so is from another uiwarp installation (provider ABI " +
                               std::to_string(kProviderAbi) +
                               "): rdma_cm connections cannot reach this provider");
}

} // namespace

const ShimOps* shim() { return g_shim; }

} // namespace uiwarp
