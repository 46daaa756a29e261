// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp status     uiwarpd's policy, counters, listeners, connections and links
// uiwarp conn show  the connections only: handed over (with their TCP state) and starting
//
// Asks the uiwarpd that uiwarp-run would use here (this user's and network namespace's, or the
// system-wide one) over its socket. The system daemon shows a user only their own connections.
#include "cm_proto.hpp"
#include "commands.hpp"
#include "daemon_socket.hpp"
#include "uiwarp/state.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace uiwarp::cli {

namespace {

int error(const std::string& msg) {
  std::fprintf(stderr, "uiwarp: error: %s\n", msg.c_str());
  return 1;
}

// The daemon uiwarp-run would hand a program started here (daemon_socket.hpp).
std::string daemon_socket(const std::string& flag, std::string* err) {
  if (!flag.empty()) return flag;
  std::string dir = state_dir(err);
  return dir.empty() ? "" : choose_daemon_socket(dir, false).path;
}

int query(const std::string& flag, bool connections_only) {
  std::string err;
  std::string path = daemon_socket(flag, &err);
  if (path.empty()) return error(err);
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  if (path.size() >= sizeof sun.sun_path) return error("socket path too long: " + path);
  std::memcpy(sun.sun_path, path.c_str(), path.size());
  if (s < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&sun), sizeof sun)) {
    std::string why = std::strerror(errno);
    if (s >= 0) ::close(s);
    return error("uiwarpd is not running for this user and network namespace (" + path + ": " +
                 why + "); uiwarp-run starts it");
  }
  cm::Msg m;
  m.type = cm::MsgType::Status;
  m.id = connections_only ? 1 : 0;
  if (int e = cm::send_msg(s, m)) {
    ::close(s);
    return error(std::string("cannot ask uiwarpd: ") + std::strerror(e));
  }
  for (;;) {
    auto r = cm::recv_msg(s, nullptr);
    if (!r) {
      ::close(s);
      return error("uiwarpd closed the connection before the end of its report");
    }
    if (r->type == cm::MsgType::StatusEnd) break;
    if (r->type == cm::MsgType::StatusLine) std::printf("%s\n", r->reason.c_str());
  }
  ::close(s);
  return 0;
}

} // namespace

void add_status_commands(CLI::App& app, Action& run) {
  static std::string socket; // CLI11 keeps pointers to the option's storage
  auto* st =
      app.add_subcommand("status", "uiwarpd's policy, counters, listeners, connections and links");
  st->add_option("--socket", socket,
                 "uiwarpd's socket (default: this user's and network namespace's)");
  st->callback([&run] { run = [] { return query(socket, false); }; });
  auto* conn = app.add_subcommand("conn", "connections");
  conn->require_subcommand(1);
  auto* show =
      conn->add_subcommand("show", "connections handed to applications, and those starting");
  show->add_option("--socket", socket,
                   "uiwarpd's socket (default: this user's and network namespace's)");
  show->callback([&run] { run = [] { return query(socket, true); }; });
}

} // namespace uiwarp::cli
