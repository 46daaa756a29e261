// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The signal mask of uiwarp's threads (thread.hpp).
#include "uiwarp/thread.hpp"

namespace uiwarp {

sigset_t library_thread_mask() {
  sigset_t s;
  sigfillset(&s);
  // A fault raised by the thread's own instruction is delivered to it whatever its mask;
  // blocked, the kernel kills the process instead of running the program's handler.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS})
    sigdelset(&s, sig);
  return s;
}

} // namespace uiwarp
