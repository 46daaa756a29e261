// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp link add NAME netdev DEV [type uiwarp] [KEY VALUE]...   (MPA policy overrides)
// uiwarp link del NAME
// uiwarp link show [NAME]
//
// Modelled on `rdma link add NAME type siw netdev DEV`. Devices are per network namespace: they
// live in links.conf of the namespace's state dir (uiwarp/state.hpp). With no link configured,
// the default device uiwarp0 on lo is in effect. add/del also refresh the generated sysfs tree
// (uiwarp-run does so anyway on each start).
#include "commands.hpp"
#include "config.hpp"
#include "uiwarp/netdev.hpp"
#include "uiwarp/state.hpp"

#include <cstdio>
#include <memory>
#include <net/if.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace uiwarp::cli {

namespace {

int error(const std::string& msg) {
  std::fprintf(stderr, "uiwarp: error: %s\n", msg.c_str());
  return 1;
}

// Refreshes the tree after a change; failures only warn, uiwarp-run regenerates it anyway.
void refresh(const std::string& dir) {
  std::string sysfs, err;
  std::vector<std::string> warnings;
  if (!regenerate_sysfs(dir, &sysfs, &warnings, &err))
    std::fprintf(stderr, "uiwarp: warning: sysfs tree not refreshed: %s\n", err.c_str());
}

// Changes links.conf under the state lock (`change` says why it refuses, or ""), then refreshes
// the sysfs tree.
template <class Change> int edit_links(const Change& change) {
  std::string err;
  const std::string dir = state_dir(&err);
  if (dir.empty()) return error(err);
  {
    StateLock lock(dir);
    if (!lock.ok()) return error(lock.error());
    std::vector<Link> links;
    if (!read_links(dir, &links, &err)) return error(err);
    if (std::string why = change(links); !why.empty()) return error(why);
    if (!write_links(dir, links, &err)) return error(err);
  }
  refresh(dir);
  return 0;
}

int link_add(const std::string& name, const std::vector<std::string>& args) {
  std::string err, netdev, mpa;
  if (!valid_link_name(name, &err)) return error(err);
  if (args.size() % 2) return error("expected 'netdev DEV' after the name");
  for (size_t i = 0; i < args.size(); i += 2) {
    if (args[i] == "netdev") {
      netdev = args[i + 1];
    } else if (args[i] == "type") {
      if (args[i + 1] != "uiwarp") return error("type must be uiwarp, not " + args[i + 1]);
    } else {
      // An MPA policy key of uiwarpd.conf, for this device's connections (uiwarp(8)).
      mpa += (mpa.empty() ? "" : " ") + args[i] + "=" + args[i + 1];
    }
  }
  iwarp::MpaPolicy check;
  if (std::string why; !daemon::apply_mpa_overrides(mpa, check, &why))
    return error(why + " (expected netdev, type, or an MPA policy key: mpa-revision, crc, "
                       "markers, p2p, rtr, permissive, startup-timeout-ms, ird, ord, "
                       "recv-wait-ms, same-host)");
  if (netdev.empty()) return error("netdev DEV is required");
  if (!query_netdev(netdev, &err)) return error(err);

  return edit_links([&](std::vector<Link>& links) -> std::string {
    for (const Link& l : links) {
      if (l.name == name) return "link " + name + " already exists";
      if (l.netdev == netdev) return "netdev " + netdev + " already has link " + l.name;
    }
    links.push_back(Link{name, netdev, mpa});
    return "";
  });
}

int link_del(const std::string& name) {
  return edit_links([&](std::vector<Link>& links) -> std::string {
    if (std::erase_if(links, [&](const Link& l) { return l.name == name; }) == 0)
      return "no link " + name;
    return "";
  });
}

int link_show(const std::string& only, const Output& out) {
  std::string err;
  const std::string dir = state_dir(&err);
  if (dir.empty()) return error(err);
  std::vector<Link> links;
  {
    StateLock lock(dir);
    if (!lock.ok()) return error(lock.error());
    if (!read_links(dir, &links, &err)) return error(err);
  }
  const bool is_default = links.empty();
  bool found = false;
  // rdma -j link show's objects, with uiwarp's MPA policy and whether it is the default.
  nlohmann::json objects = nlohmann::json::array();
  for (const Link& l : effective_links(links)) {
    if (!only.empty() && l.name != only) continue;
    found = true;
    std::string nerr;
    auto nd = query_netdev(l.netdev, &nerr);
    const bool active = nd && nd->port_active();
    if (out.json) {
      objects.push_back({{"ifname", l.name},
                         {"port", 1},
                         {"state", active ? "ACTIVE" : "DOWN"},
                         {"physical_state", active ? "LINK_UP" : "DISABLED"},
                         {"netdev", l.netdev},
                         {"netdev_found", static_cast<bool>(nd)},
                         {"mpa", l.mpa},
                         {"default", is_default}});
      continue;
    }
    std::printf("link %s/1 state %s physical_state %s netdev %s%s%s%s\n", l.name.c_str(),
                active ? "ACTIVE" : "DOWN", active ? "LINK_UP" : "DISABLED", l.netdev.c_str(),
                l.mpa.empty() ? "" : " mpa ", l.mpa.c_str(),
                !nd          ? " (netdev not found)"
                : is_default ? " (default)"
                             : "");
  }
  if (!only.empty() && !found) return error("no link " + only);
  if (out.json) std::printf("%s\n", objects.dump(out.pretty ? 4 : -1).c_str());
  return 0;
}

} // namespace

void add_link_commands(CLI::App& app, Action& run, const Output& out) {
  CLI::App* link = app.add_subcommand("link", "Manage uiwarp devices of this network namespace");
  link->require_subcommand(0, 1);
  // A bare `uiwarp link` shows, as `rdma link` does.
  link->callback([&run, &out, link] {
    if (link->get_subcommands().empty()) run = [&out] { return link_show("", out); };
  });

  auto add_name = std::make_shared<std::string>();
  auto add_args = std::make_shared<std::vector<std::string>>();
  CLI::App* add = link->add_subcommand("add", "Add a device: uiwarp link add NAME netdev DEV");
  add->add_option("name", *add_name, "Device name, uiwarp followed by letters/digits")->required();
  add->add_option("args", *add_args, "netdev DEV [type uiwarp] [KEY VALUE]...")->required();
  add->callback([&run, add_name, add_args] {
    run = [add_name, add_args] { return link_add(*add_name, *add_args); };
  });

  auto del_name = std::make_shared<std::string>();
  CLI::App* del = link->add_subcommand("del", "Delete a device: uiwarp link del NAME");
  del->alias("delete");
  del->add_option("name", *del_name, "Device name")->required();
  del->callback([&run, del_name] { run = [del_name] { return link_del(*del_name); }; });

  auto show_name = std::make_shared<std::string>();
  CLI::App* show = link->add_subcommand("show", "Show devices (all, or NAME)");
  show->alias("list");
  show->add_option("name", *show_name, "Device name");
  show->callback(
      [&run, &out, show_name] { run = [&out, show_name] { return link_show(*show_name, out); }; });
}

} // namespace uiwarp::cli
