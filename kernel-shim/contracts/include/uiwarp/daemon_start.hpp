// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Starting a per-user uiwarpd: uiwarp-run does it before it runs a program, and the shim inside
// that program does it again when the daemon went away while the program listens (its listeners
// are registered anew with the new daemon). uiwarpd exits at once when another instance holds
// its lock, so two starters racing leave one daemon.
#pragma once

#include <string>

namespace uiwarp {

// Whether something accepts connections on uiwarpd socket `path`.
bool daemon_alive(const std::string& path);

// Starts `uiwarpd` serving `sock` unless a daemon serves it already, and waits (up to 3 s) until
// it answers. The daemon reads $UIWARPD_CONFIG instead of /etc/uiwarp/uiwarpd.conf when that is
// set, and runs without LD_PRELOAD (it is started from inside programs that preload the shim).
// False and *err on failure.
bool ensure_daemon(const std::string& uiwarpd, const std::string& sock, std::string* err);

} // namespace uiwarp
