// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-run CMD [ARGS...]: runs any program over uiwarp, as an ordinary user.
//
//  1. Regenerates the sysfs tree of this network namespace's uiwarp devices (links.conf, or the
//     default uiwarp0 on lo) under the state dir (see uiwarp/state.hpp).
//  2. Sets SYSFS_PATH to it, RDMAV_DRIVERS to the provider (prepended to any existing value), and
//     LD_PRELOAD to libuiwarp-shim.so (prepended, not duplicated).
//  3. Picks the uiwarpd to use (daemon_socket.hpp: $UIWARPD_SOCKET, the system daemon of
//     uiwarpd.socket, or the per-user one it starts) and sets UIWARPD_SOCKET.
//  4. execvp()s CMD.
//
// Where the files come from: if uiwarp-run runs from the build tree (the directory of
// /proc/self/exe is the one CMake built it in), the build tree's shim and provider
// (${CMAKE_BINARY_DIR}/providers/uiwarp/libuiwarp-rdmav<PABI>.so); otherwise the installed ones
// (${libdir}/uiwarp/libuiwarp-shim.so, ${libdir}/libibverbs/libuiwarp-rdmav<PABI>.so). The
// environment variables UIWARP_SHIM and UIWARP_PROVIDER (absolute paths) override either. If the
// installed provider is missing but /etc/libibverbs.d/uiwarp.driver exists, RDMAV_DRIVERS is left
// alone and libibverbs loads the provider through its driver file.
//
// Exit status: CMD's, or 125 if uiwarp-run itself fails, 126 if CMD cannot be run, 127 if it is
// not found (as env(1) and timeout(1) do).
#include "uiwarp/daemon_socket.hpp"
#include "uiwarp/daemon_start.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/netdev.hpp"
#include "uiwarp/state.hpp"
#include "uiwarp_paths.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr int kExitFail = 125;
constexpr const char* kProviderSuffix = UIWARP_PROVIDER_SUFFIX;

void usage(FILE* f) {
  std::fprintf(f, "usage: uiwarp-run [--] CMD [ARGS...]\n"
                  "Runs CMD over uiwarp (iWARP in user space): sets SYSFS_PATH, RDMAV_DRIVERS and\n"
                  "LD_PRELOAD so that stock libibverbs/librdmacm programs see this network\n"
                  "namespace's uiwarp devices ('uiwarp link show'; default: uiwarp0 on lo).\n"
                  "Environment: UIWARP_STATE_DIR, UIWARP_SHIM, UIWARP_PROVIDER, UIWARPD,\n"
                  "UIWARPD_SOCKET, UIWARP_SYSTEM_SOCKET, UIWARPD_CONFIG (the policy file of a\n"
                  "uiwarpd started here), UIWARP_DEBUG; see uiwarp-run(1).\n");
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

std::string exe_dir() {
  std::string exe = real_path("/proc/self/exe");
  auto slash = exe.rfind('/');
  return slash == std::string::npos ? std::string() : exe.substr(0, slash);
}

std::vector<std::string> split(const char* s, const char* seps) {
  std::vector<std::string> out;
  if (!s) return out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == '\0' || std::strchr(seps, *p)) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& v, char sep) {
  std::string s;
  for (const auto& e : v) {
    if (!s.empty()) s += sep;
    s += e;
  }
  return s;
}

bool debug() { return uiwarp::Env::get().flag(uiwarp::EnvVar::Debug); }

// What the program runs with: the variables of uiwarp's own table, by their names there.
int set_env(uiwarp::EnvVar v, const char* value) {
  return ::setenv(uiwarp::spec(v).name, value, 1);
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "uiwarp-run: error: %s\n", msg.c_str());
  return kExitFail;
}

} // namespace

