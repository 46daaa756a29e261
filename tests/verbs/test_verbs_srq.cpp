// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Shared receive queues: ibv_create_srq / ibv_query_srq / ibv_modify_srq, ibv_post_srq_recv
// limits, a QP created with an SRQ, and the Last WQE Reached event of one moved to ERR. Through
// the public libibverbs API only, with the Fixture of verbs_fixture.hpp.
#include "catch_compat.hpp"
#include "verbs_fixture.hpp"

#include <cstdio>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <string>
#include <vector>

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

// ---- Last WQE Reached ---------------------------------------------------------------

namespace {

// The async events queued now, in order, each acknowledged (the fd is non-blocking), as lines
// "QP 0x1a2b3c: last WQE reached".
std::vector<std::string> queued_events(ibv_context* ctx) {
  std::vector<std::string> out;
  ibv_async_event ev{};
  while (readable(ctx->async_fd, 50) && ibv_get_async_event(ctx, &ev) == 0) {
    char qpn[24];
    std::snprintf(qpn, sizeof qpn, "QP 0x%06x: ", ev.element.qp->qp_num);
    out.push_back(qpn + std::string(ibv_event_type_str(ev.event_type)));
    ibv_ack_async_event(&ev);
  }
  return out;
}

} // namespace

TEST_CASE_METHOD(Fixture,
                 "ibv_modify_qp to ERR: a QP of an SRQ raises IBV_EVENT_QP_LAST_WQE_REACHED once "
                 "per entry into ERR, and no QP raises IBV_EVENT_QP_FATAL",
                 "[verbs][srq][async]") {
  // ib_drain_qp's way with a QP of an SRQ (the kernel's __ib_drain_srq): move it to ERR, wait
  // for Last WQE Reached, then drain the CQ. A move the program makes itself is no error.
  const int fl = ::fcntl(ctx->async_fd, F_GETFL);
  REQUIRE(::fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
  ibv_srq* s = srq();
  ibv_cq* c = cq();
  ibv_qp* q = qp(c, c, s);
  ibv_qp* plain = qp(c, c);
  char qpn[24];
  std::snprintf(qpn, sizeof qpn, "QP 0x%06x: ", q->qp_num);
  const std::vector<std::string> once{qpn + std::string("last WQE reached")};

  REQUIRE(to_init(q) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  CHECK(queued_events(ctx) == once);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0); // already there: no new entry
  CHECK(queued_events(ctx) == std::vector<std::string>{});

  REQUIRE(to_init(plain) == 0);
  REQUIRE(to_state(plain, IBV_QPS_ERR) == 0); // no SRQ: nothing to say
  CHECK(queued_events(ctx) == std::vector<std::string>{});

  REQUIRE(to_state(q, IBV_QPS_RESET) == 0); // through RESET, a new entry into ERR
  REQUIRE(to_init(q) == 0);
  REQUIRE(to_state(q, IBV_QPS_ERR) == 0);
  CHECK(queued_events(ctx) == once);
  CHECK(q->events_completed == 2);

  CHECK(ibv_destroy_qp(plain) == 0);
  CHECK(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_srq(s) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}
