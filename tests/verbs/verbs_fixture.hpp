// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The shared fixture of the local verbs tests (uiwarp-verbs-tests): what uiwarp advertises,
// a Fixture that opens uiwarp0 with a PD and a page-aligned buffer for each case, and the
// helpers the cases share (QP state changes as librdmacm makes them, CQ draining, a verb run
// on another thread with a deadline). Public libibverbs API only: the tests link neither the
// provider nor libiwarp.
//
// Tags: every case is [verbs] and names its verb family ([device], [pd], [mr], [cq], [async],
// [channel], [qp], [post], [srq], [teardown]). Cases tagged [shim] also need libuiwarp-shim.so
// (it emulates the uverbs CREATE_COMP_CHANNEL write that ibv_create_comp_channel issues); run
// them under uiwarp-run. Without the shim, select '~[shim]'. The exact command lines are at
// the top of tests/verbs/CMakeLists.txt.
#pragma once

#include "catch_compat.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <memory>
#include <poll.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace verbs_test {

constexpr const char* kDevName = "uiwarp0";

// What uiwarp advertises (providers/uiwarp/provider.hpp, struct Limits). The
// vendor id is fixed on purpose: perftest and others key on it.
constexpr std::uint32_t kVendorId = 0x7569;
constexpr std::uint32_t kVendorPartId = 0x7770;
constexpr int kMaxQp = 16384;
constexpr int kMaxQpWr = 16384;
constexpr int kMaxSge = 16;
constexpr std::uint32_t kMaxInline = 256;
constexpr int kMaxCq = 16384;
constexpr int kMaxCqe = 1 << 20;
constexpr std::uint64_t kMaxMrSize = 1ull << 40;
constexpr int kMaxOrdIrd = 128;
constexpr int kMaxSrq = 16384;
constexpr int kMaxSrqWr = 16384;

// IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT: what the iWARP CM's
// INIT_QP_ATTR returns for INIT and RTR (docs/architecture.md).
constexpr int kCmMask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT;
constexpr int kRemoteAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

inline ibv_device* find_uiwarp(ibv_device** list, int n) {
  for (int i = 0; i < n; ++i)
    if (std::string(ibv_get_device_name(list[i])) == kDevName) return list[i];
  return nullptr;
}

// Waits until `fd` is readable; false after `ms` milliseconds.
inline bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

// Every case gets its own context and PD; objects a case creates it destroys
// itself, in dependency order, checking each return value.
struct Fixture {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  // Page-aligned, so that at(off) and an iova share their page offset (ib_uverbs_reg_mr).
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char[], Free> buf{static_cast<char*>(std::aligned_alloc(4096, 64 * 1024))};

  Fixture() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    REQUIRE(list != nullptr);
    ibv_device* dev = find_uiwarp(list, n);
    if (dev) ctx = ibv_open_device(dev);
    ibv_free_device_list(list); // an open context keeps its device
    INFO("device " << kDevName << " (SYSFS_PATH, RDMAV_DRIVERS, uverbs node or shim)");
    REQUIRE(dev != nullptr);
    REQUIRE(ctx != nullptr);
    pd = ibv_alloc_pd(ctx);
    REQUIRE(pd != nullptr);
  }
  ~Fixture() {
    if (pd) ibv_dealloc_pd(pd);
    if (ctx) ibv_close_device(ctx);
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  void* at(std::size_t off) { return buf.get() + off; }
  std::uint64_t addr(std::size_t off) { return reinterpret_cast<std::uintptr_t>(at(off)); }

  ibv_cq* cq(int cqe = 16) {
    ibv_cq* c = ibv_create_cq(ctx, cqe, nullptr, nullptr, 0);
    REQUIRE(c != nullptr);
    return c;
  }

  static ibv_qp_cap caps() {
    ibv_qp_cap c{};
    c.max_send_wr = 16;
    c.max_recv_wr = 16;
    c.max_send_sge = 2;
    c.max_recv_sge = 2;
    c.max_inline_data = 0;
    return c;
  }

  ibv_qp* qp(ibv_cq* scq, ibv_cq* rcq, ibv_srq* srq = nullptr, ibv_qp_cap cap = caps()) {
    ibv_qp_init_attr a{};
    a.send_cq = scq;
    a.recv_cq = rcq;
    a.srq = srq;
    a.cap = cap;
    a.qp_type = IBV_QPT_RC;
    ibv_qp* q = ibv_create_qp(pd, &a);
    REQUIRE(q != nullptr);
    return q;
  }

  // The ibv_qp_ex flavour (perftest's ctx_qp_create).
  ibv_qp* qp_ex(ibv_cq* scq, ibv_cq* rcq) {
    ibv_qp_init_attr_ex a{};
    a.send_cq = scq;
    a.recv_cq = rcq;
    a.cap = caps();
    a.qp_type = IBV_QPT_RC;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd;
    a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
    ibv_qp* q = ibv_create_qp_ex(ctx, &a);
    REQUIRE(q != nullptr);
    return q;
  }

  ibv_srq* srq(std::uint32_t max_wr = 4, std::uint32_t max_sge = 2) {
    ibv_srq_init_attr a{};
    a.attr.max_wr = max_wr;
    a.attr.max_sge = max_sge;
    ibv_srq* s = ibv_create_srq(pd, &a);
    REQUIRE(s != nullptr);
    return s;
  }

  ibv_mr* mr(int access = IBV_ACCESS_LOCAL_WRITE, std::size_t off = 0, std::size_t len = 4096) {
    ibv_mr* m = ibv_reg_mr(pd, at(off), len, access);
    REQUIRE(m != nullptr);
    return m;
  }
};

// RESET -> INIT as librdmacm's ucma_init_conn_qp does it (mask 0x29), port 1.
inline int to_init(ibv_qp* qp, int access = kRemoteAccess) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.qp_access_flags = access;
  a.port_num = 1;
  return ibv_modify_qp(qp, &a, kCmMask);
}

inline int to_state(ibv_qp* qp, ibv_qp_state s) {
  ibv_qp_attr a{};
  a.qp_state = s;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

inline std::vector<ibv_wc> drain(ibv_cq* cq) {
  std::vector<ibv_wc> out;
  ibv_wc wc[16];
  for (;;) {
    int n = ibv_poll_cq(cq, 16, wc);
    REQUIRE(n >= 0);
    if (n == 0) return out;
    out.insert(out.end(), wc, wc + n);
  }
}

inline ibv_qp_state queried_state(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr i{};
  REQUIRE(ibv_query_qp(qp, &a, IBV_QP_STATE, &i) == 0);
  return a.qp_state;
}

// Runs `fn` on another thread and says whether it finished within 2 s. A verb
// that needs the context's lock would hang if a batch API left it held.
template <class Fn> bool finishes_on_other_thread(Fn fn) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([fn, done] {
    fn();
    done->store(true);
  });
  for (int i = 0; i < 200 && !done->load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (done->load()) {
    t.join();
    return true;
  }
  t.detach();
  return false;
}

} // namespace verbs_test
