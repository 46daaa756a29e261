// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Fuzz target: uiwarpd's configuration parser (uiwarpd.conf, cm/daemon/config.cpp), input from
// whoever can write the file or the UIWARPD_CONFIG a program names. Every input must either be
// accepted with a policy inside the documented ranges or refused with a message that names the
// line; nothing may throw out of the parser (an unknown key once aborted uiwarpd).
#include "config.hpp"
#include "fuzz_common.hpp"

#include <sstream>

using uiwarp::daemon::Config;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  Config cfg;
  CLI::App app;
  uiwarp::daemon::add_policy_options(app, cfg);
  std::string err;
  bool ok = false;
  try {
    ok = uiwarp::daemon::parse_config(in, "fuzz.conf", cfg, app, &err);
  } catch (...) {
    FUZZ_CHECK(false, "the parser threw");
  }
  if (!ok) {
    FUZZ_CHECK(err.rfind("fuzz.conf:", 0) == 0, "an error that does not name the line");
    return 0;
  }
  const iwarp::MpaPolicy& p = cfg.mpa;
  FUZZ_CHECK(p.revision == 1 || p.revision == 2, "MPA revision out of range");
  FUZZ_CHECK(p.ird <= 128 && p.ord <= 128, "IRD/ORD above 128");
  FUZZ_CHECK(p.rtr.any(), "no RTR type left");
  FUZZ_CHECK(p.timeout.count() > 0, "a startup timeout of zero or less");
  FUZZ_CHECK(cfg.first_fpdu_delay.count() >= 0 && cfg.first_fpdu_delay.count() <= 10000,
             "first-fpdu-delay-ms out of range");
  return 0;
}
