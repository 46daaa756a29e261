// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Per-network-namespace state: the state dir, links.conf and regenerating the sysfs tree.
#include "uiwarp/state.hpp"

#include "uiwarp/env.hpp"
#include "uiwarp/netdev.hpp"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef UIWARP_VERSION_STRING
#define UIWARP_VERSION_STRING "0.0.0"
#endif

namespace uiwarp {

namespace {

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// mkdir -p with mode 0700 for what it creates.
bool make_private_dirs(const std::string& path, std::string* err) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) {
      *err = sys_error("creating " + cur);
      return false;
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *err = path + ": not a directory";
    return false;
  }
  return true;
}

} // namespace

std::string state_dir(std::string* err) {
  std::string base;
  if (const char* d = Env::get().nonempty(EnvVar::StateDir)) {
    base = d;
  } else if (const char* x = Env::get().nonempty(EnvVar::XdgRuntimeDir)) {
    base = x;
  } else {
    // /tmp is shared: the directory must be ours and private, not something planted for us.
    base = "/tmp/uiwarp-" + std::to_string(::getuid());
    if (::mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) {
      *err = sys_error("creating " + base);
      return {};
    }
    struct stat st;
    if (::lstat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
        (st.st_mode & 022)) {
      *err = base + " is not a private directory of this user; set UIWARP_STATE_DIR";
      return {};
    }
  }
  while (base.size() > 1 && base.back() == '/')
    base.pop_back();
  const std::uint64_t ino = current_netns_inode();
  if (ino == 0) {
    *err = "cannot stat /proc/self/ns/net (is /proc mounted?)";
    return {};
  }
  std::string dir = base + "/netns-" + std::to_string(ino);
  if (!make_private_dirs(dir, err)) return {};
  return dir;
}

StateLock::StateLock(const std::string& dir) {
  const std::string path = dir + "/lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    err_ = sys_error(path);
    return;
  }
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    err_ = sys_error("locking " + path);
    ::close(fd_);
    fd_ = -1;
    return;
  }
}

StateLock::~StateLock() {
  if (fd_ >= 0) ::close(fd_); // releases the flock
}

bool valid_link_name(const std::string& name, std::string* err) {
  constexpr std::string_view prefix = "uiwarp";
  if (name.rfind(prefix, 0) != 0) {
    *err = "device name '" + name + "' must start with 'uiwarp' (e.g. uiwarp1)";
    return false;
  }
  if (name.size() > 63) {
    *err = "device name '" + name + "' is longer than 63 characters";
    return false;
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      *err = "device name '" + name + "' may contain only letters, digits and '_'";
      return false;
    }
  }
  return true;
}

bool read_links(const std::string& dir, std::vector<Link>* links, std::string* err) {
  links->clear();
  const std::string path = dir + "/links.conf";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return true;
  std::ifstream in(path);
  if (!in) {
    *err = sys_error(path);
    return false;
  }
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream ls(line);
    Link l;
    std::string option;
    if (!(ls >> l.name)) continue; // blank
    if (!(ls >> l.netdev)) {
      *err = path + ":" + std::to_string(lineno) + ": expected 'NAME NETDEV [KEY=VALUE...]'";
      return false;
    }
    while (ls >> option) {
      if (option.find('=') == std::string::npos) {
        *err = path + ":" + std::to_string(lineno) + ": expected KEY=VALUE, not '" + option + "'";
        return false;
      }
      l.mpa += (l.mpa.empty() ? "" : " ") + option;
    }
    links->push_back(l);
  }
  return true;
}

bool write_links(const std::string& dir, const std::vector<Link>& links, std::string* err) {
  const std::string path = dir + "/links.conf";
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const Link& l : links)
      out << l.name << ' ' << l.netdev << (l.mpa.empty() ? "" : " ") << l.mpa << '\n';
    out.flush();
    if (!out) {
      *err = sys_error(tmp);
      ::unlink(tmp.c_str());
      return false;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *err = sys_error("rename to " + path);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

std::vector<Link> effective_links(const std::vector<Link>& configured) {
  if (!configured.empty()) return configured;
  return {Link{kDefaultLinkName, kDefaultLinkNetdev, {}}};
}

bool regenerate_sysfs(const std::string& dir, std::string* sysfs_path,
                      std::vector<std::string>* warnings, std::string* err) {
  StateLock lock(dir);
  if (!lock.ok()) {
    *err = lock.error();
    return false;
  }
  std::vector<Link> links;
  if (!read_links(dir, &links, err)) return false;
  std::vector<sysfs::DeviceSpec> devices;
  for (const Link& l : effective_links(links)) {
    std::string nerr;
    auto nd = query_netdev(l.netdev, &nerr);
    if (!nd) {
      warnings->push_back("device " + l.name + " left out: " + nerr);
      continue;
    }
    devices.push_back(sysfs::DeviceSpec{l.name, std::move(*nd), l.mpa});
  }
  sysfs::Options opt;
  opt.netns_inode = current_netns_inode();
  opt.fw_ver = UIWARP_VERSION_STRING;
  if (const char* h = Env::get().nonempty(EnvVar::HostSysfs)) opt.host_sysfs = h;
  return sysfs::publish(sysfs::build(devices, opt), dir, sysfs_path, err);
}

} // namespace uiwarp
