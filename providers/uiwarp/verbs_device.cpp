// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// query_device_ex and query_port: honest limits, and the port state taken from
// the network device the uiwarp device is bound to.
#include "provider.hpp"
#include "uiwarp/guid.hpp"
#include "uiwarp/sysfs_layout.hpp"
#include "uiwarp_version.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <endian.h>
#include <fstream>
#include <net/if.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace uiwarp {

namespace {

std::uint64_t read_guid(const Device& dev, const char* file) {
  return parse_guid(dev.attr(file)).value_or(0);
}

int gid_count(const Device& dev) {
  int n = 0;
  while (n < 128 && !dev.attr(sysfs::kAttrPortGids + std::to_string(n)).empty())
    ++n;
  return std::max(n, 1);
}

struct NetdevInfo {
  bool up = false;
  int mtu = 1500;
  int speed_mbps = 0;
};

NetdevInfo netdev_info(const std::string& name) {
  NetdevInfo info;
  if (name.empty() || name.size() >= IFNAMSIZ) return info;
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return info;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name.c_str(), name.size());
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) == 0)
    info.up = (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING);
  if (::ioctl(s, SIOCGIFMTU, &ifr) == 0) info.mtu = ifr.ifr_mtu;
  ::close(s);
  std::ifstream speed("/sys/class/net/" + name + "/speed");
  if (!(speed >> info.speed_mbps) || info.speed_mbps < 0) info.speed_mbps = 0;
  return info;
}

ibv_mtu ib_mtu(int mtu) {
  // The largest IB MTU that fits the netdev's (what iWARP drivers report).
  if (mtu >= 4096) return IBV_MTU_4096;
  if (mtu >= 2048) return IBV_MTU_2048;
  if (mtu >= 1024) return IBV_MTU_1024;
  if (mtu >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

// IB width x speed closest to the netdev's speed; loopback and virtual devices
// report none, and get 1X QDR (10 Gb/s).
void ib_rate(int mbps, ibv_port_attr* a) {
  struct Rate {
    int mbps;
    std::uint8_t width, speed;
  };
  static constexpr Rate kRates[] = {
      {400000, 2, 128}, {200000, 2, 64}, {100000, 2, 32}, {50000, 2, 16}, {40000, 2, 4},
      {25000, 1, 32},   {10000, 1, 4},   {5000, 1, 2},    {2500, 1, 1},
  };
  a->active_width = 1;
  a->active_speed = 4;
  for (const Rate& r : kRates) {
    if (mbps >= r.mbps) {
      a->active_width = r.width;
      a->active_speed = r.speed;
      return;
    }
  }
}

} // namespace

int query_device_ex(ibv_context* ibctx, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size) noexcept {
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  Context* ctx = to_ctx(ibctx);
  ibv_device_attr_ex a{};
  ibv_device_attr& o = a.orig_attr;
  std::snprintf(o.fw_ver, sizeof o.fw_ver, "%s", UIWARP_VERSION);
  o.node_guid = htobe64(read_guid(*ctx->dev, sysfs::kAttrNodeGuid));
  o.sys_image_guid = o.node_guid;
  o.max_mr_size = Limits::kMaxMrSize;
  o.page_size_cap = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  o.vendor_id = Limits::kVendorId;
  o.vendor_part_id = Limits::kVendorPartId;
  o.hw_ver = 0;
  o.max_qp = Limits::kMaxQp;
  o.max_qp_wr = Limits::kMaxQpWr;
  // Memory windows of type 1 and 2B (bound to the QP that binds them; verbs_mw.cpp).
  o.device_cap_flags =
      IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  o.max_sge = Limits::kMaxSge;
  o.max_sge_rd = Limits::kMaxSge;
  o.max_cq = Limits::kMaxCq;
  o.max_cqe = Limits::kMaxCqe;
  o.max_mr = Limits::kMaxMr;
  o.max_pd = Limits::kMaxPd;
  o.max_qp_rd_atom = Limits::kMaxOrdIrd;
  o.max_qp_init_rd_atom = Limits::kMaxOrdIrd;
  o.max_res_rd_atom = Limits::kMaxOrdIrd * Limits::kMaxQp;
  // RFC 7306 atomics, on connections to uiwarp peers (a uiwarp extension): atomic toward every
  // other Atomic on this device, whichever QP carries it (libiwarp/src/atomic_exec.cpp).
  o.atomic_cap = IBV_ATOMIC_HCA;
  o.max_mw = Limits::kMaxMr; // windows and regions share the STag space
  o.max_srq = Limits::kMaxSrq;
  o.max_srq_wr = Limits::kMaxSrqWr;
  o.max_srq_sge = Limits::kMaxSge;
  o.max_pkeys = 1;
  o.phys_port_cnt = 1;
  // The extended fields libibverbs' kernel path fills from the same answer (pyverbs reads
  // phys_port_cnt_ex, not the 8-bit phys_port_cnt).
  a.phys_port_cnt_ex = o.phys_port_cnt;
  a.device_cap_flags_ex = o.device_cap_flags;
  // Only as much as the caller's structure holds (older callers pass less).
  std::memcpy(attr, &a, std::min(attr_size, sizeof a));
  return 0;
}

int query_port(ibv_context* ibctx, uint8_t port, ibv_port_attr* attr) noexcept {
  if (port != 1 || !attr) return EINVAL;
  Context* ctx = to_ctx(ibctx);
  NetdevInfo n = netdev_info(ctx->dev->netdev);
  *attr = ibv_port_attr{};
  attr->state = n.up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = ib_mtu(n.mtu);
  attr->gid_tbl_len = gid_count(*ctx->dev);
  attr->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP;
  attr->max_msg_sz = Limits::kMaxMsg;
  attr->pkey_tbl_len = 1;
  attr->max_vl_num = 1;
  attr->phys_state = n.up ? 5 : 3; // LinkUp / Disabled
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  ib_rate(n.speed_mbps, attr);
  return 0;
}

} // namespace uiwarp
