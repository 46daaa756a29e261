// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp: administer uiwarp (iWARP in user space). Subcommands live in one file per group.
#include "commands.hpp"

#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"uiwarp: administer uiwarp devices (iWARP in user space)", "uiwarp"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("uiwarp ") + UIWARP_CLI_VERSION);
  uiwarp::cli::Action run;
  uiwarp::cli::add_link_commands(app, run);
  uiwarp::cli::add_status_commands(app, run);
  CLI11_PARSE(app, argc, argv);
  return run ? run() : 0;
}
