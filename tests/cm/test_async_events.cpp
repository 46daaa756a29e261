// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The asynchronous events of a connected QP that enters ERR (ibv_get_async_event), through
// stock librdmacm and libibverbs over uiwarp-run: a QP of an SRQ raises
// IBV_EVENT_QP_LAST_WQE_REACHED once it is in ERR with its last completion in its CQ, whoever
// ended the connection (the kernel's ib_drain_qp, and programs that free such a QP only then,
// wait for it); IBV_EVENT_QP_FATAL comes with a Terminate, never for the program's own move to
// ERR nor for the peer's orderly close.
#include "async_events.hpp"
#include "connected_pair.hpp"

#include <chrono>
#include <cstdio>
#include <functional>
#include <infiniband/verbs.h>
#include <poll.h>
#include <string>
#include <thread>
#include <vector>

using namespace dp;

namespace {

int to_err(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

bool reaches_err(ibv_qp* qp) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  do {
    REQUIRE(ibv_query_qp(qp, &a, IBV_QP_STATE, &init) == 0);
    if (a.qp_state == IBV_QPS_ERR) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

SideOptions with_srq() {
  SideOptions o;
  o.srq = true;
  return o;
}

} // namespace

TEST_CASE("a connected QP the program moves to ERR raises no IBV_EVENT_QP_FATAL; one of an SRQ "
          "raises IBV_EVENT_QP_LAST_WQE_REACHED once",
          "[datapath][async]") {
  ConnectedPair p(with_srq());
  ibv_context* ctx = p.server.id->verbs;
  REQUIRE(p.server.post_recv(1, 0, 64) == 0); // to the SRQ, which other QPs may share
  REQUIRE(to_err(p.server.qp()) == 0);
  REQUIRE(reaches_err(p.client.qp())); // the peer saw the close: an orderly one, no event
  const Events all = collect(ctx, [](const Events& e) { return !e.empty(); });
  CHECK(all == Events{line(IBV_EVENT_QP_LAST_WQE_REACHED, p.server.qp())});
  ibv_wc wc;
  CHECK(ibv_poll_cq(p.server.rcq, 1, &wc) == 0); // the receive was the SRQ's, not flushed
  REQUIRE(to_err(p.server.qp()) == 0);           // in ERR already: no second entry
  CHECK(collect(ctx, [](const Events&) { return true; }) == Events{});

  // Without an SRQ the program's move to ERR raises nothing at all.
  ConnectedPair plain;
  REQUIRE(to_err(plain.client.qp()) == 0);
  REQUIRE(reaches_err(plain.server.qp()));
  CHECK(collect(plain.client.id->verbs, [](const Events&) { return true; }) == Events{});
}

TEST_CASE("a QP of an SRQ whose peer closes the connection raises "
          "IBV_EVENT_QP_LAST_WQE_REACHED, and no IBV_EVENT_QP_FATAL",
          "[datapath][async]") {
  ConnectedPair p(with_srq());
  REQUIRE(rdma_disconnect(p.client.id) == 0);
  const Events all =
      collect(p.server.id->verbs, [&](const Events& e) { return !of(e, p.server.qp()).empty(); });
  CHECK(of(all, p.server.qp()) == Events{line(IBV_EVENT_QP_LAST_WQE_REACHED, p.server.qp())});
  CHECK(of(all, p.client.qp()) == Events{});
}

TEST_CASE("a QP of an SRQ that gets a Terminate raises IBV_EVENT_QP_FATAL, then "
          "IBV_EVENT_QP_LAST_WQE_REACHED once its last completion is in its CQ",
          "[datapath][async]") {
  ConnectedPair p(with_srq());
  // An RDMA Read through an STag the peer never gave: it answers with a Terminate (invalid
  // STag), and the Read completes in error.
  const auto raddr = reinterpret_cast<std::uintptr_t>(p.client.at(0));
  REQUIRE(p.server.post(IBV_WR_RDMA_READ, 7, 0, 64, raddr, p.client.mr->rkey ^ 0xff) == 0);
  const Events all = collect(p.server.id->verbs,
                             [&](const Events& e) { return of(e, p.server.qp()).size() >= 2; });
  CHECK(of(all, p.server.qp()) == Events{line(IBV_EVENT_QP_FATAL, p.server.qp()),
                                         line(IBV_EVENT_QP_LAST_WQE_REACHED, p.server.qp())});
  ibv_wc wc[4];
  REQUIRE(ibv_poll_cq(p.server.scq, 4, wc) == 1); // there before the event
  CHECK(wc[0].wr_id == 7);
  CHECK(wc[0].status != IBV_WC_SUCCESS);
}
