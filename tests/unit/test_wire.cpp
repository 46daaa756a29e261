// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Wire formats (requirements §1): exact octet layouts and encode/decode round
// trips of every header libiwarp/wire.hpp defines, the opcode table, the
// Terminate code numbering and the MULPDU formula of RFC 5044 §4.5.
#include "catch_compat.hpp"
#include "hex.hpp"
#include "iwarp/wire.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

using namespace iwarp;

namespace {

using test::Bytes;
using test::hx;

Bytes text(std::string_view s) {
  Bytes b;
  for (char c : s)
    b.push_back(std::byte(static_cast<unsigned char>(c)));
  return b;
}

std::string hex(ConstBytes b) { return test::hex(b, " "); }

unsigned octet(const Bytes& b, std::size_t i) { return std::to_integer<unsigned>(b.at(i)); }

} // namespace

// ---- big-endian helpers, FPDU sizes, MULPDU ------------------------------------

TEST_CASE("EMPA-006 multi-octet fields are network byte order (load/store helpers)", "[wire]") {
  std::array<std::byte, 8> b{};
  store_be16(b.data(), 0x1234);
  CHECK(hex(ConstBytes(b).first(2)) == "12 34");
  CHECK(load_be16(b.data()) == 0x1234);
  store_be32(b.data(), 0x89abcdefu);
  CHECK(hex(ConstBytes(b).first(4)) == "89 ab cd ef");
  CHECK(load_be32(b.data()) == 0x89abcdefu);
  store_be64(b.data(), 0x0102030405060708ull);
  CHECK(hex(b) == "01 02 03 04 05 06 07 08");
  CHECK(load_be64(b.data()) == 0x0102030405060708ull);
  store_be64(b.data(), ~0ull);
  CHECK(load_be64(b.data()) == ~0ull);
  CHECK(load_be16(b.data()) == 0xffff);

  // Usable in constant expressions.
  constexpr auto v = [] {
    std::array<std::byte, 4> a{};
    store_be32(a.data(), 0xdeadbeef);
    return load_be32(a.data());
  }();
  STATIC_REQUIRE(v == 0xdeadbeef);
}

TEST_CASE("MPA-012 PAD makes ULPDU_Length + ULPDU + PAD a multiple of 4", "[wire]") {
  // RFC 5044 §4.1: PAD 0..3 so that the whole FPDU (2 + ULPDU + PAD + 4 CRC) is
  // a multiple of 4; MPA-014: overhead 6 octets + PAD (+ markers).
  CHECK(fpdu_pad(0) == 2);
  CHECK(fpdu_pad(1) == 1);
  CHECK(fpdu_pad(2) == 0);
  CHECK(fpdu_pad(3) == 3);
  CHECK(fpdu_pad(42) == 0); // the RFC 5044 example Send: 2 + 42 = 44
  for (std::size_t n = 0; n <= kMaxUlpdu; ++n) {
    std::size_t pad = fpdu_pad(n);
    REQUIRE(pad <= 3);
    REQUIRE((kMpaLenField + n + pad) % 4 == 0);
    REQUIRE(fpdu_len_without_markers(n) == 6 + n + pad);
    REQUIRE(fpdu_len_without_markers(n) % 4 == 0);
  }
  CHECK(fpdu_len_without_markers(0) == 8);
  CHECK(fpdu_len_without_markers(kMaxUlpdu) == 2 + 64768 + 2 + 4);
}

TEST_CASE("MPA-040 MULPDU from EMSS with and without markers", "[wire]") {
  // RFC 5044 §4.5: with markers EMSS - (6 + 4*ceil(EMSS/512) + EMSS mod 4),
  // without EMSS - (6 + EMSS mod 4).
  CHECK(mulpdu_for_emss(1460, false) == 1454);
  CHECK(mulpdu_for_emss(1460, true) == 1460 - (6 + 12 + 0));
  CHECK(mulpdu_for_emss(1448, false) == 1442);
  CHECK(mulpdu_for_emss(1448, true) == 1448 - (6 + 12));
  CHECK(mulpdu_for_emss(1461, false) == 1461 - 7);
  CHECK(mulpdu_for_emss(1463, true) == 1463 - (6 + 12 + 3));
  CHECK(mulpdu_for_emss(512, true) == 512 - (6 + 4));
  CHECK(mulpdu_for_emss(513, true) == 513 - (6 + 8 + 1));
  CHECK(mulpdu_for_emss(8960, false) == 8954);
  CHECK(mulpdu_for_emss(9000, true) == 9000 - (6 + 4 * 18));

  for (std::size_t emss = 0; emss <= 70000; ++emss) {
    for (bool markers : {false, true}) {
      long long formula = static_cast<long long>(emss) - 6 - static_cast<long long>(emss % 4) -
                          (markers ? 4 * static_cast<long long>((emss + 511) / 512) : 0);
      long long expect = std::clamp<long long>(formula, 128, 64768);
      INFO("EMSS " << emss << " markers " << markers);
      REQUIRE(static_cast<long long>(mulpdu_for_emss(emss, markers)) == expect);
    }
  }
}

TEST_CASE("MPA-042 MULPDU is never below 128 (EMSS < 128) nor above 64768 (MPA-002)", "[wire]") {
  for (bool markers : {false, true}) {
    CHECK(mulpdu_for_emss(0, markers) == 128);
    CHECK(mulpdu_for_emss(1, markers) == 128);
    CHECK(mulpdu_for_emss(100, markers) == 128);
    CHECK(mulpdu_for_emss(127, markers) == 128);
    CHECK(mulpdu_for_emss(134, markers) == 128); // 134 - 8 = 126 (markers: 122)
    CHECK(mulpdu_for_emss(65535, markers) == kMaxUlpdu);
    CHECK(mulpdu_for_emss(std::size_t{1} << 20, markers) == kMaxUlpdu);
  }
  CHECK(mulpdu_for_emss(136, false) == 130);
  CHECK(mulpdu_for_emss(140, true) == 130);
  STATIC_REQUIRE(mulpdu_for_emss(1460, false) == 1454); // constexpr
  STATIC_REQUIRE(kMinMulpdu == 128);
  STATIC_REQUIRE(kMaxUlpdu == 64768);
}

