// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Queue pairs and shared receive queues, with the kernel's iWARP semantics
// (docs/architecture.md): a QP reaches RTS through the CM, which hands it a
// connected, MPA-negotiated socket; RTR and state-less modifies are accepted (librdmacm
// issues them); SQD is a graceful close. IB addressing attributes are accepted only for
// uiwarp's IB-style connect (ib_connect.cpp): INIT -> RTR with the peer's GID and QPN.
#include "provider.hpp"
#include "verbs_wr.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <pthread.h>
#include <shared_mutex>
#include <sys/random.h>
#include <unistd.h>

namespace uiwarp {

namespace {

// QPNs are 24 bits, drawn from a random start per process: IB-style connect tells QPs on one
// host apart by number (ib_connect.hpp), as a kernel device's QPNs are unique per device.
// 0 and 1 mean something in IB and are skipped.
std::uint32_t next_qpn() {
  static std::atomic<std::uint32_t> next{[] {
    std::uint32_t r = 0;
    if (::getrandom(&r, sizeof r, 0) != sizeof r) r = static_cast<std::uint32_t>(::getpid()) << 8;
    return r;
  }()};
  for (;;) {
    std::uint32_t n = next.fetch_add(1, std::memory_order_relaxed) & 0xffffff;
    if (n > 1) return n;
  }
}

// Attributes that only make sense for IB address vectors and PSNs.
constexpr int kIbPathAttrs = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_SQ_PSN | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
// IB transport timers: TCP keeps its own. Alone (no state change) they are accepted and
// ignored, as siw does: perftest -R sets MIN_RNR_TIMER on the QP rdma_accept connected.
constexpr int kIbTimerAttrs =
    IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
constexpr int kIbConnectAttrs = kIbPathAttrs | kIbTimerAttrs;
constexpr int kKnownAttrs = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
                            IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
                            IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_CAP |
                            kIbConnectAttrs;
// RFC 7306 operations too; they work on connections that negotiated it (verbs_wr.cpp). Memory
// window Binds and Local Invalidates stay in this QP (verbs_mw.cpp).
constexpr std::uint64_t kSendOps =
    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
    IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
    IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;

bool caps_ok(const ibv_qp_cap& c, bool srq) {
  return c.max_send_wr <= Limits::kMaxQpWr && c.max_send_sge <= Limits::kMaxSge &&
         c.max_inline_data <= Limits::kMaxInline &&
         (srq || (c.max_recv_wr <= Limits::kMaxQpWr && c.max_recv_sge <= Limits::kMaxSge));
}

iwarp::RecvWr to_recv_wr(const ibv_recv_wr* wr) {
  iwarp::RecvWr r;
  r.wr_id = wr->wr_id;
  for (int i = 0; i < wr->num_sge; ++i)
    r.sgl.push_back({wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey});
  return r;
}

// QPN -> QP, for the CM (conn_param.qp_num). Never destroyed: a program's exit() runs static
// destructors while its other threads may still be in destroy_qp (rping's CM thread exits on
// REJECTED while its main thread tears down).
struct QpRegistry {
  std::mutex mu;
  std::map<std::uint32_t, Qp*> qps;
};
QpRegistry& registry() {
  static QpRegistry* r = new QpRegistry;
  return *r;
}

// A QP is driven by polls of its send and of its receive CQ.
void join_cqs(Qp* qp) {
  for (Cq* cq : {qp->send_cq(), qp->recv_cq()}) {
    std::unique_lock lock(cq->qps_mu);
    if (std::find(cq->qps.begin(), cq->qps.end(), qp) == cq->qps.end()) cq->qps.push_back(qp);
  }
  if (qp->srq) {
    std::lock_guard lock(qp->srq->qps_mu);
    qp->srq->qps.push_back(qp);
  }
  std::unique_lock lock(qp->ctx()->qps_mu);
  qp->ctx()->all_qps.push_back(qp);
}
void leave_cqs(Qp* qp) {
  for (Cq* cq : {qp->send_cq(), qp->recv_cq()}) {
    std::unique_lock lock(cq->qps_mu); // waits for pollers that may be driving it
    std::erase(cq->qps, qp);
  }
  if (qp->srq) {
    std::lock_guard lock(qp->srq->qps_mu);
    std::erase(qp->srq->qps, qp);
  }
  std::unique_lock lock(qp->ctx()->qps_mu); // waits for pollers that may have adopted it
  std::erase(qp->ctx()->all_qps, qp);
}

Qp* new_qp(ibv_context* ibctx, const ibv_qp_init_attr_ex* a) {
  auto* qp = new (std::nothrow) Qp;
  if (!qp) return nullptr;
  qp->vqp.comp_mask = 0; // verbs_qp has no initialisers: ibv_qp_to_qp_ex() reads comp_mask
  qp->vqp.xrcd = nullptr;
  try {
    qp->cap = a->cap;
    qp->early.recv.reserve(std::max<std::uint32_t>(a->cap.max_recv_wr, 1));
    qp->srq = a->srq ? to_srq(a->srq) : nullptr;
    if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) set_wr_ops(qp);
    std::lock_guard lock(registry().mu);
    ibv_qp& q = qp->vqp.qp;
    q.context = ibctx;
    q.send_cq = a->send_cq;
    q.recv_cq = a->recv_cq;
    do
      q.qp_num = next_qpn();
    while (registry().qps.count(q.qp_num));
    registry().qps[q.qp_num] = qp;
    join_cqs(qp);
  } catch (const std::bad_alloc&) {
    delete qp;
    return nullptr;
  }
  return qp;
}

} // namespace

