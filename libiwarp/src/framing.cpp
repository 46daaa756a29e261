// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "iwarp/framing.hpp"

#include "iwarp/crc32c.hpp"
#include "iwarp/place.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace iwarp {

namespace {
// Payload copied and CRCed in blocks of this size: well inside L1d.
constexpr std::size_t kCopyBlock = 8192;
} // namespace

// ---- TxFrame -----------------------------------------------------------------

void TxFrame::add_internal(ConstBytes b) {
  assert(arena_used_ + b.size() <= arena_.size());
  std::memcpy(arena_.data() + arena_used_, b.data(), b.size());
  // Adjacent internal octets share one piece, so a header is one iovec.
  if (!pieces_.empty() && !pieces_.back().ext && !pieces_.back().copied &&
      pieces_.back().off + pieces_.back().len == arena_used_) {
    pieces_.back().len += static_cast<std::uint32_t>(b.size());
  } else {
    pieces_.push_back({nullptr, static_cast<std::uint32_t>(arena_used_),
                       static_cast<std::uint32_t>(b.size()), false});
  }
  arena_used_ += b.size();
  total_ += b.size();
}

void TxFrame::reserve(std::size_t max_ulpdu, bool markers, std::size_t payload_pieces) {
  // Header, payload, PAD+CRC; each marker adds itself and splits one piece in two.
  std::size_t n = 4 + payload_pieces;
  if (markers) n += 2 * ((kMpaLenField + max_ulpdu + 3 + kCrcLen) / kMarkerSpacing + 2);
  pieces_.reserve(n);
}
void TxFrame::add_external(ConstBytes b) {
  if (b.empty()) return;
  pieces_.push_back({b.data(), 0, static_cast<std::uint32_t>(b.size()), false});
  total_ += b.size();
}

std::byte* TxFrame::copy_area(std::size_t n) {
  if (copy_.size() < n) copy_.resize(n);
  return copy_.data();
}

void TxFrame::add_copied(std::size_t off, std::size_t len) {
  if (len == 0) return;
  assert(off + len <= copy_.size());
  pieces_.push_back(
      {nullptr, static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(len), true});
  total_ += len;
}

void TxFrame::gather(std::vector<ConstBytes>& out, std::vector<std::uint8_t>* external) const {
  for (std::size_t i = first_piece_; i < pieces_.size(); ++i) {
    ConstBytes b = piece_bytes(pieces_[i]);
    out.push_back(i == first_piece_ ? b.subspan(first_off_) : b);
    if (external) external->push_back(pieces_[i].ext ? 1 : 0);
  }
}

bool TxFrame::consume(std::size_t n) {
  assert(n <= remaining());
  sent_ += n;
  while (n > 0) {
    std::size_t left = pieces_[first_piece_].len - first_off_;
    if (n < left) {
      first_off_ += n;
      break;
    }
    n -= left;
    ++first_piece_;
    first_off_ = 0;
  }
  return sent_ == total_;
}

