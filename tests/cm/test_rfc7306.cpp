// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// RFC 7306 between uiwarp peers (a uiwarp extension, negotiated with a private MPA flag; see
// uiwarpd(8) rfc7306): RDMA Write with Immediate and the two atomics through stock librdmacm and
// libibverbs over uiwarp-run, with ibv_post_send and with the ibv_wr_* API, as programs use them.
// Tag [negotiated] runs under uiwarpd's default policy; tag [refused] under `rfc7306 = off`
// (UIWARPD_CONFIG, tests/cm/CMakeLists.txt), where each of them must fail at post time, name the
// cause, and leave the connection working.
#include "connected_pair.hpp"

#include <algorithm>
#include <arpa/inet.h>

using namespace dp;

namespace {

constexpr std::uint64_t kExtOps =
    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

SideOptions atomic_side() {
  SideOptions o;
  o.extra_access = IBV_ACCESS_REMOTE_ATOMIC;
  o.send_ops_flags = kExtOps;
  return o;
}

std::uint64_t u64_at(Side& s, std::size_t off) {
  std::uint64_t v;
  std::memcpy(&v, s.at(off), 8);
  return v;
}

// An atomic through ibv_post_send: 8 octets of `from` at `res_off` get the original value.
int post_atomic(Side& from, ibv_wr_opcode op, std::uint64_t wr_id, std::size_t res_off,
                std::uint64_t raddr, std::uint32_t rkey, std::uint64_t compare_add,
                std::uint64_t swap = 0) {
  ibv_send_wr wr{};
  wr.opcode = op;
  wr.wr.atomic.remote_addr = raddr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return from.post_wr(wr, wr_id, res_off, 8);
}

int post_write_imm(Side& from, std::uint64_t wr_id, std::size_t off, std::uint32_t len,
                   std::uint64_t raddr, std::uint32_t rkey, std::uint32_t imm) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return from.post_wr(wr, wr_id, off, len);
}

std::uint64_t remote(Side& s, std::size_t off) {
  return reinterpret_cast<std::uintptr_t>(s.at(off));
}

} // namespace

