// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A small RDMA CM program (stock librdmacm and libibverbs, run under uiwarp-run) for what rping
// and perftest do not show:
//   server PORT        an event-loop server: its event channel is O_NONBLOCK and watched with
//                      epoll (rdma_get_cm_event must say EAGAIN when nothing is pending, and the
//                      fd must become readable when an event is queued). It posts kRecvs
//                      receives, takes one message, then waits for the peer to vanish: every
//                      other receive must complete with IBV_WC_WR_FLUSH_ERR and the CM must
//                      report DISCONNECTED.
//   client ADDR PORT   sets RDMA_OPTION_ID_TOS 0x20, connects, sends one message, reports "client:
//   sent" and waits to be
//                      killed (kill -9: the peer vanishes mid-connection).
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <string>
#include <sys/epoll.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr int kRecvs = 16;
constexpr std::size_t kMsg = 4096;

[[noreturn]] void die(const std::string& what) {
  std::printf("FAIL: %s (%s)\n", what.c_str(), std::strerror(errno));
  std::fflush(stdout);
  std::exit(1);
}

// Waits (epoll, up to `ms`) for the next CM event on a non-blocking channel.
rdma_cm_event* next_event(rdma_event_channel* ch, int ep, int ms) {
  for (;;) {
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(ch, &e) == 0) return e;
    if (errno != EAGAIN) die("rdma_get_cm_event");
    epoll_event ev;
    int n = ::epoll_wait(ep, &ev, 1, ms);
    if (n == 0) die("no CM event within " + std::to_string(ms) + " ms although one was due");
    if (n < 0 && errno != EINTR) die("epoll_wait");
  }
}

rdma_cm_event* expect(rdma_event_channel* ch, int ep, rdma_cm_event_type t) {
  rdma_cm_event* e = next_event(ch, ep, 30000);
  if (e->event != t)
    die(std::string("expected ") + rdma_event_str(t) + ", got " + rdma_event_str(e->event));
  std::printf("server: %s\n", rdma_event_str(t));
  return e;
}

int server(const char* port) {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) die("rdma_create_event_channel");
  int fl = ::fcntl(ch->fd, F_GETFL);
  if (::fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK)) die("O_NONBLOCK");
  int ep = ::epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev)) die("epoll_ctl");
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e) == 0 || errno != EAGAIN) die("an empty channel must say EAGAIN");
  if (::epoll_wait(ep, &ev, 1, 0) != 0) die("an empty channel must not be readable");
  std::printf("server: empty channel: EAGAIN and not readable\n");

  rdma_cm_id* listen_id;
  if (rdma_create_id(ch, &listen_id, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  addrinfo hints{}, *ai;
  hints.ai_flags = AI_PASSIVE;
  hints.ai_family = AF_INET;
  if (getaddrinfo("127.0.0.1", port, &hints, &ai)) die("getaddrinfo");
  if (rdma_bind_addr(listen_id, ai->ai_addr) || rdma_listen(listen_id, 4)) die("bind/listen");
  freeaddrinfo(ai);
  std::printf("server: listening\n");
  std::fflush(stdout);

  e = expect(ch, ep, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* id = e->id;
  rdma_ack_cm_event(e);
  ibv_pd* pd = ibv_alloc_pd(id->verbs);
  ibv_cq* cq = ibv_create_cq(id->verbs, 2 * kRecvs, nullptr, nullptr, 0);
  if (!pd || !cq) die("pd/cq");
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4;
  qa.cap.max_recv_wr = kRecvs;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, pd, &qa)) die("rdma_create_qp");
  std::vector<char> buf(kRecvs * kMsg);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!mr) die("ibv_reg_mr");
  for (int i = 0; i < kRecvs; ++i)
    if (rdma_post_recv(id, reinterpret_cast<void*>(std::uintptr_t(i)), buf.data() + i * kMsg, kMsg,
                       mr))
      die("rdma_post_recv");
  rdma_conn_param cp{};
  if (rdma_accept(id, &cp)) die("rdma_accept");
  e = expect(ch, ep, RDMA_CM_EVENT_ESTABLISHED);
  rdma_ack_cm_event(e);

  // One message arrives.
  ibv_wc wc;
  int n = 0;
  for (int tries = 0; tries < 30000 && (n = ibv_poll_cq(cq, 1, &wc)) == 0; ++tries)
    ::usleep(1000);
  if (n != 1 || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV) die("no message received");
  std::printf("server: received \"%s\"\n", buf.data() + wc.wr_id * kMsg);
  std::fflush(stdout);

  // The peer is killed: DISCONNECTED, and the other receives flush.
  e = expect(ch, ep, RDMA_CM_EVENT_DISCONNECTED);
  rdma_ack_cm_event(e);
  int flushed = 0, other = 0;
  for (int tries = 0; tries < 5000 && flushed + other < kRecvs - 1; ++tries) {
    n = ibv_poll_cq(cq, 1, &wc);
    if (n == 0) {
      ::usleep(1000);
      continue;
    }
    if (wc.status == IBV_WC_WR_FLUSH_ERR)
      ++flushed;
    else
      ++other;
  }
  std::printf("server: %d receives flushed (IBV_WC_WR_FLUSH_ERR), %d other completions\n", flushed,
              other);
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  if (ibv_query_qp(id->qp, &attr, IBV_QP_STATE, &init)) die("ibv_query_qp");
  std::printf("server: QP state %s\n", attr.qp_state == IBV_QPS_ERR ? "ERR" : "not ERR");
  rdma_destroy_qp(id);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  rdma_destroy_id(id);
  rdma_destroy_id(listen_id);
  rdma_destroy_event_channel(ch);
  return flushed == kRecvs - 1 && other == 0 && attr.qp_state == IBV_QPS_ERR ? 0 : 1;
}

int client(const char* addr, const char* port) {
  rdma_addrinfo hints{}, *res;
  hints.ai_port_space = RDMA_PS_TCP;
  if (rdma_getaddrinfo(addr, port, &hints, &res)) die("rdma_getaddrinfo");
  ibv_qp_init_attr qa{};
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.sq_sig_all = 1;
  rdma_cm_id* id;
  if (rdma_create_ep(&id, res, nullptr, &qa)) die("rdma_create_ep");
  rdma_freeaddrinfo(res);
  std::uint8_t tos = 0x20; // the test checks the TCP connection carries it
  if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos))
    die("RDMA_OPTION_ID_TOS");
  char msg[64] = "hello before I vanish";
  ibv_mr* mr = rdma_reg_msgs(id, msg, sizeof msg);
  if (!mr || rdma_connect(id, nullptr)) die("rdma_connect");
  if (rdma_post_send(id, nullptr, msg, sizeof msg, mr, 0)) die("rdma_post_send");
  ibv_wc wc;
  if (rdma_get_send_comp(id, &wc) != 1 || wc.status != IBV_WC_SUCCESS) die("send completion");
  std::printf("client: sent\n");
  std::fflush(stdout);
  ::pause();
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "server") return server(argv[2]);
  if (argc == 4 && std::string(argv[1]) == "client") return client(argv[2], argv[3]);
  std::fprintf(stderr, "usage: %s server PORT | client ADDR PORT\n", argv[0]);
  return 2;
}
