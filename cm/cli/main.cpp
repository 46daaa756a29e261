// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp: administer uiwarp (iWARP in user space). Subcommands live in one file per group.
// As rdma(8): -j/--json prints JSON (-p/--pretty indents it), a bare object shows it
// (`uiwarp link` is `uiwarp link show`), and the exit status is 0 (done), 1 (failed) or 2
// (the command line is wrong).
#include "commands.hpp"

#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"uiwarp: administer uiwarp devices (iWARP in user space)", "uiwarp"};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("uiwarp ") + UIWARP_CLI_VERSION);
  uiwarp::cli::Output out;
  app.add_flag("-j,--json", out.json, "JSON output (as rdma -j)");
  app.add_flag("-p,--pretty", out.pretty, "indented JSON (with -j)");
  uiwarp::cli::Action run;
  uiwarp::cli::add_link_commands(app, run, out);
  uiwarp::cli::add_status_commands(app, run, out);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" of exit code 0 to CLI11; every other is a usage error.
    const int code = app.exit(e);
    return code == 0 ? 0 : uiwarp::cli::kExitUsage;
  }
  return run ? run() : 0;
}
