// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// What librdmacm releases after Debian 12's (rdma-core 44) send to the rdma_cm device, through
// stock librdmacm over uiwarp-run. rdma-core 61 added RDMA_USER_CM_CMD_RESOLVE_IB_SERVICE (22)
// and 62 RDMA_USER_CM_CMD_WRITE_CM_EVENT (23, rdma_write_cm_event) to rdma_user_cm.h: the shim
// implements neither (IB service records; events a program injects), and a command it does not
// implement must fail at once with ENOSYS, as an old kernel answers it, never hang or succeed.
// perftest 25.01 (Debian 13, sid) sets RDMA_OPTION_ID_ACK_TIMEOUT on every id, which the
// kernel's ucma_set_option_id accepts for any transport (a u8; iWARP's TCP keeps its own timers).
#include "catch_compat.hpp"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <rdma/rdma_cma.h>
#include <unistd.h>

namespace {

struct Channel {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  Channel() {
    REQUIRE(ch != nullptr);
    REQUIRE(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0);
  }
  ~Channel() {
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
  }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
};

} // namespace

TEST_CASE("rdma_cm commands the shim does not implement fail at once with ENOSYS", "[cm][ucma]") {
  Channel c;
  // rdma_ucm_cmd_hdr (cmd, in, out) and a zeroed body as long as the newest command's.
  const std::uint32_t cmd = GENERATE(22u, 23u, 0x7fffu);
  INFO("command " << cmd);
  std::uint8_t buf[8 + 96] = {};
  std::memcpy(buf, &cmd, sizeof cmd);
  const std::uint16_t in = 96;
  std::memcpy(buf + 4, &in, sizeof in);
  auto t0 = std::chrono::steady_clock::now();
  errno = 0;
  ssize_t n = ::write(c.ch->fd, buf, sizeof buf);
  int err = errno;
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(n == -1);
  CHECK(err == ENOSYS);
  CHECK(took < std::chrono::seconds(1));
}

TEST_CASE("rdma_set_option: RDMA_OPTION_ID_ACK_TIMEOUT, a u8, is accepted", "[cm][ucma]") {
  Channel c;
  std::uint8_t timeout = 14; // perftest's default
  CHECK(rdma_set_option(c.id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
                        sizeof timeout) == 0);
  int wide = 14;
  CHECK(rdma_set_option(c.id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &wide, sizeof wide) ==
        -1);
  CHECK(errno == EINVAL);
}
