// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd: the uiwarp connection manager. Programs' rdma_cm emulation (the shim) asks it to
// listen, connect, accept and reject; it owns each TCP connection until the MPA exchange
// (RFC 5044 §7.1, RFC 6581) is done, under the local policy, and then hands the connected socket
// to the program with SCM_RIGHTS. One instance per user and network namespace (uiwarp-run starts
// it), or one system-wide (socket-activated by uiwarpd.socket, see uiwarpd(8)).
//
// This file: flags and configuration, the Unix socket (ours, or systemd's), signals.
#include "config.hpp"
#include "daemon.hpp"
#include "systemd_activation.hpp"
#include "uiwarp/daemon_start.hpp"
#include "uiwarp/fd.hpp"
#include "uiwarp/state.hpp"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace uiwarp::daemon {

namespace {

Daemon* g_daemon = nullptr;
void on_signal(int) {
  if (g_daemon) g_daemon->stop();
}

// Runs the daemon on listening socket `s`; unlinks `socket_path` (ours, not systemd's) at exit.
int serve(Config cfg, Fd s, bool system, const std::string& socket_path) {
  ::signal(SIGPIPE, SIG_IGN);
  if (system) cfg.idle_exit = std::chrono::seconds(0); // systemd's socket stays; so may it
  Daemon d(std::move(cfg), std::move(s), system ? "the system socket" : socket_path, system);
  g_daemon = &d;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  systemd_notify_ready(system ? "serving the system socket" : "serving " + socket_path);
  int rc = d.run();
  systemd_notify_stopping();
  g_daemon = nullptr;
  if (!socket_path.empty()) ::unlink(socket_path.c_str());
  return rc;
}

// A detached uiwarpd (the per-user one uiwarp-run starts) writes its log beside its socket
// instead of discarding it with the rest of daemon(3)'s /dev/null: why a connection failed or
// ended is there. One older generation is kept, so the file stays under about kLogMax.
void log_to_file(const std::string& path) {
  constexpr off_t kLogMax = 1 << 20;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && st.st_size > kLogMax)
    ::rename(path.c_str(), (path + ".1").c_str());
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return; // stays /dev/null
  ::dup2(fd, 2);      // dup2 clears close-on-exec on 2; uiwarpd execs nothing
  ::close(fd);
  std::setvbuf(stderr, nullptr, _IOLBF, 0);
  log("started, pid " + std::to_string(::getpid()));
}

// Our own socket (not systemd's): in the state directory unless --socket names one.
int serve_own_socket(Config cfg, std::string socket_path, bool daemonize) {
  std::string err;
  if (socket_path.empty()) {
    std::string dir = uiwarp::state_dir(&err);
    if (dir.empty()) {
      log(err);
      return 1;
    }
    socket_path = dir + "/uiwarpd.sock";
  }
  // One daemon per socket: a second one exits at once. One whose socket is already gone is
  // exiting (its idle exit): the lock is free a moment later.
  Fd lock(::open((socket_path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  for (int i = 0; lock && ::flock(lock.get(), LOCK_EX | LOCK_NB); ++i) {
    if (i == 200 || uiwarp::daemon_alive(socket_path)) {
      log("another uiwarpd serves " + socket_path);
      return 0;
    }
    ::usleep(10000);
  }
  if (!lock) {
    log("cannot open " + socket_path + ".lock: " + std::strerror(errno));
    return 1;
  }
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof sun.sun_path) {
    log("socket path too long: " + socket_path);
    return 1;
  }
  std::memcpy(sun.sun_path, socket_path.c_str(), socket_path.size());
  ::unlink(socket_path.c_str());
  Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  mode_t old = ::umask(0077);
  bool bound = s && ::bind(s.get(), reinterpret_cast<sockaddr*>(&sun), sizeof sun) == 0;
  ::umask(old);
  if (!bound || ::listen(s.get(), 64)) {
    log("cannot listen on " + socket_path + ": " + std::strerror(errno));
    return 1;
  }
  if (daemonize && ::daemon(0, 0)) {
    log(std::string("daemon: ") + std::strerror(errno));
    return 1;
  }
  if (daemonize) log_to_file(socket_path.substr(0, socket_path.rfind('/') + 1) + "uiwarpd.log");
  return serve(std::move(cfg), std::move(s), false, socket_path);
}

} // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string config_file = kDefaultConfigFile;
  std::string socket_path;
  bool daemonize = false;
  CLI::App app{"uiwarpd: the uiwarp iWARP connection manager"};
  app.add_option("-c,--config", config_file, "configuration file")->capture_default_str();
  app.add_option("-s,--socket", socket_path,
                 "Unix socket (default: in the uiwarp state directory)");
  app.add_flag("-d,--daemon", daemonize, "detach and run in the background");
  app.set_version_flag("-V,--version", std::string("uiwarpd ") + UIWARP_VERSION);
  add_policy_options(app, cfg);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e); // --help, --version: 0
    return code == 0 ? 0 : 2;     // a wrong command line, as for a bad configuration
  }
  std::string err;
  if (!load_config(config_file, cfg, app, &err)) {
    log(err);
    return 2;
  }
  // Started by systemd (uiwarpd.socket): its socket; no lock (systemd runs one), no daemon().
  if (int fd = systemd_listen_socket(&err); fd != -1) {
    if (fd == -2) {
      log(err);
      return 1;
    }
    return serve(std::move(cfg), Fd(fd), true, "");
  }
  return serve_own_socket(std::move(cfg), std::move(socket_path), daemonize);
}

} // namespace uiwarp::daemon

int main(int argc, char** argv) { return uiwarp::daemon::main(argc, argv); }
