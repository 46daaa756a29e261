// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// QP life cycle: posting, completion order, errors, Terminate and flush.
#include "iwarp/qp.hpp"

#include <algorithm>

namespace iwarp {

std::string_view wc_status_name(WcStatus s) {
  switch (s) {
  case WcStatus::Success: return "success";
  case WcStatus::LocalLength: return "local length error";
  case WcStatus::LocalQpOperation: return "local QP operation error";
  case WcStatus::LocalProtection: return "local protection error";
  case WcStatus::LocalAccess: return "local access error";
  case WcStatus::Flushed: return "work request flushed";
  case WcStatus::BadResponse: return "bad response";
  case WcStatus::RemoteInvalidRequest: return "remote invalid request";
  case WcStatus::RemoteAccess: return "remote access error";
  case WcStatus::RemoteOperation: return "remote operation error";
  case WcStatus::Fatal: return "fatal error";
  case WcStatus::MwBind: return "memory window bind error";
  }
  return "?";
}

WcOpcode completion_opcode(WrOpcode op) {
  switch (op) {
  case WrOpcode::RdmaWrite:
  case WrOpcode::RdmaWriteImmediate: return WcOpcode::RdmaWrite;
  case WrOpcode::RdmaRead: return WcOpcode::RdmaRead;
  case WrOpcode::AtomicFetchAdd: return WcOpcode::FetchAdd;
  case WrOpcode::AtomicCompareSwap: return WcOpcode::CompareSwap;
  case WrOpcode::BindWindow: return WcOpcode::BindWindow;
  case WrOpcode::LocalInvalidate: return WcOpcode::LocalInvalidate;
  default: return WcOpcode::Send;
  }
}

std::string_view qp_state_name(QpState s) {
  switch (s) {
  case QpState::Rts: return "RTS";
  case QpState::Closing: return "closing";
  case QpState::Closed: return "closed";
  case QpState::Terminate: return "terminate";
  case QpState::Error: return "error";
  }
  return "?";
}

QpConfig qp_config_from(const ConnParams& p, std::size_t mulpdu) {
  QpConfig c;
  c.conn = p;
  // The peer takes FPDUs of any size (siw's flag): send the largest RFC 5044 allows.
  c.mulpdu = p.large_fpdu ? kMaxUlpdu : std::clamp(mulpdu, kMinMulpdu, kMaxUlpdu);
  return c;
}

// ---- SharedRecvQueue -------------------------------------------------------------

PostError SharedRecvQueue::post(const RecvWr& wr) {
  if (wr.sgl.size() > kMaxSge) return PostError::InvalidArgument;
  std::lock_guard lock(mu_);
  if (q_.size() >= depth_) return PostError::QueueFull;
  q_.push_slot() = wr;
  return PostError::None;
}

std::optional<RecvWr> SharedRecvQueue::take() {
  std::lock_guard lock(mu_);
  if (q_.empty()) return std::nullopt;
  RecvWr wr = q_.front();
  q_.pop_front();
  return wr;
}

std::size_t SharedRecvQueue::size() const {
  std::lock_guard lock(mu_);
  return q_.size();
}

std::uint32_t SharedRecvQueue::depth() const {
  std::lock_guard lock(mu_);
  return depth_;
}

PostError SharedRecvQueue::set_depth(std::uint32_t depth) {
  std::lock_guard lock(mu_);
  if (depth == 0 || depth < q_.size()) return PostError::InvalidArgument;
  q_.reserve(depth); // an SRQ is resized rarely; the posts that follow do not allocate
  depth_ = depth;
  return PostError::None;
}

std::vector<RecvWr> SharedRecvQueue::drain() {
  std::lock_guard lock(mu_);
  std::vector<RecvWr> out;
  for (const RecvWr& w : q_)
    out.push_back(w);
  q_.clear();
  return out;
}

// ---- Qp ----------------------------------------------------------------------------

namespace {
// Messages of an SRQ-fed QP that may be partly received at once: our peers send one
// message at a time; more means a peer that interleaves Sends to drain the SRQ (HX-104).
constexpr std::size_t kSrqMessagesInFlight = 64;
// Frames queued ahead of the socket (see qp_tx.cpp), plus a Terminate.
constexpr std::size_t kFrameSlots = 32;
} // namespace

Qp::Qp(const QpConfig& config, MemoryTable& mem, SharedRecvQueue* srq)
    : cfg_(config), mem_(mem), srq_(srq), tx_(config.conn.crc, config.conn.markers_tx),
      tx_allowed_(config.conn.initiator),
      rx_(config.conn.crc, config.conn.markers_rx,
          config.conn.large_fpdu ? kMaxUlpduLargeFpdu : kMaxUlpdu) {
  cfg_.mulpdu = std::clamp(cfg_.mulpdu, kMinMulpdu, kMaxUlpdu);
  cfg_.max_sge = std::min<std::uint32_t>(cfg_.max_sge, kMaxSge);
  cfg_.max_inline = std::min<std::uint32_t>(cfg_.max_inline, kMaxInline);
  rx_.set_sink(this);
  // RFC 6581 §5 (EMPA-012): the initiator's RTR precedes every other FPDU.
  rtr_pending_ = cfg_.conn.p2p && cfg_.conn.initiator;
  rtr_expected_ = cfg_.conn.p2p && !cfg_.conn.initiator;
  // Every queue is sized once, here: nothing on the data path allocates.
  sq_.reserve(std::max<std::uint32_t>(cfg_.sq_depth, 1));
  rq_.reserve(srq_ ? kSrqMessagesInFlight : std::max<std::uint32_t>(cfg_.rq_depth, 1));
  orq_.reserve(cfg_.conn.ord + 1u); // + the RTR's zero-length Read
  irq_.reserve(std::max<std::uint16_t>(cfg_.conn.ird, 1));
  cq_.reserve(sq_.capacity() + rq_.capacity());
  frames_.reserve(kFrameSlots);
  for (std::size_t i = 0; i < frames_.capacity(); ++i)
    frames_.push_slot().frame.reserve(cfg_.mulpdu, cfg_.conn.markers_tx);
  frames_.clear();
}

PostError Qp::post_send(const SendWr& wr) {
  if (is_rfc7306(wr.opcode) && !cfg_.conn.rfc7306) return PostError::InvalidArgument;
  // With ORD 0 (RFC 6581 may negotiate it) a Read or Atomic could never be sent.
  const bool outbound_req = wr.opcode == WrOpcode::RdmaRead ||
                            wr.opcode == WrOpcode::AtomicFetchAdd ||
                            wr.opcode == WrOpcode::AtomicCompareSwap;
  if (outbound_req && cfg_.conn.ord == 0) return PostError::InvalidArgument;
  const bool is_inline = wr.is_inline || !wr.inline_data.empty(); // replaces the SGL
  if (wr.sgl.size() > cfg_.max_sge) return PostError::InvalidArgument;
  if (is_inline && (wr.inline_data.size() > cfg_.max_inline || wr.opcode == WrOpcode::RdmaRead))
    return PostError::InvalidArgument;
  if (sq_.size() >= cfg_.sq_depth) return PostError::QueueFull;
  SqEntry& e = sq_.push_slot();
  e = SqEntry{};
  e.wr = wr;
  e.wr.is_inline = is_inline;
  if (state_ != QpState::Rts) {
    // Posting outside RTS completes the WR with a flush error (verbs semantics).
    sq_.back().done = true;
    sq_.back().status = WcStatus::Flushed;
    complete_sq();
  }
  return PostError::None;
}

PostError Qp::post_recv(const RecvWr& wr) {
  if (srq_ || wr.sgl.size() > cfg_.max_sge) return PostError::InvalidArgument;
  if (rq_.size() >= cfg_.rq_depth) return PostError::QueueFull;
  // Closed still receives until the peer's FIN (which flushes rq_), so only then
  // do new buffers complete at once; completions stay in posting order.
  if (state_ == QpState::Error || state_ == QpState::Terminate ||
      (state_ == QpState::Closed && peer_closed_)) {
    push_completion(Completion::make(wr.wr_id, WcStatus::Flushed, WcOpcode::Recv, 0, true));
    return PostError::None;
  }
  std::uint64_t cap = 0;
  for (const Sge& s : wr.sgl)
    cap += s.length;
  rq_.push_slot() = RqEntry(wr, cap);
  rx_retry(); // a Send may be waiting for this buffer
  return PostError::None;
}

std::optional<Completion> Qp::poll() {
  if (cq_.empty()) return std::nullopt;
  Completion c = cq_.front();
  cq_.pop_front();
  return c;
}

void Qp::push_completion(const Completion& c) { cq_.push_back(c); }

void Qp::complete_sq() {
  // Completions leave the send queue in posting order, whatever finished first.
  while (!sq_.empty() && sq_.front().done) {
    SqEntry& e = sq_.front();
    if (e.wr.signaled || e.status != WcStatus::Success) {
      push_completion(Completion::make(e.wr.wr_id, e.status, completion_opcode(e.wr.opcode),
                                       e.byte_len, false));
    }
    sq_.pop_front();
    if (sq_next_ > 0) --sq_next_;
  }
  if (state_ == QpState::Closing && sq_.empty() && frames_.empty() && !cur_ && irq_.empty())
    state_ = QpState::Closed;
}

std::string describe(const QpError& e, bool terminate_sent) {
  if (e.code == term::mpa_tcp_closed || e.consumer) return e.message; // no Terminate either way
  static constexpr const char* kLayer[] = {"RDMAP", "DDP", "LLP"};
  const auto layer = static_cast<unsigned>(e.code.layer);
  const std::string code = "layer " + std::to_string(layer) + " " +
                           (layer < 3 ? kLayer[layer] : "?") + ", type " +
                           std::to_string(e.code.etype) + ", code " + std::to_string(e.code.code);
  if (e.remote) return e.message + " (" + code + ")"; // "peer sent Terminate: ..."
  if (terminate_sent) return e.message + " (Terminate sent: " + code + ")";
  return e.message + " (no Terminate sent: the connection was gone)";
}

void Qp::note_error(TermCode code, bool remote, std::string message) {
  if (!error_) error_ = QpError{code, remote, false, std::move(message)};
}

void Qp::flush_all(std::optional<WcStatus> first_status) {
  cur_.reset();
  orq_.clear();
  irq_.clear();
  rx_wqe_ = nullptr;
  rx_read_ = nullptr;
  for (SqEntry& e : sq_) {
    if (e.done) continue;
    e.done = true;
    e.status = first_status.value_or(WcStatus::Flushed);
    first_status.reset();
  }
  sq_next_ = sq_.size();
  complete_sq();
  for (RqEntry& r : rq_)
    push_completion(
        Completion::make(r.wr.wr_id, r.error.value_or(WcStatus::Flushed), WcOpcode::Recv, 0, true));
  rq_.clear();
}

void Qp::enter_error(std::optional<WcStatus> first_status) {
  rx_stopped_ = true;
  // A frame already partly written must be finished (stream integrity); the
  // rest of the queued frames are dropped along with their work requests.
  std::size_t dropped = 0;
  while (frames_.size() > 1 || (frames_.size() == 1 && frames_.front().untouched())) {
    if (frames_.back().is_terminate) break;
    dropped += frames_.back().frame.size();
    frames_.pop_back();
  }
  // Dropped frames were the tail of the stream: the next frame (the Terminate)
  // takes their place, so marker positions must not count them (RFC 5044 §4.3).
  tx_.rewind(dropped);
  for (QueuedFrame& f : frames_) {
    f.completes = nullptr;
    if (!f.is_terminate && f.owned.empty() && f.frame.remaining() > 0) {
      // Its payload points into memory of a WR about to be flushed (inline data
      // dies with the WR; the consumer may deregister the rest): keep a copy.
      std::vector<std::byte> all = f.frame.to_bytes();
      f.owned.assign(all.end() - static_cast<std::ptrdiff_t>(f.frame.remaining()), all.end());
      f.owned_off = 0;
      f.frame.clear();
    }
  }
  flush_all(first_status);
  if (state_ != QpState::Terminate) state_ = QpState::Error;
}

void Qp::terminate(TermCode code, std::string message, bool with_header, bool with_rdma_header) {
  if (error_ || terminate_queued_) return; // HX-094: only the first error is reported
  note_error(code, false, std::move(message));
  TerminateHeader t;
  t.code = code;
  if (with_header && hdr_done_) {
    // RFC 5040 §4.8 Fig. 10: the offending segment's DDP header and length.
    t.m = t.d = true;
    t.ddp_segment_length = static_cast<std::uint16_t>(ulpdu_len_);
    t.ddp_header_len = static_cast<std::uint8_t>(seg_.size());
    std::copy_n(hdr_buf_.begin(), seg_.size(), t.ddp_header.begin());
    if (with_rdma_header && seg_.op() == Opcode::RdmaReadRequest) {
      t.r = true;
      std::copy_n(hdr_buf_.begin() + kUntaggedHdrLen, kReadRequestHdrLen, t.rdma_header.begin());
    }
  }
  enter_error(std::nullopt);
  // Nobody to tell: the connection is gone, or we are a responder that has not
  // heard from the initiator yet, who may not be in Full Operation (RFC 5044
  // §7.1.2 r4, MPA-063). Any octet of an FPDU from it proves it is.
  if (peer_closed_ || (!tx_allowed_ && rx_.stream_offset() == 0)) {
    state_ = QpState::Error;
    return;
  }
  queue_terminate(t);
  state_ = QpState::Terminate;
}

void Qp::fail(TermCode code, std::string message) {
  terminate(code, std::move(message), false, false);
}

void Qp::flush() {
  if (!error_) {
    note_error(term::rdmap_local_catastrophic, false, "QP flushed by the consumer");
    error_->consumer = true;
  }
  frames_.clear();
  terminate_queued_ = false;
  enter_error(std::nullopt);
  state_ = QpState::Error;
}

void Qp::close() {
  if (state_ == QpState::Rts) state_ = QpState::Closing;
  complete_sq();
}

bool Qp::wants_disconnect() const {
  return state_ == QpState::Closed || (state_ == QpState::Error && frames_.empty());
}

void Qp::on_peer_closed(bool graceful) {
  peer_closed_ = true;
  if (state_ == QpState::Closed) {
    // The peer's side of a graceful close (RFC 5041 §6.2.1): not an error; the
    // receive buffers left over are flushed.
    flush_all(std::nullopt);
    return;
  }
  if (state_ == QpState::Error || state_ == QpState::Terminate) {
    frames_.clear();
    state_ = QpState::Error;
    return;
  }
  bool clean = graceful && rx_.at_fpdu_boundary();
  note_error(term::mpa_tcp_closed, true,
             clean      ? "peer closed the connection"
             : graceful ? "peer closed the connection in the middle of an FPDU"
                        : "connection reset or lost");
  frames_.clear();
  enter_error(std::nullopt);
  state_ = QpState::Error;
}

} // namespace iwarp
