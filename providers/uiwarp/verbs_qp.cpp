// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Queue pairs and shared receive queues, with the kernel's iWARP semantics
// (rdma-core-integration.md §4): a QP reaches RTS only through the CM, which
// hands it a connected, MPA-negotiated socket; RTR and state-less modifies are
// accepted (librdmacm issues them); SQD is a graceful close; IB addressing
// attributes are refused, since iWARP has no INIT->RTR->RTS path.
#include "provider.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <new>
#include <pthread.h>

namespace uiwarp {

namespace {

std::atomic<std::uint32_t> g_next_qpn{0x100}; // QPNs 0 and 1 mean something in IB

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
constexpr std::uint64_t kSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV |
                                   IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;

bool caps_ok(const ibv_qp_cap& c, bool srq) {
  return c.max_send_wr <= Limits::kMaxQpWr && c.max_send_sge <= Limits::kMaxSge &&
         c.max_inline_data <= Limits::kMaxInline &&
         (srq || (c.max_recv_wr <= Limits::kMaxQpWr && c.max_recv_sge <= Limits::kMaxSge));
}

iwarp::RecvWr to_recv_wr(const ibv_recv_wr* wr) {
  iwarp::RecvWr r;
  r.wr_id = wr->wr_id;
  r.sgl.reserve(static_cast<std::size_t>(wr->num_sge));
  for (int i = 0; i < wr->num_sge; ++i)
    r.sgl.push_back({wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey});
  return r;
}

// ---- conversion and validation of send WRs (post_send and the ibv_wr_* API) ----

int convert_send(Qp* qp, const ibv_send_wr* wr, iwarp::SendWr& out) {
  out = iwarp::SendWr{};
  out.wr_id = wr->wr_id;
  switch (wr->opcode) {
  case IBV_WR_SEND: out.opcode = iwarp::WrOpcode::Send; break;
  case IBV_WR_SEND_WITH_INV:
    out.opcode = iwarp::WrOpcode::SendInvalidate;
    out.invalidate_stag = wr->invalidate_rkey;
    break;
  case IBV_WR_RDMA_WRITE: out.opcode = iwarp::WrOpcode::RdmaWrite; break;
  case IBV_WR_RDMA_READ: out.opcode = iwarp::WrOpcode::RdmaRead; break;
  default:
    explain("only SEND, SEND_WITH_INV, RDMA_WRITE and RDMA_READ work requests are supported");
    return EINVAL;
  }
  if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_READ) {
    out.remote_stag = wr->wr.rdma.rkey;
    out.remote_addr = wr->wr.rdma.remote_addr;
  }
  if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > qp->cap.max_send_sge)
    return EINVAL;
  out.signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
  out.solicited = wr->send_flags & IBV_SEND_SOLICITED;
  out.fence = wr->send_flags & IBV_SEND_FENCE;
  if (wr->send_flags & IBV_SEND_INLINE) {
    if (wr->opcode == IBV_WR_RDMA_READ) return EINVAL;
    std::size_t total = 0;
    for (int i = 0; i < wr->num_sge; ++i)
      total += wr->sg_list[i].length;
    if (total > qp->cap.max_inline_data) return EINVAL;
    out.is_inline = true;
    out.inline_data.reserve(total);
    for (int i = 0; i < wr->num_sge; ++i) {
      const auto* p = reinterpret_cast<const std::byte*>(wr->sg_list[i].addr);
      out.inline_data.insert(out.inline_data.end(), p, p + wr->sg_list[i].length);
    }
  } else {
    out.sgl.reserve(static_cast<std::size_t>(wr->num_sge));
    for (int i = 0; i < wr->num_sge; ++i)
      out.sgl.push_back({wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey});
  }
  return 0;
}

// Queues one converted WR (qp lock held).
int submit_send(Qp* qp, iwarp::SendWr&& wr) {
  switch (qp->state) {
  case IBV_QPS_RTS:
  case IBV_QPS_SQD:
  case IBV_QPS_SQE:
  case IBV_QPS_ERR: break;
  default: return EINVAL; // the send queue is not active before RTS
  }
  if (!qp->engine) {
    // In ERR with no connection: complete at once with a flush error.
    if (qp->state != IBV_QPS_ERR) return EINVAL;
    iwarp::Completion c = iwarp::Completion::make(wr.wr_id, iwarp::WcStatus::Flushed,
                                                  iwarp::completion_opcode(wr.opcode), 0, false);
    Cq::of(qp->vqp.qp.send_cq)->push(to_ibv_wc(c, qp->vqp.qp.qp_num), false);
    return 0;
  }
  switch (qp->engine->post_send(std::move(wr))) {
  case iwarp::PostError::None: return 0;
  case iwarp::PostError::QueueFull: return ENOMEM;
  case iwarp::PostError::InvalidArgument: return EINVAL;
  }
  return EINVAL;
}

