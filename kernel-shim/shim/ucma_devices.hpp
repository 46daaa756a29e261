// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Device discovery for the emulated rdma_cm: the uiwarp devices the generated sysfs tree
// (SYSFS_PATH) lists, with the netdev and GUID of each, and the device an address belongs to
// (the kernel's cma_acquire_dev_by_src_ip).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <vector>

namespace uiwarp::ucma {

struct DeviceInfo {
  std::string name, netdev;
  std::uint64_t guid_be = 0; // as ibv_get_device_guid() returns it
  std::string mpa;           // the device's MPA policy overrides (uiwarp link add ... KEY VALUE)
};

// The devices of the sysfs tree, by name; none when SYSFS_PATH is unset.
std::vector<DeviceInfo> devices();

// The uiwarp device of the netdev that owns `ip`; the first device for a wildcard, and for a
// loopback address whose interface has none (the kernel's rdma_cm binds 127.0.0.1 to any
// RDMA device: siw on eth0 serves rping -a 127.0.0.1 with nothing on lo).
std::optional<DeviceInfo> device_for(const sockaddr_storage& ip);

// The MPA policy overrides uiwarpd applies to a connection from or to `addr`: those of its
// device (none for a wildcard address: uiwarpd's defaults), then UIWARP_MPA_POLICY's, which
// win ("key=value ...", uiwarpd(8)); last "same-host=off" when UIWARP_SAME_HOST turns the
// same-host path off.
std::string mpa_overrides(const std::optional<DeviceInfo>& dev, const sockaddr_storage& addr);
// For a listener on `addr`: if it is a wildcard, every device's own overrides, one
// "NETDEV KEY=VALUE..." line per device that has any (proto::Listen::device_policies).
std::string device_policies(const sockaddr_storage& addr);

} // namespace uiwarp::ucma
