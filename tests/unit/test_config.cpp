// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd.conf (cm/daemon/config.cpp): every key sets the policy it names, and a malformed line
// is refused with the file and line in the message, never an abort (fuzzed by fuzz_config).
#include "catch_compat.hpp"
#include "config.hpp"

#include <sstream>

using uiwarp::daemon::Config;

namespace {
bool parse(const std::string& text, Config& cfg, std::string* err,
           std::vector<std::string> args = {}) {
  CLI::App app;
  uiwarp::daemon::add_policy_options(app, cfg);
  std::vector<const char*> argv{"uiwarpd"};
  for (const std::string& a : args)
    argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  std::istringstream in(text);
  return uiwarp::daemon::parse_config(in, "test.conf", cfg, app, err);
}
} // namespace

TEST_CASE("MPA-020 CRC is on unless uiwarpd.conf or a policy override turns it off", "[config]") {
  CHECK(iwarp::MpaPolicy{}.crc);
  Config c;
  std::string err;
  REQUIRE(parse("ird = 4\n", c, &err)); // a file that does not name it
  CHECK(c.mpa.crc);
  REQUIRE(parse("crc = off\n", c, &err));
  CHECK_FALSE(c.mpa.crc);
}

TEST_CASE("uiwarpd.conf: each key sets its policy, and the command line wins", "[config]") {
  Config c;
  std::string err;
  REQUIRE(parse("# comment\n\nmpa-revision = 1\ncrc = off  # trailing\nrfc7306 = off\n"
                "ird = 4\nord = 128\nrtr = read\nstartup-timeout-ms = 2500\nrecv-wait-ms = 0\n"
                "same-host = off\n",
                c, &err, {"--ird", "8"}));
  CHECK(c.mpa.revision == 1);
  CHECK_FALSE(c.mpa.crc);
  CHECK_FALSE(c.mpa.rfc7306);
  CHECK(c.mpa.ird == 8); // the flag, not the file
  CHECK(c.mpa.ord == 128);
  CHECK(c.mpa.rtr == iwarp::RtrSet{false, false, true});
  CHECK(c.mpa.timeout == std::chrono::milliseconds(2500));
  CHECK(c.mpa.recv_wait == std::chrono::milliseconds(0)); // strict, as an RNIC
  CHECK_FALSE(c.mpa.same_host);
  Config d;
  CHECK(d.mpa.rfc7306); // on by default
  CHECK(d.mpa.large_fpdu);
  CHECK(d.mpa.same_host);
  CHECK_FALSE(iwarp::MpaPolicy{}.same_host); // uiwarpd turns it on, libiwarp does not
}

TEST_CASE("uiwarpd.conf: an unknown key, a bad value or a line without '=' is an error naming "
          "the line, not an abort",
          "[config]") {
  Config c;
  std::string err;
  // An unknown key made CLI11's App::count() throw OptionNotFound, which aborted uiwarpd.
  CHECK_FALSE(parse("crc = on\nbogus-key = 1\n", c, &err));
  CHECK(err == "test.conf:2: unknown setting 'bogus-key'");
  CHECK_FALSE(parse("ird = 99999999999999999999\n", c, &err));
  CHECK(err == "test.conf:1: bad value '99999999999999999999' for ird");
  CHECK_FALSE(parse("ird = 129\n", c, &err));
  CHECK_FALSE(parse("rtr = \n", c, &err));
  CHECK_FALSE(parse("\n\nno equals sign\n", c, &err));
  CHECK(err == "test.conf:3: expected key = value");
}

TEST_CASE("MPA policy overrides of a device or a connection: the MPA keys, crc and rtr aliases, "
          "errors that name the key",
          "[config]") {
  using uiwarp::daemon::apply_mpa_overrides;
  iwarp::MpaPolicy p;
  p.p2p = true;
  std::string err;
  REQUIRE(apply_mpa_overrides("", p, &err));
  REQUIRE(apply_mpa_overrides("mpa-revision=1 crc=optional rtr=read startup-timeout-ms=2500 "
                              "markers=on permissive=on ird=4",
                              p, &err));
  CHECK(p.revision == 1);
  CHECK_FALSE(p.crc);
  CHECK(p.rtr.read);
  CHECK_FALSE(p.rtr.write);
  CHECK(p.timeout == std::chrono::milliseconds(2500));
  CHECK(p.markers);
  CHECK(p.permissive);
  CHECK(p.ird == 4);
  REQUIRE(apply_mpa_overrides("crc=required rtr=none", p, &err));
  CHECK(p.crc);
  CHECK_FALSE(p.p2p);
  // The shim's UIWARP_SAME_HOST=off, and a device's or a program's own choice.
  p.same_host = true;
  REQUIRE(apply_mpa_overrides("same-host=off", p, &err));
  CHECK_FALSE(p.same_host);
  REQUIRE(apply_mpa_overrides("same-host=on", p, &err));
  CHECK(p.same_host);
  CHECK_FALSE(apply_mpa_overrides("same-host=sometimes", p, &err));
  CHECK(err == "bad value 'sometimes' for same-host");
  const iwarp::MpaPolicy before = p;
  CHECK_FALSE(apply_mpa_overrides("mpa-revision=1 idle-exit-s=5", p, &err));
  CHECK(err.find("'idle-exit-s' is not an MPA policy key") != std::string::npos);
  CHECK(p.revision == before.revision); // nothing applied from a refused text
  CHECK_FALSE(apply_mpa_overrides("rtr=sideways", p, &err));
  CHECK(err == "bad value 'sideways' for rtr");
  CHECK_FALSE(apply_mpa_overrides("crc", p, &err));
  CHECK(err == "bad value '' for crc");
}