// ---- the ibv_wr_* API (create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ----

iwarp::SendWr* new_wr(ibv_qp_ex* qpx, iwarp::WrOpcode op) {
  Qp* qp = Qp::of(qpx);
  iwarp::SendWr& w = qp->wr_batch.emplace_back();
  w.wr_id = qpx->wr_id;
  w.opcode = op;
  w.signaled = qp->sq_sig_all || (qpx->wr_flags & IBV_SEND_SIGNALED);
  w.solicited = qpx->wr_flags & IBV_SEND_SOLICITED;
  w.fence = qpx->wr_flags & IBV_SEND_FENCE;
  w.is_inline = qpx->wr_flags & IBV_SEND_INLINE;
  return &w;
}
iwarp::SendWr* cur_wr(ibv_qp_ex* qpx) {
  Qp* qp = Qp::of(qpx);
  if (qp->wr_batch.empty()) {
    qp->wr_error = EINVAL;
    return nullptr;
  }
  return &qp->wr_batch.back();
}

void wr_start(ibv_qp_ex* qpx) {
  Qp* qp = Qp::of(qpx);
  qp->ctx()->mu.lock(); // held until wr_complete / wr_abort (one batch at a time)
  qp->wr_batch.clear();
  qp->wr_error = 0;
}
int wr_complete(ibv_qp_ex* qpx) {
  Qp* qp = Qp::of(qpx);
  int err = qp->wr_error;
  for (std::size_t i = 0; !err && i < qp->wr_batch.size(); ++i) {
    iwarp::SendWr& w = qp->wr_batch[i];
    if (w.sgl.size() > qp->cap.max_send_sge)
      err = EINVAL;
    else if (w.is_inline && (w.inline_data.size() > qp->cap.max_inline_data ||
                             w.opcode == iwarp::WrOpcode::RdmaRead))
      err = EINVAL;
  }
  for (std::size_t i = 0; !err && i < qp->wr_batch.size(); ++i)
    err = submit_send(qp, std::move(qp->wr_batch[i]));
  qp->wr_batch.clear();
  qp->push_tx();
  qp->after_io();
  qp->ctx()->mu.unlock();
  return err;
}
void wr_abort(ibv_qp_ex* qpx) {
  Qp* qp = Qp::of(qpx);
  qp->wr_batch.clear();
  qp->ctx()->mu.unlock();
}
void wr_send(ibv_qp_ex* qpx) { new_wr(qpx, iwarp::WrOpcode::Send); }
void wr_send_inv(ibv_qp_ex* qpx, uint32_t rkey) {
  new_wr(qpx, iwarp::WrOpcode::SendInvalidate)->invalidate_stag = rkey;
}
void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::RdmaWrite);
  w->remote_stag = rkey;
  w->remote_addr = addr;
}
void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::RdmaRead);
  w->remote_stag = rkey;
  w->remote_addr = addr;
}
void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  iwarp::SendWr* w = cur_wr(qpx);
  if (!w) return;
  if (w->is_inline) {
    const auto* p = reinterpret_cast<const std::byte*>(addr);
    w->inline_data.assign(p, p + length);
  } else {
    w->sgl = {{addr, length, lkey}};
  }
}
void wr_set_sge_list(ibv_qp_ex* qpx, size_t n, const ibv_sge* sg) {
  iwarp::SendWr* w = cur_wr(qpx);
  if (!w) return;
  w->sgl.clear();
  w->inline_data.clear();
  for (size_t i = 0; i < n; ++i) {
    if (w->is_inline) {
      const auto* p = reinterpret_cast<const std::byte*>(sg[i].addr);
      w->inline_data.insert(w->inline_data.end(), p, p + sg[i].length);
    } else {
      w->sgl.push_back({sg[i].addr, sg[i].length, sg[i].lkey});
    }
  }
}
void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
  iwarp::SendWr* w = cur_wr(qpx);
  if (!w) return;
  w->is_inline = true;
  const auto* p = static_cast<const std::byte*>(addr);
  w->inline_data.assign(p, p + length);
}
void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t n, const ibv_data_buf* bufs) {
  iwarp::SendWr* w = cur_wr(qpx);
  if (!w) return;
  w->is_inline = true;
  w->inline_data.clear();
  for (size_t i = 0; i < n; ++i) {
    const auto* p = static_cast<const std::byte*>(bufs[i].addr);
    w->inline_data.insert(w->inline_data.end(), p, p + bufs[i].length);
  }
}

