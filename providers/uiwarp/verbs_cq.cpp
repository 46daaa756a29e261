// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Completion queues: a ring of ibv_wc per CQ, filled from the QP engines; the
// classic poll_cq and the extended (ibv_cq_ex) iterator; notification through
// completion channels, whose fds the shim creates and the CQ writes to.
#include "provider.hpp"
#include "uiwarp/log.hpp"

#include <cerrno>
#include <mutex>
#include <new>
#include <sched.h>
#include <shared_mutex>
#include <string>
#include <unistd.h>

namespace uiwarp {

namespace {

constexpr std::uint64_t kSupportedWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS;

bool pop(Cq* cq, ibv_wc* out) {
  if (cq->count == 0) return false;
  *out = cq->ring[cq->head];
  cq->head = (cq->head + 1) % cq->ring.size();
  --cq->count;
  return true;
}

// ---- extended poll: start_poll takes the poller lock, end_poll releases it ----

void load_current(Cq* cq) {
  cq->vcq.cq_ex.wr_id = cq->current.wr_id;
  cq->vcq.cq_ex.status = cq->current.status;
}
int start_poll(ibv_cq_ex* cqx, ibv_poll_cq_attr* attr) noexcept {
  if (attr && attr->comp_mask) return EINVAL;
  Cq* cq = to_cq(cqx);
  if (!cq->ready()) return ENOENT;
  cq->unpark();
  cq->poll_mu.lock();
  bool got;
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    got = pop(cq, &cq->current);
  }
  if (!got) {
    cq->poll_mu.unlock();
    return ENOENT; // libibverbs: no end_poll after ENOENT from start_poll
  }
  load_current(cq);
  return 0;
}
int next_poll(ibv_cq_ex* cqx) noexcept {
  Cq* cq = to_cq(cqx);
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    if (!pop(cq, &cq->current)) return ENOENT;
  }
  load_current(cq);
  return 0;
}
void end_poll(ibv_cq_ex* cqx) noexcept { to_cq(cqx)->poll_mu.unlock(); }
ibv_wc_opcode read_opcode(ibv_cq_ex* c) noexcept { return to_cq(c)->current.opcode; }
uint32_t read_vendor_err(ibv_cq_ex* c) noexcept { return to_cq(c)->current.vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* c) noexcept { return to_cq(c)->current.byte_len; }
__be32 read_imm_data(ibv_cq_ex* c) noexcept { return to_cq(c)->current.imm_data; }
uint32_t read_qp_num(ibv_cq_ex* c) noexcept { return to_cq(c)->current.qp_num; }
uint32_t read_src_qp(ibv_cq_ex* c) noexcept { return to_cq(c)->current.src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* c) noexcept { return to_cq(c)->current.wc_flags; }
uint32_t read_slid(ibv_cq_ex* c) noexcept { return to_cq(c)->current.slid; }
uint8_t read_sl(ibv_cq_ex* c) noexcept { return to_cq(c)->current.sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* c) noexcept { return to_cq(c)->current.dlid_path_bits; }

Cq* new_cq(ibv_context* ibctx, int cqe, ibv_comp_channel* channel, int comp_vector) {
  if (cqe <= 0 || static_cast<std::uint32_t>(cqe) > Limits::kMaxCqe || comp_vector < 0 ||
      comp_vector >= ibctx->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = to_ctx(ibctx);
  if (!ctx->count(&Context::cqs, Limits::kMaxCq)) return nullptr;
  Cq* cq = new (std::nothrow) Cq;
  if (cq) {
    try {
      cq->ring.resize(static_cast<std::size_t>(cqe));
    } catch (const std::bad_alloc&) {
      delete cq;
      cq = nullptr;
    }
  }
  if (!cq) {
    ctx->uncount(&Context::cqs);
    errno = ENOMEM;
    return nullptr;
  }
  // libibverbs runs verbs_init_cq() itself once create_cq/create_cq_ex return
  // (ibv_create_cq, __lib_ibv_create_cq_ex); calling it here as well took two
  // references on the completion channel, so ibv_destroy_comp_channel() stayed
  // EBUSY after the CQ was gone. Only the fields the CQ needs are set here.
  cq->vcq.cq.context = ibctx;
  cq->vcq.cq.channel = channel;
  cq->vcq.cq.cqe = cqe;
  return cq;
}

} // namespace

