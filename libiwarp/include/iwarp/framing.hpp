// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA Full Operation framing (RFC 5044 §4-§6): FPDU = ULPDU_Length | ULPDU | PAD |
// CRC, with a 4-octet marker every 512 octets of stream when the receiver asked
// for markers. Sans-IO in both directions:
//  - FpduTx turns a ULPDU given as pieces (header octets, then spans of user
//    memory) into a gather list. With CRC on, the payload is copied into the frame
//    and the CRC taken over that copy, which is what goes on the wire: the CRC must
//    cover the octets actually sent (RFC 5044 §4.4) even when the program changes
//    its buffer while the work request is in flight (the target's contents are
//    then undefined, as verbs say, but the connection lives, as on an RNIC). With
//    CRC off, payload pieces are referenced and never copied here.
//  - FpduRx is told the bytes that arrived and says where the next ones go; the
//    ULPDU octets go wherever its UlpduSink says (for the data path: straight into
//    registered memory), so the socket can be read into place.
#pragma once

#include "iwarp/wire.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace iwarp {

// One FPDU ready for the wire, as a gather list. Octets the framer generates
// (markers, ULPDU_Length, DDP/RDMAP header copy, PAD, CRC) live in the frame, and
// so does a payload copied for its CRC; other payload pieces point at the caller's
// memory, which must stay mapped until the frame has been written.
class TxFrame {
public:
  // Appends this frame's remaining pieces to `out` (for writev); with `external`, one flag
  // per piece appended: 1 for the referenced payload, 0 for octets of the frame's own
  // (header, markers, a copied payload, PAD, CRC).
  void gather(std::vector<ConstBytes>& out, std::vector<std::uint8_t>* external = nullptr) const;
  std::size_t remaining() const { return total_ - sent_; }
  std::size_t size() const { return total_; }
  std::size_t piece_count() const { return pieces_.size() - first_piece_; }
  // `n` more octets were written; returns true when the frame is fully sent.
  bool consume(std::size_t n);
  // Copy of the whole frame (tests, the protocol demo, the startup machine).
  std::vector<std::byte> to_bytes() const;
  void clear();
  // Sizes the gather list for FPDUs of up to `max_ulpdu` octets with that many payload
  // pieces, so that building frames does not allocate.
  void reserve(std::size_t max_ulpdu, bool markers, std::size_t payload_pieces = 16);

private:
  friend class FpduTx;
  struct Piece {
    const std::byte* ext; // nullptr: octets of the frame's own, at arena_ or copy_ [off]
    std::uint32_t off;
    std::uint32_t len;
    bool copied; // at copy_[off]
  };
  ConstBytes piece_bytes(const Piece& p) const {
    if (p.ext) return {p.ext, p.len};
    return {(p.copied ? copy_.data() : arena_.data()) + p.off, p.len};
  }
  void add_internal(ConstBytes b);
  void add_external(ConstBytes b);
  // Room for `n` payload octets copied into the frame (grows once per slot, then reused).
  std::byte* copy_area(std::size_t n);
  // copy_[off, off + len) as a piece.
  void add_copied(std::size_t off, std::size_t len);

  // Markers: at most one per 512 octets of a maximum FPDU, plus header, PAD, CRC.
  static constexpr std::size_t kArenaSize =
      (kMpaLenField + kMaxUlpdu + 3 + kCrcLen) / kMarkerSpacing * kMarkerLen + 2 * kMarkerLen +
      kMpaLenField + 128 + 3 + kCrcLen;
  std::array<std::byte, kArenaSize> arena_{};
  std::size_t arena_used_ = 0;
  std::vector<std::byte> copy_; // the payload, when its CRC is taken (FpduTx with CRC on)
  std::vector<Piece> pieces_;
  std::size_t total_ = 0;
  std::size_t sent_ = 0;
  std::size_t first_piece_ = 0; // first piece not fully sent
  std::size_t first_off_ = 0;   // octets of it already sent
};

// Transmit half of one MPA connection.
class FpduTx {
public:
  FpduTx() = default;
  FpduTx(bool crc, bool markers) : crc_(crc), markers_(markers) {}

  // Frames one ULPDU: `header` (copied; at most 128 octets) followed by
  // `payload` (referenced). header + payload must not exceed kMaxUlpdu.
  void frame(ConstBytes header, std::span<const ConstBytes> payload, TxFrame& out);
  // Convenience: frame and return the octets.
  std::vector<std::byte> frame_bytes(ConstBytes header, std::span<const ConstBytes> payload = {});

  // Forgets the last `octets` of the stream: frames built but never written,
  // which a Terminate replaces (they must be the tail of what was framed).
  void rewind(std::size_t octets) { pos_ -= octets; }
  // Octets of stream produced so far (markers included), for marker placement.
  std::uint64_t stream_offset() const { return pos_; }
  bool crc() const { return crc_; }
  bool markers() const { return markers_; }
  // The FPDUs framed from now on carry the CRC field unset (MPA-013) and their payload by
  // reference: the stream goes on through memory both ends map, where no octet changes on the
  // way (uiwarp's same-host ring, FpduRx::crc_off_from at the other end).
  void crc_off() { crc_ = false; }

private:
  // Appends `b`, splitting it at marker positions; `fpdu_start` is the stream
  // offset of the ULPDU_Length field the markers point back to.
  // `copied`: `b` lies in out's copy area (a payload copied for its CRC).
  void emit(TxFrame& out, ConstBytes b, bool internal, bool crc_covered, bool copied = false);
  void emit_marker(TxFrame& out, std::uint16_t fpduptr, bool crc_covered);
  void frame_plain(ConstBytes header, std::span<const ConstBytes> payload, std::size_t ulpdu_len,
                   TxFrame& out); // no markers: fewer, larger CRC calls

