// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// CRC32c as MPA uses it (RFC 5044 §4.4, requirements MPA-026 and Appendix A):
// the two RFC 5044 FPDU vectors through the ISA-L path and the portable path,
// incremental updates over arbitrary splits, and ISA-L == portable on random data.
#include "catch_compat.hpp"
#include "hex.hpp"
#include "iwarp/crc32c.hpp"

#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#if __has_include(<isa-l/crc.h>)
#include <isa-l/crc.h>
#define TEST_HAVE_ISAL_HEADER 1
#endif

using namespace iwarp;

namespace {

using test::Bytes;
using test::hx;

Bytes zeros(std::size_t n) { return Bytes(n, std::byte{0}); }

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Appendix A vector 1: marker, ULPDU_Length 42, Send header (MSN 1), 24 zero octets.
Bytes vector1() {
  return cat(hx("00 00 00 00  00 2a  41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00"),
             zeros(24));
}
// Appendix A vector 2: ULPDU_Length, Send header (MSN 2), marker FPDUPTR 0x14, 24 zeros.
Bytes vector2() {
  return cat(hx("00 2a 41 43 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 00  00 00 00 14"),
             zeros(24));
}

std::uint32_t portable(ConstBytes b) {
  return crc32c_finish(crc32c_update_portable(kCrc32cInit, b));
}

#ifdef TEST_HAVE_ISAL_HEADER
// ISA-L called directly, as requirements Appendix C describes it.
std::uint32_t isal_direct(ConstBytes b) {
  return crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(b.data())),
                     static_cast<int>(b.size()), 0xffffffffu) ^
         0xffffffffu;
}
#endif

Bytes random_bytes(std::mt19937& rng, std::size_t n) {
  Bytes b(n);
  for (auto& x : b)
    x = std::byte(rng() & 0xff);
  return b;
}

} // namespace

TEST_CASE("MPA-026 RFC 5044 vector 1: CRC32c 0x83992352", "[crc]") {
  Bytes v = vector1();
  REQUIRE(v.size() == 48);
  CHECK(crc32c(v) == 0x83992352u);
  CHECK(portable(v) == 0x83992352u);
#ifdef TEST_HAVE_ISAL_HEADER
  CHECK(isal_direct(v) == 0x83992352u);
#endif
}

TEST_CASE("MPA-026 RFC 5044 vector 2: CRC32c 0x98589284", "[crc]") {
  Bytes v = vector2();
  REQUIRE(v.size() == 48);
  CHECK(crc32c(v) == 0x98589284u);
  CHECK(portable(v) == 0x98589284u);
#ifdef TEST_HAVE_ISAL_HEADER
  CHECK(isal_direct(v) == 0x98589284u);
#endif
}

TEST_CASE("MPA-026 CRC octets on the wire are LSB first", "[crc]") {
  std::array<std::byte, 4> b{};
  store_crc_le(b.data(), 0x83992352u);
  CHECK(b == std::array{std::byte{0x52}, std::byte{0x23}, std::byte{0x99}, std::byte{0x83}});
  CHECK(load_crc_le(b.data()) == 0x83992352u);
  store_crc_le(b.data(), 0x98589284u);
  CHECK(b == std::array{std::byte{0x84}, std::byte{0x92}, std::byte{0x58}, std::byte{0x98}});
  CHECK(load_crc_le(b.data()) == 0x98589284u);
  // The complete Appendix A FPDUs: CRC32c over the 48 octets, then its 4 octets.
  Bytes f1 = cat(vector1(), hx("52 23 99 83"));
  CHECK(load_crc_le(f1.data() + 48) == crc32c(ConstBytes(f1).first(48)));
  Bytes f2 = cat(vector2(), hx("84 92 58 98"));
  CHECK(load_crc_le(f2.data() + 48) == crc32c(ConstBytes(f2).first(48)));
}

TEST_CASE("MPA-026 CRC32c is the iSCSI CRC (RFC 3720 check values)", "[crc]") {
  // Castagnoli polynomial, init and final XOR 0xFFFFFFFF: "123456789" -> 0xE3069283.
  Bytes digits = hx("31 32 33 34 35 36 37 38 39");
  CHECK(crc32c(digits) == 0xe3069283u);
  CHECK(portable(digits) == 0xe3069283u);
  // RFC 3720 B.4: 32 octets of zeros / of ones.
  CHECK(crc32c(zeros(32)) == 0x8a9136aau);
  CHECK(portable(zeros(32)) == 0x8a9136aau);
  Bytes ones(32, std::byte{0xff});
  CHECK(crc32c(ones) == 0x62a8ab43u);
  CHECK(portable(ones) == 0x62a8ab43u);
  // 32 incrementing octets 00..1f.
  Bytes inc(32);
  for (std::size_t i = 0; i < inc.size(); ++i)
    inc[i] = std::byte(i);
  CHECK(crc32c(inc) == 0x46dd794eu);
  CHECK(portable(inc) == 0x46dd794eu);
  // Empty input: init then final XOR.
  CHECK(crc32c({}) == 0u);
  CHECK(portable({}) == 0u);
}

