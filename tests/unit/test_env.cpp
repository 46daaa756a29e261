// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp::Env (kernel-shim/contracts/include/uiwarp/env.hpp): one table of every variable, a
// snapshot of an environment read by name. style-env checks that nothing else reads one and
// that docs/user-guide.md lists each.
#include "catch_compat.hpp"
#include "uiwarp/env.hpp"

#include <set>
#include <string>

using uiwarp::Env;
using uiwarp::EnvVar;

TEST_CASE("Env: one row per variable, in order, each named once with a meaning", "[env]") {
  std::set<std::string> names;
  for (std::size_t i = 0; i < uiwarp::env_vars().size(); ++i) {
    const uiwarp::EnvVarSpec& v = uiwarp::env_vars()[i];
    CHECK(static_cast<std::size_t>(v.var) == i);
    CHECK(names.insert(v.name).second);
    CHECK(std::string(v.meaning).size() > 10);
    CHECK(*v.readers);
    CHECK(*v.fallback);
  }
  CHECK(std::string(uiwarp::spec(EnvVar::SysfsPath).name) == "SYSFS_PATH");
}

TEST_CASE("Env: a snapshot reads values by name: unset, empty and numbers", "[env]") {
  const char* const envp[] = {"UIWARP_RECV_WAIT_MS=250",
                              "UIWARP_IB_CONNECT_TIMEOUT_MS=soon",
                              "UIWARP_LOG=",
                              "UIWARP_DEBUG=0",
                              "SYSFS_PATH=/run/tree",
                              "UIWARP_TX_SPLICE_EXTRA=on", // not a variable of uiwarp's
                              "NO_EQUALS_SIGN",
                              nullptr};
  const Env e = Env::from(envp);
  CHECK(std::string(e.value(EnvVar::SysfsPath)) == "/run/tree");
  CHECK(e.value(EnvVar::TxSplice) == nullptr);
  CHECK(e.value(EnvVar::Log) != nullptr); // set, empty
  CHECK(e.nonempty(EnvVar::Log) == nullptr);
  CHECK(e.number(EnvVar::RecvWaitMs) == 250);
  CHECK_FALSE(e.number(EnvVar::IbConnectTimeoutMs).has_value()); // not a number: ignored
  CHECK_FALSE(e.number(EnvVar::VerbsLogLevel).has_value());      // unset
  CHECK_FALSE(e.flag(EnvVar::Debug));                            // "0"
  const char* const on[] = {"UIWARP_DEBUG=1", "UIWARP_RECV_WAIT_MS=-3", nullptr};
  CHECK(Env::from(on).flag(EnvVar::Debug));
  CHECK_FALSE(Env::from(on).number(EnvVar::RecvWaitMs).has_value());
}

TEST_CASE("Env: UIWARP_SAME_HOST turns the same-host path off with off, 0, no or false",
          "[env][same-host]") {
  const char* const none[] = {nullptr};
  CHECK(Env::from(none).same_host_enabled()); // on unless turned off
  for (const char* v : {"UIWARP_SAME_HOST=off", "UIWARP_SAME_HOST=0", "UIWARP_SAME_HOST=no",
                        "UIWARP_SAME_HOST=false"}) {
    INFO(v);
    const char* const envp[] = {v, nullptr};
    CHECK_FALSE(Env::from(envp).same_host_enabled());
  }
  for (const char* v :
       {"UIWARP_SAME_HOST=on", "UIWARP_SAME_HOST=1", "UIWARP_SAME_HOST=", "UIWARP_SAME_HOST=OFF"}) {
    INFO(v);
    const char* const envp[] = {v, nullptr};
    CHECK(Env::from(envp).same_host_enabled());
  }
  CHECK(std::string(uiwarp::spec(EnvVar::SameHost).name) == "UIWARP_SAME_HOST");
}

TEST_CASE("Env: the same-host stream ring is on unless UIWARP_SAME_HOST is copy or off",
          "[env][same-host]") {
  const char* const none[] = {nullptr};
  CHECK(Env::from(none).same_host_ring());
  for (const char* v : {"UIWARP_SAME_HOST=on", "UIWARP_SAME_HOST=ring", "UIWARP_SAME_HOST="}) {
    INFO(v);
    const char* const envp[] = {v, nullptr};
    CHECK(Env::from(envp).same_host_ring());
  }
  const char* const copy[] = {"UIWARP_SAME_HOST=copy", nullptr};
  CHECK_FALSE(Env::from(copy).same_host_ring());
  CHECK(Env::from(copy).same_host_enabled()); // the copies stay
  const char* const off[] = {"UIWARP_SAME_HOST=off", nullptr};
  CHECK_FALSE(Env::from(off).same_host_ring()); // no path, no ring
}
