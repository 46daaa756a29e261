// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The manners of a library inside someone else's process, checked the way programs that
// uiwarp did not write behave (under uiwarp-run, through stock librdmacm and libibverbs):
//  - a process-directed signal the program blocks in its own threads and reads with signalfd
//    (tgtd does so with SIGUSR2) waits for it: no uiwarp thread takes it;
//  - every descriptor uiwarp opens is close-on-exec, so fork and exec of another program
//    hands it none;
//  - daemon(3) before the first verb, and RLIMIT_NOFILE at 64 (a clear EMFILE when the
//    program has used them all, and verbs that work again once it closes some).
#include "connected_pair.hpp"

#include <climits>
#include <csignal>
#include <cstdio>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace dp;

namespace {

std::set<int> open_fds() {
  std::set<int> fds;
  DIR* d = opendir("/proc/self/fd");
  REQUIRE(d != nullptr);
  const int own = dirfd(d);
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.' && std::atoi(e->d_name) != own) fds.insert(std::atoi(e->d_name));
  closedir(d);
  return fds;
}

std::string fd_target(int fd) {
  char path[64], buf[256];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "?";
}

// A 4 KiB RDMA Write from the client into the server's buffer, checked: 0, or what failed.
std::string write_roundtrip(ConnectedPair& p) {
  for (int i = 0; i < 4096; ++i)
    *p.client.at(static_cast<std::size_t>(i)) = static_cast<char>(i * 7 + 1);
  if (p.client.post(IBV_WR_RDMA_WRITE, 1, 0, 4096, reinterpret_cast<std::uintptr_t>(p.server.at(0)),
                    p.server.mr->rkey))
    return "post";
  if (poll_n(p.client.scq, 1).size() != 1) return "completion";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!placed(p.server.at(0), p.client.at(0), 4096))
    if (std::chrono::steady_clock::now() > until) return "placement";
  return "";
}

int g_report_fd = -1; // in a child of in_child: where its result goes

// Runs `body` in a child process (Catch's assertions there end it with status 1): its exit
// status, 0 when it returned "" and 2 with the text on `*why` otherwise.
template <class F> int in_child(F body, std::string* why) {
  int pfd[2];
  REQUIRE(pipe2(pfd, O_CLOEXEC) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(pfd[0]);
    g_report_fd = pfd[1];
    alarm(60);
    std::string r;
    try {
      r = body();
    } catch (...) {
      r = "an assertion failed in the child";
    }
    [[maybe_unused]] ssize_t n = write(pfd[1], r.data(), r.size());
    _exit(r.empty() ? 0 : 2);
  }
  close(pfd[1]);
  char buf[512];
  ssize_t n;
  while ((n = read(pfd[0], buf, sizeof buf)) > 0)
    why->append(buf, static_cast<std::size_t>(n));
  close(pfd[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Whether `sig` is blocked in thread `tid` of this process (/proc's SigBlk, a hex mask).
bool blocked_in(const std::string& tid, int sig) {
  std::ifstream f("/proc/self/task/" + tid + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("SigBlk:", 0) == 0) {
      const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
      return (mask >> (sig - 1)) & 1;
    }
  return false;
}

} // namespace

TEST_CASE("a signal the program blocks and reads with signalfd waits for it: no uiwarp thread "
          "takes it",
          "[manners][signals]") {
  // tgtd's way: its threads block SIGUSR2 and a signalfd reads it. uiwarp's threads (the
  // provider's progress thread, the shim's uiwarpd reader) exist once a connection is up;
  // the test thread blocks the signal only then, as tgtd's main loop does after its setup.
  ConnectedPair p;
  REQUIRE(write_roundtrip(p).empty());
  sigset_t usr2, old;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &usr2, &old) == 0);
  const int sfd = signalfd(-1, &usr2, SFD_CLOEXEC);
  REQUIRE(sfd >= 0);
  REQUIRE(kill(getpid(), SIGUSR2) == 0); // unblocked in a uiwarp thread, this kills us
  pollfd pf{sfd, POLLIN, 0};
  CHECK(poll(&pf, 1, 5000) == 1);
  signalfd_siginfo si{};
  CHECK(read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si));
  CHECK(si.ssi_signo == static_cast<std::uint32_t>(SIGUSR2));
  close(sfd);
  // And every thread but this one blocks the asynchronous signals a program may route so.
  const std::string self = std::to_string(gettid());
  DIR* d = opendir("/proc/self/task");
  REQUIRE(d != nullptr);
  int others = 0;
  while (dirent* e = readdir(d)) {
    const std::string tid = e->d_name;
    if (tid[0] == '.' || tid == self) continue;
    ++others;
    for (int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, SIGALRM, SIGCHLD, SIGRTMIN}) {
      INFO("thread " << tid << ", signal " << sig);
      CHECK(blocked_in(tid, sig));
    }
  }
  closedir(d);
  CHECK(others >= 2);                // the progress thread and the uiwarpd reader at least
  CHECK(write_roundtrip(p).empty()); // and the connection is unharmed
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