// ---- MPA Request / Reply -----------------------------------------------------------

TEST_CASE("MPA-053 Request and Reply keys are the exact 16 octets", "[wire]") {
  MpaFrameHeader h;
  Bytes b(kMpaFrameHeaderLen);
  h.kind = MpaKind::Request;
  h.encode(b.data());
  CHECK(hex(ConstBytes(b).first(16)) == "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65");
  h.kind = MpaKind::Reply;
  h.encode(b.data());
  CHECK(hex(ConstBytes(b).first(16)) == "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65");
  STATIC_REQUIRE(kMpaRequestKey.size() == 16);
  STATIC_REQUIRE(kMpaReplyKey.size() == 16);
  STATIC_REQUIRE(kMpaFrameHeaderLen == 20); // MPA-05B
}

TEST_CASE("MPA-053 decode rejects any key other than Request or Reply (HX-001)", "[wire]") {
  auto try_key = [](std::string_view key) {
    Bytes b = text(key);
    b.resize(kMpaFrameHeaderLen);
    return MpaFrameHeader::decode(b.data());
  };
  REQUIRE(try_key("MPA ID Req Frame"));
  CHECK(try_key("MPA ID Req Frame")->kind == MpaKind::Request);
  REQUIRE(try_key("MPA ID Rep Frame"));
  CHECK(try_key("MPA ID Rep Frame")->kind == MpaKind::Reply);
  CHECK_FALSE(try_key("mpa id req frame"));
  CHECK_FALSE(try_key("MPA ID Req Fram"));
  CHECK_FALSE(try_key("MPA ID Rsp Frame"));
  CHECK_FALSE(try_key("GET / HTTP/1.1\r\n"));
  CHECK_FALSE(
      try_key(std::string_view("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x00\x00\x00\x00\x00",
                               16))); // TLS ClientHello
  CHECK_FALSE(try_key(""));
}

TEST_CASE("MPA-054 octet 16 flag bits M C R S, Rev in octet 17, PD_Length in 18-19", "[wire]") {
  STATIC_REQUIRE(kMpaFlagM == 0x80);
  STATIC_REQUIRE(kMpaFlagC == 0x40);
  STATIC_REQUIRE(kMpaFlagR == 0x20);
  STATIC_REQUIRE(kMpaFlagS == 0x10);

  MpaFrameHeader h;
  h.kind = MpaKind::Reply;
  h.flags = kMpaFlagM | kMpaFlagR;
  h.rev = 1;
  h.pd_length = 0x0123;
  Bytes b(kMpaFrameHeaderLen);
  h.encode(b.data());
  CHECK(octet(b, 16) == 0xa0);
  CHECK(octet(b, 17) == 1);
  CHECK(octet(b, 18) == 0x01);
  CHECK(octet(b, 19) == 0x23);
  auto d = MpaFrameHeader::decode(b.data());
  REQUIRE(d);
  CHECK(d->kind == MpaKind::Reply);
  CHECK(d->markers());
  CHECK_FALSE(d->crc());
  CHECK(d->reject());
  CHECK_FALSE(d->enhanced());
  CHECK(d->rev == 1);
  CHECK(d->pd_length == 0x0123);

  // Each flag on its own, through MpaFrame (the whole frame).
  struct Case {
    bool m, c, s;
    unsigned octet16;
  };
  for (Case k : {Case{false, false, false, 0x00}, Case{true, false, false, 0x80},
                 Case{false, true, false, 0x40}, Case{true, true, false, 0xc0},
                 Case{false, false, true, 0x10}, Case{true, true, true, 0xd0}}) {
    MpaFrame f;
    f.kind = MpaKind::Request;
    f.markers = k.m;
    f.crc = k.c;
    if (k.s) f.enhanced = MpaEnhanced{};
    f.rev = k.s ? 2 : 1;
    Bytes w = f.encode();
    REQUIRE(w.size() == kMpaFrameHeaderLen + (k.s ? 4 : 0));
    CHECK(octet(w, 16) == k.octet16);
    CHECK(octet(w, 17) == f.rev);
    CHECK(load_be16(w.data() + 18) == (k.s ? 4 : 0));
    auto r = MpaFrameHeader::decode(w.data());
    REQUIRE(r);
    CHECK(r->markers() == k.m);
    CHECK(r->crc() == k.c);
    CHECK(r->enhanced() == k.s);
    CHECK_FALSE(r->reject());
  }
}

TEST_CASE("MPA-056 R bit is sent only in a Reply, a Request never carries it", "[wire]") {
  MpaFrame f;
  f.reject = true;
  f.kind = MpaKind::Request;
  CHECK((octet(f.encode(), 16) & kMpaFlagR) == 0);
  f.kind = MpaKind::Reply;
  CHECK((octet(f.encode(), 16) & kMpaFlagR) == kMpaFlagR);
  f.reject = false;
  CHECK((octet(f.encode(), 16) & kMpaFlagR) == 0);
}

TEST_CASE("MPA-057 Res bits are sent as 0 and kept unchecked on receive (HX-010)", "[wire]") {
  MpaFrame f; // defaults: Request, CRC on, no markers
  CHECK((octet(f.encode(), 16) & 0x0f) == 0);
  // R=1 in a Request and every Res bit set: decoding does not fail and keeps
  // the bits as received (the startup engine decides, and must not check them).
  Bytes b = text(kMpaRequestKey);
  b.resize(kMpaFrameHeaderLen);
  b[16] = std::byte{0x2f};
  b[17] = std::byte{1};
  auto h = MpaFrameHeader::decode(b.data());
  REQUIRE(h);
  CHECK(h->flags == 0x2f);
  CHECK(h->reject());
  CHECK_FALSE(h->markers());
  CHECK_FALSE(h->crc());
  CHECK_FALSE(h->enhanced());
}

