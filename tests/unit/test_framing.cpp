// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA Full Operation framing (RFC 5044 §4-§6, §8): FpduTx against the RFC 5044
// Fig. 5/6 vectors (requirements Appendix A), FpduTx -> FpduRx round trips under
// every segmentation, marker placement and CRC coverage (MPA-027, MPA-033..037,
// MC-08..MC-10), the Full Operation hostile inputs HX-030..HX-036, and the
// TxFrame gather list under partial writes.
#include "catch_compat.hpp"
#include "hex.hpp"
#include "iwarp/crc32c.hpp"
#include "iwarp/framing.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

using namespace iwarp;

namespace {

using test::Bytes;
using test::hx;

std::string hex(ConstBytes b) { return test::hex(b, " "); }

Bytes random_bytes(std::mt19937& rng, std::size_t n) {
  Bytes b(n);
  for (auto& x : b)
    x = std::byte(rng() & 0xff);
  return b;
}

Bytes pattern(std::size_t n, unsigned seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = std::byte((i * 31 + seed * 7 + (i >> 8)) & 0xff);
  return b;
}

// ---- receive side: a sink that collects ULPDUs -------------------------------

// Collects each ULPDU into a vector, handing out destination spans of varying
// small sizes, and counts every breach of the UlpduSink call protocol (cheaper
// than a Catch assertion per callback; checked once per run).
class Collector final : public UlpduSink {
public:
  std::vector<Bytes> ulpdus; // ended without error
  std::vector<std::optional<TermCode>> ends;
  std::size_t begins = 0, dest_calls = 0, violations = 0, orphan_ends = 0;
  // Make ulpdu_begin / ulpdu_landed of ULPDU number `*_at` (0-based) fail.
  std::size_t fail_begin_at = SIZE_MAX, fail_landed_at = SIZE_MAX;
  TermCode fail_code = term::ddp_untagged_no_buffer;
  std::vector<std::size_t> chunks{1, 3, 7, 2, 64, 5, 1000, 13, 4096, 1, 509};

