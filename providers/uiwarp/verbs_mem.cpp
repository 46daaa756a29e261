// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Protection domains and memory registration. An MR is an entry of the
// context's STag table (libiwarp MemoryTable): lkey = rkey = STag, 24-bit index
// plus a random 8-bit key (RFC 5040 §8.1.1(8): STags hard to guess).
#include "provider.hpp"

#include <cerrno>
#include <cstdlib>
#include <new>
#include <unistd.h>

namespace uiwarp {

namespace {

// ib_check_mr_access (include/rdma/ib_verbs.h), the rules every kernel provider inherits:
// remote write or atomic need local write; the flags up to HUGETLB and the optional range are
// accepted (MW_BIND and REMOTE_ATOMIC too: an operation the device lacks fails when it is
// used, not when memory is registered; libfabric and qperf register with both); ON_DEMAND and
// the FLUSH flags of devices without them are EOPNOTSUPP; any other bit is EINVAL.
constexpr int kAccessFlushGlobal = 1 << 8;     // IBV_ACCESS_FLUSH_GLOBAL (rdma-core 43+)
constexpr int kAccessFlushPersistent = 1 << 9; // IBV_ACCESS_FLUSH_PERSISTENT
constexpr int kKnownAccess = ((IBV_ACCESS_HUGETLB << 1) - 1) | kAccessFlushGlobal |
                             kAccessFlushPersistent | IBV_ACCESS_OPTIONAL_RANGE;

int check_access(int access) {
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  if (access & ~kKnownAccess) return EINVAL;
  if (access & (IBV_ACCESS_ON_DEMAND | kAccessFlushGlobal | kAccessFlushPersistent))
    return EOPNOTSUPP;
  return 0;
}

// ib_uverbs_reg_mr: the buffer and the iova must share their offset in the page.
bool same_page_offset(const void* addr, std::uint64_t iova) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return (reinterpret_cast<std::uintptr_t>(addr) & (page - 1)) == (iova & (page - 1));
}

} // namespace

std::uint32_t to_iwarp_access(int a) {
  std::uint32_t r = 0;
  if (a & IBV_ACCESS_LOCAL_WRITE) r |= iwarp::access::kLocalWrite;
  if (a & IBV_ACCESS_REMOTE_WRITE) r |= iwarp::access::kRemoteWrite;
  if (a & IBV_ACCESS_REMOTE_READ) r |= iwarp::access::kRemoteRead;
  if (a & IBV_ACCESS_REMOTE_ATOMIC) r |= iwarp::access::kRemoteAtomic;
  if (a & IBV_ACCESS_ZERO_BASED) r |= iwarp::access::kZeroBased;
  if (a & IBV_ACCESS_MW_BIND) r |= iwarp::access::kMwBind;
  return r;
}

