// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// IB-style connect: what both ends agree on (ib_connect.hpp).
#include "uiwarp/ib_connect.hpp"

#include "uiwarp/ip.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <tuple>

namespace uiwarp::ib {

namespace {

constexpr std::uint8_t kMagic[8] = {'u', 'i', 'w', 'a', 'r', 'p', 'I', 'B'};
constexpr std::uint8_t kVersion = 1;

bool v4_mapped(const Gid& g) {
  return std::all_of(g.begin(), g.begin() + 10, [](std::uint8_t b) { return b == 0; }) &&
         g[10] == 0xff && g[11] == 0xff;
}

void put32(std::vector<std::uint8_t>& v, std::uint32_t x) {
  for (int s = 24; s >= 0; s -= 8)
    v.push_back(static_cast<std::uint8_t>(x >> s));
}
std::uint32_t get32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         p[3];
}

} // namespace

std::optional<sockaddr_storage> gid_address(const Gid& g) {
  sockaddr_storage s{};
  if (v4_mapped(g)) {
    auto* in = reinterpret_cast<sockaddr_in*>(&s);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, g.data() + 12, 4);
    if (in->sin_addr.s_addr == 0) return std::nullopt;
    return s;
  }
  const bool unspecified = std::all_of(g.begin(), g.end(), [](std::uint8_t b) { return b == 0; });
  const bool link_local = g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
  if (unspecified || link_local || g[0] == 0xff) return std::nullopt;
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&s);
  in6->sin6_family = AF_INET6;
  std::memcpy(&in6->sin6_addr, g.data(), 16);
  return s;
}

Gid address_gid(const sockaddr_storage& a) {
  Gid g{};
  if (a.ss_family == AF_INET) {
    g[10] = g[11] = 0xff;
    std::memcpy(g.data() + 12, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, 4);
  } else if (a.ss_family == AF_INET6) {
    std::memcpy(g.data(), &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, 16);
  }
  return g;
}

bool same_host(const sockaddr_storage& a, const sockaddr_storage& b) {
  return same_ip(unmapped(a), unmapped(b));
}

std::optional<Role> role(const Gid& local, std::uint32_t local_qpn, const Gid& peer,
                         std::uint32_t peer_qpn) {
  const auto mine = std::tie(local, local_qpn);
  const auto theirs = std::tie(peer, peer_qpn);
  if (mine == theirs) return std::nullopt;
  return mine < theirs ? Role::Initiator : Role::Responder;
}

std::vector<std::uint8_t> encode(const Request& r) {
  std::vector<std::uint8_t> v(std::begin(kMagic), std::end(kMagic));
  v.push_back(kVersion);
  v.insert(v.end(), 3, 0);
  put32(v, r.src_qpn);
  put32(v, r.dst_qpn);
  return v;
}

std::optional<Request> decode(const std::uint8_t* p, std::size_t n) {
  if (n != kRequestLen || std::memcmp(p, kMagic, sizeof kMagic) || p[8] != kVersion)
    return std::nullopt;
  return Request{get32(p + 12), get32(p + 16)};
}

std::string qpn_string(std::uint32_t qpn) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%#08x", qpn);
  return buf;
}

} // namespace uiwarp::ib