TEST_CASE("OX-10 siw large-FPDU flag 0x08 in octet 16", "[wire]") {
  STATIC_REQUIRE(kMpaFlagLargeFpdu == 0x08);
  MpaFrame f;
  f.crc = true;
  f.markers = false;
  f.rev = 1;
  f.large_fpdu = true;
  Bytes w = f.encode();
  CHECK(octet(w, 16) == (0x40 | 0x08));
  auto h = MpaFrameHeader::decode(w.data());
  REQUIRE(h);
  CHECK((h->flags & kMpaFlagLargeFpdu) != 0);
  // It is a Res bit to RFC 5044: it changes none of M/C/R/S.
  CHECK(h->crc());
  CHECK_FALSE(h->markers());
  CHECK_FALSE(h->reject());
  CHECK_FALSE(h->enhanced());
  f.large_fpdu = false;
  CHECK(octet(f.encode(), 16) == 0x40);
}

TEST_CASE("MPA-059 PD_Length and Private Data follow the 20-octet header", "[wire]") {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{511}, kMaxPrivateData}) {
    MpaFrame f;
    f.kind = MpaKind::Reply;
    f.rev = 1;
    for (std::size_t i = 0; i < n; ++i)
      f.private_data.push_back(std::byte(i * 13 + 7));
    Bytes w = f.encode();
    REQUIRE(w.size() == kMpaFrameHeaderLen + n);
    CHECK(load_be16(w.data() + 18) == n);
    CHECK(Bytes(w.begin() + 20, w.end()) == f.private_data);
    CHECK(f.pd_length() == n);
  }
}

TEST_CASE("EMPA-005 PD_Length counts the 4 enhanced octets, ULP PD follows them", "[wire]") {
  MpaFrame f;
  f.kind = MpaKind::Request;
  f.rev = 2;
  f.enhanced = MpaEnhanced{true, true, false, true, 7, 9};
  f.private_data = text("hello");
  CHECK(f.pd_length() == 9);
  Bytes w = f.encode();
  REQUIRE(w.size() == 20 + 4 + 5);
  CHECK(octet(w, 16) == (kMpaFlagC | kMpaFlagS));
  CHECK(octet(w, 17) == 2);
  CHECK(load_be16(w.data() + 18) == 9);
  CHECK(hex(ConstBytes(w).subspan(20, 4)) == "c0 07 40 09");
  CHECK(Bytes(w.begin() + 24, w.end()) == text("hello"));
  CHECK(MpaEnhanced::decode(w.data() + 20) == *f.enhanced);
  // 508 ULP octets + 4 enhanced = the 512 maximum.
  f.private_data.assign(kMaxPrivateData - kEnhancedDataLen, std::byte{0x5a});
  CHECK(f.pd_length() == kMaxPrivateData);
  CHECK(load_be16(f.encode().data() + 18) == 512);
}

TEST_CASE("EMPA-006 enhanced data layout A|B|IRD, C|D|ORD in network order", "[wire]") {
  std::array<std::byte, 4> b{};
  MpaEnhanced e;
  e.p2p = true;
  e.rtr_send = true;
  e.ird = 0x0102;
  e.ord = 0x0304;
  e.encode(b.data());
  CHECK(hex(b) == "c1 02 03 04");
  e.rtr_send = false;
  e.rtr_write = true;
  e.encode(b.data());
  CHECK(hex(b) == "81 02 83 04");
  e.rtr_write = false;
  e.rtr_read = true;
  e.encode(b.data());
  CHECK(hex(b) == "81 02 43 04");
  e = MpaEnhanced{};
  e.encode(b.data());
  CHECK(hex(b) == "00 00 00 00");

  // Every combination round-trips while A=1.
  for (unsigned bits = 0; bits < 8; ++bits) {
    MpaEnhanced x{true,
                  bool(bits & 1),
                  bool(bits & 2),
                  bool(bits & 4),
                  static_cast<std::uint16_t>(bits * 1000),
                  static_cast<std::uint16_t>(0x3fff - bits)};
    x.encode(b.data());
    CHECK(MpaEnhanced::decode(b.data()) == x);
  }
}

TEST_CASE("EMPA-037 A=0: B/C/D are zero on transmit and ignored on receive (HX-013)", "[wire]") {
  std::array<std::byte, 4> b{};
  MpaEnhanced e{false, true, true, true, 5, 6};
  e.encode(b.data());
  CHECK(hex(b) == "00 05 00 06");

  // A peer that sets B, C, D with A=0: all three read as false.
  auto d = MpaEnhanced::decode(hx("40 05 c0 06").data());
  CHECK_FALSE(d.p2p);
  CHECK_FALSE(d.rtr_send);
  CHECK_FALSE(d.rtr_write);
  CHECK_FALSE(d.rtr_read);
  CHECK(d.ird == 5);
  CHECK(d.ord == 6);
  // With A=1 the same bits count.
  d = MpaEnhanced::decode(hx("c0 05 c0 06").data());
  CHECK(d.p2p);
  CHECK(d.rtr_send);
  CHECK(d.rtr_write);
  CHECK(d.rtr_read);
}

TEST_CASE("EMPA-006 IRD and ORD are 14-bit: 0x3FFF mask, no spill into A/B/C/D", "[wire]") {
  STATIC_REQUIRE(kIrdOrdMask == 0x3fff);
  STATIC_REQUIRE(kIrdOrdNoNegotiation == 0x3fff); // EMPA-028
  std::array<std::byte, 4> b{};
  MpaEnhanced e;
  e.ird = 0xffff; // out of range: only the low 14 bits go out
  e.ord = 0xc001;
  e.encode(b.data());
  CHECK(hex(b) == "3f ff 00 01");
  auto d = MpaEnhanced::decode(b.data());
  CHECK_FALSE(d.p2p);
  CHECK(d.ird == 0x3fff);
  CHECK(d.ord == 0x0001);

  d = MpaEnhanced::decode(hx("ff ff ff ff").data());
  CHECK(d.p2p);
  CHECK(d.rtr_send);
  CHECK(d.rtr_write);
  CHECK(d.rtr_read);
  CHECK(d.ird == 0x3fff);
  CHECK(d.ord == 0x3fff);
}

// ---- DDP / RDMAP headers ------------------------------------------------------------

