// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The logging helper (log.hpp).
#include "uiwarp/log.hpp"

#include "uiwarp/env.hpp"

#include <cstdlib>
#include <fcntl.h>
#include <string_view>
#include <sys/syscall.h>
#include <unistd.h>

namespace uiwarp::log {

namespace {

struct Sink {
  int level = static_cast<int>(Level::Error);
  const char* file = nullptr; // VERBS_LOG_FILE, opened for each line (below); else stderr
};

const Sink& sink() {
  static const Sink s = [] {
    Sink k;
    const Env& env = Env::get();
    if (const char* v = env.nonempty(EnvVar::VerbsLogLevel))
      k.level = static_cast<int>(std::strtol(v, nullptr, 0));
    if (env.flag(EnvVar::Debug)) k.level = static_cast<int>(Level::Debug);
    if (const char* v = env.value(EnvVar::Log); v && std::string_view(v) == "quiet") k.level = 0;
    k.file = env.nonempty(EnvVar::VerbsLogFile);
    return k;
  }();
  return s;
}

} // namespace

bool enabled(Level level) { return static_cast<int>(level) <= sink().level; }

void write(Level level, const char* component, const std::string& message) {
  if (!enabled(level)) return;
  std::string line = "uiwarp[" + std::to_string(::getpid()) + "] " + component + ": " + message;
  if (line.empty() || line.back() != '\n') line += '\n';
  // The file is opened for each line, never held: a program that closes the descriptors it
  // does not know (daemons do) would otherwise have the next line written into whatever it
  // opened in its place. Lines are rare (errors, unless more is asked for).
  int fd = 2;
  if (const char* f = sink().file) {
    long r = ::syscall(SYS_openat, AT_FDCWD, f, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (r >= 0) fd = static_cast<int>(r);
  }
  // One write per line, so lines of several threads do not interleave.
  [[maybe_unused]] long n = ::syscall(SYS_write, fd, line.data(), line.size());
  if (fd != 2) ::syscall(SYS_close, fd);
}

} // namespace uiwarp::log
