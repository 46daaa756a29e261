// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Local verbs over uiwarp through the public libibverbs API only: the device
// and its limits, PDs, MRs, CQs (classic and extended), RC QPs with iWARP state
// rules (no INIT->RTR->RTS without the RDMA CM), flushes, SRQs, async events,
// completion channels and teardown. Nothing here needs a peer or a connection.
//
// Tags: every case is [verbs]. Cases tagged [shim] also need libuiwarp-shim.so
// (it emulates the uverbs CREATE_COMP_CHANNEL write that ibv_create_comp_channel
// issues); run them under uiwarp-run. Without the shim, select '~[shim]'.
// The exact command lines are at the top of tests/verbs/CMakeLists.txt.
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <memory>
#include <poll.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

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
// INIT_QP_ATTR returns for INIT and RTR (rdma-core-integration.md §4).
constexpr int kCmMask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT;
constexpr int kRemoteAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

ibv_device* find_uiwarp(ibv_device** list, int n) {
  for (int i = 0; i < n; ++i)
    if (std::string(ibv_get_device_name(list[i])) == kDevName) return list[i];
  return nullptr;
}

// Waits until `fd` is readable; false after `ms` milliseconds.
bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

// Every case gets its own context and PD; objects a case creates it destroys
// itself, in dependency order, checking each return value.
struct Fixture {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::vector<char> buf = std::vector<char>(64 * 1024);

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

  void* at(std::size_t off) { return buf.data() + off; }
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
int to_init(ibv_qp* qp, int access = kRemoteAccess) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.qp_access_flags = access;
  a.port_num = 1;
  return ibv_modify_qp(qp, &a, kCmMask);
}

int to_state(ibv_qp* qp, ibv_qp_state s) {
  ibv_qp_attr a{};
  a.qp_state = s;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

std::vector<ibv_wc> drain(ibv_cq* cq) {
  std::vector<ibv_wc> out;
  ibv_wc wc[16];
  for (;;) {
    int n = ibv_poll_cq(cq, 16, wc);
    REQUIRE(n >= 0);
    if (n == 0) return out;
    out.insert(out.end(), wc, wc + n);
  }
}

ibv_qp_state queried_state(ibv_qp* qp) {
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

} // namespace

// ---- device --------------------------------------------------------------------------

TEST_CASE("ibv_get_device_list: uiwarp0 is listed as an iWARP RNIC", "[verbs]") {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(list != nullptr);
  REQUIRE(n >= 1);
  CHECK(list[n] == nullptr);
  ibv_device* dev = find_uiwarp(list, n);
  REQUIRE(dev != nullptr);
  CHECK(dev->node_type == IBV_NODE_RNIC);
  CHECK(dev->transport_type == IBV_TRANSPORT_IWARP);
  CHECK(std::string(ibv_node_type_str(dev->node_type)) == "iWARP NIC");
  CHECK(ibv_get_device_guid(dev) != 0);
  ibv_free_device_list(list);
}

TEST_CASE("ibv_open_device: a context with an async fd and one completion vector", "[verbs]") {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(list != nullptr);
  ibv_device* dev = find_uiwarp(list, n);
  REQUIRE(dev != nullptr);
  ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx != nullptr);
  CHECK(ctx->device == dev);
  CHECK(ctx->async_fd >= 0);
  CHECK(ctx->async_fd != ctx->cmd_fd);
  CHECK(ctx->num_comp_vectors == 1);
  // A second context of the same device is independent.
  ibv_context* ctx2 = ibv_open_device(dev);
  REQUIRE(ctx2 != nullptr);
  CHECK(ctx2->async_fd != ctx->async_fd);
  CHECK(ibv_close_device(ctx2) == 0);
  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
}

TEST_CASE_METHOD(Fixture, "ibv_query_device: the limits uiwarp advertises", "[verbs]") {
  ibv_device_attr a{};
  REQUIRE(ibv_query_device(ctx, &a) == 0);
  CHECK(std::strlen(a.fw_ver) > 0);
  CHECK(a.node_guid == ibv_get_device_guid(ctx->device));
  CHECK(a.sys_image_guid == a.node_guid);
  CHECK(a.vendor_id == kVendorId);
  CHECK(a.vendor_part_id == kVendorPartId);
  CHECK(a.max_mr_size == kMaxMrSize);
  CHECK(a.page_size_cap == static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)));
  CHECK(a.max_qp == kMaxQp);
  CHECK(a.max_qp_wr == kMaxQpWr);
  CHECK(a.max_sge == kMaxSge);
  CHECK(a.max_sge_rd == kMaxSge);
  CHECK(a.max_cq == kMaxCq);
  CHECK(a.max_cqe == kMaxCqe);
  CHECK(a.max_qp_rd_atom == kMaxOrdIrd);
  CHECK(a.max_qp_init_rd_atom == kMaxOrdIrd);
  CHECK(a.atomic_cap == IBV_ATOMIC_NONE);
  CHECK(a.max_mw == 0);
  CHECK(a.max_srq == kMaxSrq);
  CHECK(a.max_srq_wr == kMaxSrqWr);
  CHECK(a.max_srq_sge == kMaxSge);
  CHECK((a.device_cap_flags & IBV_DEVICE_SRQ_RESIZE) != 0);
  CHECK(a.phys_port_cnt == 1);
  // Stable across calls.
  ibv_device_attr b{};
  REQUIRE(ibv_query_device(ctx, &b) == 0);
  CHECK(b.vendor_id == a.vendor_id);
  CHECK(b.vendor_part_id == a.vendor_part_id);
  CHECK(std::memcmp(&a, &b, sizeof a) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_query_device_ex: orig_attr equals ibv_query_device", "[verbs]") {
  ibv_device_attr a{};
  REQUIRE(ibv_query_device(ctx, &a) == 0);
  ibv_device_attr_ex x{};
  REQUIRE(ibv_query_device_ex(ctx, nullptr, &x) == 0);
  CHECK(std::memcmp(&x.orig_attr, &a, sizeof a) == 0);
  CHECK(x.orig_attr.max_qp_rd_atom == kMaxOrdIrd);
  CHECK(x.orig_attr.max_mr_size == kMaxMrSize);
  CHECK(x.orig_attr.max_srq == kMaxSrq);
  CHECK(x.orig_attr.vendor_id == kVendorId);
  CHECK(x.odp_caps.general_caps == 0); // no on-demand paging
  CHECK(x.completion_timestamp_mask == 0);

  ibv_query_device_ex_input in{};
  REQUIRE(ibv_query_device_ex(ctx, &in, &x) == 0);
  in.comp_mask = 1;
  CHECK(ibv_query_device_ex(ctx, &in, &x) == EINVAL);
}

TEST_CASE_METHOD(Fixture, "ibv_query_port: port 1 is ACTIVE Ethernet with a GID table", "[verbs]") {
  ibv_port_attr p{};
  REQUIRE(ibv_query_port(ctx, 1, &p) == 0);
  CHECK(p.state == IBV_PORT_ACTIVE);
  CHECK(p.link_layer == IBV_LINK_LAYER_ETHERNET);
  CHECK(p.gid_tbl_len >= 1);
  CHECK(p.max_mtu == IBV_MTU_4096);
  CHECK(p.active_mtu >= IBV_MTU_256);
  CHECK(p.active_mtu <= IBV_MTU_4096);
  CHECK(p.max_msg_sz == (1u << 31));
  CHECK(p.pkey_tbl_len == 1);
  CHECK(p.phys_state == 5); // LinkUp
  CHECK(p.active_width != 0);
  CHECK(p.active_speed != 0);

  SECTION("port 2 does not exist: EINVAL") { CHECK(ibv_query_port(ctx, 2, &p) == EINVAL); }
  SECTION("port 0 does not exist: EINVAL") { CHECK(ibv_query_port(ctx, 0, &p) == EINVAL); }
}

TEST_CASE_METHOD(Fixture, "ibv_query_gid: index 0 of port 1 is a non-zero GID", "[verbs]") {
  union ibv_gid gid;
  std::memset(&gid, 0, sizeof gid);
  REQUIRE(ibv_query_gid(ctx, 1, 0, &gid) == 0);
  union ibv_gid zero;
  std::memset(&zero, 0, sizeof zero);
  CHECK(std::memcmp(&gid, &zero, sizeof gid) != 0);
  // Same answer twice (perftest reads it once per side).
  union ibv_gid again;
  REQUIRE(ibv_query_gid(ctx, 1, 0, &again) == 0);
  CHECK(std::memcmp(&gid, &again, sizeof gid) == 0);
}

