// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "config.hpp"

#include <algorithm>
#include <climits>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

namespace uiwarp::daemon {

namespace {

bool parse_bool(const std::string& v, bool* out) {
  if (v == "on" || v == "yes" || v == "true" || v == "1") return *out = true, true;
  if (v == "off" || v == "no" || v == "false" || v == "0") return *out = false, true;
  return false;
}

bool parse_rtr(const std::string& v, iwarp::RtrSet* out) {
  iwarp::RtrSet r;
  std::stringstream ss(v);
  std::string t;
  while (std::getline(ss, t, ',')) {
    if (t == "send")
      r.send = true;
    else if (t == "write")
      r.write = true;
    else if (t == "read")
      r.read = true;
    else
      return false;
  }
  if (!r.any()) return false;
  *out = r;
  return true;
}

// One setter per key; flags and the file share them.
using Setter = std::function<bool(Config&, const std::string&)>;

// The setter of a whole-number key in [lo, hi] (std::stol: a malformed number throws, which
// apply() reports as a bad value).
Setter in_range(long lo, long hi, void (*set)(Config&, long)) {
  return [lo, hi, set](Config& c, const std::string& v) {
    long n = std::stol(v);
    if (n < lo || n > hi) return false;
    set(c, n);
    return true;
  };
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> m = {
      {"mpa-revision",
       [](Config& c, const std::string& v) {
         if (v != "1" && v != "2") return false;
         c.mpa.revision = static_cast<std::uint8_t>(v[0] - '0');
         return true;
       }},
      {"crc", [](Config& c, const std::string& v) { return parse_bool(v, &c.mpa.crc); }},
      {"markers", [](Config& c, const std::string& v) { return parse_bool(v, &c.mpa.markers); }},
      {"p2p", [](Config& c, const std::string& v) { return parse_bool(v, &c.mpa.p2p); }},
      {"rtr", [](Config& c, const std::string& v) { return parse_rtr(v, &c.mpa.rtr); }},
      {"ird",
       in_range(0, 128, [](Config& c, long n) { c.mpa.ird = static_cast<std::uint16_t>(n); })},
      {"ord",
       in_range(0, 128, [](Config& c, long n) { c.mpa.ord = static_cast<std::uint16_t>(n); })},
      {"permissive",
       [](Config& c, const std::string& v) { return parse_bool(v, &c.mpa.permissive); }},
      {"large-fpdu",
       [](Config& c, const std::string& v) { return parse_bool(v, &c.mpa.large_fpdu); }},
      {"rfc7306", [](Config& c, const std::string& v) { return parse_bool(v, &c.mpa.rfc7306); }},
      {"same-host",
       [](Config& c, const std::string& v) { return parse_bool(v, &c.mpa.same_host); }},
      {"first-fpdu-delay-ms",
       in_range(0, 10000,
                [](Config& c, long n) { c.first_fpdu_delay = std::chrono::milliseconds(n); })},
      {"idle-exit-s",
       in_range(0, 86400, [](Config& c, long n) { c.idle_exit = std::chrono::seconds(n); })},
      {"ib-connect-port",
       in_range(0, 65535,
                [](Config& c, long n) { c.ib_connect_port = static_cast<std::uint16_t>(n); })},
      {"recv-wait-ms",
       in_range(0, 3'600'000,
                [](Config& c, long n) { c.mpa.recv_wait = std::chrono::milliseconds(n); })},
      {"startup-timeout-ms",
       in_range(1, LONG_MAX,
                [](Config& c, long n) { c.mpa.timeout = std::chrono::milliseconds(n); })},
  };
  return m;
}

bool apply(Config& cfg, const std::string& key, const std::string& value, std::string* err) {
  auto it = setters().find(key);
  bool ok = false;
  if (it != setters().end()) {
    try {
      ok = it->second(cfg, value);
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok)
    *err = it == setters().end() ? "unknown setting '" + key + "'"
                                 : "bad value '" + value + "' for " + key;
  return ok;
}

} // namespace

void add_policy_options(CLI::App& app, Config& cfg) {
  for (const auto& [key, set] : setters()) {
    app.add_option_function<std::string>(
           "--" + key,
           [&cfg, key = key](const std::string& v) {
             std::string err;
             if (!apply(cfg, key, v, &err)) throw CLI::ValidationError(err);
           },
           "policy: " + key + " (see uiwarpd.conf)")
        ->group("MPA policy");
  }
}

bool apply_mpa_overrides(const std::string& text, iwarp::MpaPolicy& mpa, std::string* err) {
  Config c;
  c.mpa = mpa;
  std::istringstream in(text);
  for (std::string item; in >> item;) {
    const auto eq = item.find('=');
    std::string key = item.substr(0, eq),
                value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (std::find(std::begin(kMpaOverrideKeys), std::end(kMpaOverrideKeys), key) ==
        std::end(kMpaOverrideKeys)) {
      *err = "'" + key + "' is not an MPA policy key a device or connection may set";
      return false;
    }
    // CRC: whoever asks gets it (RFC 5044 §7.1.2), so "required" is asking and "optional" is not.
    if (key == "crc" && value == "required") value = "on";
    if (key == "crc" && value == "optional") value = "off";
    if (key == "rtr" && value == "none") {
      c.mpa.p2p = false;
      continue;
    }
    if (!apply(c, key, value, err)) return false;
  }
  mpa = c.mpa;
  return true;
}

bool load_config(const std::string& file, Config& cfg, const CLI::App& app, std::string* err) {
  std::ifstream in(file);
  if (!in) {
    if (file == kDefaultConfigFile) return true; // optional
    *err = "cannot read " + file;
    return false;
  }
  return parse_config(in, file, cfg, app, err);
}

bool parse_config(std::istream& in, const std::string& file, Config& cfg, const CLI::App& app,
                  std::string* err) {
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    auto eq = line.find('=');
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(" \t"));
      s.erase(s.find_last_not_of(" \t\r") + 1);
      return s;
    };
    if (trim(line).empty()) continue;
    if (eq == std::string::npos) {
      *err = file + ":" + std::to_string(n) + ": expected key = value";
      return false;
    }
    std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    // The command line wins. get_option_no_throw: count() of a key that is no option (a typo
    // in the file) throws CLI::OptionNotFound, which aborted uiwarpd; apply() names it instead.
    if (const CLI::Option* o = app.get_option_no_throw("--" + key); o && o->count()) continue;
    if (!apply(cfg, key, value, err)) {
      *err = file + ":" + std::to_string(n) + ": " + *err;
      return false;
    }
  }
  return true;
}

} // namespace uiwarp::daemon
