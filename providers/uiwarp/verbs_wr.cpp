// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Send work requests: ibv_send_wr and the ibv_wr_* builder API (create_qp_ex with
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) become libiwarp SendWr values, which have fixed-size
// room for the SGL and inline data, so posting never allocates. ibv_wr_start takes the
// QP's lock and holds it until ibv_wr_complete or ibv_wr_abort (one batch at a time, as
// rdma-core's mlx5 does in its wr_start).
#include "verbs_wr.hpp"

#include "provider.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>

namespace uiwarp {

namespace {
bool is_atomic(iwarp::WrOpcode op) {
  return op == iwarp::WrOpcode::AtomicFetchAdd || op == iwarp::WrOpcode::AtomicCompareSwap;
}
} // namespace

int convert_send(const Qp* qp, const ibv_send_wr* wr, iwarp::SendWr& out) {
  out.wr_id = wr->wr_id;
  out.remote_stag = 0;
  out.remote_addr = 0;
  out.invalidate_stag = 0;
  switch (wr->opcode) {
  case IBV_WR_SEND: out.opcode = iwarp::WrOpcode::Send; break;
  case IBV_WR_SEND_WITH_INV:
    out.opcode = iwarp::WrOpcode::SendInvalidate;
    out.invalidate_stag = wr->invalidate_rkey;
    break;
  case IBV_WR_RDMA_WRITE: out.opcode = iwarp::WrOpcode::RdmaWrite; break;
  case IBV_WR_RDMA_READ: out.opcode = iwarp::WrOpcode::RdmaRead; break;
  // RFC 7306, between uiwarp peers (submit_send refuses them on other connections).
  case IBV_WR_RDMA_WRITE_WITH_IMM:
    out.opcode = iwarp::WrOpcode::RdmaWriteImmediate;
    out.immediate = ntohl(wr->imm_data); // verbs' 4 octets, the low ones of RFC 7306's 8
    break;
  case IBV_WR_ATOMIC_FETCH_AND_ADD:
    out.opcode = iwarp::WrOpcode::AtomicFetchAdd;
    out.compare_add = wr->wr.atomic.compare_add;
    break;
  case IBV_WR_ATOMIC_CMP_AND_SWP:
    out.opcode = iwarp::WrOpcode::AtomicCompareSwap;
    out.compare_add = wr->wr.atomic.compare_add;
    out.swap = wr->wr.atomic.swap;
    break;
  // Memory windows (verbs_mw.cpp): a type 2 window's Bind, and Local Invalidate.
  case IBV_WR_BIND_MW:
    if (to_window_bind(wr->bind_mw.mw, IBV_MW_TYPE_2, qp->vqp.qp.pd, wr->bind_mw.rkey,
                       wr->bind_mw.bind_info, out))
      return EINVAL;
    break;
  case IBV_WR_LOCAL_INV:
    out.opcode = iwarp::WrOpcode::LocalInvalidate;
    out.invalidate_stag = wr->invalidate_rkey;
    break;
  default:
    explain(wr->opcode == IBV_WR_SEND_WITH_IMM
                ? "SEND_WITH_IMM: RFC 7306 has Immediate Data only after an RDMA Write "
                  "(use RDMA_WRITE_WITH_IMM)"
                : "unsupported work request opcode (SEND, SEND_WITH_INV, RDMA_WRITE, RDMA_READ, "
                  "and between uiwarp peers RDMA_WRITE_WITH_IMM and the atomics)");
    return EINVAL;
  }
  if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_READ ||
      wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    out.remote_stag = wr->wr.rdma.rkey;
    out.remote_addr = wr->wr.rdma.remote_addr;
  } else if (is_atomic(out.opcode)) {
    out.remote_stag = wr->wr.atomic.rkey;
    out.remote_addr = wr->wr.atomic.remote_addr;
  }
  if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > qp->cap.max_send_sge)
    return EINVAL;
  out.signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
  out.solicited = wr->send_flags & IBV_SEND_SOLICITED;
  out.fence = wr->send_flags & IBV_SEND_FENCE;
  out.sgl.clear();
  out.inline_data.clear();
  out.is_inline = wr->send_flags & IBV_SEND_INLINE;
  if (out.is_inline) {
    if (wr->opcode == IBV_WR_RDMA_READ || is_atomic(out.opcode)) return EINVAL;
    std::size_t total = 0;
    for (int i = 0; i < wr->num_sge; ++i)
      total += wr->sg_list[i].length;
    if (total > qp->cap.max_inline_data) return EINVAL;
    // Copied now: the caller may reuse the buffers as soon as the post returns.
    for (int i = 0; i < wr->num_sge; ++i) {
      const auto* p = reinterpret_cast<const std::byte*>(wr->sg_list[i].addr);
      out.inline_data.append(p, p + wr->sg_list[i].length);
    }
  } else {
    for (int i = 0; i < wr->num_sge; ++i)
      out.sgl.push_back({wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey});
  }
  return 0;
}

