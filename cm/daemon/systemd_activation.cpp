// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "systemd_activation.hpp"

#include "uiwarp/env.hpp"

#include <cstdint>
#include <cstdlib>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#if UIWARP_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71 // <asm-generic/socket.h>, Linux 5.14
#endif

namespace uiwarp::daemon {

int systemd_listen_socket(std::string* err) {
#if UIWARP_HAVE_SYSTEMD
  int n = sd_listen_fds(1); // 1: unset LISTEN_*, they are for this process only
  if (n == 0) return -1;
  if (n < 0) {
    *err = "sd_listen_fds failed";
    return -2;
  }
  if (n != 1) {
    *err = "systemd passed " + std::to_string(n) + " sockets; uiwarpd.socket declares one";
    return -2;
  }
  const int fd = SD_LISTEN_FDS_START;
  if (sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, nullptr, 0) <= 0) {
    *err = "the socket systemd passed is not a listening SOCK_SEQPACKET Unix socket";
    return -2;
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
#else
  const char* pid = Env::get().value(EnvVar::ListenPid);
  if (pid && std::atol(pid) == static_cast<long>(::getpid())) {
    *err = "LISTEN_FDS is set but uiwarpd was built without libsystemd (no socket activation)";
    return -2;
  }
  return -1;
#endif
}

void systemd_notify_ready(const std::string& status) {
#if UIWARP_HAVE_SYSTEMD
  sd_notify(0, ("READY=1\nSTATUS=" + status).c_str());
#else
  (void)status;
#endif
}

void systemd_notify_stopping() {
#if UIWARP_HAVE_SYSTEMD
  sd_notify(0, "STOPPING=1");
#endif
}

bool same_netns(int listener, int client) {
  std::uint64_t a = 0, b = 0;
  socklen_t la = sizeof a, lb = sizeof b;
  if (::getsockopt(listener, SOL_SOCKET, SO_NETNS_COOKIE, &a, &la) != 0 ||
      ::getsockopt(client, SOL_SOCKET, SO_NETNS_COOKIE, &b, &lb) != 0)
    return true;
  return a == b;
}

} // namespace uiwarp::daemon
