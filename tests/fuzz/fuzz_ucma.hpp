// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The input of the UCMA fuzz target (fuzz_ucma.cpp), shared with the seed generator
// (make_corpus.cpp): a sequence of rdma_cm commands as an application writes them to its
// rdma_cm fd, each
//   u8 cmd | u8 flags | u16 out (LE) | u16 in (LE) | `in` octets: the command's body
// The target writes rdma_ucm_cmd_hdr{cmd, in, out} and the body. The pointers in the body (a
// response, SET_OPTION's optval) are the application's own memory, so the target points them
// at buffers of exactly the room the header declares: a write past it is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace iwarp_fuzz::ucma {

enum Flags : std::uint8_t {
  kSecondChannel = 1, // written to the second of the two channels
  kKnownId = 2,       // the body's id field becomes a handle created before (its value mod n)
  kFullOut = 4,       // `out` is the command's whole response, whatever the record says
  kOwnFd = 8,         // MIGRATE_ID: its fd names the other channel
  kShortLen = 16,     // the write is one octet shorter than header and body (EINVAL)
};

constexpr std::size_t kRecordHeader = 6;

inline void record(std::vector<std::uint8_t>& out, std::uint8_t cmd, std::uint8_t flags,
                   std::uint16_t out_len, const void* body, std::uint16_t in_len) {
  const std::uint8_t h[kRecordHeader] = {cmd,
                                         flags,
                                         static_cast<std::uint8_t>(out_len),
                                         static_cast<std::uint8_t>(out_len >> 8),
                                         static_cast<std::uint8_t>(in_len),
                                         static_cast<std::uint8_t>(in_len >> 8)};
  out.insert(out.end(), h, h + kRecordHeader);
  const auto* b = static_cast<const std::uint8_t*>(body);
  out.insert(out.end(), b, b + in_len);
}

template <class T>
void record(std::vector<std::uint8_t>& out, std::uint8_t cmd, std::uint8_t flags, const T& body) {
  record(out, cmd, flags | kFullOut, 0, &body, static_cast<std::uint16_t>(sizeof body));
}

} // namespace iwarp_fuzz::ucma