  std::optional<TermCode> ulpdu_begin(std::size_t len) override {
    if (open_) ++violations;
    open_ = true;
    cur_.assign(len, std::byte{0xcd});
    landed_ = 0;
    if (begins++ == fail_begin_at) return fail_code;
    return std::nullopt;
  }
  MutBytes ulpdu_dest(std::size_t offset, std::size_t max) override {
    ++dest_calls;
    if (!open_ || offset != landed_ || max == 0 || offset + max > cur_.size()) ++violations;
    std::size_t n = std::min(max, chunks[next_chunk_++ % chunks.size()]);
    last_dest_ = n;
    return MutBytes(cur_).subspan(std::min(offset, cur_.size()), n);
  }
  std::optional<TermCode> ulpdu_landed(std::size_t offset, std::size_t n) override {
    if (!open_ || offset != landed_ || n == 0 || n > last_dest_) ++violations;
    landed_ += n;
    if (begins - 1 == fail_landed_at && landed_ >= cur_.size() / 2) return fail_code;
    return std::nullopt;
  }
  void ulpdu_end(std::optional<TermCode> error) override {
    ends.push_back(error);
    if (!open_) {
      ++orphan_ends; // e.g. HX-036: the length was refused before any begin
      return;
    }
    open_ = false;
    if (!error) {
      if (landed_ != cur_.size()) ++violations;
      ulpdus.push_back(cur_);
    }
  }

private:
  Bytes cur_;
  std::size_t landed_ = 0, last_dest_ = 0, next_chunk_ = 0;
  bool open_ = false;
};

struct RxRun {
  std::vector<Bytes> ulpdus;
  std::vector<std::optional<TermCode>> ends;
  std::optional<TermCode> error;
  std::size_t begins = 0, dest_calls = 0, violations = 0, orphan_ends = 0;
  std::uint64_t offset = 0;
  bool boundary = false;
};

template <class Drive>
RxRun with_rx(bool crc, bool markers, Drive drive, std::size_t max_ulpdu = kMaxUlpdu,
              Collector sink = {}) {
  FpduRx rx(crc, markers, max_ulpdu);
  rx.set_sink(&sink);
  drive(rx);
  RxRun r;
  r.ulpdus = std::move(sink.ulpdus);
  r.ends = std::move(sink.ends);
  r.error = rx.error();
  r.begins = sink.begins;
  r.dest_calls = sink.dest_calls;
  r.violations = sink.violations;
  r.orphan_ends = sink.orphan_ends;
  r.offset = rx.stream_offset();
  r.boundary = rx.at_fpdu_boundary();
  return r;
}

RxRun rx_whole(bool crc, bool markers, ConstBytes s, std::size_t max_ulpdu = kMaxUlpdu) {
  return with_rx(
      crc, markers, [&](FpduRx& rx) { REQUIRE(rx.feed(s) == s.size()); }, max_ulpdu);
}

// Feeds `s` in pieces cut at the given offsets (ascending).
RxRun rx_cuts(bool crc, bool markers, ConstBytes s, const std::vector<std::size_t>& cuts) {
  return with_rx(crc, markers, [&](FpduRx& rx) {
    std::size_t at = 0;
    for (std::size_t c : cuts) {
      rx.feed(s.subspan(at, c - at));
      at = c;
    }
    rx.feed(s.subspan(at));
  });
}

RxRun rx_bytewise(bool crc, bool markers, ConstBytes s) {
  return with_rx(crc, markers, [&](FpduRx& rx) {
    for (std::size_t i = 0; i < s.size(); ++i)
      rx.feed(s.subspan(i, 1));
  });
}

// The socket-style API: read into next() (a random part of it, sometimes
// nothing, as a recv() returning EAGAIN would), then advance().
RxRun rx_next_advance(bool crc, bool markers, ConstBytes s, std::mt19937& rng) {
  return with_rx(crc, markers, [&](FpduRx& rx) {
    std::size_t at = 0;
    while (at < s.size()) {
      MutBytes d = rx.next();
      REQUIRE(!d.empty());
      std::size_t k =
          std::min<std::size_t>(s.size() - at, rng() % 5 == 0 ? 0 : 1 + rng() % d.size());
      std::memcpy(d.data(), s.data() + at, k);
      rx.advance(k);
      at += k;
    }
  });
}

// ---- transmit side ------------------------------------------------------------

struct FrameInfo {
  std::size_t begin, end; // stream offsets of the frame's first octet and one past
  std::size_t fpdu;       // stream offset of its ULPDU_Length
};
struct Stream {
  Bytes bytes;
  std::vector<FrameInfo> frames;
};

// Frames `u` as a header (up to 128 octets) and up to 4 payload spans cut at
// random, appending the octets (got through gather()) to `s`.
void frame_one(FpduTx& tx, ConstBytes u, std::mt19937& rng, Stream& s) {
  std::size_t h = std::min<std::size_t>(u.size(), rng() % 129);
  std::vector<std::size_t> cuts;
  for (int i = rng() % 5; i > 0; --i)
    cuts.push_back(h + rng() % (u.size() - h + 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<ConstBytes> pieces;
  std::size_t at = h;
  for (std::size_t c : cuts) {
    pieces.push_back(u.subspan(at, c - at));
    at = c;
  }
  pieces.push_back(u.subspan(at));

  const std::size_t begin = tx.stream_offset();
  REQUIRE(begin == s.bytes.size());
  TxFrame f;
  tx.frame(u.first(h), pieces, f);
  std::vector<ConstBytes> iov;
  f.gather(iov);
  for (ConstBytes b : iov)
    s.bytes.insert(s.bytes.end(), b.begin(), b.end());
  REQUIRE(f.size() == s.bytes.size() - begin);
  REQUIRE(f.remaining() == f.size());
  REQUIRE(tx.stream_offset() == s.bytes.size());
  s.frames.push_back({begin, s.bytes.size(),
                      begin + (tx.markers() && begin % kMarkerSpacing == 0 ? kMarkerLen : 0)});
}

Stream frame_all(FpduTx& tx, const std::vector<Bytes>& ulpdus, std::mt19937& rng) {
  Stream s;
  for (const Bytes& u : ulpdus)
    frame_one(tx, u, rng, s);
  return s;
}

Stream frame_all(bool crc, bool markers, const std::vector<Bytes>& ulpdus, unsigned seed = 1) {
  std::mt19937 rng(seed);
  FpduTx tx(crc, markers);
  return frame_all(tx, ulpdus, rng);
}

const FrameInfo& frame_at(const Stream& s, std::size_t pos) {
  auto it = std::upper_bound(s.frames.begin(), s.frames.end(), pos,
                             [](std::size_t p, const FrameInfo& f) { return p < f.end; });
  REQUIRE(it != s.frames.end());
  return *it;
}

// Everything RFC 5044 §4 says about a framed stream, checked octet by octet and
// independently of FpduTx/FpduRx; returns the ULPDUs found.
std::vector<Bytes> check_stream(const Stream& s, bool crc, bool markers) {
  // Markers: at every multiple of 512 from the start (MPA-033), RESERVED 0
  // (MPA-030), FPDUPTR back to the containing FPDU's ULPDU_Length (MPA-034, 036)
  // or 0 when between FPDUs (MPA-035), low 2 bits 0 (MPA-037), never inside a
  // CRC field.
  Bytes plain; // the stream without markers
  for (std::size_t p = 0; p < s.bytes.size(); ++p) {
    if (markers && p % kMarkerSpacing == 0) {
      const FrameInfo& f = frame_at(s, p);
      INFO("marker at " << p << " in frame [" << f.begin << ", " << f.end << ")");
      REQUIRE(p + kMarkerLen <= f.end);
      REQUIRE(load_be16(s.bytes.data() + p) == 0);
      std::uint16_t ptr = load_be16(s.bytes.data() + p + 2);
      REQUIRE(ptr == (p == f.begin ? 0 : p - f.fpdu));
      REQUIRE(ptr % 4 == 0);
      REQUIRE((p <= f.end - kCrcLen - kMarkerLen || p >= f.end)); // not in the CRC field
      p += kMarkerLen - 1;
      continue;
    }
    plain.push_back(s.bytes[p]);
  }
  // Frames: a multiple of 4 octets; CRC over the whole frame up to the CRC field,
  // leading marker and a marker right before the CRC included (MPA-027); zero
  // CRC field when CRC is off (MPA-013).
  for (const FrameInfo& f : s.frames) {
    REQUIRE((f.end - f.begin) % 4 == 0);
    REQUIRE(f.begin % 4 == 0);
    std::uint32_t field = load_crc_le(s.bytes.data() + f.end - kCrcLen);
    if (crc)
      REQUIRE(field == crc32c(ConstBytes(s.bytes).subspan(f.begin, f.end - kCrcLen - f.begin)));
    else
      REQUIRE(field == 0);
  }
  // Without the markers: ULPDU_Length | ULPDU | zero PAD | CRC, back to back.
  std::vector<Bytes> out;
  std::size_t at = 0;
  while (at < plain.size()) {
    REQUIRE(at + 2 <= plain.size());
    std::size_t len = load_be16(plain.data() + at);
    std::size_t total = fpdu_len_without_markers(len);
    REQUIRE(at + total <= plain.size());
    out.emplace_back(plain.begin() + at + 2, plain.begin() + at + 2 + len);
    for (std::size_t i = 0; i < fpdu_pad(len); ++i)
      REQUIRE(plain[at + 2 + len + i] == std::byte{0});
    at += total;
  }
  REQUIRE(out.size() == s.frames.size());
  return out;
}

// Rewrites the CRC of the frame holding `pos` after the test edited its octets.
void fix_crc(Stream& s, std::size_t pos) {
  const FrameInfo& f = frame_at(s, pos);
  store_crc_le(s.bytes.data() + f.end - kCrcLen,
               crc32c(ConstBytes(s.bytes).subspan(f.begin, f.end - kCrcLen - f.begin)));
}

void require_clean(const RxRun& r, const std::vector<Bytes>& want, std::size_t stream_size) {
  REQUIRE(r.violations == 0);
  REQUIRE(r.orphan_ends == 0);
  REQUIRE_FALSE(r.error);
  REQUIRE(r.offset == stream_size);
  REQUIRE(r.boundary);
  REQUIRE(r.ulpdus.size() == want.size());
  REQUIRE(r.ulpdus == want);
}

// The untagged DDP header of an RFC 5044 Fig. 5/6 Send.
Bytes send_header(std::uint32_t msn) {
  DdpHeader h;
  h.opcode = static_cast<std::uint8_t>(Opcode::Send);
  h.qn = kQnSend;
  h.msn = msn;
  Bytes b(kUntaggedHdrLen);
  h.encode(b.data());
  return b;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const auto kConfigs = {std::pair{false, false}, std::pair{false, true}, std::pair{true, false},
                       std::pair{true, true}};

} // namespace

// ---- (1) RFC 5044 Fig. 5 / Fig. 6 --------------------------------------------------

TEST_CASE("MPA-026 FpduTx reproduces RFC 5044 vector 1 exactly (52 octets, CRC 52 23 99 83)",
          "[framing]") {
  const Bytes want = hx("00 00 00 00  00 2a  41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00"
                        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                        "52 23 99 83");
  REQUIRE(want.size() == 52);
  const Bytes hdr = send_header(1);
  const Bytes payload(24, std::byte{0});

  SECTION("header plus one payload span") {
    FpduTx tx(true, true);
    ConstBytes p[] = {payload};
    CHECK(hex(tx.frame_bytes(hdr, p)) == hex(want));
    CHECK(tx.stream_offset() == 52);
  }
  SECTION("the whole ULPDU as header octets") {
    FpduTx tx(true, true);
    CHECK(hex(tx.frame_bytes(cat(hdr, payload))) == hex(want));
  }
  SECTION("payload in many small spans") {
    FpduTx tx(true, true);
    std::vector<ConstBytes> p;
    for (std::size_t i = 0; i < 24; i += 5)
      p.push_back(ConstBytes(payload).subspan(i, std::min<std::size_t>(5, 24 - i)));
    CHECK(hex(tx.frame_bytes(hdr, p)) == hex(want));
  }
  SECTION("FpduRx accepts it and delivers the 42-octet ULPDU") {
    RxRun r = rx_whole(true, true, want);
    require_clean(r, {cat(hdr, payload)}, 52);
  }
}

TEST_CASE(
    "MPA-034 RFC 5044 vector 2: FPDU at 0x1ec, marker at 0x200 with FPDUPTR 0x14, CRC 84 92 58 98",
    "[framing]") {
  const Bytes want = hx("00 2a 41 43 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 00"
                        "00 00 00 14"
                        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                        "84 92 58 98");
  REQUIRE(want.size() == 52);

  // Drive the stream to 0x1ec: the vector 1 FPDU (52 octets) and one FPDU of
  // 440 octets (ULPDU 434: 2 + 434 + 0 PAD + 4), no marker between 52 and 0x1ec.
  FpduTx tx(true, true);
  const Bytes u1 = cat(send_header(1), Bytes(24, std::byte{0}));
  Bytes stream = tx.frame_bytes(u1);
  REQUIRE(stream.size() == 52);
  DdpHeader w;
  w.tagged = true;
  w.opcode = static_cast<std::uint8_t>(Opcode::RdmaWrite);
  w.stag = 0x1234;
  Bytes whdr(kTaggedHdrLen);
  w.encode(whdr.data());
  const Bytes wpay = pattern(434 - kTaggedHdrLen, 9);
  ConstBytes wp[] = {wpay};
  Bytes mid = tx.frame_bytes(whdr, wp);
  REQUIRE(mid.size() == 440);
  stream.insert(stream.end(), mid.begin(), mid.end());
  REQUIRE(tx.stream_offset() == 0x1ec);

  const Bytes hdr2 = send_header(2);
  const Bytes pay2(24, std::byte{0});
  ConstBytes p2[] = {pay2};
  Bytes v2 = tx.frame_bytes(hdr2, p2);
  CHECK(hex(v2) == hex(want));
  CHECK(tx.stream_offset() == 0x1ec + 52);
  stream.insert(stream.end(), v2.begin(), v2.end());
  REQUIRE(stream.size() == 544);
  // The marker's stream offset is 0x200 and it points back 0x14 octets.
  CHECK(hex(ConstBytes(stream).subspan(0x200, 4)) == "00 00 00 14");

  // The receiver accepts the whole stream however it arrives.
  const std::vector<Bytes> ulpdus = {u1, cat(whdr, wpay), cat(hdr2, pay2)};
  require_clean(rx_whole(true, true, stream), ulpdus, 544);
  require_clean(rx_bytewise(true, true, stream), ulpdus, 544);
  // And the Appendix A FPDU on its own, hand-placed at 0x1ec after a filler.
  Bytes hand = stream;
  std::copy(want.begin(), want.end(), hand.begin() + 0x1ec);
  require_clean(rx_whole(true, true, hand), ulpdus, 544);
}

// ---- (2) property: any segmentation gives back the same ULPDUs -------------------

TEST_CASE("MPA-045 two-piece split at every offset gives back the same ULPDUs", "[framing]") {
  // A moderate stream whose FPDUs put markers between FPDUs, inside the length
  // neighbourhood, inside ULPDUs, right before a CRC, and at a frame's end.
  const std::size_t sizes[] = {0, 1, 2, 3, 4, 5, 42, 100, 506, 0, 1, 700, 1100, 3, 2, 502, 7};
  std::vector<Bytes> ulpdus;
  unsigned seed = 0;
  for (std::size_t n : sizes)
    ulpdus.push_back(pattern(n, ++seed));

  for (auto [crc, markers] : kConfigs) {
    INFO("crc " << crc << " markers " << markers);
    Stream s = frame_all(crc, markers, ulpdus);
    REQUIRE(check_stream(s, crc, markers) == ulpdus);
    for (std::size_t cut = 0; cut <= s.bytes.size(); ++cut) {
      INFO("cut at " << cut << " of " << s.bytes.size());
      require_clean(rx_cuts(crc, markers, s.bytes, {cut}), ulpdus, s.bytes.size());
    }
  }
}

TEST_CASE("MPA-045 random ULPDU sequences survive random, byte-wise and next/advance delivery",
          "[framing]") {
  auto [crc, markers] =
      GENERATE(table<bool, bool>({{false, false}, {false, true}, {true, false}, {true, true}}));
  INFO("crc " << crc << " markers " << markers);
  std::mt19937 rng(crc * 2 + markers + 77);
  std::vector<Bytes> ulpdus;
  for (int i = 0; i < 60; ++i) {
    std::size_t n = rng() % 10 == 0 ? rng() % 9 : rng() % 3001;
    ulpdus.push_back(random_bytes(rng, n));
  }
  ulpdus.insert(ulpdus.begin() + 7, random_bytes(rng, kMaxUlpdu));
  ulpdus.insert(ulpdus.begin() + 31, random_bytes(rng, kMaxUlpdu));
  ulpdus.push_back(random_bytes(rng, kMaxUlpdu));

  FpduTx tx(crc, markers);
  Stream s = frame_all(tx, ulpdus, rng);
  REQUIRE(check_stream(s, crc, markers) == ulpdus);
  const std::size_t n = s.bytes.size();

  SECTION("whole") { require_clean(rx_whole(crc, markers, s.bytes), ulpdus, n); }
  SECTION("random multi-piece splits") {
    for (int round = 0; round < 10; ++round) {
      std::vector<std::size_t> cuts;
      std::size_t k = 1 + rng() % 400;
      for (std::size_t i = 0; i < k; ++i)
        cuts.push_back(rng() % (n + 1));
      // Also pieces shorter than a marker, around marker positions.
      for (std::size_t m = 512; m < n && m < 20000; m += 512)
        cuts.push_back(m - rng() % 3 + 1);
      std::sort(cuts.begin(), cuts.end());
      INFO("round " << round);
      require_clean(rx_cuts(crc, markers, s.bytes, cuts), ulpdus, n);
    }
  }
  SECTION("byte at a time") { require_clean(rx_bytewise(crc, markers, s.bytes), ulpdus, n); }
  SECTION("next()/advance() with partial reads") {
    require_clean(rx_next_advance(crc, markers, s.bytes, rng), ulpdus, n);
  }
}

TEST_CASE("MPA-001 every ULPDU size 0..1100 frames and deframes one FPDU each", "[framing]") {
  // Walks every ULPDU length (and so every PAD and every marker position
  // relative to the FPDU) through one long stream per configuration.
  std::vector<Bytes> ulpdus;
  for (std::size_t n = 0; n <= 1100; ++n)
    ulpdus.push_back(pattern(n, static_cast<unsigned>(n)));
  for (auto [crc, markers] : kConfigs) {
    INFO("crc " << crc << " markers " << markers);
    Stream s = frame_all(crc, markers, ulpdus, 3);
    REQUIRE(check_stream(s, crc, markers) == ulpdus);
    std::size_t expect = 0;
    for (const Bytes& u : ulpdus)
      expect += fpdu_len_without_markers(u.size());
    if (markers) expect += 4 * ((s.bytes.size() + 511) / 512);
    CHECK(s.bytes.size() == expect);
    std::mt19937 rng(11);
    require_clean(rx_next_advance(crc, markers, s.bytes, rng), ulpdus, s.bytes.size());
  }
}

// ---- (3) markers and CRC coverage ------------------------------------------------------

TEST_CASE("MC-09 markers every 512 octets over FPDUs of 8..>1024 octets, FPDUPTR 0 between FPDUs "
          "(MPA-033, MPA-035)",
          "[framing]") {
  // FPDUs of 8, 12, 16 ... octets, then larger than 512 and 1024.
  std::vector<Bytes> ulpdus;
  for (std::size_t n = 2; n < 200; n += 4)
    ulpdus.push_back(pattern(n, 1));
  ulpdus.push_back(pattern(600, 2));
  ulpdus.push_back(pattern(1500, 3));
  ulpdus.push_back(pattern(0, 4));
  ulpdus.push_back(pattern(3000, 5));
  Stream s = frame_all(true, true, ulpdus);
  REQUIRE(check_stream(s, true, true) == ulpdus);

  // The first octets of Full Operation: the zero marker, then ULPDU_Length (MPA-066).
  CHECK(hex(ConstBytes(s.bytes).first(6)) == "00 00 00 00 00 02");
  std::size_t markers = 0, between = 0;
  for (std::size_t p = 0; p < s.bytes.size(); p += 512) {
    ++markers;
    const FrameInfo& f = frame_at(s, p);
    if (p == f.begin) {
      ++between;
      CHECK(load_be32(s.bytes.data() + p) == 0);
    }
  }
  CHECK(markers == (s.bytes.size() + 511) / 512);
  CHECK(between >= 1);
  // Without markers no octet of the stream is a marker: it is exactly the FPDUs.
  Stream plain = frame_all(true, false, ulpdus);
  std::size_t want = 0;
  for (const Bytes& u : ulpdus)
    want += fpdu_len_without_markers(u.size());
  CHECK(plain.bytes.size() == want);
  CHECK(check_stream(plain, true, false) == ulpdus);
}

TEST_CASE("MPA-036 all markers inside one large FPDU point to the same ULPDU_Length (MC-09)",
          "[framing]") {
  for (std::size_t lead : {std::size_t{0}, std::size_t{1}, std::size_t{130}, std::size_t{505}}) {
    INFO("leading ULPDU " << lead);
    std::vector<Bytes> ulpdus = {pattern(lead, 1), pattern(kMaxUlpdu, 2), pattern(3000, 3)};
    Stream s = frame_all(true, true, ulpdus);
    REQUIRE(check_stream(s, true, true) == ulpdus);
    const FrameInfo& big = s.frames[1];
    std::size_t count = 0;
    for (std::size_t p = (big.begin + 511) / 512 * 512; p < big.end; p += 512) {
      std::uint16_t ptr = load_be16(s.bytes.data() + p + 2);
      if (p == big.begin) {
        CHECK(ptr == 0); // the leading marker of this FPDU
        continue;
      }
      CHECK(p - ptr == big.fpdu);
      ++count;
    }
    CHECK(count >= kMaxUlpdu / 512);
    require_clean(rx_whole(true, true, s.bytes), ulpdus, s.bytes.size());
  }
}

TEST_CASE(
    "MPA-035 FPDU ending exactly at a marker slot: the marker belongs to the next FPDU (MC-09)",
    "[framing]") {
  // Marker at 0, FPDU of 508 octets (ULPDU 502) ends at 512; the marker at 512
  // is the next FPDU's leading marker: FPDUPTR 0 and covered by its CRC.
  const std::vector<Bytes> ulpdus = {pattern(502, 1), pattern(100, 2), pattern(3, 3)};
  for (bool crc : {true, false}) {
    INFO("crc " << crc);
    Stream s = frame_all(crc, true, ulpdus);
    REQUIRE(check_stream(s, crc, true) == ulpdus);
    REQUIRE(s.frames[0].end == 512);
    CHECK(s.frames[1].begin == 512);
    CHECK(s.frames[1].fpdu == 516);
    CHECK(hex(ConstBytes(s.bytes).subspan(512, 6)) == "00 00 00 00 00 64");
    require_clean(rx_whole(crc, true, s.bytes), ulpdus, s.bytes.size());
  }
  // Covered by the next FPDU's CRC: spoil its RESERVED octets without fixing the
  // CRC. The first FPDU is delivered, the second fails its CRC.
  Stream s = frame_all(true, true, ulpdus);
  s.bytes[512] = std::byte{0x80};
  RxRun r = rx_whole(true, true, s.bytes);
  CHECK(r.error == term::mpa_crc_error);
  REQUIRE(r.ulpdus.size() == 1);
  CHECK(r.ulpdus[0] == ulpdus[0]);
  // With the CRC fixed, RESERVED != 0 is ignored (HX-034).
  fix_crc(s, 512);
  require_clean(rx_whole(true, true, s.bytes), ulpdus, s.bytes.size());
}

TEST_CASE("MPA-027 a marker right after the PAD (before the CRC field) is CRC-covered (MC-09)",
          "[framing]") {
  // Marker at 0, FPDU at 4 whose CRC field starts at 512: ULPDU 506 (PAD 0),
  // 505 (PAD 1), 504 (PAD 2), 503 (PAD 3).
  for (std::size_t n : {506u, 505u, 504u, 503u}) {
    INFO("ULPDU " << n);
    const std::vector<Bytes> ulpdus = {pattern(n, 5), pattern(17, 6)};
    Stream s = frame_all(true, true, ulpdus);
    const FrameInfo& f = s.frames[0];
    REQUIRE(f.end == 4 + 508 + 4 + 4);
    // ... PAD | marker 0x200 pointing back 508 octets to 4 | CRC
    CHECK(hex(ConstBytes(s.bytes).subspan(512, 4)) == "00 00 01 fc");
    const std::uint32_t field = load_crc_le(s.bytes.data() + 516);
    CHECK(field == crc32c(ConstBytes(s.bytes).first(516)));
    CHECK(field != crc32c(ConstBytes(s.bytes).first(512)));
    REQUIRE(check_stream(s, true, true) == ulpdus);
    require_clean(rx_whole(true, true, s.bytes), ulpdus, s.bytes.size());
    require_clean(rx_bytewise(true, true, s.bytes), ulpdus, s.bytes.size());

    // The receiver covers it too: spoiled RESERVED octets are a CRC error.
    Bytes bad = s.bytes;
    bad[513] = std::byte{0x01};
    RxRun r = rx_whole(true, true, bad);
    CHECK(r.error == term::mpa_crc_error);
    CHECK(r.ulpdus.empty());
  }
}

TEST_CASE("MPA-027 a marker never falls inside the CRC field (FPDUs are 4-aligned)", "[framing]") {
  // RFC 5044 §4.4 leaves a marker inside the CRC field out of the CRC. With our
  // offsets counted from the first octet of Full Operation every FPDU starts at
  // a multiple of 4 and is a multiple of 4 long, markers are 4 octets at
  // multiples of 512: a marker can precede the CRC field or follow it, never
  // split it. check_stream() asserts it for every frame; here over every
  // position of the CRC field relative to the 512-octet grid.
  std::vector<Bytes> ulpdus;
  for (std::size_t n = 0; n < 700; n += 1)
    ulpdus.push_back(pattern(n % 97, 1));
  Stream s = frame_all(true, true, ulpdus);
  REQUIRE(check_stream(s, true, true) == ulpdus);
  std::set<std::size_t> crc_slots;
  for (const FrameInfo& f : s.frames) {
    std::size_t crc_at = f.end - kCrcLen;
    CHECK(crc_at % 4 == 0);
    for (std::size_t k = 1; k < kCrcLen; ++k)
      CHECK((crc_at + k) % 512 != 0);
    crc_slots.insert(crc_at % 512);
  }
  // The CRC field met every 4-aligned slot but 0, which always holds a marker.
  CHECK(crc_slots.size() == 127);
  CHECK(crc_slots.count(0) == 0);
}

TEST_CASE("MC-08 marker math is relative to the start of Full Operation (sequence wrap)",
          "[framing]") {
  // FpduTx and FpduRx count octets from the first octet of Full Operation in a
  // 64-bit offset; markers go where offset % 512 == 0 and FPDUPTR is a
  // difference of two such offsets. TCP places them at (Seq - SeqStart) mod 512
  // with 32-bit sequence numbers: since 2^32 is a multiple of 512,
  // ((SeqStart + offset) mod 2^32 - SeqStart) mod 2^32 mod 512 == offset mod 512,
  // so a wrap of the sequence space never moves a marker and never changes an
  // FPDUPTR; a >4 GiB stream is not needed to show it. Check the relation on a
  // real stream against a start sequence number just below the wrap.
  STATIC_REQUIRE((std::uint64_t{1} << 32) % kMarkerSpacing == 0);
  std::vector<Bytes> ulpdus;
  for (std::size_t n : {10u, 1500u, 64768u, 3u, 900u})
    ulpdus.push_back(pattern(n, 2));
  Stream s = frame_all(true, true, ulpdus);
  REQUIRE(check_stream(s, true, true) == ulpdus);
  for (std::uint32_t isn : {0xfffffe00u, 0xffffff13u, 0xfffffffeu, 0x7fffffffu}) {
    for (std::size_t p = 0; p < s.bytes.size(); ++p) {
      std::uint32_t seq = isn + static_cast<std::uint32_t>(p);
      bool tcp_marker = static_cast<std::uint32_t>(seq - isn) % 512 == 0;
      REQUIRE(tcp_marker == (p % 512 == 0));
      if (!tcp_marker) continue;
      const FrameInfo& f = frame_at(s, p);
      std::uint32_t fpdu_seq = isn + static_cast<std::uint32_t>(f.fpdu);
      std::uint16_t ptr = load_be16(s.bytes.data() + p + 2);
      REQUIRE(ptr == (p == f.begin ? 0 : static_cast<std::uint16_t>(seq - fpdu_seq)));
    }
  }
  // The offsets really are 64-bit.
  STATIC_REQUIRE(sizeof(FpduTx{}.stream_offset()) == 8);
  STATIC_REQUIRE(sizeof(FpduRx{}.stream_offset()) == 8);
}

TEST_CASE("MC-10 markers align to the first Full Operation octet, not the start of the connection",
          "[framing]") {
  // Delayed or immediate startup: the MPA Request/Reply (or streaming-mode
  // traffic) comes first, and the framers start counting where Full Operation
  // begins. Here 27 startup octets (a Request with 7 octets of private data).
  MpaFrame req;
  req.markers = true;
  req.rev = 1;
  req.private_data = pattern(7, 1);
  const Bytes startup = req.encode();
  REQUIRE(startup.size() == 27);
  const std::vector<Bytes> ulpdus = {pattern(600, 1), pattern(9, 2), pattern(1400, 3)};
  Stream s = frame_all(true, true, ulpdus);
  const Bytes conn = cat(startup, s.bytes);
  // In connection offsets the markers sit at 27 + k*512.
  for (std::size_t p = 27; p < conn.size(); p += 512)
    CHECK(load_be16(conn.data() + p) == 0); // RESERVED
  CHECK(hex(ConstBytes(conn).subspan(27, 6)) == "00 00 00 00 02 58");
  // A receiver started after the startup octets accepts the stream ...
  require_clean(rx_whole(true, true, ConstBytes(conn).subspan(27)), ulpdus, s.bytes.size());
  // ... one that counts from the start of the connection does not: it fails
  // or waits for an FPDU that never completes, and delivers nothing.
  RxRun wrong = rx_whole(true, true, conn);
  CHECK((wrong.error || !wrong.boundary));
  CHECK(wrong.ulpdus.empty());
}

// ---- (4) hostile input ---------------------------------------------------------------

TEST_CASE("HX-030 CRC mismatch: mpa_crc_error and nothing delivered after it (MPA-074)",
          "[framing]") {
  const std::vector<Bytes> ulpdus = {pattern(40, 1), pattern(900, 2), pattern(60, 3),
                                     pattern(8, 4)};
  for (bool markers : {false, true}) {
    INFO("markers " << markers);
    Stream s = frame_all(true, markers, ulpdus);
    for (std::size_t where : {s.frames[1].fpdu + 2 + 300, // payload octet
                              s.frames[1].end - 1,        // CRC octet
                              s.frames[1].fpdu + 2}) {    // first ULPDU octet
      INFO("corrupt octet " << where);
      Bytes bad = s.bytes;
      bad[where] ^= std::byte{0x10};
      for (int mode = 0; mode < 2; ++mode) {
        RxRun r = mode == 0 ? rx_whole(true, markers, bad) : rx_bytewise(true, markers, bad);
        CHECK(r.violations == 0);
        CHECK(r.error == term::mpa_crc_error);
        REQUIRE(r.ulpdus.size() == 1);
        CHECK(r.ulpdus[0] == ulpdus[0]);
        CHECK(r.begins == 2); // the third FPDU was never begun
        REQUIRE(r.ends.size() == 2);
        CHECK(r.ends[1] == term::mpa_crc_error);
        CHECK(r.offset == bad.size()); // the rest was drained (consumed, ignored)
      }
    }
  }
  SECTION("draining after the error: next() keeps handing out scratch space") {
    Stream s = frame_all(true, false, ulpdus);
    Bytes bad = s.bytes;
    bad[s.frames[0].end - 1] ^= std::byte{1};
    Collector sink;
    FpduRx rx(true, false);
    rx.set_sink(&sink);
    rx.feed(ConstBytes(bad).first(s.frames[0].end));
    REQUIRE(rx.error() == term::mpa_crc_error);
    for (int i = 0; i < 5; ++i) {
      MutBytes d = rx.next();
      REQUIRE(!d.empty());
      rx.advance(d.size());
    }
    rx.feed(ConstBytes(bad).subspan(s.frames[0].end));
    CHECK(sink.ulpdus.empty());
    CHECK(sink.begins == 1);
    CHECK(rx.error() == term::mpa_crc_error);
  }
}

TEST_CASE("MPA-028 every single corrupted octet is detected with CRC on", "[framing]") {
  const std::vector<Bytes> ulpdus = {pattern(1, 1), pattern(600, 2), pattern(2, 3), pattern(30, 4)};
  for (bool markers : {false, true}) {
    Stream s = frame_all(true, markers, ulpdus);
    for (std::size_t i = 0; i < s.bytes.size(); ++i) {
      for (unsigned flip : {0x01u, 0x80u}) {
        Bytes bad = s.bytes;
        bad[i] ^= std::byte(flip);
        RxRun r = rx_whole(true, markers, bad);
        INFO("markers " << markers << " octet " << i << " flip " << flip);
        REQUIRE(r.violations == 0);
        // Delivered ULPDUs are a prefix of the sent ones, and the stream does
        // not end cleanly with everything delivered.
        REQUIRE(r.ulpdus.size() <= ulpdus.size());
        REQUIRE(std::equal(r.ulpdus.begin(), r.ulpdus.end(), ulpdus.begin()));
        REQUIRE((r.error || !r.boundary || r.ulpdus.size() < ulpdus.size()));
        if (r.error) {
          bool mpa_code = *r.error == term::mpa_crc_error ||
                          *r.error == term::mpa_marker_mismatch ||
                          *r.error == term::mpa_local_catastrophic;
          REQUIRE(mpa_code);
        }
      }
    }
  }
}

TEST_CASE("HX-031 marker FPDUPTR wrong with a valid CRC: mpa_marker_mismatch", "[framing]") {
  const std::vector<Bytes> ulpdus = {pattern(10, 1), pattern(1500, 2), pattern(20, 3)};
  for (bool crc : {true, false}) {
    INFO("crc " << crc);
    Stream s = frame_all(crc, true, ulpdus);
    const std::size_t m = 512; // inside the second FPDU
    REQUIRE(frame_at(s, m).begin == s.frames[1].begin);
    REQUIRE(s.frames[1].begin < m);
    for (std::uint16_t delta : {4, 8, 0x100}) {
      Stream bad = s;
      store_be16(bad.bytes.data() + m + 2,
                 static_cast<std::uint16_t>(load_be16(bad.bytes.data() + m + 2) + delta));
      if (crc) fix_crc(bad, m);
      RxRun r = rx_whole(crc, true, bad.bytes);
      CHECK(r.violations == 0);
      CHECK(r.error == term::mpa_marker_mismatch);
      REQUIRE(r.ulpdus.size() == 1);
      CHECK(r.ulpdus[0] == ulpdus[0]);
      REQUIRE(r.ends.size() == 2);
      CHECK(r.ends[1] == term::mpa_marker_mismatch);
      CHECK(r.begins == 2);
    }
  }
  SECTION("a marker between FPDUs must be 0") {
    const std::vector<Bytes> u = {pattern(502, 1), pattern(100, 2), pattern(5, 3)};
    Stream s = frame_all(true, true, u);
    REQUIRE(s.frames[1].begin == 512);
    store_be16(s.bytes.data() + 512 + 2, 4);
    fix_crc(s, 512); // the leading marker is the second FPDU's
    RxRun r = rx_whole(true, true, s.bytes);
    CHECK(r.error == term::mpa_marker_mismatch);
    REQUIRE(r.ulpdus.size() == 1);
    CHECK(r.ulpdus[0] == u[0]);
  }
  SECTION("a bad CRC is reported before a bad marker") {
    Stream s = frame_all(true, true, ulpdus);
    store_be16(s.bytes.data() + 512 + 2, 0x40);
    RxRun r = rx_whole(true, true, s.bytes);
    CHECK(r.error == term::mpa_crc_error);
  }
}

TEST_CASE("HX-032 markers present though negotiated off: CRC error", "[framing]") {
  const std::vector<Bytes> ulpdus = {cat(send_header(1), pattern(24, 1)), pattern(700, 2),
                                     pattern(3, 3)};
  Stream s = frame_all(true, true, ulpdus);
  RxRun r = rx_whole(true, false, s.bytes);
  CHECK(r.violations == 0);
  CHECK(r.error == term::mpa_crc_error);
  CHECK(r.ulpdus.empty());

  // Missing though negotiated on: an error too (marker or CRC).
  Stream plain = frame_all(true, false, ulpdus);
  RxRun m = rx_whole(true, true, plain.bytes);
  CHECK(m.violations == 0);
  REQUIRE(m.error);
  CHECK((*m.error == term::mpa_crc_error || *m.error == term::mpa_marker_mismatch));
  CHECK(m.ulpdus.empty());
}

TEST_CASE("HX-033 non-zero PAD octets are accepted (and CRC-covered, MPA-012)", "[framing]") {
  // ULPDU 1 -> PAD 1, 0 -> PAD 2, 3 -> PAD 3.
  const std::vector<Bytes> ulpdus = {pattern(1, 1), pattern(0, 2), pattern(3, 3), pattern(2, 4)};
  for (bool markers : {false, true}) {
    INFO("markers " << markers);
    Stream s = frame_all(true, markers, ulpdus);
    Stream fixed = s;
    Stream unfixed = s;
    for (std::size_t i = 0; i < 3; ++i) {
      const FrameInfo& f = s.frames[i];
      std::size_t len = load_be16(s.bytes.data() + f.fpdu);
      std::size_t pad_at = f.fpdu + 2 + len;
      for (std::size_t k = 0; k < fpdu_pad(len); ++k) {
        fixed.bytes[pad_at + k] = std::byte{0xa5};
        unfixed.bytes[pad_at + k] = std::byte{0xa5};
      }
      fix_crc(fixed, f.begin);
    }
    require_clean(rx_whole(true, markers, fixed.bytes), ulpdus, s.bytes.size());
    require_clean(rx_bytewise(true, markers, fixed.bytes), ulpdus, s.bytes.size());
    RxRun r = rx_whole(true, markers, unfixed.bytes);
    CHECK(r.error == term::mpa_crc_error);
    CHECK(r.ulpdus.empty());
    // Without CRC nothing looks at the PAD at all.
    Stream nocrc = frame_all(false, markers, ulpdus);
    for (std::size_t i = 0; i < 3; ++i) {
      const FrameInfo& f = nocrc.frames[i];
      std::size_t len = load_be16(nocrc.bytes.data() + f.fpdu);
      for (std::size_t k = 0; k < fpdu_pad(len); ++k)
        nocrc.bytes[f.fpdu + 2 + len + k] = std::byte{0xff};
    }
    require_clean(rx_whole(false, markers, nocrc.bytes), ulpdus, nocrc.bytes.size());
  }
}

TEST_CASE("HX-034 marker RESERVED != 0 and FPDUPTR low bits != 0 are accepted (MPA-037)",
          "[framing]") {
  const std::vector<Bytes> ulpdus = {pattern(502, 1), pattern(1300, 2), pattern(40, 3)};
  for (bool crc : {true, false}) {
    INFO("crc " << crc);
    Stream s = frame_all(crc, true, ulpdus);
    for (std::size_t m = 0; m < s.bytes.size(); m += 512) {
      store_be16(s.bytes.data() + m, static_cast<std::uint16_t>(0xffff - m)); // RESERVED
      s.bytes[m + 3] |= std::byte{0x03};                                      // FPDUPTR low bits
      if (crc) fix_crc(s, m); // markers are CRC-covered (MPA-038)
    }
    // 0 (leading, first FPDU), 512 (leading, second FPDU), 1024, 1536 (inside it).
    CHECK(hex(ConstBytes(s.bytes).subspan(0, 4)) == "ff ff 00 03");
    CHECK(hex(ConstBytes(s.bytes).subspan(512, 4)) == "fd ff 00 03");
    require_clean(rx_whole(crc, true, s.bytes), ulpdus, s.bytes.size());
  }
}

TEST_CASE("HX-035 garbage in the CRC field is accepted with CRC off (MPA-013)", "[framing]") {
  const std::vector<Bytes> ulpdus = {pattern(42, 1), pattern(1000, 2), pattern(0, 3),
                                     pattern(77, 4)};
  std::mt19937 rng(35);
  for (bool markers : {false, true}) {
    INFO("markers " << markers);
    Stream s = frame_all(false, markers, ulpdus);
    // The sender still sends the field (zeros).
    for (const FrameInfo& f : s.frames) {
      CHECK(load_crc_le(s.bytes.data() + f.end - 4) == 0);
      for (std::size_t k = 0; k < 4; ++k)
        s.bytes[f.end - 4 + k] = std::byte(rng() & 0xff);
    }
    require_clean(rx_whole(false, markers, s.bytes), ulpdus, s.bytes.size());
    require_clean(rx_bytewise(false, markers, s.bytes), ulpdus, s.bytes.size());
    // The same stream to a CRC-checking receiver fails on the first FPDU.
    RxRun r = rx_whole(true, markers, s.bytes);
    CHECK(r.error == term::mpa_crc_error);
    CHECK(r.ulpdus.empty());
  }
}

TEST_CASE("MPA-013 CRC off from a stream octet on (the same-host ring's switch), any split",
          "[framing]") {
  // Before the switch every FPDU carries its CRC and is checked; from the switch's octet on the
  // field is zero and unchecked, whatever it holds, and the payload is referenced, not copied.
  std::vector<Bytes> before, after;
  for (unsigned i = 0; i < 5; ++i) {
    before.push_back(pattern(37 * i + 1, i));
    after.push_back(pattern(600 + 91 * i, 10 + i));
  }
  std::vector<Bytes> all = before;
  all.insert(all.end(), after.begin(), after.end());
  for (bool markers : {false, true}) {
    INFO("markers " << markers);
    std::mt19937 rng(13);
    FpduTx tx(true, markers);
    Stream s = frame_all(tx, before, rng);
    const std::uint64_t at = tx.stream_offset();
    tx.crc_off();
    for (const Bytes& u : after)
      frame_one(tx, u, rng, s);
    TxFrame f; // a referenced payload: the frame holds no copy of it
    const ConstBytes payload = after[0];
    tx.frame({}, std::span(&payload, 1), f);
    std::vector<std::uint8_t> external;
    std::vector<ConstBytes> iov;
    f.gather(iov, &external);
    std::size_t referenced = 0; // (markers may cut it in two)
    for (std::size_t i = 0; i < iov.size(); ++i)
      referenced += external[i] ? iov[i].size() : 0;
    CHECK(referenced == payload.size());
    for (const FrameInfo& fi : s.frames) {
      if (fi.begin < at) continue;
      CHECK(load_crc_le(s.bytes.data() + fi.end - 4) == 0);
      for (std::size_t k = 0; k < 4; ++k)
        s.bytes[fi.end - 4 + k] = std::byte(rng() & 0xff);
    }
    auto run = [&](const Bytes& bytes, std::size_t cut) {
      return with_rx(true, markers, [&](FpduRx& rx) {
        rx.crc_off_from(at);
        rx.feed(ConstBytes(bytes).first(cut));
        rx.feed(ConstBytes(bytes).subspan(cut));
      });
    };
    for (std::size_t cut = 0; cut <= s.bytes.size(); cut += 7) {
      INFO("cut at " << cut << " of " << s.bytes.size());
      RxRun r = run(s.bytes, cut);
      CHECK(!r.error);
      CHECK(r.ulpdus == all);
    }
    // Without the switch the same stream fails at the first FPDU after it...
    RxRun checked = rx_whole(true, markers, s.bytes);
    CHECK(checked.error == term::mpa_crc_error);
    CHECK(checked.ulpdus == before);
    // ...and an FPDU before it is still checked.
    Bytes bad = s.bytes;
    bad[s.frames[1].end - 1] ^= std::byte{1};
    RxRun r = run(bad, bad.size() / 2);
    CHECK(r.error == term::mpa_crc_error);
    CHECK(r.ulpdus.size() == 1);
  }
}

TEST_CASE("HX-036 ULPDU_Length above the limit: mpa_local_catastrophic without buffering",
          "[framing]") {
  SECTION("a local limit below 64768") {
    const std::vector<Bytes> ulpdus = {pattern(1000, 1), pattern(1001, 2), pattern(5, 3)};
    for (bool markers : {false, true}) {
      INFO("markers " << markers);
      Stream s = frame_all(true, markers, ulpdus);
      RxRun r = with_rx(
          true, markers, [&](FpduRx& rx) { rx.feed(s.bytes); }, 1000);
      CHECK(r.violations == 0);
      CHECK(r.error == term::mpa_local_catastrophic);
      REQUIRE(r.ulpdus.size() == 1); // exactly at the limit is fine
      CHECK(r.ulpdus[0] == ulpdus[0]);
      CHECK(r.begins == 1); // the sink never saw the oversized ULPDU begin
      CHECK(r.orphan_ends == 1);
      REQUIRE(r.ends.size() == 2);
      CHECK(r.ends[1] == term::mpa_local_catastrophic);
    }
  }
  SECTION("decided on the two length octets, before any ULPDU octet arrives") {
    for (std::uint16_t len : {std::uint16_t{64769}, std::uint16_t{0xffff}}) {
      Collector sink;
      FpduRx rx(true, false);
      rx.set_sink(&sink);
      std::array<std::byte, 2> l{};
      store_be16(l.data(), len);
      rx.feed(l);
      CHECK(rx.error() == term::mpa_local_catastrophic);
      CHECK(sink.begins == 0);
      CHECK(sink.dest_calls == 0);
      REQUIRE(sink.ends.size() == 1);
      // What follows is drained, never handed to the sink.
      Bytes junk(70000, std::byte{0x5a});
      rx.feed(junk);
      CHECK(sink.dest_calls == 0);
      CHECK(rx.stream_offset() == 2 + junk.size());
    }
  }
  SECTION("64768 itself is accepted with the default limit") {
    const std::vector<Bytes> ulpdus = {pattern(kMaxUlpdu, 1)};
    Stream s = frame_all(true, true, ulpdus);
    require_clean(rx_whole(true, true, s.bytes), ulpdus, s.bytes.size());
  }
}

TEST_CASE("DDP-074 an error from the sink stops the stream, nothing is delivered after it",
          "[framing]") {
  const std::vector<Bytes> ulpdus = {pattern(10, 1), pattern(800, 2), pattern(30, 3),
                                     pattern(4, 4)};
  Stream s = frame_all(true, true, ulpdus);
  SECTION("ulpdu_begin refuses") {
    Collector sink;
    sink.fail_begin_at = 1;
    RxRun r = with_rx(
        true, true, [&](FpduRx& rx) { rx.feed(s.bytes); }, kMaxUlpdu, sink);
    CHECK(r.error == term::ddp_untagged_no_buffer);
    REQUIRE(r.ulpdus.size() == 1);
    CHECK(r.begins == 2);
    CHECK(r.ends.size() == 2);
    CHECK(r.ends.back() == term::ddp_untagged_no_buffer);
  }
  SECTION("ulpdu_landed refuses half way") {
    Collector sink;
    sink.fail_landed_at = 1;
    RxRun r = with_rx(
        true, true, [&](FpduRx& rx) { rx.feed(s.bytes); }, kMaxUlpdu, sink);
    CHECK(r.error == term::ddp_untagged_no_buffer);
    REQUIRE(r.ulpdus.size() == 1);
    CHECK(r.begins == 2);
    CHECK(r.ends.size() == 2);
    CHECK(r.ends.back() == term::ddp_untagged_no_buffer);
    CHECK(r.offset == s.bytes.size());
  }
}

TEST_CASE("MPA-03A MPA-046 FpduRx offsets and FPDU boundaries follow ULPDU_Length", "[framing]") {
  const std::vector<Bytes> ulpdus = {pattern(600, 1), pattern(3, 2)};
  Stream s = frame_all(true, true, ulpdus);
  Collector sink;
  FpduRx rx(true, true);
  rx.set_sink(&sink);
  CHECK(rx.at_fpdu_boundary());
  for (std::size_t i = 0; i < s.bytes.size(); ++i) {
    rx.feed(ConstBytes(s.bytes).subspan(i, 1));
    REQUIRE(rx.stream_offset() == i + 1);
    bool end_of_frame = false;
    for (const FrameInfo& f : s.frames)
      end_of_frame |= f.end == i + 1;
    // A leading marker is received before the FPDU counts as started.
    bool in_leading_marker = i + 1 <= 4 && s.frames[0].fpdu == 4;
    REQUIRE(rx.at_fpdu_boundary() == (end_of_frame || in_leading_marker));
  }
  CHECK(sink.ulpdus == ulpdus);
  CHECK_FALSE(rx.error());
}

// ---- TxFrame gather list -----------------------------------------------------------------

TEST_CASE("MPA-047 TxFrame partial writes: consume odd chunks, gather returns the rest",
          "[framing]") {
  const Bytes hdr = pattern(18, 1);
  const Bytes pay1 = pattern(1300, 2);
  const Bytes pay2 = pattern(777, 3);
  ConstBytes pieces[] = {pay1, pay2};
  for (auto [crc, markers] : kConfigs) {
    INFO("crc " << crc << " markers " << markers);
    FpduTx tx(crc, markers);
    tx.frame_bytes(pattern(100, 4)); // not at a marker slot any more
    TxFrame f;
    tx.frame(hdr, pieces, f);
    const Bytes all = f.to_bytes();
    const std::size_t markers_in =
        markers ? (all.size() - fpdu_len_without_markers(18 + 1300 + 777)) / 4 : 0;
    CHECK(all.size() == fpdu_len_without_markers(18 + 1300 + 777) + 4 * markers_in);
    if (markers) CHECK(markers_in >= 4);
    REQUIRE(f.size() == all.size());

    // Without CRC the payload is referenced, not copied: iovecs point into pay1/pay2. With
    // CRC it is copied (the CRC covers the copy): none does.
    std::vector<ConstBytes> iov;
    std::vector<std::uint8_t> ext_flags;
    f.gather(iov, &ext_flags);
    REQUIRE(iov.size() == f.piece_count());
    REQUIRE(ext_flags.size() == iov.size());
    std::size_t external = 0, flagged = 0;
    for (std::size_t i = 0; i < iov.size(); ++i) {
      const ConstBytes b = iov[i];
      if (b.data() >= pay1.data() && b.data() < pay1.data() + pay1.size()) external += b.size();
      if (b.data() >= pay2.data() && b.data() < pay2.data() + pay2.size()) external += b.size();
      if (ext_flags[i]) flagged += b.size();
    }
    CHECK(external == (crc ? 0 : pay1.size() + pay2.size()));
    CHECK(flagged == external);

    std::mt19937 rng(47);
    std::size_t sent = 0;
    const std::size_t odd[] = {1, 3, 7, 13, 2, 509, 5, 1021, 4, 11};
    std::size_t step = 0;
    while (sent < all.size()) {
      std::size_t n = std::min(odd[step++ % std::size(odd)], all.size() - sent);
      bool done = f.consume(n);
      sent += n;
      REQUIRE(done == (sent == all.size()));
      REQUIRE(f.remaining() == all.size() - sent);
      iov.clear();
      f.gather(iov);
      Bytes rest;
      for (ConstBytes b : iov) {
        REQUIRE(!b.empty());
        rest.insert(rest.end(), b.begin(), b.end());
      }
      REQUIRE(rest == Bytes(all.begin() + static_cast<std::ptrdiff_t>(sent), all.end()));
      REQUIRE(f.piece_count() == iov.size());
    }
    CHECK(f.remaining() == 0);
    CHECK(f.piece_count() == 0);
    // to_bytes still gives the whole frame.
    CHECK(f.to_bytes() == all);
    f.clear();
    CHECK(f.size() == 0);
    CHECK(f.remaining() == 0);
    iov.clear();
    f.gather(iov);
    CHECK(iov.empty());
  }
}

TEST_CASE("MPA-047 TxFrame consume across whole pieces and zero-length consume", "[framing]") {
  FpduTx tx(true, true);
  const Bytes pay = pattern(2000, 5);
  ConstBytes p[] = {pay};
  TxFrame f;
  tx.frame(pattern(30, 6), p, f);
  const Bytes all = f.to_bytes();
  std::vector<ConstBytes> iov;
  f.gather(iov);
  REQUIRE(iov.size() >= 5);
  // Exactly the first two pieces, as a writev that stopped at an iovec edge would.
  std::size_t two = iov[0].size() + iov[1].size();
  CHECK_FALSE(f.consume(0));
  CHECK_FALSE(f.consume(two));
  std::vector<ConstBytes> rest;
  f.gather(rest);
  CHECK(rest.size() == iov.size() - 2);
  CHECK(rest[0].data() == iov[2].data());
  CHECK(f.consume(f.remaining()));
  // A frame reused for the next FPDU starts afresh.
  tx.frame(pattern(4, 7), {}, f);
  CHECK(f.remaining() == f.size());
  CHECK((f.size() == fpdu_len_without_markers(4) || f.size() == fpdu_len_without_markers(4) + 4));
  iov.clear();
  f.gather(iov);
  Bytes again;
  for (ConstBytes b : iov)
    again.insert(again.end(), b.begin(), b.end());
  CHECK(again == f.to_bytes());
}

TEST_CASE("MPA-028 the CRC covers the octets sent, even when the source changes after framing",
          "[framing]") {
  // A program may change a buffer while a work request sends it (QEMU rewrites guest RAM while
  // it migrates it): the target's contents are then undefined, but the FPDU must still carry
  // a CRC over its own octets, or the receiver ends the connection (HX-030).
  const Bytes hdr = pattern(18, 5);
  for (auto [crc, markers] : kConfigs) {
    for (std::size_t n : {std::size_t{1}, std::size_t{4096}, std::size_t{20000}, kMaxUlpdu - 18}) {
      INFO("crc " << crc << " markers " << markers << " payload " << n);
      Bytes pay1 = pattern(n / 2, 6), pay2 = pattern(n - n / 2, 7);
      const Bytes orig1 = pay1, orig2 = pay2;
      ConstBytes pieces[] = {pay1, pay2};
      FpduTx tx(crc, markers);
      TxFrame f;
      tx.frame(hdr, pieces, f);
      // Rewritten after framing, before the frame is written.
      std::fill(pay1.begin(), pay1.end(), std::byte{0x5a});
      std::fill(pay2.begin(), pay2.end(), std::byte{0xa5});
      const Bytes wire = f.to_bytes();
      const RxRun r = rx_whole(crc, markers, wire);
      CHECK_FALSE(r.error);
      REQUIRE(r.ulpdus.size() == 1);
      Bytes want = hdr;
      if (crc) { // the octets of the time of framing, whole
        want.insert(want.end(), orig1.begin(), orig1.end());
        want.insert(want.end(), orig2.begin(), orig2.end());
      } else { // referenced: what the memory holds when it is written
        want.insert(want.end(), pay1.begin(), pay1.end());
        want.insert(want.end(), pay2.begin(), pay2.end());
      }
      CHECK(r.ulpdus[0] == want);
    }
  }
}