TEST_CASE("DDP-020 single-segment IETF Send: 41 43, untagged 18-octet header", "[wire]") {
  DdpHeader h;
  h.tagged = false;
  h.last = true;
  h.opcode = static_cast<std::uint8_t>(Opcode::Send);
  h.qn = kQnSend;
  h.msn = 1;
  h.mo = 0;
  REQUIRE(h.size() == kUntaggedHdrLen);
  Bytes b(h.size());
  h.encode(b.data());
  // RFC 5044 §4.4 Fig. 5 (requirements Appendix A vector 1), octets after ULPDU_Length.
  CHECK(hex(b) == "41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00");
  CHECK_FALSE(DdpHeader::is_tagged(b.data()));
  CHECK(DdpHeader::decode(b.data()) == h);

  h.inval_stag = 0xa1b2c3d4;
  h.qn = 0x01020304;
  h.msn = 0x05060708;
  h.mo = 0x090a0b0c;
  h.encode(b.data());
  CHECK(hex(b) == "41 43 a1 b2 c3 d4 01 02 03 04 05 06 07 08 09 0a 0b 0c");
  CHECK(DdpHeader::decode(b.data()) == h);
}

TEST_CASE("DDP-020 tagged header: 14 octets T|L|DV, RDMAP ctrl, STag, TO", "[wire]") {
  DdpHeader h;
  h.tagged = true;
  h.last = true;
  h.opcode = static_cast<std::uint8_t>(Opcode::RdmaWrite);
  h.stag = 0x11223344;
  h.to = 0x5566778899aabbccull;
  REQUIRE(h.size() == kTaggedHdrLen);
  Bytes b(h.size());
  h.encode(b.data());
  CHECK(hex(b) == "c1 40 11 22 33 44 55 66 77 88 99 aa bb cc");
  CHECK(DdpHeader::is_tagged(b.data()));
  CHECK(DdpHeader::decode(b.data()) == h);

  h.opcode = static_cast<std::uint8_t>(Opcode::RdmaReadResponse);
  h.encode(b.data());
  CHECK(hex(ConstBytes(b).first(2)) == "c1 42");
}

TEST_CASE("DDP-021 L bit is set only on the last segment", "[wire]") {
  DdpHeader h;
  h.last = false;
  h.opcode = 3;
  Bytes b(kTaggedHdrLen + 4);
  h.encode(b.data());
  CHECK(octet(b, 0) == 0x01);
  CHECK_FALSE(DdpHeader::decode(b.data()).last);
  h.tagged = true;
  h.encode(b.data());
  CHECK(octet(b, 0) == 0x81);
  CHECK_FALSE(DdpHeader::decode(b.data()).last);
  h.last = true;
  h.encode(b.data());
  CHECK(octet(b, 0) == 0xc1);
  CHECK(DdpHeader::decode(b.data()).last);
}

TEST_CASE("DDP-024 DV and RV: 1 for IETF, 0 for RDMAC, in their 2-bit fields", "[wire]") {
  STATIC_REQUIRE(kVersionIetf == 1);
  STATIC_REQUIRE(kVersionRdmac == 0);
  DdpHeader h;
  h.ddp_version = kVersionRdmac;
  h.rdmap_version = kVersionRdmac;
  h.opcode = static_cast<std::uint8_t>(Opcode::Send);
  Bytes b(kUntaggedHdrLen);
  h.encode(b.data());
  CHECK(hex(ConstBytes(b).first(2)) == "40 03"); // IOP: V=0 Send
  auto d = DdpHeader::decode(b.data());
  CHECK(d.ddp_version == 0);
  CHECK(d.rdmap_version == 0);

  // Out-of-range values stay inside their fields on transmit.
  h.ddp_version = 0xff;
  h.rdmap_version = 0xfe;
  h.opcode = 0xf3;
  h.encode(b.data());
  CHECK(octet(b, 0) == (0x40 | 0x03));
  CHECK(octet(b, 1) == (0x80 | 0x03));
  d = DdpHeader::decode(b.data());
  CHECK(d.ddp_version == 3);
  CHECK(d.rdmap_version == 2);
  CHECK(d.opcode == 3);
  CHECK(d.op() == Opcode::Send);
}

TEST_CASE(
    "DDP-023 Rsvd and RDMAP Rsv bits are 0 on transmit and ignored on receive (HX-051, HX-073)",
    "[wire]") {
  DdpHeader h;
  h.opcode = 0xf;
  Bytes b(kUntaggedHdrLen);
  h.encode(b.data());
  CHECK((octet(b, 0) & 0x3c) == 0); // DDP Rsvd
  CHECK((octet(b, 1) & 0x30) == 0); // RDMAP Rsv (bits 26-27)

  b[0] = std::byte{0x7d}; // T=0 L=1 Rsvd=1111 DV=01
  b[1] = std::byte{0x73}; // RV=01 Rsv=11 Send
  auto d = DdpHeader::decode(b.data());
  CHECK_FALSE(d.tagged);
  CHECK(d.last);
  CHECK(d.ddp_version == 1);
  CHECK(d.rdmap_version == 1);
  CHECK(d.opcode == 3);
}

TEST_CASE("RDMAP-010 Send with Invalidate carries the STag in RsvdULP[8:39]", "[wire]") {
  DdpHeader h;
  h.opcode = static_cast<std::uint8_t>(Opcode::SendSeInvalidate);
  h.inval_stag = 0xcafef00d;
  h.msn = 7;
  Bytes b(kUntaggedHdrLen);
  h.encode(b.data());
  CHECK(hex(b) == "41 46 ca fe f0 0d 00 00 00 00 00 00 00 07 00 00 00 00");
  CHECK(DdpHeader::decode(b.data()).inval_stag == 0xcafef00d);
}

