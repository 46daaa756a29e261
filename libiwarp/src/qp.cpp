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

QpConfig qp_config_from_mpa(const MpaResult& mpa, MpaRole role, std::size_t mulpdu) {
  QpConfig c;
  c.version = mpa.version;
  c.crc = mpa.crc;
  c.markers_tx = mpa.markers_tx;
  c.markers_rx = mpa.markers_rx;
  c.mulpdu = std::clamp(mulpdu, kMinMulpdu, kMaxUlpdu);
  c.ird = mpa.ird;
  c.ord = mpa.ord;
  c.large_fpdu = mpa.large_fpdu;
  c.initiator = role == MpaRole::Initiator;
  if (mpa.p2p) {
    if (c.initiator)
      c.rtr = mpa.rtr;
    else
      c.expect_rtr = true;
  }
  return c;
}

// ---- SharedRecvQueue -------------------------------------------------------------

PostError SharedRecvQueue::post(RecvWr wr) {
  if (q_.size() >= depth_) return PostError::QueueFull;
  q_.push_back(std::move(wr));
  return PostError::None;
}

std::optional<RecvWr> SharedRecvQueue::take() {
  if (q_.empty()) return std::nullopt;
  RecvWr wr = std::move(q_.front());
  q_.pop_front();
  return wr;
}

std::deque<RecvWr> SharedRecvQueue::drain() { return std::exchange(q_, {}); }

// ---- Qp ----------------------------------------------------------------------------

Qp::Qp(const QpConfig& config, MemoryTable& mem, SharedRecvQueue* srq)
    : cfg_(config), mem_(mem), srq_(srq), tx_(config.crc, config.markers_tx),
      tx_allowed_(config.initiator),
      rx_(config.crc, config.markers_rx, config.large_fpdu ? kMaxUlpduLargeFpdu : kMaxUlpdu) {
  cfg_.mulpdu = std::clamp(cfg_.mulpdu, kMinMulpdu, kMaxUlpdu);
  rx_.set_sink(this);
  // RFC 6581 §5 (EMPA-012): the initiator's RTR precedes every other FPDU.
  rtr_pending_ = cfg_.initiator && cfg_.rtr.has_value();
}

PostError Qp::post_send(SendWr wr) {
  const bool ext =
      wr.opcode == WrOpcode::ImmediateData || wr.opcode == WrOpcode::RdmaWriteImmediate ||
      wr.opcode == WrOpcode::AtomicFetchAdd || wr.opcode == WrOpcode::AtomicCompareSwap;
  if (ext && !cfg_.rfc7306) return PostError::InvalidArgument;
  // With ORD 0 (RFC 6581 may negotiate it) a Read or Atomic could never be sent.
  const bool outbound_req = wr.opcode == WrOpcode::RdmaRead ||
                            wr.opcode == WrOpcode::AtomicFetchAdd ||
                            wr.opcode == WrOpcode::AtomicCompareSwap;
  if (outbound_req && cfg_.ord == 0) return PostError::InvalidArgument;
  if (!wr.inline_data.empty()) wr.is_inline = true; // inline_data replaces the SGL
  if (wr.sgl.size() > cfg_.max_sge) return PostError::InvalidArgument;
  if (wr.is_inline && (wr.inline_data.size() > cfg_.max_inline || wr.opcode == WrOpcode::RdmaRead))
    return PostError::InvalidArgument;
  if (sq_.size() >= cfg_.sq_depth) return PostError::QueueFull;
  sq_.push_back(SqEntry{std::move(wr)});
  if (state_ != QpState::Rts) {
    // Posting outside RTS completes the WR with a flush error (verbs semantics).
    sq_.back().done = true;
    sq_.back().status = WcStatus::Flushed;
    complete_sq();
  }
  return PostError::None;
}

PostError Qp::post_recv(RecvWr wr) {
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
  rq_.emplace_back(std::move(wr), cap);
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

void Qp::note_error(TermCode code, bool remote, std::string message) {
  if (!error_) error_ = QpError{code, remote, std::move(message)};
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
  if (!error_) note_error(term::rdmap_local_catastrophic, false, "QP flushed by the consumer");
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