int main(int argc, char** argv) {
  int first = 1;
  for (; first < argc && argv[first][0] == '-'; ++first) {
    std::string a = argv[first];
    if (a == "--") {
      ++first;
      break;
    }
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (a == "--version") {
      std::printf("uiwarp-run %s\n", UIWARP_VERSION_STRING);
      return 0;
    }
    usage(stderr);
    return fail("unknown option " + a);
  }
  if (first >= argc) {
    usage(stderr);
    return kExitFail;
  }

  // 1. The tree.
  std::string err;
  const std::string dir = uiwarp::state_dir(&err);
  if (dir.empty()) return fail(err);
  std::string sysfs;
  std::vector<std::string> warnings;
  if (!uiwarp::regenerate_sysfs(dir, &sysfs, &warnings, &err)) return fail(err);
  for (const auto& w : warnings)
    std::fprintf(stderr, "uiwarp-run: warning: %s\n", w.c_str());

  // 2. The files.
  const std::string build_bin = real_path(UIWARP_BUILD_BIN_DIR);
  const bool from_build_tree = !build_bin.empty() && exe_dir() == build_bin;
  std::string shim = from_build_tree ? UIWARP_BUILD_SHIM : UIWARP_INSTALL_SHIM;
  std::string provider = from_build_tree ? UIWARP_BUILD_PROVIDER : UIWARP_INSTALL_PROVIDER;
  const uiwarp::Env& env = uiwarp::Env::get();
  if (const char* s = env.nonempty(uiwarp::EnvVar::Shim)) shim = s;
  if (const char* p = env.nonempty(uiwarp::EnvVar::Provider)) provider = p;
  if (!exists(shim)) return fail("shim " + shim + " not found");

  std::string driver; // RDMAV_DRIVERS entry, empty to rely on the driver file
  if (exists(provider) || from_build_tree ||
      !exists(std::string(UIWARP_IBVERBS_CONFIG_DIR) + "/uiwarp.driver")) {
    const size_t sl = std::strlen(kProviderSuffix);
    if (provider.size() <= sl || provider.compare(provider.size() - sl, sl, kProviderSuffix) != 0 ||
        provider[0] != '/')
      return fail("provider " + provider + " is not an absolute path ending in " + kProviderSuffix);
    if (!exists(provider))
      std::fprintf(stderr, "uiwarp-run: warning: provider %s not found%s\n", provider.c_str(),
                   from_build_tree ? " (build the uiwarp-provider target)" : "");
    driver = provider.substr(0, provider.size() - sl);
  }

  // 3. The connection manager (which one: see daemon_socket.hpp).
  std::string uiwarpd = from_build_tree ? UIWARP_BUILD_UIWARPD : UIWARP_INSTALL_UIWARPD;
  if (const char* d = env.nonempty(uiwarp::EnvVar::Daemon)) uiwarpd = d;
  const uiwarp::DaemonSocket cm = uiwarp::choose_daemon_socket(dir, from_build_tree);
  // A per-user daemon (one per user and network namespace, started here unless it runs): the
  // shim starts it again if it goes away while the program listens (UIWARPD_RESTART).
  if (cm.start_if_needed && !uiwarp::ensure_daemon(uiwarpd, cm.path, &err)) return fail(err);
  set_env(uiwarp::EnvVar::DaemonSocket, cm.path.c_str());
  if (cm.start_if_needed)
    set_env(uiwarp::EnvVar::DaemonRestart, uiwarpd.c_str());
  else
    ::unsetenv(uiwarp::spec(uiwarp::EnvVar::DaemonRestart).name);
  set_env(uiwarp::EnvVar::DaemonSocketNetns, std::to_string(uiwarp::current_netns_inode()).c_str());
  if (debug())
    std::fprintf(stderr, "uiwarp-run: uiwarpd %s: %s\n", cm.path.c_str(), cm.why.c_str());

  // 4. The environment.
  if (set_env(uiwarp::EnvVar::SysfsPath, sysfs.c_str()) != 0) return fail("setenv");
  std::string rdmav_drivers =
      env.value(uiwarp::EnvVar::RdmavDrivers) ? env.value(uiwarp::EnvVar::RdmavDrivers) : "(unset)";
  if (!driver.empty()) {
    std::vector<std::string> drivers{driver};
    for (auto& d : split(env.value(uiwarp::EnvVar::RdmavDrivers), ":;"))
      if (d != driver) drivers.push_back(d);
    rdmav_drivers = join(drivers, ':');
    set_env(uiwarp::EnvVar::RdmavDrivers, rdmav_drivers.c_str());
  }
  std::vector<std::string> preload;
  if (from_build_tree) {
    for (auto& rt : split(UIWARP_BUILD_SANITIZER_PRELOAD, ":"))
      preload.push_back(rt);
    // Stock programs are not leak-clean; a sanitized provider still reports its own errors.
    if (!preload.empty()) ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
  }
  preload.push_back(shim);
  if (from_build_tree)
    for (auto& rt : split(UIWARP_BUILD_SANITIZER_PRELOAD_AFTER, ":"))
      preload.push_back(rt);
  for (auto& p : split(env.value(uiwarp::EnvVar::LdPreload), ": ")) {
    bool dup = false;
    for (auto& q : preload)
      dup = dup || q == p;
    if (!dup) preload.push_back(p);
  }
  const std::string ld_preload = join(preload, ':');
  set_env(uiwarp::EnvVar::LdPreload, ld_preload.c_str());

  if (debug()) {
    std::fprintf(stderr, "uiwarp-run: %s files; SYSFS_PATH=%s RDMAV_DRIVERS=%s LD_PRELOAD=%s\n",
                 from_build_tree ? "build-tree" : "installed", sysfs.c_str(), rdmav_drivers.c_str(),
                 ld_preload.c_str());
  }

  ::execvp(argv[first], argv + first);
  int e = errno;
  std::fprintf(stderr, "uiwarp-run: %s: %s\n", argv[first], std::strerror(e));
  return e == ENOENT ? 127 : 126;
}
