// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// libnl-route-3 (routes, links, addresses) and sock_diag for uiwarpd.
#include "netmon.hpp"

#include "uiwarp/daemon_proto.hpp"

#include <arpa/inet.h>
#include <cstddef>
#include <cstring>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netlink/cache.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/route.h>
#include <unistd.h>
#include <utility>

namespace uiwarp::daemon {

namespace {
// Offsets in the kernel's struct tcp_info (linux/tcp.h, an ABI that only grows; that header
// cannot be included beside netinet/tcp.h): tcpi_bytes_acked and tcpi_bytes_received, since
// Linux 4.1/4.2. glibc's own struct ends before them in some releases (Debian 12's) and goes
// past them in others (sid's), so they are read at these offsets, not through it.
constexpr std::size_t kTcpiBytesAcked = 120, kTcpiBytesReceived = 128;

// The u64 at `off` of an attribute's payload, or 0 where the kernel sent less.
std::uint64_t u64_at(const rtattr* a, std::size_t off) {
  std::uint64_t v = 0;
  if (RTA_PAYLOAD(a) >= off + sizeof v)
    std::memcpy(&v, static_cast<const char*>(RTA_DATA(a)) + off, sizeof v);
  return v;
}
} // namespace

using proto::addr_string;

namespace {

struct Sock {
  nl_sock* s = nl_socket_alloc();
  ~Sock() {
    if (s) nl_socket_free(s);
  }
};
struct Cache {
  nl_cache* c = nullptr;
  ~Cache() {
    if (c) nl_cache_free(c);
  }
};

std::string nl_addr_string(nl_addr* a) {
  char buf[INET6_ADDRSTRLEN + 8] = "";
  if (!a) return "";
  nl_addr2str(a, buf, sizeof buf);
  std::string s = buf;
  // libnl prints a prefix length ("10.0.0.1/24") unless it is a full host address.
  if (auto slash = s.find('/'); slash != std::string::npos) s.resize(slash);
  return s;
}

bool to_sockaddr(nl_addr* a, sockaddr_storage* out) {
  if (!a) return false;
  *out = {};
  socklen_t len = sizeof *out;
  return nl_addr_fill_sockaddr(a, reinterpret_cast<sockaddr*>(out), &len) == 0;
}

std::string ifname(int index) {
  char buf[IF_NAMESIZE] = "";
  return ::if_indextoname(static_cast<unsigned>(index), buf) ? buf : "if" + std::to_string(index);
}

struct RouteReply {
  bool found = false;
  Route route;
  int ifindex = 0;
};

void parse_route(nl_object* obj, void* arg) {
  auto* out = static_cast<RouteReply*>(arg);
  auto* r = reinterpret_cast<rtnl_route*>(obj);
  out->found = true;
  to_sockaddr(rtnl_route_get_pref_src(r), &out->route.src);
  if (rtnl_route_get_nnexthops(r) > 0) {
    rtnl_nexthop* nh = rtnl_route_nexthop_n(r, 0);
    out->ifindex = rtnl_route_nh_get_ifindex(nh);
    out->route.netdev = ifname(out->ifindex);
    out->route.gateway = nl_addr_string(rtnl_route_nh_get_gateway(nh));
  }
}

int on_route_msg(nl_msg* msg, void* arg) {
  nl_msg_parse(msg, parse_route, arg);
  return NL_OK;
}

// A route without a preferred source (rare): the netdev's first address of the family.
bool first_address(int ifindex, int family, sockaddr_storage* out) {
  Sock sk;
  Cache addrs;
  if (!sk.s || nl_connect(sk.s, NETLINK_ROUTE) || rtnl_addr_alloc_cache(sk.s, &addrs.c))
    return false;
  for (nl_object* o = nl_cache_get_first(addrs.c); o; o = nl_cache_get_next(o)) {
    auto* a = reinterpret_cast<rtnl_addr*>(o);
    if (rtnl_addr_get_ifindex(a) == ifindex && rtnl_addr_get_family(a) == family)
      return to_sockaddr(rtnl_addr_get_local(a), out);
  }
  return false;
}

} // namespace

std::optional<Route> route_to(const sockaddr_storage& dst, std::string* err) {
  const void* bytes;
  std::size_t len;
  if (dst.ss_family == AF_INET) {
    bytes = &reinterpret_cast<const sockaddr_in*>(&dst)->sin_addr;
    len = 4;
  } else if (dst.ss_family == AF_INET6) {
    bytes = &reinterpret_cast<const sockaddr_in6*>(&dst)->sin6_addr;
    len = 16;
  } else {
    *err = "not an IP address";
    return std::nullopt;
  }
  Sock sk;
  if (!sk.s || nl_connect(sk.s, NETLINK_ROUTE)) {
    *err = "cannot open an rtnetlink socket";
    return std::nullopt;
  }
  nl_socket_disable_auto_ack(sk.s);
  rtmsg rtm{};
  rtm.rtm_family = static_cast<unsigned char>(dst.ss_family);
  rtm.rtm_dst_len = static_cast<unsigned char>(len * 8);
  nl_msg* msg = nlmsg_alloc_simple(RTM_GETROUTE, 0);
  if (!msg || nlmsg_append(msg, &rtm, sizeof rtm, NLMSG_ALIGNTO) ||
      nla_put(msg, RTA_DST, static_cast<int>(len), bytes) || nl_send_auto(sk.s, msg) < 0) {
    if (msg) nlmsg_free(msg);
    *err = "cannot send the route request";
    return std::nullopt;
  }
  nlmsg_free(msg);
  RouteReply reply;
  nl_socket_modify_cb(sk.s, NL_CB_VALID, NL_CB_CUSTOM, on_route_msg, &reply);
  if (int e = nl_recvmsgs_default(sk.s); e < 0 || !reply.found) {
    // The kernel's answer is an errno (ENETUNREACH, EHOSTUNREACH ...), which libnl folds.
    *err = "no route to " + addr_string(dst) + (e < 0 ? std::string(": ") + nl_geterror(e) : "");
    return std::nullopt;
  }
  if (!reply.route.src.ss_family &&
      !first_address(reply.ifindex, dst.ss_family, &reply.route.src)) {
    *err = "no source address on " + reply.route.netdev + " for " + addr_string(dst);
    return std::nullopt;
  }
  return reply.route;
}

// sock_diag (SOCK_DIAG_BY_FAMILY with inet_diag_req_v2), as ss(8) asks it. libnl-idiag only
// speaks the older TCPDIAG_GETSOCK request, which returns nothing on current kernels.
std::map<TcpKey, TcpState> tcp_connections(std::string* err) {
  std::map<TcpKey, TcpState> out;
  static const char* const states[] = {"?",          "established", "syn-sent",  "syn-recv",
                                       "fin-wait-1", "fin-wait-2",  "time-wait", "close",
                                       "close-wait", "last-ack",    "listen",    "closing"};
  for (int family : {AF_INET, AF_INET6}) {
    int s = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (s < 0) {
      *err = std::string("sock_diag: ") + std::strerror(errno);
      return out;
    }
    struct {
      nlmsghdr nh;
      inet_diag_req_v2 req;
    } q{};
    q.nh.nlmsg_len = sizeof q;
    q.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    q.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    q.req.sdiag_family = static_cast<std::uint8_t>(family);
    q.req.sdiag_protocol = IPPROTO_TCP;
    q.req.idiag_states = ~0u & ~(1u << TCP_LISTEN);
    q.req.idiag_ext = 1 << (INET_DIAG_INFO - 1);
    if (::send(s, &q, sizeof q, 0) < 0) {
      *err = std::string("sock_diag: ") + std::strerror(errno);
      ::close(s);
      return out;
    }
    alignas(nlmsghdr) char buf[32768];
    for (bool done = false; !done;) {
      ssize_t n = ::recv(s, buf, sizeof buf, 0);
      if (n < 0) {
        *err = std::string("sock_diag: ") + std::strerror(errno);
        ::close(s);
        return {};
      }
      if (n == 0) break;
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n));
           h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
          // An error, not "no connections" (the daemon forgets the connections the answer
          // lacks): ENOENT where the kernel has no TCP handler for sock_diag, since inet_diag
          // and tcp_diag are modules that the kernel loads through modprobe, and a system
          // without it (an initramfs such as tests/interop/siw's guest) never gets them.
          int e = static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
          if (e != 0) {
            *err = std::string("sock_diag: ") + std::strerror(-e);
            ::close(s);
            return {};
          }
          done = true;
          break;
        }
        if (h->nlmsg_type == NLMSG_DONE) {
          done = true;
          break;
        }
        auto* d = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
        sockaddr_storage l{}, p{};
        l.ss_family = p.ss_family = d->idiag_family;
        if (d->idiag_family == AF_INET) {
          auto* a = reinterpret_cast<sockaddr_in*>(&l);
          auto* b = reinterpret_cast<sockaddr_in*>(&p);
          std::memcpy(&a->sin_addr, d->id.idiag_src, 4);
          std::memcpy(&b->sin_addr, d->id.idiag_dst, 4);
          a->sin_port = d->id.idiag_sport; // network order, as in sockaddr
          b->sin_port = d->id.idiag_dport;
        } else {
          auto* a = reinterpret_cast<sockaddr_in6*>(&l);
          auto* b = reinterpret_cast<sockaddr_in6*>(&p);
          std::memcpy(&a->sin6_addr, d->id.idiag_src, 16);
          std::memcpy(&b->sin6_addr, d->id.idiag_dst, 16);
          a->sin6_port = d->id.idiag_sport;
          b->sin6_port = d->id.idiag_dport;
        }
        TcpState t;
        t.state = d->idiag_state < std::size(states) ? states[d->idiag_state] : "?";
        t.recv_queue = d->idiag_rqueue;
        t.send_queue = d->idiag_wqueue;
        int len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *d));
        for (auto* a = reinterpret_cast<rtattr*>(d + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
          if (a->rta_type != INET_DIAG_INFO) continue;
          tcp_info ti{};
          std::memcpy(&ti, RTA_DATA(a), std::min<std::size_t>(sizeof ti, RTA_PAYLOAD(a)));
          t.retransmits = ti.tcpi_total_retrans;
          t.rtt_us = ti.tcpi_rtt;
          t.bytes_sent = u64_at(a, kTcpiBytesAcked);
          t.bytes_received = u64_at(a, kTcpiBytesReceived);
        }
        out[{addr_string(l), addr_string(p)}] = t;
      }
    }
    ::close(s);
  }
  return out;
}

