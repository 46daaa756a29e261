// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA Startup Phase (RFC 5044 §7.1, RFC 6581, draft-carrier-rddp-rnic-interop):
// the Request/Reply exchange that turns a TCP connection into an MPA connection,
// as a state machine driven by received bytes and an explicit clock. It never
// touches a socket: the caller writes output(), feeds what it reads, calls
// on_timer() at deadline(), and hands the connection to the data path once
// state() is Established, with the negotiated parameters in result().
#pragma once

#include "iwarp/conn_params.hpp"
#include "iwarp/wire.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace iwarp {

using MpaClock = std::chrono::steady_clock;

struct RtrSet {
  bool send = false;
  bool write = false;
  bool read = false;
  bool any() const { return send || write || read; }
  bool has(RtrType t) const {
    return t == RtrType::Send ? send : t == RtrType::Write ? write : read;
  }
  friend bool operator==(const RtrSet&, const RtrSet&) = default;
};

// Local policy for one connection (uiwarpd's configuration, per connection).
struct MpaPolicy {
  std::uint8_t revision = 2;    // highest revision spoken: 1 (RFC 5044) or 2 (RFC 6581)
  bool enhanced = true;         // rev 2: send/accept the RFC 6581 enhanced data (S=1)
  bool crc = true;              // C bit we send (MPA-020: default on)
  bool crc_always = false;      // MC-07: keep CRC on even if both sides say C=0
  bool markers = false;         // M bit we send: we want markers in FPDUs sent to us
  bool permissive = false;      // IOP §5.3: accept RDMAC (rev 0) peers, V=0
  bool p2p = false;             // RFC 6581 A: peer-to-peer, explicit RTR
  RtrSet rtr{true, true, true}; // RTR types we can generate/accept
  std::uint16_t ird = 16;       // inbound RDMA Read limit we offer
  std::uint16_t ord = 16;       // outbound RDMA Reads we want
  std::uint16_t max_ird = 128;  // what we could raise IRD to (IR-02, IR-03, HX-015)
  std::uint16_t max_ord = 128;
  bool large_fpdu = false; // siw's private flag (kMpaFlagLargeFpdu)
  bool rfc7306 = false;    // offer RFC 7306 to uiwarp peers (kMpaFlagRfc7306, an extension)
  bool same_host = false;  // offer the same-host path to uiwarp peers (kMpaFlagSameHost)
  bool accept_unenhanced_reply = true;            // IM-11: rev1/S=0 Reply to an S=1 Request
  std::size_t max_private_data = kMaxPrivateData; // HX-008: local PD buffer
  // MPA-069: the whole exchange. 10 s, as Linux siw's initiator waits for the Reply
  // (MPAREQ_TIMEOUT; its responder waits 5 s for the Request, erdma 10 s and 20 s).
  std::chrono::milliseconds timeout{10000};
  // Not part of the exchange: how long the data path lets a Send that finds no receive
  // posted wait for one (HX-059) before it terminates; 0 terminates at once, as an RNIC or
  // siw does. uiwarpd's local policy, per device and connection like the rest, carried to the
  // QP in ConnParams.
  std::chrono::milliseconds recv_wait{2000};
};

// What the exchange negotiated (IOP §5.1, RFC 5044 §7.1.1, RFC 6581 §9): the connection's
// parameters, and what only the start-up itself uses.
struct MpaResult {
  // The data path's: set as the exchange goes; `initiator` and `recv_wait_ms` from the role
  // and the policy at the start.
  ConnParams conn;
  std::uint8_t peer_rev = 1;                // Rev the peer sent
  bool enhanced = false;                    // RFC 6581 enhanced data exchanged
  RtrSet peer_rtr;                          // RTR types the peer listed
  std::vector<std::byte> peer_private_data; // ULP private data from the peer
};

enum class MpaRole : std::uint8_t { Initiator, Responder };

enum class MpaState : std::uint8_t {
  AwaitRequest,    // responder: reading the Request
  RequestReceived, // responder: Request valid, waiting for accept() or reject()
  AwaitReply,      // initiator: Request sent (or queued), reading the Reply
  Established,     // Full Operation may begin; result() valid
  Rejected,        // reject sent or received; TCP stays open (RFC 5044 §7.1.2 r2/r3)
  Failed,          // error(); close TCP (after sending output(), e.g. a TERM)
};

struct MpaError {
  // MPA error code (RFC 5044 §8, RFC 6581 §8), e.g. term::mpa_invalid_frame.
  TermCode code = term::mpa_invalid_frame;
  // The Terminate to send before closing (RFC 6581 §9: codes 5, 6, 7 after an
  // accepted Reply); when set, output() holds the Terminate FPDU.
  bool terminate_sent = false;
  std::string message; // names the cause, e.g. "PD_Length 600 exceeds 512"
};

class MpaStartup {
public:
  // Initiator: queues the Request carrying `private_data` (<= 512, or 508 with
  // enhanced data; longer fails with an error at once).
  static MpaStartup initiator(const MpaPolicy& policy, std::vector<std::byte> private_data,
                              MpaClock::time_point now);
  static MpaStartup responder(const MpaPolicy& policy, MpaClock::time_point now);

