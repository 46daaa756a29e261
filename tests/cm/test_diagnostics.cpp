// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What a program is told unasked (uiwarp(7), DIAGNOSTICS and THE RECEIVE WAIT): the first
// time a connection holds a Send for a receive that is not posted yet, one line on standard
// error names the connection and says that an RNIC or siw would have terminated there; the
// Send then completes once a receive comes; with recv-wait-ms=0 the Send is terminated at once,
// with the spec's code, as on an RNIC. (Why a connection ended is checked against a hostile
// peer too: HX-030 in tests/hostile.)
#include "connected_pair.hpp"

#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace dp;

namespace {

// Standard error into a file while it lives; text() reads what arrived.
class CaptureStderr {
public:
  CaptureStderr() {
    char path[] = "/tmp/uiwarp-stderr-XXXXXX";
    fd_ = mkstemp(path);
    REQUIRE(fd_ >= 0);
    path_ = path;
    saved_ = dup(2);
    REQUIRE(dup2(fd_, 2) == 2);
  }
  ~CaptureStderr() {
    dup2(saved_, 2);
    close(saved_);
    close(fd_);
    unlink(path_.c_str());
  }
  CaptureStderr(const CaptureStderr&) = delete;
  CaptureStderr& operator=(const CaptureStderr&) = delete;
  std::string text() const {
    std::ifstream f(path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

private:
  int fd_ = -1, saved_ = -1;
  std::string path_;
};

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
    ++n;
  return n;
}

} // namespace

TEST_CASE("a Send held for a receive says so once per connection, then completes",
          "[diagnostics][recv-wait]") {
  ConnectedPair p;
  CaptureStderr err;
  for (int i = 0; i < 2; ++i) { // two held Sends: one line
    REQUIRE(p.client.post(IBV_WR_SEND, 1, 0, 64) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200)); // no receive posted yet
    REQUIRE(p.server.post_recv(10, 0, 64) == 0);
    REQUIRE(poll_n(p.server.rcq, 1).size() == 1);
    REQUIRE(poll_n(p.client.scq, 1).size() == 1);
  }
  const std::string said = err.text();
  INFO("standard error: " << said);
  CHECK(count(said, "a Send arrived with no receive posted") == 1);
  CHECK(count(said, "an iWARP RNIC or siw would have terminated here") == 1);
  CHECK(count(said, "connection 127.0.0.1:") == 1);
}

TEST_CASE("recv-wait-ms=0: a Send with no receive posted terminates at once, as an RNIC's",
          "[recv-wait-0]") {
  // The connection's policy (uiwarpd.conf, a device, or UIWARP_MPA_POLICY, which uiwarp reads
  // once per process: cm-manners-recv-wait-0 runs this case alone with it); the Terminate is
  // DDP's "no buffer available" (RFC 5041 §7.2, layer 1, type 2, code 2).
  const char* policy = std::getenv("UIWARP_MPA_POLICY");
  REQUIRE(std::string(policy ? policy : "") == "recv-wait-ms=0");
  CaptureStderr err;
  {
    ConnectedPair p;
    REQUIRE(p.client.post(IBV_WR_SEND, 1, 0, 64) == 0);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    do {
      ibv_wc wc[4];
      ibv_poll_cq(p.server.rcq, 4, wc); // drives the server's QP
      REQUIRE(ibv_query_qp(p.server.qp(), &attr, IBV_QP_STATE, &init) == 0);
    } while (attr.qp_state != IBV_QPS_ERR && std::chrono::steady_clock::now() < until);
    CHECK(attr.qp_state == IBV_QPS_ERR);
  }
  const std::string said = err.text();
  INFO("standard error: " << said);
  CHECK(count(said, "(Terminate sent: layer 1 DDP, type 2, code 2)") == 1);
  CHECK(count(said, "would have terminated here") == 0);
}
