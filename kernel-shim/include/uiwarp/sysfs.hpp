// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The generator of the sysfs tree that stock libibverbs (rdma-core 44) reads through SYSFS_PATH
// to find uiwarp devices with no kernel RDMA support: below, each file libibverbs and librdmacm
// read (and rdma-core's tests, by their fixed paths), with what uiwarp writes there.
//
// Per device <dev> on netdev <nd> (paths relative to the tree's root):
//   class/infiniband/<dev>/node_type             "4: RNIC"  (libibverbs: transport iWARP)
//   class/infiniband/<dev>/node_guid             EUI-64 of the port MAC, "xxxx:xxxx:xxxx:xxxx"
//   class/infiniband/<dev>/sys_image_guid        same
//   class/infiniband/<dev>/{node_desc,fw_ver,hw_rev,board_id}
//   class/infiniband/<dev>/uiwarp_netdev         <nd> (read by the uiwarp provider)
//   class/infiniband/<dev>/device/net/<nd>       symlink to /sys/class/net/<nd>, where a NIC's
//                                                device lists its netdev (rdma-core's tests)
//   class/infiniband/<dev>/ports/1/{state,phys_state,link_layer,lid,sm_lid,lid_mask_count,
//                                   sm_sl,cap_mask}
//   class/infiniband/<dev>/ports/1/gids/<i>      GID i, "xxxx:xxxx:...:xxxx" (8 groups)
//   class/infiniband/<dev>/ports/1/gid_attrs/types/<i>  "IB/RoCE v1" (what the kernel shows
//                                                for iWARP GIDs)
//   class/infiniband/<dev>/ports/1/gid_attrs/ndevs/<i>  <nd>
//   class/infiniband/<dev>/ports/1/pkeys/0       "0xffff"
//   class/infiniband_verbs/abi_version           "6"
//   class/infiniband_verbs/uverbs<N>/{ibdev,dev,abi_version}  <dev>, "1:7", "1"
//   class/misc/rdma_cm/abi_version               "4" (librdmacm's UCMA ABI)
// GIDs: index 0 is fe80::<EUI-64 of the port MAC> (= fe80::<node_guid>); then one GID per IP
// address of the netdev (IPv4 as ::ffff:a.b.c.d, IPv6 as is; duplicates dropped). The kernel's
// iWARP drivers (siw, cxgb4, i40iw) report the bare MAC in bytes 0..5 instead, which
// ibv_devinfo -v hides (it skips GIDs whose interface id is zero); GIDs play no part on the
// iWARP wire. The provider's gid_tbl_len is the number of files in gids/ (0..N-1).
// The uverbs "dev" 1:7 is /dev/full, which backs /dev/infiniband/uverbs<N> in libuiwarp-shim.so.
//
// Kernel RDMA devices: if <host_sysfs>/class/infiniband exists, its entries and those of
// class/infiniband_verbs are mirrored as symlinks to the real sysfs directories (best effort),
// so they stay usable while NETLINK_RDMA is blocked; uiwarp's uverbs<N> are numbered after them.
#pragma once

#include "uiwarp/guid.hpp" // format_guid
#include "uiwarp/netdev_info.hpp"
#include "uiwarp/sysfs_layout.hpp" // the names its readers use too

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace uiwarp::sysfs {

inline constexpr unsigned kUverbsAbiVersion = 1;     // per device; the provider accepts 1..1
inline constexpr unsigned kVerbsClassAbiVersion = 6; // class/infiniband_verbs/abi_version
inline constexpr unsigned kUcmaAbiVersion = 4;

struct DeviceSpec {
  std::string name; // uiwarpN
  NetdevInfo netdev;
  std::string mpa; // its MPA policy overrides: the attribute uiwarp_mpa, if any
};

struct Options {
  std::string host_sysfs = "/sys"; // where to look for kernel RDMA devices to mirror
  bool mirror_kernel = true;
  std::uint64_t netns_inode = 0; // feeds the MAC derived for netdevs without one (lo)
  std::string fw_ver = "0.0.0";
};

struct Node {
  enum Type { File, Dir, Symlink } type = File;
  std::string data; // file contents, or symlink target
  friend bool operator==(const Node&, const Node&) = default;
};

// A tree: relative path -> node. Parent directories of files are implied.
using Tree = std::map<std::string, Node>;

// The MAC the device uses: the netdev's hardware address if it is a non-zero 6-byte one,
// otherwise (lo, tun, ...) a stable locally administered unicast address derived from a hash of
// the netdev name and the network namespace inode, so that uiwarp0 on lo has a non-zero GUID
// that differs between namespaces and does not change between runs.
std::array<std::uint8_t, 6> device_mac(const NetdevInfo& nd, std::uint64_t netns_inode);

// EUI-64 from a MAC (insert ff:fe, flip the universal/local bit), as siw derives its node GUID.
std::uint64_t guid_from_mac(const std::array<std::uint8_t, 6>& mac);

std::string format_gid(const std::array<std::uint8_t, 16>& gid); // 8 groups of 4 hex digits

// The GIDs of a device, index 0 first.
std::vector<std::array<std::uint8_t, 16>> device_gids(const NetdevInfo& nd,
                                                      std::uint64_t netns_inode);

Tree build(const std::vector<DeviceSpec>& devices, const Options& opt);

// A short hex digest of the tree's contents (FNV-1a 64).
std::string digest(const Tree& tree);

// Writes the tree into `dir`, which must not exist yet: it is built in a temporary sibling and
// renamed into place, so nobody sees half a tree. False and *err on failure.
bool write_tree(const Tree& tree, const std::string& dir, std::string* err);

// Publishes the tree as <state_dir>/sysfs (what SYSFS_PATH points at): a symlink to the
// content-addressed directory <state_dir>/sysfs.<digest>, swapped atomically with rename().
// Publishing the tree that is already current does nothing. Trees retired more than a minute ago
// are removed. The caller holds the state lock. Returns the path of <state_dir>/sysfs.
bool publish(const Tree& tree, const std::string& state_dir, std::string* sysfs_path,
             std::string* err);

} // namespace uiwarp::sysfs
