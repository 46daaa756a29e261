// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-datapath-writer PORT [PIECE [send]]: the initiator of test_samehost_peers.cpp, a process
// of its own so that the test can stop it (as a debugger or Ctrl-Z does) while it copies into a
// target's memory over the same-host path, or kill it in the middle of a Send. It connects to
// 127.0.0.1:PORT, takes the target's range (address, rkey, length) from the Accept's private
// data, and writes it whole with RDMA Writes of PIECE octets (1 MiB by default) of 'w', one at a
// time, until a Write fails (the target deregistered the range, or went: the connection ends).
// With `send`, Sends of PIECE octets (up to 64 MiB) instead, saying "posted" on stdout after the
// first. Exits 0 then, 2-6 if the connection could not be made.
#include "peer_program.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using peer::Range;

bool expect(rdma_event_channel* ch, rdma_cm_event_type want, Range* range = nullptr) {
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e)) return false;
  const bool ok = e->event == want;
  if (ok && range) {
    if (e->param.conn.private_data_len < sizeof(Range)) return false;
    std::memcpy(range, e->param.conn.private_data, sizeof(Range));
  }
  rdma_ack_cm_event(e);
  return ok;
}

} // namespace

int main(int argc, char** argv) {
  const bool send = argc == 4 && std::strcmp(argv[3], "send") == 0;
  if (argc != 2 && argc != 3 && !send) {
    std::fprintf(stderr, "usage: %s PORT [PIECE [send]]\n", argv[0]);
    return 2;
  }
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  if (!ch || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) return 2;
  sockaddr_in a = peer::loopback(argv[1]);
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&a), 5000) ||
      !expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(id, 5000) ||
      !expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED))
    return 3;
  const std::uint32_t kPiece = argc >= 3 ? static_cast<std::uint32_t>(std::atoi(argv[2])) : 1 << 20;
  if (kPiece == 0 || kPiece > (send ? 64u << 20 : 1u << 20)) return 2;
  ibv_pd* pd = ibv_alloc_pd(id->verbs);
  ibv_cq* cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
  static std::vector<char> buf(kPiece, 'w');
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!mr || !peer::small_qp(id, pd, cq)) return 4;
  rdma_conn_param cp{};
  if (rdma_connect(id, &cp)) return 5;
  Range r{};
  if (!expect(ch, RDMA_CM_EVENT_ESTABLISHED, &r) || r.length < kPiece) return 6;
  for (std::uint64_t n = 0;; ++n) {
    ibv_sge s{reinterpret_cast<std::uintptr_t>(buf.data()), kPiece, mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = r.addr + (n % (r.length / kPiece)) * kPiece;
    wr.wr.rdma.rkey = r.rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(id->qp, &wr, &bad)) return 0;
    if (send && n == 0) {
      std::puts("posted");
      std::fflush(stdout);
    }
    ibv_wc wc{};
    int got = 0;
    while ((got = ibv_poll_cq(cq, 1, &wc)) == 0) {
    }
    if (got < 0 || wc.status != IBV_WC_SUCCESS) return 0;
  }
}
