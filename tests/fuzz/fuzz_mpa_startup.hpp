// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Input layout of fuzz_mpa_startup, shared with make_corpus.cpp: kMpaHeaderLen
// policy octets, then the peer's TCP stream (its Request or Reply, and
// whatever follows it).
//
//   octet 0  kPol0* flags: role, revision, enhanced, C, CRC always, M, permissive, P2P
//   octet 1  kPol1* flags: RTR types, large FPDU (and RFC 7306 and same-host: the three
//            private Res bits), accept unenhanced Reply, small private data buffer,
//            unsupported local revision, reject
//   octet 2  IRD (low nibble) and ORD (high nibble), indices into kIrdOrd
//   octet 3  max IRD (low nibble) and max ORD (high nibble), indices into kIrdOrd
//   octet 4  our private data length (low nibble: Request or Reply/Reject),
//            index into kPdLen; high nibble: IRD/ORD given to accept(), and with its
//            kAcceptNoOffer bit no same-host offer either
//   octet 5  PRNG seed (chunk sizes, timers, closes, output consumption)
#pragma once

#include "iwarp/mpa_startup.hpp"

#include <array>
#include <chrono>
#include <cstdint>

namespace iwarp_fuzz::mpa {

using namespace iwarp;

inline constexpr std::size_t kMpaHeaderLen = 6;

inline constexpr std::uint8_t kPol0Responder = 0x01;
inline constexpr std::uint8_t kPol0Rev2 = 0x02;
inline constexpr std::uint8_t kPol0Enhanced = 0x04;
inline constexpr std::uint8_t kPol0Crc = 0x08;
inline constexpr std::uint8_t kPol0CrcAlways = 0x10;
inline constexpr std::uint8_t kPol0Markers = 0x20;
inline constexpr std::uint8_t kPol0Permissive = 0x40;
inline constexpr std::uint8_t kPol0P2p = 0x80;

inline constexpr std::uint8_t kPol1RtrSend = 0x01;
inline constexpr std::uint8_t kPol1RtrWrite = 0x02;
inline constexpr std::uint8_t kPol1RtrRead = 0x04;
inline constexpr std::uint8_t kPol1LargeFpdu = 0x08;
inline constexpr std::uint8_t kPol1AcceptUnenhanced = 0x10;
inline constexpr std::uint8_t kPol1SmallPd = 0x20;     // max_private_data 16
inline constexpr std::uint8_t kPol1BadRevision = 0x40; // policy revision 3: fails at once
inline constexpr std::uint8_t kPol1Reject = 0x80;      // responder rejects the Request

// Of octet 4's high nibble: accept() gets no same-host offer from its caller.
inline constexpr unsigned kAcceptNoOffer = 0x4;

inline constexpr std::array<std::uint16_t, 16> kIrdOrd = {
    0, 1, 2, 4, 8, 16, 127, 128, 200, 0x3ffe, 0x3fff, 0x4000, 0xffff, 3, 5, 32};
inline constexpr std::array<std::uint16_t, 16> kPdLen = {0,   1,   5,   11,  16,  17,  100, 504,
                                                         507, 508, 509, 511, 512, 513, 600, 0};

inline constexpr std::chrono::milliseconds kTimeout{1000};

// What the responder's caller offers (its values matter only for the round trip).
inline SameHostOffer fuzz_offer(std::uint8_t salt) {
  SameHostOffer o;
  for (std::size_t i = 0; i < o.boot_id.size(); ++i)
    o.boot_id[i] = std::byte(static_cast<unsigned>((i + salt) & 0xff));
  o.pid_ns = 0xeffff000u + salt;
  o.uid = 1000;
  o.pid = 4000u + salt;
  o.table_fd = 9;
  o.slot = salt;
  for (std::size_t i = 0; i < o.nonce.size(); ++i)
    o.nonce[i] = std::byte(static_cast<unsigned>((i * 13 + salt) & 0xff));
  return o;
}

inline MpaPolicy make_policy(const std::uint8_t* h) {
  MpaPolicy p;
  p.revision = (h[1] & kPol1BadRevision) ? 3 : (h[0] & kPol0Rev2) ? 2 : 1;
  p.enhanced = h[0] & kPol0Enhanced;
  p.crc = h[0] & kPol0Crc;
  p.crc_always = h[0] & kPol0CrcAlways;
  p.markers = h[0] & kPol0Markers;
  p.permissive = h[0] & kPol0Permissive;
  p.p2p = h[0] & kPol0P2p;
  p.rtr = {bool(h[1] & kPol1RtrSend), bool(h[1] & kPol1RtrWrite), bool(h[1] & kPol1RtrRead)};
  p.large_fpdu = h[1] & kPol1LargeFpdu;
  p.rfc7306 = p.large_fpdu;
  p.same_host = p.large_fpdu;
  p.accept_unenhanced_reply = h[1] & kPol1AcceptUnenhanced;
  p.max_private_data = (h[1] & kPol1SmallPd) ? 16 : kMaxPrivateData;
  p.ird = kIrdOrd[h[2] & 15];
  p.ord = kIrdOrd[h[2] >> 4];
  p.max_ird = kIrdOrd[h[3] & 15];
  p.max_ord = kIrdOrd[h[3] >> 4];
  p.timeout = kTimeout;
  return p;
}

} // namespace iwarp_fuzz::mpa
