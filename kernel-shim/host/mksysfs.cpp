// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-mksysfs: writes the sysfs tree for the given devices into a new directory. A tool for
// tests and for root deployments that want a fixed SYSFS_PATH; uiwarp-run does this by itself.
#include "uiwarp/netdev.hpp"
#include "uiwarp/state.hpp"
#include "uiwarp/sysfs.hpp"
#include "uiwarp_paths.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app{
      "Write the uiwarp sysfs tree (SYSFS_PATH) for the given devices into a new directory"};
  std::string out;
  std::vector<std::string> links;
  uiwarp::sysfs::Options opt;
  opt.fw_ver = UIWARP_VERSION_STRING;
  opt.netns_inode = uiwarp::current_netns_inode();
  bool no_mirror = false;
  app.add_option("-o,--out", out, "Directory to create (must not exist)")->required();
  app.add_option("-l,--link", links, "Device as NAME:NETDEV (repeatable; default uiwarp0:lo)");
  app.add_option("--host-sysfs", opt.host_sysfs, "Where to look for kernel RDMA devices to mirror");
  app.add_flag("--no-mirror", no_mirror, "Do not mirror kernel RDMA devices");
  app.add_option("--netns-inode", opt.netns_inode, "Network namespace inode to derive GUIDs from");
  CLI11_PARSE(app, argc, argv);
  opt.mirror_kernel = !no_mirror;
  if (links.empty())
    links.push_back(std::string(uiwarp::kDefaultLinkName) + ":" + uiwarp::kDefaultLinkNetdev);

  std::vector<uiwarp::sysfs::DeviceSpec> devices;
  for (const std::string& l : links) {
    auto colon = l.find(':');
    std::string err;
    if (colon == std::string::npos) {
      std::fprintf(stderr, "uiwarp-mksysfs: --link %s: expected NAME:NETDEV\n", l.c_str());
      return 2;
    }
    std::string name = l.substr(0, colon), netdev = l.substr(colon + 1);
    if (!uiwarp::valid_link_name(name, &err)) {
      std::fprintf(stderr, "uiwarp-mksysfs: %s\n", err.c_str());
      return 2;
    }
    auto nd = uiwarp::query_netdev(netdev, &err);
    if (!nd) {
      std::fprintf(stderr, "uiwarp-mksysfs: %s\n", err.c_str());
      return 1;
    }
    devices.push_back({name, std::move(*nd), {}});
  }
  std::string err;
  if (!uiwarp::sysfs::write_tree(uiwarp::sysfs::build(devices, opt), out, &err)) {
    std::fprintf(stderr, "uiwarp-mksysfs: %s\n", err.c_str());
    return 1;
  }
  return 0;
}
