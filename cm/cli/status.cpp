// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp status     uiwarpd's policy, counters, listeners, connections and links
// uiwarp conn show  the connections only: handed over (with their TCP state) and starting
// uiwarp conn show --closed  the last 64 that ended, newest first, each with why
//
// Asks the uiwarpd that uiwarp-run would use here (this user's and network namespace's, or the
// system-wide one) over its socket. The system daemon shows a user only their own connections.
#include "commands.hpp"
#include "uiwarp/daemon_proto.hpp"
#include "uiwarp/daemon_socket.hpp"
#include "uiwarp/state.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
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

int query(const std::string& flag, const Output& out, bool connections_only, bool closed = false) {
  std::string err;
  std::string path = daemon_socket(flag, &err);
  if (path.empty()) return error(err);
  int s = proto::connect_daemon(path, proto::Role::Cli, &err);
  if (s < 0)
    return error(err + (err.rfind("cannot reach", 0) == 0
                            ? "; uiwarpd is not running for this user and network namespace "
                              "(uiwarp-run starts it)"
                            : ""));
  if (int e = proto::send(s, proto::Status{connections_only, closed, out.json})) {
    ::close(s);
    return error(std::string("cannot ask uiwarpd: ") + std::strerror(e));
  }
  std::string doc; // with -j: the pieces of one JSON document
  for (;;) {
    auto p = proto::recv(s);
    if (!p) {
      ::close(s);
      return error("uiwarpd closed the connection before the end of its report");
    }
    if (p->fd >= 0) ::close(p->fd);
    if (std::holds_alternative<proto::StatusEnd>(p->msg)) break;
    if (auto* line = std::get_if<proto::StatusLine>(&p->msg)) {
      if (out.json)
        doc += line->text;
      else
        std::printf("%s\n", line->text.c_str());
    }
  }
  ::close(s);
  if (out.json) {
    auto j = nlohmann::json::parse(doc, nullptr, false);
    if (j.is_discarded()) return error("uiwarpd's JSON report does not parse");
    std::printf("%s\n", j.dump(out.pretty ? 4 : -1).c_str());
  }
  return 0;
}

} // namespace

void add_status_commands(CLI::App& app, Action& run, const Output& out) {
  static std::string socket; // CLI11 keeps pointers to the option's storage
  auto* st =
      app.add_subcommand("status", "uiwarpd's policy, counters, listeners, connections and links");
  st->add_option("--socket", socket,
                 "uiwarpd's socket (default: this user's and network namespace's)");
  st->callback([&run, &out] { run = [&out] { return query(socket, out, false); }; });
  auto* conn = app.add_subcommand("conn", "connections");
  conn->require_subcommand(0, 1);
  // A bare `uiwarp conn` shows, as `rdma resource` does.
  conn->callback([&run, &out, conn] {
    if (conn->get_subcommands().empty()) run = [&out] { return query(socket, out, true); };
  });
  auto* show =
      conn->add_subcommand("show", "connections handed to applications, and those starting");
  show->add_option("--socket", socket,
                   "uiwarpd's socket (default: this user's and network namespace's)");
  static bool closed = false;
  show->add_flag("--closed", closed,
                 "the connections that ended (the last 64, newest first), each with why");
  show->callback([&run, &out] { run = [&out] { return query(socket, out, true, closed); }; });
}

} // namespace uiwarp::cli
