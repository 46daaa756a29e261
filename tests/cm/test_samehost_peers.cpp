// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Same-host peers that stop or change under the path, as real programs' peers do:
//  - A peer stopped in the middle of a copy into this process (a debugger's breakpoint, Ctrl-Z,
//    a cgroup freezer) holds only the verb that must wait for that copy: ibv_dereg_mr of the
//    region it copies into returns once the peer has run again, as an RNIC's deregistration
//    waits for its DMA, and meanwhile every other verb of the context, and the data of another
//    connection, go on.
//  - A target that calls execve while a copy into it is on its way gets no octet of it in the
//    program it became, even one that maps memory where the region was.
//  - An initiator killed in the middle of a Send (through the stream ring, on this path) leaves
//    the receive it was filling flushed, never complete.
//  - Sends of two initiator processes into one SRQ: each receive is taken once, and each holds
//    a whole message.
// The initiator is uiwarp-datapath-writer (write_initiator.cpp), a child process: the copy
// tests trace it, and stop it exactly at a copy's system call (its pin held), then give it
// SIGSTOP and let it go, so that it sits stopped (state T). The exec'ing target is
// uiwarp-datapath-exec-target (exec_target.cpp).
#include "async_events.hpp"
#include "connected_pair.hpp"
#include "peer_program.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace dp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// The third field of /proc/PID/stat: R, S, T (stopped), t (stopped by a tracer), ...
char proc_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(f, s);
  const auto close = s.rfind(") ");
  return close == std::string::npos ? '?' : s[close + 2];
}

bool is_copy(std::uint64_t nr) {
  return nr == SYS_process_vm_writev || nr == SYS_pwritev || nr == SYS_pwritev2;
}

// Traces `pid` to a copy system call of the data path (process_vm_writev, or pwritev of
// /proc/PID/mem): to its end (`at_entry` false: the copy has run, the pin is still held) or to
// its start (the copy runs when the process does). There it stays stopped (SIGSTOP, sent while
// traced, taken as soon as it is let go) as a process in a debugger or Ctrl-Z'ed does.
bool stop_in_copy(pid_t pid, bool at_entry = false) {
  // TRACESYSGOOD: without it a system call stop is a plain SIGTRAP, which
  // PTRACE_GET_SYSCALL_INFO does not describe.
  if (::ptrace(PTRACE_SEIZE, pid, nullptr, PTRACE_O_TRACESYSGOOD) != 0) return false;
  if (::ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr) != 0) return false;
  int status = 0;
  if (::waitpid(pid, &status, __WALL) != pid) return false;
  bool in_copy = false;
  for (int stops = 0; stops < 100'000; ++stops) {
    if (::ptrace(PTRACE_SYSCALL, pid, nullptr, nullptr) != 0) break;
    if (::waitpid(pid, &status, __WALL) != pid || !WIFSTOPPED(status)) return false;
    __ptrace_syscall_info info{};
    if (::ptrace(PTRACE_GET_SYSCALL_INFO, pid, sizeof info, &info) <= 0) continue;
    if (info.op == PTRACE_SYSCALL_INFO_ENTRY) in_copy = is_copy(info.entry.nr);
    if (in_copy && (info.op == PTRACE_SYSCALL_INFO_ENTRY) == at_entry) {
      ::kill(pid, SIGSTOP); // pending: taken before the process runs a user instruction
      return ::ptrace(PTRACE_DETACH, pid, nullptr, nullptr) == 0;
    }
  }
  ::ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
  return false;
}

// Whether this run has same-host copies for the test to trace: not with the path off (the
// target's own threads place every Write), nor under uiwarp-no-ptrace (no ptrace).
bool traceable_copies() {
  if (const char* v = std::getenv("UIWARP_SAME_HOST"); v && std::string(v) == "off") {
    WARN("UIWARP_SAME_HOST=off: over TCP the target's own threads place every Write");
    return false;
  }
  if (std::getenv("UIWARP_TEST_NO_PTRACE")) {
    WARN("under uiwarp-no-ptrace: the test cannot trace its peer to a copy");
    return false;
  }
  return true;
}