void Cq::push(const ibv_wc& wc, bool solicited) {
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (count == ring.size()) {
      // CQ overrun: the completion is lost, which verbs reports as IBV_EVENT_CQ_ERR.
      if (!overflowed)
        ctx()->post_async_event(reinterpret_cast<std::uintptr_t>(&vcq.cq), IBV_EVENT_CQ_ERR);
      overflowed = true;
      return;
    }
    ring[(head + count) % ring.size()] = wc;
    ++count;
    if (armed.load(std::memory_order_relaxed) &&
        (!solicited_only || solicited || wc.status != IBV_WC_SUCCESS)) {
      armed = false;
      notify = true;
    }
  }
  ibv_comp_channel* ch = vcq.cq.channel;
  Context* c = ctx();
  if (notify && ch && c->comp_channel_wfd) {
    const int wfd = c->comp_channel_wfd(ch->fd);
    // ib_uverbs_comp_event_desc: the CQ handle libibverbs turns back into the ibv_cq*.
    const std::uint64_t handle = reinterpret_cast<std::uintptr_t>(&vcq.cq);
    ssize_t n = -1;
    if (wfd >= 0) {
      do
        n = ::write(wfd, &handle, sizeof handle);
      while (n < 0 && errno == EINTR);
    }
    // A thread asleep on the channel would wait for this event forever: say so, once a CQ.
    if (n != static_cast<ssize_t>(sizeof handle) && !event_lost.exchange(true)) {
      const int err = wfd < 0 ? EBADF : errno;
      log::error("cq", std::string("a completion event of an armed CQ could not be delivered (") +
                           (wfd < 0 ? "its completion channel is not known to the shim"
                                    : "the channel's write failed") +
                           ", errno " + std::to_string(err) + "): its waiter is not woken");
    }
  }
}

ibv_cq* create_cq(ibv_context* ibctx, int cqe, ibv_comp_channel* channel,
                  int comp_vector) noexcept {
  Cq* cq = new_cq(ibctx, cqe, channel, comp_vector);
  return cq ? &cq->vcq.cq : nullptr;
}

ibv_cq_ex* create_cq_ex(ibv_context* ibctx, ibv_cq_init_attr_ex* attr) noexcept {
  if (!attr || attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS) ||
      (attr->wc_flags & ~kSupportedWcFlags) ||
      (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS && attr->flags)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Cq* cq = new_cq(ibctx, static_cast<int>(attr->cqe), attr->channel,
                  static_cast<int>(attr->comp_vector));
  if (!cq) return nullptr;
  cq->extended = true;
  cq->wc_flags_ex = attr->wc_flags;
  ibv_cq_ex& x = cq->vcq.cq_ex;
  x.cq_context = attr->cq_context;
  x.start_poll = start_poll;
  x.next_poll = next_poll;
  x.end_poll = end_poll;
  x.read_opcode = read_opcode;
  x.read_vendor_err = read_vendor_err;
  x.read_byte_len = read_byte_len;
  x.read_imm_data = read_imm_data;
  x.read_qp_num = read_qp_num;
  x.read_src_qp = read_src_qp;
  x.read_wc_flags = read_wc_flags;
  x.read_slid = read_slid;
  x.read_sl = read_sl;
  x.read_dlid_path_bits = read_dlid_path_bits;
  return &x;
}

int destroy_cq(ibv_cq* ibcq) noexcept {
  Cq* cq = to_cq(ibcq);
  if (cq->users.load() > 0) return EBUSY;
  Context* ctx = cq->ctx();
  drive::Counters c;
  c.yields = cq->policy.yields();
  ctx->add_drive_counters(c);
  delete cq;
  ctx->uncount(&Context::cqs);
  return 0;
}

int resize_cq(ibv_cq* ibcq, int cqe) noexcept {
  Cq* cq = to_cq(ibcq);
  std::lock_guard<std::mutex> lock(cq->mu);
  if (cqe <= 0 || static_cast<std::uint32_t>(cqe) > Limits::kMaxCqe ||
      static_cast<std::size_t>(cqe) < cq->count)
    return EINVAL;
  std::vector<ibv_wc> ring;
  try {
    ring.resize(static_cast<std::size_t>(cqe));
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  for (std::size_t i = 0; i < cq->count; ++i)
    ring[i] = cq->ring[(cq->head + i) % cq->ring.size()];
  cq->ring = std::move(ring);
  cq->head = 0;
  ibcq->cqe = cqe;
  return 0;
}

int poll_cq(ibv_cq* ibcq, int num, ibv_wc* wc) noexcept {
  if (num < 0) return -EINVAL;
  Cq* cq = to_cq(ibcq);
  if (num == 0) return 0;
  if (!cq->ready()) return 0;
  int n = 0;
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    // A poll that returned completions stops before the first flushed one: a program that
    // counts its completions and stops (ibv_rc_pingpong: two at a time, any error fatal) sees
    // all its work done before the flush of what it posted beyond it, when the peer sent its
    // last message and closed. With the kernel's siw the flush comes later than the data too
    // (the FIN's state change, after the receive path placed what came before it).
    while (n < num && cq->count &&
           !(n > 0 && wc[n - 1].status != IBV_WC_WR_FLUSH_ERR &&
             cq->ring[cq->head].status == IBV_WC_WR_FLUSH_ERR))
      pop(cq, &wc[n++]);
  }
  cq->unpark();
  return n;
}

