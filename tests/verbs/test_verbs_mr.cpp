// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Memory regions: ibv_reg_mr / ibv_reg_mr_iova / ibv_rereg_mr / ibv_dereg_mr, keys, access
// flags and what the device lacks. Through the public libibverbs API only, with the Fixture of
// verbs_fixture.hpp.
#include "catch_compat.hpp"
#include "verbs_fixture.hpp"

#include <infiniband/verbs.h>

using namespace verbs_test;

// ---- memory regions ----------------------------------------------------------------

TEST_CASE_METHOD(Fixture, "ibv_reg_mr / ibv_dereg_mr: lkey == rkey, keys differ between MRs",
                 "[verbs][mr]") {
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

// ib_check_mr_access (the kernel's rules for every provider).
TEST_CASE_METHOD(Fixture, "ibv_reg_mr: invalid access flags are EINVAL", "[verbs][mr]") {
  int access = 0;
  SECTION("REMOTE_WRITE without LOCAL_WRITE") { access = IBV_ACCESS_REMOTE_WRITE; }
  SECTION("REMOTE_ATOMIC without LOCAL_WRITE") { access = IBV_ACCESS_REMOTE_ATOMIC; }
  SECTION("an unknown bit") { access = IBV_ACCESS_LOCAL_WRITE | (1 << 15); }
  errno = 0;
  ibv_mr* m = ibv_reg_mr(pd, at(0), 4096, access);
  CHECK(m == nullptr);
  CHECK(errno == EINVAL);
  if (m) ibv_dereg_mr(m);
}

TEST_CASE_METHOD(Fixture, "ibv_reg_mr: capabilities the device lacks are EOPNOTSUPP",
                 "[verbs][mr]") {
  int access = 0;
  SECTION("ON_DEMAND (no ODP)") { access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND; }
  SECTION("FLUSH_GLOBAL") { access = IBV_ACCESS_LOCAL_WRITE | (1 << 8); }
  SECTION("FLUSH_PERSISTENT") { access = IBV_ACCESS_LOCAL_WRITE | (1 << 9); }
  errno = 0;
  ibv_mr* m = ibv_reg_mr(pd, at(0), 4096, access);
  CHECK(m == nullptr);
  CHECK(errno == EOPNOTSUPP);
  if (m) ibv_dereg_mr(m);
}

// The kernel (and siw) accept these at registration; what the device does not offer fails
// when it is used. libfabric's verbs provider and qperf register with them.
TEST_CASE_METHOD(Fixture, "ibv_reg_mr: REMOTE_ATOMIC, MW_BIND, HUGETLB and optional flags register",
                 "[verbs][mr]") {
  int access = 0;
  SECTION("REMOTE_ATOMIC") { access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC; }
  SECTION("MW_BIND") { access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND; }
  SECTION("libfabric's set") {
    access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
             IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
  }
  SECTION("HUGETLB (a hint)") { access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB; }
  SECTION("RELAXED_ORDERING (optional range)") {
    access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;
  }
  ibv_mr* m = ibv_reg_mr(pd, at(0), 4096, access);
  REQUIRE(m != nullptr);
  CHECK(ibv_dereg_mr(m) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_reg_mr_iova: an iova at another page offset is EINVAL",
                 "[verbs][mr]") {
  // An int: verbs.h's ibv_reg_mr_iova macro ANDs the access flags with
  // IBV_ACCESS_OPTIONAL_RANGE, another enum, without the (int) cast its ibv_reg_mr has, which
  // clang calls deprecated in C++20.
  const int access = IBV_ACCESS_LOCAL_WRITE;
  errno = 0;
  ibv_mr* m = ibv_reg_mr_iova(pd, at(16), 4096, 0x100000, access);
  CHECK(m == nullptr);
  CHECK(errno == EINVAL);
  if (m) ibv_dereg_mr(m);
  m = ibv_reg_mr_iova(pd, at(16), 4096, 0x100010, access);
  REQUIRE(m != nullptr);
  CHECK(ibv_dereg_mr(m) == 0);
}

TEST_CASE_METHOD(Fixture, "ibv_reg_mr: length 0 is EINVAL", "[verbs][mr]") {
  errno = 0;
  ibv_mr* m = ibv_reg_mr(pd, at(0), 0, IBV_ACCESS_LOCAL_WRITE);
  CHECK(m == nullptr);
  CHECK(errno == EINVAL);
  if (m) ibv_dereg_mr(m);
}

TEST_CASE_METHOD(Fixture, "ibv_reg_mr_iova: an MR with a chosen iova, and a zero-based one",
                 "[verbs][mr]") {
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

TEST_CASE_METHOD(Fixture,
                 "ibv_rereg_mr: a new translation changes the key, a new access or PD keeps it",
                 "[verbs][mr]") {
  ibv_mr* m = mr(IBV_ACCESS_LOCAL_WRITE, 0, 4096);
  const std::uint32_t key0 = m->lkey;

  SECTION("IBV_REREG_MR_CHANGE_ACCESS") {
    REQUIRE(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kRemoteAccess) == 0);
    CHECK(m->lkey == key0); // as rxe and mlx5: the peer's rkey stays good, with the new rights
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
    CHECK(m->lkey == key0);
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
