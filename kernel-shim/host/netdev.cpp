// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Netdev facts through rtnetlink (libnl-route-3).
#include "uiwarp/netdev.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <net/if.h>
#include <netinet/in.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <sys/socket.h>
#include <sys/stat.h>

namespace uiwarp {

namespace {

struct SockDeleter {
  void operator()(nl_sock* s) const { nl_socket_free(s); }
};
struct LinkDeleter {
  void operator()(rtnl_link* l) const { rtnl_link_put(l); }
};
struct CacheDeleter {
  void operator()(nl_cache* c) const { nl_cache_free(c); }
};

} // namespace

std::optional<NetdevInfo> query_netdev(const std::string& name, std::string* err) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    *err = "invalid netdev name '" + name + "'";
    return std::nullopt;
  }
  std::unique_ptr<nl_sock, SockDeleter> sk(nl_socket_alloc());
  if (!sk) {
    *err = "out of memory";
    return std::nullopt;
  }
  if (int rc = nl_connect(sk.get(), NETLINK_ROUTE); rc < 0) {
    *err = std::string("rtnetlink: ") + nl_geterror(rc);
    return std::nullopt;
  }
  rtnl_link* raw_link = nullptr;
  if (int rc = rtnl_link_get_kernel(sk.get(), 0, name.c_str(), &raw_link); rc < 0) {
    *err = rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NODEV
               ? "netdev '" + name + "' not found"
               : "netdev '" + name + "': " + nl_geterror(rc);
    return std::nullopt;
  }
  std::unique_ptr<rtnl_link, LinkDeleter> link(raw_link);

  NetdevInfo nd;
  nd.name = name;
  nd.ifindex = rtnl_link_get_ifindex(link.get());
  if (nl_addr* a = rtnl_link_get_addr(link.get())) {
    auto* p = static_cast<const std::uint8_t*>(nl_addr_get_binary_addr(a));
    nd.hwaddr.assign(p, p + nl_addr_get_len(a));
  }
  nd.mtu = rtnl_link_get_mtu(link.get());
  nd.flags = rtnl_link_get_flags(link.get());
  nd.operstate = rtnl_link_get_operstate(link.get());

  nl_cache* raw_cache = nullptr;
  if (int rc = rtnl_addr_alloc_cache(sk.get(), &raw_cache); rc < 0) {
    *err = std::string("rtnetlink address dump: ") + nl_geterror(rc);
    return std::nullopt;
  }
  std::unique_ptr<nl_cache, CacheDeleter> cache(raw_cache);
  for (nl_object* o = nl_cache_get_first(cache.get()); o; o = nl_cache_get_next(o)) {
    auto* ra = reinterpret_cast<rtnl_addr*>(o);
    if (rtnl_addr_get_ifindex(ra) != nd.ifindex) continue;
    nl_addr* local = rtnl_addr_get_local(ra);
    if (!local) continue;
    IpAddress ip;
    ip.family = rtnl_addr_get_family(ra);
    unsigned len = nl_addr_get_len(local);
    if ((ip.family == AF_INET && len != 4) || (ip.family == AF_INET6 && len != 16) ||
        (ip.family != AF_INET && ip.family != AF_INET6))
      continue;
    std::memcpy(ip.addr.data(), nl_addr_get_binary_addr(local), len);
    ip.prefixlen = static_cast<unsigned>(rtnl_addr_get_prefixlen(ra));
    nd.addrs.push_back(ip);
  }
  std::sort(nd.addrs.begin(), nd.addrs.end(), [](const IpAddress& a, const IpAddress& b) {
    if (a.family != b.family) return a.family == AF_INET; // IPv4 first
    return a.addr < b.addr;
  });
  nd.addrs.erase(std::unique(nd.addrs.begin(), nd.addrs.end(),
                             [](const IpAddress& a, const IpAddress& b) {
                               return a.family == b.family && a.addr == b.addr;
                             }),
                 nd.addrs.end());
  return nd;
}

std::uint64_t current_netns_inode() {
  struct stat st;
  if (stat("/proc/self/ns/net", &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_ino);
}

} // namespace uiwarp
