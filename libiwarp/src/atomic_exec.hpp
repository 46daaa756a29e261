// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The responder's half of an RFC 7306 Atomic Request (§5.1): the new value the operation
// stores, and its execution on registered memory, atomic with respect to every other Atomic
// of this process (the device's "HCA" atomicity, IBV_ATOMIC_HCA), whichever QP and thread
// executes it.
#pragma once

#include "iwarp/wire.hpp"

#include <cstdint>

namespace iwarp {

// The value `a` (FetchAdd or CompareSwap, masks applied) leaves where `orig` was.
std::uint64_t atomic_result(const AtomicRequestHeader& a, std::uint64_t orig);

// Executes `a` on the 8 octets at `host` (host order, as the consumer reads them) and
// returns the original value.
std::uint64_t atomic_execute(const AtomicRequestHeader& a, void* host);

} // namespace iwarp