Qp* find_qp(std::uint32_t qp_num) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().qps.find(qp_num);
  if (it == registry().qps.end()) return nullptr;
  it->second->ref();
  return it->second;
}

// ---- verbs ------------------------------------------------------------------------

ibv_qp* create_qp_ex(ibv_context* ibctx, ibv_qp_init_attr_ex* a) noexcept {
  constexpr std::uint32_t kMask =
      IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (!a || (a->comp_mask & ~kMask) || !(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd ||
      ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags)) {
    errno = a && (a->comp_mask & ~kMask) ? EOPNOTSUPP : EINVAL;
    return nullptr;
  }
  if (a->qp_type != IBV_QPT_RC) {
    explain("only RC queue pairs exist on iWARP");
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a->send_ops_flags & ~kSendOps)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!a->send_cq || !a->recv_cq || a->pd->context != ibctx || a->send_cq->context != ibctx ||
      a->recv_cq->context != ibctx || (a->srq && a->srq->context != ibctx) ||
      !caps_ok(a->cap, a->srq != nullptr)) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = to_ctx(ibctx);
  if (!ctx->count(&Context::qps, Limits::kMaxQp)) return nullptr;
  // What we actually provide: at least what was asked.
  a->cap.max_inline_data = Limits::kMaxInline;
  if (a->srq) a->cap.max_recv_wr = a->cap.max_recv_sge = 0;
  Qp* qp = new_qp(ibctx, a);
  if (!qp) {
    ctx->uncount(&Context::qps);
    errno = ENOMEM;
    return nullptr;
  }
  ibv_qp& q = qp->vqp.qp;
  q.qp_context = a->qp_context;
  q.pd = a->pd;
  q.srq = a->srq;
  q.qp_type = IBV_QPT_RC;
  // The one place the two copies differ (Qp::set_state).
  qp->state = IBV_QPS_INIT;
  q.state = IBV_QPS_RESET;
  q.handle = q.qp_num;
  q.events_completed = 0;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  qp->pd_id = to_pd(a->pd)->id;
  ++to_pd(a->pd)->users;
  ++to_cq(a->send_cq)->users;
  ++to_cq(a->recv_cq)->users;
  if (qp->srq) ++qp->srq->users;
  qp->sq_sig_all = a->sq_sig_all != 0;
  return &q;
}

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) noexcept {
  if (!pd || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp_init_attr_ex ax{};
  ax.qp_context = attr->qp_context;
  ax.send_cq = attr->send_cq;
  ax.recv_cq = attr->recv_cq;
  ax.srq = attr->srq;
  ax.cap = attr->cap;
  ax.qp_type = attr->qp_type;
  ax.sq_sig_all = attr->sq_sig_all;
  ax.comp_mask = IBV_QP_INIT_ATTR_PD;
  ax.pd = pd;
  ibv_qp* qp = create_qp_ex(pd->context, &ax);
  if (qp) attr->cap = ax.cap;
  return qp;
}

namespace {

// modify_qp under the QP's lock.
int modify_qp_locked(Qp* qp, ibv_qp_attr* attr, int mask) {
  std::lock_guard lock(qp->mu);
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != qp->state) return EINVAL;
  const bool moves = mask & IBV_QP_STATE;
  // IB-style connect: RTR names the peer, RTS brings the send side's IB attributes.
  const bool ib_rtr_call = moves && attr->qp_state == IBV_QPS_RTR &&
                           (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) && qp->state == IBV_QPS_INIT;
  const bool ib_rts_call = moves && attr->qp_state == IBV_QPS_RTS && qp->ib.path &&
                           !(mask & (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_ALT_PATH));
  if (ib_rtr_call) {
    if (int err = ib_rtr(qp, *attr, mask)) return err; // every uiwarp QP is RC
  } else if (!ib_rts_call &&
             ((mask & kIbPathAttrs) || ((mask & kIbTimerAttrs) && (mask & IBV_QP_STATE)))) {
    explain("iWARP QPs are connected by the RDMA CM (rdma_connect/rdma_accept), not by "
            "INIT->RTR->RTS with IB address attributes; run the program with its RDMA CM "
            "option (e.g. perftest -R)");
    return EINVAL;
  }
  if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > Limits::kMaxOrdIrd) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > Limits::kMaxOrdIrd)
    return EINVAL;
  if (mask & IBV_QP_STATE) {
    ibv_qp_state from = qp->state, to = attr->qp_state;
    switch (to) {
    case IBV_QPS_RESET:
      ib_cancel(qp);
      qp->detach();
      qp->early.recv.clear();
      qp->early.send.clear();
      qp->ib.path = false;
      break;
    case IBV_QPS_INIT:
      if (from != IBV_QPS_RESET && from != IBV_QPS_INIT) return EINVAL;
      break;
    case IBV_QPS_RTR:
      if (from != IBV_QPS_INIT && from != IBV_QPS_RTR) return EINVAL;
      break;
    case IBV_QPS_RTS:
      if (qp->ib.pending && from != IBV_QPS_RTR && from != IBV_QPS_RTS) return EINVAL;
      if (!qp->engine && !qp->ib.pending) {
        explain("a QP enters RTS only when the RDMA CM has connected it (iWARP)");
        return EINVAL;
      }
      break;
    case IBV_QPS_SQD:
      // Graceful close (rdma_disconnect): send what is queued, then FIN. A QP the
      // peer already closed (ERR) stays in ERR: the close has happened.
      if (from == IBV_QPS_ERR || from == IBV_QPS_SQD) return 0;
      if (!qp->engine || from != IBV_QPS_RTS) return EINVAL;
      qp->engine->close();
      qp->drive(Driver::Post, mono_ns());
      break;
    case IBV_QPS_ERR:
      ib_cancel(qp);
      qp->flush();
      qp->after_io(); // a connected QP enters ERR there, with its events
      if (qp->state != IBV_QPS_ERR) {
        qp->set_state(IBV_QPS_ERR);
        qp->last_wqe_reached();
      }
      break;
    default: return EINVAL;
    }
    qp->set_state(to);
  }
  if (mask & IBV_QP_ACCESS_FLAGS) qp->access = attr->qp_access_flags;
  return 0;
}

} // namespace

int modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) noexcept {
  Qp* qp = to_qp(ibqp);
  if (!attr || (mask & ~kKnownAttrs)) return EINVAL;
  const int ret = modify_qp_locked(qp, attr, mask);
  // RESET or ERR closed the same-host path of the connection: its peer's copy through it ends
  // before the verb returns, waited for holding no lock.
  qp->ctx()->same_host.settle();
  return ret;
}

int query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int /*mask*/, ibv_qp_init_attr* init) noexcept {
  if (!attr || !init) return EINVAL;
  Qp* qp = to_qp(ibqp);
  std::lock_guard lock(qp->mu);
  *attr = ibv_qp_attr{};
  attr->qp_state = attr->cur_qp_state = qp->state;
  attr->path_mtu = IBV_MTU_1024;
  attr->qp_access_flags = qp->access;
  attr->cap = qp->cap;
  attr->port_num = 1;
  if (qp->ib.path) attr->dest_qp_num = qp->ib.peer_qpn;
  if (qp->engine) {
    attr->max_rd_atomic = static_cast<std::uint8_t>(qp->engine->config().conn.ord);
    attr->max_dest_rd_atomic = static_cast<std::uint8_t>(qp->engine->config().conn.ird);
  }
  attr->sq_draining = qp->state == IBV_QPS_SQD && qp->engine && qp->engine->sq_outstanding();
  *init = ibv_qp_init_attr{};
  init->qp_context = ibqp->qp_context;
  init->send_cq = ibqp->send_cq;
  init->recv_cq = ibqp->recv_cq;
  init->srq = ibqp->srq;
  init->cap = qp->cap;
  init->qp_type = IBV_QPT_RC;
  init->sq_sig_all = qp->sq_sig_all;
  return 0;
}

