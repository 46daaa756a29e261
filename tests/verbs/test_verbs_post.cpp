// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Posting work requests on a QP without a connection: ibv_post_send / ibv_post_recv and the
// ibv_wr_* API before RTS and in ERR (flush completions, in order), SGE and inline limits.
// Through the public libibverbs API only, with the Fixture of verbs_fixture.hpp.
#include "catch_compat.hpp"
#include "verbs_fixture.hpp"

#include <infiniband/verbs.h>

using namespace verbs_test;

// ---- posting and flushing -----------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_post_send: before RTS it is EINVAL with bad_wr at the first WR",
                 "[verbs][post]") {
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
                 "[verbs][post]") {
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
  REQUIRE(to_state(q, IBV_QPS_RESET) == 0); // a new QP is in INIT
  CHECK(ibv_post_recv(q, &wr, &bad) == EINVAL);
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

TEST_CASE_METHOD(Fixture, "ibv_modify_qp to ERR: posted receives are flushed in order",
                 "[verbs][post]") {
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
                 "[verbs][post]") {
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

  // An unsupported opcode is refused even in ERR, and names the WR (RFC 7306 has no Send
  // with Immediate Data).
  ibv_send_wr bad_op{};
  bad_op.wr_id = 0x71;
  bad_op.opcode = IBV_WR_SEND_WITH_IMM;
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
                 "[verbs][post]") {
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
                 "[verbs][post]") {
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

TEST_CASE_METHOD(Fixture, "ibv_post_send: inline data over max_inline_data is EINVAL",
                 "[verbs][post]") {
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
