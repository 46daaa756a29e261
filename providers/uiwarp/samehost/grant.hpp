// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The same-host path where the kernel refuses one process the other's memory: Yama's
// ptrace_scope (1 on Ubuntu and GitHub Actions' runners: only a parent may reach its child; 2
// and 3 stricter still), a seccomp profile without process_vm_* or pidfd_getfd, a target that
// is not dumpable. A process may always open its own /proc/self/mem, and a descriptor of it
// reads and writes that address space whoever holds it, with no access check after the open
// (the kernel checks at open: fs/proc/base.c, proc_mem_open). So a target grants its peer the
// same reach the ptrace way gives, on purpose: it hands over that descriptor and its table's
// memfd, over a unix socket, with SCM_RIGHTS.
//
// The target listens on an abstract unix socket (SOCK_SEQPACKET) named after its pid and the
// number of its table's descriptor, both in its offer. A request carries the table's nonce,
// which only the connection's peer learned (from the MPA exchange); the target answers one
// from a process of its own user that names it with both descriptors, and closes. The
// requester checks that the socket is the target's (its pid and user, SO_PEERCRED) before it
// reads an answer: a process of another user squatting the name serves no descriptor (the
// nonce it was sent opens nothing without one). Abstract sockets belong to a network
// namespace: peers in two namespaces use the ptrace way or TCP.
//
// The target serves from its progress thread (serve_one on each readable listener: it waits
// a few milliseconds at most, for a request of its own user's, which the requester sent with
// its connect); the requester asks at set-up and waits for the answer there
// (GrantRequest::poll), a fraction of a millisecond, asking again if the target gave up on it.
#pragma once

#include "shared_region.hpp"

#include <cstdint>
#include <string>
#include <sys/types.h>

namespace uiwarp::samehost {

// The target's side: its listener and its own /proc/self/mem. One per published table.
class GrantServer {
public:
  // Listens as the table `table_fd` of this process names; -errno (e.g. -EADDRINUSE) if not.
  static Result<GrantServer> listen(int table_fd, Nonce nonce);
  GrantServer(GrantServer&& o) noexcept;
  GrantServer& operator=(GrantServer&& o) noexcept;
  GrantServer(const GrantServer&) = delete;
  GrantServer& operator=(const GrantServer&) = delete;
  ~GrantServer();

  int fd() const { return listen_fd_; } // readable: a request waits (serve_one)
  // Accepts one connection and answers its request (or refuses it by closing).
  void serve_one() const;

private:
  GrantServer() = default;
  void reset() noexcept;
  int listen_fd_ = -1;
  int table_fd_ = -1; // not owned: the PublishedRegion's
  int mem_fd_ = -1;   // /proc/self/mem, owned
  Nonce nonce_;
};

// The name a target of pid `pid` with table descriptor `table_fd` listens on (without the
// leading NUL of an abstract address).
std::string grant_name(pid_t pid, int table_fd);

// The requester's side: one request in flight.
class GrantRequest {
public:
  // Sends the request to the target `pid`'s listener for table `table_fd`; the error says why
  // not (no listener: another network namespace, or an older uiwarp).
  static Result<GrantRequest> start(pid_t pid, int table_fd, Nonce nonce);
  GrantRequest(GrantRequest&& o) noexcept;
  GrantRequest& operator=(GrantRequest&& o) noexcept;
  GrantRequest(const GrantRequest&) = delete;
  GrantRequest& operator=(const GrantRequest&) = delete;
  ~GrantRequest();

  struct Granted {
    int table_fd = -1, mem_fd = -1; // owned by the caller from here on
  };
  // The answer, once it came: nullopt in value and an empty error while it has not yet; an
  // error if the target refused or is not who it must be; errnum ECONNRESET if it closed
  // without an answer (its wait for the request ran out: the caller may ask again).
  Result<Granted> poll();

private:
  GrantRequest() = default;
  void reset() noexcept;
  int fd_ = -1;
  pid_t pid_ = 0;
};

} // namespace uiwarp::samehost
