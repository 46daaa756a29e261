// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The asynchronous events of a device context as the data-path tests read them: each as a line
// naming its QP, collected until a test has what it waits for (test_async_events.cpp,
// test_samehost_peers.cpp).
#pragma once

#include "catch_compat.hpp"

#include <chrono>
#include <cstdio>
#include <functional>
#include <infiniband/verbs.h>
#include <poll.h>
#include <string>
#include <vector>

namespace dp {

// An event as a line, "QP 0x1a2b3c: last WQE reached", readable when a check fails.
using Events = std::vector<std::string>;
inline std::string qp_name(const ibv_qp* qp) {
  char n[24];
  std::snprintf(n, sizeof n, "QP 0x%06x: ", qp->qp_num);
  return n;
}
inline std::string line(ibv_event_type type, const ibv_qp* qp) {
  return qp_name(qp) + ibv_event_type_str(type);
}

// The async events of `ctx`, acknowledged, until `enough` says so (or 10 s passed), and those
// that follow within 200 ms: a second event that should not come has its chance to.
inline Events collect(ibv_context* ctx, const std::function<bool(const Events&)>& enough) {
  Events got;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto settle = std::chrono::steady_clock::time_point::max();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until || now >= settle) return got;
    pollfd p{ctx->async_fd, POLLIN, 0};
    if (::poll(&p, 1, 20) == 1) {
      ibv_async_event e{};
      REQUIRE(ibv_get_async_event(ctx, &e) == 0);
      got.push_back(line(e.event_type, e.element.qp));
      ibv_ack_async_event(&e);
    }
    if (settle == std::chrono::steady_clock::time_point::max() && enough(got))
      settle = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  }
}

// The events of one QP among them.
inline Events of(const Events& all, const ibv_qp* qp) {
  Events out;
  for (const auto& e : all)
    if (e.starts_with(qp_name(qp))) out.push_back(e);
  return out;
}

} // namespace dp