// The path of a program built beside this one.
std::string beside(const char* name) {
  char self[4096] = {};
  REQUIRE(::readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  const std::string me(self);
  return me.substr(0, me.rfind('/') + 1) + name;
}

// A program beside this one, its stdin and stdout piped to the test.
struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;
  int in = -1;
  explicit Child(std::vector<std::string> args) {
    int o[2], i[2];
    REQUIRE(::pipe2(o, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(i, O_CLOEXEC) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(o[1], 1);
      ::dup2(i[0], 0);
      std::vector<char*> argv;
      for (std::string& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(o[1]);
    ::close(i[0]);
    out = ::fdopen(o[0], "r");
    in = i[1];
  }
  std::string line() {
    char buf[128] = {};
    if (!std::fgets(buf, sizeof buf, out)) return "(end of output)";
    return std::string(buf, std::strcspn(buf, "\n"));
  }
  ~Child() {
    if (::waitpid(pid, nullptr, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out) std::fclose(out);
    if (in >= 0) ::close(in);
  }
};

// Kills the peer when the test ends early: a peer left stopped would hold the teardown.
struct PeerGuard {
  pid_t pid;
  ~PeerGuard() {
    if (::waitpid(pid, nullptr, WNOHANG) != 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

struct Target {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* listen = nullptr;
  std::uint16_t port = 0;

  Target() {
    REQUIRE(ch != nullptr);
    REQUIRE(rdma_create_id(ch, &listen, nullptr, RDMA_PS_TCP) == 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(rdma_bind_addr(listen, reinterpret_cast<sockaddr*>(&a)) == 0);
    REQUIRE(rdma_listen(listen, 1) == 0);
    port = ntohs(rdma_get_src_port(listen));
  }
  ~Target() {
    rdma_destroy_id(listen);
    rdma_destroy_event_channel(ch);
  }
};

} // namespace

TEST_CASE("a same-host peer stopped in a copy holds back only the deregistration it copies into",
          "[datapath][samehost]") {
  if (!traceable_copies()) return;
  // Another connection of the same context (both its ends in this process), up before the peer.
  ConnectedPair other;
  Target t;
  const std::string writer = beside("uiwarp-datapath-writer");
  const pid_t peer = ::fork();
  REQUIRE(peer >= 0);
  if (peer == 0) {
    const std::string port = std::to_string(t.port);
    ::execl(writer.c_str(), writer.c_str(), port.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }

  rdma_cm_id* sid = nullptr;
  expect_event(t.ch, RDMA_CM_EVENT_CONNECT_REQUEST, &sid);
  Side target;
  PeerGuard guard{peer}; // before `target` goes
  target.opt.buf_size = 4 << 20;
  target.setup(sid);
  REQUIRE(peer::accept_offering(sid, {reinterpret_cast<std::uintptr_t>(target.buf.data()),
                                      target.mr->rkey,
                                      static_cast<std::uint32_t>(target.buf.size())}) == 0);
  rdma_cm_event* e = nullptr;
  REQUIRE(rdma_get_cm_event(target.id->channel, &e) == 0);
  REQUIRE(e->event == RDMA_CM_EVENT_ESTABLISHED);
  rdma_ack_cm_event(e);

  // The peer's Writes land: it takes the same-host path (not TCP) when one is copied in place.
  const auto until = Clock::now() + 20s;
  while (target.buf[0] != 'w' && Clock::now() < until)
    std::this_thread::sleep_for(1ms);
  REQUIRE(target.buf[0] == 'w');
  REQUIRE(stop_in_copy(peer));
  for (int i = 0; i < 1000 && proc_state(peer) != 'T'; ++i)
    std::this_thread::sleep_for(1ms);
  REQUIRE(proc_state(peer) == 'T');

  std::atomic<bool> deregistered{false};
  Clock::time_point dereg_done;
  ibv_mr* held = std::exchange(target.mr, nullptr);
  int dereg_ret = -1; // checked after the join: Catch's assertions are not thread-safe
  std::thread dereg([&] {
    dereg_ret = ibv_dereg_mr(held);
    dereg_done = Clock::now();
    deregistered = true;
  });
  std::this_thread::sleep_for(300ms);
  CHECK_FALSE(deregistered.load()); // the peer's copy is in flight: the region may not go yet

  // Everything else of the context goes on meanwhile. The bound is far below the stop (2 s):
  // a verb held back by the stopped peer would take that long.
  constexpr auto kQuick = 500ms;
  auto quick = [&](const char* what, auto&& op) {
    const auto t0 = Clock::now();
    op();
    const auto took = Clock::now() - t0;
    INFO(what << " took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
              << " ms while the peer was stopped");
    CHECK(took < kQuick);
  };
  std::vector<char> other_mem(1 << 16);
  quick("ibv_reg_mr + ibv_dereg_mr", [&] {
    ibv_mr* m = ibv_reg_mr(target.pd, other_mem.data(), other_mem.size(),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    REQUIRE(m != nullptr);
    CHECK(ibv_dereg_mr(m) == 0);
  });
  quick("ibv_create_cq + ibv_create_qp + destroy", [&] {
    ibv_cq* cq = ibv_create_cq(target.id->verbs, 8, nullptr, nullptr, 0);
    REQUIRE(cq != nullptr);
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(target.pd, &qa);
    REQUIRE(qp != nullptr);
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
  });
  quick("an RDMA Write and a Send on another connection", [&] {
    std::memset(other.client.at(0), 'o', 4096);
    REQUIRE(other.server.post_recv(1, 8192, 64) == 0);
    REQUIRE(other.client.post(IBV_WR_RDMA_WRITE, 2, 0, 4096,
                              reinterpret_cast<std::uintptr_t>(other.server.at(0)),
                              other.server.mr->rkey) == 0);
    REQUIRE(other.client.post(IBV_WR_SEND, 3, 0, 64) == 0);
    CHECK(poll_n(other.client.scq, 2).size() == 2);
    CHECK(poll_n(other.server.rcq, 1).size() == 1);
    CHECK(placed(other.server.at(0), other.client.at(0), 4096));
  });
  std::this_thread::sleep_for(1500ms); // the stop lasts 2 s; past a second the wait is logged
  CHECK_FALSE(deregistered.load());

  const auto cont = Clock::now();
  REQUIRE(::kill(peer, SIGCONT) == 0);
  dereg.join();
  CHECK(dereg_ret == 0);
  const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(dereg_done - cont);
  INFO("ibv_dereg_mr returned " << after.count() << " ms after SIGCONT");
  // As soon as the peer has run its unpin: it must be scheduled first, which under a loaded
  // machine or ThreadSanitizer takes a while; still far below the stop.
  CHECK(after < std::chrono::seconds(2));

  // No byte lands after it returned: the peer's next Write is refused and ends its connection.
  std::memset(target.buf.data(), 0, target.buf.size());
  int status = 0;
  const auto exit_by = Clock::now() + 20s;
  pid_t reaped = 0;
  while ((reaped = ::waitpid(peer, &status, WNOHANG)) == 0 && Clock::now() < exit_by)
    std::this_thread::sleep_for(5ms);
  REQUIRE(reaped == peer);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::size_t landed = 0;
  for (char c : target.buf)
    landed += c != 0;
  CHECK(landed == 0);
  // The refused Write ended the target's connection with a Terminate: its QP's
  // IBV_EVENT_QP_FATAL is this test's, taken before the QP goes (as a program must ack it).
  const int fd = target.id->verbs->async_fd;
  REQUIRE(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) == 0);
  ibv_async_event ev{};
  int fatal = 0;
  for (int i = 0; i < 2000 && fatal == 0; ++i) {
    if (ibv_get_async_event(target.id->verbs, &ev) != 0) {
      std::this_thread::sleep_for(1ms);
      continue;
    }
    fatal += ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == target.qp();
    ibv_ack_async_event(&ev);
  }
  CHECK(fatal == 1);
  REQUIRE(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0);
}

TEST_CASE("a target that execs while a same-host copy into it is on its way gets none of it",
          "[datapath][samehost]") {
  if (!traceable_copies()) return;
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer's mmap refuses the fixed address the target's two images share.
  WARN("under ThreadSanitizer: the exec'ing target cannot map its region at a fixed address");
  return;
#endif
  // Both ways a Write is copied: through /proc/PID/mem (up to 16 KiB) and process_vm_writev.
  for (const char* piece : {"8192", "1048576"}) {
    INFO("Writes of " << piece << " octets");
    const std::string port = std::to_string(20000 + (::getpid() + piece[0]) % 20000);
    Child target({beside("uiwarp-datapath-exec-target"), port});
    REQUIRE(target.line() == "LISTENING");
    Child writer({beside("uiwarp-datapath-writer"), port, piece});
    REQUIRE(target.line() == "WRITTEN");
    // The writer stopped where its next copy starts: it runs once the target has become
    // another program, with memory where the region was.
    REQUIRE(stop_in_copy(writer.pid, /*at_entry=*/true));
    REQUIRE(::write(target.in, "exec\n", 5) == 5);
    REQUIRE(target.line() == "MAPPED");
    REQUIRE(::kill(writer.pid, SIGCONT) == 0);
    CHECK(target.line() == "CLEAN");
    int status = 0;
    REQUIRE(::waitpid(writer.pid, &status, 0) == writer.pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0); // its Writes failed, and it saw that
  }
}

TEST_CASE("an initiator killed in the middle of a Send leaves the receive it filled flushed, "
          "never complete",
          "[datapath][samehost]") {
  // 16 MiB: more than the stream ring (1 MiB) and loopback's socket buffers hold, so the Send
  // is still on its way when its sender dies, on every path the suite runs this under.
  constexpr std::uint32_t kSend = 16 << 20;
  Target t;
  Child writer(
      {beside("uiwarp-datapath-writer"), std::to_string(t.port), std::to_string(kSend), "send"});
  rdma_cm_id* sid = nullptr;
  expect_event(t.ch, RDMA_CM_EVENT_CONNECT_REQUEST, &sid);
  Side target;
  target.opt.buf_size = kSend;
  target.setup(sid);
  REQUIRE(peer::accept_offering(sid, {reinterpret_cast<std::uintptr_t>(target.buf.data()),
                                      target.mr->rkey, kSend}) == 0);
  expect_event(target.id->channel, RDMA_CM_EVENT_ESTABLISHED);

  // No receive is posted yet: the Send's first FPDU waits for one (recv-wait-ms, 2 s), and the
  // rest of it waits in the ring or the socket behind that one.
  REQUIRE(writer.line() == "posted");
  const auto posted = Clock::now();
  std::this_thread::sleep_for(200ms);
  REQUIRE(::kill(writer.pid, SIGKILL) == 0);
  REQUIRE(::waitpid(writer.pid, nullptr, 0) == writer.pid);
  REQUIRE(target.post_recv(7, 0, kSend) == 0);
  const bool in_time = Clock::now() - posted < 1500ms;

  // What came of the Send is placed into the receive, which then ends with the connection:
  // flushed, never a success for a message whose last segment never came (RFC 5040 §8.2).
  std::vector<ibv_wc> got;
  const auto until = Clock::now() + 20s;
  while (got.empty() && Clock::now() < until) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(target.rcq, 1, &wc);
    REQUIRE(n >= 0);
    if (n == 1) got.push_back(wc);
  }
  REQUIRE(got.size() == 1);
  CHECK(got[0].wr_id == 7);
  INFO("status " << ibv_wc_status_str(got[0].status) << ", " << got[0].byte_len << " octets");
  CHECK(got[0].status == IBV_WC_WR_FLUSH_ERR);
  std::this_thread::sleep_for(50ms);
  ibv_wc extra{};
  CHECK(ibv_poll_cq(target.rcq, 1, &extra) == 0);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  REQUIRE(ibv_query_qp(target.qp(), &qa, IBV_QP_STATE, &qi) == 0);
  CHECK(qa.qp_state == IBV_QPS_ERR);
  // The first octets had reached this process: the receive was taken mid-message. (Not when
  // this thread came back after the receive wait ran out: the target ended the connection
  // then, with nothing placed.)
  if (in_time)
    CHECK(target.buf[0] == 'w');
  else
    WARN("the receive was posted after the receive wait had run out: nothing was placed");

  // The process goes on: another connection of its context carries a Send.
  ConnectedPair other;
  REQUIRE(other.server.post_recv(1, 0, 64) == 0);
  std::memset(other.client.at(0), 's', 64);
  REQUIRE(other.client.post(IBV_WR_SEND, 2, 0, 64) == 0);
  CHECK(poll_n(other.client.scq, 1).size() == 1);
  CHECK(poll_n(other.server.rcq, 1).size() == 1);
  CHECK(placed(other.server.at(0), other.client.at(0), 64));
}

TEST_CASE("Sends from two initiator processes into one SRQ: each receive taken once, each "
          "message whole",
          "[datapath][samehost]") {
  constexpr std::uint32_t kMsg = 4096;
  constexpr int kRecvs = 64;
  // Messages in all, and at least kEach from each sender: which sender's Send takes the next
  // receive is up to the scheduler (verbs promise no fairness), so kEach is small.
  constexpr int kWant = 1000;
  constexpr int kEach = 20;
  Target t;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_srq* srq = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<char> buf(std::size_t{kRecvs} * kMsg, 0);
  const auto post = [&](int i) {
    ibv_sge s{reinterpret_cast<std::uintptr_t>(buf.data()) + std::size_t(i) * kMsg, kMsg, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = static_cast<std::uint64_t>(i);
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq, &wr, &bad);
  };
  std::vector<std::unique_ptr<Child>> senders;
  std::vector<rdma_cm_id*> ids;
  for (int k = 0; k < 2; ++k) {
    senders.push_back(std::make_unique<Child>(std::vector<std::string>{
        beside("uiwarp-datapath-writer"), std::to_string(t.port), std::to_string(kMsg), "send"}));
    rdma_cm_id* sid = nullptr;
    expect_event(t.ch, RDMA_CM_EVENT_CONNECT_REQUEST, &sid);
    ids.push_back(sid);
    if (!pd) { // the first request's context is the listener's, and so every later one's
      pd = ibv_alloc_pd(sid->verbs);
      REQUIRE(pd != nullptr);
      cq = ibv_create_cq(sid->verbs, 2 * kRecvs, nullptr, nullptr, 0);
      REQUIRE(cq != nullptr);
      ibv_srq_init_attr sa{};
      sa.attr.max_wr = kRecvs;
      sa.attr.max_sge = 1;
      srq = ibv_create_srq(pd, &sa);
      REQUIRE(srq != nullptr);
      mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
      REQUIRE(mr != nullptr);
      for (int i = 0; i < kRecvs; ++i)
        REQUIRE(post(i) == 0);
    }
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.srq = srq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 4;
    qa.cap.max_send_sge = 1;
    REQUIRE(rdma_create_qp(sid, pd, &qa) == 0);
    // The sender reads only the length: it sends, it writes nothing.
    REQUIRE(peer::accept_offering(sid, {0, 0, kMsg}) == 0);
    expect_event(t.ch, RDMA_CM_EVENT_ESTABLISHED);
    REQUIRE(senders.back()->line() == "posted");
  }

  // Every completion names a receive not taken since it was posted and holds the whole
  // message. Receives go back to the SRQ, emptied, half of them at a time: a receive that two
  // Sends took would complete twice before that.
  std::vector<int> taken(kRecvs, 0), done;
  const std::string full(kMsg, 'w');
  std::map<std::uint32_t, int> per_qp;
  int total = 0, torn = 0, twice = 0;
  const auto until = Clock::now() + 60s;
  while ((total < kWant || per_qp.size() < 2 ||
          std::min(per_qp.begin()->second, per_qp.rbegin()->second) < kEach) &&
         Clock::now() < until) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    REQUIRE(n >= 0);
    for (int i = 0; i < n; ++i) {
      INFO("wr_id " << wc[i].wr_id << ": " << ibv_wc_status_str(wc[i].status));
      REQUIRE(wc[i].status == IBV_WC_SUCCESS);
      REQUIRE(wc[i].opcode == IBV_WC_RECV);
      REQUIRE(wc[i].wr_id < std::uint64_t{kRecvs});
      const int r = static_cast<int>(wc[i].wr_id);
      twice += taken[r]++ != 0;
      torn +=
          wc[i].byte_len != kMsg || !placed(buf.data() + std::size_t(r) * kMsg, full.data(), kMsg);
      done.push_back(r);
      ++per_qp[wc[i].qp_num];
      ++total;
    }
    if (done.size() >= kRecvs / 2) {
      for (int r : done) {
        std::memset(buf.data() + std::size_t(r) * kMsg, 0, kMsg);
        taken[r] = 0;
        REQUIRE(post(r) == 0);
      }
      done.clear();
    }
  }
  INFO(total << " messages, " << per_qp.size() << " senders");
  CHECK(torn == 0);
  CHECK(twice == 0);
  REQUIRE(per_qp.size() == 2);
  CHECK(per_qp.begin()->second >= kEach);
  CHECK(per_qp.rbegin()->second >= kEach);
  CHECK(total >= kWant);

  for (auto& s : senders) {
    ::kill(s->pid, SIGKILL);
    ::waitpid(s->pid, nullptr, 0);
  }
  // Each QP of the SRQ, its connection gone, says so once (IBV_EVENT_QP_LAST_WQE_REACHED); taken
  // here, before the QPs go, as a program must, and not left to the context's next user.
  const auto last_wqe = [](const Events& e, const ibv_qp* qp) {
    return std::count(e.begin(), e.end(), line(IBV_EVENT_QP_LAST_WQE_REACHED, qp));
  };
  const Events all = collect(ids[0]->verbs, [&](const Events& e) {
    return std::all_of(ids.begin(), ids.end(), [&](rdma_cm_id* id) { return last_wqe(e, id->qp); });
  });
  for (rdma_cm_id* id : ids)
    CHECK(last_wqe(all, id->qp) == 1);
  for (rdma_cm_id* id : ids) {
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
  ibv_destroy_srq(srq);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
}
