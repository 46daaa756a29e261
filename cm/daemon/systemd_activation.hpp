// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd as a system service: the listening socket systemd passes (uiwarpd.socket, socket
// activation), readiness for Type=notify, and the network-namespace check that keeps a client
// from another namespace off a daemon whose TCP sockets live elsewhere. Built on libsystemd when
// it is found (UIWARP_HAVE_SYSTEMD); without it uiwarpd only runs on its own socket.
#pragma once

#include <string>

namespace uiwarp::daemon {

// The one SOCK_SEQPACKET Unix listening socket systemd passed (LISTEN_FDS), made non-blocking
// and close-on-exec; -1 if uiwarpd was not socket-activated; -2 with *err if it was but the
// sockets are not what uiwarpd.socket declares.
int systemd_listen_socket(std::string* err);

// sd_notify("READY=1") / ("STOPPING=1"); nothing when not run by systemd.
void systemd_notify_ready(const std::string& status);
void systemd_notify_stopping();

// Whether Unix socket `client` (accepted: the kernel gives it the connecting process's network
// namespace) is in the same network namespace as `listener`. True when the kernel cannot tell
// (SO_NETNS_COOKIE is Linux 5.14+).
bool same_netns(int listener, int client);

} // namespace uiwarp::daemon
