// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Copying received octets into memory a program may be watching while they land: the
// target of an RDMA Write. Every octet is stored exactly once, in ascending order, as an
// RNIC's DMA writes them; a program that polls the last octet of a Write and then writes
// next to it (riostream's ping-pong, MPI eager RDMA, perftest's write_lat) relies on that.
// memcpy does not promise it: glibc's copies of one vector size load two vectors and
// store both to the same place, so an octet the program already saw, and then changed,
// was stored a second time with its old value.
#pragma once

#include "iwarp/dma.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace iwarp {

IWARP_DMA inline void place_bytes(std::byte* dst, const std::byte* src, std::size_t n) {
  // Octet stores up to an 8-aligned destination, then one store per 16 (SSE2) or 8 octets
  // (volatile, so the compiler cannot turn the loop back into a memcpy), then the tail.
  while (n && (reinterpret_cast<std::uintptr_t>(dst) & 7)) {
    *reinterpret_cast<volatile std::byte*>(dst++) = *src++;
    --n;
  }
#if defined(__SSE2__)
  for (; n >= 16; n -= 16, dst += 16, src += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
#endif
  for (; n >= 8; n -= 8, dst += 8, src += 8) {
    std::uint64_t v;
    std::memcpy(&v, src, 8); // a load into a register: may be any width
    *reinterpret_cast<volatile std::uint64_t*>(dst) = v;
  }
  while (n--)
    *reinterpret_cast<volatile std::byte*>(dst++) = *src++;
}

} // namespace iwarp