TEST_CASE("DDP-031 DDP header encode/decode round trip over random fields", "[wire]") {
  std::mt19937_64 rng(20240601);
  for (int i = 0; i < 2000; ++i) {
    DdpHeader h;
    std::uint64_t r = rng();
    h.tagged = r & 1;
    h.last = r & 2;
    h.ddp_version = (r >> 2) & 3;
    h.rdmap_version = (r >> 4) & 3;
    h.opcode = (r >> 6) & 0xf;
    if (h.tagged) {
      h.stag = static_cast<std::uint32_t>(rng());
      h.to = rng();
    } else {
      h.inval_stag = static_cast<std::uint32_t>(rng());
      h.qn = static_cast<std::uint32_t>(rng());
      h.msn = static_cast<std::uint32_t>(rng());
      h.mo = static_cast<std::uint32_t>(rng());
    }
    Bytes b(kUntaggedHdrLen, std::byte{0xee});
    h.encode(b.data());
    // Writes exactly size() octets.
    for (std::size_t k = h.size(); k < b.size(); ++k)
      REQUIRE(b[k] == std::byte{0xee});
    REQUIRE(DdpHeader::is_tagged(b.data()) == h.tagged);
    REQUIRE(DdpHeader::decode(b.data()) == h);
  }
}

TEST_CASE("RDMAP-016 Read Request header: 28 octets SinkSTag SinkTO RDMARDSZ SrcSTag SrcTO",
          "[wire]") {
  STATIC_REQUIRE(kReadRequestHdrLen == 28);
  ReadRequestHeader r;
  r.sink_stag = 0x01020304;
  r.sink_to = 0x1112131415161718ull;
  r.size = 0x21222324;
  r.src_stag = 0x31323334;
  r.src_to = 0x4142434445464748ull;
  Bytes b(kReadRequestHdrLen);
  r.encode(b.data());
  CHECK(hex(b) ==
        "01 02 03 04 11 12 13 14 15 16 17 18 21 22 23 24 31 32 33 34 41 42 43 44 45 46 47 48");
  CHECK(ReadRequestHeader::decode(b.data()) == r);

  // A whole RDMA Read Request ULPDU: untagged DDP header on QN 1 then this header.
  DdpHeader h;
  h.opcode = static_cast<std::uint8_t>(Opcode::RdmaReadRequest);
  h.qn = kQnReadRequest;
  h.msn = 1;
  Bytes u(kUntaggedHdrLen + kReadRequestHdrLen);
  h.encode(u.data());
  r.encode(u.data() + kUntaggedHdrLen);
  CHECK(hex(ConstBytes(u).first(2)) == "41 41");
  CHECK(load_be32(u.data() + 6) == 1); // QN
  CHECK(ReadRequestHeader::decode(u.data() + kUntaggedHdrLen) == r);
}

// ---- Terminate ----------------------------------------------------------------------

namespace {

void check_same(const TerminateHeader& a, const TerminateHeader& b) {
  CHECK(a.code == b.code);
  CHECK(a.m == b.m);
  CHECK(a.d == b.d);
  CHECK(a.r == b.r);
  if (a.m) CHECK(a.ddp_segment_length == b.ddp_segment_length);
  if (a.d) {
    CHECK(a.ddp_header_len == b.ddp_header_len);
    CHECK(hex(ConstBytes(a.ddp_header).first(a.ddp_header_len)) ==
          hex(ConstBytes(b.ddp_header).first(b.ddp_header_len)));
  }
  if (a.r) CHECK(hex(a.rdma_header) == hex(b.rdma_header));
}

// A Terminate for a Remote Protection error on a Read Request (RFC 5040 Fig. 10):
// segment length, the untagged DDP header and the 28-octet RDMA header.
TerminateHeader read_request_term() {
  TerminateHeader t;
  t.code = term::rdmap_base_bounds;
  t.m = t.d = t.r = true;
  t.ddp_segment_length = kUntaggedHdrLen + kReadRequestHdrLen;
  DdpHeader h;
  h.opcode = static_cast<std::uint8_t>(Opcode::RdmaReadRequest);
  h.qn = kQnReadRequest;
  h.msn = 3;
  h.encode(t.ddp_header.data());
  t.ddp_header_len = kUntaggedHdrLen;
  ReadRequestHeader r{0x10, 0x2000, 0x300, 0x40, 0x5000};
  r.encode(t.rdma_header.data());
  return t;
}

// A Terminate for a tagged DDP error: segment length and the 14-octet header.
TerminateHeader tagged_term() {
  TerminateHeader t;
  t.code = term::ddp_tagged_base_bounds;
  t.m = t.d = true;
  t.ddp_segment_length = 0x05dc;
  DdpHeader h;
  h.tagged = true;
  h.opcode = static_cast<std::uint8_t>(Opcode::RdmaWrite);
  h.stag = 0xabcdef01;
  h.to = 0x1000;
  h.encode(t.ddp_header.data());
  t.ddp_header_len = kTaggedHdrLen;
  return t;
}

} // namespace

TEST_CASE("TM-005 Terminate control: Layer|EType, Error Code, M D R bits", "[wire]") {
  TerminateHeader t;
  t.code = term::mpa_crc_error;
  REQUIRE(t.encoded_size() == kTerminateCtrlLen);
  Bytes b(t.encoded_size());
  t.encode(b.data());
  CHECK(hex(b) == "20 02 00 00"); // Layer 2 (LLP), EType 0 (MPA), code 2; HdrCt=000

  t.code = term::ddp_untagged_msn_range;
  t.encode(b.data());
  CHECK(hex(b) == "12 03 00 00");
  t.code = term::rdmap_op_unspecified;
  t.encode(b.data());
  CHECK(hex(b) == "02 ff 00 00");

  TerminateHeader full = read_request_term();
  Bytes f(full.encoded_size());
  full.encode(f.data());
  CHECK(hex(ConstBytes(f).first(4)) == "01 01 e0 00"); // M D R

  for (auto [m, d, r, bits] :
       {std::tuple{true, false, false, 0x80u}, std::tuple{false, true, false, 0x40u},
        std::tuple{false, false, true, 0x20u}}) {
    TerminateHeader x = read_request_term();
    x.m = m;
    x.d = d;
    x.r = r;
    Bytes e(x.encoded_size());
    x.encode(e.data());
    CHECK(octet(e, 2) == bits);
    auto dec = TerminateHeader::decode(e);
    REQUIRE(dec);
    CHECK(dec->m == m);
    CHECK(dec->d == d);
    CHECK(dec->r == r);
  }
}

