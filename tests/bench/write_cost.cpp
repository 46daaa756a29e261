// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-write-cost: the work one RDMA Write costs the provider, for callgrind's instruction
// counts (scripts/bench). Stock librdmacm and libibverbs, run under uiwarp-run (or any build's
// uiwarp-run: the program links neither the provider nor libiwarp, so one binary measures every
// build of the provider alike):
//
//   uiwarp-run valgrind --tool=callgrind uiwarp-write-cost -s 65536 -n 300
//
// One process connects to itself over the RDMA CM on 127.0.0.1 (a listener, an active and a
// passive QP on one event channel), then one thread does N RDMA Writes of SIZE octets in
// lock-step: post DEPTH signalled Writes on the active QP, poll its CQ until they complete, and
// poll the passive QP's CQ (which drives its socket, where the provider does that) until the
// last octet of the last Write has landed. With one thread and a fixed number of Writes in
// flight, the provider does the same work for every message whatever the machine's load: no
// batching that depends on timing, so the counts repeat from run to run.
//
// Under valgrind the counters are zeroed after WARMUP Writes and dumped after the N measured
// ones (CALLGRIND_ZERO_STATS / CALLGRIND_DUMP_STATS_AT), so the dump holds N Writes and nothing
// of the set-up; scripts/bench divides the inclusive counts of the provider's functions by N.
// Outside valgrind the client requests do nothing and the program prints its rate.
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sched.h>
#include <string>
#include <unistd.h>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(what)
#define RUNNING_ON_VALGRIND 0
#endif

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "uiwarp-write-cost: %s (%s)\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

// One end of the connection: its CM id, verbs objects and buffer.
struct End {
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<unsigned char> buf;
};

void make_qp(End& e, std::size_t size, int depth, int access) {
  e.pd = ibv_alloc_pd(e.id->verbs);
  e.cq = ibv_create_cq(e.id->verbs, depth + 1, nullptr, nullptr, 0);
  if (!e.pd || !e.cq) die("ibv_alloc_pd / ibv_create_cq");
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = e.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = static_cast<std::uint32_t>(depth);
  qa.cap.max_recv_wr = 1;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (rdma_create_qp(e.id, e.pd, &qa)) die("rdma_create_qp");
  e.buf.assign(size * static_cast<std::size_t>(depth), 0); // a slot per Write in flight
  e.mr = ibv_reg_mr(e.pd, e.buf.data(), e.buf.size(), access);
  if (!e.mr) die("ibv_reg_mr");
}

