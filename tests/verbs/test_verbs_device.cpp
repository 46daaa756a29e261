// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The device and its context (ibv_get_device_list, ibv_open_device, the query verbs and the
// limits uiwarp advertises), protection domains, and the teardown of every object in
// dependency order. Through the public libibverbs API only, with the Fixture of verbs_fixture.hpp.
#include "catch_compat.hpp"
#include "verbs_fixture.hpp"

#include <cstring>
#include <infiniband/verbs.h>
#include <vector>

using namespace verbs_test;

// ---- device --------------------------------------------------------------------------

TEST_CASE("ibv_get_device_list: uiwarp0 is listed as an iWARP RNIC", "[verbs][device]") {
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

TEST_CASE("ibv_open_device: a context with an async fd and one completion vector",
          "[verbs][device]") {
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

TEST_CASE_METHOD(Fixture, "ibv_query_device: the limits uiwarp advertises", "[verbs][device]") {
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
  CHECK(a.atomic_cap == IBV_ATOMIC_HCA); // RFC 7306, between uiwarp peers
  CHECK(a.max_mw == a.max_mr);           // windows share the STag space with regions
  CHECK((a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B));
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

TEST_CASE_METHOD(Fixture, "ibv_query_device_ex: orig_attr equals ibv_query_device",
                 "[verbs][device]") {
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
  // pyverbs reads the 32-bit port count (a kernel device reports it with the 8-bit one).
  CHECK(x.phys_port_cnt_ex == 1);
  CHECK(x.device_cap_flags_ex == a.device_cap_flags);

  ibv_query_device_ex_input in{};
  REQUIRE(ibv_query_device_ex(ctx, &in, &x) == 0);
  in.comp_mask = 1;
  CHECK(ibv_query_device_ex(ctx, &in, &x) == EINVAL);
}

TEST_CASE_METHOD(Fixture, "ibv_query_port: port 1 is ACTIVE Ethernet with a GID table",
                 "[verbs][device]") {
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

TEST_CASE_METHOD(Fixture, "ibv_query_gid: index 0 of port 1 is a non-zero GID", "[verbs][device]") {
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

TEST_CASE_METHOD(Fixture, "ibv_query_gid_ex / ibv_query_gid_table: the GID table as ibv_query_gid",
                 "[verbs][device]") {
  // libibverbs answers these from sysfs when the device has no GID ioctl (our cmd_fd), the way
  // it does for an older kernel; the entries must agree with ibv_query_gid and the port.
  ibv_port_attr p{};
  REQUIRE(ibv_query_port(ctx, 1, &p) == 0);
  std::vector<ibv_gid_entry> t(static_cast<std::size_t>(p.gid_tbl_len) + 4);
  ssize_t n = ibv_query_gid_table(ctx, t.data(), t.size(), 0);
  REQUIRE(n >= 1);
  REQUIRE(n <= p.gid_tbl_len);
  for (ssize_t i = 0; i < n; ++i) {
    const ibv_gid_entry& e = t[static_cast<std::size_t>(i)];
    INFO("entry " << i << ", GID index " << e.gid_index);
    CHECK(e.port_num == 1);
    CHECK(e.ndev_ifindex != 0); // the netdev the device sits on
    union ibv_gid g;
    REQUIRE(ibv_query_gid(ctx, 1, static_cast<int>(e.gid_index), &g) == 0);
    CHECK(std::memcmp(&g, &e.gid, sizeof g) == 0);
    ibv_gid_entry one{};
    REQUIRE(ibv_query_gid_ex(ctx, 1, e.gid_index, &one, 0) == 0);
    CHECK(std::memcmp(&one.gid, &e.gid, sizeof one.gid) == 0);
    CHECK(one.gid_type == e.gid_type);
  }
  ibv_gid_entry none{};
  CHECK(ibv_query_gid_ex(ctx, 1, static_cast<std::uint32_t>(p.gid_tbl_len), &none, 0) != 0);
  CHECK(ibv_query_gid_ex(ctx, 2, 0, &none, 0) != 0); // no port 2
}

TEST_CASE("ibv_alloc_mw: both types, unbound, each with its own rkey; a PD in use stays",
          "[verbs][device]") {
  Fixture f;
  ibv_mw* m1 = ibv_alloc_mw(f.pd, IBV_MW_TYPE_1);
  ibv_mw* m2 = ibv_alloc_mw(f.pd, IBV_MW_TYPE_2);
  REQUIRE((m1 && m2));
  CHECK(m1->type == IBV_MW_TYPE_1);
  CHECK(m2->type == IBV_MW_TYPE_2);
  CHECK(m1->rkey != m2->rkey);
  CHECK(m1->pd == f.pd);
  CHECK(ibv_dealloc_pd(f.pd) == EBUSY);
  CHECK(ibv_dealloc_mw(m1) == 0);
  CHECK(ibv_dealloc_mw(m2) == 0);
}

// ---- protection domains ------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_alloc_pd / ibv_dealloc_pd: distinct PDs of this context",
                 "[verbs][pd]") {
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
                 "[verbs][pd]") {
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

// ---- teardown ----------------------------------------------------------------------

TEST_CASE("teardown: every object destroyed in dependency order, then the device closed",
          "[verbs][teardown]") {
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
