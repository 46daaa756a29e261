// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The one logging helper of the code that runs inside applications (the shim, the UCMA
// emulation, the provider). By default only errors are written: a failure the application
// sees (CONNECT_ERROR when uiwarpd went away) whose cause it has no other way to learn.
// Warnings (why a verb returned EINVAL, ...) and the rest are asked for, as in rdma-core:
//   VERBS_LOG_LEVEL=0..4  nothing, errors, warnings, information, debug (rdma-core's levels)
//   VERBS_LOG_FILE=path   where to (default: stderr)
//   UIWARP_DEBUG=1        everything, to stderr unless VERBS_LOG_FILE says otherwise
//   UIWARP_LOG=quiet      nothing, not even errors (wins over the two above)
// Lines read "uiwarp[pid] component: message". Safe under any lock of the caller's: it writes
// with raw system calls, which the shim's interposers never see.
#pragma once

#include <string>

namespace uiwarp::log {

enum class Level : int { Error = 1, Warn = 2, Info = 3, Debug = 4 };

bool enabled(Level level);
void write(Level level, const char* component, const std::string& message);

inline void error(const char* component, const std::string& m) {
  write(Level::Error, component, m);
}
inline void warn(const char* component, const std::string& m) { write(Level::Warn, component, m); }
inline void info(const char* component, const std::string& m) { write(Level::Info, component, m); }
inline void debug(const char* component, const std::string& m) {
  write(Level::Debug, component, m);
}

} // namespace uiwarp::log
