// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The same-host path of a QP: when both ends are uiwarp processes of one user in one pid
// namespace of one kernel, an RDMA Write is copied from its source straight into the target's
// registered memory (process_vm_writev) and an RDMA Read straight out of it (process_vm_readv),
// instead of crossing TCP, and nobody at the target wakes up for it. The MPA exchange
// negotiated it (kMpaFlagSameHost: the responder's Reply offers its process and table); here:
//
//   responder, rdma_accept: opens a slot in this process's table for the connection and makes
//     the offer (same_host_offer; the shim puts it into the Reply).
//   initiator, attach: checks the offer names this host, user and pid namespace; takes the
//     responder's table (PeerRegion: pidfd_getfd, a sealed memfd, the offer's nonce); opens a
//     slot in its own table; writes its answer into its slot of the responder's table, and
//     last the probe word there with process_vm_writev, the way the data will be copied.
//   responder, at its first Write or Read: takes the answer, attaches back, probes back.
//
// Ordering (RFC 5040 §5.5, §6.8): a copy is only made when the QP's send queue is empty and
// the target has processed every octet this end sent over TCP (the slot's consumed word against
// tx_framed()). So a Write copied here follows every earlier message at the target, and a Send
// posted after it is queued after the copy ended. Anything else, and whatever the target's
// table refuses (an invalid STag, rights, bounds), goes over TCP, which then produces the
// exact Terminate and completion the TCP path always does.
#include "provider.hpp"
#include "same_host_gate.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/log.hpp"
#include "uiwarp/provider_api.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <sys/uio.h>
#include <unistd.h>

namespace uiwarp {

namespace {

using samehost::PeerRegion;

// One copy (a system call, or loads and stores into a shared mapping) moves at most this much,
// each under a pin of its own: a deregistration at the target waits for one piece, not for a
// whole large Write or Read (RFC 5041 §5.2 spirit: bounded segments). The QP's lock is held
// for the whole WR.
constexpr std::uint64_t kMaxCopy = 1 << 20;

bool enabled() { return Env::get().same_host_enabled(); }

void report_path(const Qp* qp, const std::string& path) {
  if (const ShimOps* sh = shim(); sh && sh->qp_path) sh->qp_path(qp->vqp.qp.qp_num, path.c_str());
}

// A connection goes without the path: the reason reaches `uiwarp conn show`, not stderr (a
// fallback is normal: another host, Yama's ptrace_scope, seccomp).
void give_up(Qp* qp, const std::string& why) {
  Qp::SameHost& same_host = qp->same_host;
  same_host.state = Qp::SameHost::State::Off;
  same_host.maps.clear();
  same_host.peer.reset();
  report_path(qp, "tcp: " + why);
  log::debug("same-host", qp->endpoints() + ": TCP only: " + why);
}

std::string errno_text(const char* step, int e) {
  char buf[128];
  return std::string(step) + ": " + strerror_r(e, buf, sizeof buf);
}

// How long set-up waits for a peer's grant: its progress thread answers at once, unless the
// peer is stopped or gone (then TCP), or the machine so busy that the thread is not scheduled.
constexpr int kGrantWaitMs = 500;
// Requests within that time: the target closes one whose request it did not find within a few
// milliseconds (this thread preempted between its connect and its send), and refuses a wrong
// one the same way.
constexpr int kGrantAsks = 3;

// The peer's grant (grant.hpp), asked for and waited for here.
samehost::Result<PeerRegion> granted_peer(pid_t pid, int table_fd, samehost::Nonce nonce) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kGrantWaitMs);
  std::string closed;
  for (int ask = 0; ask < kGrantAsks; ++ask) {
    auto req = samehost::GrantRequest::start(pid, table_fd, nonce);
    if (!req && (req.errnum == EPIPE || req.errnum == ECONNRESET)) { // closed before the send
      closed = req.error;
      continue;
    }
    if (!req) return {std::nullopt, req.error, req.errnum};
    for (;;) {
      auto g = req.value->poll();
      if (g) return PeerRegion::attach_granted(pid, g.value->table_fd, g.value->mem_fd, nonce);
      if (g.errnum == ECONNRESET) {
        closed = g.error;
        break; // ask again
      }
      if (!g.error.empty()) return {std::nullopt, g.error, g.errnum};
      if (std::chrono::steady_clock::now() >= until)
        return {std::nullopt,
                "no grant from pid " + std::to_string(pid) + " within " +
                    std::to_string(kGrantWaitMs) + " ms",
                ETIMEDOUT};
      ::usleep(100);
    }
  }
  return {std::nullopt, closed + ", " + std::to_string(kGrantAsks) + " times", ECONNRESET};
}

