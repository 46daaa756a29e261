// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The `uiwarp` CLI's subcommand groups. Each add_*_commands() registers its subcommands on the
// top-level app; the one the user picks stores its action in `run`, which main() calls after
// parsing. Its return value is the exit status.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace uiwarp::cli {

using Action = std::function<int()>;

// uiwarp link add NAME netdev DEV | link del NAME | link show [NAME]
void add_link_commands(CLI::App& app, Action& run);
// uiwarp status | conn show
void add_status_commands(CLI::App& app, Action& run);

} // namespace uiwarp::cli
