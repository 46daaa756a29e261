// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "iwarp/crc32c.hpp"

#include <climits>
#include <cstring>

#ifdef IWARP_HAVE_ISAL
#include <isa-l/crc.h>
#endif

namespace iwarp {

std::uint32_t crc32c_update_portable(std::uint32_t state, ConstBytes data) {
  // Reflected Castagnoli polynomial; one bit at a time, which is slow but obvious.
  for (std::byte b : data) {
    state ^= std::to_integer<std::uint32_t>(b);
    for (int k = 0; k < 8; ++k)
      state = (state >> 1) ^ (0x82f63b78u & (0u - (state & 1u)));
  }
  return state;
}

#ifdef IWARP_HAVE_ISAL
namespace {
#if defined(__x86_64__)
// Short inputs (a length field and header, PAD) use the SSE4.2 instruction
// directly: ISA-L's dispatch, kernel set-up and the vzeroupper below cost more
// than the CRC of a few dozen octets (iwarp-bench's FpduTx rows show the difference).
// Same convention as crc32_iscsi: the state is neither inverted on entry nor
// on exit.
constexpr std::size_t kShort = 64;
__attribute__((target("sse4.2"))) std::uint32_t
crc32c_short(std::uint32_t state, const unsigned char* p, std::size_t n) {
  std::uint64_t c = state;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p)
    c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif
} // namespace

// ISA-L's crc32_iscsi neither inverts its seed nor its result (checked against the
// RFC 5044 vectors in tests/unit/test_crc32c.cpp), so it continues a running state.
std::uint32_t crc32c_update(std::uint32_t state, ConstBytes data) {
  auto* p = reinterpret_cast<unsigned char*>(const_cast<std::byte*>(data.data()));
  std::size_t n = data.size();
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (n <= kShort && sse42) return crc32c_short(state, p, n);
#endif
  while (n > 0) {
    int chunk = n > INT_MAX ? INT_MAX : static_cast<int>(n);
    state = crc32_iscsi(p, chunk, state);
#if defined(__x86_64__)
    // ISA-L's AVX-512 kernel returns without vzeroupper; the SSE code that follows
    // would pay the AVX/SSE transition penalty on every call (several times the cost of
    // framing a 4 KiB FPDU: iwarp-bench's FpduTx rows).
    static const bool avx = __builtin_cpu_supports("avx");
    if (avx) asm volatile("vzeroupper" ::: "memory");
#endif
    p += chunk;
    n -= static_cast<std::size_t>(chunk);
  }
  return state;
}
const char* crc32c_implementation() { return "isa-l"; }
#else
std::uint32_t crc32c_update(std::uint32_t state, ConstBytes data) {
  return crc32c_update_portable(state, data);
}
const char* crc32c_implementation() { return "portable"; }
#endif

} // namespace iwarp