// Reaches the peer's table at `slot` and proves the copy works with the probe: the ptrace way
// where the kernel allows it (process_vm_* for large copies, else /proc/PID/mem alone), the
// peer's grant where it does not (Yama's ptrace_scope, seccomp, a target that is not
// dumpable). "" or why not.
std::string attach_peer(Qp* qp, pid_t pid, int table_fd, samehost::Nonce nonce,
                        std::uint32_t slot) {
  auto r = PeerRegion::attach(pid, table_fd, nonce);
  if (!r && (r.errnum == EPERM || r.errnum == EACCES || r.errnum == ENOSYS)) {
    auto g = granted_peer(pid, table_fd, nonce);
    if (!g) return r.error + "; " + g.error;
    r = std::move(g);
  }
  if (!r) return r.error;
  if (slot >= r.value->reader().layout().slots) return "the peer's slot is out of range";
  Qp::SameHost& same_host = qp->same_host;
  same_host.peer.emplace(std::move(*r.value));
  same_host.outbound_slot = slot;
  return {};
}

std::string probe_peer(Qp* qp) {
  Qp::SameHost& same_host = qp->same_host;
  same_host.owner = same_host.peer->reader().owner(same_host.outbound_slot);
  same_host.forks = samehost::fork_generation();
  const std::uint64_t word = qp->vqp.qp.qp_num | 1ull << 32;
  int e = same_host.peer->probe(same_host.outbound_slot, word);
  if (e == -EPERM || e == -ENOSYS) { // process_vm_* refused (seccomp): /proc/PID/mem alone
    same_host.peer->use_proc_mem();
    e = same_host.peer->probe(same_host.outbound_slot, word);
  }
  if (e < 0)
    return errno_text(same_host.peer->reach() == PeerRegion::Reach::ProcessVm ? "process_vm_writev"
                                                                              : "/proc/pid/mem",
                      -e);
  return {};
}

// This process's grants are answered by its progress thread (started here if it is not yet):
// a peer asks for one while it sets up, before either end has sent anything.
void serve_grants(Context* c) {
  if (c->start_progress() == 0)
    if (Progress* p = c->progress()) p->watch_grants(c->same_host);
}

} // namespace

// The responder: the initiator's answer is in our slot once its probe word is set.
void Qp::same_host_finish() {
  Qp* qp = this;
  Context* ctx = qp->ctx();
  const samehost::SlotAnswer a = ctx->same_host.answer(same_host.inbound_slot);
  if (a.probe == 0) {
    // It writes the answer before it sends anything: data without one means it declined.
    if (qp->engine->rx_ended() > 0) give_up(qp, "the peer did not take the same-host path");
    return;
  }
  std::string why = attach_peer(qp, static_cast<pid_t>(a.pid), static_cast<int>(a.table_fd),
                                a.nonce, static_cast<std::uint32_t>(a.slot));
  if (why.empty()) why = probe_peer(qp);
  if (!why.empty()) return give_up(qp, why);
  ctx->same_host.watch(same_host.inbound_slot, static_cast<pid_t>(a.pid));
  same_host.outbound = same_host.peer->ring(same_host.outbound_slot);
  same_host.peer_on = true; // the initiator went On before it sent anything
  same_host.state = Qp::SameHost::State::On;
  same_host.reach.store(static_cast<std::uint8_t>(same_host.peer->reach()),
                        std::memory_order_relaxed);
  report_same_host_path(qp);
}