int destroy_qp(ibv_qp* ibqp) noexcept {
  Qp* qp = to_qp(ibqp);
  Context* ctx = qp->ctx();
  {
    std::lock_guard lock(registry().mu);
    registry().qps.erase(ibqp->qp_num);
  }
  leave_cqs(qp); // no poll reaches it from now on
  {
    std::lock_guard lock(qp->mu);
    ib_cancel(qp);
    qp->detach(); // nor the progress thread, once it has dropped its reference
  }
  // The same-host peer's copy through the QP's connection ends before destroy returns, as an
  // RNIC's DMA for a QP does; waited for here, holding no lock.
  ctx->same_host.settle();
  pthread_mutex_destroy(&ibqp->mutex);
  pthread_cond_destroy(&ibqp->cond);
  --to_pd(ibqp->pd)->users;
  --to_cq(ibqp->send_cq)->users;
  --to_cq(ibqp->recv_cq)->users;
  if (qp->srq) --qp->srq->users;
  ctx->uncount(&Context::qps);
  qp->unref();
  return 0;
}

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) noexcept {
  Qp* qp = to_qp(ibqp);
  std::lock_guard lock(qp->mu);
  int err = 0;
  bool reads_only = true, all_copied = true;
  iwarp::SendWr w;
  for (; wr; wr = wr->next) {
    bool copied = false;
    err = convert_send(qp, wr, w);
    if (!err) err = submit_send(qp, w, &copied);
    if (err) break;
    all_copied = all_copied && copied;
    reads_only = reads_only && w.opcode == iwarp::WrOpcode::RdmaRead;
  }
  // Transmit from this thread (when the socket has room), or with the next drive; nothing
  // when the same-host path carried every one.
  if (err)
    qp->drive(Driver::Post, mono_ns());
  else if (!all_copied)
    qp->drive_posted(reads_only);
  if (err && bad) *bad = wr;
  return err;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept {
  Qp* qp = to_qp(ibqp);
  std::lock_guard lock(qp->mu);
  const bool held = qp->engine && qp->engine->rx_held();
  int err = 0;
  for (; wr; wr = wr->next) {
    if (qp->srq || qp->state == IBV_QPS_RESET || wr->num_sge < 0 ||
        static_cast<std::uint32_t>(wr->num_sge) > qp->cap.max_recv_sge) {
      err = EINVAL;
      break;
    }
    if (qp->engine) {
      auto r = qp->engine->post_recv(to_recv_wr(wr));
      if (r != iwarp::PostError::None) {
        err = r == iwarp::PostError::QueueFull ? ENOMEM : EINVAL;
        break;
      }
    } else if (qp->state == IBV_QPS_ERR) {
      qp->flush_completion(to_recv_wr(wr));
    } else {
      if (qp->early.recv.size() >= qp->cap.max_recv_wr) {
        err = ENOMEM;
        break;
      }
      qp->early.recv.push_back(to_recv_wr(wr));
    }
  }
  // A Send that waited for this buffer (and what follows it) is taken in now.
  if (held && !qp->engine->rx_held()) {
    const drive::Ns now = mono_ns();
    qp->policy.on_held(false, now);
    qp->drive(Driver::Release, now);
  } else
    qp->reap();
  if (err && bad) *bad = wr;
  return err;
}

} // namespace uiwarp
