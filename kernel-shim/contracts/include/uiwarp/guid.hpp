// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The sysfs text form of a GUID ("xxxx:xxxx:xxxx:xxxx", as the kernel writes node_guid), shared
// by the tree generator that writes it and the provider and shim that read it back. Header-only:
// the shim and the provider link nothing of the generator.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace uiwarp {

inline std::string format_guid(std::uint64_t g) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48) & 0xffff,
                static_cast<unsigned>(g >> 32) & 0xffff, static_cast<unsigned>(g >> 16) & 0xffff,
                static_cast<unsigned>(g) & 0xffff);
  return buf;
}

inline std::optional<std::uint64_t> parse_guid(const std::string& s) {
  unsigned a, b, c, d;
  if (std::sscanf(s.c_str(), "%4x:%4x:%4x:%4x", &a, &b, &c, &d) != 4) return std::nullopt;
  return (std::uint64_t(a) << 48) | (std::uint64_t(b) << 32) | (std::uint64_t(c) << 16) | d;
}

} // namespace uiwarp