TEST_CASE("EXT-010 RDMA Write with Immediate between uiwarp peers: placed, then RECV_RDMA_WITH_IMM",
          "[negotiated]") {
  ConnectedPair p(atomic_side(), atomic_side());
  ibv_device_attr attr{};
  REQUIRE(ibv_query_device(p.client.id->verbs, &attr) == 0);
  CHECK(attr.atomic_cap == IBV_ATOMIC_HCA);
  constexpr std::uint32_t kLen = 4096;
  for (std::uint32_t i = 0; i < kLen; ++i)
    *p.client.at(i) = static_cast<char>(i * 7 + 1);
  REQUIRE(p.server.post_recv(1, 0, 16) == 0);
  REQUIRE(post_write_imm(p.client, 2, 0, kLen, remote(p.server, 8192), p.server.mr->rkey,
                         0x12345678) == 0);
  auto r = poll_n(p.server.rcq, 1);
  REQUIRE(r.size() == 1);
  CHECK(r[0].wr_id == 1);
  CHECK(r[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK((r[0].wc_flags & IBV_WC_WITH_IMM) != 0);
  CHECK(ntohl(r[0].imm_data) == 0x12345678u);
  CHECK(std::memcmp(p.server.at(8192), p.client.at(0), kLen) == 0);
  auto s = poll_n(p.client.scq, 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].opcode == IBV_WC_RDMA_WRITE);

  // The same through ibv_wr_*, many in a row: every immediate once, in order.
  constexpr int kMany = 200;
  for (int i = 0; i < kMany; ++i)
    REQUIRE(p.server.post_recv(100 + static_cast<std::uint64_t>(i), 0, 16) == 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(p.client.qp());
  REQUIRE(x != nullptr);
  for (int i = 0; i < kMany; ++i) {
    ibv_wr_start(x);
    x->wr_id = 1000 + static_cast<std::uint64_t>(i);
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write_imm(x, p.server.mr->rkey, remote(p.server, 16384), htonl(0xA000u + i));
    ibv_wr_set_sge(x, p.client.mr->lkey, remote(p.client, 0), 64);
    REQUIRE(ibv_wr_complete(x) == 0);
    if ((i + 1) % 50 == 0) REQUIRE(poll_n(p.client.scq, 50).size() == 50);
  }
  r = poll_n(p.server.rcq, kMany);
  REQUIRE(r.size() == static_cast<std::size_t>(kMany));
  for (int i = 0; i < kMany; ++i) {
    CHECK(r[i].wr_id == 100 + static_cast<std::uint64_t>(i));
    CHECK(ntohl(r[i].imm_data) == 0xA000u + static_cast<std::uint32_t>(i));
  }
}

TEST_CASE("EXT-005 fetch-and-add and compare-and-swap between uiwarp peers", "[negotiated]") {
  ConnectedPair p(atomic_side(), atomic_side());
  std::uint64_t v = 100;
  std::memcpy(p.server.at(64), &v, 8);
  const std::uint32_t rkey = p.server.mr->rkey;
  REQUIRE(post_atomic(p.client, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, remote(p.server, 64), rkey, 5) ==
          0);
  REQUIRE(post_atomic(p.client, IBV_WR_ATOMIC_CMP_AND_SWP, 2, 8, remote(p.server, 64), rkey, 105,
                      7) == 0);
  REQUIRE(post_atomic(p.client, IBV_WR_ATOMIC_CMP_AND_SWP, 3, 16, remote(p.server, 64), rkey, 1,
                      9) == 0); // no match: nothing swapped
  auto s = poll_n(p.client.scq, 3);
  REQUIRE(s.size() == 3);
  CHECK(s[0].opcode == IBV_WC_FETCH_ADD);
  CHECK(s[1].opcode == IBV_WC_COMP_SWAP);
  CHECK(s[2].opcode == IBV_WC_COMP_SWAP);
  CHECK(u64_at(p.client, 0) == 100);
  CHECK(u64_at(p.client, 8) == 105);
  CHECK(u64_at(p.client, 16) == 7);
  CHECK(u64_at(p.server, 64) == 7);

  // ibv_wr_* and ORD many in flight: 500 fetch-and-adds of 1, each original value once.
  constexpr int kMany = 500;
  ibv_qp_ex* x = ibv_qp_to_qp_ex(p.client.qp());
  REQUIRE(x != nullptr);
  std::vector<std::uint64_t> seen;
  for (int i = 0; i < kMany; i += 10) {
    ibv_wr_start(x);
    for (int k = 0; k < 10; ++k) {
      x->wr_id = static_cast<std::uint64_t>(i + k);
      x->wr_flags = IBV_SEND_SIGNALED;
      ibv_wr_atomic_fetch_add(x, rkey, remote(p.server, 64), 1);
      ibv_wr_set_sge(x, p.client.mr->lkey, remote(p.client, 1024 + 8 * (i + k)), 8);
    }
    REQUIRE(ibv_wr_complete(x) == 0);
    REQUIRE(poll_n(p.client.scq, 10).size() == 10);
  }
  for (int i = 0; i < kMany; ++i)
    seen.push_back(u64_at(p.client, 1024 + 8 * static_cast<std::size_t>(i)));
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  CHECK(seen.front() == 7);
  CHECK(u64_at(p.server, 64) == 7 + kMany);
}

TEST_CASE("EXT-001 without RFC 7306 negotiated, its work requests fail at post time; the "
          "connection keeps working",
          "[refused]") {
  ConnectedPair p(atomic_side(), atomic_side());
  const std::uint32_t rkey = p.server.mr->rkey;
  CHECK(post_write_imm(p.client, 1, 0, 64, remote(p.server, 0), rkey, 1) == EINVAL);
  CHECK(post_atomic(p.client, IBV_WR_ATOMIC_FETCH_AND_ADD, 2, 0, remote(p.server, 64), rkey, 1) ==
        EINVAL);
  CHECK(post_atomic(p.client, IBV_WR_ATOMIC_CMP_AND_SWP, 3, 0, remote(p.server, 64), rkey, 0, 1) ==
        EINVAL);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(p.client.qp());
  REQUIRE(x != nullptr);
  ibv_wr_start(x);
  x->wr_id = 4;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_fetch_add(x, rkey, remote(p.server, 64), 1);
  ibv_wr_set_sge(x, p.client.mr->lkey, remote(p.client, 0), 8);
  CHECK(ibv_wr_complete(x) == EINVAL);
  // Nothing went out and nothing completed; the connection still carries a Send.
  ibv_wc wc;
  CHECK(ibv_poll_cq(p.client.scq, 1, &wc) == 0);
  REQUIRE(p.server.post_recv(5, 0, 64) == 0);
  REQUIRE(p.client.post(IBV_WR_SEND, 6, 0, 64) == 0);
  CHECK(poll_n(p.server.rcq, 1).size() == 1);
  CHECK(poll_n(p.client.scq, 1).size() == 1);
  CHECK(u64_at(p.server, 64) == 0);
}