TEST_CASE("TM-006 Terminate reserved 13 bits are 0 on transmit and ignored on receive", "[wire]") {
  TerminateHeader t = tagged_term();
  Bytes b(t.encoded_size());
  t.encode(b.data());
  CHECK((octet(b, 2) & 0x1f) == 0);
  CHECK(octet(b, 3) == 0);
  b[2] |= std::byte{0x1f};
  b[3] = std::byte{0xff};
  auto d = TerminateHeader::decode(b);
  REQUIRE(d);
  check_same(*d, t);
}

TEST_CASE("TM-007 Terminate optional parts follow HdrCt: length, DDP header 14/18, RDMA header 28",
          "[wire]") {
  SECTION("Read Request error: M D R, untagged DDP header, RDMA header") {
    TerminateHeader t = read_request_term();
    REQUIRE(t.encoded_size() == 4 + 2 + 18 + 28);
    STATIC_REQUIRE(kTerminateMaxLen == 52);
    Bytes b(t.encoded_size());
    t.encode(b.data());
    CHECK(load_be16(b.data() + 4) == 46);
    CHECK(hex(ConstBytes(b).subspan(6, 18)) == hex(ConstBytes(t.ddp_header).first(18)));
    CHECK(hex(ConstBytes(b).subspan(24, 28)) == hex(t.rdma_header));
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    check_same(*d, t);
    CHECK(ReadRequestHeader::decode(d->rdma_header.data()).size == 0x300);
  }
  SECTION("tagged DDP error: M D, 14-octet DDP header") {
    TerminateHeader t = tagged_term();
    REQUIRE(t.encoded_size() == 4 + 2 + 14);
    Bytes b(t.encoded_size());
    t.encode(b.data());
    CHECK(hex(b) == "11 01 c0 00 05 dc c1 40 ab cd ef 01 00 00 00 00 00 00 10 00");
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    check_same(*d, t);
    CHECK(d->ddp_header_len == kTaggedHdrLen);
  }
  SECTION("tagged DDP header with an RDMA header: 4 + 2 + 14 + 28") {
    TerminateHeader t = tagged_term();
    t.r = true;
    ReadRequestHeader{1, 2, 3, 4, 5}.encode(t.rdma_header.data());
    REQUIRE(t.encoded_size() == 48);
    Bytes b(t.encoded_size());
    t.encode(b.data());
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    check_same(*d, t);
  }
  SECTION("M only: the segment length") {
    TerminateHeader t;
    t.code = term::ddp_untagged_too_long;
    t.m = true;
    t.ddp_segment_length = 0xbeef;
    REQUIRE(t.encoded_size() == 6);
    Bytes b(t.encoded_size());
    t.encode(b.data());
    CHECK(hex(b) == "12 05 80 00 be ef");
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    check_same(*d, t);
  }
  SECTION("D without M: length field present (zero), DDP header follows") {
    TerminateHeader t = tagged_term();
    t.m = false;
    REQUIRE(t.encoded_size() == 20);
    Bytes b(t.encoded_size());
    t.encode(b.data());
    CHECK(load_be16(b.data() + 4) == 0);
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    check_same(*d, t);
  }
  SECTION("R only: the RDMA header right after the control field") {
    TerminateHeader t = read_request_term();
    t.m = t.d = false;
    REQUIRE(t.encoded_size() == 32);
    Bytes b(t.encoded_size());
    t.encode(b.data());
    CHECK(hex(ConstBytes(b).subspan(4)) == hex(t.rdma_header));
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    check_same(*d, t);
  }
  SECTION("Local Catastrophic: no optional parts") {
    TerminateHeader t;
    t.code = term::rdmap_local_catastrophic;
    Bytes b(t.encoded_size());
    t.encode(b.data());
    CHECK(hex(b) == "00 00 00 00");
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    check_same(*d, t);
  }
}

TEST_CASE("HX-093 Terminate shorter than its HdrCt bits promise is rejected", "[wire]") {
  for (TerminateHeader t : {read_request_term(), tagged_term()}) {
    for (bool r : {false, true}) {
      t.r = r;
      Bytes b(t.encoded_size());
      t.encode(b.data());
      REQUIRE(TerminateHeader::decode(b));
      for (std::size_t n = 0; n < b.size(); ++n) {
        INFO("prefix " << n << " of " << b.size());
        CHECK_FALSE(TerminateHeader::decode(ConstBytes(b).first(n)));
      }
    }
  }
  CHECK_FALSE(TerminateHeader::decode(hx("20 02 00")));
  CHECK_FALSE(TerminateHeader::decode(hx("11 01 80 00 00")));          // M: no length
  CHECK_FALSE(TerminateHeader::decode(hx("11 01 40 00 00 0e c1")));    // D: header cut
  CHECK_FALSE(TerminateHeader::decode(hx("01 01 20 00 00 00 00 00"))); // R: header cut
}

