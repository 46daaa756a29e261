// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Seeds of fuzz_ucma (make_corpus OUTDIR writes OUTDIR/ucma/*): the rdma_cm command sequences
// librdmacm writes for an active side, a passive side and rsockets' options, each in the
// record format of fuzz_ucma.hpp, plus the malformed commands the kernel refuses (short body,
// no room for the response, unknown command).
#include "daemon_proto_samples.hpp"
#include "fuzz_ucma.hpp"

#include <arpa/inet.h>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
#include <stdexcept>
#include <string>

namespace fs = std::filesystem;
using namespace iwarp_fuzz::ucma;

namespace {

using Seed = std::vector<std::uint8_t>;

using uiwarp::test::v4;
using uiwarp::test::v6;

// An address into an ABI field (sockaddr_in6 or __kernel_sockaddr_storage): its length.
template <class Field> std::uint16_t put(Field& f, const sockaddr_storage& a) {
  const std::size_t n = a.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  std::memcpy(&f, &a, n);
  return static_cast<std::uint16_t>(n);
}

void create(Seed& s, std::uint8_t flags = 0) {
  rdma_ucm_create_id c{};
  c.uid = 0x1234;
  c.ps = RDMA_PS_TCP;
  c.qp_type = IBV_QPT_RC;
  record(s, RDMA_USER_CM_CMD_CREATE_ID, flags, c);
}

template <class T> void on_id(Seed& s, std::uint8_t cmd, T c, std::uint8_t flags = 0) {
  c.id = 0; // the first id created (kKnownId)
  record(s, cmd, flags | kKnownId, c);
}

void get_event(Seed& s, std::uint8_t flags = 0) {
  record(s, RDMA_USER_CM_CMD_GET_EVENT, flags, rdma_ucm_get_event{});
}

// rdma_resolve_addr, rdma_resolve_route, rdma_connect (as rping's client does, with -I).
Seed active() {
  Seed s;
  create(s);
  rdma_ucm_resolve_addr ra{};
  ra.src_size = put(ra.src_addr, v4("127.0.0.1", 0)); // a source: no route for uiwarpd to ask
  ra.dst_size = put(ra.dst_addr, v4("127.0.0.1", 7471));
  ra.timeout_ms = 2000;
  on_id(s, RDMA_USER_CM_CMD_RESOLVE_ADDR, ra);
  get_event(s);
  on_id(s, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route{});
  get_event(s);
  rdma_ucm_query q{};
  q.option = RDMA_USER_CM_QUERY_ADDR;
  on_id(s, RDMA_USER_CM_CMD_QUERY, q);
  on_id(s, RDMA_USER_CM_CMD_QUERY_ROUTE, rdma_ucm_query{});
  rdma_ucm_init_qp_attr ia{};
  ia.qp_state = IBV_QPS_INIT;
  on_id(s, RDMA_USER_CM_CMD_INIT_QP_ATTR, ia);
  rdma_ucm_connect c{};
  c.conn_param.valid = 1;
  c.conn_param.responder_resources = 4;
  c.conn_param.initiator_depth = 4;
  c.conn_param.private_data_len = 8;
  c.conn_param.qp_num = 0x123;
  on_id(s, RDMA_USER_CM_CMD_CONNECT, c);
  on_id(s, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{});
  on_id(s, RDMA_USER_CM_CMD_DESTROY_ID, rdma_ucm_destroy_id{});
  return s;
}

// rdma_bind_addr, options, rdma_listen, rdma_migrate_id (as rping's server and rsockets do).
Seed passive() {
  Seed s;
  create(s);
  rdma_ucm_set_option o{};
  o.level = RDMA_OPTION_ID;
  o.optname = RDMA_OPTION_ID_REUSEADDR;
  o.optlen = sizeof(int);
  on_id(s, RDMA_USER_CM_CMD_SET_OPTION, o);
  o.optname = RDMA_OPTION_ID_AFONLY;
  on_id(s, RDMA_USER_CM_CMD_SET_OPTION, o);
  o.optname = RDMA_OPTION_ID_TOS;
  o.optlen = 1;
  on_id(s, RDMA_USER_CM_CMD_SET_OPTION, o);
  rdma_ucm_bind b{};
  b.addr_size = put(b.addr, v6("::", 0));
  on_id(s, RDMA_USER_CM_CMD_BIND, b);
  rdma_ucm_listen l{};
  l.backlog = 16;
  on_id(s, RDMA_USER_CM_CMD_LISTEN, l);
  rdma_ucm_migrate_id m{};
  on_id(s, RDMA_USER_CM_CMD_MIGRATE_ID, m, kOwnFd | kSecondChannel);
  get_event(s, kSecondChannel);
  create(s);
  rdma_ucm_bind_ip bi{};
  put(bi.addr, v4("127.0.0.1", 0));
  rdma_ucm_bind_ip bi2 = bi;
  on_id(s, RDMA_USER_CM_CMD_BIND_IP, bi);
  bi2.id = 1;
  record(s, RDMA_USER_CM_CMD_BIND_IP, kKnownId, bi2);
  on_id(s, RDMA_USER_CM_CMD_NOTIFY, rdma_ucm_notify{});
  return s;
}

// What the kernel refuses before acting.
Seed refused() {
  Seed s;
  rdma_ucm_create_id c{};
  c.ps = RDMA_PS_TCP;
  c.qp_type = IBV_QPT_RC;
  record(s, RDMA_USER_CM_CMD_CREATE_ID, 0, 2, &c, sizeof c); // no room: ENOSPC
  record(s, RDMA_USER_CM_CMD_CREATE_ID, kFullOut, 0, &c, 8); // short body
  record(s, RDMA_USER_CM_CMD_CREATE_ID, kFullOut | kShortLen, 0, &c, sizeof c);
  record(s, RDMA_USER_CM_CMD_GET_OPTION, 0, 0, &c, sizeof c);
  record(s, RDMA_USER_CM_CMD_JOIN_MCAST + 1, 0, 0, &c, sizeof c);
  record(s, RDMA_USER_CM_CMD_GET_EVENT, 0, 60, &c, sizeof c); // shorter than the minimum
  create(s);
  rdma_ucm_connect old{}; // a librdmacm older than ECE: the body ends at `reserved`
  old.conn_param.valid = 1;
  record(s, RDMA_USER_CM_CMD_CONNECT, kKnownId, 0, &old, offsetof(rdma_ucm_connect, ece));
  return s;
}

} // namespace

void ucma_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const std::pair<const char*, Seed> seeds[] = {
      {"active", active()}, {"passive", passive()}, {"refused", refused()}};
  for (const auto& [name, s] : seeds) {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(s.data()), static_cast<std::streamsize>(s.size()));
    if (!out) throw std::runtime_error(std::string("ucma: cannot write ") + name);
  }
  std::printf("ucma: %zu seeds\n", std::size(seeds));
}
