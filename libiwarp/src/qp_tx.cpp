// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Transmit: work requests become RDMAP messages (RFC 5040 §5), messages become
// DDP segments of at most MULPDU octets (RFC 5041 §5.2), segments become FPDUs.
// Payload is referenced in place, never copied.
#include "iwarp/qp.hpp"

#include <algorithm>

namespace iwarp {

namespace {
// Frames built ahead of the socket: enough to fill a writev, few enough that an
// error can still drop work that has not started.
constexpr std::size_t kMaxQueuedFrames = 16;
constexpr std::uint64_t kMaxMessage = 0xffffffffull; // RFC 5041 §5.2: length < 2^32
} // namespace

std::optional<WcStatus> Qp::resolve_local(const Sgl& sgl, std::uint32_t need, Pieces& out,
                                          std::uint64_t& total) {
  total = 0;
  for (const Sge& s : sgl) {
    if (s.length == 0) continue;
    auto r = mem_.resolve(s.lkey, cfg_.pd, cfg_.qp_id, s.addr, s.length, need, true);
    if (r.error)
      return *r.error == MemError::Access ? WcStatus::LocalAccess : WcStatus::LocalProtection;
    out.emplace_back(r.host, s.length);
    total += s.length;
  }
  if (total > kMaxMessage) return WcStatus::LocalLength;
  return std::nullopt;
}

void Qp::queue_terminate(const TerminateHeader& t) {
  // RFC 5040 §5.4: untagged, QN 2, one segment; it is the last message we send.
  DdpHeader h;
  h.tagged = false;
  h.last = true;
  h.ddp_version = h.rdmap_version = cfg_.conn.version;
  h.opcode = static_cast<std::uint8_t>(Opcode::Terminate);
  h.qn = kQnTerminate;
  h.msn = tx_msn_[kQnTerminate]++;
  std::array<std::byte, kUntaggedHdrLen + kTerminateMaxLen> buf{};
  h.encode(buf.data());
  t.encode(buf.data() + kUntaggedHdrLen);
  QueuedFrame& f = frames_.push_slot();
  tx_.frame(ConstBytes(buf).first(kUntaggedHdrLen + t.encoded_size()), {}, f.frame);
  f.completes = nullptr;
  f.owned.clear();
  f.owned_off = 0;
  f.is_terminate = true;
  f.read_response = false;
  terminate_queued_ = true;
}

bool Qp::run_local_operation(SqEntry& e) {
  const SendWr& wr = e.wr;
  const bool bind = wr.opcode == WrOpcode::BindWindow;
  auto err = bind ? mem_.bind({wr.invalidate_stag, wr.remote_stag, wr.bind_region, wr.bind_addr,
                               wr.bind_length, wr.bind_access, cfg_.pd, cfg_.qp_id})
                  : mem_.invalidate_local(wr.invalidate_stag, cfg_.pd);
  if (err) // a local error that ends the stream, as a bad local SGE does
    return fail_local(e, bind ? WcStatus::MwBind : WcStatus::LocalProtection,
                      (bind ? "memory window bind: " : "local invalidate: ") +
                          std::string(mem_error_name(*err)));
  e.done = true;
  ++sq_next_;
  complete_sq();
  return true;
}

bool Qp::fail_local(SqEntry& e, WcStatus s, std::string_view what) {
  e.done = true;
  e.status = s;
  ++sq_next_;
  terminate(term::rdmap_local_catastrophic,
            std::string("work request ") + std::to_string(e.wr.wr_id) + ": " + std::string(what),
            false, false);
  return false;
}

bool Qp::run_local_operations() {
  for (;;) {
    while (sq_next_ < sq_.size() && sq_[sq_next_].done)
      ++sq_next_;
    // Binds and Local Invalidates take effect when the send queue reaches them (after the
    // messages of earlier work requests have started; with a fence, after their Reads).
    if (sq_next_ == sq_.size() || !is_local_operation(sq_[sq_next_].wr.opcode) ||
        (sq_[sq_next_].wr.fence && !orq_.empty()))
      return true;
    if (!run_local_operation(sq_[sq_next_])) return false;
  }
}

bool Qp::start_next_message() {
  TxMsg m;
  m.hdr.ddp_version = m.hdr.rdmap_version = cfg_.conn.version;

  if (rtr_pending_) {
    // RFC 6581 §9.2: the RTR is a zero-length Send, RDMA Write or RDMA Read.
    rtr_pending_ = false;
    switch (cfg_.conn.rtr) {
    case RtrType::Send:
      m.hdr.opcode = static_cast<std::uint8_t>(Opcode::Send);
      m.hdr.qn = kQnSend;
      m.hdr.msn = tx_msn_[kQnSend]++;
      break;
    case RtrType::Write:
      m.hdr.tagged = true;
      m.hdr.opcode = static_cast<std::uint8_t>(Opcode::RdmaWrite);
      break;
    case RtrType::Read: {
      m.hdr.opcode = static_cast<std::uint8_t>(Opcode::RdmaReadRequest);
      m.hdr.qn = kQnReadRequest;
      m.hdr.msn = tx_msn_[kQnReadRequest]++;
      m.rdmap_hdr.resize(kReadRequestHdrLen);
      ReadRequestHeader{}.encode(m.rdmap_hdr.data());
      orq_.emplace_back(nullptr); // answered by a zero-length Read Response
      break;
    }
    }
    cur_ = std::move(m);
    return true;
  }

  // Alternate between inbound Read Responses and our own send queue, so that
  // neither starves the other (ORD-09 lets responses overtake later messages).
  // WRs posted after close() were completed (flushed) at once: never send them.
  // (build_frame has run the Binds and Local Invalidates at the head of the queue.)
  bool sq_ready = sq_next_ < sq_.size() && !is_local_operation(sq_[sq_next_].wr.opcode);
  if (sq_ready) {
    const SqEntry& e = sq_[sq_next_];
    bool is_req = e.wr.opcode == WrOpcode::RdmaRead || e.wr.opcode == WrOpcode::AtomicFetchAdd ||
                  e.wr.opcode == WrOpcode::AtomicCompareSwap;
    // Fence: wait for earlier Reads/Atomics; ORD: at most `ord` outstanding (RFC 5040 §6.1).
    if ((e.wr.fence && !orq_.empty()) || (is_req && orq_.size() >= cfg_.conn.ord)) sq_ready = false;
  }
  if (!irq_.empty() && (prefer_irq_ || !sq_ready)) {
    prefer_irq_ = false;
    InboundRead in = irq_.front();
    irq_.pop_front();
    if (in.atomic) {
      // RFC 7306 §5.2.2: untagged QN 3, MSN counts Atomic Responses.
      m.hdr.opcode = static_cast<std::uint8_t>(Opcode::AtomicResponse);
      m.hdr.qn = kQnAtomicResponse;
      m.hdr.msn = tx_msn_[kQnAtomicResponse]++;
      m.rdmap_hdr.resize(kAtomicResponseHdrLen);
      in.atomic_resp.encode(m.rdmap_hdr.data());
    } else {
      // RFC 5040 §5.2.2: tagged, to the requester's sink STag/TO, copied verbatim.
      m.hdr.tagged = true;
      m.hdr.opcode = static_cast<std::uint8_t>(Opcode::RdmaReadResponse);
      m.hdr.stag = in.req.sink_stag;
      m.hdr.to = in.req.sink_to;
      m.length = in.req.size;
      m.read_response = in.req;
    }
    cur_ = std::move(m);
    return true;
  }
  if (!sq_ready) return false;
  prefer_irq_ = true;

  SqEntry& e = sq_[sq_next_];
  const SendWr& wr = e.wr;
  m.entry = &e;
  m.completes_entry = true;
  auto local_error = [&](WcStatus s, std::string_view what) { return fail_local(e, s, what); };
  std::uint64_t total = 0;
  if (wr.is_inline) {
    m.payload.emplace_back(wr.inline_data.data(), wr.inline_data.size());
    total = wr.inline_data.size();
  } else if (wr.opcode != WrOpcode::RdmaRead && wr.opcode != WrOpcode::AtomicFetchAdd &&
             wr.opcode != WrOpcode::AtomicCompareSwap && wr.opcode != WrOpcode::ImmediateData) {
    if (auto err = resolve_local(wr.sgl, 0, m.payload, total))
      return local_error(*err, wc_status_name(*err));
  }

  switch (wr.opcode) {
  case WrOpcode::Send:
  case WrOpcode::SendInvalidate: {
    Opcode op = wr.opcode == WrOpcode::SendInvalidate
                    ? (wr.solicited ? Opcode::SendSeInvalidate : Opcode::SendInvalidate)
                    : (wr.solicited ? Opcode::SendSe : Opcode::Send);
    m.hdr.opcode = static_cast<std::uint8_t>(op);
    m.hdr.qn = kQnSend;
    m.hdr.msn = tx_msn_[kQnSend]++;
    m.hdr.inval_stag = wr.opcode == WrOpcode::SendInvalidate ? wr.invalidate_stag : 0;
    m.length = total;
    e.byte_len = static_cast<std::uint32_t>(total);
    ++sq_next_;
    break;
  }
  case WrOpcode::RdmaWrite:
  case WrOpcode::RdmaWriteImmediate:
    if (e.stage == 0) {
      m.hdr.tagged = true;
      m.hdr.opcode = static_cast<std::uint8_t>(Opcode::RdmaWrite);
      m.hdr.stag = wr.remote_stag;
      m.hdr.to = wr.remote_addr;
      m.length = total;
      e.byte_len = static_cast<std::uint32_t>(total);
      if (wr.opcode == WrOpcode::RdmaWriteImmediate) {
        m.completes_entry = false; // completes with the Immediate Data message
        e.stage = 1;
        break;
      }
      ++sq_next_;
      break;
    }
    [[fallthrough]];
  case WrOpcode::ImmediateData: {
    // RFC 7306 §6: 8 octets of Immediate Data on QN 0.
    m.payload.clear();
    m.hdr = DdpHeader{};
    m.hdr.ddp_version = m.hdr.rdmap_version = cfg_.conn.version;
    m.hdr.opcode =
        static_cast<std::uint8_t>(wr.solicited ? Opcode::ImmediateDataSe : Opcode::ImmediateData);
    m.hdr.qn = kQnSend;
    m.hdr.msn = tx_msn_[kQnSend]++;
    m.rdmap_hdr.resize(kImmediateDataLen);
    store_be64(m.rdmap_hdr.data(), wr.immediate);
    ++sq_next_;
    break;
  }
  case WrOpcode::RdmaRead: {
    Outstanding o(&e);
    Pieces sink;
    std::uint64_t len = 0;
    if (auto err = resolve_local(wr.sgl, access::kLocalWrite, sink, len))
      return local_error(*err, "RDMA Read sink: " + std::string(wc_status_name(*err)));
    for (ConstBytes b : sink)
      o.sink.emplace_back(const_cast<std::byte*>(b.data()), b.size());
    // The sink STag/TO name our first SGE; the response is placed by offset
    // into the whole list (it must echo this STag, RFC 5040 §5.2.2).
    auto first = std::find_if(wr.sgl.begin(), wr.sgl.end(), [](const Sge& s) { return s.length; });
    o.sink_stag = first != wr.sgl.end() ? first->lkey : 0;
    o.sink_to = first != wr.sgl.end() ? first->addr : 0;
    o.length = static_cast<std::uint32_t>(len);
    e.byte_len = o.length;
    ReadRequestHeader rr{o.sink_stag, o.sink_to, o.length, wr.remote_stag, wr.remote_addr};
    m.hdr.opcode = static_cast<std::uint8_t>(Opcode::RdmaReadRequest);
    m.hdr.qn = kQnReadRequest;
    m.hdr.msn = tx_msn_[kQnReadRequest]++;
    m.rdmap_hdr.resize(kReadRequestHdrLen);
    rr.encode(m.rdmap_hdr.data());
    m.completes_entry = false; // completes when the Read Response has arrived
    orq_.push_back(std::move(o));
    ++sq_next_;
    break;
  }
  case WrOpcode::BindWindow:
  case WrOpcode::LocalInvalidate: return false; // never here: run_local_operation
  case WrOpcode::AtomicFetchAdd:
  case WrOpcode::AtomicCompareSwap: {
    Outstanding o(&e);
    Pieces sink;
    std::uint64_t len = 0;
    if (auto err = resolve_local(wr.sgl, access::kLocalWrite, sink, len))
      return local_error(*err, "atomic result buffer: " + std::string(wc_status_name(*err)));
    if (len < 8) return local_error(WcStatus::LocalLength, "atomic result buffer under 8 octets");
    for (ConstBytes b : sink)
      o.sink.emplace_back(const_cast<std::byte*>(b.data()), b.size());
    o.atomic = true;
    o.req_id = next_atomic_id_++;
    o.length = 8;
    e.byte_len = 8;
    AtomicRequestHeader a;
    a.req_id = o.req_id;
    a.remote_stag = wr.remote_stag;
    a.remote_to = wr.remote_addr;
    if (wr.opcode == WrOpcode::AtomicFetchAdd) {
      a.aopcode = static_cast<std::uint8_t>(AtomicOp::FetchAdd);
      a.add_swap = wr.compare_add;
      a.add_swap_mask = 0; // RFC 7306 §5.1: mask 0 = plain 64-bit add
    } else {
      a.aopcode = static_cast<std::uint8_t>(AtomicOp::CompareSwap);
      a.add_swap = wr.swap;
      a.compare = wr.compare_add;
    }
    m.hdr.opcode = static_cast<std::uint8_t>(Opcode::AtomicRequest);
    m.hdr.qn = kQnReadRequest; // RFC 7306 §5.2: shares QN 1 with Read Requests
    m.hdr.msn = tx_msn_[kQnReadRequest]++;
    m.rdmap_hdr.resize(kAtomicRequestHdrLen);
    a.encode(m.rdmap_hdr.data());
    m.completes_entry = false;
    orq_.push_back(std::move(o));
    ++sq_next_;
    break;
  }
  }
  cur_ = std::move(m);
  return true;
}

void Qp::segment_payload(TxMsg& m, std::size_t max, Pieces& out) {
  while (max > 0 && m.piece < m.payload.size()) {
    ConstBytes p = m.payload[m.piece].subspan(m.piece_off);
    std::size_t n = std::min(max, p.size());
    out.push_back(p.first(n));
    max -= n;
    m.piece_off += n;
    if (m.piece_off == m.payload[m.piece].size()) {
      ++m.piece;
      m.piece_off = 0;
    }
  }
}

bool Qp::build_frame() {
  if (state_ != QpState::Rts && state_ != QpState::Closing) return false;
  // Local operations put nothing on the wire: they need not wait for the first FPDU.
  if (!cur_ && !run_local_operations()) return false;
  if (!tx_allowed_) return false; // RFC 5044 §7.1.2 r4, HX-018
  if (!cur_ && !start_next_message()) return false;
  if (!cur_) return false; // the message failed locally
  TxMsg& m = *cur_;

  const std::size_t hdr_len = m.hdr.size() + m.rdmap_hdr.size();
  const std::size_t room = cfg_.mulpdu - hdr_len;
  const std::size_t seg =
      static_cast<std::size_t>(std::min<std::uint64_t>(m.length - m.sent, room));

  DdpHeader h = m.hdr;
  if (h.tagged)
    h.to = m.hdr.to + m.sent;
  else
    h.mo = static_cast<std::uint32_t>(m.sent);
  h.last = m.sent + seg == m.length;

  Pieces payload;
  if (m.read_response && seg > 0) {
    // Re-validate the source each segment: the consumer may have deregistered it.
    const ReadRequestHeader& rr = *m.read_response;
    auto r = mem_.resolve(rr.src_stag, cfg_.pd, cfg_.qp_id, rr.src_to + m.sent, seg,
                          access::kRemoteRead);
    if (r.error) {
      cur_.reset();
      terminate(rdmap_protection_code(*r.error),
                "RDMA Read source became invalid: " + std::string(mem_error_name(*r.error)), false,
                false);
      return false;
    }
    payload.emplace_back(r.host, seg);
  } else {
    segment_payload(m, seg, payload);
  }

  h.encode(hdr_scratch_.data());
  std::copy(m.rdmap_hdr.begin(), m.rdmap_hdr.end(), hdr_scratch_.begin() + h.size());

  QueuedFrame& f = frames_.push_slot(); // its TxFrame keeps the buffers of earlier frames
  tx_.frame(ConstBytes(hdr_scratch_).first(hdr_len), payload, f.frame);
  f.completes = nullptr;
  f.is_terminate = false;
  f.read_response = m.read_response.has_value();
  f.owned.clear();
  f.owned_off = 0;
  m.sent += seg;
  if (h.last) {
    if (m.completes_entry) f.completes = m.entry;
    cur_.reset();
  }
  return true;
}

bool Qp::tx_pending() {
  while (frames_.size() < kMaxQueuedFrames && build_frame()) {
  }
  return !frames_.empty();
}

void Qp::tx_gather(std::vector<ConstBytes>& iov, std::size_t max_iov,
                   std::vector<std::uint8_t>* by_ref) {
  tx_pending();
  const std::size_t base = iov.size();
  if (by_ref) by_ref->resize(base);
  for (const QueuedFrame& f : frames_) {
    if (iov.size() - base >= max_iov) break;
    if (f.owned.empty()) {
      const std::size_t first = iov.size();
      f.frame.gather(iov, by_ref);
      if (by_ref && !f.read_response) // a Send's or Write's payload is copied
        std::fill(by_ref->begin() + static_cast<std::ptrdiff_t>(first), by_ref->end(), 0);
    } else {
      iov.push_back(ConstBytes(f.owned).subspan(f.owned_off));
      if (by_ref) by_ref->push_back(0);
    }
  }
  // A frame may have more pieces than the caller can write at once (markers,
  // gather lists): hand out its first ones; tx_advance copes with a partial frame.
  if (iov.size() - base > max_iov) iov.resize(base + max_iov);
  if (by_ref) by_ref->resize(iov.size());
}

void Qp::tx_advance(std::size_t n) {
  while (n > 0 && !frames_.empty()) {
    QueuedFrame& f = frames_.front();
    std::size_t k = std::min(n, f.remaining());
    n -= k;
    if (f.owned.empty()) {
      if (!f.frame.consume(k)) break;
    } else {
      f.owned_off += k;
      if (f.owned_off < f.owned.size()) break;
    }
    // DDP-052: a Send or Write completes once the LLP has accepted all of it.
    if (f.completes) f.completes->done = true;
    if (f.is_terminate) {
      terminate_sent_ = true;
      state_ = QpState::Error;
    }
    frames_.pop_front();
  }
  complete_sq();
}

} // namespace iwarp
