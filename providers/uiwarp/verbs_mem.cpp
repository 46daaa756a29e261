// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Protection domains and memory registration. An MR is an entry of the
// context's STag table (libiwarp MemoryTable): lkey = rkey = STag, 24-bit index
// plus a random 8-bit key (RFC 5040 §8.1.1(8): STags hard to guess).
#include "provider.hpp"

#include <cerrno>
#include <cstdlib>
#include <new>

namespace uiwarp {

namespace {

constexpr int kSupportedAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_RELAXED_ORDERING |
                                 IBV_ACCESS_ZERO_BASED;

// IB rule kept by every provider: remote write needs local write.
bool valid_access(int access) {
  if (access & ~kSupportedAccess) return false;
  if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) return false;
  return true;
}

} // namespace

std::uint32_t to_iwarp_access(int a) {
  std::uint32_t r = 0;
  if (a & IBV_ACCESS_LOCAL_WRITE) r |= iwarp::access::kLocalWrite;
  if (a & IBV_ACCESS_REMOTE_WRITE) r |= iwarp::access::kRemoteWrite;
  if (a & IBV_ACCESS_REMOTE_READ) r |= iwarp::access::kRemoteRead;
  if (a & IBV_ACCESS_REMOTE_ATOMIC) r |= iwarp::access::kRemoteAtomic;
  if (a & IBV_ACCESS_ZERO_BASED) r |= iwarp::access::kZeroBased;
  return r;
}

ibv_pd* alloc_pd(ibv_context* ibctx) {
  Context* ctx = Context::of(ibctx);
  std::lock_guard<CtxMutex> lock(ctx->mu);
  if (ctx->pds >= Limits::kMaxPd) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* pd = new (std::nothrow) Pd{};
  if (!pd) {
    errno = ENOMEM;
    return nullptr;
  }
  pd->ibv.context = ibctx;
  pd->id = ctx->next_pd++;
  pd->ibv.handle = pd->id;
  ++ctx->pds;
  return &pd->ibv;
}

int dealloc_pd(ibv_pd* ibpd) {
  auto* pd = reinterpret_cast<Pd*>(ibpd);
  if (pd->users.load() > 0) return EBUSY;
  Context* ctx = Context::of(ibpd->context);
  std::lock_guard<CtxMutex> lock(ctx->mu);
  --ctx->pds;
  delete pd;
  return 0;
}

ibv_mr* reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access) {
  if (!ibpd || !valid_access(access) || length == 0 || length > Limits::kMaxMrSize || !addr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* pd = reinterpret_cast<Pd*>(ibpd);
  Context* ctx = Context::of(ibpd->context);
  auto* mr = new (std::nothrow) Mr{};
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  // TO base: the iova the consumer chose (ibv_reg_mr_iova), or 0 when zero-based.
  std::uint64_t base = (access & IBV_ACCESS_ZERO_BASED) ? 0 : hca_va;
  std::uint32_t stag;
  {
    std::lock_guard<CtxMutex> lock(ctx->mu);
    stag =
        ctx->mem.add(pd->id, static_cast<std::byte*>(addr), base, length, to_iwarp_access(access));
    if (stag) ++ctx->mrs;
  }
  if (!stag) {
    delete mr;
    errno = ENOMEM;
    return nullptr;
  }
  mr->pd_id = pd->id;
  ++pd->users;
  mr->vmr.mr_type = IBV_MR_TYPE_MR;
  mr->vmr.access = access;
  ibv_mr& m = mr->vmr.ibv_mr;
  m.context = ibpd->context;
  m.pd = ibpd;
  m.addr = addr;
  m.length = length;
  m.handle = stag;
  m.lkey = m.rkey = stag;
  return &m;
}

int rereg_mr(verbs_mr* vmr, int flags, ibv_pd* ibpd, void* addr, size_t length, int access) {
  if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) return IBV_REREG_MR_ERR_INPUT;
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && !valid_access(access)) return IBV_REREG_MR_ERR_INPUT;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || length == 0))
    return IBV_REREG_MR_ERR_INPUT;
  auto* mr = reinterpret_cast<Mr*>(vmr);
  ibv_mr& m = vmr->ibv_mr;
  Context* ctx = Context::of(m.context);
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? ibpd : m.pd;
  if (!new_pd || new_pd->context != m.context) return IBV_REREG_MR_ERR_INPUT;
  void* new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : m.addr;
  size_t new_len = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : m.length;
  int new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : vmr->access;
  std::uint32_t pd_id = reinterpret_cast<Pd*>(new_pd)->id;
  std::lock_guard<CtxMutex> lock(ctx->mu);
  const iwarp::MemoryRegion* old = ctx->mem.find(m.lkey);
  if (!old) return IBV_REREG_MR_ERR_INPUT;
  std::uint64_t base =
      (new_access & IBV_ACCESS_ZERO_BASED)
          ? 0
          : ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? reinterpret_cast<std::uint64_t>(new_addr)
                                                       : old->base);
  auto stag = ctx->mem.modify(m.lkey, pd_id, static_cast<std::byte*>(new_addr), base, new_len,
                              to_iwarp_access(new_access));
  if (!stag) return IBV_REREG_MR_ERR_INPUT;
  // The key changes, so STags handed out before are dead (RFC 5040 §8.1.1(6)).
  if (new_pd != m.pd) {
    --pd_of(m.pd)->users;
    ++pd_of(new_pd)->users;
  }
  m.pd = new_pd;
  m.addr = new_addr;
  m.length = new_len;
  m.lkey = m.rkey = m.handle = *stag;
  vmr->access = new_access;
  mr->pd_id = pd_id;
  return 0;
}

int dereg_mr(verbs_mr* vmr) {
  auto* mr = reinterpret_cast<Mr*>(vmr);
  Context* ctx = Context::of(vmr->ibv_mr.context);
  {
    std::lock_guard<CtxMutex> lock(ctx->mu);
    if (!ctx->mem.remove(vmr->ibv_mr.lkey)) return EINVAL;
    --ctx->mrs;
  }
  --pd_of(vmr->ibv_mr.pd)->users;
  delete mr;
  return 0;
}

ibv_mw* alloc_mw(ibv_pd*, ibv_mw_type) {
  // Memory windows need bind ordering with the send queue that libiwarp does
  // not provide yet; say so rather than hand out a window that does not bind.
  errno = EOPNOTSUPP;
  return nullptr;
}

} // namespace uiwarp
