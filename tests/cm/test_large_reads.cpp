// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Large RDMA Reads, whose Responses may leave the responder by reference (qp_splice.cpp: the
// registered pages go to TCP through a pipe, not copied). ctest runs this file's case twice:
// in cm-datapath with the provider's own choice (on this host it copies, after a probe), and
// in cm-datapath-splice with UIWARP_TX_SPLICE=on, where every Response of 16 KiB or more goes
// by reference. Either way each Read must bring the source as it was when read: also after the
// program changed the source between Reads (a page TCP still held would bring the old octets
// or the new ones into the wrong Read), at offsets that start inside a page, and many at once.
#include "connected_pair.hpp"

#include <vector>

using namespace dp;

namespace {

void fill(Side& s, std::size_t off, std::size_t n, unsigned round) {
  for (std::size_t i = 0; i < n; ++i)
    s.buf[off + i] = static_cast<char>((i * 131 + round * 17 + (i >> 12)) & 0xff);
}

} // namespace

TEST_CASE("large RDMA Reads bring the source as it was when read, also after it changed",
          "[datapath]") {
  constexpr std::size_t kArea = 4 << 20;
  SideOptions big;
  big.buf_size = 2 * kArea;
  ConnectedPair p(big, big);
  // Sizes around the 16 KiB threshold and a large one; sources that start inside a page.
  const std::vector<std::pair<std::size_t, std::uint32_t>> reads = {{0, 65536},
                                                                    {65536 + 100, 16384},
                                                                    {131072 + 4095, 16383},
                                                                    {262144 + 7, 1 << 20},
                                                                    {(2 << 20) + 1, 200000},
                                                                    {(3 << 20), 65536}};
  const auto raddr = reinterpret_cast<std::uintptr_t>(p.server.at(0));
  for (unsigned round = 0; round < 8; ++round) {
    fill(p.server, 0, kArea, round); // the program changes its memory between Reads
    std::uint64_t id = 0;
    for (auto [off, len] : reads)
      REQUIRE(p.client.post(IBV_WR_RDMA_READ, id++, kArea + off, len, raddr + off,
                            p.server.mr->rkey) == 0);
    std::vector<ibv_wc> wcs = poll_n(p.client.scq, reads.size());
    REQUIRE(wcs.size() == reads.size());
    for (std::size_t i = 0; i < reads.size(); ++i) {
      CHECK(wcs[i].wr_id == i);
      auto [off, len] = reads[i];
      INFO("round " << round << ", Read " << i << " of " << len << " octets at " << off);
      CHECK(placed(p.client.at(kArea + off), p.server.at(off), len));
    }
  }
}