namespace {

// Where a Write's octets come from or a Read's go, as iovecs in this process: false if an
// SGE does not resolve (TCP then reports the local error exactly).
bool local_iov(Qp* qp, const iwarp::SendWr& w, bool sink, iovec* iov, std::size_t& n,
               std::uint64_t& total) {
  n = 0;
  total = 0;
  if (!w.inline_data.empty()) {
    if (sink) return false;
    iov[n++] = {const_cast<std::byte*>(w.inline_data.data()), w.inline_data.size()};
    total = w.inline_data.size();
    return true;
  }
  const std::uint32_t need = sink ? iwarp::access::kLocalWrite : 0;
  for (const iwarp::Sge& s : w.sgl) {
    if (s.length == 0) continue;
    const auto r = qp->ctx()->mem.resolve(s.lkey, qp->pd_id, qp->vqp.qp.qp_num, s.addr, s.length,
                                          need, /*local=*/true);
    if (r.error) return false;
    iov[n++] = {r.host, s.length};
    total += s.length;
  }
  return true;
}

// This process's address of a pinned range that lies in memory both processes map
// (samehost/mapping.hpp), or nullptr: copy with the system call. The target must still run
// the program that offered, as for a copy by pid: a mapping outlives it.
std::byte* shared_at(Qp* qp, const samehost::Pin& pin) {
  Qp::SameHost& same_host = qp->same_host;
  if (pin.backing.kind == samehost::BackingKind::None || !same_host.peer->alive_lately())
    return nullptr;
  std::byte* at = same_host.maps.at(same_host.peer->pid(), pin.backing, pin.length);
  const auto told = static_cast<std::uint8_t>(1u << static_cast<unsigned>(pin.backing.kind));
  if (at && !(same_host.maps_told & told)) {
    same_host.maps_told |= told;
    report_same_host_path(qp);
  }
  return at;
}

// How a copy of a whole Write or Read went.
enum class Copy : std::uint8_t {
  Done,
  Refused, // a pin was refused (pieces before it may have gone): TCP carries the whole WR
  Ended,   // the target ended the connection and reused our slot
  Fault,   // process_vm_* failed: the path itself is broken
};

// Copies `total` octets between `iov` and the target's range at TO `to` of `stag`, kMaxCopy per
// call, each piece pinned on its own: a deregistration at the target waits for one piece, not
// a whole message. A Write or Read places by address, so TCP may carry a WR again after some of
// its pieces were copied: what it places again is the same octets, at the same place.
Copy copy_pieces(Qp* qp, bool write, const iwarp::SendWr& w, const iovec* iov,
                 std::uint64_t total) {
  Qp::SameHost& same_host = qp->same_host;
  samehost::Reader& reader = same_host.peer->reader();
  const std::uint32_t need = write ? iwarp::access::kRemoteWrite : iwarp::access::kRemoteRead;
  iovec part[iwarp::kMaxSge + 1];
  std::size_t i = 0, off = 0; // the next octet: iov[i], `off` into it
  for (std::uint64_t done = 0; done < total;) {
    const std::uint64_t want = std::min(total - done, kMaxCopy);
    const samehost::PinResult pin =
        reader.pin(same_host.outbound_slot, w.remote_stag, same_host.owner.pd,
                   same_host.owner.stream, w.remote_addr + done, want, need);
    // Refused (an invalid STag, rights, bounds, a slot closed by the target): the target
    // answers the WR over TCP with the exact Terminate.
    if (!pin) return Copy::Refused;
    if (reader.epoch(same_host.outbound_slot) != same_host.owner.epoch) {
      reader.unpin(same_host.outbound_slot);
      return Copy::Ended;
    }
    std::size_t k = 0;
    for (std::uint64_t got = 0; got < want; ++k) {
      const std::size_t take = std::min<std::uint64_t>(iov[i].iov_len - off, want - got);
      part[k] = {static_cast<std::byte*>(iov[i].iov_base) + off, take};
      got += take;
      off += take;
      if (off == iov[i].iov_len) {
        ++i;
        off = 0;
      }
    }
    ssize_t got = 0;
    if (std::byte* at = shared_at(qp, pin.pin)) {
      samehost::place(write, at, {part, k}, want);
      got = static_cast<ssize_t>(want);
    } else {
      got = write ? same_host.peer->write(same_host.outbound_slot, pin.pin, {part, k})
                  : same_host.peer->read(same_host.outbound_slot, pin.pin, {part, k});
    }
    reader.unpin(same_host.outbound_slot);
    if (got != static_cast<ssize_t>(want)) return Copy::Fault;
    done += want;
  }
  return Copy::Done;
}

} // namespace

