// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// rdma_cm's address and port rules, through stock librdmacm over uiwarp-run, checked against
// the kernel's drivers/infiniband/core/cma.c: rdma_bind_addr takes its port at bind time
// (cma_get_port; port 0 is an ephemeral port, cma_alloc_any_port), rdma_listen and
// rdma_resolve_addr bind an unbound id first, and conflicts between ids follow cma_check_port
// and cma_bind_listen. qperf's server, for one, binds port 0, reads rdma_get_src_port and
// sends the port to its client before it listens.
#include "catch_compat.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace {

sockaddr_in v4(const char* ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

sockaddr* sa(sockaddr_in& a) { return reinterpret_cast<sockaddr*>(&a); }

// One event channel and ids on it, destroyed at the end of the test case.
struct Cm {
  rdma_event_channel* ch = rdma_create_event_channel();
  std::vector<rdma_cm_id*> ids;
  Cm() { REQUIRE(ch != nullptr); }
  ~Cm() {
    for (rdma_cm_id* id : ids)
      rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
  }
  Cm(const Cm&) = delete;
  Cm& operator=(const Cm&) = delete;
  rdma_cm_id* id() {
    rdma_cm_id* i = nullptr;
    REQUIRE(rdma_create_id(ch, &i, nullptr, RDMA_PS_TCP) == 0);
    ids.push_back(i);
    return i;
  }
  void destroy(rdma_cm_id* i) {
    std::erase(ids, i);
    REQUIRE(rdma_destroy_id(i) == 0);
  }
  // The errno of a failed call (0 when it succeeded).
  static int err(int ret) { return ret == 0 ? 0 : errno; }
  rdma_cm_event_type next_event() {
    rdma_cm_event* e = nullptr;
    REQUIRE(rdma_get_cm_event(ch, &e) == 0);
    rdma_cm_event_type t = e->event;
    rdma_ack_cm_event(e);
    return t;
  }
};

int set_reuse(rdma_cm_id* id, int on) {
  return rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on);
}

// A port that nothing is bound to right now (the kernel's pick, then released).
std::uint16_t free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = v4("127.0.0.1", 0);
  socklen_t len = sizeof a;
  ::bind(s, sa(a), sizeof a);
  ::getsockname(s, sa(a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// The pid of the uiwarpd serving the socket uiwarp-run named (UIWARPD_SOCKET): the process
// whose command line has "--socket PATH". 0 when there is none.
pid_t uiwarpd_pid() {
  const char* path = std::getenv("UIWARPD_SOCKET");
  if (!path) return 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline");
    std::vector<std::string> argv;
    for (std::string arg; std::getline(f, arg, '\0');)
      argv.push_back(arg);
    for (std::size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--socket" && argv[i + 1] == path) return std::stoi(name);
  }
  return 0;
}

} // namespace

TEST_CASE("rdma_bind_addr with port 0 assigns an ephemeral port at bind time", "[cm][bind]") {
  Cm cm;
  rdma_cm_id* id = cm.id();
  sockaddr_in a = v4("127.0.0.1", 0);
  REQUIRE(rdma_bind_addr(id, sa(a)) == 0);
  const std::uint16_t port = ntohs(rdma_get_src_port(id));
  CHECK(port != 0);
  auto* local = reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(id));
  CHECK(local->sin_family == AF_INET);
  CHECK(local->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
  // The port is held: nobody else can listen on it.
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in same = v4("127.0.0.1", port);
  CHECK(::bind(s, sa(same), sizeof same) != 0);
  ::close(s);
  // rdma_listen then listens on the port it reported (qperf's server).
  REQUIRE(rdma_listen(id, 0) == 0);
  CHECK(ntohs(rdma_get_src_port(id)) == port);
  s = ::socket(AF_INET, SOCK_STREAM, 0);
  CHECK(::connect(s, sa(same), sizeof same) == 0);
  ::close(s);
}

TEST_CASE("rdma_bind_addr to the wildcard with port 0, then listen", "[cm][bind]") {
  Cm cm;
  rdma_cm_id* id = cm.id();
  sockaddr_in a = v4("0.0.0.0", 0);
  REQUIRE(rdma_bind_addr(id, sa(a)) == 0);
  const std::uint16_t port = ntohs(rdma_get_src_port(id));
  CHECK(port != 0);
  REQUIRE(rdma_listen(id, 4) == 0);
  CHECK(ntohs(rdma_get_src_port(id)) == port);
}

TEST_CASE("rdma_listen on an unbound id binds the IPv4 wildcard and an ephemeral port",
          "[cm][bind]") {
  Cm cm;
  rdma_cm_id* id = cm.id();
  REQUIRE(rdma_listen(id, 4) == 0);
  CHECK(rdma_get_local_addr(id)->sa_family == AF_INET);
  CHECK(rdma_get_src_port(id) != 0);
}

TEST_CASE("rdma_resolve_addr on an unbound id takes a source port", "[cm][bind]") {
  Cm cm;
  rdma_cm_id* server = cm.id();
  REQUIRE(rdma_listen(server, 4) == 0);
  sockaddr_in dst = v4("127.0.0.1", ntohs(rdma_get_src_port(server)));
  rdma_cm_id* client = cm.id();
  REQUIRE(rdma_resolve_addr(client, nullptr, sa(dst), 2000) == 0);
  CHECK(cm.next_event() == RDMA_CM_EVENT_ADDR_RESOLVED);
  auto* local = reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(client));
  CHECK(local->sin_addr.s_addr == htonl(INADDR_LOOPBACK)); // the route's source address
  CHECK(rdma_get_src_port(client) != 0);
  CHECK(rdma_get_dst_port(client) == dst.sin_port);
}

