// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-shared-lat server|client PORT MEMORY SIZE ITERS [verify]: an RDMA Write ping-pong, as
// ib_write_lat runs it, between two processes whose registered buffers are MEMORY:
//   memfd  a memfd sealed against shrinking (memfd_create, F_SEAL_SHRINK), kept open, mapped
//          shared: QEMU's memory-backend-memfd, a program's own shared buffers;
//   sysv   a System V segment (shmget, shmat, then IPC_RMID), as perftest's --use_hugepages
//          makes one, without the huge pages;
//   anon   anonymous private memory, as most programs have.
// Each side writes SIZE octets into the other's buffer and waits, polling the last octet of its
// own, for the other's Write back; the client times ITERS round trips and prints
//   MEMORY SIZE ITERS p50 T avg T      (one-way latency, µs: half a round trip)
// With `verify`, every octet of every Write is a pattern of its iteration, and each side checks
// all SIZE octets once the last one has come (so a Write placed out of order fails); then the
// client reads the server's buffer back with an RDMA Read and checks it, and prints "verified".
// Exit 0 when all went, 1 when a check failed, 2-6 when a step failed (it says which).
#include "peer_program.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>
#include <vector>

namespace {

struct Remote {
  std::uint64_t addr;
  std::uint32_t rkey;
};

int fail(int code, const char* what) {
  std::fprintf(stderr, "uiwarp-shared-lat: %s: %s\n", what, std::strerror(errno));
  return code;
}

// Two halves of `size` octets: what the peer writes into, and what this side writes from.
char* buffer(const std::string& kind, std::size_t bytes) {
  if (kind == "memfd") {
    const int fd = ::memfd_create("uiwarp-shared-lat", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
      return nullptr;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p); // fd stays open, as QEMU's does
  }
  if (kind == "sysv") {
    const int id = ::shmget(IPC_PRIVATE, bytes, IPC_CREAT | 0600);
    if (id < 0) return nullptr;
    void* p = ::shmat(id, nullptr, 0);
    ::shmctl(id, IPC_RMID, nullptr); // gone with its last detach, as perftest does
    return p == reinterpret_cast<void*>(-1) ? nullptr : static_cast<char*>(p);
  }
  if (kind == "anon") {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  return nullptr;
}

char pattern(std::uint32_t iter, std::size_t i) {
  return static_cast<char>((iter * 131 + i * 7) % 251 + 1); // never 0: the buffer starts so
}

bool expect(rdma_event_channel* ch, rdma_cm_event_type want, Remote* remote) {
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e)) return false;
  bool ok = e->event == want;
  if (ok && remote) {
    ok = e->param.conn.private_data_len >= sizeof(Remote);
    if (ok) std::memcpy(remote, e->param.conn.private_data, sizeof(Remote));
  }
  rdma_ack_cm_event(e);
  return ok;
}

