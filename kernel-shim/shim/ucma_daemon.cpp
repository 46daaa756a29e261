// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The rdma_cm's link to uiwarpd: see ucma_daemon.hpp.
#include "ucma_daemon.hpp"

#include "uiwarp/daemon_start.hpp"
#include "uiwarp/log.hpp"
#include "uiwarp/thread.hpp"

#include <cerrno>
#include <cstdlib>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

namespace uiwarp::ucma {

int sys_close(int fd) { return static_cast<int>(::syscall(SYS_close, fd)); }

bool DaemonLink::connect(std::string* err) {
  if (fd_ >= 0) return true;
  // uiwarp-run starts uiwarpd for this user and network namespace and names its socket.
  const char* env = std::getenv("UIWARPD_SOCKET");
  if (!env || !*env) {
    *err = "UIWARPD_SOCKET is not set; run the program with uiwarp-run";
    return false;
  }
  int s = proto::connect_daemon(env, proto::Role::Shim, err);
  // A per-user uiwarpd exits when idle (uiwarpd.conf idle-exit-s), also between uiwarp-run's
  // start of it and this program's first RDMA CM call: start it again, as uiwarp-run did.
  if (const char* start = std::getenv(kRestartEnv); s < 0 && start && *start) {
    std::string why;
    if (ensure_daemon(start, env, &why)) {
      err->clear();
      s = proto::connect_daemon(env, proto::Role::Shim, err);
    } else {
      *err += "; " + why;
    }
  }
  if (s < 0) {
    *err += "; run the program with uiwarp-run, which starts it";
    return false;
  }
  fd_ = s;
  start_thread([this, s] { reader(s); }).detach();
  return true;
}

int DaemonLink::send(const proto::Message& m, int fd) {
  std::string err;
  if (!connect(&err)) {
    log::error("rdma_cm", err);
    return ENOTCONN;
  }
  return proto::send(fd_, m, fd);
}

int DaemonLink::post(const proto::Message& m, int fd) const {
  return fd_ >= 0 ? proto::send(fd_, m, fd) : ENOTCONN;
}

void DaemonLink::forget_after_fork() {
  if (fd_ >= 0) sys_close(fd_);
  fd_ = -1;
  for (proto::Packet& p : replies_)
    if (p.fd >= 0) sys_close(p.fd);
  replies_.clear();
}

void DaemonLink::reader(int s) {
  for (;;) {
    auto p = proto::recv(s);
    std::unique_lock<std::mutex> lock(mu_);
    if (!p) {
      if (errno == EAGAIN || errno == EINTR) continue;
      fd_ = -1;
      sys_close(s);
      handler_.gone();
      cv_.notify_all();
      return;
    }
    if (auto* m = std::get_if<proto::ConnRequest>(&p->msg)) {
      if (p->fd >= 0) sys_close(p->fd);
      handler_.conn_request(*m);
    } else if (auto* r = std::get_if<proto::ConnectReply>(&p->msg)) {
      handler_.connect_reply(*r, p->fd, lock);
    } else if (std::holds_alternative<proto::ListenReply>(p->msg) ||
               std::holds_alternative<proto::ResolveReply>(p->msg) ||
               std::holds_alternative<proto::AcceptReply>(p->msg)) {
      replies_.push_back(std::move(*p)); // the waiter takes it, with its socket
      cv_.notify_all();
    } else if (p->fd >= 0) {
      sys_close(p->fd);
    }
  }
}

} // namespace uiwarp::ucma