TEST_CASE("every descriptor uiwarp opens is close-on-exec; an exec'd program inherits none",
          "[manners][fds]") {
  const std::set<int> before = open_fds();
  SideOptions with_channel;
  with_channel.comp_channel = true;
  ConnectedPair p(with_channel, with_channel);
  REQUIRE(write_roundtrip(p).empty());
  int checked = 0;
  for (int fd : open_fds()) {
    if (before.count(fd)) continue;
    ++checked;
    INFO("fd " << fd << " -> " << fd_target(fd));
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  }
  CHECK(checked >= 6); // channels, devices, comp channels, sockets, epoll, eventfd...

  // fork, then exec a program that is not an RDMA one: ls lists the descriptors it has
  // (the shell execs it, so /proc/$$ is ls; the directory it reads is the one above 2 it
  // opened itself, so at most one descriptor above stdio is its own).
  int out[2];
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(out[1], 1); // dup2 clears close-on-exec on the new descriptor
    execl("/bin/sh", "sh", "-c", "exec ls /proc/$$/fd", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string listed;
  char buf[256];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0)
    listed.append(buf, static_cast<std::size_t>(n));
  close(out[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::set<int> inherited;
  std::istringstream words(listed);
  for (int fd; words >> fd;)
    inherited.insert(fd);
  INFO("the exec'd shell had: " << listed);
  int above_stdio = 0;
  for (int fd : inherited)
    if (fd > 2 && !before.count(fd)) ++above_stdio; // stdio and what the test runner had
  CHECK(above_stdio <= 1);                          // ls's own directory
  // The parent's connection carries on after the child is gone.
  CHECK(write_roundtrip(p).empty());
}

TEST_CASE("daemon(3) before the first verb: the daemonised process connects and writes",
          "[manners][daemon]") {
  // The grandchild that daemon() leaves reports through a pipe the child inherits.
  int pfd[2];
  REQUIRE(pipe(pfd) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(pfd[0]);
    if (daemon(1, 0)) _exit(3); // the parent of daemon()'s fork returns 0 from it
    alarm(60);
    std::string r;
    try {
      ConnectedPair p;
      r = write_roundtrip(p);
    } catch (...) {
      r = "an assertion failed in the daemon";
    }
    if (r.empty()) r = "ok";
    [[maybe_unused]] ssize_t n = write(pfd[1], r.data(), r.size());
    _exit(0);
  }
  close(pfd[1]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid); // daemon()'s first parent exits at once
  std::string got;
  char buf[256];
  ssize_t n;
  while ((n = read(pfd[0], buf, sizeof buf)) > 0) // until the daemon closes its end
    got.append(buf, static_cast<std::size_t>(n));
  close(pfd[0]);
  CHECK(got == "ok");
}

TEST_CASE("RLIMIT_NOFILE at 64: verbs work, exhaustion is a clear EMFILE, and they work again",
          "[manners][rlimit]") {
  std::string why;
  const int rc = in_child(
      [] {
        rlimit lim{64, 64};
        if (setrlimit(RLIMIT_NOFILE, &lim)) return std::string("setrlimit");
        {
          ConnectedPair p;
          if (std::string r = write_roundtrip(p); !r.empty()) return "at 64: " + r;
        }
        // Use every descriptor left, then ask for a channel: EMFILE, no crash.
        std::vector<int> hog;
        for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
          hog.push_back(fd);
        errno = 0;
        rdma_event_channel* ch = rdma_create_event_channel();
        const int err = errno;
        if (ch) return std::string("a channel with no descriptor left");
        if (err != EMFILE) return "exhausted: errno " + std::to_string(err) + ", not EMFILE";
        for (int fd : hog)
          close(fd);
        ConnectedPair p;
        if (std::string r = write_roundtrip(p); !r.empty()) return "after EMFILE: " + r;
        return std::string();
      },
      &why);
  INFO(why);
  CHECK(rc == 0);
}

TEST_CASE("a program that closes every descriptor it does not know: a clear error, then it works "
          "again",
          "[manners][close-all]") {
  // Daemons do this (close_range(3, ~0U), or a loop to sysconf(_SC_OPEN_MAX)), or dup2 over
  // descriptors, sometimes after a library opened its own. The next call on an old channel
  // fails with EBADF, as with the kernel's; uiwarp neither crashes nor reads, writes or
  // closes what the program opened in their place; a new channel listens and a new device
  // context works. (librdmacm keeps the device context it opened first for the whole process,
  // so, as with the kernel's rdma_cm, its QPs cannot be made again after that context's
  // descriptor is gone.)
  const bool dup_over = GENERATE(false, true);
  INFO((dup_over ? "dup2 over each descriptor" : "close_range"));
  std::string why;
  const int rc = in_child(
      [dup_over] {
        rdma_event_channel* ch = rdma_create_event_channel();
        if (!ch) return std::string("first channel");
        rdma_cm_id* id = nullptr;
        if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) return std::string("first id");
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a)) || rdma_listen(id, 4))
          return std::string("first listen");
        int n = 0;
        ibv_device** devs = ibv_get_device_list(&n);
        if (!devs || n < 1) return std::string("device list");
        ibv_context* ctx = ibv_open_device(devs[0]);
        if (!ctx) return std::string("first open");
        if (!ibv_alloc_pd(ctx)) return std::string("first PD");
        const std::set<int> had = open_fds();

        // Every descriptor but the one that reports to the test (in_child's pipe) goes.
        const auto keep = static_cast<unsigned>(g_report_fd);
        if ((keep > 3 && ::syscall(SYS_close_range, 3U, keep - 1, 0U)) ||
            ::syscall(SYS_close_range, keep + 1, ~0U, 0U))
          return std::string("close_range");
        errno = 0;
        rdma_cm_id* old_id = nullptr;
        if (rdma_create_id(ch, &old_id, nullptr, RDMA_PS_TCP) == 0 || errno != EBADF)
          return "an id on the closed channel: errno " + std::to_string(errno) + ", not EBADF";
        // A verb that needs no descriptor still works on the old context (the kernel's would
        // say EBADF): neither is a crash.
        if (ibv_pd* pd = ibv_alloc_pd(ctx)) ibv_dealloc_pd(pd);

        // The program's own descriptors take the numbers uiwarp had: pipes, so that a write
        // into one shows. dup_over puts one on each of those numbers at once.
        std::vector<int> mine;
        int pp[2];
        if (pipe2(pp, O_CLOEXEC | O_NONBLOCK)) return std::string("pipe");
        mine.insert(mine.end(), {pp[0], pp[1]});
        if (dup_over) {
          for (int fd : had)
            if (fd > 2 && fd != g_report_fd && fd != pp[0] && fd != pp[1] &&
                dup3(pp[1], fd, O_CLOEXEC) == fd)
              mine.push_back(fd);
        } else {
          for (int i = 0; i < 5; ++i) {
            if (pipe2(pp, O_CLOEXEC | O_NONBLOCK)) return std::string("pipe");
            mine.insert(mine.end(), {pp[0], pp[1]});
          }
        }

        // New objects work: a channel that listens (uiwarp connects to uiwarpd again), and a
        // device context with a PD.
        rdma_event_channel* ch2 = rdma_create_event_channel();
        rdma_cm_id* id2 = nullptr;
        if (!ch2 || rdma_create_id(ch2, &id2, nullptr, RDMA_PS_TCP))
          return std::string("a new channel and id");
        a.sin_port = 0;
        if (rdma_bind_addr(id2, reinterpret_cast<sockaddr*>(&a)) || rdma_listen(id2, 4))
          return "listen on a new channel: errno " + std::to_string(errno);
        ibv_context* ctx2 = ibv_open_device(devs[0]);
        if (!ctx2 || !ibv_alloc_pd(ctx2)) return std::string("a new device context and PD");
        std::this_thread::sleep_for(std::chrono::milliseconds(700)); // the old reader looks

        // Nothing was written into, read from, or closed under the program's descriptors.
        char c;
        if (read(mine[0], &c, 1) != -1 || errno != EAGAIN)
          return std::string("uiwarp wrote into the program's pipe");
        for (int fd : mine)
          if (fcntl(fd, F_GETFD) < 0)
            return "uiwarp closed the program's descriptor " + std::to_string(fd);
        // Writable ends dup'd over uiwarp's numbers: had uiwarp read its socket, the pipe's
        // other end would be empty of what was never written; had it written, mine[0] shows.
        return std::string();
      },
      &why);
  INFO(why);
  CHECK(rc == 0);
}
