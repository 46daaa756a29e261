// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "uiwarp/daemon_socket.hpp"

#include "uiwarp/daemon_start.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/netdev.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace uiwarp {

namespace {

// The system daemon's socket if it serves this network namespace; else "" and *why.
std::string system_socket(bool from_build_tree, std::string* why) {
  const char* env = Env::get().value(EnvVar::SystemSocket);
  if (env && !*env) return *why = "UIWARP_SYSTEM_SOCKET is empty", "";
  // A developer's build tree uses its own daemon, not an installed one.
  if (!env && from_build_tree) return *why = "build tree", "";
  const std::string path = env ? env : UIWARP_SYSTEM_SOCKET;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
    return *why = "no system socket " + path, "";
  const std::string marker = path.substr(0, path.rfind('/') + 1) + "uiwarpd.netns";
  unsigned long long ino = 0;
  std::ifstream in(marker);
  if (!(in >> ino) || ino != current_netns_inode())
    return *why = marker + " does not name this network namespace", "";
  if (!daemon_alive(path)) return *why = path + " does not accept connections", "";
  return path;
}

} // namespace

DaemonSocket choose_daemon_socket(const std::string& state_dir, bool from_build_tree) {
  const std::string netns = std::to_string(current_netns_inode());
  const char* env = Env::get().nonempty(EnvVar::DaemonSocket);
  const char* env_ns = Env::get().value(EnvVar::DaemonSocketNetns);
  if (env && (!env_ns || netns == env_ns)) return {env, true, "UIWARPD_SOCKET"};
  std::string why;
  if (std::string sys = system_socket(from_build_tree, &why); !sys.empty())
    return {sys, false, "the system daemon (uiwarpd.socket)"};
  return {state_dir + "/uiwarpd.sock", true, "per-user daemon (" + why + ")"};
}

} // namespace uiwarp