void Qp::same_host_attach(const iwarp::ConnParams& p) {
  same_host.maps.clear();
  same_host.maps_told = 0;
  same_host.peer.reset();
  same_host.state = SameHost::State::Off;
  same_host.rtr_octets = 0;
  same_host.outbound = {}; // inbound is the offer's, made before (same_host_offer_locked)
  same_host.peer_on = same_host.tx_ring = same_host.tx_closed = same_host.rx_ring =
      same_host.rx_eof = same_host.rx_reset = same_host.ring_back = false;
  same_host.rx_tcp = 0;
  if (!p.same_host) {
    if (same_host.inbound_open)
      same_host_end(nullptr); // offered, and the initiator did not ask after all
    return give_up(this, iwarp::same_host_refusal(p));
  }
  if (p.markers_tx || p.markers_rx) {
    // Stream offsets are compared as counts of FPDU octets; markers make the two ends count
    // them at different places (RFC 5044 §5.1), and uiwarp peers never need markers.
    if (same_host.inbound_open) same_host_end(nullptr);
    return give_up(this, "markers are on");
  }
  if (!p.initiator) {
    if (!same_host.inbound_open) return give_up(this, "no offer was made");
    same_host.state = SameHost::State::Waiting;
    return;
  }
  if (!p.peer_same_host) return give_up(this, "no offer came");
  const iwarp::SameHostOffer& o = *p.peer_same_host;
  if (!enabled()) return give_up(this, "UIWARP_SAME_HOST=off");
  if (std::string why = samehost::mismatch(o, samehost::identity()); !why.empty())
    return give_up(this, why);
  std::string why = attach_peer(this, static_cast<pid_t>(o.pid), static_cast<int>(o.table_fd),
                                samehost::to_nonce(o.nonce), o.slot);
  if (!why.empty()) return give_up(this, why);
  Context* c = ctx();
  auto opened = c->same_host.open(pd_id, vqp.qp.qp_num);
  if (!opened) return give_up(this, opened.error);
  same_host.inbound_open = true;
  same_host.inbound_slot = opened.value->slot;
  same_host.inbound = opened.value->inbound;
  same_host.outbound = same_host.peer->ring(same_host.outbound_slot);
  serve_grants(c); // the responder asks for ours as soon as it sees our answer
  // The answer first, the probe last: the responder takes the answer once the probe is set.
  same_host.peer->reader().write_answer(same_host.outbound_slot,
                                        {static_cast<std::uint64_t>(::getpid()),
                                         static_cast<std::uint64_t>(opened.value->table_fd),
                                         opened.value->slot, opened.value->nonce, 0});
  if (why = probe_peer(this); !why.empty()) {
    same_host_end(nullptr);
    return give_up(this, why);
  }
  c->same_host.watch(same_host.inbound_slot, static_cast<pid_t>(o.pid));
  same_host.state = SameHost::State::On;
  same_host.reach.store(static_cast<std::uint8_t>(same_host.peer->reach()),
                        std::memory_order_relaxed);
  report_same_host_path(this);
}

