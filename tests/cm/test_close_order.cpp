// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A post held back for the program's next poll (Qp::drive_posted: posts back to back after a
// poll of the send CQ) and a close by the peer that arrives before that poll: the post was made
// in RTS, before the program could know of the close, so it leaves as it would have had it gone
// at once, and completes; it is not flushed. ibv_srq_pingpong, whose last Sends may follow a
// peer that has finished and closed, failed 2 runs in 100 on a busy machine with "Failed
// status Work Request Flushed Error" before the held-back Send went first.
#include "connected_pair.hpp"

#include <map>

using namespace dp;

TEST_CASE("a post held back for the next poll leaves before a close that the poll finds",
          "[datapath]") {
  // Read first, the held Write was flushed in each of 90 rounds; a few rounds, as the order of
  // the poll and the progress thread's deadline is the machine's.
  constexpr int kRounds = 5;
  std::map<int, int> statuses;
  for (int round = 0; round < kRounds; ++round) {
    ConnectedPair p;
    const auto raddr = reinterpret_cast<std::uintptr_t>(p.server.at(0));
    ibv_wc wc[4];
    REQUIRE(ibv_poll_cq(p.client.scq, 4, wc) == 0); // the program polls...
    REQUIRE(p.client.post(IBV_WR_RDMA_WRITE, 1, 0, 64, raddr, p.server.mr->rkey) == 0);
    // ...and posts back to back: this one waits for the next poll (or the progress thread).
    REQUIRE(p.client.post(IBV_WR_RDMA_WRITE, 2, 64, 64, raddr + 64, p.server.mr->rkey) == 0);
    REQUIRE(rdma_disconnect(p.server.id) == 0); // the peer is done and closes
    int got = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got < 2 && std::chrono::steady_clock::now() < until) {
      const int k = ibv_poll_cq(p.client.scq, 4, wc);
      REQUIRE(k >= 0);
      for (int i = 0; i < k; ++i) {
        INFO("round " << round << ", wr_id " << wc[i].wr_id);
        CHECK(wc[i].wr_id == static_cast<std::uint64_t>(got + 1)); // in order
        ++statuses[wc[i].status];
        ++got;
      }
    }
    REQUIRE(got == 2);
  }
  INFO("flushed: " << statuses[IBV_WC_WR_FLUSH_ERR] << " of " << 2 * kRounds);
  CHECK(statuses[IBV_WC_SUCCESS] == 2 * kRounds);
}