TEST_CASE("rdma_bind_addr: an explicit port is the one bound, and is freed with the id",
          "[cm][bind]") {
  Cm cm;
  const std::uint16_t port = free_port();
  sockaddr_in a = v4("127.0.0.1", port);
  rdma_cm_id* first = cm.id();
  REQUIRE(rdma_bind_addr(first, sa(a)) == 0);
  CHECK(ntohs(rdma_get_src_port(first)) == port);
  cm.destroy(first);
  rdma_cm_id* again = cm.id();
  CHECK(rdma_bind_addr(again, sa(a)) == 0);
}

TEST_CASE("a listening id's port is free when rdma_destroy_id returns", "[cm][bind]") {
  // perftest -R listens, takes its parameter exchange, destroys the id and at once binds and
  // listens on the same port again. The kernel frees the port in rdma_destroy_id
  // (cma_release_port); uiwarpd holds a copy of the listening socket until it reads the
  // Unlisten, so it is stopped here across the destroy and the new bind.
  Cm cm;
  const std::uint16_t port = free_port();
  sockaddr_in a = v4("127.0.0.1", port);
  rdma_cm_id* l = cm.id();
  REQUIRE(rdma_bind_addr(l, sa(a)) == 0);
  REQUIRE(rdma_listen(l, 4) == 0);
  const pid_t daemon = uiwarpd_pid();
  const bool stopped = daemon > 0 && ::kill(daemon, SIGSTOP) == 0;
  cm.destroy(l);
  rdma_cm_id* again = cm.id();
  const int bound = Cm::err(rdma_bind_addr(again, sa(a)));
  if (stopped) ::kill(daemon, SIGCONT);
  INFO("uiwarpd " << daemon << (stopped ? " stopped" : " not stopped") << " meanwhile");
  CHECK(bound == 0);
  CHECK(rdma_listen(again, 4) == 0);
}

