// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What the small peer programs beside the data-path tests share (read_target.cpp,
// exec_target.cpp, write_initiator.cpp): an RDMA CM id on 127.0.0.1:PORT, the first connection
// request it gets, and a QP of a few work requests on one CQ. Each returns nullptr (or false)
// when a step fails: the program then exits with a status of its own.
#pragma once

#include <arpa/inet.h>
#include <cstdint>
#include <cstdlib>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

namespace peer {

inline sockaddr_in loopback(const char* port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(std::atoi(port)));
  return a;
}

// An id listening on 127.0.0.1:port.
inline rdma_cm_id* listen_on(rdma_event_channel* ch, const char* port) {
  rdma_cm_id* id = nullptr;
  sockaddr_in a = loopback(port);
  if (!ch || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) return nullptr;
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a)) || rdma_listen(id, 1)) return nullptr;
  return id;
}

// The id of the next connection request on `ch`.
inline rdma_cm_id* next_request(rdma_event_channel* ch) {
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e)) return nullptr;
  rdma_cm_id* id = e->event == RDMA_CM_EVENT_CONNECT_REQUEST ? e->id : nullptr;
  rdma_ack_cm_event(e);
  return id;
}

// The range of registered memory a target offers its initiator in the Accept's private data
// (write_initiator.cpp writes or sends into it; a Send's target offers only the length).
struct Range {
  std::uint64_t addr;
  std::uint32_t rkey;
  std::uint32_t length;
};

// Accepts the connection request of `id`, offering `r`: 0 or rdma_accept's -1.
inline int accept_offering(rdma_cm_id* id, const Range& r) {
  rdma_conn_param cp{};
  cp.private_data = &r;
  cp.private_data_len = sizeof r;
  return rdma_accept(id, &cp);
}

// An RC QP of 8 work requests each way, one SGE, sending and receiving on `cq`.
inline bool small_qp(rdma_cm_id* id, ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  return pd && cq && rdma_create_qp(id, pd, &qa) == 0;
}

} // namespace peer
