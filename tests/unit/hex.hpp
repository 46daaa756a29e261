// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Octets written as hex in tests: hx("00 2a 41 43"), and back: hex().
#pragma once

#include "catch_compat.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace iwarp::test {

using Bytes = std::vector<std::byte>;

// "00 2a 41 43" -> octets; anything that is not a hex digit separates.
inline Bytes hx(std::string_view s) {
  Bytes out;
  int hi = -1;
  for (char c : s) {
    int v = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (v < 0) continue;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(std::byte(hi << 4 | v));
      hi = -1;
    }
  }
  REQUIRE(hi < 0); // an odd number of digits is a typo in the test
  return out;
}

// Octets as lower-case hex, `sep` between them: hex(b) "002a4143", hex(b, " ") "00 2a 41 43".
inline std::string hex(std::span<const std::byte> b, std::string_view sep = "") {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < b.size(); ++i) {
    unsigned v = std::to_integer<unsigned>(b[i]);
    if (i) s += sep;
    s += kHex[v >> 4];
    s += kHex[v & 0xf];
  }
  return s;
}

} // namespace iwarp::test