// Connects `act` to `pas` through a listener on 127.0.0.1:port (0: any free port), all on one
// event channel and in this thread.
void connect_self(rdma_event_channel* ch, End& act, End& pas, std::uint16_t port, std::size_t size,
                  int depth) {
  rdma_cm_id* listener;
  if (rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin.sin_port = htons(port);
  if (rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&sin)) || rdma_listen(listener, 1))
    die("rdma_bind_addr / rdma_listen");
  sin.sin_port = rdma_get_src_port(listener); // network order, as sin_port wants it
  if (rdma_create_id(ch, &act.id, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  if (rdma_resolve_addr(act.id, nullptr, reinterpret_cast<sockaddr*>(&sin), 5000))
    die("rdma_resolve_addr");
  rdma_conn_param cp{};
  cp.responder_resources = cp.initiator_depth = 1;
  for (int established = 0; established < 2;) {
    rdma_cm_event* ev;
    if (rdma_get_cm_event(ch, &ev)) die("rdma_get_cm_event");
    rdma_cm_event_type type = ev->event;
    rdma_cm_id* id = ev->id;
    rdma_ack_cm_event(ev);
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (rdma_resolve_route(id, 5000)) die("rdma_resolve_route");
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      make_qp(act, size, depth, IBV_ACCESS_LOCAL_WRITE);
      if (rdma_connect(id, &cp)) die("rdma_connect");
      break;
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      pas.id = id;
      make_qp(pas, size, depth, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      if (rdma_accept(id, &cp)) die("rdma_accept");
      break;
    case RDMA_CM_EVENT_ESTABLISHED: ++established; break;
    default: errno = 0; die(std::string("unexpected CM event ") + rdma_event_str(type));
    }
  }
}

// The three steps of a round, each its own function so that a profile shows them apart.
// Write number `slot` of a round goes from the slot'th SIZE octets of the source buffer to the
// slot'th of the target's.
[[gnu::noinline]] void post_write(End& src, const End& dst, std::size_t size, int slot) {
  std::size_t off = size * static_cast<std::size_t>(slot);
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(src.buf.data() + off),
              static_cast<std::uint32_t>(size), src.mr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(dst.buf.data() + off);
  wr.wr.rdma.rkey = dst.mr->rkey;
  if (ibv_post_send(src.id->qp, &wr, &bad)) die("ibv_post_send");
}

[[gnu::noinline]] void wait_sent(End& src, int count) {
  ibv_wc wc[16];
  while (count > 0) {
    int n = ibv_poll_cq(src.cq, 16, wc);
    if (n < 0) die("ibv_poll_cq");
    for (int i = 0; i < n; ++i)
      if (wc[i].status != IBV_WC_SUCCESS) {
        errno = 0;
        die(std::string("send completion: ") + ibv_wc_status_str(wc[i].status));
      }
    count -= n;
    if (n == 0) ::sched_yield(); // lets another thread in (valgrind runs one at a time)
  }
}

// The last 8 octets of each Write carry its sequence number; Writes on one QP are placed in
// order, so when the round's last one has landed, all have.
[[gnu::noinline]] void wait_landed(End& dst, std::uint64_t seq) {
  ibv_wc wc;
  const volatile unsigned char* tail = dst.buf.data() + dst.buf.size() - sizeof seq;
  for (;;) {
    std::uint64_t got;
    std::memcpy(&got, const_cast<const unsigned char*>(tail), sizeof got);
    if (got == seq) return;
    if (ibv_poll_cq(dst.cq, 1, &wc) != 0) die("a completion on the target of RDMA Writes");
    ::sched_yield();
  }
}

void usage() {
  std::fprintf(stderr, "usage: uiwarp-write-cost [-s SIZE] [-n WRITES] [-w WARMUP] [-d DEPTH] "
                       "[-p PORT]\n");
  std::exit(2);
}

} // namespace

int main(int argc, char** argv) {
  std::size_t size = 4096;
  int n = 1000, warm = 50, depth = 1;
  std::uint16_t port = 0;
  for (int c; (c = ::getopt(argc, argv, "s:n:w:d:p:")) != -1;) {
    switch (c) {
    case 's': size = std::strtoul(optarg, nullptr, 0); break;
    case 'n': n = std::atoi(optarg); break;
    case 'w': warm = std::atoi(optarg); break;
    case 'd': depth = std::atoi(optarg); break;
    case 'p': port = static_cast<std::uint16_t>(std::atoi(optarg)); break;
    default: usage();
    }
  }
  if (size < 8 || n < 1 || warm < 1 || depth < 1 || n % depth) usage();
  warm = (warm + depth - 1) / depth * depth; // whole rounds

  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) die("rdma_create_event_channel");
  End act, pas;
  connect_self(ch, act, pas, port, size, depth);

  using clock = std::chrono::steady_clock;
  clock::time_point t0;
  std::uint64_t seq = 0;
  for (int done = 0; done < warm + n; done += depth) {
    if (done == warm) {
      ::usleep(20000); // the progress thread back in epoll_wait: nothing straddles the zero
      CALLGRIND_ZERO_STATS;
      t0 = clock::now();
    }
    for (int slot = 0; slot < depth; ++slot) {
      ++seq;
      std::memcpy(act.buf.data() + size * static_cast<std::size_t>(slot + 1) - sizeof seq, &seq,
                  sizeof seq);
      post_write(act, pas, size, slot);
    }
    wait_sent(act, depth);
    wait_landed(pas, seq);
  }
  double secs = std::chrono::duration<double>(clock::now() - t0).count();
  ::usleep(20000);
  CALLGRIND_DUMP_STATS_AT("measured");

  std::printf("%d RDMA Writes of %zu octets, %d in flight: %.0f Writes/s, %.1f us each%s\n", n,
              size, depth, n / secs, secs * 1e6 / n,
              RUNNING_ON_VALGRIND ? " (under valgrind)" : "");
  rdma_disconnect(act.id);
  return 0;
}