void Qp::same_host_started() {
  // Only the RTR can have gone (with IB-style connect, Sends posted before the connection
  // was up go first, and then this does not apply): a copy need not wait until the target has
  // processed the RTR, as it places nothing. Else a
  // program that posts Reads at once, ORD deep and never letting the queue drain (ib_read_bw),
  // would start them behind the RTR over TCP and keep them there.
  if (same_host.state != SameHost::State::Off && engine && !engine->tx_pending() && tx.piped == 0 &&
      engine->sq_outstanding() == 0)
    same_host.rtr_octets = engine->tx_framed();
}

bool Qp::same_host_post(const iwarp::SendWr& w) {
  const bool write = w.opcode == iwarp::WrOpcode::RdmaWrite;
  if (!write && w.opcode != iwarp::WrOpcode::RdmaRead) return false;
  if (same_host.state == SameHost::State::Waiting && engine) same_host_finish();
  if (same_host.state != SameHost::State::On || !engine || state != IBV_QPS_RTS ||
      engine->state() != iwarp::QpState::Rts || conn.peer_closed)
    return false;
  using drive::TcpReason;
  const auto tcp = [this](TcpReason r) {
    policy.on_same_host_tcp(static_cast<std::uint8_t>(r));
    return false;
  };
  drive::GateFacts f;
  f.forked = same_host.forks != samehost::fork_generation();
  f.sq_outstanding = static_cast<std::uint32_t>(engine->sq_outstanding());
  f.completions_ready = static_cast<std::uint32_t>(engine->completions_ready());
  f.tx_pending = engine->tx_pending();
  f.piped = tx.piped;
  f.framed = engine->tx_framed();
  f.rtr_octets = same_host.rtr_octets;
  iovec iov[iwarp::kMaxSge + 1];
  std::size_t n = 0;
  std::uint64_t total = 0;
  if (drive::queue_idle(f)) {
    // Only now the peer's word and the WR's memory: a busy QP's posts go to TCP without them.
    f.consumed = same_host.peer->reader().consumed(same_host.outbound_slot);
    // An SGE that does not resolve: TCP reports the local error exactly (not the path's).
    if (!local_iov(this, w, !write, iov, n, total) || total == 0) return false;
    f.octets = total;
    // The stream moves to the ring here if it has not yet (it can: the queue is idle), so
    // that a burst's first Writes already go there.
    f.ring_write = write && ring_tx_ready();
    f.now = mono_ns();
    f.send_cq_polled = send_cq()->policy.polled_at();
  }
  const drive::Gate g = drive::decide(f, policy);
  if (!g.copy) {
    // A child of fork() posting on its parent's QP: the pins and the peer's watch are the
    // parent's, so the child never copies (its copy of the mapping goes, nothing else).
    if (g.why == TcpReason::Fork) give_up(this, "posted in a child of the process that connected");
    return tcp(g.why);
  }
  switch (copy_pieces(this, write, w, iov, total)) {
  case Copy::Done: break;
  case Copy::Refused: return tcp(TcpReason::Refused);
  case Copy::Ended:
    // The target closed our slot and gave it to another connection: ours is over there, and
    // TCP says so.
    give_up(this, "the peer ended the connection");
    return tcp(TcpReason::Stopped);
  case Copy::Fault:
    // The target went, or memory was unmapped under the pin: this WR and every later one take
    // TCP, which either carries them or reports the connection's end.
    give_up(this, std::string(write ? "the copy into" : "the copy out of") +
                      " the peer failed: TCP from here on");
    return tcp(TcpReason::Fault);
  }
  policy.on_same_host_copied();
  policy.on_copied(f.now, mono_ns());
  if (w.signaled) {
    const auto c = iwarp::Completion::make(w.wr_id, iwarp::WcStatus::Success,
                                           iwarp::completion_opcode(w.opcode),
                                           static_cast<std::uint32_t>(total), false);
    send_cq()->push(to_ibv_wc(c, vqp.qp.qp_num), false);
  }
  return true;
}