int req_notify_cq(ibv_cq* ibcq, int solicited_only) noexcept {
  // Arms for the next completion added (IB semantics: not for those already queued).
  Cq* cq = to_cq(ibcq);
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    cq->armed = true;
    cq->solicited_only = solicited_only != 0;
  }
  // Whoever arms a CQ is about to sleep: what its posts held back for a poll goes now, and the
  // progress thread takes back its parked QPs.
  // A QP reading a stream ring withdraws its last poll's look, so that its peer rings (a QP
  // another thread holds now is looked at by the progress thread within kLookNs, as before).
  std::shared_lock lock(cq->qps_mu);
  bool parked = false;
  const drive::Ns now = mono_ns();
  Progress* p = cq->ctx()->progress();
  for (Qp* qp : cq->qps) {
    const bool ring = qp->same_host.rx_ring.load(std::memory_order_relaxed);
    if ((qp->policy.deferred() || ring) && qp->mu.try_lock()) {
      // Octets written before the withdrawal are read now: their completions signal the channel.
      qp->drive(ring && qp->ring_unlook() ? Driver::Release : Driver::Arm, now);
      qp->mu.unlock();
    }
    parked = parked || qp->policy.parked();
  }
  if (p && parked) p->kick();
  return 0;
}

// Drives one QP for a poll at `now`, unless its socket was found quiet a moment ago or
// another thread holds it; `empty` says the poll found nothing for the program; `adopted`:
// it is not this CQ's QP (adopt).
void Cq::drive_one(Qp* qp, drive::Ns now, Progress* p, bool empty, bool adopted) {
  // A quiet socket tried a moment ago is left alone without taking the lock: a poller that
  // took it on every poll would starve the progress thread of it.
  if (qp->policy.poll_skips(now)) {
    qp->policy.on_skipped_poll(now);
    return;
  }
  if (!qp->mu.try_lock()) return; // another thread is moving its bytes right now
  if (qp->connected()) {
    if (adopted) qp->policy.on_adopted();
    qp->drive(Driver::Poll, now);
    if (p) p->polled(qp, now, empty);
  }
  qp->mu.unlock();
}

bool Cq::ready() {
  // What is queued is returned at once; only an empty ring costs system calls.
  if (count.load(std::memory_order_acquire) > 0) return true;
  const drive::Ns now = drive();
  if (count.load(std::memory_order_acquire) > 0) return true;
  if (policy.on_idle_poll(now, ctx()->reads_ns.load(std::memory_order_relaxed))) ::sched_yield();
  return false;
}

drive::Ns Cq::drive() {
  const drive::Ns now = mono_ns();
  // An armed CQ has a thread about to sleep on its channel (it arms, then polls until empty,
  // then waits): the progress thread serves its QPs, and a poll that drove them too would
  // only contend with it for each message (rping ran at half speed).
  if (armed.load(std::memory_order_relaxed)) return now;
  policy.on_poll(now);
  Progress* p = ctx()->progress();
  std::size_t mine = 0;
  {
    std::shared_lock lock(qps_mu);
    mine = qps.size();
    for (Qp* qp : qps)
      drive_one(qp, now, p, count.load(std::memory_order_relaxed) == 0, false);
  }
  adopt(now, p, mine);
  return now;
}

// The Read Requests of QPs whose own CQs nobody polls are answered by a poller of the same
// context (drive::adopts).
void Cq::adopt(drive::Ns now, Progress* p, std::size_t mine) {
  Context* c = ctx();
  if (!drive::responders_recent(now, c->reads_ns.load(std::memory_order_relaxed))) return;
  std::shared_lock lock(c->qps_mu);
  if (c->all_qps.size() <= mine) return; // every QP is this CQ's
  for (Qp* qp : c->all_qps) {
    Cq* s = qp->send_cq();
    Cq* r = qp->recv_cq();
    if (s == this || r == this) continue; // its own poller drives it
    if (drive::adopts(now, qp->policy.reads_at(), s->policy.polled_at(), r->policy.polled_at(),
                      s->armed.load(std::memory_order_relaxed) ||
                          r->armed.load(std::memory_order_relaxed)))
      drive_one(qp, now, p, true, true);
  }
}

void Cq::unpark() {
  const drive::Ns now = mono_ns();
  policy.on_handed_out(now); // its poller is busy: no adoption, not idle
  if (parked.load(std::memory_order_relaxed) == 0) return;
  Progress* p = ctx()->progress();
  if (!p) return;
  std::shared_lock lock(qps_mu);
  for (Qp* qp : qps) {
    if (!qp->policy.parked()) continue;
    if (qp->mu.try_lock()) {
      p->set_parked(qp, false, now);
      qp->mu.unlock();
    } else {
      p->kick(); // its holder is busy with it; the timer takes it back
    }
  }
}

void cq_event(ibv_cq*) noexcept {}

int modify_cq(ibv_cq*, ibv_modify_cq_attr* attr) noexcept {
  // Moderation is a hardware interrupt knob; there is no interrupt to moderate.
  return attr && attr->attr_mask ? EOPNOTSUPP : EINVAL;
}

} // namespace uiwarp
