// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A source buffer that changes while a work request sends it (QEMU's live migration sends
// guest RAM that the guest keeps writing): the target's contents are undefined, as verbs say,
// but every work request completes and the connection lives, as on an RNIC, which computes
// the MPA CRC over the octets it transmits. uiwarp once took the CRC over one read of the
// buffer and sent another, and the receiver ended the connection ("MPA: CRC error") after
// about 30 such Writes. Writes, Sends and Read Responses, each with its source rewritten
// throughout by another thread, under the policy the test runs with: cm-datapath with CRC on
// (the default), cm-datapath-nocrc with UIWARP_MPA_POLICY=crc=off (payloads sent from the
// program's buffers), cm-datapath-splice with CRC off and the pipe path forced on
// (UIWARP_TX_SPLICE=on: Read Responses by reference).
#include "connected_pair.hpp"

#include <atomic>
#include <cstdlib>
#include <thread>

using namespace dp;

namespace {

constexpr std::size_t kRegion = 256 << 10;

// Rewrites [at, at + kRegion) until stopped.
class Scribbler {
public:
  explicit Scribbler(char* at)
      : t_([this, at] {
          for (unsigned v = 0; !stop_.load(std::memory_order_relaxed); ++v)
            for (std::size_t i = 0; i < kRegion; i += 64)
              reinterpret_cast<volatile char*>(at)[i + (v % 64)] = static_cast<char>(v);
        }) {}
  ~Scribbler() {
    stop_ = true;
    t_.join();
  }
  Scribbler(const Scribbler&) = delete;
  Scribbler& operator=(const Scribbler&) = delete;

private:
  std::atomic<bool> stop_{false};
  std::thread t_;
};

std::uint32_t size_of(int i) {
  return static_cast<std::uint32_t>((64 << 10) + (i % 4) * (64 << 10));
}

} // namespace

TEST_CASE("a source rewritten while it is sent: every work request completes, the connection "
          "lives",
          "[datapath][crc]") {
  const char* policy = std::getenv("UIWARP_MPA_POLICY");
  INFO("UIWARP_MPA_POLICY=" << (policy ? policy : "(unset)"));
  ConnectedPair p;
  constexpr int kRounds = 60;
  const auto raddr = [&](std::size_t off) {
    return reinterpret_cast<std::uintptr_t>(p.server.at(off));
  };
  {
    Scribbler client_writes(p.client.at(0));      // the Writes' and Sends' source
    Scribbler server_reads(p.server.at(kRegion)); // the Read Responses' source
    for (int i = 0; i < kRounds; ++i) {
      const std::uint32_t len = size_of(i);
      INFO("round " << i << ", " << len << " octets");
      REQUIRE(p.server.post_recv(100 + static_cast<std::uint64_t>(i), 3 * kRegion, len) == 0);
      REQUIRE(p.client.post(IBV_WR_RDMA_WRITE, 1, 0, len, raddr(0), p.server.mr->rkey) == 0);
      REQUIRE(p.client.post(IBV_WR_SEND, 2, 0, len) == 0);
      REQUIRE(p.client.post(IBV_WR_RDMA_READ, 3, 2 * kRegion, len, raddr(kRegion),
                            p.server.mr->rkey) == 0);
      REQUIRE(poll_n(p.client.scq, 3).size() == 3); // fails on any error status
      REQUIRE(poll_n(p.server.rcq, 1).size() == 1);
    }
  }
  // The connection is still up and exact once the sources hold still.
  for (std::size_t i = 0; i < 4096; ++i)
    *p.client.at(i) = static_cast<char>(i * 13 + 5);
  REQUIRE(p.client.post(IBV_WR_RDMA_WRITE, 4, 0, 4096, raddr(0), p.server.mr->rkey) == 0);
  REQUIRE(poll_n(p.client.scq, 1).size() == 1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!placed(p.server.at(0), p.client.at(0), 4096))
    REQUIRE(std::chrono::steady_clock::now() < until);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  REQUIRE(ibv_query_qp(p.client.qp(), &attr, IBV_QP_STATE, &init) == 0);
  CHECK(attr.qp_state == IBV_QPS_RTS);
}
