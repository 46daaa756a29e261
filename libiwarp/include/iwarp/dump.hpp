// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Human-readable decoding of wire units, for logs, the protocol demo and tests.
#pragma once

#include "iwarp/wire.hpp"

#include <string>

namespace iwarp {

// One ULPDU (DDP segment): "Send L=1 DV=1 RV=1 QN=0 MSN=1 MO=0, 21 payload octets".
std::string describe_ulpdu(ConstBytes ulpdu);
// One MPA Request/Reply frame (header + private data).
std::string describe_mpa_frame(ConstBytes frame);

} // namespace iwarp
