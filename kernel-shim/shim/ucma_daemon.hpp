// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The emulated rdma_cm's link to uiwarpd (daemon_proto.hpp): connects on first use, sends
// requests, and a reader thread hands what uiwarpd sends to the emulation: connection
// requests and connect results as they come, replies to the command that waits for them
// (await). Every member is used with the emulation's lock held; the reader takes it.
#pragma once

#include "uiwarp/daemon_proto.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <sys/types.h>

namespace uiwarp::ucma {

class DaemonLink {
public:
  // What the reader hands over, with the lock held.
  class Handler {
  public:
    virtual void conn_request(const proto::ConnRequest& m) = 0;
    // `fd`: the connected socket (or -1), which the handler owns; it may release the lock.
    virtual void connect_reply(const proto::ConnectReply& m, int fd,
                               std::unique_lock<std::mutex>& lock) = 0;
    // uiwarpd exited or was restarted; the link is down (connected() is false).
    virtual void gone() = 0;

  protected:
    ~Handler() = default;
  };

  DaemonLink(std::mutex& mu, std::condition_variable& cv, Handler& h)
      : mu_(mu), cv_(cv), handler_(h) {}

  bool connected() const { return fd_ >= 0; }
  // The program closed the link's descriptor (daemons close those they do not know), or put
  // something else in its place: the link is down, and uiwarp no longer owns that number
  // (nothing is sent, read or closed on it). Checked by identity, not by number.
  bool lost() const;
  // Connects to UIWARPD_SOCKET (which uiwarp-run sets) unless connected; false with *err.
  bool connect(std::string* err);
  // Sends `m` (with socket `fd`), connecting first: 0, or an errno (ENOTCONN: no uiwarpd).
  int send(const proto::Message& m, int fd = -1);
  // Sends `m` only if connected (what an unconnected uiwarpd does not need to hear).
  int post(const proto::Message& m, int fd = -1);
  // In the child of fork(): the link it inherited is the parent's socket without the parent's
  // reader thread, so uiwarpd's replies would go to whichever process reads first. The child
  // lets go of it (the parent's stays open) and connects anew when it needs uiwarpd.
  void forget_after_fork();

  // Waits for the reply `Reply` to `key` (the lock is released meanwhile): the packet, whose
  // socket (if any) the caller owns; nullopt when uiwarpd left or did not answer.
  template <class Reply>
  std::optional<proto::Packet> await(std::uint64_t key, std::unique_lock<std::mutex>& lock) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      for (auto it = replies_.begin(); it != replies_.end(); ++it) {
        const Reply* r = std::get_if<Reply>(&it->msg);
        if (r && reply_key(*r) == key) {
          proto::Packet p = std::move(*it);
          replies_.erase(it);
          return p;
        }
      }
      if (fd_ < 0 || cv_.wait_until(lock, until) == std::cv_status::timeout) return std::nullopt;
    }
  }

private:
  static std::uint64_t reply_key(const proto::ListenReply& r) { return r.id; }
  static std::uint64_t reply_key(const proto::ResolveReply& r) { return r.id; }
  static std::uint64_t reply_key(const proto::AcceptReply& r) { return r.token; }

  void reader(int s, dev_t dev, ino_t ino);
  // With mu_ held: a lost link goes down (gone()), its number left to the program.
  void drop_lost();

  std::mutex& mu_;
  std::condition_variable& cv_;
  Handler& handler_;
  int fd_ = -1;
  dev_t dev_ = 0; // the socket fd_ names (lost())
  ino_t ino_ = 0;
  std::deque<proto::Packet> replies_;
};

// close() by system call: the shim's own fds must not come back through its interposers.
int sys_close(int fd);

} // namespace uiwarp::ucma
