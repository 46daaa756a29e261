// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-tcp-stream: what loopback TCP itself gives a stream of SIZE-octet messages, one
// send() each, with and without TCP_NODELAY, the receiver blocking or spinning on a
// non-blocking recv() into 64 KiB. uiwarp (as siw and every iWARP stack) sets TCP_NODELAY, so
// this is the ceiling for a provider that sends each message as it is posted; iperf3 leaves
// Nagle on. The sender runs in a child process for SECONDS (default 3).
//
//   uiwarp-tcp-stream SIZE [SECONDS]
#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

struct Mode {
  bool nodelay;
  bool rx_spin;
};

// MB/s (2^20) received, and recv() calls per message.
void run(std::size_t size, int secs, Mode m) {
  int l = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  int one = 1;
  if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || ::listen(l, 1) ||
      ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &al)) {
    std::perror("listen");
    std::exit(1);
  }
  pid_t child = ::fork();
  if (child == 0) {
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a)) _exit(1);
    if (m.nodelay) ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::vector<char> msg(size, 'x');
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
    while (std::chrono::steady_clock::now() < end)
      if (::send(c, msg.data(), size, MSG_NOSIGNAL) < 0) _exit(1);
    _exit(0);
  }
  int s = ::accept(l, nullptr, nullptr);
  if (m.nodelay) ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (m.rx_spin) ::fcntl(s, F_SETFL, O_NONBLOCK);
  std::vector<char> buf(64 << 10);
  std::size_t total = 0, calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    ssize_t n = ::recv(s, buf.data(), buf.size(), 0);
    ++calls;
    if (n == 0) break;
    if (n > 0) total += static_cast<std::size_t>(n);
  }
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::waitpid(child, nullptr, 0);
  ::close(s);
  ::close(l);
  std::printf("%zu octets, TCP_NODELAY %-3s, receiver %-8s: %8.1f MB/s, %.2f recv() per message\n",
              size, m.nodelay ? "on" : "off", m.rx_spin ? "spins" : "blocks",
              static_cast<double>(total) / t / 1048576.0,
              total ? static_cast<double>(calls) * static_cast<double>(size) /
                          static_cast<double>(total)
                    : 0.0);
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::atoi(argv[1]) <= 0) {
    std::fprintf(stderr, "usage: uiwarp-tcp-stream SIZE [SECONDS]\n");
    return 2;
  }
  const auto size = static_cast<std::size_t>(std::atoi(argv[1]));
  const int secs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  for (Mode m : {Mode{false, false}, Mode{true, false}, Mode{true, true}})
    run(size, secs, m);
}