bool wait_wc(ibv_cq* cq) {
  ibv_wc wc{};
  int n = 0;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
  }
  if (n < 0 || wc.status != IBV_WC_SUCCESS) {
    std::fprintf(stderr, "uiwarp-shared-lat: completion: %s\n",
                 n < 0 ? "poll failed" : ibv_wc_status_str(wc.status));
    return false;
  }
  return true;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: %s server|client PORT memfd|sysv|anon SIZE ITERS [verify]\n",
                 argv[0]);
    return 2;
  }
  const bool server = std::string(argv[1]) == "server";
  const std::string kind = argv[3];
  const std::size_t size = std::strtoul(argv[4], nullptr, 10);
  const std::uint32_t iters = static_cast<std::uint32_t>(std::strtoul(argv[5], nullptr, 10));
  const bool verify = argc == 7 && std::string(argv[6]) == "verify";
  if (size == 0 || size > (1u << 30) || iters == 0) return 2;
  const std::size_t bytes = (2 * size + 4095) / 4096 * 4096;
  char* buf = buffer(kind, bytes);
  if (!buf) return fail(2, ("a " + kind + " buffer").c_str());
  char* in = buf;
  char* out = buf + size;

  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* listen = nullptr;
  rdma_cm_id* id = nullptr;
  Remote peer{}; // the other side's buffer, from its request or its accept
  if (server) {
    listen = peer::listen_on(ch, argv[2]);
    if (!listen) return fail(3, "listen");
    std::printf("listening\n");
    std::fflush(stdout);
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(ch, &e)) return fail(3, "connection request");
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
        e->param.conn.private_data_len >= sizeof(Remote)) {
      id = e->id;
      std::memcpy(&peer, e->param.conn.private_data, sizeof peer);
    }
    rdma_ack_cm_event(e);
  } else {
    sockaddr_in a = peer::loopback(argv[2]);
    if (!ch || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) ||
        rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&a), 5000) ||
        !expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, nullptr) || rdma_resolve_route(id, 5000) ||
        !expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, nullptr))
      return fail(3, "resolve");
  }
  if (!id) return fail(3, "connection request");
  ibv_pd* pd = ibv_alloc_pd(id->verbs);
  ibv_cq* cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
  ibv_mr* mr = ibv_reg_mr(
      pd, buf, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!mr || !peer::small_qp(id, pd, cq)) return fail(4, "registration or QP");
  const Remote mine{reinterpret_cast<std::uintptr_t>(in), mr->rkey};
  rdma_conn_param cp{};
  cp.private_data = &mine;
  cp.private_data_len = sizeof mine;
  cp.responder_resources = cp.initiator_depth = 1;
  if (server) {
    if (rdma_accept(id, &cp) || !expect(ch, RDMA_CM_EVENT_ESTABLISHED, nullptr))
      return fail(5, "accept");
  } else {
    if (rdma_connect(id, &cp) || !expect(ch, RDMA_CM_EVENT_ESTABLISHED, &peer))
      return fail(5, "connect");
  }

  ibv_sge sge{reinterpret_cast<std::uintptr_t>(out), static_cast<std::uint32_t>(size), mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  auto post = [&](bool signaled) {
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(id->qp, &wr, &bad) == 0;
  };

  wr.wr.rdma = {peer.addr, peer.rkey};

  std::vector<double> lat;
  lat.reserve(iters);
  bool ok = true;
  volatile char* last = in + size - 1;
  for (std::uint32_t i = 1; i <= iters && ok; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    // The source of a Write is the provider's until the peer's answer shows it placed (an
    // unsignaled Write may still be on its way): the server fills it once the client's came.
    auto fill = [&] {
      if (verify)
        for (std::size_t j = 0; j < size; ++j)
          out[j] = pattern(i, j);
      else
        out[size - 1] = pattern(i, size - 1);
    };
    const char want = pattern(i, size - 1);
    // Every 8th signaled, its completion taken before the queue of 8 could fill.
    const bool signaled = i % 8 == 0 || i == iters;
    if (!server) {
      fill();
      if (!post(signaled)) return fail(6, "Write");
    }
    while (*last != want) {
    }
    if (verify)
      for (std::size_t j = 0; j < size && ok; ++j)
        ok = in[j] == pattern(i, j);
    if (server) {
      fill();
      if (!post(signaled)) return fail(6, "Write");
    }
    if (signaled && !wait_wc(cq)) return fail(6, "Write completion");
    lat.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        2);
  }
  if (!ok) std::fprintf(stderr, "uiwarp-shared-lat: a Write arrived with wrong octets\n");

  if (!server && ok && verify) {
    // The server's `in` holds our last Write: read it back.
    std::memset(out, 0, size);
    wr.opcode = IBV_WR_RDMA_READ;
    if (!post(true) || !wait_wc(cq)) return fail(6, "Read");
    for (std::size_t j = 0; j < size && ok; ++j)
      ok = out[j] == pattern(iters, j);
    if (!ok) std::fprintf(stderr, "uiwarp-shared-lat: the Read brought back wrong octets\n");
  }
  if (!server) {
    std::sort(lat.begin(), lat.end());
    double sum = 0;
    for (double v : lat)
      sum += v;
    std::printf("%s %zu %u p50 %.2f avg %.2f\n", kind.c_str(), size, iters, lat[lat.size() / 2],
                sum / static_cast<double>(lat.size()));
    if (ok && verify) std::printf("verified\n");
  }
  // The client ends the connection, once its Read is back: the server waits for that.
  if (server) {
    expect(ch, RDMA_CM_EVENT_DISCONNECTED, nullptr);
    rdma_disconnect(id);
  } else {
    rdma_disconnect(id);
    expect(ch, RDMA_CM_EVENT_DISCONNECTED, nullptr);
  }
  return ok ? 0 : 1;
}
