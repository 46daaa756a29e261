// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The grant (samehost/grant.hpp): a target hands its table and /proc/self/mem to a requester of
// its own user that names the table's nonce, and to no one else. Both ends in this process, as
// the target's listener answers a process of its own user whatever its pid.
#include "catch_compat.hpp"
#include "samehost/grant.hpp"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

using namespace uiwarp::samehost;

namespace {

constexpr Nonce kNonce{0x1111'2222'3333'4444, 0x5555'6666'7777'8888};

struct Target {
  int table = ::memfd_create("uiwarp-test-table", MFD_CLOEXEC);
  Result<GrantServer> server = GrantServer::listen(table, kNonce);
  ~Target() { ::close(table); }
};

// The answer of `req`, polled for up to a second.
Result<GrantRequest::Granted> answer(GrantRequest& req) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    auto g = req.poll();
    if (g || !g.error.empty() || std::chrono::steady_clock::now() >= until) return g;
    ::usleep(100);
  }
}

bool same_file(int a, int b) {
  struct stat sa {
  }, sb{};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

} // namespace

TEST_CASE("samehost grant: a request sent with the connect is answered with the table and the "
          "target's memory",
          "[samehost]") {
  Target t;
  REQUIRE(t.table >= 0);
  REQUIRE(t.server);
  auto req = GrantRequest::start(::getpid(), t.table, kNonce);
  REQUIRE(req);
  // The request is queued before the target accepts: serving finds it without waiting.
  t.server.value->serve_one();
  auto g = answer(*req.value);
  REQUIRE(g);
  CHECK(same_file(g.value->table_fd, t.table));
  // The second descriptor reaches this address space: it reads a word of ours.
  const std::uint64_t word = 0x0123'4567'89ab'cdef;
  std::uint64_t read_back = 0;
  CHECK(::pread(g.value->mem_fd, &read_back, sizeof read_back,
                static_cast<off_t>(reinterpret_cast<std::uintptr_t>(&word))) == sizeof read_back);
  CHECK(read_back == word);
  ::close(g.value->table_fd);
  ::close(g.value->mem_fd);
}

TEST_CASE("samehost grant: a wrong nonce is refused by closing, and the caller may ask again",
          "[samehost]") {
  Target t;
  REQUIRE(t.server);
  auto wrong = GrantRequest::start(::getpid(), t.table, Nonce{1, 2});
  REQUIRE(wrong);
  t.server.value->serve_one();
  auto g = answer(*wrong.value);
  CHECK_FALSE(g);
  CHECK(g.errnum == ECONNRESET); // closed: what granted_peer asks again on
  auto right = GrantRequest::start(::getpid(), t.table, kNonce);
  REQUIRE(right);
  t.server.value->serve_one();
  auto ok = answer(*right.value);
  REQUIRE(ok);
  ::close(ok.value->table_fd);
  ::close(ok.value->mem_fd);
}

TEST_CASE("samehost grant: a connection that sends no request is closed within the target's "
          "short wait, with nothing sent",
          "[samehost]") {
  Target t;
  REQUIRE(t.server);
  const int c = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  REQUIRE(c >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = grant_name(::getpid(), t.table);
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  REQUIRE(::connect(c, reinterpret_cast<sockaddr*>(&a),
                    static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())) ==
          0);
  t.server.value->serve_one(); // the progress thread's call: it returns after its short wait
  char buf[16];
  CHECK(::recv(c, buf, sizeof buf, 0) == 0); // closed, no descriptor
  ::close(c);
}