  MpaRole role() const { return role_; }
  MpaState state() const { return state_; }

  // Bytes to write to the TCP connection, and how many were written.
  ConstBytes output() const { return {out_.data() + out_sent_, out_.size() - out_sent_}; }
  void consume_output(std::size_t n) { out_sent_ += n; }

  // Received bytes. Returns how many belong to the startup exchange: reading
  // stops right after the frame, so octets after it (the first FPDUs) are left
  // for the data path.
  std::size_t on_bytes(ConstBytes in);
  // The peer closed or reset TCP (HX-007: PD incomplete is a malformed frame).
  void on_peer_closed();
  // Timeouts (HX-004, HX-005, MPA-069): the whole exchange, until accept()/reject()
  // or the Reply. Once the exchange is over, deadline() is time_point::max().
  MpaClock::time_point deadline() const { return deadline_; }
  void on_timer(MpaClock::time_point now);

  // Responder, in RequestReceived: what the initiator asked for.
  const MpaFrame& request() const { return peer_frame_; }
  // Responder: accept (queues the Reply, state becomes Established) with local
  // IRD/ORD the ULP wants (nullopt: the policy's) and its private data. accept()
  // and reject() do nothing outside RequestReceived.
  // `same_host`: the offer to append when the Request had kMpaFlagSameHost and the policy
  // allows it (request().same_host tells whether to prepare one). It is left out, with the
  // bit, toward an RDMAC peer or when the private data leaves no room for it (512 octets in
  // all, RFC 5044 §7.1.1); result().same_host says whether it went.
  void accept(std::vector<std::byte> private_data, std::optional<std::uint16_t> ird = {},
              std::optional<std::uint16_t> ord = {}, std::optional<SameHostOffer> same_host = {});
  // Responder: reject with private data (Reply R=1); state becomes Rejected.
  // `required_ord` (RFC 6581 §9.1, PD-04) goes in the responder ORD field.
  void reject(std::vector<std::byte> private_data, std::optional<std::uint16_t> required_ord = {});

  const MpaResult& result() const { return result_; }
  const MpaError& error() const { return error_; }
  // Initiator after a Reply (accepted or rejected): the frame as received, a same-host offer
  // split from the ULP's private data.
  const MpaFrame& reply() const { return peer_frame_; }
  // The Request (initiator) or Reply (responder) we sent, e.g. the RTR types the
  // responder listed, against which the data path checks the RTR (HX-019).
  const MpaFrame& sent_frame() const { return local_frame_; }

  // A local failure without a more specific code (RFC 6581 §9.3, HX-020): state
  // becomes Failed with MPA code 5. Once Established, and before the data path
  // has sent anything, output() also gets the Terminate FPDU (L2/E0/C5).
  void local_error(std::string message);

private:
  MpaStartup() = default;

  static MpaStartup start(MpaRole role, const MpaPolicy& policy, MpaClock::time_point now);
  bool awaiting_frame() const;
  MpaKind expected_kind() const;
  bool peer_enhanced() const;
  std::size_t octets_wanted() const;
  void octets_added();
  void check_key(std::size_t n);
  bool check_header();
  bool check_revision();
  void process_frame();
  void process_reply();
  MpaFrame reply_frame(bool reject) const;
  void send_reply(bool reject, std::vector<std::byte> private_data, std::uint16_t ird,
                  std::uint16_t ord, std::optional<std::uint16_t> required_ord,
                  std::optional<SameHostOffer> same_host);
  void finish(MpaState state);
  void fail(TermCode code, std::string message);
  // RFC 6581 (mpa_enhanced.cpp).
  bool check_enhanced_flag();
  void take_peer_enhanced();
  void negotiate_enhanced();
  MpaEnhanced reply_enhanced(std::uint16_t ird, std::uint16_t ord);
  RtrSet reply_rtr(const RtrSet& requested) const;
  void fail_with_terminate(TermCode code, std::string message);
  // uiwarp's Res bits (mpa_private.cpp).
  bool uiwarp_answer(std::uint8_t flag) const;
  bool reply_has_offer() const;
  bool check_same_host_flag();
  std::size_t same_host_trailer() const;
  bool check_offer(const SameHostOffer& offer);
  void take_private_answers();
  void private_reply_bits(MpaFrame& f) const;
  void offer_same_host(MpaFrame& f, std::optional<SameHostOffer> offer) const;

  MpaRole role_ = MpaRole::Initiator;
  MpaState state_ = MpaState::AwaitRequest;
  MpaPolicy policy_;
  MpaFrame local_frame_;
  MpaFrame peer_frame_;
  MpaResult result_;
  MpaError error_;
  std::vector<std::byte> out_;
  std::size_t out_sent_ = 0;
  std::vector<std::byte> in_; // header + private data being received
  MpaFrameHeader header_;     // valid once kMpaFrameHeaderLen octets are in
  bool peer_rdmac_ = false;   // peer sent Rev 0 and we are permissive (IOP §5.3)
  MpaClock::time_point deadline_{};
};

} // namespace iwarp
