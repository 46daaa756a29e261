// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The one way uiwarp starts a thread inside a program it did not write. rdma-core's providers
// start none, so programs route process-directed signals as if the library had no threads:
// they block a signal in every thread of theirs and read it with signalfd(2) or sigwait(3)
// (tgtd does so with SIGUSR2). The kernel delivers such a signal to any thread that does not
// block it, so a library thread that inherited a mask without it takes the signal, and its
// default action kills the process. A thread started here blocks every asynchronous signal
// for its whole life, from its first instruction (the mask is set before the thread exists,
// as POSIX has a new thread inherit its creator's). Synchronous signals (a fault the thread
// itself causes) stay unblocked: blocking them would make such a fault kill the process
// without a handler's say (POSIX leaves it undefined).
#pragma once

#include <pthread.h>
#include <signal.h>
#include <thread>
#include <utility>

namespace uiwarp {

// The mask a uiwarp thread runs with: everything but SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP
// and SIGSYS.
sigset_t library_thread_mask();

// std::thread(f, args...) started with library_thread_mask(); the caller's mask is unchanged.
template <class F, class... Args> std::thread start_thread(F&& f, Args&&... args) {
  const sigset_t all = library_thread_mask();
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &all, &old);
  struct Restore {
    const sigset_t& old;
    ~Restore() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
  } restore{old};
  return std::thread(std::forward<F>(f), std::forward<Args>(args)...);
}

} // namespace uiwarp