TEST_CASE("C-06 Terminate decode tolerates the zero-padded fixed layout", "[wire]") {
  // RFC 5040 §7.1 rule 1 reads as a fixed layout: 4 control octets, a 2-octet
  // length, an 18-octet DDP header slot and a 28-octet RDMA header slot, zeros
  // where not applicable (52 octets). The HdrCt bits still say what is valid.
  ReadRequestHeader rr{0xa, 0xb, 0xc, 0xd, 0xe};
  SECTION("tagged DDP header padded to 18 octets, then the RDMA header") {
    TerminateHeader t = tagged_term();
    t.r = true;
    Bytes b(kTerminateMaxLen);
    t.encode(b.data()); // variable layout: RDMA header at 20
    std::fill(b.begin() + 20, b.end(), std::byte{0});
    rr.encode(b.data() + 24); // fixed layout: RDMA header at 24
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    CHECK(d->ddp_header_len == kTaggedHdrLen);
    CHECK(hex(ConstBytes(d->ddp_header).first(14)) == hex(ConstBytes(t.ddp_header).first(14)));
    CHECK(ReadRequestHeader::decode(d->rdma_header.data()) == rr);
  }
  SECTION("no DDP header (D=0) but R set: RDMA header still in its slot at 24") {
    for (bool m : {false, true}) {
      Bytes b(kTerminateMaxLen);
      b[0] = std::byte{0x01}; // RDMAP, Remote Protection
      b[1] = std::byte{0x00}; // Invalid STag
      b[2] = std::byte((m ? 0x80 : 0) | 0x20);
      store_be16(b.data() + 4, 46);
      rr.encode(b.data() + 24);
      auto d = TerminateHeader::decode(b);
      REQUIRE(d);
      CHECK(d->code == term::rdmap_invalid_stag);
      CHECK(d->r);
      CHECK_FALSE(d->d);
      if (m) CHECK(d->ddp_segment_length == 46);
      CHECK(ReadRequestHeader::decode(d->rdma_header.data()) == rr);
    }
  }
  SECTION("untagged DDP header and RDMA header: fixed and variable layouts coincide") {
    TerminateHeader t = read_request_term();
    Bytes b(t.encoded_size());
    t.encode(b.data());
    REQUIRE(b.size() == kTerminateMaxLen);
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    check_same(*d, t);
  }
  SECTION("MPA error with the whole fixed layout zero") {
    Bytes b(kTerminateMaxLen);
    b[0] = std::byte{0x20};
    b[1] = std::byte{0x03};
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    CHECK(d->code == term::mpa_marker_mismatch);
    CHECK_FALSE(d->m);
    CHECK_FALSE(d->d);
    CHECK_FALSE(d->r);
  }
}

// ---- RFC 7306 Atomics -----------------------------------------------------------------

TEST_CASE("EXT-005 Atomic Request header: 52 octets, AOpCode in the low 4 bits", "[wire]") {
  STATIC_REQUIRE(kAtomicRequestHdrLen == 52);
  AtomicRequestHeader a;
  a.aopcode = static_cast<std::uint8_t>(AtomicOp::CompareSwap);
  a.req_id = 0x01020304;
  a.remote_stag = 0x05060708;
  a.remote_to = 0x1011121314151617ull;
  a.add_swap = 0x2021222324252627ull;
  a.add_swap_mask = 0x3031323334353637ull;
  a.compare = 0x4041424344454647ull;
  a.compare_mask = 0x5051525354555657ull;
  Bytes b(kAtomicRequestHdrLen);
  a.encode(b.data());
  CHECK(hex(b) == "00 00 00 02 01 02 03 04 05 06 07 08 10 11 12 13 14 15 16 17 "
                  "20 21 22 23 24 25 26 27 30 31 32 33 34 35 36 37 "
                  "40 41 42 43 44 45 46 47 50 51 52 53 54 55 56 57");
  AtomicRequestHeader d = AtomicRequestHeader::decode(b.data());
  CHECK(d.aopcode == 2);
  CHECK(d.req_id == a.req_id);
  CHECK(d.remote_stag == a.remote_stag);
  CHECK(d.remote_to == a.remote_to);
  CHECK(d.add_swap == a.add_swap);
  CHECK(d.add_swap_mask == a.add_swap_mask);
  CHECK(d.compare == a.compare);
  CHECK(d.compare_mask == a.compare_mask);

  // The 28 reserved bits are not transmitted and not looked at on receive.
  a.aopcode = 0xf0 | static_cast<std::uint8_t>(AtomicOp::FetchAdd);
  a.encode(b.data());
  CHECK(load_be32(b.data()) == 0);
  b[0] = std::byte{0xff};
  b[3] = std::byte{0xf2};
  CHECK(AtomicRequestHeader::decode(b.data()).aopcode == 2);

  // EXT-005: unused masks default to all ones.
  AtomicRequestHeader def;
  CHECK(def.add_swap_mask == ~0ull);
  CHECK(def.compare_mask == ~0ull);
}

TEST_CASE("C-16 Atomic Response header: 12 octets OrigReqID | OrigRemoteDataValue", "[wire]") {
  STATIC_REQUIRE(kAtomicResponseHdrLen == 12);
  STATIC_REQUIRE(kImmediateDataLen == 8);
  AtomicResponseHeader r{0xdeadbeef, 0x0123456789abcdefull};
  Bytes b(kAtomicResponseHdrLen);
  r.encode(b.data());
  CHECK(hex(b) == "de ad be ef 01 23 45 67 89 ab cd ef");
  AtomicResponseHeader d = AtomicResponseHeader::decode(b.data());
  CHECK(d.orig_req_id == r.orig_req_id);
  CHECK(d.orig_value == r.orig_value);
}

// ---- opcode table -------------------------------------------------------------------------

TEST_CASE("RDMAP-011 opcode table rows 0x0..0xB: T bit, QN, RDMAP header size", "[wire]") {
  struct Row {
    std::uint8_t op;
    bool rfc7306, tagged;
    std::uint32_t qn;
    std::size_t hdr;
    bool payload, inval, se;
  };
  // Requirements §1 table (RFC 5040 §4.1 Fig. 4, RFC 7306 §4.1). The Terminate's
  // fixed RDMAP header is its 4-octet control field; the optional parts after
  // it (HdrCt) are variable, so the table lets octets follow it.
  const Row rows[] = {
      {0x0, false, true, 0, 0, true, false, false},
      {0x1, false, false, 1, 28, false, false, false},
      {0x2, false, true, 0, 0, true, false, false},
      {0x3, false, false, 0, 0, true, false, false},
      {0x4, false, false, 0, 0, true, true, false},
      {0x5, false, false, 0, 0, true, false, true},
      {0x6, false, false, 0, 0, true, true, true},
      {0x7, false, false, 2, 4, true, false, false},
      {0x8, true, false, 0, 8, false, false, false},
      {0x9, true, false, 0, 8, false, false, true},
      {0xa, true, false, 1, 52, false, false, false},
      {0xb, true, false, 3, 12, false, false, false},
  };
  for (const Row& r : rows) {
    INFO("opcode " << unsigned(r.op) << " " << opcode_name(r.op));
    const OpcodeInfo& i = opcode_info(r.op);
    CHECK(i.valid);
    CHECK(i.rfc7306 == r.rfc7306);
    CHECK(i.tagged == r.tagged);
    if (!r.tagged) CHECK(i.qn == r.qn);
    CHECK(i.rdmap_hdr == r.hdr);
    CHECK(i.payload == r.payload);
    CHECK(i.invalidate == r.inval);
    CHECK(i.solicited == r.se);
  }
  STATIC_REQUIRE(kQnSend == 0);
  STATIC_REQUIRE(kQnReadRequest == 1);
  STATIC_REQUIRE(kQnTerminate == 2);
  STATIC_REQUIRE(kQnAtomicResponse == 3);
  CHECK(opcode_name(0x0) == "RDMA Write");
  CHECK(opcode_name(0x1) == "RDMA Read Request");
  CHECK(opcode_name(0x3) == "Send");
  CHECK(opcode_name(0x7) == "Terminate");
  CHECK(opcode_name(0xb) == "Atomic Response");
  // Only the low 4 bits name the opcode.
  CHECK(&opcode_info(0x13) == &opcode_info(0x3));
  CHECK(opcode_name(0xf3) == "Send");
}