TEST_CASE("MPA-024 crc32c_update uses ISA-L in this build", "[crc]") {
  // The library is built with IWARP_HAVE_ISAL (CMake requires libisal); the
  // portable bit-wise code is the reference it is tested against.
  CHECK(std::string_view(crc32c_implementation()) == "isa-l");
}

TEST_CASE("MPA-027 incremental CRC over arbitrary splits equals one-shot", "[crc]") {
  std::mt19937 rng(5044);
  for (Bytes v : {vector1(), vector2()}) {
    const std::uint32_t want = crc32c(v);
    // Every two-piece and three-piece split.
    for (std::size_t i = 0; i <= v.size(); ++i) {
      for (std::size_t j = i; j <= v.size(); ++j) {
        ConstBytes b(v);
        std::uint32_t s = crc32c_update(kCrc32cInit, b.first(i));
        s = crc32c_update(s, b.subspan(i, j - i));
        s = crc32c_update(s, b.subspan(j));
        REQUIRE(crc32c_finish(s) == want);
        std::uint32_t p = crc32c_update_portable(kCrc32cInit, b.first(i));
        p = crc32c_update_portable(p, b.subspan(i, j - i));
        p = crc32c_update_portable(p, b.subspan(j));
        REQUIRE(crc32c_finish(p) == want);
        // The two implementations can continue each other's running state.
        std::uint32_t mixed =
            crc32c_update(crc32c_update_portable(kCrc32cInit, b.first(i)), b.subspan(i));
        REQUIRE(crc32c_finish(mixed) == want);
      }
    }
  }
  // Random lengths and random many-piece splits, including empty pieces.
  for (int round = 0; round < 200; ++round) {
    Bytes v = random_bytes(rng, rng() % 9000);
    const std::uint32_t want = portable(v);
    REQUIRE(crc32c(v) == want);
    ConstBytes rest(v);
    std::uint32_t s = kCrc32cInit;
    while (!rest.empty()) {
      std::size_t n = std::min<std::size_t>(rest.size(), rng() % 4 == 0 ? 0 : rng() % 700);
      s = crc32c_update(s, rest.first(n));
      rest = rest.subspan(n);
    }
    REQUIRE(crc32c_finish(s) == want);
  }
}

TEST_CASE("MPA-026 random buffers: ISA-L path == portable path", "[crc]") {
  std::mt19937 rng(3720);
  Bytes big = random_bytes(rng, 70000);
  // Every length 0..300 at every start alignment 0..15 (ISA-L has SIMD and tail paths).
  for (std::size_t off = 0; off < 16; ++off) {
    for (std::size_t len = 0; len <= 300; ++len) {
      ConstBytes b = ConstBytes(big).subspan(off, len);
      REQUIRE(crc32c(b) == portable(b));
    }
  }
  // Larger random lengths and offsets, up to a maximum FPDU and beyond.
  for (int round = 0; round < 100; ++round) {
    std::size_t off = rng() % 64;
    std::size_t len = rng() % (big.size() - off);
    ConstBytes b = ConstBytes(big).subspan(off, len);
    std::uint32_t seed = rng(); // any running state, not only the initial one
    INFO("off " << off << " len " << len);
    REQUIRE(crc32c_update(seed, b) == crc32c_update_portable(seed, b));
  }
  CHECK(crc32c(big) == portable(big));
#ifdef TEST_HAVE_ISAL_HEADER
  CHECK(crc32c(big) == isal_direct(big));
#endif
}

TEST_CASE("MPA-028 a single flipped bit changes the CRC", "[crc]") {
  Bytes v = vector1();
  const std::uint32_t good = crc32c(v);
  for (std::size_t i = 0; i < v.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      v[i] ^= std::byte(1u << bit);
      REQUIRE(crc32c(v) != good);
      REQUIRE(portable(v) != good);
      v[i] ^= std::byte(1u << bit);
    }
  }
  REQUIRE(crc32c(v) == good);
}