ibv_pd* alloc_pd(ibv_context* ibctx) noexcept {
  Context* ctx = to_ctx(ibctx);
  std::lock_guard lock(ctx->mu);
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

int dealloc_pd(ibv_pd* ibpd) noexcept {
  auto* pd = to_pd(ibpd);
  if (pd->users.load() > 0) return EBUSY;
  Context* ctx = to_ctx(ibpd->context);
  std::lock_guard lock(ctx->mu);
  --ctx->pds;
  delete pd;
  return 0;
}

ibv_mr* reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access) noexcept {
  if (!ibpd || length == 0 || length > Limits::kMaxMrSize || !addr ||
      !same_page_offset(addr, hca_va)) {
    errno = EINVAL;
    return nullptr;
  }
  if (int err = check_access(access)) {
    errno = err;
    return nullptr;
  }
  auto* pd = to_pd(ibpd);
  Context* ctx = to_ctx(ibpd->context);
  auto* mr = new (std::nothrow) Mr{};
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  // TO base: the iova the consumer chose (ibv_reg_mr_iova), or 0 when zero-based.
  std::uint64_t base = (access & IBV_ACCESS_ZERO_BASED) ? 0 : hca_va;
  std::uint32_t stag;
  {
    std::lock_guard lock(ctx->mu);
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

namespace {

// rereg_mr under Context::mu.
int rereg_locked(Context* ctx, Mr* mr, int flags, ibv_pd* new_pd, void* new_addr, size_t new_len,
                 int new_access, std::uint32_t pd_id) {
  verbs_mr* vmr = &mr->vmr;
  ibv_mr& m = vmr->ibv_mr;
  std::lock_guard lock(ctx->mu);
  std::optional<iwarp::MemoryRegion> old = ctx->mem.lookup(m.lkey);
  if (!old) return IBV_REREG_MR_ERR_INPUT;
  if (ctx->mem.has_windows(m.lkey)) {
    errno = EBUSY; // a bound window exposes the old translation
    return IBV_REREG_MR_ERR_INPUT;
  }
  std::uint64_t base =
      (new_access & IBV_ACCESS_ZERO_BASED)
          ? 0
          : ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? reinterpret_cast<std::uint64_t>(new_addr)
                                                       : old->base);
  // A new translation gets a new key, so that STags handed out before cannot reach the new
  // memory; a new access or PD keeps the key, as rxe and mlx5 do (rdma-core's pyverbs rereg
  // tests go on using the rkey they exchanged before).
  const bool rekey = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  auto stag = ctx->mem.modify(m.lkey, pd_id, static_cast<std::byte*>(new_addr), base, new_len,
                              to_iwarp_access(new_access), rekey);
  if (!stag) return IBV_REREG_MR_ERR_INPUT;
  if (new_pd != m.pd) {
    --to_pd(m.pd)->users;
    ++to_pd(new_pd)->users;
  }
  m.pd = new_pd;
  m.addr = new_addr;
  m.length = new_len;
  m.lkey = m.rkey = m.handle = *stag;
  vmr->access = new_access;
  mr->pd_id = pd_id;
  return 0;
}

} // namespace

int rereg_mr(verbs_mr* vmr, int flags, ibv_pd* ibpd, void* addr, size_t length,
             int access) noexcept {
  if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) return IBV_REREG_MR_ERR_INPUT;
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
    if (int err = check_access(access)) {
      errno = err;
      return IBV_REREG_MR_ERR_INPUT;
    }
  }
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || length == 0))
    return IBV_REREG_MR_ERR_INPUT;
  auto* mr = to_mr(vmr);
  ibv_mr& m = vmr->ibv_mr;
  Context* ctx = to_ctx(m.context);
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? ibpd : m.pd;
  if (!new_pd || new_pd->context != m.context) return IBV_REREG_MR_ERR_INPUT;
  void* new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : m.addr;
  size_t new_len = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : m.length;
  int new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : vmr->access;
  std::uint32_t pd_id = to_pd(new_pd)->id;
  const int ret = rereg_locked(ctx, mr, flags, new_pd, new_addr, new_len, new_access, pd_id);
  // Outside Context::mu: a same-host peer's copy through the old translation ends first.
  ctx->same_host.settle();
  return ret;
}

int dereg_mr(verbs_mr* vmr) noexcept {
  auto* mr = to_mr(vmr);
  Context* ctx = to_ctx(vmr->ibv_mr.context);
  {
    std::lock_guard lock(ctx->mu);
    if (ctx->mem.has_windows(vmr->ibv_mr.lkey)) return EBUSY; // a bound window exposes it
    if (!ctx->mem.remove(vmr->ibv_mr.lkey)) return EINVAL;
    --ctx->mrs;
  }
  // Outside Context::mu and the table's lock (mlx5's ODP deregistration: erase under the lock,
  // synchronise outside it): a same-host peer's copy into the region ends before it may go.
  ctx->same_host.settle();
  --to_pd(vmr->ibv_mr.pd)->users;
  delete mr;
  return 0;
}

} // namespace uiwarp
