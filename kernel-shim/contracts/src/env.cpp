// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The environment, read once (env.hpp).
#include "uiwarp/env.hpp"

#include <cstdlib>
#include <cstring>

namespace uiwarp {

using V = EnvVar;

namespace {

constexpr EnvTable kEnvVars = {{
    {V::StateDir, "UIWARP_STATE_DIR", "uiwarp-run, uiwarp, uiwarpd without --socket",
     "$XDG_RUNTIME_DIR, else /tmp/uiwarp-$UID",
     "the per-user state directory; one netns-<inode> subdirectory per network namespace"},
    {V::XdgRuntimeDir, "XDG_RUNTIME_DIR", "as UIWARP_STATE_DIR", "(unset)",
     "the state directory when UIWARP_STATE_DIR is not set"},
    {V::Debug, "UIWARP_DEBUG", "uiwarp-run, shim, provider", "off",
     "any value but empty or 0: uiwarp-run and the shim say what they do, and the log level is "
     "debug"},
    {V::Log, "UIWARP_LOG", "shim, provider", "(unset)",
     "quiet: print nothing, not even why a connection ended; wins over the others"},
    {V::VerbsLogLevel, "VERBS_LOG_LEVEL", "shim, provider", "1",
     "rdma-core's levels: 0 nothing, 1 errors, 2 warnings, 3 information, 4 debug"},
    {V::VerbsLogFile, "VERBS_LOG_FILE", "shim, provider", "standard error",
     "where the lines go (opened for each line)"},
    {V::RecvWaitMs, "UIWARP_RECV_WAIT_MS", "provider", "the connection's recv-wait-ms (2000)",
     "how long a Send that finds no receive waits for one; 0: terminate at once"},
    {V::MpaPolicy, "UIWARP_MPA_POLICY", "shim", "(none)",
     "MPA policy overrides for this program's connections, key=value ..."},
    {V::TxSplice, "UIWARP_TX_SPLICE", "provider", "auto",
     "how large RDMA Read Responses leave without CRC: auto, on (a pipe), off (copied)"},
    {V::SameHost, "UIWARP_SAME_HOST", "provider, shim", "on",
     "off: no same-host path: the shim asks uiwarpd for none and the provider offers and "
     "attaches none (as between hosts); copy: RDMA Writes and Reads are copied, and this "
     "program's stream (Sends and the rest) stays on TCP instead of moving to the ring in "
     "shared memory"},
    {V::IbConnectTimeoutMs, "UIWARP_IB_CONNECT_TIMEOUT_MS", "shim", "30000",
     "how long a QP moved to RTR IB-style waits for its peer"},
    {V::DaemonConfig, "UIWARPD_CONFIG", "uiwarp-run, shim", "/etc/uiwarp/uiwarpd.conf",
     "the policy file of a per-user uiwarpd they start"},
    {V::DaemonSocket, "UIWARPD_SOCKET", "uiwarp-run, shim, uiwarp", "set by uiwarp-run",
     "the connection manager's socket"},
    {V::DaemonSocketNetns, "UIWARPD_SOCKET_NETNS", "uiwarp-run", "set by uiwarp-run",
     "the network namespace UIWARPD_SOCKET belongs to"},
    {V::DaemonRestart, "UIWARPD_RESTART", "shim", "set by uiwarp-run",
     "the uiwarpd the shim starts again if the per-user daemon goes away"},
    {V::SystemSocket, "UIWARP_SYSTEM_SOCKET", "uiwarp-run, uiwarp", "/run/uiwarp/uiwarpd.sock",
     "the system daemon's socket; set but empty: never use a system daemon"},
    {V::Shim, "UIWARP_SHIM", "uiwarp-run", "the installed (or build-tree) file",
     "the absolute path of the shim"},
    {V::Provider, "UIWARP_PROVIDER", "uiwarp-run", "the installed (or build-tree) file",
     "the absolute path of the provider"},
    {V::Daemon, "UIWARPD", "uiwarp-run", "the installed (or build-tree) file",
     "the absolute path of uiwarpd"},
    {V::HostSysfs, "UIWARP_HOST_SYSFS", "uiwarp-run, uiwarp link", "/sys",
     "where to look for kernel RDMA devices to mirror"},
    {V::SysfsPath, "SYSFS_PATH", "shim, libibverbs", "set by uiwarp-run",
     "the generated sysfs tree"},
    {V::RdmavDrivers, "RDMAV_DRIVERS", "uiwarp-run, libibverbs", "set by uiwarp-run",
     "uiwarp-run puts the provider's path first"},
    {V::LdPreload, "LD_PRELOAD", "uiwarp-run, the dynamic loader", "set by uiwarp-run",
     "uiwarp-run puts the shim first"},
    {V::ListenPid, "LISTEN_PID", "uiwarpd", "set by systemd",
     "socket activation of the system daemon"},
}};

constexpr bool in_order() {
  for (std::size_t i = 0; i < kEnvVars.size(); ++i)
    if (static_cast<std::size_t>(kEnvVars[i].var) != i) return false;
  return true;
}
static_assert(in_order(), "kEnvVars rows must follow EnvVar's order");

} // namespace

const EnvTable& env_vars() { return kEnvVars; }

const Env& Env::get() {
  // Never destroyed: uiwarp's threads (progress, IB connect) may still read it while the
  // program's exit runs the static destructors.
  static const Env* const e = [] {
    auto* s = new Env;
    for (const EnvVarSpec& v : kEnvVars)
      if (const char* x = ::secure_getenv(v.name)) s->values_[static_cast<std::size_t>(v.var)] = x;
    return s;
  }();
  return *e;
}

Env Env::from(const char* const* envp) {
  Env s;
  for (; envp && *envp; ++envp) {
    const char* eq = std::strchr(*envp, '=');
    if (!eq) continue;
    const std::string name(*envp, eq);
    for (const EnvVarSpec& v : kEnvVars)
      if (name == v.name) s.values_[static_cast<std::size_t>(v.var)] = eq + 1;
  }
  return s;
}

const char* Env::value(EnvVar v) const {
  const auto& x = values_[static_cast<std::size_t>(v)];
  return x ? x->c_str() : nullptr;
}

const char* Env::nonempty(EnvVar v) const {
  const char* x = value(v);
  return x && *x ? x : nullptr;
}

std::optional<long> Env::number(EnvVar v) const {
  const char* x = nonempty(v);
  if (!x) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(x, &end, 10);
  if (*end != '\0' || n < 0) return std::nullopt;
  return n;
}

bool Env::flag(EnvVar v) const {
  const char* x = nonempty(v);
  return x && std::strcmp(x, "0") != 0;
}

bool Env::same_host_enabled() const {
  const char* x = nonempty(V::SameHost);
  if (!x) return true;
  for (const char* off : {"off", "0", "no", "false"})
    if (std::strcmp(x, off) == 0) return false;
  return true;
}

bool Env::same_host_ring() const {
  const char* x = nonempty(V::SameHost);
  return same_host_enabled() && !(x && std::strcmp(x, "copy") == 0);
}

} // namespace uiwarp
