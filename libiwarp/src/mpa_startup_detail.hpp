// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What the three files of MpaStartup share (mpa_startup.cpp: RFC 5044 §7.1 and the RDMAC
// interop rules; mpa_enhanced.cpp: RFC 6581; mpa_private.cpp: uiwarp's Res bits): the
// revisions, the error messages' builders, and the RFC 6581 parts the start-up itself calls.
#pragma once

#include "iwarp/mpa_startup.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace iwarp::mpa_detail {

inline constexpr std::uint8_t kRevRdmac = 0;    // IOP §4: RDMAC proxies send Rev 0
inline constexpr std::uint8_t kRevIetf = 1;     // RFC 5044 §7.1.1
inline constexpr std::uint8_t kRevEnhanced = 2; // RFC 6581 §6
inline constexpr std::uint16_t kNoNeg = kIrdOrdNoNegotiation;

// Message builder: strings as they are, integers (bool and uint8_t too) in decimal.
template <typename... Args> std::string cat(const Args&... args) {
  std::string s;
  auto add = [&s](const auto& a) {
    if constexpr (std::is_integral_v<std::decay_t<decltype(a)>>)
      s += std::to_string(+a);
    else
      s += a;
  };
  (add(args), ...);
  return s;
}

inline std::string_view kind_name(MpaKind k) {
  return k == MpaKind::Request ? "MPA Request" : "MPA Reply";
}

// "0x47 ('G')" or "0x00".
inline std::string octet_text(std::byte b) {
  static constexpr char kHex[] = "0123456789abcdef";
  const unsigned v = std::to_integer<unsigned>(b);
  std::string s{'0', 'x', kHex[v >> 4], kHex[v & 0xf]};
  if (v >= 0x20 && v < 0x7f) s += std::string(" ('") + static_cast<char>(v) + "')";
  return s;
}

// IRD/ORD are 14-bit fields (RFC 6581 §9); larger local values saturate at 0x3FFF.
inline std::uint16_t wire_ird_ord(std::uint16_t v) { return std::min(v, kIrdOrdMask); }

// RFC 6581 §6, §10: the Request's enhanced data (S=1), if the policy wants enhanced features.
std::optional<MpaEnhanced> request_enhanced(const MpaPolicy& policy);

} // namespace iwarp::mpa_detail
