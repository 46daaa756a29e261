// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// IB-style connect between uiwarp peers (a uiwarp extension; uiwarpd(8) ib-connect-port), its
// edges, through stock libibverbs over uiwarp-run, with QPs of one process: work posted before
// the connection is up, Sends from RTR, and every way the rendezvous can go wrong, each of
// which must end in an error (ERR, flushed work requests, IBV_EVENT_QP_FATAL) or a refused
// modify, never a hang. tests/cm/CMakeLists.txt runs it with a short startup timeout and
// UIWARP_IB_CONNECT_TIMEOUT_MS, so that a peer that never comes is given up in seconds.
#include "catch_compat.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <infiniband/verbs.h>
#include <poll.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Dev {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  Dev() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    REQUIRE((list && n > 0));
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    REQUIRE(ctx);
    pd = ibv_alloc_pd(ctx);
    REQUIRE(pd);
  }
  ~Dev() {
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
  }
  ibv_gid gid(int index) const {
    ibv_gid g{};
    REQUIRE(ibv_query_gid(ctx, 1, index, &g) == 0);
    return g;
  }
  // The next async event, if one comes within `ms`.
  bool async_event(ibv_event_type* type, int ms) const {
    pollfd p{ctx->async_fd, POLLIN, 0};
    if (::poll(&p, 1, ms) != 1) return false;
    ibv_async_event e{};
    if (ibv_get_async_event(ctx, &e)) return false;
    *type = e.event_type;
    ibv_ack_async_event(&e);
    return true;
  }
};

struct Q {
  Dev& d;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  std::vector<char> buf = std::vector<char>(4096);
  ibv_mr* mr = nullptr;
  explicit Q(Dev& dev) : d(dev) {
    cq = ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0);
    REQUIRE(cq);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    qp = ibv_create_qp(d.pd, &a);
    REQUIRE(qp);
    mr = ibv_reg_mr(d.pd, buf.data(), buf.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(mr);
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_INIT;
    s.port_num = 1;
    s.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    REQUIRE(ibv_modify_qp(
                qp, &s, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  }
  ~Q() {
    ibv_destroy_qp(qp);
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq);
  }
  // ibv_rc_pingpong's RTR: the peer's GID (global route) and QPN.
  int rtr(const ibv_gid& dgid, std::uint32_t dqpn, int sgid_index = 1, bool global = true) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dqpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = global;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(sgid_index);
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  }
  int rts() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  }
  int post_recv(std::uint64_t id) {
    ibv_sge s{reinterpret_cast<std::uintptr_t>(buf.data()), 2048, mr->lkey};
    ibv_recv_wr w{};
    w.wr_id = id;
    w.sg_list = &s;
    w.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp, &w, &bad);
  }
  int post_send(std::uint64_t id, const char* text) {
    std::strcpy(buf.data() + 2048, text);
    ibv_sge s{reinterpret_cast<std::uintptr_t>(buf.data() + 2048),
              static_cast<std::uint32_t>(std::strlen(text) + 1), mr->lkey};
    ibv_send_wr w{};
    w.wr_id = id;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    w.sg_list = &s;
    w.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &w, &bad);
  }
  // The next completion within `ms` (false: none came).
  bool poll(ibv_wc* wc, int ms) {
    for (auto until = Clock::now() + std::chrono::milliseconds(ms); Clock::now() < until;)
      if (ibv_poll_cq(cq, 1, wc) == 1) return true;
    return false;
  }
  ibv_qp_state state() {
    ibv_qp_attr a{};
    ibv_qp_init_attr i{};
    REQUIRE(ibv_query_qp(qp, &a, IBV_QP_STATE, &i) == 0);
    return a.qp_state;
  }
};

// A QPN nobody has: uiwarp's are drawn at random, so take one next to `qpn` that no QP of
// this process holds (the test's QPs are the only ones on its private uiwarpd's host port).
std::uint32_t absent_qpn(std::uint32_t qpn, bool above) {
  return above ? (qpn + 7) & 0xffffff : (qpn - 7) & 0xffffff;
}

// The QP gave up on its peer: QP_FATAL, ERR, and the posted receive flushed.
void expect_failed(Dev& d, Q& q, int within_ms) {
  ibv_event_type t{};
  REQUIRE(d.async_event(&t, within_ms));
  CHECK(t == IBV_EVENT_QP_FATAL);
  CHECK(q.state() == IBV_QPS_ERR);
  ibv_wc wc{};
  REQUIRE(q.poll(&wc, 1000));
  CHECK(wc.wr_id == 1);
  CHECK(wc.status == IBV_WC_WR_FLUSH_ERR);
}

} // namespace