const char* reach_name(samehost::PeerRegion::Reach r) {
  switch (r) {
  case samehost::PeerRegion::Reach::ProcessVm: return "same-host (process_vm)";
  case samehost::PeerRegion::Reach::ProcMem: return "same-host (/proc/pid/mem)";
  case samehost::PeerRegion::Reach::Granted: return "same-host (granted)";
  }
  return "same-host";
}

void report_same_host_path(const Qp* qp) {
  const Qp::SameHost& same_host = qp->same_host;
  if (!same_host.peer) return;
  std::string path = reach_name(same_host.peer->reach());
  if (same_host.tx_ring) path += ", stream in shared memory";
  if (const std::string k = same_host.maps.kinds(); !k.empty())
    path += ", copies into a shared " + k;
  report_path(qp, path);
}

void Qp::same_host_end(const char* why) {
  if (same_host.inbound_open) {
    // Revokes the peer's pins through our slot and waits for one in progress to end: after
    // this, no copy touches memory this QP's connection exposed.
    ctx()->same_host.close(same_host.inbound_slot);
    same_host.inbound_open = false;
  }
  // Neither ring is ours to touch now (ours goes back to the kernel once drained); a stream
  // that went through them ends with the socket (qp_ring.cpp).
  same_host.inbound = {};
  same_host.outbound = {};
  same_host.maps.clear();
  same_host.peer.reset();
  // What the connection had stays its path in `uiwarp conn show --closed`.
  if (same_host.state != SameHost::State::Off && why)
    log::debug("same-host", endpoints() + ": path closed: " + why);
  same_host.state = SameHost::State::Off;
}

void same_host_wait_report(std::uint32_t qp_num, const char* text) noexcept {
  try {
    // A verb stalled for over a second: the program's user learns why, unasked.
    if (text) log::error("same-host", text);
    const ShimOps* s = shim();
    if (!s || !s->qp_path || qp_num == 0) return;
    Qp* qp = find_qp(qp_num); // its lock may be this thread's (Qp::reap): read the atomic only
    if (!qp) return;
    const std::string path = reach_name(
        static_cast<PeerRegion::Reach>(qp->same_host.reach.load(std::memory_order_relaxed)));
    qp->unref();
    s->qp_path(qp_num, text ? (path + ", " + text).c_str() : path.c_str());
  } catch (...) { // std::bad_alloc: the report is only a report
  }
}

bool same_host_offer_locked(Qp* qp, iwarp::SameHostOffer* out) {
  if (!out || !enabled() || qp->engine) return false;
  const samehost::Identity self = samehost::identity();
  if (!self.error.empty()) return false;
  if (qp->same_host.inbound_open) qp->same_host_end(nullptr); // an earlier offer for this QP
  auto opened = qp->ctx()->same_host.open(qp->pd_id, qp->vqp.qp.qp_num);
  if (!opened) {
    log::debug("same-host", "no offer: " + opened.error);
    return false;
  }
  qp->same_host.inbound_open = true;
  qp->same_host.inbound_slot = opened.value->slot;
  qp->same_host.inbound = opened.value->inbound;
  serve_grants(qp->ctx()); // the initiator asks for it as it attaches
  *out = iwarp::SameHostOffer{};
  out->boot_id = self.boot_id;
  out->pid_ns = self.pid_ns;
  out->uid = self.uid;
  out->pid = self.pid;
  out->table_fd = static_cast<std::uint32_t>(opened.value->table_fd);
  out->slot = opened.value->slot;
  out->nonce = samehost::to_bytes(opened.value->nonce);
  return true;
}

// ProviderOps::same_host_offer: rdma_accept of a connection whose Request asked for the path.
bool same_host_offer(std::uint32_t qp_num, iwarp::SameHostOffer* out) noexcept {
  Qp* qp = find_qp(qp_num);
  if (!qp) return false;
  bool ok = false;
  {
    std::lock_guard lock(qp->mu);
    ok = same_host_offer_locked(qp, out);
  }
  qp->unref();
  return ok;
}

} // namespace uiwarp