TEST_CASE("ibv_alloc_mw: memory windows are EOPNOTSUPP", "[verbs]") {
  Fixture f;
  errno = 0;
  CHECK(ibv_alloc_mw(f.pd, IBV_MW_TYPE_1) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  errno = 0;
  CHECK(ibv_alloc_mw(f.pd, IBV_MW_TYPE_2) == nullptr);
  CHECK(errno == EOPNOTSUPP);
}

// ---- protection domains ------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_alloc_pd / ibv_dealloc_pd: distinct PDs of this context",
                 "[verbs]") {
  ibv_pd* a = ibv_alloc_pd(ctx);
  ibv_pd* b = ibv_alloc_pd(ctx);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(a != b);
  CHECK(a->context == ctx);
  CHECK(b->context == ctx);
  CHECK(a->handle != b->handle);
  CHECK(ibv_dealloc_pd(a) == 0);
  CHECK(ibv_dealloc_pd(b) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_dealloc_pd: EBUSY while an MR, a QP or an SRQ uses the PD",
                 "[verbs]") {
  ibv_pd* p = ibv_alloc_pd(ctx);
  REQUIRE(p != nullptr);

  SECTION("MR") {
    ibv_mr* m = ibv_reg_mr(p, at(0), 4096, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(m != nullptr);
    CHECK(ibv_dealloc_pd(p) == EBUSY);
    REQUIRE(ibv_dereg_mr(m) == 0);
  }
  SECTION("QP") {
    ibv_cq* c = cq();
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = c;
    a.cap = caps();
    a.qp_type = IBV_QPT_RC;
    ibv_qp* q = ibv_create_qp(p, &a);
    REQUIRE(q != nullptr);
    CHECK(ibv_dealloc_pd(p) == EBUSY);
    REQUIRE(ibv_destroy_qp(q) == 0);
    REQUIRE(ibv_destroy_cq(c) == 0);
  }
  SECTION("SRQ") {
    ibv_srq_init_attr a{};
    a.attr.max_wr = 4;
    a.attr.max_sge = 1;
    ibv_srq* s = ibv_create_srq(p, &a);
    REQUIRE(s != nullptr);
    CHECK(ibv_dealloc_pd(p) == EBUSY);
    REQUIRE(ibv_destroy_srq(s) == 0);
  }
  CHECK(ibv_dealloc_pd(p) == 0);
}

// ---- memory regions ----------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_reg_mr / ibv_dereg_mr: lkey == rkey, keys differ between MRs",
                 "[verbs]") {
  ibv_mr* a = ibv_reg_mr(pd, at(0), 4096, kRemoteAccess);
  ibv_mr* b = ibv_reg_mr(pd, at(0), 4096, kRemoteAccess); // same memory, second MR
  ibv_mr* c = ibv_reg_mr(pd, at(8192), 100, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  REQUIRE(c != nullptr);
  for (ibv_mr* m : {a, b, c}) {
    CHECK(m->lkey == m->rkey);
    CHECK(m->lkey != 0);
    CHECK(m->pd == pd);
    CHECK(m->context == ctx);
  }
  CHECK(a->addr == at(0));
  CHECK(a->length == 4096);
  CHECK(c->addr == at(8192));
  CHECK(c->length == 100);
  CHECK(a->lkey != b->lkey);
  CHECK(a->lkey != c->lkey);
  CHECK(b->lkey != c->lkey);
  CHECK(ibv_dereg_mr(a) == 0);
  CHECK(ibv_dereg_mr(b) == 0);
  CHECK(ibv_dereg_mr(c) == 0);
  // Read-only memory regions (no LOCAL_WRITE) are fine too.
  ibv_mr* ro = ibv_reg_mr(pd, at(0), 4096, 0);
  REQUIRE(ro != nullptr);
  CHECK(ibv_dereg_mr(ro) == 0);
  ibv_mr* rr = ibv_reg_mr(pd, at(0), 4096, IBV_ACCESS_REMOTE_READ);
  REQUIRE(rr != nullptr);
  CHECK(ibv_dereg_mr(rr) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_reg_mr: invalid access flags are EINVAL", "[verbs]") {
  int access = 0;
  SECTION("REMOTE_WRITE without LOCAL_WRITE") { access = IBV_ACCESS_REMOTE_WRITE; }
  SECTION("REMOTE_ATOMIC (atomic_cap is NONE)") {
    access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  }
  SECTION("MW_BIND (no memory windows)") { access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND; }
  SECTION("ON_DEMAND (no ODP)") { access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND; }
  SECTION("an unknown bit") { access = IBV_ACCESS_LOCAL_WRITE | (1 << 15); }
  errno = 0;
  ibv_mr* m = ibv_reg_mr(pd, at(0), 4096, access);
  CHECK(m == nullptr);
  CHECK(errno == EINVAL);
  if (m) ibv_dereg_mr(m);
}

TEST_CASE_METHOD(Fixture, "ibv_reg_mr: length 0 is EINVAL", "[verbs]") {
  errno = 0;
  ibv_mr* m = ibv_reg_mr(pd, at(0), 0, IBV_ACCESS_LOCAL_WRITE);
  CHECK(m == nullptr);
  CHECK(errno == EINVAL);
  if (m) ibv_dereg_mr(m);
}

TEST_CASE_METHOD(Fixture, "ibv_reg_mr_iova: an MR with a chosen iova, and a zero-based one",
                 "[verbs]") {
  ibv_mr* m = ibv_reg_mr_iova(pd, at(4096), 8192, 0x1000000000ull, kRemoteAccess);
  REQUIRE(m != nullptr);
  CHECK(m->addr == at(4096));
  CHECK(m->length == 8192);
  CHECK(m->lkey == m->rkey);
  ibv_mr* z = ibv_reg_mr_iova(pd, at(4096), 8192, 0, kRemoteAccess | IBV_ACCESS_ZERO_BASED);
  REQUIRE(z != nullptr);
  CHECK(z->lkey != m->lkey);
  CHECK(ibv_dereg_mr(z) == 0);
  CHECK(ibv_dereg_mr(m) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_rereg_mr: changing access, translation or PD changes the key",
                 "[verbs]") {
  ibv_mr* m = mr(IBV_ACCESS_LOCAL_WRITE, 0, 4096);
  const std::uint32_t key0 = m->lkey;

  SECTION("IBV_REREG_MR_CHANGE_ACCESS") {
    REQUIRE(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kRemoteAccess) == 0);
    CHECK(m->lkey != key0);
    CHECK(m->rkey == m->lkey);
    CHECK(m->addr == at(0));
    CHECK(m->length == 4096);
    CHECK(m->pd == pd);
  }
  SECTION("IBV_REREG_MR_CHANGE_TRANSLATION") {
    REQUIRE(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, at(16384), 12288, 0) == 0);
    CHECK(m->lkey != key0);
    CHECK(m->rkey == m->lkey);
    CHECK(m->addr == at(16384));
    CHECK(m->length == 12288);
  }
  SECTION("IBV_REREG_MR_CHANGE_PD moves the PD reference") {
    ibv_pd* p2 = ibv_alloc_pd(ctx);
    REQUIRE(p2 != nullptr);
    REQUIRE(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD, p2, nullptr, 0, 0) == 0);
    CHECK(m->lkey != key0);
    CHECK(m->rkey == m->lkey);
    CHECK(m->pd == p2);
    CHECK(ibv_dealloc_pd(p2) == EBUSY); // the MR is now p2's
    // ...and no longer the fixture PD's: move it back and p2 is free.
    REQUIRE(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0) == 0);
    CHECK(m->pd == pd);
    CHECK(ibv_dealloc_pd(p2) == 0);
  }
  SECTION("all three at once") {
    ibv_pd* p2 = ibv_alloc_pd(ctx);
    REQUIRE(p2 != nullptr);
    REQUIRE(ibv_rereg_mr(m,
                         IBV_REREG_MR_CHANGE_ACCESS | IBV_REREG_MR_CHANGE_TRANSLATION |
                             IBV_REREG_MR_CHANGE_PD,
                         p2, at(8192), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) == 0);
    CHECK(m->lkey != key0);
    CHECK(m->pd == p2);
    CHECK(m->addr == at(8192));
    REQUIRE(ibv_dereg_mr(m) == 0);
    m = nullptr;
    CHECK(ibv_dealloc_pd(p2) == 0);
  }
  SECTION("a bad new access is refused and the MR keeps its key") {
    CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                       IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD);
    CHECK(m->lkey == key0);
  }
  SECTION("a new translation of length 0 is refused") {
    CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, at(0), 0, 0) ==
          IBV_REREG_MR_ERR_INPUT);
    CHECK(m->lkey == key0);
  }
  if (m) CHECK(ibv_dereg_mr(m) == 0);
}

// ---- completion queues -------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_create_cq: bad sizes and comp_vector are EINVAL", "[verbs]") {
  int cqe = 16, vec = 0;
  SECTION("cqe 0") { cqe = 0; }
  SECTION("cqe -1") { cqe = -1; }
  SECTION("cqe above max_cqe") { cqe = kMaxCqe + 1; }
  SECTION("comp_vector 1 (there is one vector)") { vec = 1; }
  SECTION("comp_vector -1") { vec = -1; }
  errno = 0;
  ibv_cq* c = ibv_create_cq(ctx, cqe, nullptr, nullptr, vec);
  CHECK(c == nullptr);
  CHECK(errno == EINVAL);
  if (c) ibv_destroy_cq(c);
}

