// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Receive: the UlpduSink behind FpduRx. Each segment's DDP/RDMAP header is
// collected, validated (RFC 5041 §7.1, RFC 5040 §7.2) and only then is the
// payload placed, straight into registered memory or the receive buffer.
#include "atomic_exec.hpp"
#include "iwarp/qp.hpp"

#include <algorithm>
#include <cstring>

namespace iwarp {

namespace {

// Status for the first outstanding work request when the peer terminates.
WcStatus status_for_remote(TermCode c) {
  switch (c.layer) {
  case TermLayer::Rdmap:
    return c.etype == term::kRdmapRemoteProtection ? WcStatus::RemoteAccess
                                                   : WcStatus::RemoteOperation;
  case TermLayer::Ddp:
    if (c.etype == 1) return WcStatus::RemoteAccess;
    if (c.etype == 2) return WcStatus::RemoteInvalidRequest;
    return WcStatus::RemoteOperation;
  case TermLayer::Llp: break;
  }
  return WcStatus::Fatal;
}

std::string describe(const DdpHeader& h) {
  std::string s(opcode_name(h.opcode));
  if (h.tagged)
    s += " (STag 0x" +
         [](std::uint32_t v) {
           char b[16];
           std::snprintf(b, sizeof b, "%08x", v);
           return std::string(b);
         }(h.stag) +
         ", TO " + std::to_string(h.to) + ")";
  else
    s += " (QN " + std::to_string(h.qn) + ", MSN " + std::to_string(h.msn) + ", MO " +
         std::to_string(h.mo) + ")";
  return s;
}

} // namespace

std::optional<TermCode> Qp::reject(TermCode code, std::string message, bool with_header,
                                   bool with_rdma_header) {
  pending_term_ = PendingTerm{code, std::move(message), with_header, with_rdma_header};
  return code;
}

std::optional<TermCode> Qp::ulpdu_begin(std::size_t len) {
  ulpdu_len_ = len;
  hdr_done_ = false;
  seg_hdr_len_ = 0;
  hdr_need_ = std::min(len, kTaggedHdrLen);
  place_ = nullptr;
  rx_wqe_ = nullptr;
  rx_read_ = nullptr;
  rtr_swallow_ = false;
  rx_rejected_ = false;
  if (rx_stopped_) return std::nullopt;
  // HX-037: a ULPDU that cannot hold even a tagged DDP header (the zero-length
  // one included, which would otherwise never reach ulpdu_landed).
  if (len < kTaggedHdrLen) {
    reject(term::ddp_local_catastrophic,
           "ULPDU of " + std::to_string(len) + " octets is shorter than a DDP header", false);
    rx_rejected_ = true;
  }
  // Errors are not returned to the deframer: the FPDU is drained into the
  // discard area and the error reported once its CRC is known (ulpdu_end), so
  // that a corrupted FPDU is reported as the CRC error it is (MPA-004, MPA-046).
  return std::nullopt;
}

MutBytes Qp::span_dest(std::span<const MutBytes> spans, std::uint64_t off, std::size_t max) {
  for (MutBytes s : spans) {
    if (off < s.size())
      return s.subspan(static_cast<std::size_t>(off))
          .first(std::min<std::size_t>(max, s.size() - off));
    off -= s.size();
  }
  return {};
}

MutBytes Qp::ulpdu_dest(std::size_t offset, std::size_t max) {
  if (rx_stopped_ || rx_rejected_) return MutBytes(discard_).first(std::min(max, discard_.size()));
  if (!hdr_done_) return MutBytes(hdr_buf_).subspan(offset, std::min(max, hdr_need_ - offset));
  const std::uint64_t po = offset - seg_hdr_len_;
  MutBytes d;
  switch (seg_.op()) {
  case Opcode::RdmaWrite: d = MutBytes(place_ + po, max); break;
  case Opcode::RdmaReadResponse:
    d = span_dest(rx_read_->sink, seg_.to - rx_read_->sink_to + po, max);
    break;
  case Opcode::Terminate:
    d = MutBytes(term_buf_).subspan(po, std::min<std::size_t>(max, term_buf_.size() - po));
    break;
  default: d = span_dest(rx_wqe_->spans, seg_.mo + po, max); break;
  }
  return d;
}

std::optional<TermCode> Qp::ulpdu_landed(std::size_t offset, std::size_t n) {
  if (rx_stopped_ || rx_rejected_ || hdr_done_) return std::nullopt;
  // A rejected header stops placement at once; the error waits for the CRC.
  if (header_landed(offset, n)) rx_rejected_ = true;
  return std::nullopt;
}

std::optional<TermCode> Qp::header_landed(std::size_t offset, std::size_t n) {
  if (offset + n < hdr_need_) return std::nullopt;
  if (ulpdu_len_ < kTaggedHdrLen ||
      (!DdpHeader::is_tagged(hdr_buf_.data()) && ulpdu_len_ < kUntaggedHdrLen)) {
    // HX-037: the ULPDU cannot even hold a DDP header.
    hdr_done_ = true;
    return reject(term::ddp_local_catastrophic,
                  "ULPDU of " + std::to_string(ulpdu_len_) + " octets is shorter than a DDP header",
                  false);
  }
  if (seg_hdr_len_ == 0) {
    // The DDP header is complete or the tagged part is; size the rest from the opcode.
    bool tagged = DdpHeader::is_tagged(hdr_buf_.data());
    std::uint8_t op = std::to_integer<std::uint8_t>(hdr_buf_[1]) & 0xf;
    const OpcodeInfo& info = opcode_info(op);
    std::size_t rdmap = 0;
    if (!tagged && info.valid && !info.tagged && op != static_cast<std::uint8_t>(Opcode::Terminate))
      rdmap = info.rdmap_hdr;
    seg_hdr_len_ = std::min(ulpdu_len_, (tagged ? kTaggedHdrLen : kUntaggedHdrLen) + rdmap);
    rx_rdmap_hdr_ = rdmap;
    if (seg_hdr_len_ > hdr_need_) {
      hdr_need_ = seg_hdr_len_;
      return std::nullopt;
    }
  }
  hdr_done_ = true;
  return on_header();
}

std::optional<TermCode> Qp::on_header() {
  seg_ = DdpHeader::decode(hdr_buf_.data());
  const OpcodeInfo& info = opcode_info(seg_.opcode);
  const std::size_t ddp_len = seg_.size();

  // HX-050: DV must be the version MPA negotiated (RFC 5041 §4.1, IOP §5.1).
  if (seg_.ddp_version != cfg_.conn.version)
    return reject(seg_.tagged ? term::ddp_tagged_invalid_version
                              : term::ddp_untagged_invalid_version,
                  "DDP version " + std::to_string(seg_.ddp_version) + " in " + describe(seg_));
  // HX-070: RV likewise (RFC 5040 §4.1).
  if (seg_.rdmap_version != cfg_.conn.version)
    return reject(term::rdmap_invalid_version,
                  "RDMAP version " + std::to_string(seg_.rdmap_version) + " in " + describe(seg_));
  // HX-071: reserved opcodes, and RFC 7306 opcodes unless enabled.
  if (!info.valid || (info.rfc7306 && !cfg_.conn.rfc7306))
    return reject(term::rdmap_unexpected_opcode,
                  "unexpected opcode " + std::string(opcode_name(seg_.opcode)));
  // HX-072: opcode inconsistent with the T bit.
  if (info.tagged != seg_.tagged)
    return reject(term::rdmap_unexpected_opcode,
                  std::string(opcode_name(seg_.opcode)) + " with T=" + (seg_.tagged ? "1" : "0"));
  if (!seg_.tagged) {
    // HX-058: queues RDMAP uses (RFC 5041 §7.1); QN 3 only with RFC 7306.
    if (seg_.qn > kQnAtomicResponse || (seg_.qn == kQnAtomicResponse && !cfg_.conn.rfc7306))
      return reject(term::ddp_untagged_invalid_qn, "invalid QN in " + describe(seg_));
    if (seg_.qn != info.qn)
      return reject(term::rdmap_unexpected_opcode, "opcode on the wrong queue: " + describe(seg_));
  }
  // HX-037 / HX-080 / HX-087: the RDMAP header must be complete, and messages
  // without ULP payload must not carry any.
  const bool is_term = seg_.op() == Opcode::Terminate;
  const std::size_t need = ddp_len + (is_term ? kTerminateCtrlLen : rx_rdmap_hdr_);
  if (ulpdu_len_ < need) {
    if (is_term) return reject_terminate("truncated " + describe(seg_)); // HX-093
    return reject(term::rdmap_op_unspecified, "truncated RDMAP header in " + describe(seg_));
  }
  if (!info.payload && ulpdu_len_ != need)
    return reject(term::rdmap_op_unspecified, std::to_string(ulpdu_len_ - need) +
                                                  " unexpected payload octets in " +
                                                  describe(seg_));
  if (!info.payload || info.rdmap_hdr) {
    // Single-segment messages (RFC 5040 §4.4, §4.8; RFC 7306 §4).
    if (!seg_.last || seg_.mo != 0) {
      if (is_term) return reject_terminate("multi-segment " + describe(seg_)); // HX-093
      return reject(term::rdmap_op_unspecified, "multi-segment " + describe(seg_));
    }
  }
  return seg_.tagged ? check_tagged() : check_untagged();
}

std::optional<TermCode> Qp::check_tagged() {
  const std::uint64_t len = ulpdu_len_ - kTaggedHdrLen;
  if (seg_.op() == Opcode::RdmaWrite) {
    // HX-057: zero-length tagged segments carry no STag/TO to check (RFC 5041 §5.2).
    if (len == 0) return std::nullopt;
    auto r = mem_.resolve(seg_.stag, cfg_.pd, cfg_.qp_id, seg_.to, len, access::kRemoteWrite);
    if (r.error)
      return reject(ddp_tagged_code(*r.error), std::string(mem_error_name(*r.error)) + " for " +
                                                   describe(seg_) + " of " + std::to_string(len) +
                                                   " octets");
    place_ = r.host;
    return std::nullopt;
  }
  // Read Response: must answer our oldest outstanding Read (RFC 5040 §5.2.2, HX-082).
  if (orq_.empty() || orq_.front().atomic)
    return reject(term::rdmap_unexpected_opcode, "unsolicited " + describe(seg_));
  Outstanding& o = orq_.front();
  if (len == 0 && o.length == 0) {
    rx_read_ = &o;
    return std::nullopt;
  }
  if (seg_.stag != o.sink_stag)
    return reject(term::ddp_tagged_invalid_stag,
                  describe(seg_) + " does not match the Read Request's sink STag");
  if (seg_.to + len < seg_.to)
    return reject(term::ddp_tagged_to_wrap, "TO wrap in " + describe(seg_));
  if (seg_.to < o.sink_to || seg_.to - o.sink_to + len > o.length)
    return reject(term::ddp_tagged_base_bounds,
                  describe(seg_) + " outside the " + std::to_string(o.length) + "-octet Read sink");
  rx_read_ = &o;
  return std::nullopt;
}

Qp::RqEntry* Qp::rq_entry(std::uint32_t k) {
  // An SRQ lends a buffer only for the next message, so a far-future MSN
  // cannot drain it (HX-104).
  if (srq_ && k == rq_.size() && rq_.size() < rq_.capacity()) {
    if (auto wr = srq_->take()) {
      std::uint64_t cap = 0;
      for (const Sge& s : wr->sgl)
        cap += s.length;
      rq_.push_slot() = RqEntry(*wr, cap);
    }
  }
  return k < rq_.size() ? &rq_[k] : nullptr;
}

std::optional<TermCode> Qp::check_untagged() {
  const std::uint64_t len = ulpdu_len_ - seg_hdr_len_;
  switch (seg_.qn) {
  case kQnSend: {
    // RFC 6581 §4.4.2: the zero-length Send RTR is consumed invisibly.
    if (rtr_expected_ && seg_.op() == Opcode::Send && len == 0 && seg_.last &&
        seg_.msn == rx_msn_[kQnSend]) {
      rtr_swallow_ = true;
      return std::nullopt;
    }
    std::uint32_t k = seg_.msn - rx_msn_[kQnSend];
    RqEntry* w = rq_entry(k);
    if (!w) {
      // HX-059 / HX-060: the next MSN with no buffer, or an MSN out of range.
      bool next = k == rq_.size();
      if (next && cfg_.hold_for_buffer && !hold_expired_ && rq_.size() < rq_.capacity()) {
        rx_hold_ = true; // rx_retry() or rx_hold_expired() continues
        return std::nullopt;
      }
      return reject(next ? term::ddp_untagged_no_buffer : term::ddp_untagged_msn_range,
                    (next ? "no receive buffer posted for " : "MSN out of range in ") +
                        describe(seg_));
    }
    const std::uint64_t msg_bytes =
        seg_.opcode == static_cast<std::uint8_t>(Opcode::ImmediateData) ||
                seg_.opcode == static_cast<std::uint8_t>(Opcode::ImmediateDataSe)
            ? 0
            : len;
    if (seg_.mo > w->capacity) // HX-061
      return reject(term::ddp_untagged_invalid_mo, describe(seg_) + " beyond the " +
                                                       std::to_string(w->capacity) +
                                                       "-octet receive buffer");
    if (seg_.mo + msg_bytes > w->capacity) // HX-062
      return reject(term::ddp_untagged_too_long,
                    describe(seg_) + " of " + std::to_string(len) + " octets overflows the " +
                        std::to_string(w->capacity) + "-octet receive buffer");
    // HX-063 (R): the segment with L=1 ends the message; nothing may reach beyond it.
    const std::uint64_t end = seg_.mo + msg_bytes;
    if ((w->last_seen && end > w->length) || (seg_.last && end < w->placed_end))
      return reject(term::ddp_untagged_invalid_mo,
                    describe(seg_) + " is inconsistent with the message's other segments (" +
                        std::to_string(w->placed_end) + " octets placed)");
    w->placed_end = std::max(w->placed_end, end);
    if (!w->resolved) {
      for (const Sge& s : w->wr.sgl) {
        if (s.length == 0) continue;
        auto r =
            mem_.resolve(s.lkey, cfg_.pd, cfg_.qp_id, s.addr, s.length, access::kLocalWrite, true);
        if (r.error) {
          // A local error: the buffer's WR fails, the connection with it.
          w->error =
              *r.error == MemError::Access ? WcStatus::LocalAccess : WcStatus::LocalProtection;
          return reject(term::ddp_local_catastrophic,
                        "receive WR " + std::to_string(w->wr.wr_id) + ": local protection error (" +
                            std::string(mem_error_name(*r.error)) + ")",
                        false);
        }
        w->spans.emplace_back(r.host, s.length);
      }
      w->resolved = true;
    }
    rx_wqe_ = w;
    return std::nullopt;
  }
  case kQnReadRequest:
    // Read and Atomic Requests: in order, one segment each, within IRD.
    if (seg_.msn != rx_msn_[kQnReadRequest])
      return reject(term::ddp_untagged_msn_range, "MSN out of range in " + describe(seg_));
    if (irq_.size() >= cfg_.conn.ird) // HX-081, RFC 5040 §6.1
      return reject(term::ddp_untagged_no_buffer, "more than IRD=" + std::to_string(cfg_.conn.ird) +
                                                      " outstanding Read Requests");
    return std::nullopt;
  case kQnTerminate:
    if (len > term_buf_.size()) return reject_terminate(std::to_string(len) + " octets"); // HX-093
    return std::nullopt;
  case kQnAtomicResponse:
    // HX-091: must answer our oldest outstanding Atomic Request.
    if (seg_.msn != rx_msn_[kQnAtomicResponse] || orq_.empty() || !orq_.front().atomic)
      return reject(term::rdmap_unexpected_opcode, "unsolicited " + describe(seg_));
    return std::nullopt;
  }
  return std::nullopt;
}

void Qp::rx_retry() {
  if (!rx_hold_) return;
  rx_hold_ = false;
  if (check_untagged()) rx_rejected_ = true; // holds again while there is still no buffer
}

void Qp::rx_hold_expired() {
  if (!rx_hold_) return;
  rx_hold_ = false;
  hold_expired_ = true;
  if (check_untagged()) rx_rejected_ = true;
  hold_expired_ = false;
}

void Qp::ulpdu_end(std::optional<TermCode> error) {
  const bool rejected = std::exchange(rx_rejected_, false);
  if (rx_stopped_) {
    pending_term_.reset();
    return;
  }
  if (error) {
    // MPA errors (CRC, marker, over-long ULPDU) win over whatever the damaged
    // segment looked like; no DDP header (RFC 5040 §4.8 Fig. 10).
    pending_term_.reset();
    terminate(*error, std::string(term_code_name(*error)), false, false); // "MPA: CRC error"
    return;
  }
  if (rejected) {
    PendingTerm p = std::move(*pending_term_);
    pending_term_.reset();
    if (p.malformed_terminate)
      malformed_terminate(std::move(p.message));
    else
      terminate(p.code, std::move(p.message), p.with_header, p.with_rdma_header);
    return;
  }
  // MPA-063: the responder may send once the initiator's first FPDU is valid.
  tx_allowed_ = true;
  // RFC 6581 §9.2: only the first message can be the hidden RTR (whatever its type,
  // HX-019); a later zero-length Send is ordinary data.
  rtr_expected_ = false;
  if (!seg_.last) return;
  if (auto code = deliver()) {
    if (pending_term_) {
      PendingTerm p = std::move(*pending_term_);
      pending_term_.reset();
      terminate(p.code, std::move(p.message), p.with_header, p.with_rdma_header);
    }
  }
}

std::optional<TermCode> Qp::deliver() {
  switch (seg_.op()) {
  case Opcode::RdmaWrite: return std::nullopt; // WR-004: placed, never delivered
  case Opcode::RdmaReadResponse: {
    // RFC 5040 §5.2.2: the Read completes when its response has been delivered.
    Outstanding& o = orq_.front();
    if (o.entry) o.entry->done = true;
    orq_.pop_front();
    rx_read_ = nullptr;
    complete_sq();
    return std::nullopt;
  }
  case Opcode::RdmaReadRequest: return deliver_read_request();
  case Opcode::AtomicRequest: return deliver_atomic_request();
  case Opcode::Terminate: deliver_terminate(); return std::nullopt;
  case Opcode::AtomicResponse: {
    Outstanding& o = orq_.front();
    AtomicResponseHeader a = AtomicResponseHeader::decode(hdr_buf_.data() + kUntaggedHdrLen);
    if (a.orig_req_id != o.req_id)
      return reject(term::rdmap_unexpected_opcode,
                    "Atomic Response for unknown request " + std::to_string(a.orig_req_id));
    std::array<std::byte, 8> v;
    std::memcpy(v.data(), &a.orig_value, 8); // host order, as the consumer reads it
    std::size_t off = 0;
    for (MutBytes s : o.sink) {
      std::size_t n = std::min(s.size(), v.size() - off);
      std::memcpy(s.data(), v.data() + off, n);
      off += n;
      if (off == v.size()) break;
    }
    ++rx_msn_[kQnAtomicResponse];
    o.entry->done = true;
    orq_.pop_front();
    complete_sq();
    return std::nullopt;
  }
  default: return deliver_send();
  }
}

std::optional<TermCode> Qp::deliver_send() {
  if (rtr_swallow_) {
    rtr_swallow_ = false;
    ++rx_msn_[kQnSend];
    return std::nullopt;
  }
  const OpcodeInfo& info = opcode_info(seg_.opcode);
  RqEntry* w = rx_wqe_;
  rx_wqe_ = nullptr;
  if (info.invalidate) {
    // RFC 5040 §5.3 (SD-005): invalidate before completing; HX-083 / HX-084 / HX-085.
    if (auto err = mem_.invalidate(seg_.inval_stag, cfg_.pd, cfg_.qp_id)) {
      if (*err == MemError::InvalidStag)
        return reject(term::rdmap_invalid_stag,
                      "Send with Invalidate names an invalid STag in " + describe(seg_));
      if (*err == MemError::Permanent)
        return reject(term::rdmap_stag_cannot_invalidate,
                      "Send with Invalidate names a type 1 memory window (C-07) in " +
                          describe(seg_));
      return reject(term::rdmap_stag_cannot_invalidate,
                    "Send with Invalidate names an STag of another PD or stream in " +
                        describe(seg_));
    }
    w->invalidated = seg_.inval_stag;
  }
  if (seg_.op() == Opcode::ImmediateData || seg_.op() == Opcode::ImmediateDataSe) {
    w->immediate = load_be64(hdr_buf_.data() + kUntaggedHdrLen);
    w->length = 0;
  } else {
    w->length = static_cast<std::uint32_t>(seg_.mo + (ulpdu_len_ - seg_hdr_len_)); // DDP-054
  }
  w->solicited = info.solicited;
  w->last_seen = true;
  // RFC 5041 §5.4 (DDP-053): deliver in MSN order.
  while (!rq_.empty() && rq_.front().last_seen) {
    RqEntry& e = rq_.front();
    Completion c = Completion::make(e.wr.wr_id, WcStatus::Success, WcOpcode::Recv, e.length, true);
    c.solicited = e.solicited;
    c.invalidated = e.invalidated;
    c.immediate = e.immediate;
    if (e.solicited) solicited_ = true;
    push_completion(c);
    rq_.pop_front();
    ++rx_msn_[kQnSend];
  }
  return std::nullopt;
}

std::optional<TermCode> Qp::deliver_read_request() {
  ReadRequestHeader rr = ReadRequestHeader::decode(hdr_buf_.data() + kUntaggedHdrLen);
  ++rx_msn_[kQnReadRequest];
  // RFC 5040 §5.2.1 (HX-079): a zero-length Read is not validated.
  if (rr.size != 0) {
    auto r =
        mem_.resolve(rr.src_stag, cfg_.pd, cfg_.qp_id, rr.src_to, rr.size, access::kRemoteRead);
    if (r.error) // HX-074..HX-078: Terminate with the DDP and RDMA headers
      return reject(rdmap_protection_code(*r.error),
                    "RDMA Read Request: " + std::string(mem_error_name(*r.error)) +
                        " for source STag " + std::to_string(rr.src_stag),
                    true, true);
  }
  InboundRead in;
  in.req = rr;
  irq_.push_back(in);
  return std::nullopt;
}

std::optional<TermCode> Qp::deliver_atomic_request() {
  AtomicRequestHeader a = AtomicRequestHeader::decode(hdr_buf_.data() + kUntaggedHdrLen);
  ++rx_msn_[kQnReadRequest];
  if (a.aopcode != static_cast<std::uint8_t>(AtomicOp::FetchAdd) &&
      a.aopcode != static_cast<std::uint8_t>(AtomicOp::CompareSwap)) // HX-089
    return reject(term::rdmap_unexpected_opcode,
                  "unsupported atomic opcode " + std::to_string(a.aopcode));
  if (a.remote_to % 8 != 0) // HX-088: RFC 7306 §5.1, memory untouched
    return reject(term::rdmap_catastrophic_stream,
                  "atomic target TO " + std::to_string(a.remote_to) + " is not 8-octet aligned");
  auto r = mem_.resolve(a.remote_stag, cfg_.pd, cfg_.qp_id, a.remote_to, 8, access::kRemoteAtomic);
  if (r.error) // HX-090
    return reject(rdmap_protection_code(*r.error),
                  "Atomic Request: " + std::string(mem_error_name(*r.error)));
  const std::uint64_t orig = atomic_execute(a, r.host);
  InboundRead in;
  in.atomic = true;
  in.atomic_resp = {a.req_id, orig};
  irq_.push_back(in);
  return std::nullopt;
}

std::optional<TermCode> Qp::reject_terminate(std::string message) {
  reject(term::rdmap_op_unspecified, std::move(message), false);
  pending_term_->malformed_terminate = true;
  return term::rdmap_op_unspecified;
}

void Qp::malformed_terminate(std::string message) {
  // HX-093 (RFC 5040 §5.4): surface it to the ULP, never answer it with a Terminate.
  note_error(term::rdmap_op_unspecified, true, "malformed Terminate from the peer: " + message);
  enter_error(WcStatus::RemoteOperation);
}

namespace {
// Layer/EType pairs of RFC 5040 §4.8 Fig. 9 (RFC 5041 §7.2: DDP EType 3 is for the LLP).
bool known_term_code(TermCode c) {
  switch (c.layer) {
  case TermLayer::Rdmap: return c.etype <= term::kRdmapRemoteOperation;
  case TermLayer::Ddp: return c.etype <= 3;
  case TermLayer::Llp: return c.etype == 0;
  }
  return false;
}
} // namespace

void Qp::deliver_terminate() {
  const std::size_t len = ulpdu_len_ - seg_hdr_len_;
  auto t = TerminateHeader::decode(ConstBytes(term_buf_).first(std::min(len, term_buf_.size())));
  if (!t) {
    malformed_terminate("the HdrCt bits promise more than its " + std::to_string(len) + " octets");
    return;
  }
  if (!known_term_code(t->code)) {
    malformed_terminate("unknown layer " + std::to_string(static_cast<unsigned>(t->code.layer)) +
                        " / EType " + std::to_string(t->code.etype));
    return;
  }
  // RFC 5040 §5.4 (HX-095): deliver to the ULP, fail outstanding work, stop.
  note_error(t->code, true, "peer sent Terminate: " + std::string(term_code_name(t->code)));
  enter_error(status_for_remote(t->code));
}

} // namespace iwarp