int submit_send(Qp* qp, const iwarp::SendWr& wr, bool* copied) {
  switch (qp->state) {
  case IBV_QPS_RTS:
  case IBV_QPS_SQD:
  case IBV_QPS_SQE:
  case IBV_QPS_ERR: break;
  case IBV_QPS_RTR:
    // An IB-style QP in RTR already has (or is getting) its connection, full duplex as every
    // iWARP one: perftest's ib_send_bw receiver sends its credits from RTR on iWARP devices.
    if (qp->ib.path) break;
    return EINVAL;
  default: return EINVAL; // the send queue is not active before RTS
  }
  if (!qp->engine && qp->ib.pending) {
    // IB-style connect still under way: the Send waits for the connection (ib_connect.cpp).
    if (qp->early.send.size() >= qp->cap.max_send_wr) return ENOMEM;
    qp->early.send.push_back(wr);
    return 0;
  }
  if (!qp->engine) {
    // In ERR with no connection: complete at once with a flush error.
    if (qp->state != IBV_QPS_ERR) return EINVAL;
    qp->flush_completion(wr);
    return 0;
  }
  if (iwarp::is_rfc7306(wr.opcode) && !qp->engine->config().conn.rfc7306) {
    // The peer never agreed (not uiwarp, or rfc7306 = off): it would answer with a Terminate.
    explain("RDMA Write with Immediate and atomics need a uiwarp peer that negotiated RFC 7306 "
            "(uiwarpd's rfc7306 option); this connection did not");
    return EINVAL;
  }
  if (qp->same_host.state != Qp::SameHost::State::Off && qp->same_host_post(wr)) {
    if (copied) *copied = true;
    return 0;
  }
  switch (qp->engine->post_send(wr)) {
  case iwarp::PostError::None: return 0;
  case iwarp::PostError::QueueFull: return ENOMEM;
  case iwarp::PostError::InvalidArgument: return EINVAL;
  }
  return EINVAL;
}

