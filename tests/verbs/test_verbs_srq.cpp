// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Shared receive queues: ibv_create_srq / ibv_query_srq / ibv_modify_srq, ibv_post_srq_recv
// limits, and a QP created with an SRQ. Through the public libibverbs API only, with the Fixture of
// verbs_fixture.hpp.
#include "catch_compat.hpp"
#include "verbs_fixture.hpp"

#include <infiniband/verbs.h>

using namespace verbs_test;

// ---- shared receive queues ---------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_create_srq / ibv_query_srq / ibv_modify_srq", "[verbs][srq]") {
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

TEST_CASE_METHOD(Fixture, "ibv_create_srq: bad attributes are EINVAL", "[verbs][srq]") {
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
                 "[verbs][srq]") {
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
                 "[verbs][srq]") {
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
