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

// Exit statuses, as rdma(8): 0 done, 1 failed, 2 a wrong command line.
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// The global output flags (-j, -p), set while parsing, read by the actions.
struct Output {
  bool json = false;
  bool pretty = false;
};

// uiwarp link add NAME netdev DEV | link del NAME | link show [NAME] | link
void add_link_commands(CLI::App& app, Action& run, const Output& out);
// uiwarp status | conn show [--closed] | conn
void add_status_commands(CLI::App& app, Action& run, const Output& out);

} // namespace uiwarp::cli
