// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The generated sysfs tree (see uiwarp/sysfs.hpp for its layout and the reasons).
#include "uiwarp/sysfs.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace uiwarp::sysfs {

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

std::uint64_t fnv1a(std::uint64_t h, const void* data, size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * kFnvPrime;
  return h;
}

std::uint64_t fnv1a(std::uint64_t h, const std::string& s) {
  return fnv1a(h, s.data(), s.size() + 1); // with the NUL, so fields cannot run together
}

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// Names in a directory, sorted; empty if it cannot be read.
std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_first_line(const std::string& path) {
  std::string s;
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return s;
  char buf[256];
  if (std::fgets(buf, sizeof buf, f)) s = buf;
  std::fclose(f);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r'))
    s.pop_back();
  return s;
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  if (!realpath(p.c_str(), buf)) return {};
  return buf;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Mirrors the host's kernel RDMA devices into the tree as symlinks; returns the number the first
// uiwarp uverbs entry gets (one past the highest kernel uverbsN).
unsigned mirror_kernel_devices(Tree& t, const Options& opt) {
  unsigned next_uverbs = 0;
  if (!opt.mirror_kernel) return next_uverbs;
  const std::string ib = opt.host_sysfs + "/" + kDevicesDir;
  const std::string uv = opt.host_sysfs + "/" + kUverbsDir;
  for (const std::string& name : list_dir(ib)) {
    if (starts_with(name, "uiwarp")) continue; // never shadow our own names
    std::string target = real_path(ib + "/" + name);
    if (!target.empty()) t[std::string(kDevicesDir) + "/" + name] = Node{Node::Symlink, target};
  }
  for (const std::string& name : list_dir(uv)) {
    if (name == "abi_version") continue;
    unsigned n;
    char tail;
    if (std::sscanf(name.c_str(), "uverbs%u%c", &n, &tail) == 1 && n + 1 > next_uverbs)
      next_uverbs = n + 1;
    if (starts_with(read_first_line(uv + "/" + name + "/ibdev"), "uiwarp")) continue;
    std::string target = real_path(uv + "/" + name);
    if (!target.empty()) t[std::string(kUverbsDir) + "/" + name] = Node{Node::Symlink, target};
  }
  return next_uverbs;
}

void put(Tree& t, const std::string& path, const std::string& content) {
  t[path] = Node{Node::File, content + "\n"};
}

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

bool make_dirs(const std::string& path, std::string* err) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    *err = path + ": " + ec.message();
    return false;
  }
  return true;
}

} // namespace

std::array<std::uint8_t, 6> device_mac(const NetdevInfo& nd, std::uint64_t netns_inode) {
  std::array<std::uint8_t, 6> mac{};
  if (nd.hwaddr.size() == 6) {
    std::copy(nd.hwaddr.begin(), nd.hwaddr.end(), mac.begin());
    for (std::uint8_t b : mac)
      if (b) return mac;
  }
  // No usable hardware address (lo has 00:00:00:00:00:00, tun none): derive a stable one from
  // the netdev name and the namespace, locally administered (bit 1) and unicast (bit 0 clear).
  std::uint64_t h = fnv1a(kFnvOffset, nd.name);
  h = fnv1a(h, std::to_string(netns_inode));
  for (int i = 0; i < 6; ++i)
    mac[i] = static_cast<std::uint8_t>(h >> (8 * i));
  mac[0] = static_cast<std::uint8_t>((mac[0] & 0xfc) | 0x02);
  return mac;
}

