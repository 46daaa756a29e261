// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// fork() after a program has used the RDMA CM (a server that forks per client, rdma-core's
// pyverbs tests that fork their players): the child must reach uiwarpd on a link of its own.
// The link it inherits is the parent's socket, whose reader thread stayed in the parent, so a
// reply to the child would be read by the parent (the child's rdma_listen waited 30 s, then
// failed). The parent's link must go on working.
#include "catch_compat.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

sockaddr_in loopback() {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// An id on its own channel, bound to 127.0.0.1 (an ephemeral port), listening: 0 or an errno.
int listen_once() {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return errno;
  rdma_cm_id* id = nullptr;
  int err = rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) ? errno : 0;
  sockaddr_in a = loopback();
  if (!err && rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a))) err = errno;
  if (!err && rdma_listen(id, 4)) err = errno;
  if (id) rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  return err;
}

} // namespace

TEST_CASE("fork() after using the RDMA CM: the child reaches uiwarpd on a link of its own",
          "[cm][fork]") {
  REQUIRE(listen_once() == 0); // the parent's link and reader thread now exist
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(20); // a child that waits for a reply the parent read must not hang the test
    const auto t0 = std::chrono::steady_clock::now();
    const int err = listen_once();
    const bool quick = std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5);
    ::_exit(err == 0 && quick ? 0 : 10 + err % 100);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("child status " << status);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(listen_once() == 0); // and the parent's link still works
}