LinkMonitor::LinkMonitor() {
  int e = nl_cache_mngr_alloc(nullptr, NETLINK_ROUTE, NL_AUTO_PROVIDE, &mngr_);
  if (!e) e = nl_cache_mngr_add(mngr_, "route/link", on_change, this, &links_);
  if (!e) e = nl_cache_mngr_add(mngr_, "route/addr", on_change, this, &addrs_);
  if (e) {
    err_ = std::string("cannot watch links and addresses: ") + nl_geterror(e);
    if (mngr_) nl_cache_mngr_free(mngr_);
    mngr_ = nullptr;
    return;
  }
  for (nl_object* o = nl_cache_get_first(links_); o; o = nl_cache_get_next(o)) {
    auto* l = reinterpret_cast<rtnl_link*>(o);
    unsigned flags = rtnl_link_get_flags(l);
    up_[rtnl_link_get_ifindex(l)] = (flags & IFF_UP) && (flags & IFF_RUNNING);
  }
}

LinkMonitor::~LinkMonitor() {
  if (mngr_) nl_cache_mngr_free(mngr_); // frees the caches it manages
}

int LinkMonitor::fd() const { return mngr_ ? nl_cache_mngr_get_fd(mngr_) : -1; }

std::vector<std::string> LinkMonitor::process() {
  if (mngr_) nl_cache_mngr_data_ready(mngr_);
  return std::exchange(changes_, {});
}

