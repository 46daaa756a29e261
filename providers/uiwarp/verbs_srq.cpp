// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Shared receive queues. The queue (libiwarp SharedRecvQueue) has its own lock; the QPs
// it feeds take buffers from it when a Send arrives, and a post releases the QPs whose
// Sends wait for a buffer (QpConfig::hold_for_buffer).
#include "provider.hpp"

#include <cerrno>
#include <mutex>
#include <new>
#include <pthread.h>

namespace uiwarp {

ibv_srq* create_srq_ex(ibv_context* ibctx, ibv_srq_init_attr_ex* a) noexcept {
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
  Context* ctx = to_ctx(ibctx);
  if (!ctx->count(&Context::srqs, Limits::kMaxSrq)) return nullptr;
  Srq* srq = nullptr;
  try {
    srq = new Srq;
    srq->q = std::make_unique<iwarp::SharedRecvQueue>(s.max_wr);
  } catch (const std::bad_alloc&) {
    delete srq;
    srq = nullptr;
  }
  if (!srq) {
    ctx->uncount(&Context::srqs);
    errno = ENOMEM;
    return nullptr;
  }
  srq->max_sge = s.max_sge;
  srq->limit = s.srq_limit;
  srq->pd_id = to_pd(a->pd)->id;
  ++to_pd(a->pd)->users;
  ibv_srq& i = srq->ibv;
  i.context = ibctx;
  i.srq_context = a->srq_context;
  i.pd = a->pd;
  i.events_completed = 0;
  pthread_mutex_init(&i.mutex, nullptr);
  pthread_cond_init(&i.cond, nullptr);
  return &i;
}

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) noexcept {
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

int modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) noexcept {
  auto* srq = to_srq(ibsrq);
  if (!attr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))) return EINVAL;
  std::uint32_t depth = srq->q->depth();
  if (mask & IBV_SRQ_MAX_WR) {
    if (attr->max_wr == 0 || attr->max_wr > Limits::kMaxSrqWr || attr->max_wr < srq->q->size())
      return EINVAL;
    depth = attr->max_wr;
  }
  if ((mask & IBV_SRQ_LIMIT) && attr->srq_limit > depth) return EINVAL;
  // In place: the QPs it feeds hold on to this queue.
  if ((mask & IBV_SRQ_MAX_WR) && srq->q->set_depth(depth) != iwarp::PostError::None) return EINVAL;
  if (mask & IBV_SRQ_LIMIT) srq->limit = attr->srq_limit;
  return 0;
}

int query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) noexcept {
  auto* srq = to_srq(ibsrq);
  if (!attr) return EINVAL;
  attr->max_wr = srq->q->depth();
  attr->max_sge = srq->max_sge;
  attr->srq_limit = srq->limit;
  return 0;
}

int destroy_srq(ibv_srq* ibsrq) noexcept {
  auto* srq = to_srq(ibsrq);
  if (srq->users.load() > 0) return EBUSY;
  Context* ctx = to_ctx(ibsrq->context);
  --to_pd(ibsrq->pd)->users;
  pthread_mutex_destroy(&ibsrq->mutex);
  pthread_cond_destroy(&ibsrq->cond);
  delete srq;
  ctx->uncount(&Context::srqs);
  return 0;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept {
  auto* srq = to_srq(ibsrq);
  int err = 0;
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > srq->max_sge) {
      err = EINVAL;
      break;
    }
    iwarp::RecvWr r;
    r.wr_id = wr->wr_id;
    for (int i = 0; i < wr->num_sge; ++i)
      r.sgl.push_back({wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey});
    if (srq->q->post(r) != iwarp::PostError::None) {
      err = ENOMEM;
      break;
    }
  }
  // Sends that waited for a buffer take one now. try_lock only: this holds the SRQ's list,
  // which comes after the QP lock; a QP busy in another thread looks again itself (every
  // drive of a waiting QP does), and the progress thread is told to look too.
  bool busy = false;
  {
    std::lock_guard lock(srq->qps_mu);
    // The Send that has waited longest takes the first buffer, as an RNIC fills an SRQ's
    // buffers in the order Sends arrive. In list order alone the first QP, reading on after its
    // Send, would take each buffer posted one at a time, and the Sends of the QPs after it
    // would wait until their receive wait ran out.
    const std::size_t n = srq->qps.size();
    std::size_t first = 0;
    drive::Ns oldest = drive::kNever;
    for (std::size_t i = 0; i < n; ++i) // read without the locks: hints, checked below
      if (const drive::Ns since = srq->qps[i]->policy.held_since(); since && since < oldest) {
        oldest = since;
        first = i;
      }
    for (std::size_t k = 0; k < n; ++k) {
      Qp* qp = srq->qps[(first + k) % n];
      if (!qp->policy.held()) continue;
      if (!qp->mu.try_lock()) {
        busy = true;
        continue;
      }
      if (qp->connected()) {
        const drive::Ns now = mono_ns();
        if (qp->retry_srq_hold(now)) qp->drive(Driver::Release, now);
      }
      qp->mu.unlock();
    }
  }
  if (busy)
    if (Progress* p = to_ctx(ibsrq->context)->progress()) p->kick();
  if (err && bad) *bad = wr;
  return err;
}

} // namespace uiwarp
