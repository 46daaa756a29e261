// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The data path's I/O edge: sockets of connected QPs, driven by one progress
// thread per context (epoll) and by posting threads, which transmit directly
// when the socket has room. libiwarp says where each received octet goes, so
// payload is read from the socket straight into registered memory; headers
// arrive through a small staging buffer to save system calls.
#include "provider.hpp"
#include "uiwarp/provider_api.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace uiwarp {

namespace {

// Spans at least this large are read straight into place; smaller ones (headers,
// pad, CRC, short payloads) come through the staging buffer.
constexpr std::size_t kDirectRead = 2048;
constexpr std::size_t kStaging = 4096;
// Work per QP per wake-up, so one busy connection does not starve the others.
constexpr std::size_t kRxBudget = 4 << 20;
constexpr int kMaxIov = 256;

using ShimEvent = void (*)(std::uint32_t, enum uiwarp_qp_event, const char*);

ShimEvent shim_event() {
  static ShimEvent fn = reinterpret_cast<ShimEvent>(::dlsym(RTLD_DEFAULT, "uiwarp_shim_qp_event"));
  return fn;
}

} // namespace

// ---- Qp I/O --------------------------------------------------------------------------

void Qp::push_tx() {
  if (!engine || fd < 0 || want_write) return;
  std::vector<iwarp::ConstBytes>& pieces = tx_pieces;
  iovec iov[kMaxIov];
  for (;;) {
    pieces.clear();
    engine->tx_gather(pieces, kMaxIov);
    if (pieces.empty()) break;
    for (std::size_t i = 0; i < pieces.size(); ++i)
      iov[i] = {const_cast<std::byte*>(pieces[i].data()), pieces[i].size()};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = pieces.size();
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        want_write = true;
        if (ctx()->progress) ctx()->progress->update(this);
      } else {
        engine->on_peer_closed(false);
        peer_closed = true;
      }
      break;
    }
    engine->tx_advance(static_cast<std::size_t>(n));
  }
}

void Qp::pull_rx() {
  if (!engine || fd < 0 || peer_closed) return;
  if (staging.empty()) staging.resize(kStaging);
  std::size_t budget = kRxBudget;
  bool drained = false;
  for (;;) {
    if (staged_pos < staged_end) {
      // feed() places the staged octets and CRCs them in runs, not per field.
      engine->rx_feed(iwarp::ConstBytes(staging).subspan(staged_pos, staged_end - staged_pos));
      staged_pos = staged_end;
      continue;
    }
    iwarp::MutBytes dst = engine->rx_next();
    // Staged octets are used up before the budget counts: epoll cannot see them.
    // After a short read the socket is empty; level-triggered epoll calls again,
    // so the extra recv() that would only say EAGAIN is skipped.
    if (budget == 0 || drained) break;
    // A large span is read straight into place; whatever follows it (CRC, the
    // next header) lands in the staging buffer in the same system call.
    bool direct = dst.size() >= kDirectRead;
    iovec iov[2];
    iov[0] = direct ? iovec{dst.data(), dst.size()} : iovec{staging.data(), staging.size()};
    iov[1] = {staging.data(), staging.size()};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = direct ? 2 : 1;
    ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) {
        engine->on_peer_closed(false); // RST or loss (RFC 5044 §8 code 1)
        peer_closed = true;
      }
      break;
    }
    if (n == 0) {
      engine->on_peer_closed(true);
      peer_closed = true;
      break;
    }
    auto got = static_cast<std::size_t>(n);
    budget -= std::min(budget, got);
    drained = got < iov[0].iov_len + (direct ? iov[1].iov_len : 0);
    std::size_t placed = direct ? std::min(got, dst.size()) : 0;
    if (placed) engine->rx_advance(placed);
    staged_pos = 0;
    staged_end = got - placed;
  }
}

