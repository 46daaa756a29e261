// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Which uiwarpd uiwarp-run hands to the program (UIWARPD_SOCKET), in this order:
//  1. $UIWARPD_SOCKET, if the user set it, or an outer uiwarp-run set it in this same network
//     namespace (it also sets UIWARPD_SOCKET_NETNS; one from another namespace is ignored);
//  2. the system-wide daemon (uiwarpd.socket, default /run/uiwarp/uiwarpd.sock), if that is a
//     socket that accepts connections and the file uiwarpd.netns beside it (written by
//     uiwarpd.socket's ExecStartPost) names this network namespace's inode: the daemon makes
//     TCP connections in its own namespace, so it is only right for callers in that one.
//     $UIWARP_SYSTEM_SOCKET names another path, or, set but empty, turns this off; uiwarp-run
//     run from the build tree skips it unless the variable is set;
//  3. the per-user daemon's socket in the state dir, started on demand.
#pragma once

#include <string>

namespace uiwarp {

struct DaemonSocket {
  std::string path;
  bool start_if_needed; // not for the system daemon: systemd starts it
  std::string why;      // for UIWARP_DEBUG
};

DaemonSocket choose_daemon_socket(const std::string& state_dir, bool from_build_tree);

} // namespace uiwarp
