// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Every environment variable uiwarp's own code reads, in one table, read once: the first call
// of Env::get() in a process (in each uiwarp library it loads) takes a snapshot, as libibverbs
// reads its variables at its first device listing; a program that changes its environment
// afterwards changes nothing for uiwarp. No other code calls getenv (style-env checks), and
// docs/user-guide.md lists every row of env_vars() (style-env checks that too).
//
// secure_getenv: in a set-user-ID or set-group-ID program every variable reads as unset (the
// loader drops LD_PRELOAD there anyway, and VERBS_LOG_FILE names a file to write).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace uiwarp {

enum class EnvVar : std::uint8_t {
  StateDir,
  XdgRuntimeDir,
  Debug,
  Log,
  VerbsLogLevel,
  VerbsLogFile,
  RecvWaitMs,
  MpaPolicy,
  TxSplice,
  SameHost,
  IbConnectTimeoutMs,
  DaemonConfig,
  DaemonSocket,
  DaemonSocketNetns,
  DaemonRestart,
  SystemSocket,
  Shim,
  Provider,
  Daemon,
  HostSysfs,
  SysfsPath,
  RdmavDrivers,
  LdPreload,
  ListenPid,
  Count
};

struct EnvVarSpec {
  EnvVar var;
  const char* name;
  const char* readers;  // which parts of uiwarp read it
  const char* fallback; // what holds when it is unset
  const char* meaning;
};

// The table docs/user-guide.md publishes, in EnvVar order (static_asserted in env.cpp).
using EnvTable = std::array<EnvVarSpec, static_cast<std::size_t>(EnvVar::Count)>;
const EnvTable& env_vars();
inline const EnvVarSpec& spec(EnvVar v) { return env_vars()[static_cast<std::size_t>(v)]; }

class Env {
public:
  // The process's snapshot, taken at the first call (thread-safe).
  static const Env& get();
  // A snapshot of `envp` ("NAME=value" strings, null-terminated), for tests.
  static Env from(const char* const* envp);

  // The value, nullptr when unset.
  const char* value(EnvVar v) const;
  // The value, nullptr when unset or empty.
  const char* nonempty(EnvVar v) const;
  // A decimal number >= 0, nullopt when unset, empty or not one.
  std::optional<long> number(EnvVar v) const;
  // Set to anything but "" or "0" (UIWARP_DEBUG).
  bool flag(EnvVar v) const;
  // UIWARP_SAME_HOST: the same-host path may be used, unless it is "off", "0", "no" or "false"
  // (unset, empty or anything else: on).
  bool same_host_enabled() const;
  // Where the path is enabled, its stream (Sends and the rest) also moves into shared memory
  // (qp_ring.cpp), unless it is "copy" (then it stays on TCP; only Writes and Reads are copied).
  bool same_host_ring() const;

private:
  std::array<std::optional<std::string>, static_cast<std::size_t>(EnvVar::Count)> values_;
};

} // namespace uiwarp
