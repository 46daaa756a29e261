// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The receiving QP that fuzz_rx drives, shared with make_corpus.cpp so that
// the seed streams name real STags, TOs and MSNs.
//
// Input layout of fuzz_rx: kRxHeaderLen configuration octets, then the TCP
// byte stream the peer sends in Full Operation (FPDUs, from stream offset 0).
//
//   octet 0  kCfg* flags (CRC, markers rx, RFC 7306, RDMAC version, role, ...)
//   octet 1  PRNG seed, low octet (chunk sizes, interleaving of calls)
//   octet 2  bits 0-1 RTR type, bit 2 markers tx, bit 3 SRQ, bits 4-6 MULPDU
//            index, bit 7 IRD 2 instead of 16
//   octet 3  PRNG seed, high octet; bits 0-1 also pick the final action
#pragma once

#include "iwarp/memory.hpp"
#include "iwarp/qp.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace iwarp_fuzz::rx {

using namespace iwarp;

inline constexpr std::size_t kRxHeaderLen = 4;

// Octet 0.
inline constexpr std::uint8_t kCfgCrc = 0x01;
inline constexpr std::uint8_t kCfgMarkersRx = 0x02;
inline constexpr std::uint8_t kCfgRfc7306 = 0x04;
inline constexpr std::uint8_t kCfgRdmac = 0x08;     // DDP/RDMAP version 0
inline constexpr std::uint8_t kCfgResponder = 0x10; // MPA responder (waits for an FPDU)
inline constexpr std::uint8_t kCfgP2p = 0x20;       // initiator: send an RTR; responder: expect one
inline constexpr std::uint8_t kCfgLocalSends = 0x40;  // post the send WRs below
inline constexpr std::uint8_t kCfgReadInPlace = 0x80; // rx_next/rx_advance instead of rx_feed
// Octet 2.
inline constexpr std::uint8_t kCfg2RtrMask = 0x03; // 0 Send, 1 Write, 2 Read, 3 Write
inline constexpr std::uint8_t kCfg2MarkersTx = 0x04;
inline constexpr std::uint8_t kCfg2Srq = 0x08;
inline constexpr unsigned kCfg2MulpduShift = 4; // 3 bits into kMulpdus
inline constexpr std::uint8_t kCfg2SmallIrd = 0x80;
inline constexpr std::array<std::size_t, 8> kMulpdus = {128,  256,  1024, 1448,
                                                        1454, 4096, 9000, 64768};

// Final action (octet 3 bits 0-1).
enum class EndAction : std::uint8_t { PeerClosed, PeerReset, Flush, CloseThenPeerClosed };

inline constexpr std::uint64_t kMemSeed = 0x1d1ce5eedull;
inline constexpr std::uint32_t kPd = 1;
inline constexpr std::uint32_t kQpId = 1;
inline constexpr std::uint32_t kPeerStag = 0x00abcd42; // the peer's buffers, for our own WRs

enum Region : int {
  kWriteTarget,   // remote write/read
  kZeroBased,     // remote write, TO 0..999
  kReadSource,    // remote read only: must never change
  kAtomicTarget,  // remote atomic
  kRecvBuf,       // local write: receive WRs
  kReadSink,      // local write: our RDMA Read / Atomic results
  kOtherPd,       // every right, but PD 2: must never change
  kInvalidatable, // remote write, a Send with Invalidate target
  kLocalSource,   // no rights: our Send/Write source, must never change
  kOtherQp,       // every right, but associated with stream 2: must never change
  kRemoved,       // registered, then deregistered: must never change
  kRegionCount
};

struct RegionSpec {
  std::size_t size;
  std::uint64_t base;
  std::uint32_t access;
  std::uint32_t pd;
  bool guard; // nothing may write it
};

inline constexpr std::array<RegionSpec, kRegionCount> kRegions = {{
    {4096, 0x10000, access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead, kPd, false},
    {1000, 0, access::kRemoteWrite | access::kZeroBased, kPd, false},
    {4096, 0x20000, access::kRemoteRead, kPd, true},
    {64, 0x30000, access::kRemoteAtomic | access::kRemoteRead, kPd, false},
    {8192, 0x40000, access::kLocalWrite, kPd, false},
    {4096, 0x50000, access::kLocalWrite, kPd, false},
    {512, 0x60000,
     access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic, 2,
     true},
    {256, 0x70000, access::kLocalWrite | access::kRemoteWrite, kPd, false},
    {4096, 0x80000, 0, kPd, true},
    {256, 0xa0000,
     access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic, kPd,
     true},
    {128, 0x90000, access::kRemoteWrite | access::kLocalWrite, kPd, true},
}};