std::mutex g_qps_mu;
std::map<std::uint32_t, Qp*> g_qps; // QPN -> QP, for the CM (conn_param.qp_num)

} // namespace

Qp* find_qp(std::uint32_t qp_num) {
  std::lock_guard<std::mutex> lock(g_qps_mu);
  auto it = g_qps.find(qp_num);
  return it == g_qps.end() ? nullptr : it->second;
}

// ---- Qp ---------------------------------------------------------------------------

void Qp::reap() {
  if (!engine) return;
  ibv_qp& q = vqp.qp;
  while (auto c = engine->poll()) {
    Cq* cq = Cq::of(c->recv ? q.recv_cq : q.send_cq);
    cq->push(to_ibv_wc(*c, q.qp_num), c->solicited);
  }
}

void Qp::flush() {
  if (engine) {
    engine->flush();
    reap();
  }
  for (const iwarp::RecvWr& r : pending_recv) {
    iwarp::Completion c =
        iwarp::Completion::make(r.wr_id, iwarp::WcStatus::Flushed, iwarp::WcOpcode::Recv, 0, true);
    Cq::of(vqp.qp.recv_cq)->push(to_ibv_wc(c, vqp.qp.qp_num), false);
  }
  pending_recv.clear();
}

// ---- verbs ------------------------------------------------------------------------

ibv_qp* create_qp_ex(ibv_context* ibctx, ibv_qp_init_attr_ex* a) {
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
  Context* ctx = Context::of(ibctx);
  {
    std::lock_guard<CtxMutex> lock(ctx->mu);
    if (ctx->qps >= Limits::kMaxQp) {
      errno = ENOMEM;
      return nullptr;
    }
    ++ctx->qps;
  }
  auto* qp = new (std::nothrow) Qp;
  if (!qp) {
    std::lock_guard<CtxMutex> lock(ctx->mu);
    --ctx->qps;
    errno = ENOMEM;
    return nullptr;
  }
  // verbs_qp has no initialisers and `new Qp` leaves it as the heap had it;
  // ibv_qp_to_qp_ex() answers from comp_mask (VERBS_QP_EX), so it must be 0
  // unless the ibv_wr_* ops are set below.
  qp->vqp.comp_mask = 0;
  qp->vqp.xrcd = nullptr;
  ibv_qp& q = qp->vqp.qp;
  q.context = ibctx;
  q.qp_context = a->qp_context;
  q.pd = a->pd;
  q.send_cq = a->send_cq;
  q.recv_cq = a->recv_cq;
  q.srq = a->srq;
  q.qp_type = IBV_QPT_RC;
  q.state = IBV_QPS_RESET;
  q.qp_num = g_next_qpn++;
  q.handle = q.qp_num;
  q.events_completed = 0;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  qp->pd_id = pd_of(a->pd)->id;
  qp->srq = a->srq ? reinterpret_cast<Srq*>(a->srq) : nullptr;
  ++pd_of(a->pd)->users;
  ++Cq::of(a->send_cq)->users;
  ++Cq::of(a->recv_cq)->users;
  if (qp->srq) ++qp->srq->users;
  qp->sq_sig_all = a->sq_sig_all != 0;
  // What we actually provide: at least what was asked.
  a->cap.max_inline_data = Limits::kMaxInline;
  if (a->srq) a->cap.max_recv_wr = a->cap.max_recv_sge = 0;
  qp->cap = a->cap;
  if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    qp->vqp.comp_mask |= 1 << 1; // VERBS_QP_EX: ibv_qp_to_qp_ex() works
    ibv_qp_ex& x = qp->vqp.qp_ex;
    x.wr_start = wr_start;
    x.wr_complete = wr_complete;
    x.wr_abort = wr_abort;
    x.wr_send = wr_send;
    x.wr_send_inv = wr_send_inv;
    x.wr_rdma_write = wr_rdma_write;
    x.wr_rdma_read = wr_rdma_read;
    x.wr_set_sge = wr_set_sge;
    x.wr_set_sge_list = wr_set_sge_list;
    x.wr_set_inline_data = wr_set_inline_data;
    x.wr_set_inline_data_list = wr_set_inline_data_list;
  }
  std::lock_guard<std::mutex> lock(g_qps_mu);
  g_qps[q.qp_num] = qp;
  return &q;
}

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
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

int modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  Qp* qp = Qp::of(ibqp);
  if (!attr || (mask & ~kKnownAttrs)) return EINVAL;
  std::lock_guard<CtxMutex> lock(qp->ctx()->mu);
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != qp->state) return EINVAL;
  if ((mask & kIbPathAttrs) || ((mask & kIbTimerAttrs) && (mask & IBV_QP_STATE))) {
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
      qp->detach();
      qp->pending_recv.clear();
      break;
    case IBV_QPS_INIT:
      if (from != IBV_QPS_RESET && from != IBV_QPS_INIT) return EINVAL;
      break;
    case IBV_QPS_RTR:
      if (from != IBV_QPS_INIT && from != IBV_QPS_RTR) return EINVAL;
      break;
    case IBV_QPS_RTS:
      if (!qp->engine) {
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
      qp->push_tx();
      qp->after_io();
      break;
    case IBV_QPS_ERR:
      qp->flush();
      qp->after_io();
      break;
    default: return EINVAL;
    }
    qp->state = to;
    ibqp->state = to;
  }
  if (mask & IBV_QP_ACCESS_FLAGS) qp->access = attr->qp_access_flags;
  return 0;
}

int query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int /*mask*/, ibv_qp_init_attr* init) {
  if (!attr || !init) return EINVAL;
  Qp* qp = Qp::of(ibqp);
  std::lock_guard<CtxMutex> lock(qp->ctx()->mu);
  *attr = ibv_qp_attr{};
  attr->qp_state = attr->cur_qp_state = qp->state;
  attr->path_mtu = IBV_MTU_1024;
  attr->qp_access_flags = qp->access;
  attr->cap = qp->cap;
  attr->port_num = 1;
  if (qp->engine) {
    attr->max_rd_atomic = static_cast<std::uint8_t>(qp->engine->config().ord);
    attr->max_dest_rd_atomic = static_cast<std::uint8_t>(qp->engine->config().ird);
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

int destroy_qp(ibv_qp* ibqp) {
  Qp* qp = Qp::of(ibqp);
  Context* ctx = qp->ctx();
  std::lock_guard<CtxMutex> ctx_lock(ctx->mu);
  {
    std::lock_guard<std::mutex> lock(g_qps_mu);
    g_qps.erase(ibqp->qp_num);
  }
  pthread_mutex_destroy(&ibqp->mutex);
  pthread_cond_destroy(&ibqp->cond);
  --pd_of(ibqp->pd)->users;
  --Cq::of(ibqp->send_cq)->users;
  --Cq::of(ibqp->recv_cq)->users;
  if (qp->srq) --qp->srq->users;
  delete qp;
  --ctx->qps;
  return 0;
}

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Qp* qp = Qp::of(ibqp);
  std::lock_guard<CtxMutex> lock(qp->ctx()->mu);
  int err = 0;
  for (; wr; wr = wr->next) {
    iwarp::SendWr w;
    err = convert_send(qp, wr, w);
    if (!err) err = submit_send(qp, std::move(w));
    if (err) break;
  }
  qp->push_tx();
  qp->after_io();
  if (err && bad) *bad = wr;
  return err;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp* qp = Qp::of(ibqp);
  std::lock_guard<CtxMutex> lock(qp->ctx()->mu);
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
      iwarp::Completion c = iwarp::Completion::make(wr->wr_id, iwarp::WcStatus::Flushed,
                                                    iwarp::WcOpcode::Recv, 0, true);
      Cq::of(ibqp->recv_cq)->push(to_ibv_wc(c, ibqp->qp_num), false);
    } else {
      if (qp->pending_recv.size() >= qp->cap.max_recv_wr) {
        err = ENOMEM;
        break;
      }
      qp->pending_recv.push_back(to_recv_wr(wr));
    }
  }
  qp->reap();
  if (err && bad) *bad = wr;
  return err;
}

// ---- SRQ --------------------------------------------------------------------------