void Qp::after_io() {
  if (!engine) return;
  reap();
  if (srq && srq->limit && srq->q->size() < srq->limit) {
    srq->limit = 0; // one event per arming (IB semantics)
    ctx()->post_async_event(reinterpret_cast<std::uintptr_t>(&srq->ibv),
                            IBV_EVENT_SRQ_LIMIT_REACHED);
  }
  iwarp::QpState s = engine->state();
  if (s == iwarp::QpState::Error || s == iwarp::QpState::Terminate) {
    if (state != IBV_QPS_ERR && state != IBV_QPS_RESET) {
      state = IBV_QPS_ERR;
      vqp.qp.state = IBV_QPS_ERR;
      if (!peer_closed || engine->error()->code != iwarp::term::mpa_tcp_closed)
        ctx()->post_async_event(reinterpret_cast<std::uintptr_t>(&vqp.qp), IBV_EVENT_QP_FATAL);
    }
  }
  if (engine->wants_disconnect() && !fin_sent && fd >= 0) {
    // Graceful close done or Terminate written: FIN (RFC 5040 §6.2.1).
    ::shutdown(fd, SHUT_WR);
    fin_sent = true;
  }
  if (!event_reported && (peer_closed || s == iwarp::QpState::Error) &&
      (s == iwarp::QpState::Error || s == iwarp::QpState::Closed)) {
    event_reported = true;
    bool graceful = peer_closed && engine->error() &&
                    engine->error()->code == iwarp::term::mpa_tcp_closed && engine->error()->remote;
    std::string why = engine->error() ? engine->error()->message : "connection closed";
    if (ShimEvent ev = shim_event())
      ev(vqp.qp.qp_num, graceful ? UIWARP_QP_DISCONNECTED : UIWARP_QP_ERROR, why.c_str());
  }
}

void Qp::detach() {
  if (fd >= 0) {
    if (Context* c = ctx(); c->progress) c->progress->remove(this);
    ::close(fd);
  }
  fd = -1;
  engine.reset();
  want_write = fin_sent = peer_closed = event_reported = false;
  staged_pos = staged_end = 0;
}

Qp::~Qp() { detach(); }

// ---- Progress ------------------------------------------------------------------------

Progress::Progress(Context* ctx) : ctx_(ctx) {
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  stopfd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epfd_ < 0 || stopfd_ < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0; // QPNs start at 0x100, so 0 is the stop fd
  ::epoll_ctl(epfd_, EPOLL_CTL_ADD, stopfd_, &ev);
  thread_ = std::thread([this] { run(); });
}

Progress::~Progress() {
  stop_ = true;
  if (stopfd_ >= 0) {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stopfd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
  if (epfd_ >= 0) ::close(epfd_);
  if (stopfd_ >= 0) ::close(stopfd_);
}

int Progress::add(Qp* qp) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = qp->vqp.qp.qp_num;
  return ::epoll_ctl(epfd_, EPOLL_CTL_ADD, qp->fd, &ev) ? errno : 0;
}

void Progress::remove(Qp* qp) { ::epoll_ctl(epfd_, EPOLL_CTL_DEL, qp->fd, nullptr); }

void Progress::update(Qp* qp) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  if (qp->want_write) ev.events |= EPOLLOUT;
  ev.data.u64 = qp->vqp.qp.qp_num;
  ::epoll_ctl(epfd_, EPOLL_CTL_MOD, qp->fd, &ev);
}

void Progress::run() {
  epoll_event evs[64];
  while (!stop_) {
    int n = ::epoll_wait(epfd_, evs, 64, -1);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == 0) continue; // stop
      std::lock_guard<CtxMutex> lock(ctx_->mu);
      Qp* qp = find_qp(static_cast<std::uint32_t>(evs[i].data.u64));
      if (!qp || qp->ctx() != ctx_ || qp->fd < 0) continue;
      if (evs[i].events & EPOLLOUT) {
        qp->want_write = false;
        update(qp);
      }
      qp->pull_rx();
      qp->push_tx();
      qp->after_io();
      if (qp->peer_closed) remove(qp); // nothing more will come; avoid EPOLLRDHUP spins
    }
  }
}

// ---- the CM's entry points (provider_api.h) ---------------------------------------------

