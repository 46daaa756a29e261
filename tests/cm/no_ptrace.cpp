// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-no-ptrace PROGRAM [ARG...]: runs PROGRAM under a seccomp filter that refuses, with
// EPERM, the system calls by which one process reaches another's memory through the ptrace
// access check: process_vm_readv, process_vm_writev, pidfd_getfd and ptrace. It stands in for
// the containers and hosts where the same-host path must work without them: stricter seccomp
// profiles than Docker's default, and Yama's ptrace_scope 1 to 3 (Ubuntu, GitHub Actions'
// runners), which refuses the same calls between processes that are not parent and child.
// (A filter cannot refuse an open(2) of another's /proc/PID/mem by its path, as Yama does; the
// same-host path asks for pidfd_getfd first, so it meets the refusal all the same.)
// libseccomp writes the filter for the running architecture.
#include <cerrno>
#include <cstdio>
#include <initializer_list>
#include <seccomp.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PROGRAM [ARG...]\n", argv[0]);
    return 2;
  }
  scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
  if (!f) return 2;
  for (const char* name : {"process_vm_readv", "process_vm_writev", "pidfd_getfd", "ptrace"}) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR || seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), nr, 0) != 0) {
      std::fprintf(stderr, "uiwarp-no-ptrace: cannot filter %s\n", name);
      return 2;
    }
  }
  // No new privileges: what an unprivileged process needs to load a filter (seccomp(2)).
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || seccomp_load(f) != 0) {
    std::perror("uiwarp-no-ptrace: seccomp");
    return 2;
  }
  seccomp_release(f);
  execvp(argv[1], argv + 1);
  std::perror(argv[1]);
  return 127;
}