void LinkMonitor::on_change(nl_cache*, nl_object* obj, int action, void* arg) {
  auto* self = static_cast<LinkMonitor*>(arg);
  std::string type = nl_object_get_type(obj);
  if (type == "route/link") {
    auto* l = reinterpret_cast<rtnl_link*>(obj);
    int index = rtnl_link_get_ifindex(l);
    const char* name = rtnl_link_get_name(l);
    std::string n = name ? name : ifname(index);
    if (action == NL_ACT_DEL) {
      self->up_.erase(index);
      self->changes_.push_back("link " + n + " removed");
      return;
    }
    unsigned flags = rtnl_link_get_flags(l);
    bool up = (flags & IFF_UP) && (flags & IFF_RUNNING);
    auto it = self->up_.find(index);
    if (it == self->up_.end() || it->second != up)
      self->changes_.push_back("link " + n + (up ? " up" : " down"));
    self->up_[index] = up;
  } else if (type == "route/addr" && (action == NL_ACT_NEW || action == NL_ACT_DEL)) {
    auto* a = reinterpret_cast<rtnl_addr*>(obj);
    self->changes_.push_back("address " + nl_addr_string(rtnl_addr_get_local(a)) +
                             (action == NL_ACT_NEW ? " added on " : " removed from ") +
                             ifname(rtnl_addr_get_ifindex(a)));
  }
}

std::vector<std::string> LinkMonitor::snapshot() const {
  std::vector<std::string> out;
  if (!mngr_) return out;
  for (nl_object* o = nl_cache_get_first(links_); o; o = nl_cache_get_next(o)) {
    auto* l = reinterpret_cast<rtnl_link*>(o);
    int index = rtnl_link_get_ifindex(l);
    unsigned flags = rtnl_link_get_flags(l);
    std::string line = std::string(rtnl_link_get_name(l) ? rtnl_link_get_name(l) : "?") +
                       ((flags & IFF_UP) && (flags & IFF_RUNNING) ? " up" : " down");
    for (nl_object* a = nl_cache_get_first(addrs_); a; a = nl_cache_get_next(a)) {
      auto* ad = reinterpret_cast<rtnl_addr*>(a);
      if (rtnl_addr_get_ifindex(ad) == index) line += " " + nl_addr_string(rtnl_addr_get_local(ad));
    }
    out.push_back(line);
  }
  return out;
}

} // namespace uiwarp::daemon
