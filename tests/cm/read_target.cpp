// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-datapath-read-target PORT: the peer of test_datapath.cpp's case "RDMA Reads in flight
// up to ORD when the peer is killed", a process of its own so that nothing of the test's verbs
// state is shared. It listens on 127.0.0.1:PORT, prints "LISTENING", accepts one connection with
// a 16 MiB region open to remote reads, prints "ADDR RKEY", and waits to be killed.
#include "peer_program.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!peer::listen_on(ch, argv[1])) return 3;
  std::printf("LISTENING\n");
  std::fflush(stdout);
  rdma_cm_id* id = peer::next_request(ch);
  if (!id) return 4;
  ibv_pd* pd = ibv_alloc_pd(id->verbs);
  ibv_cq* cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
  static std::vector<char> buf(16 << 20, 'r');
  ibv_mr* mr =
      ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!mr || !peer::small_qp(id, pd, cq)) return 5;
  rdma_conn_param cp{};
  cp.initiator_depth = cp.responder_resources = 16;
  if (rdma_accept(id, &cp)) return 6;
  std::printf("%lu %u\n", static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(buf.data())),
              mr->rkey);
  std::fflush(stdout);
  for (;;)
    pause();
}
