// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// CRC32c as MPA uses it (RFC 5044 §4.4: the iSCSI CRC of RFC 3720, Castagnoli
// polynomial, initial value and final XOR 0xFFFFFFFF). The four CRC octets go on
// the wire least-significant byte first (RFC 5044 Fig. 5/6).
#pragma once

#include "iwarp/wire.hpp"

#include <cstdint>

namespace iwarp {

// Incremental form: start from kCrc32cInit, update over each piece, finish.
inline constexpr std::uint32_t kCrc32cInit = 0xffffffffu;
std::uint32_t crc32c_update(std::uint32_t state, ConstBytes data); // ISA-L crc32_iscsi
constexpr std::uint32_t crc32c_finish(std::uint32_t state) { return ~state; }

inline std::uint32_t crc32c(ConstBytes data) {
  return crc32c_finish(crc32c_update(kCrc32cInit, data));
}

// Bit-wise table-free implementation: the reference the fast path is tested against.
std::uint32_t crc32c_update_portable(std::uint32_t state, ConstBytes data);

// Wire order of the CRC field.
constexpr void store_crc_le(std::byte* p, std::uint32_t crc) {
  for (int i = 0; i < 4; ++i)
    p[i] = std::byte((crc >> (8 * i)) & 0xff);
}
constexpr std::uint32_t load_crc_le(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= std::uint32_t(std::to_integer<unsigned>(p[i])) << (8 * i);
  return v;
}

// Which implementation crc32c_update uses ("isa-l" or "portable").
const char* crc32c_implementation();

} // namespace iwarp
