// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Who a process is, for the same-host path: what a peer must share with it to qualify (the
// host's boot, the user, the pid namespace), the nonce of its table as the MPA offer carries it,
// and which fork() generation made what it holds (a child of fork() must never write into its
// parent's table or through its parent's pins).
#pragma once

#include "iwarp/wire.hpp"
#include "stag_share.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <sys/types.h>

namespace uiwarp::samehost {

// This process as a peer must see it to qualify: same boot, same user, same pid namespace.
struct Identity {
  std::array<std::byte, 16> boot_id{};
  std::uint64_t pid_ns = 0;
  std::uint32_t uid = 0;
  std::uint32_t pid = 0;
  std::string error; // why it could not be read ("" when it was)
};
Identity identity();

// The offer's nonce is the table's, in 16 octets (lo then hi, little-endian).
std::array<std::byte, 16> to_bytes(Nonce n);
Nonce to_nonce(const std::array<std::byte, 16>& b);

// Why `offer` does not qualify for a peer that is `self`, or "" when it does.
std::string mismatch(const iwarp::SameHostOffer& offer, const Identity& self);

// How many fork()s this process is from the one where the count started (a pthread_atfork
// child handler adds one, before the child runs anything else). A table or a peer's mapping
// made at another count is the parent's: a child must not write there. One relaxed load, for
// the post path.
std::uint32_t fork_generation();

// Whether this process made what it recorded at `generation` with pid `pid`: false in a child
// of fork() (counted), or of clone() without fork() (another pid).
bool made_here(std::uint32_t generation, pid_t pid);

} // namespace uiwarp::samehost
