// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-vm-copy: what process_vm_writev (or readv) itself moves between two processes of
// this machine in SIZE-octet calls: the ceiling of the same-host path, which makes one such
// call per RDMA Write or Read of up to 1 MiB (providers/uiwarp/qp_same_host.cpp). The target
// is a forked child that waits; prints MB/s (2^20) and microseconds per call.
//
//   uiwarp-vm-copy SIZE [SECONDS] [read]
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: uiwarp-vm-copy SIZE [SECONDS] [read]\n");
    return 2;
  }
  const std::size_t size = std::strtoull(argv[1], nullptr, 0);
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  const bool read = argc > 3 && std::string(argv[3]) == "read";
  if (size == 0 || seconds <= 0) {
    std::fprintf(stderr, "uiwarp-vm-copy: SIZE and SECONDS must be positive\n");
    return 2;
  }
  // Both buffers touched before the child forks, so neither side faults pages in while timed.
  std::vector<char> target(size, 'a'), local(size, 'b');
  int up[2];
  if (::pipe(up) != 0) return 1;
  const pid_t child = ::fork();
  if (child < 0) return 1;
  if (child == 0) {
    std::memset(target.data(), 'c', size); // its own copy of the pages
    char ok = 1;
    if (::write(up[1], &ok, 1) != 1) _exit(1);
    ::pause();
    _exit(0);
  }
  char ok = 0;
  if (::read(up[0], &ok, 1) != 1) return 1;
  const iovec l{local.data(), size};
  const iovec r{target.data(), size}; // the same address in the child
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration<double>(seconds);
  std::uint64_t calls = 0;
  int rc = 0;
  for (auto now = t0; now < until; now = Clock::now()) {
    for (int i = 0; i < 64; ++i, ++calls) {
      const ssize_t n = read ? ::process_vm_readv(child, &l, 1, &r, 1, 0)
                             : ::process_vm_writev(child, &l, 1, &r, 1, 0);
      if (n != static_cast<ssize_t>(size)) {
        std::perror(read ? "process_vm_readv" : "process_vm_writev");
        rc = 1;
        break;
      }
    }
    if (rc) break;
  }
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  if (rc) return rc;
  std::printf("%zu %.2f MB/s %.3f us/call\n", size, double(calls) * double(size) / took / 1048576.0,
              took / double(calls) * 1e6);
  return 0;
}
