// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The rdma_cm's devices, read from the generated sysfs tree: see ucma_devices.hpp.
#include "ucma_devices.hpp"

#include "ucma_addr.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/guid.hpp"
#include "uiwarp/sysfs_layout.hpp"

#include <algorithm>
#include <cstdlib>
#include <endian.h>
#include <filesystem>
#include <fstream>

namespace uiwarp::ucma {

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  const char* sysfs = Env::get().value(EnvVar::SysfsPath);
  if (!sysfs) return out;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(sysfs) + "/" + sysfs::kDevicesDir, ec)) {
    DeviceInfo d;
    d.name = e.path().filename();
    std::ifstream nd(e.path() / sysfs::kAttrNetdev), g(e.path() / sysfs::kAttrNodeGuid),
        mpa(e.path() / sysfs::kAttrMpa);
    std::getline(nd, d.netdev);
    std::getline(mpa, d.mpa);
    std::string text;
    std::getline(g, text);
    auto guid = parse_guid(text);
    if (d.netdev.empty() || !guid) continue;
    d.guid_be = htobe64(*guid);
    out.push_back(d);
  }
  std::sort(out.begin(), out.end(),
            [](const DeviceInfo& l, const DeviceInfo& r) { return l.name < r.name; });
  return out;
}

std::optional<DeviceInfo> device_for(const sockaddr_storage& ip) {
  std::vector<DeviceInfo> devs = devices();
  if (devs.empty()) return std::nullopt;
  if (is_wildcard(ip)) return devs.front();
  std::string ifname = netdev_of(ip);
  for (const DeviceInfo& d : devs)
    if (d.netdev == ifname) return d;
  if (is_loopback(ip)) return devs.front();
  return std::nullopt;
}

std::string device_policies(const sockaddr_storage& addr) {
  std::string out;
  if (!is_wildcard(addr)) return out;
  for (const DeviceInfo& d : devices())
    if (!d.mpa.empty()) out += d.netdev + " " + d.mpa + "\n";
  return out;
}

std::string mpa_overrides(const std::optional<DeviceInfo>& dev, const sockaddr_storage& addr) {
  std::string out = dev && !is_wildcard(addr) ? dev->mpa : "";
  if (const char* env = Env::get().nonempty(EnvVar::MpaPolicy))
    out += (out.empty() ? "" : " ") + std::string(env);
  // Last, so it wins: a program without the same-host path neither asks nor answers for it.
  if (!Env::get().same_host_enabled())
    out += (out.empty() ? "" : " ") + std::string("same-host=off");
  return out;
}

} // namespace uiwarp::ucma
