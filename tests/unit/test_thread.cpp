// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp's threads (kernel-shim/contracts/include/uiwarp/thread.hpp) block every asynchronous
// signal from their first instruction, whatever the mask of the thread that started them, and
// leave that thread's mask as it was. tests/integration/signal_mask.cpp checks the threads of
// a real program (the provider's progress thread, the shim's uiwarpd reader and relisten).
#include "catch_compat.hpp"
#include "uiwarp/thread.hpp"

#include <csignal>

namespace {
sigset_t current_mask() {
  sigset_t s;
  pthread_sigmask(SIG_BLOCK, nullptr, &s);
  return s;
}
} // namespace

TEST_CASE("start_thread: the new thread blocks every asynchronous signal", "[thread]") {
  const sigset_t before = current_mask(); // whatever the test runner left
  sigset_t in_thread;
  uiwarp::start_thread([&] { in_thread = current_mask(); }).join();
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGCHLD,
                  SIGCONT, SIGTSTP, SIGURG, SIGIO, SIGWINCH, SIGPROF, SIGRTMIN + 2, SIGRTMAX}) {
    INFO("signal " << sig);
    CHECK(sigismember(&in_thread, sig) == 1);
  }
  // Faults of the thread's own making go to the program's handlers.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) {
    INFO("signal " << sig);
    CHECK(sigismember(&in_thread, sig) == 0);
  }
  // The caller's mask is unchanged.
  const sigset_t after = current_mask();
  for (int sig = 1; sig < SIGRTMIN; ++sig)
    CHECK(sigismember(&after, sig) == sigismember(&before, sig));
}

TEST_CASE("start_thread: a caller that unblocked everything still starts a blocked thread",
          "[thread]") {
  sigset_t none, saved;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, &saved);
  sigset_t in_thread;
  int arg_seen = 0;
  uiwarp::start_thread([&](int v) { in_thread = current_mask(), arg_seen = v; }, 7).join();
  const sigset_t after = current_mask();
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  CHECK(arg_seen == 7);
  CHECK(sigismember(&in_thread, SIGUSR2) == 1);
  CHECK(sigismember(&in_thread, SIGTERM) == 1);
  CHECK(sigismember(&after, SIGUSR2) == 0);
}