// The initial contents of each region (a guard pattern), built once: the
// harness copies and compares it with memcpy/memcmp, which, unlike a loop in
// the coverage-instrumented harness, costs the fuzzer next to nothing.
inline const std::vector<std::byte>& initial_contents(int region) {
  static const auto patterns = [] {
    std::array<std::vector<std::byte>, kRegionCount> p;
    for (int r = 0; r < kRegionCount; ++r) {
      p[r].resize(kRegions[r].size);
      for (std::size_t i = 0; i < p[r].size(); ++i)
        p[r][i] =
            std::byte(static_cast<unsigned>((i * 31 + static_cast<std::size_t>(r) * 7 + 1) & 0xff));
    }
    return p;
  }();
  return patterns[region];
}

class Fixture {
public:
  Fixture() : mem(kMemSeed) {
    for (int r = 0; r < kRegionCount; ++r) {
      const RegionSpec& s = kRegions[r];
      // One exact-size heap block per region, so ASan sees any overrun.
      host[r] = std::make_unique_for_overwrite<std::byte[]>(s.size);
      std::memcpy(host[r].get(), initial_contents(r).data(), s.size);
      stag[r] = mem.add(s.pd, host[r].get(), s.base, s.size, s.access);
    }
    mem.associate(stag[kOtherQp], kQpId + 1);
    mem.remove(stag[kRemoved]);
  }

  std::uint64_t to(Region r, std::size_t off = 0) const { return kRegions[r].base + off; }
  Sge sge(Region r, std::size_t off, std::uint32_t len) const { return {to(r, off), len, stag[r]}; }

  bool guards_intact() const {
    for (int r = 0; r < kRegionCount; ++r) {
      if (!kRegions[r].guard) continue;
      if (std::memcmp(host[r].get(), initial_contents(r).data(), kRegions[r].size) != 0)
        return false;
    }
    return true;
  }

  // Receive WRs posted before any byte arrives; wr_id 100 + MSN - 1 in order.
  std::vector<RecvWr> recv_wrs() const {
    std::vector<RecvWr> v;
    v.push_back({100, {sge(kRecvBuf, 0, 64)}});
    v.push_back({101, {sge(kRecvBuf, 64, 1024)}});
    v.push_back({102, {sge(kRecvBuf, 2048, 512), sge(kRecvBuf, 4096, 1536)}});
    v.push_back({103, {sge(kRecvBuf, 6144, 2048)}});
    v.push_back({104, {}});                        // zero-length buffer
    v.push_back({105, {sge(kReadSource, 0, 16)}}); // no local write: local error
    v.push_back({106, {sge(kRecvBuf, 1088, 900)}});
    return v;
  }
  // Receive WRs the harness may add later (wr_id 200 + i).
  RecvWr extra_recv(std::size_t i) const {
    return {200 + i, {sge(kRecvBuf, (i * 512) % 4096, 512)}};
  }

  // Send WRs the harness may post while data arrives (wr_id 300 + i).
  SendWr extra_send(std::size_t i) const {
    SendWr w;
    w.wr_id = 300 + i;
    switch (i % 4) {
    case 0:
      w.opcode = WrOpcode::Send;
      w.sgl = {sge(kLocalSource, 64 * i, 64)};
      break;
    case 1:
      w.opcode = WrOpcode::RdmaWrite;
      w.sgl = {sge(kLocalSource, 0, 2000)};
      w.remote_stag = kPeerStag;
      w.remote_addr = 0x9000;
      break;
    case 2:
      w.opcode = WrOpcode::Send;
      w.is_inline = true;
      w.inline_data.assign(1 + i, std::byte{0xa5});
      break;
    default: // a deregistered lkey: local protection error, then Terminate
      w.opcode = WrOpcode::Send;
      w.sgl = {sge(kRemoved, 0, 16)};
      break;
    }
    return w;
  }

