// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Memory windows (RFC 5040 §2.1; the IB verbs' type 1 and type 2B): an STag of their own over
// part of a registered region, with rights of their own (iwarp::MemoryTable). A window is
// bound by a work request in send-queue order: ibv_bind_mw for type 1 (this file),
// IBV_WR_BIND_MW for type 2 (verbs_wr.cpp), and the engine applies it when the queue reaches
// it (iwarp::Qp::run_local_operation). A type 2 window is tied to the QP that bound it and is
// freed again by IBV_WR_LOCAL_INV or a peer's Send with Invalidate; a type 1 window is
// rebound at will and never invalidated by a peer. Siw has none of this.
#include "provider.hpp"
#include "verbs_wr.hpp"

#include <cerrno>
#include <new>

namespace uiwarp {

namespace {

struct Mw {
  ibv_mw ibv; // first: a downcast is a cast
  std::uint32_t pd_id = 0;
};
Mw* to_mw(ibv_mw* m) { return reinterpret_cast<Mw*>(m); }

} // namespace

ibv_mw* alloc_mw(ibv_pd* ibpd, ibv_mw_type type) noexcept {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    errno = EINVAL;
    return nullptr;
  }
  Pd* pd = to_pd(ibpd);
  Context* ctx = to_ctx(ibpd->context);
  auto* mw = new (std::nothrow) Mw{};
  if (!mw) {
    errno = ENOMEM;
    return nullptr;
  }
  const std::uint32_t stag = ctx->mem.add_window(
      pd->id, type == IBV_MW_TYPE_1 ? iwarp::StagKind::Window1 : iwarp::StagKind::Window2);
  if (!stag) {
    delete mw;
    errno = ENOMEM;
    return nullptr;
  }
  ++pd->users;
  mw->pd_id = pd->id;
  mw->ibv.context = ibpd->context;
  mw->ibv.pd = ibpd;
  mw->ibv.rkey = stag;
  mw->ibv.handle = stag >> 8;
  mw->ibv.type = type;
  return &mw->ibv;
}

int dealloc_mw(ibv_mw* ibmw) noexcept {
  auto* mw = to_mw(ibmw);
  Context* ctx = to_ctx(ibmw->context);
  if (!ctx->mem.remove_window(ibmw->rkey)) return EINVAL;
  ctx->same_host.settle(); // a same-host peer's copy through the window ends first
  --to_pd(ibmw->pd)->users;
  delete mw;
  return 0;
}

int to_window_bind(const ibv_mw* mw, ibv_mw_type type, const ibv_pd* pd, std::uint32_t new_rkey,
                   const ibv_mw_bind_info& info, iwarp::SendWr& out) {
  // LOCAL_WRITE means nothing for a window (local access goes through the MR's lkey), but
  // mlx5 and rxe accept it and pyverbs' MW tests pass it: taken, and ignored.
  constexpr int kWindowAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                IBV_ACCESS_ZERO_BASED;
  if (!mw || mw->type != type || mw->pd != pd || (info.mw_access_flags & ~kWindowAccess) ||
      (!info.mr && info.length) || (info.mr && info.mr->context != mw->context))
    return EINVAL;
  out.opcode = iwarp::WrOpcode::BindWindow;
  out.invalidate_stag = mw->rkey;
  out.remote_stag = new_rkey;
  out.bind_region = info.mr ? info.mr->lkey : 0;
  out.bind_addr = info.addr;
  out.bind_length = info.length;
  out.bind_access = to_iwarp_access(static_cast<int>(info.mw_access_flags));
  return 0;
}

// ibv_bind_mw (type 1): a Bind work request on `ibqp`'s send queue; the window's rkey is the
// new one from now on (its key octet incremented, as ibv_inc_rkey does), usable by the peer
// once the Bind has completed.
int bind_mw(ibv_qp* ibqp, ibv_mw* mw, ibv_mw_bind* b) noexcept {
  if (!b || !mw) return EINVAL;
  Qp* qp = to_qp(ibqp);
  const std::uint32_t new_rkey = ibv_inc_rkey(mw->rkey);
  iwarp::SendWr w;
  w.wr_id = b->wr_id;
  w.signaled = qp->sq_sig_all || (b->send_flags & IBV_SEND_SIGNALED);
  w.fence = b->send_flags & IBV_SEND_FENCE;
  if (int err = to_window_bind(mw, IBV_MW_TYPE_1, ibqp->pd, new_rkey, b->bind_info, w)) return err;
  std::lock_guard lock(qp->mu);
  int err = submit_send(qp, w);
  qp->drive(Driver::Post, mono_ns());
  if (!err) mw->rkey = new_rkey;
  return err;
}

} // namespace uiwarp
