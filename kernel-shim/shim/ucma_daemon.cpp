// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The rdma_cm's link to uiwarpd: see ucma_daemon.hpp.
#include "ucma_daemon.hpp"

#include "uiwarp/daemon_start.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/fd.hpp"
#include "uiwarp/log.hpp"
#include "uiwarp/thread.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <string>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

namespace uiwarp::ucma {

int sys_close(int fd) { return static_cast<int>(::syscall(SYS_close, fd)); }

namespace {

// How often the reader looks whether the program closed its socket (a blocked recvmsg would
// hold the socket open, and the daemon would never learn the program let go of it).
constexpr int kReaderCheckMs = 500;

} // namespace

bool DaemonLink::lost() const { return fd_ >= 0 && !same_file(fd_, dev_, ino_); }

void DaemonLink::drop_lost() {
  if (!lost()) return;
  log::error("rdma_cm", "the program closed uiwarp's descriptor to uiwarpd (fd " +
                            std::to_string(fd_) + "); connecting again");
  fd_ = -1;
  handler_.gone();
  cv_.notify_all();
}

bool DaemonLink::connect(std::string* err) {
  if (fd_ >= 0) return true;
  // uiwarp-run starts uiwarpd for this user and network namespace and names its socket.
  const char* env = Env::get().nonempty(EnvVar::DaemonSocket);
  if (!env) {
    *err = "UIWARPD_SOCKET is not set; run the program with uiwarp-run";
    return false;
  }
  int s = proto::connect_daemon(env, proto::Role::Shim, err);
  // A per-user uiwarpd exits when idle (uiwarpd.conf idle-exit-s), also between uiwarp-run's
  // start of it and this program's first RDMA CM call: start it again, as uiwarp-run did.
  if (const char* start = Env::get().nonempty(EnvVar::DaemonRestart); s < 0 && start) {
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
  struct stat st;
  if (::syscall(SYS_fstat, s, &st) != 0) {
    *err = std::string("uiwarpd's socket: ") + std::strerror(errno);
    sys_close(s);
    return false;
  }
  fd_ = s;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  start_thread([this, s, dev = st.st_dev, ino = st.st_ino] { reader(s, dev, ino); }).detach();
  return true;
}

int DaemonLink::send(const proto::Message& m, int fd) {
  std::string err;
  drop_lost();
  if (!connect(&err)) {
    log::error("rdma_cm", err);
    return ENOTCONN;
  }
  return proto::send(fd_, m, fd);
}

int DaemonLink::post(const proto::Message& m, int fd) {
  drop_lost();
  return fd_ >= 0 ? proto::send(fd_, m, fd) : ENOTCONN;
}

void DaemonLink::forget_after_fork() {
  if (fd_ >= 0) sys_close(fd_);
  fd_ = -1;
  for (proto::Packet& p : replies_)
    if (p.fd >= 0) sys_close(p.fd);
  replies_.clear();
}

void DaemonLink::reader(int s, dev_t dev, ino_t ino) {
  for (;;) {
    // Never read, nor close, a descriptor the program has taken over: look before each read.
    pollfd pf{s, POLLIN, 0};
    const int ready = ::poll(&pf, 1, kReaderCheckMs);
    if (!same_file(s, dev, ino)) {
      std::unique_lock<std::mutex> lock(mu_);
      if (fd_ == s) drop_lost(); // else send() or post() saw it first
      return;
    }
    if (ready <= 0) continue; // the check again, or EINTR
    auto p = proto::recv(s);
    std::unique_lock<std::mutex> lock(mu_);
    if (!p) {
      if (errno == EAGAIN || errno == EINTR) continue;
      if (fd_ == s) {
        fd_ = -1;
        handler_.gone();
      }
      sys_close(s);
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