TEST_CASE("rdma_bind_addr errors follow the kernel's rdma_cm", "[cm][bind]") {
  Cm cm;
  rdma_cm_id* id = cm.id();
  SECTION("binding an id twice is EINVAL (cma_comp_exch IDLE -> ADDR_BOUND)") {
    sockaddr_in a = v4("127.0.0.1", 0);
    REQUIRE(rdma_bind_addr(id, sa(a)) == 0);
    CHECK(Cm::err(rdma_bind_addr(id, sa(a))) == EINVAL);
  }
  SECTION("an address of no local interface is EADDRNOTAVAIL (rdma_translate_ip)") {
    sockaddr_in a = v4("192.0.2.1", 0); // TEST-NET-1
    CHECK(Cm::err(rdma_bind_addr(id, sa(a))) == EADDRNOTAVAIL);
  }
  SECTION("a link-local IPv6 address without a scope id is EINVAL (cma_check_linklocal)") {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    ::inet_pton(AF_INET6, "fe80::1", &a.sin6_addr);
    CHECK(Cm::err(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a))) == EINVAL);
  }
  SECTION("a port a TCP listener holds is EADDRINUSE") {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in l = v4("127.0.0.1", 0);
    socklen_t len = sizeof l;
    REQUIRE(::bind(s, sa(l), sizeof l) == 0);
    REQUIRE(::listen(s, 1) == 0);
    REQUIRE(::getsockname(s, sa(l), &len) == 0);
    CHECK(Cm::err(rdma_bind_addr(id, sa(l))) == EADDRINUSE);
    ::close(s);
  }
  SECTION("a port below 1024 needs CAP_NET_BIND_SERVICE (cma_use_port)") {
    if (::geteuid() == 0)
      SUCCEED("root may bind it; checked by the unprivileged run");
    else {
      sockaddr_in a = v4("127.0.0.1", 7);
      CHECK(Cm::err(rdma_bind_addr(id, sa(a))) == EACCES);
    }
  }
}

TEST_CASE("two ids on one port: cma_check_port and cma_bind_listen", "[cm][bind]") {
  Cm cm;
  const std::uint16_t port = free_port();
  rdma_cm_id* a = cm.id();
  rdma_cm_id* b = cm.id();
  sockaddr_in lo = v4("127.0.0.1", port);
  sockaddr_in any = v4("0.0.0.0", port);
  SECTION("the same address without REUSEADDR is EADDRINUSE") {
    REQUIRE(rdma_bind_addr(a, sa(lo)) == 0);
    CHECK(Cm::err(rdma_bind_addr(b, sa(lo))) == EADDRINUSE);
  }
  SECTION("a wildcard and a specific address of one port is EADDRNOTAVAIL") {
    REQUIRE(rdma_bind_addr(a, sa(any)) == 0);
    CHECK(Cm::err(rdma_bind_addr(b, sa(lo))) == EADDRNOTAVAIL);
  }
  SECTION("with REUSEADDR on both they bind, and only one of them may listen") {
    REQUIRE(set_reuse(a, 1) == 0);
    REQUIRE(set_reuse(b, 1) == 0);
    REQUIRE(rdma_bind_addr(a, sa(lo)) == 0);
    REQUIRE(rdma_bind_addr(b, sa(lo)) == 0);
    CHECK(Cm::err(rdma_listen(a, 4)) == EADDRINUSE);
    cm.destroy(b);
    CHECK(rdma_listen(a, 4) == 0);
  }
}

TEST_CASE("rdma_set_option: REUSEADDR and AFONLY at the times the kernel allows", "[cm][bind]") {
  Cm cm;
  rdma_cm_id* id = cm.id();
  sockaddr_in a = v4("127.0.0.1", 0);
  REQUIRE(rdma_bind_addr(id, sa(a)) == 0);
  CHECK(Cm::err(set_reuse(id, 0)) == EINVAL); // rdma_set_reuseaddr: off only while IDLE
  CHECK(set_reuse(id, 1) == 0);
  REQUIRE(rdma_listen(id, 4) == 0);
  CHECK(Cm::err(set_reuse(id, 1)) == EINVAL); // on: not once listening
  int on = 1;
  CHECK(Cm::err(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &on, sizeof on)) ==
        EINVAL); // rdma_set_afonly: IDLE or ADDR_BOUND only
}
