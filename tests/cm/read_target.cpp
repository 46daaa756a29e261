// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-datapath-read-target PORT: the peer of test_datapath.cpp's case "RDMA Reads in flight
// up to ORD when the peer is killed", a process of its own so that nothing of the test's verbs
// state is shared. It listens on 127.0.0.1:PORT, prints "LISTENING", accepts one connection with
// a 16 MiB region open to remote reads, prints "ADDR RKEY", and waits to be killed.
#include <arpa/inet.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* listen = nullptr;
  if (!ch || rdma_create_id(ch, &listen, nullptr, RDMA_PS_TCP)) return 2;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(std::atoi(argv[1])));
  if (rdma_bind_addr(listen, reinterpret_cast<sockaddr*>(&a)) || rdma_listen(listen, 1)) return 3;
  std::printf("LISTENING\n");
  std::fflush(stdout);
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e) || e->event != RDMA_CM_EVENT_CONNECT_REQUEST) return 4;
  rdma_cm_id* id = e->id;
  rdma_ack_cm_event(e);
  ibv_pd* pd = ibv_alloc_pd(id->verbs);
  ibv_cq* cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
  static std::vector<char> buf(16 << 20, 'r');
  ibv_mr* mr =
      ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (!mr || rdma_create_qp(id, pd, &qa)) return 5;
  rdma_conn_param cp{};
  cp.initiator_depth = cp.responder_resources = 16;
  if (rdma_accept(id, &cp)) return 6;
  std::printf("%lu %u\n", static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(buf.data())),
              mr->rkey);
  std::fflush(stdout);
  for (;;)
    pause();
}