namespace {

int attach(std::uint32_t qp_num, int fd, const uiwarp_conn_params* p) {
  Qp* qp = find_qp(qp_num);
  if (!qp) return ENOENT;
  Context* ctx = qp->ctx();
  std::lock_guard<CtxMutex> lock(ctx->mu);
  if (qp->engine || (qp->state != IBV_QPS_INIT && qp->state != IBV_QPS_RTR)) return EINVAL;
  if (!ctx->progress) {
    ctx->progress = std::make_unique<Progress>(ctx);
    if (!ctx->progress->ok()) {
      ctx->progress.reset();
      return ENOMEM;
    }
  }
  iwarp::QpConfig c;
  c.qp_id = qp_num;
  c.pd = qp->pd_id;
  c.version = static_cast<std::uint8_t>(p->version);
  c.crc = p->crc;
  c.markers_tx = p->markers_tx;
  c.markers_rx = p->markers_rx;
  c.ird = static_cast<std::uint16_t>(std::min<std::uint32_t>(p->ird, Limits::kMaxOrdIrd));
  c.ord = static_cast<std::uint16_t>(std::min<std::uint32_t>(p->ord, Limits::kMaxOrdIrd));
  c.initiator = p->initiator;
  if (p->rtr >= 0) {
    if (c.initiator)
      c.rtr = static_cast<iwarp::RtrType>(p->rtr);
    else
      c.expect_rtr = true;
  }
  c.large_fpdu = p->large_fpdu != 0;
  std::size_t mulpdu = p->mulpdu;
  if (!mulpdu && c.large_fpdu) {
    // The peer takes FPDUs of any size (siw's flag): send the largest RFC 5044 allows.
    mulpdu = iwarp::kMaxUlpdu;
  } else if (!mulpdu) {
    // MPA-040: MULPDU from the EMSS (TCP MSS), markers included.
    int mss = 0;
    socklen_t len = sizeof mss;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) || mss <= 0) mss = 1460;
    mulpdu = iwarp::mulpdu_for_emss(static_cast<std::size_t>(mss), p->markers_tx);
  }
  c.mulpdu = mulpdu;
  c.sq_depth = std::max<std::uint32_t>(qp->cap.max_send_wr, 1);
  c.rq_depth = std::max<std::uint32_t>(qp->cap.max_recv_wr, 1);
  c.max_sge = std::max(qp->cap.max_send_sge, qp->cap.max_recv_sge);
  c.max_inline = qp->cap.max_inline_data;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  qp->engine = std::make_unique<iwarp::Qp>(c, ctx->mem, qp->srq ? qp->srq->q.get() : nullptr);
  for (iwarp::RecvWr& r : qp->pending_recv)
    qp->engine->post_recv(std::move(r));
  qp->pending_recv.clear();
  qp->fd = fd;
  qp->state = IBV_QPS_RTS;
  qp->vqp.qp.state = IBV_QPS_RTS;
  if (int err = ctx->progress->add(qp)) {
    qp->engine.reset();
    qp->fd = -1;
    qp->state = IBV_QPS_ERR;
    return err;
  }
  qp->push_tx(); // the RTR, if P2P (RFC 6581 §9.2)
  qp->after_io();
  return 0;
}

int disconnect(std::uint32_t qp_num) {
  Qp* qp = find_qp(qp_num);
  if (!qp) return ENOENT;
  std::lock_guard<CtxMutex> lock(qp->ctx()->mu);
  if (!qp->engine) return ENOTCONN;
  qp->engine->close();
  qp->push_tx();
  qp->after_io();
  return 0;
}

const uiwarp_provider_ops kProviderOps = {UIWARP_PROVIDER_ABI, attach, disconnect};

__attribute__((constructor)) void register_with_shim() {
  using Register = void (*)(const uiwarp_provider_ops*);
  if (auto reg = reinterpret_cast<Register>(::dlsym(RTLD_DEFAULT, "uiwarp_shim_register_provider")))
    reg(&kProviderOps);
}

} // namespace

Context::~Context() { progress.reset(); }

} // namespace uiwarp
