// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The rdma_cm device's lengths, as the kernel's ucma_write and its handlers check them, written
// to /dev/infiniband/rdma_cm directly (no librdmacm: its <rdma/rdma_cma.h> cannot be included
// with the kernel's <rdma/rdma_user_cm.h>): a header whose body is longer than the write is
// EINVAL; less room for a response than the command's minimum is ENOSPC before the command
// acts; a response never goes past the room the header gives it (GET_EVENT may be shorter than
// rdma_ucm_event_resp: an older librdmacm's has no ECE fields).
#include "catch_compat.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr std::uint8_t kCanary = 0xa5;

// One channel, commands written raw.
struct RawChannel {
  int fd = ::open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  RawChannel() { REQUIRE(fd >= 0); }
  ~RawChannel() { ::close(fd); }
  RawChannel(const RawChannel&) = delete;
  RawChannel& operator=(const RawChannel&) = delete;

  // Writes command `cmd` with `body` and room `out`; 0 or the errno.
  template <class T>
  int write(std::uint32_t cmd, const T& body, std::uint16_t out, std::size_t cut = 0) {
    std::vector<std::uint8_t> buf(sizeof(rdma_ucm_cmd_hdr) + sizeof body);
    const rdma_ucm_cmd_hdr hdr{cmd, static_cast<std::uint16_t>(sizeof body), out};
    std::memcpy(buf.data(), &hdr, sizeof hdr);
    std::memcpy(buf.data() + sizeof hdr, &body, sizeof body);
    errno = 0;
    const ssize_t n = ::write(fd, buf.data(), buf.size() - cut);
    if (n == static_cast<ssize_t>(buf.size() - cut)) return 0;
    return n < 0 ? errno : -1;
  }

  std::uint32_t create_id() {
    rdma_ucm_create_id_resp r{};
    rdma_ucm_create_id c{};
    c.ps = RDMA_PS_TCP;
    c.qp_type = IBV_QPT_RC;
    c.response = reinterpret_cast<std::uintptr_t>(&r);
    REQUIRE(write(RDMA_USER_CM_CMD_CREATE_ID, c, sizeof r) == 0);
    return r.id;
  }
};

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// RESOLVE_ADDR of `id` from 127.0.0.1 to 127.0.0.1:`port` (no route to ask uiwarpd for).
void resolve(RawChannel& ch, std::uint32_t id, std::uint16_t port) {
  rdma_ucm_resolve_addr ra{};
  const sockaddr_in src = loopback(0), dst = loopback(port);
  std::memcpy(&ra.src_addr, &src, sizeof src);
  ra.src_size = sizeof src;
  std::memcpy(&ra.dst_addr, &dst, sizeof dst);
  ra.dst_size = sizeof dst;
  ra.id = id;
  REQUIRE(ch.write(RDMA_USER_CM_CMD_RESOLVE_ADDR, ra, 0) == 0);
}

} // namespace

TEST_CASE("rdma_cm device: a body longer than the write is EINVAL (ucma_write)", "[cm][ucma]") {
  RawChannel ch;
  rdma_ucm_create_id_resp r{};
  rdma_ucm_create_id c{};
  c.ps = RDMA_PS_TCP;
  c.qp_type = IBV_QPT_RC;
  c.response = reinterpret_cast<std::uintptr_t>(&r);
  CHECK(ch.write(RDMA_USER_CM_CMD_CREATE_ID, c, sizeof r, 1) == EINVAL);
}

TEST_CASE("rdma_cm device: too little room for a response is ENOSPC, before the command acts",
          "[cm][ucma]") {
  RawChannel ch;
  std::uint8_t room[16];
  std::memset(room, kCanary, sizeof room);
  rdma_ucm_create_id c{};
  c.ps = RDMA_PS_TCP;
  c.qp_type = IBV_QPT_RC;
  c.response = reinterpret_cast<std::uintptr_t>(room);
  CHECK(ch.write(RDMA_USER_CM_CMD_CREATE_ID, c, sizeof(rdma_ucm_create_id_resp) - 1) == ENOSPC);
  CHECK(room[0] == kCanary);

  // An id, an event for it, and GET_EVENT with too little room: the event stays queued.
  const std::uint32_t id = ch.create_id();
  resolve(ch, id, 7471);
  constexpr std::size_t kMin = sizeof(rdma_ucm_event_resp) - sizeof(rdma_ucm_event_resp::reserved) -
                               sizeof(rdma_ucm_event_resp::ece);
  std::vector<std::uint8_t> ev(sizeof(rdma_ucm_event_resp), kCanary);
  rdma_ucm_get_event g{};
  g.response = reinterpret_cast<std::uintptr_t>(ev.data());
  CHECK(ch.write(RDMA_USER_CM_CMD_GET_EVENT, g, kMin - 1) == ENOSPC);
  CHECK(ev[0] == kCanary);
  // ... and with an older librdmacm's room (no ECE): delivered, nothing written past it.
  REQUIRE(ch.write(RDMA_USER_CM_CMD_GET_EVENT, g, kMin) == 0);
  rdma_ucm_event_resp got;
  std::memcpy(&got, ev.data(), sizeof got);
  CHECK(got.id == id);
  CHECK(got.event == 0); // RDMA_CM_EVENT_ADDR_RESOLVED
  CHECK(ev[kMin] == kCanary);
  CHECK(ev.back() == kCanary);

  rdma_ucm_destroy_id_resp dr{};
  rdma_ucm_destroy_id d{};
  d.id = id;
  d.response = reinterpret_cast<std::uintptr_t>(&dr);
  CHECK(ch.write(RDMA_USER_CM_CMD_DESTROY_ID, d, 0) == ENOSPC); // the id is still there:
  CHECK(ch.write(RDMA_USER_CM_CMD_DESTROY_ID, d, sizeof dr) == 0);
  CHECK(dr.events_reported == 1);
}

TEST_CASE("rdma_cm device: CONNECT from a librdmacm older than ECE (shorter body) is read",
          "[cm][ucma]") {
  RawChannel ch;
  const std::uint32_t id = ch.create_id();
  resolve(ch, id, 9); // discard: nothing listens
  rdma_ucm_resolve_route rr{};
  rr.id = id;
  REQUIRE(ch.write(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr, 0) == 0);
  struct Shorter { // not even `reserved`: refused
    rdma_ucm_conn_param conn_param;
    std::uint32_t id;
  } s{};
  s.conn_param.valid = 1;
  s.id = id;
  CHECK(ch.write(RDMA_USER_CM_CMD_CONNECT, s, 0) == EINVAL);
  struct OldConnect { // rdma_ucm_connect before rdma-core 31
    rdma_ucm_conn_param conn_param;
    std::uint32_t id, reserved;
  } c{};
  static_assert(sizeof c == offsetof(rdma_ucm_connect, ece));
  c.conn_param.valid = 1;
  c.id = id;
  CHECK(ch.write(RDMA_USER_CM_CMD_CONNECT, c, 0) == 0); // uiwarpd connects (and is refused)
  rdma_ucm_destroy_id_resp dr{};
  rdma_ucm_destroy_id d{};
  d.id = id;
  d.response = reinterpret_cast<std::uintptr_t>(&dr);
  CHECK(ch.write(RDMA_USER_CM_CMD_DESTROY_ID, d, sizeof dr) == 0);
}