namespace {

iwarp::SendWr* new_wr(ibv_qp_ex* qpx, iwarp::WrOpcode op) {
  Qp* qp = to_qp(qpx);
  if (qp->wr.batch.size() >= qp->cap.max_send_wr) {
    qp->wr.error = ENOMEM; // more than the send queue holds
    return nullptr;
  }
  iwarp::SendWr& w = qp->wr.batch.push_slot();
  w = iwarp::SendWr{};
  w.wr_id = qpx->wr_id;
  w.opcode = op;
  w.signaled = qp->sq_sig_all || (qpx->wr_flags & IBV_SEND_SIGNALED);
  w.solicited = qpx->wr_flags & IBV_SEND_SOLICITED;
  w.fence = qpx->wr_flags & IBV_SEND_FENCE;
  w.is_inline = qpx->wr_flags & IBV_SEND_INLINE;
  return &w;
}
iwarp::SendWr* cur_wr(ibv_qp_ex* qpx) {
  Qp* qp = to_qp(qpx);
  if (qp->wr.batch.empty()) {
    if (!qp->wr.error) qp->wr.error = EINVAL;
    return nullptr;
  }
  return &qp->wr.batch.back();
}
// Inline data beyond max_inline_data (or beyond what a SendWr holds) fails the batch.
void add_inline(Qp* qp, iwarp::SendWr* w, const void* addr, std::size_t length) {
  const auto* p = static_cast<const std::byte*>(addr);
  if (w->inline_data.size() + length > qp->cap.max_inline_data ||
      !w->inline_data.append(p, p + length))
    qp->wr.error = EINVAL;
}

void wr_start(ibv_qp_ex* qpx) noexcept {
  Qp* qp = to_qp(qpx);
  qp->mu.lock(); // held until wr_complete / wr_abort
  qp->wr.batch.clear();
  qp->wr.error = 0;
}
int wr_complete(ibv_qp_ex* qpx) noexcept {
  Qp* qp = to_qp(qpx);
  int err = qp->wr.error;
  for (const iwarp::SendWr& w : qp->wr.batch) {
    if (err) break;
    if (w.sgl.size() > qp->cap.max_send_sge ||
        (w.is_inline && (w.opcode == iwarp::WrOpcode::RdmaRead || is_atomic(w.opcode))))
      err = EINVAL;
  }
  bool reads_only = true, all_copied = true;
  for (std::size_t i = 0; !err && i < qp->wr.batch.size(); ++i) {
    bool copied = false;
    err = submit_send(qp, qp->wr.batch[i], &copied);
    all_copied = all_copied && copied;
    reads_only = reads_only && qp->wr.batch[i].opcode == iwarp::WrOpcode::RdmaRead;
  }
  qp->wr.batch.clear();
  // Transmit from this thread, or with the next drive; nothing when all were copied.
  if (err)
    qp->drive(Driver::Post, mono_ns());
  else if (!all_copied)
    qp->drive_posted(reads_only);
  qp->mu.unlock();
  return err;
}
void wr_abort(ibv_qp_ex* qpx) noexcept {
  Qp* qp = to_qp(qpx);
  qp->wr.batch.clear();
  qp->mu.unlock();
}
void wr_send(ibv_qp_ex* qpx) noexcept { new_wr(qpx, iwarp::WrOpcode::Send); }
void wr_send_inv(ibv_qp_ex* qpx, uint32_t rkey) noexcept {
  if (iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::SendInvalidate)) w->invalidate_stag = rkey;
}
void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) noexcept {
  if (iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::RdmaWrite)) {
    w->remote_stag = rkey;
    w->remote_addr = addr;
  }
}
void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) noexcept {
  if (iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::RdmaRead)) {
    w->remote_stag = rkey;
    w->remote_addr = addr;
  }
}
void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, __be32 imm) noexcept {
  if (iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::RdmaWriteImmediate)) {
    w->remote_stag = rkey;
    w->remote_addr = addr;
    w->immediate = ntohl(imm);
  }
}
void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t add) noexcept {
  if (iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::AtomicFetchAdd)) {
    w->remote_stag = rkey;
    w->remote_addr = addr;
    w->compare_add = add;
  }
}
void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t compare,
                       uint64_t swap) noexcept {
  if (iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::AtomicCompareSwap)) {
    w->remote_stag = rkey;
    w->remote_addr = addr;
    w->compare_add = compare;
    w->swap = swap;
  }
}
// Memory windows (verbs_mw.cpp): a type 2 window's Bind and a Local Invalidate, as
// IBV_WR_BIND_MW and IBV_WR_LOCAL_INV post them; type 1 windows are bound with ibv_bind_mw.
void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) noexcept {
  iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::BindWindow);
  if (!w) return;
  Qp* qp = to_qp(qpx);
  if (!info || to_window_bind(mw, IBV_MW_TYPE_2, qp->vqp.qp.pd, rkey, *info, *w))
    qp->wr.error = EINVAL;
}
void wr_local_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) noexcept {
  if (iwarp::SendWr* w = new_wr(qpx, iwarp::WrOpcode::LocalInvalidate))
    w->invalidate_stag = invalidate_rkey;
}
void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) noexcept {
  iwarp::SendWr* w = cur_wr(qpx);
  if (!w) return;
  if (w->is_inline) {
    w->inline_data.clear();
    add_inline(to_qp(qpx), w, reinterpret_cast<const void*>(addr), length);
  } else {
    w->sgl = {{addr, length, lkey}};
  }
}
void wr_set_sge_list(ibv_qp_ex* qpx, size_t n, const ibv_sge* sg) noexcept {
  iwarp::SendWr* w = cur_wr(qpx);
  if (!w) return;
  Qp* qp = to_qp(qpx);
  w->sgl.clear();
  w->inline_data.clear();
  if (!w->is_inline && n > qp->cap.max_send_sge) {
    qp->wr.error = EINVAL;
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (w->is_inline)
      add_inline(qp, w, reinterpret_cast<const void*>(sg[i].addr), sg[i].length);
    else
      w->sgl.push_back({sg[i].addr, sg[i].length, sg[i].lkey});
  }
}
void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) noexcept {
  iwarp::SendWr* w = cur_wr(qpx);
  if (!w) return;
  w->is_inline = true;
  w->inline_data.clear();
  add_inline(to_qp(qpx), w, addr, length);
}
void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t n, const ibv_data_buf* bufs) noexcept {
  iwarp::SendWr* w = cur_wr(qpx);
  if (!w) return;
  w->is_inline = true;
  w->inline_data.clear();
  for (size_t i = 0; i < n; ++i)
    add_inline(to_qp(qpx), w, bufs[i].addr, bufs[i].length);
}

} // namespace

void set_wr_ops(Qp* qp) {
  qp->vqp.comp_mask |= 1 << 1; // VERBS_QP_EX: ibv_qp_to_qp_ex() works
  qp->wr.batch.reserve(std::max<std::uint32_t>(qp->cap.max_send_wr, 1));
  ibv_qp_ex& x = qp->vqp.qp_ex;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_send = wr_send;
  x.wr_send_inv = wr_send_inv;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_local_inv = wr_local_inv;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
}

} // namespace uiwarp
