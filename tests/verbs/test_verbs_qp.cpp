// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// RC queue pairs: creation (ibv_create_qp / _ex, ibv_qp_to_qp_ex), iWARP's state rules in
// ibv_modify_qp (no INIT->RTR->RTS without the RDMA CM, no IB address attributes) and
// ibv_query_qp. Through the public libibverbs API only, with the Fixture of verbs_fixture.hpp.
#include "catch_compat.hpp"
#include "verbs_fixture.hpp"

#include <infiniband/verbs.h>

using namespace verbs_test;

// ---- queue pairs -------------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_create_qp: an RC QP in RESET with the caps asked for",
                 "[verbs][qp]") {
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
  // As over the kernel: the ibv_qp says RESET (libibverbs' ibv_cmd_create_qp sets it for every
  // device), ibv_query_qp says INIT on an RNIC (siw reports its IDLE as INIT); rdma-core's
  // tests/test_qp.py checks both.
  CHECK(q->state == IBV_QPS_RESET);
  {
    ibv_qp_attr qa{};
    ibv_qp_init_attr qi{};
    REQUIRE(ibv_query_qp(q, &qa, IBV_QP_STATE, &qi) == 0);
    CHECK(qa.qp_state == IBV_QPS_INIT);
  }
  CHECK(q->qp_num != 0);
  CHECK(q->qp_num != 1);
  // The caps written back: at least what was asked; inline up to 256 bytes.
  CHECK(a.cap.max_send_wr >= 16);
  CHECK(a.cap.max_recv_wr >= 16);
  CHECK(a.cap.max_send_sge >= 2);
  CHECK(a.cap.max_recv_sge >= 2);
  CHECK(a.cap.max_inline_data >= kMaxInline);
  CHECK(queried_state(q) == IBV_QPS_INIT);

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

TEST_CASE_METHOD(Fixture, "ibv_create_qp: UD and UC are EOPNOTSUPP", "[verbs][qp]") {
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

TEST_CASE_METHOD(Fixture, "ibv_create_qp: caps over the device limits are EINVAL", "[verbs][qp]") {
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
                 "[verbs][qp]") {
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
  CHECK(q->state == IBV_QPS_RESET); // as libibverbs leaves it; ibv_query_qp says INIT
  CHECK(q->pd == pd);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_qp_to_qp_ex: NULL for a QP created without send ops",
                 "[verbs][qp]") {
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

TEST_CASE_METHOD(Fixture,
                 "ibv_create_qp_ex: RFC 7306 send ops are accepted (used when "
                 "negotiated), and memory window ones; those uiwarp has not are EOPNOTSUPP",
                 "[verbs][qp]") {
  ibv_cq* c = cq();
  ibv_qp_init_attr_ex a{};
  a.send_cq = a.recv_cq = c;
  a.cap = caps();
  a.qp_type = IBV_QPT_RC;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.pd = pd;
  auto refused = [&](std::uint64_t ops) {
    a.send_ops_flags = ops;
    errno = 0;
    ibv_qp* q = ibv_create_qp_ex(ctx, &a);
    CHECK(q == nullptr);
    CHECK(errno == EOPNOTSUPP);
    if (q) ibv_destroy_qp(q);
  };
  // An extended QP with `ops` is created, with the builders `check` looks at installed.
  auto accepted = [&](std::uint64_t ops, auto check) {
    a.send_ops_flags = ops;
    ibv_qp* q = ibv_create_qp_ex(ctx, &a);
    REQUIRE(q != nullptr);
    ibv_qp_ex* x = ibv_qp_to_qp_ex(q);
    REQUIRE(x != nullptr);
    check(*x);
    CHECK(ibv_destroy_qp(q) == 0);
  };
  SECTION("RDMA Write with Immediate and the atomics") {
    accepted(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
             [](const ibv_qp_ex& x) {
               CHECK(x.wr_rdma_write_imm != nullptr);
               CHECK(x.wr_atomic_cmp_swp != nullptr);
               CHECK(x.wr_atomic_fetch_add != nullptr);
             });
  }
  SECTION("memory windows: bind and local invalidate") {
    accepted(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV,
             [](const ibv_qp_ex& x) {
               CHECK(x.wr_bind_mw != nullptr);
               CHECK(x.wr_local_inv != nullptr);
             });
  }
  SECTION("send with immediate") { refused(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM); }
  SECTION("TSO") { refused(IBV_QP_EX_WITH_TSO); }
  SECTION("atomic write") { refused(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE); }
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: RESET->INIT on port 1; port 2 is EINVAL", "[verbs][qp]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.qp_access_flags = kRemoteAccess;
  a.port_num = 2;
  CHECK(ibv_modify_qp(
            q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == EINVAL);
  CHECK(q->state == IBV_QPS_RESET); // unchanged
  CHECK(queried_state(q) == IBV_QPS_INIT);
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
                 "[verbs][qp]") {
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.qp_access_flags = kRemoteAccess;
  a.port_num = 1;
  SECTION("from RESET it is EINVAL") {
    REQUIRE(to_state(q, IBV_QPS_RESET) == 0);
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
                 "[verbs][qp]") {
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
                 "[verbs][qp]") {
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

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: RTS without the RDMA CM is EINVAL", "[verbs][qp]") {
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

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: a state-less modify is accepted", "[verbs][qp]") {
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
                 "[verbs][qp]") {
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

TEST_CASE_METHOD(Fixture, "ibv_modify_qp: ERR and back to RESET, then INIT again", "[verbs][qp]") {
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

TEST_CASE_METHOD(Fixture, "ibv_query_qp: reports state, access, port and caps", "[verbs][qp]") {
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