  // Our own work (kCfgLocalSends): wr_id 1.. in posting order. The Reads and the
  // Atomic make the matching responses in a seed stream valid.
  std::vector<SendWr> send_wrs(bool rfc7306) const {
    std::vector<SendWr> v;
    SendWr w;
    w.wr_id = 1;
    w.opcode = WrOpcode::Send;
    w.sgl = {sge(kLocalSource, 0, 100)};
    v.push_back(w);

    w = {};
    w.wr_id = 2;
    w.opcode = WrOpcode::RdmaWrite;
    w.sgl = {sge(kLocalSource, 100, 3000)};
    w.remote_stag = kPeerStag;
    w.remote_addr = 0x1000;
    v.push_back(w);

    w = {};
    w.wr_id = 3;
    w.opcode = WrOpcode::RdmaRead;
    w.sgl = {sge(kReadSink, 0, 1024)}; // response: STag kReadSink, TO 0x50000, 1024
    w.remote_stag = kPeerStag;
    w.remote_addr = 0x2000;
    v.push_back(w);

    w = {};
    w.wr_id = 4;
    w.opcode = WrOpcode::RdmaRead; // zero-length Read: response STag 0, TO 0, no payload
    w.remote_stag = kPeerStag;
    v.push_back(w);

    if (rfc7306) {
      w = {};
      w.wr_id = 5;
      w.opcode = WrOpcode::AtomicFetchAdd; // Atomic Request req_id 1
      w.sgl = {sge(kReadSink, 2048, 8)};
      w.remote_stag = kPeerStag;
      w.remote_addr = 0x3000;
      w.compare_add = 5;
      v.push_back(w);
    }

    w = {};
    w.wr_id = 6;
    w.opcode = WrOpcode::RdmaRead; // response: STag kReadSink, TO 0x50400, 512, two SGEs
    w.sgl = {sge(kReadSink, 1024, 256), sge(kReadSink, 3072, 256)};
    w.remote_stag = kPeerStag;
    w.remote_addr = 0x4000;
    v.push_back(w);

    w = {};
    w.wr_id = 7;
    w.opcode = WrOpcode::Send;
    w.is_inline = true;
    w.inline_data.assign(10, std::byte{0x5a});
    w.solicited = true;
    v.push_back(w);

    if (rfc7306) {
      w = {};
      w.wr_id = 8;
      w.opcode = WrOpcode::RdmaWriteImmediate;
      w.sgl = {sge(kLocalSource, 200, 16)};
      w.remote_stag = kPeerStag;
      w.remote_addr = 0x5000;
      w.immediate = 0x1122334455667788ull;
      v.push_back(w);
    }
    return v;
  }

  MemoryTable mem;
  std::array<std::unique_ptr<std::byte[]>, kRegionCount> host;
  std::array<std::uint32_t, kRegionCount> stag{};
};

inline QpConfig make_config(const std::uint8_t* hdr) {
  QpConfig c;
  c.qp_id = kQpId;
  c.pd = kPd;
  c.conn.crc = hdr[0] & kCfgCrc;
  c.conn.markers_rx = hdr[0] & kCfgMarkersRx;
  c.conn.markers_tx = hdr[2] & kCfg2MarkersTx;
  c.conn.rfc7306 = hdr[0] & kCfgRfc7306;
  c.conn.version = (hdr[0] & kCfgRdmac) ? kVersionRdmac : kVersionIetf;
  c.conn.initiator = !(hdr[0] & kCfgResponder);
  c.mulpdu = kMulpdus[(hdr[2] >> kCfg2MulpduShift) & 7];
  c.conn.ird = (hdr[2] & kCfg2SmallIrd) ? 2 : 16;
  c.conn.ord = 16;
  c.sq_depth = 64;
  c.rq_depth = 64;
  if (hdr[0] & kCfgP2p) {
    static constexpr RtrType kRtr[4] = {RtrType::Send, RtrType::Write, RtrType::Read,
                                        RtrType::Write};
    c.conn.p2p = true;
    c.conn.rtr = kRtr[hdr[2] & kCfg2RtrMask]; // what the initiator sends first
  }
  return c;
}

} // namespace iwarp_fuzz::rx
