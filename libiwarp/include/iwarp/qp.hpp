// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The per-QP DDP/RDMAP engine (RFC 5040, RFC 5041, RFC 7306) over one MPA
// connection in Full Operation. Sans-IO: work requests in; frames to write,
// places to read into, completions and errors out.
//
//   post_send / post_recv        work requests (verbs semantics)
//   tx_gather / tx_advance       gather list of FPDUs for writev, and progress
//   rx_next / rx_advance         where to read(2) next (registered memory for
//   rx_feed                      payload), and what landed; or plain bytes
//   poll                         completions, in verbs order
//
// Every incoming segment is validated before placement; a bad one produces the
// Terminate of RFC 5040 §4.8 / RFC 5041 §7.2, error completions for every
// outstanding work request, and stops all further placement (RFC 5041 §7.1).
#pragma once

#include "iwarp/conn_params.hpp"
#include "iwarp/containers.hpp"
#include "iwarp/framing.hpp"
#include "iwarp/memory.hpp"
#include "iwarp/mpa_startup.hpp"
#include "iwarp/wire.hpp"

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace iwarp {

struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

// Work requests are values of fixed size (posting copies one into a slot of a queue sized
// at QP creation: no allocation per post); these bound max_sge and max_inline.
inline constexpr std::size_t kMaxSge = 16;
inline constexpr std::size_t kMaxInline = 256;
using Sgl = StaticVector<Sge, kMaxSge>;

enum class WrOpcode : std::uint8_t {
  Send,
  SendInvalidate,
  RdmaWrite,
  RdmaWriteImmediate, // RDMA Write followed by Immediate Data (RFC 7306 §6)
  RdmaRead,
  ImmediateData,  // RFC 7306 §6
  AtomicFetchAdd, // RFC 7306 §5
  AtomicCompareSwap,
  BindWindow,      // a memory window bind (memory.hpp WindowBind); nothing on the wire
  LocalInvalidate, // invalidate_stag becomes invalid; nothing on the wire
};

// Work requests that change the STag table in send-queue order and send nothing.
constexpr bool is_local_operation(WrOpcode op) {
  return op == WrOpcode::BindWindow || op == WrOpcode::LocalInvalidate;
}

// The RFC 7306 work requests: only on a connection that negotiated it (QpConfig::rfc7306).
constexpr bool is_rfc7306(WrOpcode op) {
  return op == WrOpcode::RdmaWriteImmediate || op == WrOpcode::ImmediateData ||
         op == WrOpcode::AtomicFetchAdd || op == WrOpcode::AtomicCompareSwap;
}

struct SendWr {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::Send;
  bool signaled = true;
  bool solicited = false; // Send with SE / Immediate Data with SE
  bool fence = false;     // wait for earlier Reads and Atomics to complete
  Sgl sgl;
  StaticVector<std::byte, kMaxInline> inline_data; // used instead of sgl when non-empty
  bool is_inline = false;
  std::uint32_t remote_stag = 0;     // rkey
  std::uint64_t remote_addr = 0;     // remote TO
  std::uint32_t invalidate_stag = 0; // Send with Invalidate, Local Invalidate; a Bind's window
  // BindWindow: the window's new STag is remote_stag; it exposes this range of a region.
  std::uint32_t bind_region = 0;
  std::uint64_t bind_addr = 0, bind_length = 0;
  std::uint32_t bind_access = 0; // access:: remote rights, kZeroBased
  std::uint64_t immediate = 0;   // Immediate Data (8 octets)
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  Sgl sgl;
};

enum class WcStatus : std::uint8_t {
  Success,
  LocalLength, // message longer than the receive buffer, or over limit
  LocalQpOperation,
  LocalProtection,      // bad lkey / PD / bounds in a local SGE
  LocalAccess,          // local SGE lacks local write access
  Flushed,              // QP left RTS before this WR was processed
  BadResponse,          // Read/Atomic Response that does not match
  RemoteInvalidRequest, // peer: message too long, invalid QN/MSN, opcode
  RemoteAccess,         // peer: STag/bounds/rights violation
  RemoteOperation,      // peer: other remote operation error
  Fatal,                // connection lost / local catastrophic
  MwBind,               // a memory window bind that the table refused
};
std::string_view wc_status_name(WcStatus s);

enum class WcOpcode : std::uint8_t {
  Send,
  RdmaWrite,
  RdmaRead,
  CompareSwap,
  FetchAdd,
  Recv,
  BindWindow,
  LocalInvalidate,
};

// The completion opcode a send-queue work request reports.
WcOpcode completion_opcode(WrOpcode op);

struct Completion {
  std::uint64_t wr_id = 0;
  WcStatus status = WcStatus::Success;
  WcOpcode opcode = WcOpcode::Send;
  std::uint32_t byte_len = 0;
  bool recv = false;
  bool solicited = false;                   // delivered Send with SE
  std::optional<std::uint32_t> invalidated; // Send with Invalidate: the STag
  std::optional<std::uint64_t> immediate;   // Immediate Data

  static Completion make(std::uint64_t wr_id, WcStatus status, WcOpcode opcode,
                         std::uint32_t byte_len, bool recv) {
    Completion c;
    c.wr_id = wr_id;
    c.status = status;
    c.opcode = opcode;
    c.byte_len = byte_len;
    c.recv = recv;
    return c;
  }
};

enum class PostError : std::uint8_t {
  None,
  InvalidArgument, // bad opcode, too many SGEs, inline too long (EINVAL)
  QueueFull,       // ENOMEM, as verbs providers report a full queue
};

enum class QpState : std::uint8_t {
  Rts,       // Full Operation
  Closing,   // graceful close requested: drain the send queue, then FIN
  Closed,    // graceful close done: every WR completed
  Terminate, // error detected: sending the Terminate
  Error,     // every WR completed in error; the connection should close
};
std::string_view qp_state_name(QpState s);

struct QpError {
  TermCode code{};
  bool remote = false;   // the peer's Terminate (true) or detected here (false)
  bool consumer = false; // the consumer moved the QP to Error (flush): nothing went wrong
  std::string message;   // names the cause
};

// One phrase for a log line: the cause, and the Terminate that carried it either way, e.g.
// "MPA: CRC error (Terminate sent: layer 2 LLP, type 0, code 2)" or "peer sent Terminate:
// MPA: CRC error (layer 2 LLP, type 0, code 2)". `terminate_sent`: this end put a Terminate
// on the wire (Qp::terminate_sent()).
std::string describe(const QpError& e, bool terminate_sent);

struct QpConfig {
  // What the connection negotiated (or the defaults: IETF, CRC on, no markers, IRD/ORD 16).
  // Its p2p mode and role place the RTR (RFC 6581 §9.2): the initiator sends conn.rtr first,
  // the responder takes the first message for it.
  ConnParams conn;
  // This end's own limits.
  std::uint32_t qp_id = 1; // stream id for STag association (RFC 5041 §8.2)
  std::uint32_t pd = 1;
  std::size_t mulpdu = 1460 - 6 - 2; // largest ULPDU to send (MPA-040)
  std::uint32_t sq_depth = 1024;
  std::uint32_t rq_depth = 1024;
  std::uint32_t max_sge = kMaxSge;       // at most kMaxSge
  std::uint32_t max_inline = kMaxInline; // at most kMaxInline
  // HX-059 allows transparent recovery when a Send finds no receive buffer: hold the stream
  // (TCP then holds the sender, as IB's RNR does) until one is posted or the edge gives up
  // (rx_hold_expired). Off: the Terminate of RFC 5041 §7.2 at once.
  bool hold_for_buffer = false;
};

// The QP configuration for a connection that negotiated `p`, sending ULPDUs of at most
// `mulpdu` octets (MPA-040: from the EMSS; any size up to kMaxUlpdu once both ends agreed on
// large FPDUs). The local limits keep their defaults.
QpConfig qp_config_from(const ConnParams& p, std::size_t mulpdu);

// Shared receive queue: QPs take buffers from it when they need them. It has its own lock:
// the QPs that share it take buffers from their own threads.
class SharedRecvQueue {
public:
  explicit SharedRecvQueue(std::uint32_t depth) : q_(depth), depth_(depth) {}
  PostError post(const RecvWr& wr);
  std::optional<RecvWr> take();
  std::size_t size() const;
  std::uint32_t depth() const;
  // modify_srq max_wr: InvalidArgument below the WRs posted now.
  PostError set_depth(std::uint32_t depth);
  // The posted WRs, for flush when the SRQ is destroyed.
  std::vector<RecvWr> drain();

private:
  mutable std::mutex mu_;
  Ring<RecvWr> q_;
  std::uint32_t depth_;
};

class Qp final : private UlpduSink {
public:
  Qp(const QpConfig& config, MemoryTable& mem, SharedRecvQueue* srq = nullptr);
  Qp(const Qp&) = delete;
  Qp& operator=(const Qp&) = delete;

  const QpConfig& config() const { return cfg_; }
  QpState state() const { return state_; }
  const std::optional<QpError>& error() const { return error_; }
  // This end's Terminate left (the LLP took all of it).
  bool terminate_sent() const { return terminate_sent_; }

  // ---- work requests (post after error: completes with Flushed) ----
  PostError post_send(const SendWr& wr);
  PostError post_recv(const RecvWr& wr);

  // ---- transmit ----
  // Appends the gather list of what is ready to send (at most `max_iov` pieces). With
  // `by_ref`, one flag per piece appended: 1 where the I/O edge may hand the octets to the LLP
  // by reference instead of copying them (vmsplice), because nothing changes them until the
  // peer has them: the payload of an RDMA Read Response, in the Data Source's registered
  // memory, whose consumer learns that the Read is done only from the requester (RFC 5040: a
  // Read Response completes nothing at the Data Source). Never a Send's or Write's payload:
  // its completion lets the consumer reuse the buffer at once (DDP-052); never with CRC on,
  // where the frame carries a copy, the octets its CRC covers (framing.hpp).
  void tx_gather(std::vector<ConstBytes>& iov, std::size_t max_iov = 1024,
                 std::vector<std::uint8_t>* by_ref = nullptr);
  // `n` octets of the gather list were written.
  void tx_advance(std::size_t n);
  bool tx_pending();
  // Stream octets framed so far (what the peer's rx_ended() reaches once it has processed all
  // of it, when nothing is pending here and the I/O edge holds nothing back).
  std::uint64_t tx_framed() const { return tx_.stream_offset(); }
  // From here on the stream goes through memory that both ends map (uiwarp's same-host ring,
  // docs/extensions.md), where no octet is damaged on the way: the FPDUs framed from now on
  // leave their CRC field unset, as with CRC off (MPA-013), and the peer checks none from this
  // octet on (rx_crc_off_from). Call with nothing framed and unsent (tx_pending() false).
  void tx_crc_off() { tx_.crc_off(); }

  // ---- receive ----
  // Where to read next; empty while the stream is held (rx_held): read nothing then.
  MutBytes rx_next() { return rx_.next(); }
  void rx_advance(std::size_t n) { rx_.advance(n); }
  // Takes received octets; returns how many (fewer than given once the stream is held).
  std::size_t rx_feed(ConstBytes in) { return rx_.feed(in); }
  // Stream octets of the FPDUs processed to their end (FpduRx::ended_offset).
  std::uint64_t rx_ended() const { return rx_.ended_offset(); }
  // The FPDUs from stream octet `offset` on have their CRC field unchecked: the peer's
  // tx_crc_off() at that octet.
  void rx_crc_off_from(std::uint64_t offset) { rx_.crc_off_from(offset); }
  // A Send is waiting for a receive buffer (QpConfig::hold_for_buffer).
  bool rx_held() const { return rx_hold_; }
  // Looks again for the buffer a held Send needs (after an SRQ post; post_recv does it).
  void rx_retry();
  // The edge gives up waiting: the held Send gets the no-buffer Terminate (HX-059).
  void rx_hold_expired();

  // ---- connection events ----
  // TCP FIN (graceful) or RST/loss from the peer (RFC 5044 §8 code 1, HX-038).
  void on_peer_closed(bool graceful);
  // Graceful close (RFC 5041 §6.2.1): send what is queued, then the edge sends FIN.
  void close();
  // True when the edge should shut down TCP: Closed, or Error with the
  // Terminate (if any) written.
  bool wants_disconnect() const;
  // Local abort (modify to ERR, destroy): flush everything, no Terminate.
  void flush();
  // Local catastrophic error: Terminate and flush (RFC 5040 §7.1).
  void fail(TermCode code, std::string message);

  // ---- completions ----
  std::optional<Completion> poll();
  // The completion poll() would return next, left in place (nullptr: none).
  const Completion* peek() const { return cq_.empty() ? nullptr : &cq_.front(); }
  std::size_t completions_ready() const { return cq_.size(); }
  // Set when a Send with SE (or Immediate Data with SE) was delivered since the
  // last call (for solicited-only CQ notification).
  bool take_solicited() { return std::exchange(solicited_, false); }

  // Outstanding counts (tests and statistics).
  std::size_t sq_outstanding() const { return sq_.size(); }
  std::size_t rq_outstanding() const { return rq_.size(); }
  std::size_t reads_outstanding() const { return orq_.size(); }
  std::size_t inbound_reads_queued() const { return irq_.size(); }

private:
  // ---- send queue ----
  struct SqEntry {
    SendWr wr;
    std::uint32_t byte_len = 0;
    bool done = false;
    WcStatus status = WcStatus::Success;
    int stage = 0; // messages of this WR already started (Write with Immediate has two)
  };
  using Pieces = StaticVector<ConstBytes, kMaxSge>;
  // An outbound message being segmented.
  struct TxMsg {
    DdpHeader hdr;                                           // template; MO/TO/L set per segment
    StaticVector<std::byte, kAtomicRequestHdrLen> rdmap_hdr; // Read Request / Atomic / Immediate
    Pieces payload;                                          // resolved local memory, in order
    std::uint64_t length = 0;
    std::uint64_t sent = 0;
    std::size_t piece = 0; // cursor into payload
    std::size_t piece_off = 0;
    SqEntry* entry = nullptr; // completes when fully sent (if it ends the WR)
    bool completes_entry = false;
    // Read Response: re-resolve the source each segment (it may be deregistered).
    std::optional<ReadRequestHeader> read_response;
  };
  struct QueuedFrame {
    TxFrame frame;
    SqEntry* completes = nullptr;
    bool is_terminate = false;
    bool read_response = false; // its payload may go by reference (tx_gather)
    // The unsent rest of a frame that was partly written when its work request
    // was flushed: copied, because the WR's memory may go away with the WR.
    std::vector<std::byte> owned;
    std::size_t owned_off = 0;
    std::size_t remaining() const {
      return owned.empty() ? frame.remaining() : owned.size() - owned_off;
    }
    bool untouched() const { return owned.empty() && frame.remaining() == frame.size(); }
  };
  // An RDMA Read or Atomic we sent and await the response to (RFC 5040 §5.2.2).
  struct Outstanding {
    Outstanding() = default;
    explicit Outstanding(SqEntry* e) : entry(e) {}
    SqEntry* entry = nullptr;
    std::uint32_t sink_stag = 0;
    std::uint64_t sink_to = 0;
    std::uint32_t length = 0;
    std::uint32_t received = 0;
    bool atomic = false;
    std::uint32_t req_id = 0;
    StaticVector<MutBytes, kMaxSge> sink; // resolved local buffers
  };
  // An inbound Read (or Atomic) Request waiting for its response (IRQ).
  struct InboundRead {
    ReadRequestHeader req{};
    bool atomic = false;
    AtomicResponseHeader atomic_resp{};
  };
  struct RqEntry {
    RqEntry() = default;
    RqEntry(const RecvWr& w, std::uint64_t cap) : wr(w), capacity(cap) {}
    RecvWr wr;
    std::uint64_t capacity = 0;
    std::uint32_t length = 0;     // message length once the last segment arrived
    std::uint64_t placed_end = 0; // highest MO + length any segment of it placed (HX-063)
    bool last_seen = false;
    bool resolved = false;
    StaticVector<MutBytes, kMaxSge> spans; // the SGEs resolved to host memory
    bool solicited = false;
    std::optional<std::uint32_t> invalidated;
    std::optional<std::uint64_t> immediate;
    std::optional<WcStatus> error; // completes with this status at flush
  };
  struct PendingTerm {
    TermCode code;
    std::string message;
    bool with_header;
    bool with_rdma_header;
    bool malformed_terminate = false; // the peer's Terminate is bad: surface, never answer
  };

  // qp_tx.cpp
  bool start_next_message();
  bool run_local_operation(SqEntry& e); // a Bind or Local Invalidate: false on an error
  bool run_local_operations();          // those at the head of the send queue
  // A work request that failed locally: completes with `s`, and the stream ends (Terminate).
  bool fail_local(SqEntry& e, WcStatus s, std::string_view what);
  bool build_frame();
  std::optional<WcStatus> resolve_local(const Sgl& sgl, std::uint32_t need, Pieces& out,
                                        std::uint64_t& total);
  void queue_terminate(const TerminateHeader& t);
  void segment_payload(TxMsg& m, std::size_t max, Pieces& out);

  // qp_rx.cpp (UlpduSink)
  std::optional<TermCode> ulpdu_begin(std::size_t len) override;
  MutBytes ulpdu_dest(std::size_t offset, std::size_t max) override;
  std::optional<TermCode> ulpdu_landed(std::size_t offset, std::size_t n) override;
  void ulpdu_end(std::optional<TermCode> error) override;
  bool ulpdu_hold() const override { return rx_hold_; }
  std::optional<TermCode> header_landed(std::size_t offset, std::size_t n);
  std::optional<TermCode> on_header();
  std::optional<TermCode> check_tagged();
  std::optional<TermCode> check_untagged();
  std::optional<TermCode> deliver();
  std::optional<TermCode> deliver_send();
  std::optional<TermCode> deliver_read_request();
  std::optional<TermCode> deliver_atomic_request();
  void deliver_terminate();
  void malformed_terminate(std::string message);
  std::optional<TermCode> reject_terminate(std::string message);
  RqEntry* rq_entry(std::uint32_t k);
  static MutBytes span_dest(std::span<const MutBytes> spans, std::uint64_t off, std::size_t max);
  std::optional<TermCode> reject(TermCode code, std::string message, bool with_header = true,
                                 bool with_rdma_header = false);

  // qp.cpp
  void complete_sq();
  void push_completion(const Completion& c);
  void terminate(TermCode code, std::string message, bool with_header, bool with_rdma_header);
  void enter_error(std::optional<WcStatus> first_status);
  void flush_all(std::optional<WcStatus> first_status);
  void note_error(TermCode code, bool remote, std::string message);

  QpConfig cfg_;
  MemoryTable& mem_;
  SharedRecvQueue* srq_;
  QpState state_ = QpState::Rts;
  std::optional<QpError> error_;

  // transmit
  FpduTx tx_;
  // The queues are rings sized in the constructor; pointers into sq_, orq_ and rq_ (frames
  // to the WR they complete, the Read a response is placed for, the buffer a Send fills)
  // stay valid because the rings never grow past those sizes.
  Ring<SqEntry> sq_;
  std::size_t sq_next_ = 0; // first SQ entry not yet started
  std::optional<TxMsg> cur_;
  Ring<QueuedFrame> frames_; // slots keep their TxFrame buffers for reuse
  Ring<Outstanding> orq_;
  Ring<InboundRead> irq_;
  bool prefer_irq_ = false;
  bool tx_allowed_; // RFC 5044 §7.1.2 r4: the responder waits for the first FPDU
  bool terminate_queued_ = false;
  bool terminate_sent_ = false;
  std::uint32_t tx_msn_[4] = {1, 1, 1, 1};
  std::uint32_t next_atomic_id_ = 1;
  std::array<std::byte, kUntaggedHdrLen + kAtomicRequestHdrLen> hdr_scratch_{}; // frame header
  bool rtr_pending_ = false;  // initiator: the RTR goes first (RFC 6581 §5, EMPA-012)
  bool rtr_expected_ = false; // responder: the first message is the RTR, hidden (RFC 6581 §9.2)

  // receive
  FpduRx rx_;
  Ring<RqEntry> rq_;
  std::uint32_t rx_msn_[4] = {1, 1, 1, 1}; // next expected MSN per QN
  std::size_t ulpdu_len_ = 0;
  std::size_t hdr_need_ = 0; // header octets to collect before placement
  bool hdr_done_ = false;
  std::array<std::byte, kUntaggedHdrLen + kAtomicRequestHdrLen> hdr_buf_{};
  std::array<std::byte, 64> term_buf_{};
  std::array<std::byte, 4096> discard_{};
  DdpHeader seg_;               // the current segment's header
  std::size_t seg_hdr_len_ = 0; // DDP + RDMAP header octets
  std::byte* place_ = nullptr;  // tagged Write: host address of the payload
  RqEntry* rx_wqe_ = nullptr;   // untagged Send: the buffer
  Outstanding* rx_read_ = nullptr;
  bool rx_stopped_ = false;  // after an error or a Terminate: drop everything
  bool rx_rejected_ = false; // this segment failed validation: reported at its end
  bool rtr_swallow_ = false; // the current message is the hidden Send RTR
  bool rx_hold_ = false;     // the current Send waits for a receive buffer
  bool hold_expired_ = false;
  std::size_t rx_rdmap_hdr_ = 0;
  std::optional<PendingTerm> pending_term_;
  bool peer_closed_ = false;

  // completions
  Ring<Completion> cq_;
  bool solicited_ = false;
};

} // namespace iwarp
