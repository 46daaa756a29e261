// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Starting a per-user uiwarpd: see daemon_start.hpp.
#include "uiwarp/daemon_start.hpp"

#include "uiwarp/env.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace uiwarp {

bool daemon_alive(const std::string& path) {
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  std::snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path.c_str());
  bool ok = s >= 0 && ::connect(s, reinterpret_cast<sockaddr*>(&sun), sizeof sun) == 0;
  if (s >= 0) ::syscall(SYS_close, s); // inside the shim, close() is its own interposer
  return ok;
}

bool ensure_daemon(const std::string& uiwarpd, const std::string& sock, std::string* err) {
  if (daemon_alive(sock)) return true;
  // Everything the child needs is made before fork(): in a threaded program only
  // async-signal-safe calls may follow it.
  std::vector<std::string> args{uiwarpd, "--socket", sock, "--daemon"};
  if (const char* config = Env::get().nonempty(EnvVar::DaemonConfig)) {
    args.emplace_back("--config");
    args.emplace_back(config);
  }
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) envp.push_back(*e);
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    *err = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    // Nor are its signal mask and dispositions, which execve keeps: started from a uiwarp
    // thread (relisten), whose mask blocks everything (thread.hpp), uiwarpd would never see
    // SIGTERM. A clean start, as posix_spawn's SETSIGMASK and SETSIGDEF give.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig)
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // The program's descriptors (its connections among them) are not the daemon's to hold.
    if (::syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
      for (int fd = 3; fd < 4096; ++fd)
        ::syscall(SYS_close, fd);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  int status = 0;
  // --daemon: the child forks the daemon and exits once it serves (ECHILD when the program
  // reaps its children itself; the socket below says the same).
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    *err = "cannot start " + uiwarpd;
    return false;
  }
  for (int i = 0; i < 300; ++i) {
    if (daemon_alive(sock)) return true;
    ::usleep(10000);
  }
  *err = "uiwarpd (" + uiwarpd + ") did not start serving " + sock;
  return false;
}

} // namespace uiwarp
