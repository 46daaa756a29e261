// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A poller that spins on a CQ nothing completes to gives way (Cq::idle_poll): once the CQ has
// been empty for 200 us it calls sched_yield, at most every 200 us, and a completion starts
// the count again. The calls are counted by interposing sched_yield (the executable's
// definition comes first for the provider, which libibverbs loads) for the polling thread.
#include "connected_pair.hpp"

#include <algorithm>
#include <chrono>
#include <sys/syscall.h>
#include <unistd.h>

using namespace dp;

namespace {
thread_local int t_yields = 0;

// Polls `cq` for `span`, each poll finding nothing; returns the longest time from one clock
// reading to the next, each poll between two of them (a thread preempted there may see more
// of the streak than `span`). The last poll counts too: preempted before it reads its own
// clock, the provider would see a streak up to that gap longer.
std::chrono::nanoseconds poll_empty(ibv_cq* cq, std::chrono::microseconds span) {
  ibv_wc wc;
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  std::chrono::nanoseconds gap{0};
  for (;;) {
    REQUIRE(ibv_poll_cq(cq, 1, &wc) == 0);
    const auto now = std::chrono::steady_clock::now();
    gap = std::max(gap, std::chrono::nanoseconds(now - last));
    last = now;
    if (now - t0 >= span) return gap;
  }
}

// A Send the server receives: its poll returns a completion, which ends an empty streak.
void one_completion(ConnectedPair& p) {
  REQUIRE(p.server.post_recv(1, 0, 64) == 0);
  REQUIRE(p.client.post(IBV_WR_SEND, 2, 0, 64) == 0);
  REQUIRE(poll_n(p.server.rcq, 1).size() == 1);
  REQUIRE(poll_n(p.client.scq, 1).size() == 1);
}

// After a completion, 150 us of empty polls give no yield. A round in which this thread was
// kept off its CPU for more than 40 us between polls proves nothing (the streak the provider
// saw was longer) and is made again, up to 20 times; a provider that yields early fails every
// round that counts.
void no_yield_at_first(ConnectedPair& p) {
  using std::chrono::microseconds;
  for (int round = 0; round < 20; ++round) {
    one_completion(p); // a completion: the count starts again
    t_yields = 0;
    if (poll_empty(p.server.rcq, microseconds(150)) > microseconds(40)) continue;
    CHECK(t_yields == 0);
    return;
  }
  FAIL("no round of 150 us of polls without a gap over 40 us");
}
} // namespace

extern "C" int sched_yield() noexcept {
  ++t_yields;
  return static_cast<int>(::syscall(SYS_sched_yield));
}

TEST_CASE("a poller spinning on an empty CQ gives way after 200 us, at most every 200 us",
          "[datapath]") {
  using std::chrono::microseconds;
  ConnectedPair p;
  no_yield_at_first(p); // the streak began at the first of these polls
  poll_empty(p.server.rcq, microseconds(5000));
  CHECK(t_yields >= 1);
  CHECK(t_yields <= 5150 / 200 + 1);

  no_yield_at_first(p); // and again after a completion
}