std::vector<std::byte> TxFrame::to_bytes() const {
  std::vector<std::byte> out;
  out.reserve(total_);
  for (const Piece& p : pieces_) {
    ConstBytes b = piece_bytes(p);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

void TxFrame::clear() {
  arena_used_ = 0;
  pieces_.clear();
  total_ = sent_ = first_piece_ = first_off_ = 0;
}

// ---- FpduTx ------------------------------------------------------------------

void FpduTx::emit_marker(TxFrame& out, std::uint16_t fpduptr, bool crc_covered) {
  // RFC 5044 §4.2: RESERVED(16)=0 | FPDUPTR(16).
  std::array<std::byte, kMarkerLen> m{};
  store_be16(m.data() + 2, fpduptr);
  out.add_internal(m);
  if (crc_ && crc_covered) crc_state_ = crc32c_update(crc_state_, m);
  pos_ += kMarkerLen;
}

void FpduTx::emit(TxFrame& out, ConstBytes b, bool internal, bool crc_covered, bool copied) {
  while (!b.empty()) {
    std::size_t chunk = b.size();
    if (markers_) {
      if (pos_ % kMarkerSpacing == 0) {
        // RFC 5044 §4.3: FPDUPTR points back to this FPDU's ULPDU_Length.
        emit_marker(out, static_cast<std::uint16_t>(pos_ - fpdu_start_), crc_covered);
        continue;
      }
      chunk = std::min<std::size_t>(chunk, kMarkerSpacing - pos_ % kMarkerSpacing);
    }
    ConstBytes piece = b.first(chunk);
    if (internal)
      out.add_internal(piece);
    else if (copied)
      out.add_copied(static_cast<std::size_t>(piece.data() - out.copy_.data()), piece.size());
    else
      out.add_external(piece);
    if (crc_ && crc_covered) crc_state_ = crc32c_update(crc_state_, piece);
    pos_ += chunk;
    b = b.subspan(chunk);
  }
}

void FpduTx::frame(ConstBytes header, std::span<const ConstBytes> payload, TxFrame& out) {
  out.clear();
  std::size_t ulpdu_len = header.size();
  for (ConstBytes p : payload)
    ulpdu_len += p.size();
  assert(ulpdu_len <= kMaxUlpdu && header.size() <= 128);

  if (!markers_) {
    frame_plain(header, payload, ulpdu_len, out);
    return;
  }
  crc_state_ = kCrc32cInit;
  // A marker due exactly at the FPDU start belongs to this FPDU, points at
  // offset 0 and is CRC-covered (RFC 5044 §4.3, §4.4; MPA-035).
  if (markers_ && pos_ % kMarkerSpacing == 0) {
    fpdu_start_ = pos_ + kMarkerLen;
    emit_marker(out, 0, true);
  } else {
    fpdu_start_ = pos_;
  }

  std::array<std::byte, kMpaLenField> len{};
  store_be16(len.data(), static_cast<std::uint16_t>(ulpdu_len));
  emit(out, len, true, true);
  emit(out, header, true, true);
  if (crc_) {
    // The CRC and the wire take the same octets: the copy (see framing.hpp).
    const std::size_t n = ulpdu_len - header.size();
    std::byte* dst = out.copy_area(n);
    for (ConstBytes p : payload) {
      if (!p.empty()) std::memcpy(dst, p.data(), p.size());
      dst += p.size();
    }
    emit(out, ConstBytes(out.copy_.data(), n), false, true, true);
  } else {
    for (ConstBytes p : payload)
      emit(out, p, false, true);
  }
  static constexpr std::array<std::byte, 3> kZeroPad{};
  emit(out, ConstBytes(kZeroPad).first(fpdu_pad(ulpdu_len)), true, true);

  // RFC 5044 §4.4 (MPA-027): a marker that immediately follows the PAD, i.e.
  // lands right before the CRC field, is covered by this FPDU's CRC, so it has
  // to go out before the CRC value is computed (emit() would only place it
  // once the first CRC octet is written, after the value was taken).
  if (markers_ && pos_ % kMarkerSpacing == 0)
    emit_marker(out, static_cast<std::uint16_t>(pos_ - fpdu_start_), true);

  // RFC 5044 §4.4: without CRC the field is still present (MPA-013); zero it.
  std::array<std::byte, kCrcLen> crc{};
  if (crc_) store_crc_le(crc.data(), crc32c_finish(crc_state_));
  // A marker inside the CRC field would not be covered by any CRC. (FPDUs are
  // multiples of 4 octets starting at multiples of 4, so none ever lands there.)
  for (std::size_t i = 0; i < kCrcLen; ++i)
    emit(out, ConstBytes(crc).subspan(i, 1), true, false);
}

void FpduTx::frame_plain(ConstBytes header, std::span<const ConstBytes> payload,
                         std::size_t ulpdu_len, TxFrame& out) {
  // Without markers the length field and the header are one contiguous run, and
  // PAD and CRC another: one CRC call per run and per payload piece. (A call per
  // field cost each 4 KiB frame about twice the CRC of its payload.)
  std::array<std::byte, kMpaLenField + 128> head;
  store_be16(head.data(), static_cast<std::uint16_t>(ulpdu_len));
  if (!header.empty()) std::memcpy(head.data() + kMpaLenField, header.data(), header.size());
  ConstBytes head_bytes = ConstBytes(head).first(kMpaLenField + header.size());
  out.add_internal(head_bytes);
  std::uint32_t crc = kCrc32cInit;
  if (crc_) {
    crc = crc32c_update(crc, head_bytes);
    // The CRC and the wire take the same octets: the copy (see framing.hpp). Copy and CRC
    // go block by block, so the CRC reads what the copy just wrote while it is in L1.
    // (ISA-L stitches a copy to the T10-DIF CRC only, not to crc32_iscsi.)
    const std::size_t n = ulpdu_len - header.size();
    std::byte* const base = out.copy_area(n);
    std::byte* dst = base;
    for (ConstBytes p : payload) {
      while (!p.empty()) {
        const std::size_t k = std::min(p.size(), kCopyBlock);
        std::memcpy(dst, p.data(), k);
        crc = crc32c_update(crc, ConstBytes(dst, k));
        dst += k;
        p = p.subspan(k);
      }
    }
    out.add_copied(0, n);
  } else {
    for (ConstBytes p : payload)
      out.add_external(p);
  }
  std::size_t pad = fpdu_pad(ulpdu_len);
  std::array<std::byte, 3 + kCrcLen> tail{}; // PAD is zero (RFC 5044 §4.1)
  if (crc_ && pad) crc = crc32c_update(crc, ConstBytes(tail).first(pad));
  // RFC 5044 §4.4: without CRC the field is still present (MPA-013), zero.
  if (crc_) store_crc_le(tail.data() + pad, crc32c_finish(crc));
  out.add_internal(ConstBytes(tail).first(pad + kCrcLen));
  fpdu_start_ = pos_;
  pos_ += kMpaLenField + ulpdu_len + pad + kCrcLen;
}

std::vector<std::byte> FpduTx::frame_bytes(ConstBytes header, std::span<const ConstBytes> payload) {
  TxFrame f;
  frame(header, payload, f);
  return f.to_bytes();
}

// ---- FpduRx ------------------------------------------------------------------

void FpduRx::fail(TermCode c) {
  if (!error_) error_ = c;
}

void FpduRx::enter(State s) {
  state_ = s;
  got_ = 0;
}

std::size_t FpduRx::until_marker() const {
  if (!markers_) return SIZE_MAX;
  return kMarkerSpacing - pos_ % kMarkerSpacing;
}

MutBytes FpduRx::next() {
  if (error_) {
    dest_ = scratch_;
    return dest_;
  }
  if (sink_ && sink_->ulpdu_hold()) {
    dest_ = {};
    return dest_;
  }
  if (markers_ && (in_marker_ || pos_ % kMarkerSpacing == 0)) {
    if (!in_marker_) {
      in_marker_ = true;
      marker_got_ = 0;
    }
    dest_ = MutBytes(marker_).subspan(marker_got_);
    return dest_;
  }
  std::size_t room = until_marker();
  switch (state_) {
  case State::Length:
    dest_ = MutBytes(small_).subspan(got_, std::min(kMpaLenField - got_, room));
    break;
  case State::Ulpdu: {
    std::size_t max = std::min(ulpdu_len_ - got_, room);
    dest_ = sink_->ulpdu_dest(got_, max);
    assert(!dest_.empty() && dest_.size() <= max);
    break;
  }
  case State::Pad: dest_ = MutBytes(small_).subspan(got_, std::min(pad_len_ - got_, room)); break;
  case State::Crc: dest_ = MutBytes(small_).subspan(got_, std::min(kCrcLen - got_, room)); break;
  }
  return dest_;
}

void FpduRx::advance(std::size_t n) {
  assert(n <= dest_.size());
  if (n == 0) return;
  pos_ += n;
  if (error_) return; // draining
  ConstBytes landed = dest_.first(n);

  if (in_marker_) {
    if (marker_got_ == 0) {
      // RFC 5044 §4.4 (MPA-027): a marker is CRC-covered unless it falls inside
      // the CRC field; one before the ULPDU_Length starts the next FPDU's CRC.
      marker_covered_ = !(state_ == State::Crc && got_ > 0);
      if (state_ == State::Length && got_ == 0) {
        crc_state_ = kCrcInitState;
        crc_started_ = true;
      }
    }
    if (crc_ && marker_covered_) crc_state_ = crc32c_update(crc_state_, landed);
    marker_got_ += n;
    if (marker_got_ < kMarkerLen) return;
    in_marker_ = false;
    // RFC 5044 §4.3: FPDUPTR (low 2 bits treated as 0, MPA-037) points back to the
    // ULPDU_Length of the FPDU holding the marker, or is 0 between FPDUs.
    std::uint64_t marker_pos = pos_ - kMarkerLen;
    std::uint16_t ptr = load_be16(marker_.data() + 2) & 0xfffc;
    bool between = state_ == State::Length && got_ == 0;
    std::uint16_t expect = between ? 0 : static_cast<std::uint16_t>(marker_pos - fpdu_start_);
    if (ptr != expect) marker_mismatch_ = true;
    return;
  }

  if (state_ == State::Length && got_ == 0) {
    fpdu_start_ = pos_ - n;
    if (fpdu_start_ >= crc_off_from_) crc_ = false;
    // The CRC already began at a leading marker, if there was one (MPA-027).
    if (!crc_started_) crc_state_ = kCrcInitState;
  }
  if (crc_ && state_ != State::Crc && !crc_deferred_)
    crc_state_ = crc32c_update(crc_state_, landed);
  got_ += n;

  switch (state_) {
  case State::Length:
    if (got_ < kMpaLenField) return;
    ulpdu_len_ = load_be16(small_.data());
    pad_len_ = fpdu_pad(ulpdu_len_);
    if (ulpdu_len_ > max_ulpdu_) {
      // HX-036: no code in RFC 5044; never buffer it, abort the stream.
      fail(term::mpa_local_catastrophic);
      if (sink_) sink_->ulpdu_end(error_);
      return;
    }
    if (auto e = sink_->ulpdu_begin(ulpdu_len_)) {
      fail(*e);
      sink_->ulpdu_end(error_);
      return;
    }
    enter(ulpdu_len_ ? State::Ulpdu : (pad_len_ ? State::Pad : State::Crc));
    return;
  case State::Ulpdu:
    if (auto e = sink_->ulpdu_landed(got_ - n, n)) {
      fail(*e);
      sink_->ulpdu_end(error_);
      return;
    }
    if (got_ < ulpdu_len_) return;
    enter(pad_len_ ? State::Pad : State::Crc);
    return;
  case State::Pad:
    // HX-033: PAD values are ignored (but CRC-covered).
    if (got_ == pad_len_) enter(State::Crc);
    return;
  case State::Crc: {
    if (got_ < kCrcLen) return;
    std::optional<TermCode> err;
    // MPA-013: with CRC off the field holds anything and is not checked.
    if (crc_ && load_crc_le(small_.data()) != crc32c_finish(crc_state_))
      err = term::mpa_crc_error;
    else if (marker_mismatch_)
      err = term::mpa_marker_mismatch; // HX-031: only when the CRC is good
    if (err) fail(*err);
    enter(State::Length);
    crc_started_ = false;
    marker_mismatch_ = false;
    sink_->ulpdu_end(err);
    ended_ = pos_;
    return;
  }
  }
}

std::size_t FpduRx::feed(ConstBytes in) {
  std::size_t total = in.size();
  // Without markers, the CRC-covered octets of an FPDU (length, ULPDU, PAD) are
  // contiguous in the input: CRC each such run with one call when it ends (at
  // the CRC field or the end of the input) instead of one call per field.
  crc_deferred_ = crc_ && !markers_;
  const std::byte* run = in.data();
  std::size_t run_len = 0;
  auto flush = [&] {
    // crc_ as it is now: a run lies in one FPDU, and crc_off_from turns CRC off between two.
    if (run_len && !error_ && crc_)
      crc_state_ = crc32c_update(crc_state_, ConstBytes(run, run_len));
    run_len = 0;
  };
  while (!in.empty()) {
    MutBytes d = next();
    if (d.empty()) break; // held
    std::size_t n = std::min(d.size(), in.size());
    place_bytes(d.data(), in.data(), n); // a program may watch these octets land

    if (crc_deferred_) {
      if (state_ == State::Crc || error_) {
        flush(); // before advance() compares the CRC
      } else {
        // advance() resets the CRC state at an FPDU's length field, which
        // starts a run (the previous one ended at the CRC field).
        if (run_len == 0) run = in.data();
        run_len += n;
      }
    }
    advance(n);
    in = in.subspan(n);
  }
  flush();
  crc_deferred_ = false;
  return total - in.size();
}

} // namespace iwarp
