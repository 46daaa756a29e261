// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-datapath-exec-target PORT: the target of test_samehost_peers.cpp's exec case. It
// listens on 127.0.0.1:PORT and accepts one connection with a 4 MiB region at kAt (a fixed
// address, so that the program it becomes can map the same range), open to remote writes, its
// range in the Accept's private data; prints "WRITTEN" once a peer's Write has landed in it,
// then waits for a line on stdin and calls execve on itself with "--after": that image maps
// the same range, zeroed, prints "MAPPED", waits 500 ms for the peer's copies in flight, and
// prints "CLEAN", or "LANDED n" with the count of octets someone wrote into it.
#include "peer_program.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

namespace {

void* const kAt = reinterpret_cast<void*>(std::uintptr_t{0x3f00'0000'0000});
constexpr std::size_t kLength = 4 << 20;

void* map_range() {
  void* m = ::mmap(kAt, kLength, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  return m == kAt ? m : nullptr;
}

int after() {
  const auto* mem = static_cast<const volatile char*>(map_range());
  if (!mem) return 2;
  std::printf("MAPPED\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::size_t landed = 0;
  for (std::size_t i = 0; i < kLength; ++i)
    landed += mem[i] != 0;
  if (landed == 0)
    std::printf("CLEAN\n");
  else
    std::printf("LANDED %zu\n", landed);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--after") == 0) return after();
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT | --after\n", argv[0]);
    return 2;
  }
  char* buf = static_cast<char*>(map_range());
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!buf || !peer::listen_on(ch, argv[1])) return 3;
  std::printf("LISTENING\n");
  std::fflush(stdout);
  rdma_cm_id* id = peer::next_request(ch);
  if (!id) return 4;
  ibv_pd* pd = ibv_alloc_pd(id->verbs);
  ibv_cq* cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
  ibv_mr* mr = ibv_reg_mr(pd, buf, kLength, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr || !peer::small_qp(id, pd, cq)) return 5;
  if (peer::accept_offering(id, {reinterpret_cast<std::uintptr_t>(buf), mr->rkey,
                                 static_cast<std::uint32_t>(kLength)}))
    return 6;
  while (static_cast<volatile char*>(buf)[0] != 'w')
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("WRITTEN\n");
  std::fflush(stdout);
  char line[16];
  if (!std::fgets(line, sizeof line, stdin)) return 7;
  // As a program does: no teardown of its verbs objects, its descriptors close at exec.
  ::execl("/proc/self/exe", argv[0], "--after", static_cast<char*>(nullptr));
  return 8;
}