std::uint64_t guid_from_mac(const std::array<std::uint8_t, 6>& mac) {
  const std::uint8_t eui[8] = {
      static_cast<std::uint8_t>(mac[0] ^ 0x02), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
  std::uint64_t g = 0;
  for (std::uint8_t b : eui)
    g = (g << 8) | b;
  return g;
}

std::string format_gid(const std::array<std::uint8_t, 16>& gid) {
  std::string s;
  char buf[8];
  for (int i = 0; i < 16; i += 2) {
    std::snprintf(buf, sizeof buf, "%s%02x%02x", i ? ":" : "", gid[i], gid[i + 1]);
    s += buf;
  }
  return s;
}

std::vector<std::array<std::uint8_t, 16>> device_gids(const NetdevInfo& nd,
                                                      std::uint64_t netns_inode) {
  constexpr size_t kMaxGids = 128;
  std::vector<std::array<std::uint8_t, 16>> gids;
  // GID 0: fe80::/64 with the EUI-64 of the MAC (the node GUID) as interface id, i.e. the IPv6
  // link-local address of that MAC. The kernel's iWARP drivers (siw, cxgb4, i40iw) put the bare
  // MAC in bytes 0..5 instead, but ibv_devinfo does not print a GID whose interface id is zero,
  // and iWARP never puts GIDs on the wire, so the visible form is the better one.
  std::array<std::uint8_t, 16> g{};
  g[0] = 0xfe;
  g[1] = 0x80;
  const std::uint64_t guid = guid_from_mac(device_mac(nd, netns_inode));
  for (int i = 0; i < 8; ++i)
    g[8 + i] = static_cast<std::uint8_t>(guid >> (56 - 8 * i));
  gids.push_back(g);
  for (const IpAddress& ip : nd.addrs) {
    if (gids.size() == kMaxGids) break;
    g = {};
    if (ip.family == AF_INET) {
      g[10] = g[11] = 0xff; // ::ffff:a.b.c.d
      std::copy(ip.addr.begin(), ip.addr.begin() + 4, g.begin() + 12);
    } else {
      g = ip.addr;
    }
    if (std::find(gids.begin(), gids.end(), g) == gids.end()) gids.push_back(g);
  }
  return gids;
}

Tree build(const std::vector<DeviceSpec>& devices, const Options& opt) {
  Tree t;
  t[kDevicesDir] = Node{Node::Dir, {}};
  t[kUverbsDir] = Node{Node::Dir, {}};
  put(t, std::string(kUverbsDir) + "/abi_version", std::to_string(kVerbsClassAbiVersion));
  put(t, "class/misc/rdma_cm/abi_version", std::to_string(kUcmaAbiVersion));
  unsigned uverbs = mirror_kernel_devices(t, opt);

  for (const DeviceSpec& d : devices) {
    const NetdevInfo& nd = d.netdev;
    const std::string dev = std::string(kDevicesDir) + "/" + d.name + "/";
    const std::uint64_t guid = guid_from_mac(device_mac(nd, opt.netns_inode));
    put(t, dev + "node_type", "4: RNIC");
    put(t, dev + kAttrNodeGuid, format_guid(guid));
    put(t, dev + "sys_image_guid", format_guid(guid));
    put(t, dev + "node_desc", "uiwarp " + nd.name);
    put(t, dev + "fw_ver", opt.fw_ver);
    put(t, dev + "hw_rev", "0x0");
    put(t, dev + "board_id", "uiwarp");
    put(t, dev + kAttrNetdev, nd.name);
    if (!d.mpa.empty()) put(t, dev + kAttrMpa, d.mpa); // the shim passes it to uiwarpd
    // As a NIC's PCI device lists its netdev; rdma-core's tests find the interface (and from it
    // the IP address for their RDMA CM tests) here. The netdev's own sysfs directory is the
    // namespace's /sys/class/net/<nd>.
    t[dev + "device/net/" + nd.name] = Node{Node::Symlink, "/sys/class/net/" + nd.name};

    const std::string port = dev + "ports/1/";
    const bool active = nd.port_active();
    put(t, port + "state", active ? "4: ACTIVE" : "1: DOWN");
    put(t, port + "phys_state", active ? "5: LinkUp" : "3: Disabled");
    put(t, port + "link_layer", "Ethernet");
    put(t, port + "lid", "0x0");
    put(t, port + "sm_lid", "0x0");
    put(t, port + "lid_mask_count", "0");
    put(t, port + "sm_sl", "0");
    put(t, port + "cap_mask", "0x00000000");
    put(t, port + "pkeys/0", "0xffff");
    auto gids = device_gids(nd, opt.netns_inode);
    for (size_t i = 0; i < gids.size(); ++i) {
      const std::string idx = std::to_string(i);
      put(t, dev + kAttrPortGids + idx, format_gid(gids[i]));
      // The kernel shows "IB/RoCE v1" for the GIDs of iWARP ports; libibverbs then reports them
      // as IBV_GID_TYPE_ROCE_V1 on an Ethernet link layer, and ibv_devinfo -v prints them.
      put(t, port + "gid_attrs/types/" + idx, "IB/RoCE v1");
      put(t, port + "gid_attrs/ndevs/" + idx, nd.name);
    }

    std::string uv = std::string(kUverbsDir) + "/uverbs" + std::to_string(uverbs++) + "/";
    while (t.count(uv.substr(0, uv.size() - 1))) // a mirrored entry with that name
      uv = std::string(kUverbsDir) + "/uverbs" + std::to_string(uverbs++) + "/";
    put(t, uv + "ibdev", d.name);
    put(t, uv + "dev", kUverbsDev);
    put(t, uv + "abi_version", std::to_string(kUverbsAbiVersion));
  }
  return t;
}

std::string digest(const Tree& tree) {
  std::uint64_t h = kFnvOffset;
  for (const auto& [path, node] : tree) {
    h = fnv1a(h, std::to_string(static_cast<int>(node.type)));
    h = fnv1a(h, path);
    h = fnv1a(h, node.data);
  }
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool write_tree(const Tree& tree, const std::string& dir, std::string* err) {
  const std::string tmp = dir + ".tmp." + std::to_string(getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (::mkdir(tmp.c_str(), 0755) != 0) {
    *err = sys_error(tmp);
    return false;
  }
  auto fail = [&](const std::string& e) {
    *err = e;
    std::error_code ec2;
    fs::remove_all(tmp, ec2);
    return false;
  };
  for (const auto& [rel, node] : tree) {
    const std::string path = tmp + "/" + rel;
    const std::string parent = fs::path(path).parent_path().string();
    if (!make_dirs(parent, err)) return fail(*err);
    switch (node.type) {
    case Node::Dir:
      if (!make_dirs(path, err)) return fail(*err);
      break;
    case Node::Symlink:
      if (::symlink(node.data.c_str(), path.c_str()) != 0) return fail(sys_error(path));
      break;
    case Node::File: {
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
      if (fd < 0) return fail(sys_error(path));
      bool ok = write_all(fd, node.data);
      if (::close(fd) != 0) ok = false;
      if (!ok) return fail(sys_error(path));
      break;
    }
    }
  }
  if (::rename(tmp.c_str(), dir.c_str()) != 0) return fail(sys_error("rename to " + dir));
  return true;
}

bool publish(const Tree& tree, const std::string& state_dir, std::string* sysfs_path,
             std::string* err) {
  const std::string link = state_dir + "/sysfs";
  const std::string name = "sysfs." + digest(tree);
  const std::string target = state_dir + "/" + name;
  *sysfs_path = link;

  char cur[PATH_MAX];
  ssize_t n = ::readlink(link.c_str(), cur, sizeof cur - 1);
  std::string current = n > 0 ? std::string(cur, static_cast<size_t>(n)) : std::string();
  struct stat st;
  const bool target_exists = ::stat(target.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (current == name && target_exists) return true; // already published

  if (!target_exists) {
    std::error_code ec;
    fs::remove_all(target, ec);
    if (!write_tree(tree, target, err)) return false;
  }
  // A plain directory in the way (not made by us): move it aside, it gets collected below.
  if (::lstat(link.c_str(), &st) == 0 && !S_ISLNK(st.st_mode)) {
    const std::string aside = state_dir + "/sysfs.old." + std::to_string(getpid());
    if (::rename(link.c_str(), aside.c_str()) != 0) {
      *err = sys_error("moving " + link + " aside");
      return false;
    }
  }
  const std::string tmp_link = state_dir + "/.sysfs.lnk." + std::to_string(getpid());
  ::unlink(tmp_link.c_str());
  if (::symlink(name.c_str(), tmp_link.c_str()) != 0) {
    *err = sys_error(tmp_link);
    return false;
  }
  if (::rename(tmp_link.c_str(), link.c_str()) != 0) {
    *err = sys_error("rename to " + link);
    ::unlink(tmp_link.c_str());
    return false;
  }
  // Mark the tree just retired with the time of retirement, then collect trees (and leftover
  // temporary trees) retired over a minute ago: a process that started reading a tree before
  // the swap has that long to finish.
  if (!current.empty() && current != name && current.find('/') == std::string::npos)
    ::utimensat(AT_FDCWD, (state_dir + "/" + current).c_str(), nullptr, 0);
  const std::time_t now = std::time(nullptr);
  for (const std::string& e : list_dir(state_dir)) {
    if (!starts_with(e, "sysfs.") || e == name) continue;
    const std::string p = state_dir + "/" + e;
    if (::lstat(p.c_str(), &st) != 0 || now - st.st_mtime < 60) continue;
    std::error_code ec;
    fs::remove_all(p, ec);
  }
  return true;
}

} // namespace uiwarp::sysfs