TEST_CASE_METHOD(Fixture, "ibv_create_cq: cqe and cq_context as asked; max_cqe accepted",
                 "[verbs]") {
  int tag = 0;
  ibv_cq* c = ibv_create_cq(ctx, 7, &tag, nullptr, 0);
  REQUIRE(c != nullptr);
  CHECK(c->cqe >= 7);
  CHECK(c->cq_context == &tag);
  CHECK(c->context == ctx);
  CHECK(c->channel == nullptr);
  CHECK(ibv_destroy_cq(c) == 0);
  ibv_cq* big = ibv_create_cq(ctx, kMaxCqe, nullptr, nullptr, 0);
  REQUIRE(big != nullptr);
  CHECK(big->cqe >= kMaxCqe);
  CHECK(ibv_destroy_cq(big) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_poll_cq: an empty CQ returns 0", "[verbs]") {
  ibv_cq* c = cq();
  ibv_wc wc[4];
  CHECK(ibv_poll_cq(c, 4, wc) == 0);
  CHECK(ibv_poll_cq(c, 0, wc) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_req_notify_cq: next and solicited-only are accepted", "[verbs]") {
  ibv_cq* c = cq();
  CHECK(ibv_req_notify_cq(c, 0) == 0);
  CHECK(ibv_req_notify_cq(c, 1) == 0);
  CHECK(ibv_req_notify_cq(c, 0) == 0); // re-arming is fine
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_resize_cq: keeps queued completions; smaller than queued is EINVAL",
                 "[verbs]") {
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq(4);
  ibv_qp* q = qp(scq, rcq);
  REQUIRE(to_init(q) == 0);
  ibv_sge sge{addr(0), 64, 0};
  for (std::uint64_t id = 1; id <= 3; ++id) {
    ibv_recv_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    REQUIRE(ibv_post_recv(q, &wr, &bad) == 0);
  }
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0); // three flush completions queued on rcq

  CHECK(ibv_resize_cq(rcq, 2) == EINVAL);
  CHECK(rcq->cqe == 4);
  CHECK(ibv_resize_cq(rcq, 0) == EINVAL);
  CHECK(ibv_resize_cq(rcq, kMaxCqe + 1) == EINVAL);
  REQUIRE(ibv_resize_cq(rcq, 3) == 0); // exactly what is queued
  CHECK(rcq->cqe == 3);
  REQUIRE(ibv_resize_cq(rcq, 64) == 0);
  CHECK(rcq->cqe == 64);
  std::vector<ibv_wc> wcs = drain(rcq);
  REQUIRE(wcs.size() == 3);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(wcs[i].wr_id == i + 1);      // order kept
  REQUIRE(ibv_resize_cq(rcq, 1) == 0); // empty again: any size
  CHECK(rcq->cqe == 1);

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(rcq) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_destroy_cq: EBUSY while a QP uses the CQ", "[verbs]") {
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_qp* q = qp(scq, rcq);
  CHECK(ibv_destroy_cq(scq) == EBUSY);
  CHECK(ibv_destroy_cq(rcq) == EBUSY);
  REQUIRE(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
  CHECK(ibv_destroy_cq(rcq) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_destroy_cq: one CQ as send and receive CQ of two QPs", "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* a = qp(c, c);
  ibv_qp* b = qp(c, c);
  CHECK(a->qp_num != b->qp_num);
  REQUIRE(ibv_destroy_qp(a) == 0);
  CHECK(ibv_destroy_cq(c) == EBUSY);
  REQUIRE(ibv_destroy_qp(b) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_create_cq_ex: the extended poll API", "[verbs]") {
  int tag = 0;
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 8;
  ca.cq_context = &tag;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
  ibv_cq_ex* cx = ibv_create_cq_ex(ctx, &ca);
  REQUIRE(cx != nullptr);
  ibv_cq* c = ibv_cq_ex_to_cq(cx);
  CHECK(c->cq_context == &tag);
  CHECK(c->context == ctx);

  ibv_poll_cq_attr pa{};
  CHECK(ibv_start_poll(cx, &pa) == ENOENT); // empty; no end_poll after ENOENT
  ibv_wc wc;
  CHECK(ibv_poll_cq(c, 1, &wc) == 0); // the classic poll works on it too

  ibv_cq* scq = cq();
  ibv_qp* q = qp(scq, c);
  REQUIRE(to_init(q) == 0);
  ibv_sge sge{addr(0), 128, 0};
  ibv_recv_wr wr[3]{};
  for (int i = 0; i < 3; ++i) {
    wr[i].wr_id = 0xa0 + static_cast<std::uint64_t>(i);
    wr[i].sg_list = &sge;
    wr[i].num_sge = 1;
    wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_recv(q, wr, &bad) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);

  REQUIRE(ibv_start_poll(cx, &pa) == 0);
  int seen = 0;
  int rc = 0;
  do {
    CHECK(cx->wr_id == 0xa0 + static_cast<std::uint64_t>(seen));
    CHECK(cx->status == IBV_WC_WR_FLUSH_ERR);
    CHECK(ibv_wc_read_opcode(cx) == IBV_WC_RECV);
    CHECK(ibv_wc_read_byte_len(cx) == 0);
    CHECK(ibv_wc_read_qp_num(cx) == q->qp_num);
    CHECK(ibv_wc_read_wc_flags(cx) == 0);
    ++seen;
    rc = ibv_next_poll(cx);
  } while (rc == 0);
  CHECK(rc == ENOENT);
  ibv_end_poll(cx);
  CHECK(seen == 3);
  CHECK(ibv_start_poll(cx, &pa) == ENOENT);

  // After end_poll the CQ lock is free again: another thread can poll it.
  CHECK(finishes_on_other_thread([c] {
    ibv_wc w;
    ibv_poll_cq(c, 1, &w);
  }));

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_start_poll: reposting a receive inside the poll loop", "[verbs]") {
  // The usual consumer loop: for each completion, post the buffer again before
  // ibv_end_poll. In ERR the repost completes at once onto the CQ being polled,
  // so this also checks that a completion can be added while a poll is open.
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_EX_WITH_QP_NUM;
  ibv_cq_ex* cx = ibv_create_cq_ex(ctx, &ca);
  REQUIRE(cx != nullptr);
  ibv_cq* c = ibv_cq_ex_to_cq(cx);
  ibv_qp* q = qp(c, c);
  REQUIRE(to_init(q) == 0);
  ibv_recv_wr r[2]{};
  r[0].wr_id = 1;
  r[0].next = &r[1];
  r[1].wr_id = 2;
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_recv(q, r, &bad) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);

  auto seen = std::make_shared<std::vector<std::uint64_t>>();
  auto rc = std::make_shared<std::atomic<int>>(0); // first failing repost's error
  bool finished = finishes_on_other_thread([cx, q, seen, rc] {
    ibv_poll_cq_attr pa{};
    if (ibv_start_poll(cx, &pa) != 0) return;
    int more = 0;
    do {
      seen->push_back(cx->wr_id);
      ibv_recv_wr again{};
      again.wr_id = cx->wr_id + 100;
      ibv_recv_wr* b = nullptr;
      if (int e = ibv_post_recv(q, &again, &b)) rc->store(e);
      if (seen->size() == 8) break; // the reposts would go on for ever
      more = ibv_next_poll(cx);
    } while (more == 0);
    ibv_end_poll(cx);
  });
  REQUIRE(finished); // not deadlocked between the open poll and the repost
  CHECK(rc->load() == 0);
  REQUIRE(seen->size() == 8);
  CHECK((*seen)[0] == 1);
  CHECK((*seen)[1] == 2);
  CHECK((*seen)[2] == 101); // the reposts' completions, polled in the same loop
  CHECK((*seen)[3] == 102);
  // 2 originals + one repost per entry seen = 10 completions, 8 polled above.
  CHECK(drain(c).size() == 2);

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_create_cq_ex: unsupported wc_flags and flags are EOPNOTSUPP",
                 "[verbs]") {
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 8;
  SECTION("completion timestamp") {
    ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  }
  SECTION("wallclock timestamp") { ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK; }
  SECTION("CVLAN") { ca.wc_flags = IBV_WC_EX_WITH_CVLAN; }
  SECTION("flow tag") { ca.wc_flags = IBV_WC_EX_WITH_FLOW_TAG; }
  SECTION("single-threaded flag") {
    ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    ca.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  }
  errno = 0;
  ibv_cq_ex* cx = ibv_create_cq_ex(ctx, &ca);
  CHECK(cx == nullptr);
  CHECK(errno == EOPNOTSUPP);
  if (cx) ibv_destroy_cq(ibv_cq_ex_to_cq(cx));
}

TEST_CASE_METHOD(Fixture, "ibv_create_cq_ex: bad cqe and comp_vector are EINVAL", "[verbs]") {
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 8;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
  SECTION("cqe 0") { ca.cqe = 0; }
  SECTION("comp_vector 1") { ca.comp_vector = 1; }
  errno = 0;
  ibv_cq_ex* cx = ibv_create_cq_ex(ctx, &ca);
  CHECK(cx == nullptr);
  CHECK(errno == EINVAL);
  if (cx) ibv_destroy_cq(ibv_cq_ex_to_cq(cx));
}

TEST_CASE_METHOD(Fixture, "ibv_modify_cq: moderation is EOPNOTSUPP", "[verbs]") {
  ibv_cq* c = cq();
  ibv_modify_cq_attr m{};
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate.cq_count = 8;
  m.moderate.cq_period = 10;
  CHECK(ibv_modify_cq(c, &m) == EOPNOTSUPP);
  CHECK(ibv_destroy_cq(c) == 0);
}

// ---- queue pairs -------------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_create_qp: an RC QP in RESET with the caps asked for", "[verbs]") {
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  int tag = 0;
  ibv_qp_init_attr a{};
  a.qp_context = &tag;
  a.send_cq = scq;
  a.recv_cq = rcq;
  a.cap = caps();
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 1;
  ibv_qp* q = ibv_create_qp(pd, &a);
  REQUIRE(q != nullptr);
  CHECK(q->context == ctx);
  CHECK(q->pd == pd);
  CHECK(q->send_cq == scq);
  CHECK(q->recv_cq == rcq);
  CHECK(q->srq == nullptr);
  CHECK(q->qp_context == &tag);
  CHECK(q->qp_type == IBV_QPT_RC);
  CHECK(q->state == IBV_QPS_RESET);
  CHECK(q->qp_num != 0);
  CHECK(q->qp_num != 1);
  // The caps written back: at least what was asked; inline up to 256 bytes.
  CHECK(a.cap.max_send_wr >= 16);
  CHECK(a.cap.max_recv_wr >= 16);
  CHECK(a.cap.max_send_sge >= 2);
  CHECK(a.cap.max_recv_sge >= 2);
  CHECK(a.cap.max_inline_data >= kMaxInline);
  CHECK(queried_state(q) == IBV_QPS_RESET);

  // The device maximum is accepted.
  ibv_qp_init_attr m{};
  m.send_cq = scq;
  m.recv_cq = rcq;
  m.cap.max_send_wr = kMaxQpWr;
  m.cap.max_recv_wr = kMaxQpWr;
  m.cap.max_send_sge = kMaxSge;
  m.cap.max_recv_sge = kMaxSge;
  m.cap.max_inline_data = kMaxInline;
  m.qp_type = IBV_QPT_RC;
  ibv_qp* big = ibv_create_qp(pd, &m);
  REQUIRE(big != nullptr);
  CHECK(big->qp_num != q->qp_num);
  CHECK(m.cap.max_inline_data == kMaxInline);

  CHECK(ibv_destroy_qp(big) == 0);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(rcq) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_create_qp: UD and UC are EOPNOTSUPP", "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = c;
  a.cap = caps();
  SECTION("UD") { a.qp_type = IBV_QPT_UD; }
  SECTION("UC") { a.qp_type = IBV_QPT_UC; }
  SECTION("RAW_PACKET") { a.qp_type = IBV_QPT_RAW_PACKET; }
  errno = 0;
  ibv_qp* q = ibv_create_qp(pd, &a);
  CHECK(q == nullptr);
  CHECK(errno == EOPNOTSUPP);
  if (q) ibv_destroy_qp(q);
  CHECK(ibv_destroy_cq(c) == 0); // no QP took a reference
}

TEST_CASE_METHOD(Fixture, "ibv_create_qp: caps over the device limits are EINVAL", "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = c;
  a.cap = caps();
  a.qp_type = IBV_QPT_RC;
  SECTION("max_send_wr") { a.cap.max_send_wr = kMaxQpWr + 1; }
  SECTION("max_recv_wr") { a.cap.max_recv_wr = kMaxQpWr + 1; }
  SECTION("max_send_sge") { a.cap.max_send_sge = kMaxSge + 1; }
  SECTION("max_recv_sge") { a.cap.max_recv_sge = kMaxSge + 1; }
  SECTION("max_inline_data") { a.cap.max_inline_data = kMaxInline + 1; }
  SECTION("no send CQ") { a.send_cq = nullptr; }
  SECTION("no receive CQ") { a.recv_cq = nullptr; }
  errno = 0;
  ibv_qp* q = ibv_create_qp(pd, &a);
  CHECK(q == nullptr);
  CHECK(errno == EINVAL);
  if (q) ibv_destroy_qp(q);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_create_qp_ex: SEND_OPS_FLAGS gives an ibv_qp_ex (ibv_qp_to_qp_ex)",
                 "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp_ex(c, c);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(q);
  REQUIRE(x != nullptr);
  CHECK(&x->qp_base == q);
  CHECK(x->wr_start != nullptr);
  CHECK(x->wr_complete != nullptr);
  CHECK(x->wr_abort != nullptr);
  CHECK(x->wr_send != nullptr);
  CHECK(x->wr_rdma_write != nullptr);
  CHECK(x->wr_rdma_read != nullptr);
  CHECK(x->wr_set_sge != nullptr);
  CHECK(x->wr_set_sge_list != nullptr);
  CHECK(x->wr_set_inline_data != nullptr);
  CHECK(q->qp_type == IBV_QPT_RC);
  CHECK(q->state == IBV_QPS_RESET);
  CHECK(q->pd == pd);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_qp_to_qp_ex: NULL for a QP created without send ops", "[verbs]") {
  ibv_cq* c = cq();
  // Several, so that recycled heap memory would show an uninitialised comp_mask.
  std::vector<ibv_qp*> qps;
  for (int i = 0; i < 4; ++i) {
    qps.push_back(qp(c, c));
    CHECK(ibv_qp_to_qp_ex(qps.back()) == nullptr);
    REQUIRE(ibv_destroy_qp(qps.back()) == 0);
    qps.pop_back();
    ibv_qp* x = qp_ex(c, c);
    CHECK(ibv_qp_to_qp_ex(x) != nullptr);
    REQUIRE(ibv_destroy_qp(x) == 0);
  }
  // Through ibv_create_qp_ex with only IBV_QP_INIT_ATTR_PD as well.
  ibv_qp_init_attr_ex a{};
  a.send_cq = a.recv_cq = c;
  a.cap = caps();
  a.qp_type = IBV_QPT_RC;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd;
  ibv_qp* q = ibv_create_qp_ex(ctx, &a);
  REQUIRE(q != nullptr);
  CHECK(ibv_qp_to_qp_ex(q) == nullptr);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_create_qp_ex: atomic and other unsupported send ops are EOPNOTSUPP",
                 "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp_init_attr_ex a{};
  a.send_cq = a.recv_cq = c;
  a.cap = caps();
  a.qp_type = IBV_QPT_RC;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.pd = pd;
  SECTION("compare-and-swap") {
    a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
  }
  SECTION("fetch-and-add") { a.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD; }
  SECTION("bind MW") { a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW; }
  SECTION("TSO") { a.send_ops_flags = IBV_QP_EX_WITH_TSO; }
  errno = 0;
  ibv_qp* q = ibv_create_qp_ex(ctx, &a);
  CHECK(q == nullptr);
  CHECK(errno == EOPNOTSUPP);
  if (q) ibv_destroy_qp(q);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: RESET->INIT on port 1; port 2 is EINVAL", "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.qp_access_flags = kRemoteAccess;
  a.port_num = 2;
  CHECK(ibv_modify_qp(
            q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == EINVAL);
  CHECK(q->state == IBV_QPS_RESET);
  CHECK(queried_state(q) == IBV_QPS_RESET);
  a.port_num = 1;
  // The full IB-style INIT mask (with PKEY_INDEX) is accepted, like the CM's 0x29.
  CHECK(ibv_modify_qp(q, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  CHECK(q->state == IBV_QPS_INIT);
  CHECK(queried_state(q) == IBV_QPS_INIT);
  // INIT -> INIT is allowed (librdmacm may repeat it).
  CHECK(to_init(q) == 0);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: INIT->RTR with the CM's mask STATE|ACCESS_FLAGS|PORT",
                 "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.qp_access_flags = kRemoteAccess;
  a.port_num = 1;
  SECTION("from RESET it is EINVAL") {
    CHECK(ibv_modify_qp(q, &a, kCmMask) == EINVAL);
    CHECK(q->state == IBV_QPS_RESET);
  }
  SECTION("from INIT it is accepted") {
    REQUIRE(to_init(q, 0) == 0); // the active side gets access 0 from the CM
    CHECK(ibv_modify_qp(q, &a, kCmMask) == 0);
    CHECK(q->state == IBV_QPS_RTR);
    CHECK(queried_state(q) == IBV_QPS_RTR);
  }
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: IB address attributes (AV, DEST_QPN, PSNs) are EINVAL",
                 "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  REQUIRE(to_init(q) == 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x1234;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = 1;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN;
  SECTION("AV | DEST_QPN") {}
  SECTION("the whole IB RTR mask") {
    mask |= IBV_QP_PATH_MTU | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  SECTION("AV alone, no state") { mask = IBV_QP_AV; }
  CHECK(ibv_modify_qp(q, &a, mask) == EINVAL);
  CHECK(q->state == IBV_QPS_INIT);
  CHECK(queried_state(q) == IBV_QPS_INIT);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture,
                 "ibv_modify_qp: IB timer attributes without a state change are accepted and "
                 "ignored (perftest -R's MIN_RNR_TIMER after rdma_accept; siw does the same)",
                 "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  REQUIRE(to_init(q) == 0);
  ibv_qp_attr a{};
  a.min_rnr_timer = 12;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  int mask = IBV_QP_MIN_RNR_TIMER;
  SECTION("MIN_RNR_TIMER") {}
  SECTION("all four") { mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY; }
  CHECK(ibv_modify_qp(q, &a, mask) == 0);
  CHECK(q->state == IBV_QPS_INIT);
  CHECK(queried_state(q) == IBV_QPS_INIT);
  SECTION("but with a state change they are the IB connect path: EINVAL") {
    a.qp_state = IBV_QPS_RTR;
    CHECK(ibv_modify_qp(q, &a, mask | IBV_QP_STATE) == EINVAL);
    CHECK(queried_state(q) == IBV_QPS_INIT);
  }
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: RTS without the RDMA CM is EINVAL", "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  REQUIRE(to_init(q) == 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.qp_access_flags = kRemoteAccess;
  a.port_num = 1;
  REQUIRE(ibv_modify_qp(q, &a, kCmMask) == 0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  SECTION("STATE only") { CHECK(ibv_modify_qp(q, &a, IBV_QP_STATE) == EINVAL); }
  SECTION("the IB RTS mask") {
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    CHECK(ibv_modify_qp(q, &a,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == EINVAL);
  }
  SECTION("SQD without a connection") {
    a.qp_state = IBV_QPS_SQD;
    CHECK(ibv_modify_qp(q, &a, IBV_QP_STATE) == EINVAL);
  }
  CHECK(q->state == IBV_QPS_RTR);
  CHECK(queried_state(q) == IBV_QPS_RTR);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: a state-less modify is accepted", "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  REQUIRE(to_init(q, 0) == 0);
  ibv_qp_attr a{};
  a.port_num = 1;
  // The passive side's "RTS" from the CM: mask PORT only, no state (0x20).
  CHECK(ibv_modify_qp(q, &a, IBV_QP_PORT) == 0);
  CHECK(q->state == IBV_QPS_INIT);
  a.qp_access_flags = kRemoteAccess;
  CHECK(ibv_modify_qp(q, &a, IBV_QP_ACCESS_FLAGS) == 0);
  CHECK(ibv_modify_qp(q, &a, 0) == 0);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  REQUIRE(ibv_query_qp(q, &qa, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS, &qi) == 0);
  CHECK(qa.qp_state == IBV_QPS_INIT);
  CHECK(qa.qp_access_flags == kRemoteAccess);
  a.port_num = 2;
  CHECK(ibv_modify_qp(q, &a, IBV_QP_PORT) == EINVAL);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: IBV_QP_CUR_STATE must match the current state",
                 "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  REQUIRE(to_init(q) == 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  a.cur_qp_state = IBV_QPS_RESET;
  CHECK(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_CUR_STATE) == EINVAL);
  CHECK(q->state == IBV_QPS_INIT);
  a.cur_qp_state = IBV_QPS_INIT;
  CHECK(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_CUR_STATE) == 0);
  CHECK(q->state == IBV_QPS_ERR);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: ERR and back to RESET, then INIT again", "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  REQUIRE(to_init(q) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  CHECK(queried_state(q) == IBV_QPS_ERR);
  SECTION("ERR -> INIT is EINVAL") {
    CHECK(to_init(q) == EINVAL);
    CHECK(q->state == IBV_QPS_ERR);
  }
  SECTION("ERR -> RESET -> INIT") {
    REQUIRE(to_state(q, IBV_QPS_RESET) == 0);
    CHECK(queried_state(q) == IBV_QPS_RESET);
    CHECK(to_init(q) == 0);
    CHECK(q->state == IBV_QPS_INIT);
    // RESET discards posted receives without completions: none on a later ERR.
    ibv_recv_wr r{};
    r.wr_id = 7;
    ibv_recv_wr* bad = nullptr;
    REQUIRE(ibv_post_recv(q, &r, &bad) == 0);
    REQUIRE(to_state(q, IBV_QPS_RESET) == 0);
    REQUIRE(to_init(q) == 0);
    REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
    CHECK(drain(c).empty());
  }
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_query_qp: reports state, access, port and caps", "[verbs]") {
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_qp_init_attr ia{};
  ia.send_cq = scq;
  ia.recv_cq = rcq;
  ia.cap = caps();
  ia.cap.max_send_wr = 32;
  ia.cap.max_recv_wr = 8;
  ia.cap.max_send_sge = 3;
  ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  ia.sq_sig_all = 1;
  ibv_qp* q = ibv_create_qp(pd, &ia);
  REQUIRE(q != nullptr);
  REQUIRE(to_init(q) == 0);

  ibv_qp_attr a{};
  ibv_qp_init_attr i{};
  REQUIRE(
      ibv_query_qp(q, &a,
                   IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT | IBV_QP_CAP,
                   &i) == 0);
  CHECK(a.qp_state == IBV_QPS_INIT);
  CHECK(a.cur_qp_state == IBV_QPS_INIT);
  CHECK(a.qp_access_flags == kRemoteAccess);
  CHECK(a.port_num == 1);
  CHECK(a.cap.max_send_wr == ia.cap.max_send_wr);
  CHECK(a.cap.max_recv_wr == ia.cap.max_recv_wr);
  CHECK(a.cap.max_send_sge == ia.cap.max_send_sge);
  CHECK(a.cap.max_recv_sge == ia.cap.max_recv_sge);
  CHECK(a.cap.max_inline_data == ia.cap.max_inline_data);
  CHECK(a.cap.max_inline_data >= kMaxInline);
  CHECK(i.send_cq == scq);
  CHECK(i.recv_cq == rcq);
  CHECK(i.srq == nullptr);
  CHECK(i.qp_type == IBV_QPT_RC);
  CHECK(i.sq_sig_all == 1);
  CHECK(i.cap.max_send_wr == ia.cap.max_send_wr);
  CHECK(i.cap.max_recv_sge == ia.cap.max_recv_sge);
  CHECK(a.sq_draining == 0);

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(rcq) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_post_send: before RTS it is EINVAL with bad_wr at the first WR",
                 "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  ibv_mr* m = mr();
  ibv_sge sge{addr(0), 64, m->lkey};
  ibv_send_wr wr[2]{};
  for (int i = 0; i < 2; ++i) {
    wr[i].wr_id = 10 + static_cast<std::uint64_t>(i);
    wr[i].sg_list = &sge;
    wr[i].num_sge = 1;
    wr[i].opcode = IBV_WR_SEND;
    wr[i].send_flags = IBV_SEND_SIGNALED;
  }
  wr[0].next = &wr[1];
  SECTION("RESET") {}
  SECTION("INIT") { REQUIRE(to_init(q) == 0); }
  SECTION("RTR") {
    REQUIRE(to_init(q) == 0);
    REQUIRE(to_state(q, IBV_QPS_RTR) == 0);
  }
  ibv_send_wr* bad = nullptr;
  CHECK(ibv_post_send(q, wr, &bad) == EINVAL);
  CHECK(bad == &wr[0]);
  CHECK(drain(c).empty());
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_dereg_mr(m) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_post_recv: accepted in INIT up to max_recv_wr, EINVAL in RESET",
                 "[verbs]") {
  ibv_cq* c = cq(64);
  ibv_qp_cap cap = caps();
  cap.max_recv_wr = 4;
  ibv_qp* q = qp(c, c, nullptr, cap);
  ibv_mr* m = mr();
  ibv_sge sge{addr(0), 64, m->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  CHECK(ibv_post_recv(q, &wr, &bad) == EINVAL); // RESET
  CHECK(bad == &wr);
  REQUIRE(to_init(q) == 0);
  // A chain of four fills the receive queue.
  ibv_recv_wr chain[5]{};
  for (int i = 0; i < 5; ++i) {
    chain[i].wr_id = 100 + static_cast<std::uint64_t>(i);
    chain[i].sg_list = &sge;
    chain[i].num_sge = 1;
    chain[i].next = i < 4 ? &chain[i + 1] : nullptr;
  }
  bad = nullptr;
  CHECK(ibv_post_recv(q, chain, &bad) == ENOMEM);
  CHECK(bad == &chain[4]); // the first four are posted
  // A receive without SGEs (zero-length) is a valid WR.
  wr.num_sge = 0;
  wr.sg_list = nullptr;
  CHECK(ibv_post_recv(q, &wr, &bad) == ENOMEM); // still full
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  std::vector<ibv_wc> wcs = drain(c);
  REQUIRE(wcs.size() == 4);
  for (std::size_t i = 0; i < 4; ++i)
    CHECK(wcs[i].wr_id == 100 + i);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_dereg_mr(m) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_modify_qp to ERR: posted receives are flushed in order", "[verbs]") {
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_qp* q = qp(scq, rcq);
  ibv_mr* m = mr();
  REQUIRE(to_init(q) == 0);
  ibv_sge sge{addr(0), 256, m->lkey};
  ibv_recv_wr wr[3]{};
  const std::uint64_t ids[3] = {0x1111, 0x2222, 0xffffffffffffffffull};
  for (int i = 0; i < 3; ++i) {
    wr[i].wr_id = ids[i];
    wr[i].sg_list = &sge;
    wr[i].num_sge = 1;
    wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_recv(q, wr, &bad) == 0);
  CHECK(drain(rcq).empty()); // nothing completes while INIT

  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  CHECK(q->state == IBV_QPS_ERR);
  std::vector<ibv_wc> wcs = drain(rcq);
  REQUIRE(wcs.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(wcs[i].wr_id == ids[i]);
    CHECK(wcs[i].status == IBV_WC_WR_FLUSH_ERR);
    CHECK(wcs[i].opcode == IBV_WC_RECV);
    CHECK(wcs[i].qp_num == q->qp_num);
    CHECK(wcs[i].byte_len == 0);
  }
  CHECK(drain(scq).empty()); // receives complete on the receive CQ only
  // A second move to ERR flushes nothing more.
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  CHECK(drain(rcq).empty());

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_dereg_mr(m) == 0);
  CHECK(ibv_destroy_cq(rcq) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_post_send / ibv_post_recv in ERR complete at once with flush errors",
                 "[verbs]") {
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_qp* q = qp(scq, rcq);
  ibv_mr* m = mr(kRemoteAccess);
  REQUIRE(to_init(q) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);

  ibv_sge sge{addr(0), 64, m->lkey};
  ibv_send_wr s[3]{};
  s[0].wr_id = 0x51;
  s[0].opcode = IBV_WR_SEND;
  s[1].wr_id = 0x52;
  s[1].opcode = IBV_WR_RDMA_WRITE;
  s[1].wr.rdma.rkey = m->rkey;
  s[1].wr.rdma.remote_addr = addr(1024);
  s[2].wr_id = 0x53;
  s[2].opcode = IBV_WR_RDMA_READ;
  s[2].wr.rdma.rkey = m->rkey;
  s[2].wr.rdma.remote_addr = addr(2048);
  for (int i = 0; i < 3; ++i) {
    s[i].sg_list = &sge;
    s[i].num_sge = 1;
    s[i].send_flags = IBV_SEND_SIGNALED;
    s[i].next = i < 2 ? &s[i + 1] : nullptr;
  }
  ibv_send_wr* sbad = nullptr;
  REQUIRE(ibv_post_send(q, s, &sbad) == 0);
  std::vector<ibv_wc> wcs = drain(scq);
  REQUIRE(wcs.size() == 3);
  const ibv_wc_opcode ops[3] = {IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(wcs[i].wr_id == 0x51 + i);
    CHECK(wcs[i].status == IBV_WC_WR_FLUSH_ERR);
    CHECK(wcs[i].opcode == ops[i]);
    CHECK(wcs[i].qp_num == q->qp_num);
  }
  CHECK(drain(rcq).empty());

  ibv_recv_wr r{};
  r.wr_id = 0x61;
  r.sg_list = &sge;
  r.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  REQUIRE(ibv_post_recv(q, &r, &rbad) == 0);
  wcs = drain(rcq);
  REQUIRE(wcs.size() == 1);
  CHECK(wcs[0].wr_id == 0x61);
  CHECK(wcs[0].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(wcs[0].opcode == IBV_WC_RECV);
  CHECK(wcs[0].qp_num == q->qp_num);
  CHECK(drain(scq).empty());

  // An unsupported opcode is refused even in ERR, and names the WR.
  ibv_send_wr bad_op{};
  bad_op.wr_id = 0x71;
  bad_op.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  bad_op.sg_list = &sge;
  bad_op.num_sge = 1;
  sbad = nullptr;
  CHECK(ibv_post_send(q, &bad_op, &sbad) == EINVAL);
  CHECK(sbad == &bad_op);

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_dereg_mr(m) == 0);
  CHECK(ibv_destroy_cq(rcq) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_wr_* in ERR: wr_complete flushes the batch, wr_abort drops it",
                 "[verbs]") {
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_qp* q = qp_ex(scq, rcq);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(q);
  REQUIRE(x != nullptr);
  ibv_mr* m = mr(kRemoteAccess);
  REQUIRE(to_init(q) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);

  SECTION("wr_complete: one flush completion per WR, in order") {
    ibv_wr_start(x);
    x->wr_id = 0x77;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, m->lkey, addr(0), 64);
    x->wr_id = 0x78;
    ibv_wr_rdma_write(x, m->rkey, addr(1024));
    ibv_wr_set_sge(x, m->lkey, addr(0), 64);
    x->wr_id = 0x79;
    ibv_wr_rdma_read(x, m->rkey, addr(2048));
    ibv_wr_set_sge(x, m->lkey, addr(4096), 64);
    x->wr_id = 0x7a;
    x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_wr_send(x);
    ibv_wr_set_inline_data(x, at(0), 32);
    REQUIRE(ibv_wr_complete(x) == 0);
    std::vector<ibv_wc> wcs = drain(scq);
    REQUIRE(wcs.size() == 4);
    const ibv_wc_opcode ops[4] = {IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_SEND};
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(wcs[i].wr_id == 0x77 + i);
      CHECK(wcs[i].status == IBV_WC_WR_FLUSH_ERR);
      CHECK(wcs[i].opcode == ops[i]);
      CHECK(wcs[i].qp_num == q->qp_num);
    }
    CHECK(drain(rcq).empty());
  }
  SECTION("wr_abort: nothing is posted") {
    ibv_wr_start(x);
    x->wr_id = 0x88;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, m->lkey, addr(0), 64);
    ibv_wr_abort(x);
    CHECK(drain(scq).empty());
    // The next batch starts empty.
    ibv_wr_start(x);
    x->wr_id = 0x89;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, m->lkey, addr(0), 64);
    REQUIRE(ibv_wr_complete(x) == 0);
    std::vector<ibv_wc> wcs = drain(scq);
    REQUIRE(wcs.size() == 1);
    CHECK(wcs[0].wr_id == 0x89);
  }
  SECTION("wr_complete: too many SGEs is EINVAL and posts nothing") {
    ibv_sge sges[3] = {{addr(0), 8, m->lkey}, {addr(8), 8, m->lkey}, {addr(16), 8, m->lkey}};
    ibv_wr_start(x);
    x->wr_id = 0x90;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, m->lkey, addr(0), 64);
    x->wr_id = 0x91;
    ibv_wr_send(x);
    ibv_wr_set_sge_list(x, 3, sges); // max_send_sge is 2
    CHECK(ibv_wr_complete(x) == EINVAL);
    CHECK(drain(scq).empty());
  }
  SECTION("wr_complete: inline over max_inline_data is EINVAL") {
    std::vector<char> big(kMaxInline + 1, 'x');
    ibv_wr_start(x);
    x->wr_id = 0x92;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_inline_data(x, big.data(), big.size());
    CHECK(ibv_wr_complete(x) == EINVAL);
    CHECK(drain(scq).empty());
  }
  // wr_complete/wr_abort release what wr_start took: another thread can post.
  CHECK(finishes_on_other_thread([q] {
    ibv_recv_wr r{};
    r.wr_id = 0x99;
    ibv_recv_wr* bad = nullptr;
    ibv_post_recv(q, &r, &bad);
  }));
  std::vector<ibv_wc> r = drain(rcq);
  REQUIRE(r.size() == 1);
  CHECK(r[0].wr_id == 0x99);

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_dereg_mr(m) == 0);
  CHECK(ibv_destroy_cq(rcq) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_post_send / ibv_post_recv: more SGEs than the QP's caps is EINVAL",
                 "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c); // max_send_sge = max_recv_sge = 2
  ibv_mr* m = mr();
  REQUIRE(to_init(q) == 0);
  ibv_sge sges[3] = {{addr(0), 8, m->lkey}, {addr(8), 8, m->lkey}, {addr(16), 8, m->lkey}};

  ibv_recv_wr r{};
  r.wr_id = 1;
  r.sg_list = sges;
  r.num_sge = 3;
  ibv_recv_wr* rbad = nullptr;
  CHECK(ibv_post_recv(q, &r, &rbad) == EINVAL);
  CHECK(rbad == &r);
  r.num_sge = 2;
  CHECK(ibv_post_recv(q, &r, &rbad) == 0);

  REQUIRE(to_state(q, IBV_QPS_ERR) == 0); // where a valid send is accepted (and flushed)
  CHECK(drain(c).size() == 1);
  ibv_send_wr s{};
  s.wr_id = 2;
  s.opcode = IBV_WR_SEND;
  s.sg_list = sges;
  s.num_sge = 3;
  s.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* sbad = nullptr;
  CHECK(ibv_post_send(q, &s, &sbad) == EINVAL);
  CHECK(sbad == &s);
  CHECK(drain(c).empty());
  s.num_sge = 2;
  CHECK(ibv_post_send(q, &s, &sbad) == 0);
  CHECK(drain(c).size() == 1);

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_dereg_mr(m) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_post_send: inline data over max_inline_data is EINVAL", "[verbs]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  REQUIRE(to_init(q) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  REQUIRE(ibv_query_qp(q, &qa, IBV_QP_CAP, &qi) == 0);
  REQUIRE(qa.cap.max_inline_data >= kMaxInline);
  const std::uint32_t max = qa.cap.max_inline_data;

  // Inline data needs no MR (lkey 0).
  ibv_sge sge{addr(0), max + 1, 0};
  ibv_send_wr s{};
  s.wr_id = 3;
  s.opcode = IBV_WR_SEND;
  s.sg_list = &sge;
  s.num_sge = 1;
  s.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  CHECK(ibv_post_send(q, &s, &bad) == EINVAL);
  CHECK(bad == &s);
  // Split over two SGEs: the total counts.
  ibv_sge two[2] = {{addr(0), max / 2 + 1, 0}, {addr(1024), max / 2, 0}};
  s.sg_list = two;
  s.num_sge = 2;
  CHECK(ibv_post_send(q, &s, &bad) == EINVAL);
  CHECK(drain(c).empty());
  // Exactly max_inline_data is fine.
  sge.length = max;
  s.sg_list = &sge;
  s.num_sge = 1;
  CHECK(ibv_post_send(q, &s, &bad) == 0);
  std::vector<ibv_wc> wcs = drain(c);
  REQUIRE(wcs.size() == 1);
  CHECK(wcs[0].wr_id == 3);
  CHECK(wcs[0].status == IBV_WC_WR_FLUSH_ERR);
  // RDMA Read cannot be inline.
  s.opcode = IBV_WR_RDMA_READ;
  sge.length = 16;
  CHECK(ibv_post_send(q, &s, &bad) == EINVAL);

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

// ---- shared receive queues ---------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_create_srq / ibv_query_srq / ibv_modify_srq", "[verbs]") {
  int tag = 0;
  ibv_srq_init_attr ia{};
  ia.srq_context = &tag;
  ia.attr.max_wr = 8;
  ia.attr.max_sge = 2;
  ibv_srq* s = ibv_create_srq(pd, &ia);
  REQUIRE(s != nullptr);
  CHECK(s->context == ctx);
  CHECK(s->pd == pd);
  CHECK(s->srq_context == &tag);
  CHECK(ia.attr.max_wr >= 8);
  CHECK(ia.attr.max_sge >= 2);

  ibv_srq_attr a{};
  REQUIRE(ibv_query_srq(s, &a) == 0);
  CHECK(a.max_wr == 8);
  CHECK(a.max_sge == 2);
  CHECK(a.srq_limit == 0);

  SECTION("limit") {
    a = ibv_srq_attr{};
    a.srq_limit = 3;
    CHECK(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT) == 0);
    REQUIRE(ibv_query_srq(s, &a) == 0);
    CHECK(a.srq_limit == 3);
    CHECK(a.max_wr == 8);
    a.srq_limit = 9; // above max_wr
    CHECK(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT) == EINVAL);
    REQUIRE(ibv_query_srq(s, &a) == 0);
    CHECK(a.srq_limit == 3);
  }
  SECTION("max_wr resize keeps the posted WRs") {
    ibv_sge sge{addr(0), 64, 0};
    ibv_recv_wr wr[6]{};
    for (int i = 0; i < 6; ++i) {
      wr[i].wr_id = static_cast<std::uint64_t>(i);
      wr[i].sg_list = &sge;
      wr[i].num_sge = 1;
      wr[i].next = i < 5 ? &wr[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    REQUIRE(ibv_post_srq_recv(s, wr, &bad) == 0); // 6 of 8 used
    a = ibv_srq_attr{};
    a.max_wr = 5; // fewer than posted
    CHECK(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR) == EINVAL);
    a.max_wr = kMaxSrqWr + 1;
    CHECK(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR) == EINVAL);
    a.max_wr = 6;
    REQUIRE(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR) == 0);
    REQUIRE(ibv_query_srq(s, &a) == 0);
    CHECK(a.max_wr == 6);
    wr[0].next = nullptr;
    CHECK(ibv_post_srq_recv(s, &wr[0], &bad) == ENOMEM); // full at 6
    a.max_wr = 16;
    REQUIRE(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR) == 0);
    REQUIRE(ibv_query_srq(s, &a) == 0);
    CHECK(a.max_wr == 16);
    CHECK(ibv_post_srq_recv(s, &wr[0], &bad) == 0);
  }
  SECTION("both at once, and unknown mask bits") {
    a = ibv_srq_attr{};
    a.max_wr = 32;
    a.srq_limit = 20; // valid against the new max_wr
    CHECK(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) == 0);
    REQUIRE(ibv_query_srq(s, &a) == 0);
    CHECK(a.max_wr == 32);
    CHECK(a.srq_limit == 20);
    CHECK(ibv_modify_srq(s, &a, 1 << 5) == EINVAL);
  }
  CHECK(ibv_destroy_srq(s) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_create_srq: bad attributes are EINVAL", "[verbs]") {
  ibv_srq_init_attr ia{};
  ia.attr.max_wr = 8;
  ia.attr.max_sge = 2;
  SECTION("max_wr 0") { ia.attr.max_wr = 0; }
  SECTION("max_wr over max_srq_wr") { ia.attr.max_wr = kMaxSrqWr + 1; }
  SECTION("max_sge over max_srq_sge") { ia.attr.max_sge = kMaxSge + 1; }
  SECTION("srq_limit over max_wr") { ia.attr.srq_limit = 9; }
  errno = 0;
  ibv_srq* s = ibv_create_srq(pd, &ia);
  CHECK(s == nullptr);
  CHECK(errno == EINVAL);
  if (s) ibv_destroy_srq(s);
}

TEST_CASE_METHOD(Fixture, "ibv_post_srq_recv: over max_sge is EINVAL, over the depth ENOMEM",
                 "[verbs]") {
  ibv_srq* s = srq(4, 2);
  ibv_mr* m = mr();
  ibv_sge sges[3] = {{addr(0), 8, m->lkey}, {addr(8), 8, m->lkey}, {addr(16), 8, m->lkey}};
  ibv_recv_wr wr[5]{};
  for (int i = 0; i < 5; ++i) {
    wr[i].wr_id = 40 + static_cast<std::uint64_t>(i);
    wr[i].sg_list = sges;
    wr[i].num_sge = 2;
    wr[i].next = i < 4 ? &wr[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  SECTION("max_sge") {
    wr[1].num_sge = 3;
    CHECK(ibv_post_srq_recv(s, wr, &bad) == EINVAL);
    CHECK(bad == &wr[1]);
  }
  SECTION("depth") {
    CHECK(ibv_post_srq_recv(s, wr, &bad) == ENOMEM);
    CHECK(bad == &wr[4]); // four fit
    wr[4].next = nullptr;
    CHECK(ibv_post_srq_recv(s, &wr[4], &bad) == ENOMEM);
  }
  CHECK(ibv_destroy_srq(s) == 0);
  CHECK(ibv_dereg_mr(m) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_create_qp with an SRQ: post_recv is EINVAL; destroy_srq EBUSY",
                 "[verbs]") {
  ibv_srq* s = srq();
  ibv_cq* c = cq();
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = c;
  a.srq = s;
  a.cap = caps();
  a.qp_type = IBV_QPT_RC;
  ibv_qp* q = ibv_create_qp(pd, &a);
  REQUIRE(q != nullptr);
  CHECK(q->srq == s);
  CHECK(a.cap.max_recv_wr == 0); // receives come from the SRQ
  CHECK(a.cap.max_recv_sge == 0);
  REQUIRE(to_init(q) == 0);

  ibv_sge sge{addr(0), 64, 0};
  ibv_recv_wr r{};
  r.wr_id = 5;
  r.sg_list = &sge;
  r.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  CHECK(ibv_post_recv(q, &r, &bad) == EINVAL);
  CHECK(bad == &r);

  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  REQUIRE(ibv_query_qp(q, &qa, IBV_QP_CAP, &qi) == 0);
  CHECK(qi.srq == s);

  // The SRQ's receives belong to the SRQ: the QP going to ERR flushes none.
  REQUIRE(ibv_post_srq_recv(s, &r, &bad) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  CHECK(drain(c).empty());

  CHECK(ibv_destroy_srq(s) == EBUSY);
  REQUIRE(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_srq(s) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

// ---- async events ------------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_get_async_event: nothing queued on a non-blocking fd is EAGAIN",
                 "[verbs]") {
  REQUIRE(ctx->async_fd >= 0);
  int fl = ::fcntl(ctx->async_fd, F_GETFL);
  REQUIRE(fl >= 0);
  REQUIRE(::fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
  CHECK_FALSE(readable(ctx->async_fd, 0));
  ibv_async_event ev{};
  errno = 0;
  CHECK(ibv_get_async_event(ctx, &ev) == -1);
  CHECK(errno == EAGAIN);
}

TEST_CASE_METHOD(Fixture, "IBV_EVENT_CQ_ERR: a CQ of one entry overrun by two flushes", "[verbs]") {
  int fl = ::fcntl(ctx->async_fd, F_GETFL);
  REQUIRE(::fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
  ibv_cq* scq = cq();
  ibv_cq* small = cq(1);
  REQUIRE(small->cqe == 1);
  ibv_qp* q = qp(scq, small);
  REQUIRE(to_init(q) == 0);
  ibv_sge sge{addr(0), 64, 0};
  ibv_recv_wr wr[2]{};
  wr[0].wr_id = 1;
  wr[0].sg_list = &sge;
  wr[0].num_sge = 1;
  wr[0].next = &wr[1];
  wr[1].wr_id = 2;
  wr[1].sg_list = &sge;
  wr[1].num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_recv(q, wr, &bad) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0); // two flushes into one slot

  REQUIRE(readable(ctx->async_fd, 2000));
  ibv_async_event ev{};
  REQUIRE(ibv_get_async_event(ctx, &ev) == 0);
  CHECK(ev.event_type == IBV_EVENT_CQ_ERR);
  CHECK(ev.element.cq == small);
  ibv_ack_async_event(&ev);
  CHECK(small->async_events_completed == 1);
  // One event per overrun CQ, nothing more queued.
  errno = 0;
  CHECK(ibv_get_async_event(ctx, &ev) == -1);
  CHECK(errno == EAGAIN);
  // The completion that fitted is still there.
  std::vector<ibv_wc> wcs = drain(small);
  REQUIRE(wcs.size() == 1);
  CHECK(wcs[0].wr_id == 1);
  CHECK(wcs[0].status == IBV_WC_WR_FLUSH_ERR);

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(small) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
}

// ---- completion channels (need libuiwarp-shim.so: run under uiwarp-run) ----------

TEST_CASE_METHOD(Fixture,
                 "ibv_create_comp_channel: a flushed receive wakes the armed CQ [needs shim]",
                 "[verbs][shim]") {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  INFO("ibv_create_comp_channel needs libuiwarp-shim.so (LD_PRELOAD, e.g. via uiwarp-run); errno "
       << errno);
  REQUIRE(ch != nullptr);
  CHECK(ch->fd > 2); // a real fd, not the 0 of an unemulated /dev/null write
  CHECK(ch->context == ctx);
  int tag = 0;
  ibv_cq* c = ibv_create_cq(ctx, 8, &tag, ch, 0);
  REQUIRE(c != nullptr);
  CHECK(c->channel == ch);
  ibv_cq* scq = cq();
  ibv_qp* q = qp(scq, c);
  REQUIRE(to_init(q) == 0);
  ibv_sge sge{addr(0), 64, 0};
  ibv_recv_wr r{};
  r.wr_id = 0xc0;
  r.sg_list = &sge;
  r.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_recv(q, &r, &bad) == 0);

  int fl = ::fcntl(ch->fd, F_GETFL);
  REQUIRE(::fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0);
  CHECK_FALSE(readable(ch->fd, 0));

  SECTION("next completion") { REQUIRE(ibv_req_notify_cq(c, 0) == 0); }
  SECTION("solicited only: an error completion still notifies") {
    REQUIRE(ibv_req_notify_cq(c, 1) == 0);
  }
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  REQUIRE(readable(ch->fd, 2000));
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
  CHECK(ev_cq == c);
  CHECK(ev_ctx == &tag);
  ibv_ack_cq_events(c, 1);
  CHECK(c->comp_events_completed == 1);
  std::vector<ibv_wc> wcs = drain(c);
  REQUIRE(wcs.size() == 1);
  CHECK(wcs[0].wr_id == 0xc0);
  CHECK(wcs[0].status == IBV_WC_WR_FLUSH_ERR);

  // One event per arming: a completion while disarmed writes nothing.
  REQUIRE(ibv_post_recv(q, &r, &bad) == 0); // completes at once (ERR)
  CHECK_FALSE(readable(ch->fd, 50));
  CHECK(drain(c).size() == 1);
  // Re-armed, the next one does.
  REQUIRE(ibv_req_notify_cq(c, 0) == 0);
  REQUIRE(ibv_post_recv(q, &r, &bad) == 0);
  REQUIRE(readable(ch->fd, 2000));
  REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
  CHECK(ev_cq == c);
  ibv_ack_cq_events(c, 1);
  CHECK(drain(c).size() == 1);

  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_comp_channel(ch) == EBUSY); // the CQ still uses it
  CHECK(ibv_destroy_cq(c) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
  CHECK(ibv_destroy_comp_channel(ch) == 0);
}

TEST_CASE_METHOD(Fixture,
                 "ibv_create_cq_ex on a comp channel: event and channel refcount [needs shim]",
                 "[verbs][shim]") {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  INFO("ibv_create_comp_channel needs libuiwarp-shim.so (LD_PRELOAD, e.g. via uiwarp-run)");
  REQUIRE(ch != nullptr);
  int tag = 0;
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 4;
  ca.cq_context = &tag;
  ca.channel = ch;
  ca.wc_flags = IBV_WC_EX_WITH_QP_NUM;
  ibv_cq_ex* cx = ibv_create_cq_ex(ctx, &ca);
  REQUIRE(cx != nullptr);
  ibv_cq* c = ibv_cq_ex_to_cq(cx);
  CHECK(c->channel == ch);
  ibv_qp* q = qp(c, c);
  REQUIRE(to_init(q) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  REQUIRE(ibv_req_notify_cq(c, 0) == 0);
  ibv_recv_wr r{};
  r.wr_id = 0xc1;
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_recv(q, &r, &bad) == 0);
  REQUIRE(readable(ch->fd, 2000));
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
  CHECK(ev_cq == c);
  CHECK(ev_ctx == &tag);
  ibv_ack_cq_events(c, 1);
  ibv_poll_cq_attr pa{};
  REQUIRE(ibv_start_poll(cx, &pa) == 0);
  CHECK(cx->wr_id == 0xc1);
  CHECK(ibv_wc_read_qp_num(cx) == q->qp_num);
  CHECK(ibv_next_poll(cx) == ENOENT);
  ibv_end_poll(cx);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
  CHECK(ibv_destroy_comp_channel(ch) == 0); // the CQ's reference is gone
}

// ---- teardown ----------------------------------------------------------------------

TEST_CASE("teardown: every object destroyed in dependency order, then the device closed",
          "[verbs]") {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(list != nullptr);
  ibv_device* dev = find_uiwarp(list, n);
  REQUIRE(dev != nullptr);
  ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx != nullptr);
  std::vector<char> mem(16384);

  ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd != nullptr);
  ibv_mr* mr = ibv_reg_mr(pd, mem.data(), mem.size(), kRemoteAccess);
  REQUIRE(mr != nullptr);
  ibv_cq* cq = ibv_create_cq(ctx, 32, nullptr, nullptr, 0);
  REQUIRE(cq != nullptr);
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 32;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
  REQUIRE(cqx != nullptr);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &sa);
  REQUIRE(srq != nullptr);

  ibv_qp_init_attr qa{};
  qa.send_cq = cq;
  qa.recv_cq = ibv_cq_ex_to_cq(cqx);
  qa.srq = srq;
  qa.cap.max_send_wr = 8;
  qa.cap.max_send_sge = 1;
  qa.qp_type = IBV_QPT_RC;
  ibv_qp* q1 = ibv_create_qp(pd, &qa);
  REQUIRE(q1 != nullptr);
  ibv_qp_init_attr_ex xa{};
  xa.send_cq = cq;
  xa.recv_cq = cq;
  xa.cap.max_send_wr = 8;
  xa.cap.max_recv_wr = 8;
  xa.cap.max_send_sge = 1;
  xa.cap.max_recv_sge = 1;
  xa.qp_type = IBV_QPT_RC;
  xa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  xa.pd = pd;
  xa.send_ops_flags = IBV_QP_EX_WITH_SEND;
  ibv_qp* q2 = ibv_create_qp_ex(ctx, &xa);
  REQUIRE(q2 != nullptr);

  // Leave work queued everywhere: posted receives on q2 and the SRQ, a flushed
  // completion on the CQ, and a QP in each of INIT and ERR.
  REQUIRE(to_init(q1) == 0);
  REQUIRE(to_init(q2) == 0);
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(mem.data()), 64, mr->lkey};
  ibv_recv_wr r{};
  r.sg_list = &sge;
  r.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_recv(q2, &r, &bad) == 0);
  REQUIRE(ibv_post_srq_recv(srq, &r, &bad) == 0);
  REQUIRE(to_state(q1, IBV_QPS_ERR) == 0);
  ibv_send_wr s{};
  s.opcode = IBV_WR_SEND;
  s.sg_list = &sge;
  s.num_sge = 1;
  s.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* sbad = nullptr;
  REQUIRE(ibv_post_send(q1, &s, &sbad) == 0);

  CHECK(ibv_destroy_qp(q1) == 0);
  CHECK(ibv_destroy_qp(q2) == 0);
  CHECK(ibv_destroy_srq(srq) == 0);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
}
