// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's policy: /etc/uiwarp/uiwarpd.conf ("key = value" lines, '#' comments),
// overridden by command-line flags of the same names.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "iwarp/mpa_startup.hpp"

namespace uiwarp::cm {

inline constexpr const char* kDefaultConfigFile = "/etc/uiwarp/uiwarpd.conf";

struct Config {
  iwarp::MpaPolicy mpa;  // defaults: MPA rev 2, CRC on, markers off, no P2P
};

// Adds --mpa-revision, --crc, --markers, --p2p, --rtr, --ird, --ord, --permissive,
// --startup-timeout-ms, --large-fpdu.
void add_policy_options(CLI::App& app, Config& cfg);
// Reads `file` (a missing default file is fine) for the keys not given as flags.
bool load_config(const std::string& file, Config& cfg, const CLI::App& app, std::string* err);

}  // namespace uiwarp::cm
