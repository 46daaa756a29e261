// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// One same-host offer for the tests of its encoding (test_mpa_same_host.cpp checks its octets),
// of uiwarpd's protocol and of uiwarpd's sessions, with every field away from its default (magic
// and version stay valid).
#pragma once

#include "iwarp/wire.hpp"

#include <cstddef>

namespace uiwarp::test {

inline iwarp::SameHostOffer sample_offer() {
  iwarp::SameHostOffer o;
  for (std::size_t i = 0; i < o.boot_id.size(); ++i)
    o.boot_id[i] = std::byte(0xb0 + i);
  o.pid_ns = 0xeffff001;
  o.uid = 1000;
  o.pid = 4242;
  o.table_fd = 7;
  o.slot = 3;
  for (std::size_t i = 0; i < o.nonce.size(); ++i)
    o.nonce[i] = std::byte(0x50 + i);
  return o;
}

} // namespace uiwarp::test
