// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Completion queues (classic and extended: ibv_create_cq_ex and its poll API), async events
// (IBV_EVENT_CQ_ERR), and completion channels (the [shim] cases need libuiwarp-shim.so: run
// them under uiwarp-run). Through the public libibverbs API only, with the Fixture of
// verbs_fixture.hpp.
#include "catch_compat.hpp"
#include "verbs_fixture.hpp"

#include <infiniband/verbs.h>

using namespace verbs_test;

// ---- completion queues -------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_create_cq: bad sizes and comp_vector are EINVAL", "[verbs][cq]") {
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
                 "[verbs][cq]") {
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

TEST_CASE_METHOD(Fixture, "ibv_poll_cq: an empty CQ returns 0", "[verbs][cq]") {
  ibv_cq* c = cq();
  ibv_wc wc[4];
  CHECK(ibv_poll_cq(c, 4, wc) == 0);
  CHECK(ibv_poll_cq(c, 0, wc) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_req_notify_cq: next and solicited-only are accepted",
                 "[verbs][cq]") {
  ibv_cq* c = cq();
  CHECK(ibv_req_notify_cq(c, 0) == 0);
  CHECK(ibv_req_notify_cq(c, 1) == 0);
  CHECK(ibv_req_notify_cq(c, 0) == 0); // re-arming is fine
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_resize_cq: keeps queued completions; smaller than queued is EINVAL",
                 "[verbs][cq]") {
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

TEST_CASE_METHOD(Fixture, "ibv_destroy_cq: EBUSY while a QP uses the CQ", "[verbs][cq]") {
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_qp* q = qp(scq, rcq);
  CHECK(ibv_destroy_cq(scq) == EBUSY);
  CHECK(ibv_destroy_cq(rcq) == EBUSY);
  REQUIRE(ibv_destroy_qp(q) == 0);
  CHECK(ibv_destroy_cq(scq) == 0);
  CHECK(ibv_destroy_cq(rcq) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_destroy_cq: one CQ as send and receive CQ of two QPs",
                 "[verbs][cq]") {
  ibv_cq* c = cq();
  ibv_qp* a = qp(c, c);
  ibv_qp* b = qp(c, c);
  CHECK(a->qp_num != b->qp_num);
  REQUIRE(ibv_destroy_qp(a) == 0);
  CHECK(ibv_destroy_cq(c) == EBUSY);
  REQUIRE(ibv_destroy_qp(b) == 0);
  CHECK(ibv_destroy_cq(c) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_create_cq_ex: the extended poll API", "[verbs][cq]") {
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

TEST_CASE_METHOD(Fixture, "ibv_start_poll: reposting a receive inside the poll loop",
                 "[verbs][cq]") {
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
                 "[verbs][cq]") {
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

TEST_CASE_METHOD(Fixture, "ibv_create_cq_ex: bad cqe and comp_vector are EINVAL", "[verbs][cq]") {
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

TEST_CASE_METHOD(Fixture, "ibv_modify_cq: moderation is EOPNOTSUPP", "[verbs][cq]") {
  ibv_cq* c = cq();
  ibv_modify_cq_attr m{};
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate.cq_count = 8;
  m.moderate.cq_period = 10;
  CHECK(ibv_modify_cq(c, &m) == EOPNOTSUPP);
  CHECK(ibv_destroy_cq(c) == 0);
}

// ---- async events ------------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_get_async_event: nothing queued on a non-blocking fd is EAGAIN",
                 "[verbs][async]") {
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

TEST_CASE_METHOD(Fixture, "IBV_EVENT_CQ_ERR: a CQ of one entry overrun by two flushes",
                 "[verbs][async]") {
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
                 "[verbs][channel][shim]") {
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
                 "[verbs][channel][shim]") {
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