TEST_CASE("HX-071 opcodes 0xC..0xF are reserved: not valid", "[wire]") {
  for (std::uint8_t op = 0xc; op <= 0xf; ++op) {
    INFO("opcode " << unsigned(op));
    CHECK_FALSE(opcode_info(op).valid);
    CHECK(opcode_name(op).find("reserved") != std::string_view::npos);
  }
  std::set<std::string_view> names;
  for (std::uint8_t op = 0; op < 16; ++op)
    names.insert(opcode_name(op));
  CHECK(names.size() == 16);
}

// ---- Terminate error codes ------------------------------------------------------------------

TEST_CASE("DDP-075 Terminate codes follow RFC 5040 Fig. 9, RFC 5041 §7.2, RFC 5044 §8, RFC 6581 §8",
          "[wire]") {
  struct Row {
    TermCode c;
    unsigned layer, etype, code;
  };
  const Row rows[] = {
      {term::rdmap_local_catastrophic, 0, 0, 0x00},
      {term::rdmap_invalid_stag, 0, 1, 0x00},
      {term::rdmap_base_bounds, 0, 1, 0x01},
      {term::rdmap_access_rights, 0, 1, 0x02},
      {term::rdmap_stag_not_assoc, 0, 1, 0x03},
      {term::rdmap_to_wrap, 0, 1, 0x04},
      {term::rdmap_stag_cannot_invalidate, 0, 1, 0x09},
      {term::rdmap_prot_unspecified, 0, 1, 0xff},
      {term::rdmap_invalid_version, 0, 2, 0x05},
      {term::rdmap_unexpected_opcode, 0, 2, 0x06},
      {term::rdmap_catastrophic_stream, 0, 2, 0x07},
      {term::rdmap_catastrophic_global, 0, 2, 0x08},
      {term::rdmap_op_unspecified, 0, 2, 0xff},
      {term::ddp_local_catastrophic, 1, 0, 0x00},
      {term::ddp_tagged_invalid_stag, 1, 1, 0x00},
      {term::ddp_tagged_base_bounds, 1, 1, 0x01},
      {term::ddp_tagged_stag_not_assoc, 1, 1, 0x02},
      {term::ddp_tagged_to_wrap, 1, 1, 0x03},
      {term::ddp_tagged_invalid_version, 1, 1, 0x04},
      {term::ddp_untagged_invalid_qn, 1, 2, 0x01},
      {term::ddp_untagged_no_buffer, 1, 2, 0x02},
      {term::ddp_untagged_msn_range, 1, 2, 0x03},
      {term::ddp_untagged_invalid_mo, 1, 2, 0x04},
      {term::ddp_untagged_too_long, 1, 2, 0x05},
      {term::ddp_untagged_invalid_version, 1, 2, 0x06},
      {term::mpa_tcp_closed, 2, 0, 0x01},
      {term::mpa_crc_error, 2, 0, 0x02},
      {term::mpa_marker_mismatch, 2, 0, 0x03},
      {term::mpa_invalid_frame, 2, 0, 0x04},
      {term::mpa_local_catastrophic, 2, 0, 0x05}, // EMPA-040
      {term::mpa_insufficient_ird, 2, 0, 0x06},   // EMPA-040
      {term::mpa_no_matching_rtr, 2, 0, 0x07},    // EMPA-040
  };
  std::set<std::string_view> names;
  for (const Row& r : rows) {
    CHECK(static_cast<unsigned>(r.c.layer) == r.layer);
    CHECK(r.c.etype == r.etype);
    CHECK(r.c.code == r.code);
    std::string_view n = term_code_name(r.c);
    INFO(n);
    CHECK(n != "unknown Terminate code");
    names.insert(n);
    // On the wire (TM-005).
    TerminateHeader t;
    t.code = r.c;
    std::array<std::byte, 4> b{};
    t.encode(b.data());
    CHECK(std::to_integer<unsigned>(b[0]) == (r.layer << 4 | r.etype));
    CHECK(std::to_integer<unsigned>(b[1]) == r.code);
    auto d = TerminateHeader::decode(b);
    REQUIRE(d);
    CHECK(d->code == r.c);
  }
  CHECK(names.size() == std::size(rows));
  CHECK(term_code_name({TermLayer::Llp, 0, 0x08}) == "unknown Terminate code");
  CHECK(term_code_name({TermLayer::Ddp, 3, 0x00}) == "unknown Terminate code");
}

TEST_CASE("C-04 Local Catastrophic is recognised whatever its code value", "[wire]") {
  for (unsigned code : {0x00u, 0x01u, 0x7fu, 0xffu}) {
    auto c8 = static_cast<std::uint8_t>(code);
    CHECK(term_code_name({TermLayer::Rdmap, 0, c8}) == "RDMAP: local catastrophic error");
    if (code) CHECK(term_code_name({TermLayer::Ddp, 0, c8}) == "DDP: local catastrophic error");
  }
  // RDMAP Remote Operation 0x09 ("STag cannot be Invalidated" under EType 2, C-07).
  CHECK(term_code_name({TermLayer::Rdmap, 2, 0x09}).find("cannot be invalidated") !=
        std::string_view::npos);
}