TEST_CASE("IB-style connect: work posted before the connection is up waits, and an RTR QP sends",
          "[ib]") {
  Dev d;
  Q a(d), b(d);
  const ibv_gid g = d.gid(1);
  REQUIRE(a.post_recv(1) == 0);
  REQUIRE(b.post_recv(1) == 0);
  // a goes all the way to RTS and posts at once; b follows later and stays in RTR.
  REQUIRE(a.rtr(g, b.qp->qp_num) == 0);
  REQUIRE(a.rts() == 0);
  REQUIRE(a.post_send(10, "from a, posted before the connection") == 0);
  REQUIRE(b.rtr(g, a.qp->qp_num) == 0);
  REQUIRE(b.post_send(20, "from b, in RTR") == 0);
  ibv_wc wc{};
  std::vector<std::uint64_t> seen;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(b.poll(&wc, 10000));
    CHECK(wc.status == IBV_WC_SUCCESS);
    seen.push_back(wc.wr_id);
  }
  CHECK(std::string(b.buf.data()) == "from a, posted before the connection");
  for (int i = 0; i < 2; ++i) {
    REQUIRE(a.poll(&wc, 10000));
    CHECK(wc.status == IBV_WC_SUCCESS);
  }
  CHECK(std::string(a.buf.data()) == "from b, in RTR");
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  REQUIRE(ibv_query_qp(a.qp, &attr, IBV_QP_DEST_QPN, &init) == 0);
  CHECK(attr.dest_qp_num == b.qp->qp_num);
}

TEST_CASE("IB-style connect: refused at once when it cannot work (GID 0, no GRH, itself)", "[ib]") {
  Dev d;
  Q a(d);
  const ibv_gid g = d.gid(1);
  CHECK(a.rtr(g, 0x123456, 0) == EINVAL);        // the MAC-derived GID
  CHECK(a.rtr(d.gid(0), 0x123456) == EINVAL);    // a peer GID that is no address
  CHECK(a.rtr(g, 0x123456, 1, false) == EINVAL); // LID only
  CHECK(a.rtr(g, a.qp->qp_num) == EINVAL);       // itself
  CHECK(a.state() == IBV_QPS_INIT);
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  CHECK(ibv_modify_qp(a.qp, &s, IBV_QP_STATE) == EINVAL); // no connection, none coming
}

TEST_CASE("IB-style connect: a peer QP that never comes puts the QP in ERR, both roles", "[ib]") {
  Dev d;
  const ibv_gid g = d.gid(1);
  for (bool initiator : {true, false}) {
    INFO((initiator ? "initiator (retries a port nobody listens on)" : "responder (waits)"));
    Q a(d);
    REQUIRE(a.post_recv(1) == 0);
    REQUIRE(a.rtr(g, absent_qpn(a.qp->qp_num, initiator)) == 0);
    REQUIRE(a.rts() == 0);
    REQUIRE(a.post_send(2, "never delivered") == 0);
    expect_failed(d, a, 15000);
    ibv_wc wc{};
    REQUIRE(a.poll(&wc, 1000));
    CHECK(wc.wr_id == 2);
    CHECK(wc.status == IBV_WC_WR_FLUSH_ERR);
  }
}

TEST_CASE("IB-style connect: a stale QPN, and two QPs racing for one peer, get errors", "[ib]") {
  Dev d;
  const ibv_gid g = d.gid(1);
  Q b(d), a1(d), a2(d);
  for (Q* q : {&b, &a1, &a2})
    REQUIRE(q->post_recv(1) == 0);
  // a1 and a2 both name b; b names a1. One pair connects, a2 fails (its Request names a QP
  // that waits for someone else, or it waits for b in vain).
  REQUIRE(b.rtr(g, a1.qp->qp_num) == 0);
  REQUIRE(a1.rtr(g, b.qp->qp_num) == 0);
  REQUIRE(a2.rtr(g, b.qp->qp_num) == 0);
  REQUIRE(a1.rts() == 0);
  REQUIRE(a1.post_send(5, "a1") == 0);
  ibv_wc wc{};
  REQUIRE(b.poll(&wc, 10000));
  CHECK(wc.wr_id == 1);
  CHECK(wc.status == IBV_WC_SUCCESS);
  CHECK(std::string(b.buf.data()) == "a1");
  expect_failed(d, a2, 15000);
  CHECK(b.state() == IBV_QPS_RTR);
  CHECK(a1.state() == IBV_QPS_RTS);
}

TEST_CASE("IB-style connect: a QP reset while it waits leaves nothing behind", "[ib]") {
  Dev d;
  const ibv_gid g = d.gid(1);
  Q a(d);
  REQUIRE(a.rtr(g, absent_qpn(a.qp->qp_num, false)) == 0); // responder: waits
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RESET;
  REQUIRE(ibv_modify_qp(a.qp, &s, IBV_QP_STATE) == 0);
  ibv_event_type t{};
  CHECK_FALSE(d.async_event(&t, 4000)); // the wait ended: no QP_FATAL for it later
  // The same QP connects afresh.
  Q b(d);
  s.qp_state = IBV_QPS_INIT;
  s.port_num = 1;
  REQUIRE(ibv_modify_qp(a.qp, &s, IBV_QP_STATE | IBV_QP_PORT) == 0);
  REQUIRE(b.post_recv(1) == 0);
  REQUIRE(a.rtr(g, b.qp->qp_num) == 0);
  REQUIRE(b.rtr(g, a.qp->qp_num) == 0);
  REQUIRE(a.rts() == 0);
  REQUIRE(a.post_send(3, "again") == 0);
  ibv_wc wc{};
  REQUIRE(b.poll(&wc, 10000));
  CHECK(wc.status == IBV_WC_SUCCESS);
}