ibv_srq* create_srq_ex(ibv_context* ibctx, ibv_srq_init_attr_ex* a) {
  if (!a || !(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd ||
      ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type != IBV_SRQT_BASIC) ||
      (a->comp_mask & ~(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE))) {
    errno = a && (a->comp_mask & ~(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE)) ? EOPNOTSUPP
                                                                                   : EINVAL;
    return nullptr;
  }
  ibv_srq_attr& s = a->attr;
  if (s.max_wr == 0 || s.max_wr > Limits::kMaxSrqWr || s.max_sge > Limits::kMaxSge ||
      s.srq_limit > s.max_wr || a->pd->context != ibctx) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = Context::of(ibctx);
  {
    std::lock_guard<CtxMutex> lock(ctx->mu);
    if (ctx->srqs >= Limits::kMaxSrq) {
      errno = ENOMEM;
      return nullptr;
    }
    ++ctx->srqs;
  }
  auto* srq = new (std::nothrow) Srq;
  if (!srq) {
    std::lock_guard<CtxMutex> lock(ctx->mu);
    --ctx->srqs;
    errno = ENOMEM;
    return nullptr;
  }
  srq->q = std::make_unique<iwarp::SharedRecvQueue>(s.max_wr);
  srq->max_sge = s.max_sge;
  srq->limit = s.srq_limit;
  srq->pd_id = pd_of(a->pd)->id;
  ++pd_of(a->pd)->users;
  ibv_srq& i = srq->ibv;
  i.context = ibctx;
  i.srq_context = a->srq_context;
  i.pd = a->pd;
  i.events_completed = 0;
  pthread_mutex_init(&i.mutex, nullptr);
  pthread_cond_init(&i.cond, nullptr);
  return &i;
}

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (!pd || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_srq_init_attr_ex ax{};
  ax.srq_context = attr->srq_context;
  ax.attr = attr->attr;
  ax.comp_mask = IBV_SRQ_INIT_ATTR_PD;
  ax.pd = pd;
  ibv_srq* srq = create_srq_ex(pd->context, &ax);
  if (srq) attr->attr = ax.attr;
  return srq;
}

int modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  auto* srq = reinterpret_cast<Srq*>(ibsrq);
  if (!attr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))) return EINVAL;
  std::lock_guard<CtxMutex> lock(Context::of(ibsrq->context)->mu);
  std::uint32_t depth = srq->q->depth();
  if (mask & IBV_SRQ_MAX_WR) {
    if (attr->max_wr == 0 || attr->max_wr > Limits::kMaxSrqWr || attr->max_wr < srq->q->size())
      return EINVAL;
    depth = attr->max_wr;
  }
  if ((mask & IBV_SRQ_LIMIT) && attr->srq_limit > depth) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) {
    auto q = std::make_unique<iwarp::SharedRecvQueue>(depth);
    for (iwarp::RecvWr& r : srq->q->drain())
      q->post(std::move(r));
    srq->q = std::move(q);
  }
  if (mask & IBV_SRQ_LIMIT) srq->limit = attr->srq_limit;
  return 0;
}

int query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  auto* srq = reinterpret_cast<Srq*>(ibsrq);
  if (!attr) return EINVAL;
  std::lock_guard<CtxMutex> lock(Context::of(ibsrq->context)->mu);
  attr->max_wr = srq->q->depth();
  attr->max_sge = srq->max_sge;
  attr->srq_limit = srq->limit;
  return 0;
}

int destroy_srq(ibv_srq* ibsrq) {
  auto* srq = reinterpret_cast<Srq*>(ibsrq);
  if (srq->users.load() > 0) return EBUSY;
  Context* ctx = Context::of(ibsrq->context);
  --pd_of(ibsrq->pd)->users;
  pthread_mutex_destroy(&ibsrq->mutex);
  pthread_cond_destroy(&ibsrq->cond);
  delete srq;
  std::lock_guard<CtxMutex> lock(ctx->mu);
  --ctx->srqs;
  return 0;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto* srq = reinterpret_cast<Srq*>(ibsrq);
  std::lock_guard<CtxMutex> lock(Context::of(ibsrq->context)->mu);
  int err = 0;
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > srq->max_sge) {
      err = EINVAL;
      break;
    }
    if (srq->q->post(to_recv_wr(wr)) != iwarp::PostError::None) {
      err = ENOMEM;
      break;
    }
  }
  if (err && bad) *bad = wr;
  return err;
}

} // namespace uiwarp