  bool crc_ = true;
  bool markers_ = false;
  std::uint64_t pos_ = 0;
  std::uint64_t fpdu_start_ = 0;
  std::uint32_t crc_state_ = 0;
};

// Where a received ULPDU goes. The deframer calls these in order, for each FPDU:
// ulpdu_begin, then ulpdu_dest/ulpdu_landed pairs until `len` octets landed, then
// ulpdu_end. Between any two of them the sink may hold the stream (ulpdu_hold): the
// deframer then takes no more octets until it stops holding.
class UlpduSink {
public:
  virtual ~UlpduSink() = default;
  // ULPDU_Length octets follow. Returning an error stops the stream (the
  // deframer reports it through ulpdu_end and delivers nothing more).
  virtual std::optional<TermCode> ulpdu_begin(std::size_t len) = 0;
  // Where the ULPDU octets from `offset` on go; at least 1 and at most `max` octets.
  virtual MutBytes ulpdu_dest(std::size_t offset, std::size_t max) = 0;
  // `n` octets landed in the span ulpdu_dest returned. An error stops the stream.
  virtual std::optional<TermCode> ulpdu_landed(std::size_t offset, std::size_t n) = 0;
  // The FPDU is complete; `error` is a CRC or marker error (RFC 5044 §8) if any.
  virtual void ulpdu_end(std::optional<TermCode> error) = 0;
  // True while the sink cannot take the stream's next octets (a Send waiting for a
  // receive buffer): next() is then empty and feed() stops, leaving them to TCP.
  virtual bool ulpdu_hold() const { return false; }
};

// Receive half of one MPA connection (RFC 5044 §5.2, §6: in-order receiver that
// finds FPDU boundaries through ULPDU_Length and checks every marker).
class FpduRx {
public:
  FpduRx() = default;
  FpduRx(bool crc, bool markers, std::size_t max_ulpdu = kMaxUlpdu)
      : crc_(crc), markers_(markers), max_ulpdu_(max_ulpdu) {}

  void set_sink(UlpduSink* sink) { sink_ = sink; }

  // Where the next received octets go; empty only while the sink holds the stream. After
  // an error it is a scratch area: the stream is drained and ignored (RFC 5044 §8, MPA-074).
  MutBytes next();
  // `n` octets (<= next().size()) were written to next().
  void advance(std::size_t n);
  // Copies `in` through next()/advance(); returns octets consumed (all of them, unless the
  // sink started holding the stream).
  std::size_t feed(ConstBytes in);

  // The first error seen, if any (MPA code, or whatever the sink returned).
  std::optional<TermCode> error() const { return error_; }
  std::uint64_t stream_offset() const { return pos_; }
  // Stream octets of the FPDUs the sink has finished with (ulpdu_end returned), markers
  // included: what the peer sent is all processed once this reaches its stream_offset().
  std::uint64_t ended_offset() const { return ended_; }
  // True when no FPDU is partly received (a clean point to stop or to close).
  bool at_fpdu_boundary() const { return state_ == State::Length && got_ == 0; }
  // The FPDUs that begin at stream octet `offset` or later have their CRC field unchecked, as
  // with CRC off (MPA-013): the peer's FpduTx::crc_off() at that octet.
  void crc_off_from(std::uint64_t offset) { crc_off_from_ = offset; }

private:
  enum class State { Length, Ulpdu, Pad, Crc };
  void fail(TermCode c);
  void enter(State s);
  std::size_t until_marker() const;

  bool crc_ = true;
  bool markers_ = false;
  std::size_t max_ulpdu_ = kMaxUlpdu;
  std::uint64_t crc_off_from_ = UINT64_MAX;
  UlpduSink* sink_ = nullptr;

  State state_ = State::Length;
  std::uint64_t pos_ = 0;        // stream octets consumed, markers included
  std::uint64_t fpdu_start_ = 0; // stream offset of the current ULPDU_Length
  std::uint64_t ended_ = 0;      // stream offset after the last FPDU ulpdu_end saw
  std::size_t got_ = 0;          // octets of the current field received
  std::size_t ulpdu_len_ = 0;
  std::size_t pad_len_ = 0;
  std::uint32_t crc_state_ = kCrcInitState;
  bool marker_mismatch_ = false;
  bool crc_deferred_ = false; // feed() CRCs contiguous runs of input itself
  bool crc_started_ = false;  // a leading marker began this FPDU's CRC
  bool in_marker_ = false;
  std::size_t marker_got_ = 0;
  bool marker_covered_ = false;
  std::array<std::byte, 4> small_{}; // ULPDU_Length, PAD, CRC, marker octets
  std::array<std::byte, kMarkerLen> marker_{};
  MutBytes dest_{}; // what next() handed out
  std::optional<TermCode> error_;
  std::array<std::byte, 4096> scratch_{};

  static constexpr std::uint32_t kCrcInitState = 0xffffffffu;
};

} // namespace iwarp
