// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
// select() through poll(), preloaded before Debian 12's librspreload (rdma-core 44) for the
// iperf3 case. That librspreload's select() hands each rsocket's readiness back to the first fd
// number whose mapping matches, and an accepted rsocket's own (internal) fd is lower than the
// fd the program got from accept(): iperf3's server is told its internal fd is ready, never its
// data or control socket, so it never reads (tests/consumers/README.md). rdma-core fixed that in
// 7ea19e136 ("librdmacm: Fix select function", v63) by keeping the program's fd of each entry;
// this does the same by going through librspreload's poll(), which maps every entry itself.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <sys/select.h>

int select(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
           struct timeval* timeout) {
  if (nfds < 0 || nfds > FD_SETSIZE) {
    errno = EINVAL;
    return -1;
  }
  struct pollfd fds[FD_SETSIZE];
  nfds_t n = 0;
  for (int fd = 0; fd < nfds; fd++) {
    short events = 0;
    if (readfds && FD_ISSET(fd, readfds)) events |= POLLIN;
    if (writefds && FD_ISSET(fd, writefds)) events |= POLLOUT;
    if (events || (exceptfds && FD_ISSET(fd, exceptfds)))
      fds[n++] = (struct pollfd){.fd = fd, .events = events, .revents = 0};
  }
  int ms = timeout ? (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
  int ret = poll(fds, n, ms);
  if (ret < 0) return ret;
  if (readfds) FD_ZERO(readfds);
  if (writefds) FD_ZERO(writefds);
  if (exceptfds) FD_ZERO(exceptfds);
  // The same mapping of revents as librspreload's own select() (and rdma-core 7ea19e136).
  int cnt = 0;
  for (nfds_t i = 0; i < n; i++) {
    if (readfds && (fds[i].revents & POLLIN)) {
      FD_SET(fds[i].fd, readfds);
      cnt++;
    }
    if (writefds && (fds[i].revents & POLLOUT)) {
      FD_SET(fds[i].fd, writefds);
      cnt++;
    }
    if (exceptfds && (fds[i].revents & ~(POLLIN | POLLOUT))) {
      FD_SET(fds[i].fd, exceptfds);
      cnt++;
    }
  }
  return cnt;
}
