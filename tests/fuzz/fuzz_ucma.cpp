// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Fuzz target: the rdma_cm commands of the shim's UCMA emulation (kernel-shim/shim/ucma_cmd.cpp).
// What a program writes to its rdma_cm fd is input the emulation must check as the kernel's
// ucma.c does: any header, any length, any id, any option, in any order, on two channels.
// Invariants, per command and per input:
//  - a command succeeds (returns its length) or fails with an errno; nothing is written past
//    the response room the header declares (the buffers are exactly that long: ASan);
//  - closing both channels leaves no id behind and every socket closed (the fd count is back).
// No uiwarpd runs (UIWARPD_SOCKET unset): the commands that need one fail as they do when it
// is gone; its protocol is fuzzed apart (fuzz_daemon_proto.cpp). Input format: fuzz_ucma.hpp.
#include "fuzz_ucma.hpp"

#include "fuzz_common.hpp"
#include "ucma.hpp"
#include "ucma_emu.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <infiniband/verbs.h>
#include <iterator>
#include <memory>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace iwarp_fuzz::ucma;

namespace {

// Where each command's body carries the response pointer and the id (-1: none), and how large
// its whole response is (kFullOut).
struct Layout {
  int response;
  int id;
  std::size_t response_size;
};
#define UCMA_FIELDS(T, R)                                                                          \
  { offsetof(T, response), offsetof(T, id), sizeof(R) }
#define UCMA_ID(T)                                                                                 \
  { -1, offsetof(T, id), 0 }
constexpr std::size_t kQueryResp =
    std::max(sizeof(rdma_ucm_query_addr_resp), sizeof(rdma_ucm_query_path_resp));
// Indexed by RDMA_USER_CM_CMD_*.
constexpr Layout kLayouts[] = {
    {offsetof(rdma_ucm_create_id, response), -1, sizeof(rdma_ucm_create_id_resp)},
    UCMA_FIELDS(rdma_ucm_destroy_id, rdma_ucm_destroy_id_resp),
    UCMA_ID(rdma_ucm_bind_ip),
    UCMA_ID(rdma_ucm_resolve_ip),
    UCMA_ID(rdma_ucm_resolve_route),
    UCMA_FIELDS(rdma_ucm_query, rdma_ucm_query_route_resp),
    UCMA_ID(rdma_ucm_connect),
    UCMA_ID(rdma_ucm_listen),
    UCMA_ID(rdma_ucm_accept),
    UCMA_ID(rdma_ucm_reject),
    UCMA_ID(rdma_ucm_disconnect),
    UCMA_FIELDS(rdma_ucm_init_qp_attr, ib_uverbs_qp_attr),
    {offsetof(rdma_ucm_get_event, response), -1, sizeof(rdma_ucm_event_resp)},
    {-1, -1, 0}, // GET_OPTION
    {-1, offsetof(rdma_ucm_set_option, id), 0},
    UCMA_ID(rdma_ucm_notify),
    UCMA_FIELDS(rdma_ucm_join_ip_mcast, rdma_ucm_create_id_resp),
    UCMA_FIELDS(rdma_ucm_destroy_id, rdma_ucm_destroy_id_resp), // LEAVE_MCAST
    {offsetof(rdma_ucm_migrate_id, response), offsetof(rdma_ucm_migrate_id, id),
     sizeof(rdma_ucm_migrate_resp)},
    {offsetof(rdma_ucm_query, response), offsetof(rdma_ucm_query, id), kQueryResp},
    UCMA_ID(rdma_ucm_bind),
    UCMA_ID(rdma_ucm_resolve_addr),
    UCMA_FIELDS(rdma_ucm_join_mcast, rdma_ucm_create_id_resp),
};
static_assert(std::size(kLayouts) == RDMA_USER_CM_CMD_JOIN_MCAST + 1);
#undef UCMA_FIELDS
#undef UCMA_ID

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

// One uiwarp device on lo, in a sysfs tree of our own (the emulation's devices), no uiwarpd,
// and no log lines: once per process.
void setup() {
  static const bool done = [] {
    static char dir[] = "/tmp/uiwarp-fuzz-ucma.XXXXXX";
    FUZZ_CHECK(::mkdtemp(dir) != nullptr);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(dir, ec);
    });
    const fs::path dev = fs::path(dir) / "class/infiniband/uiwarp0";
    fs::create_directories(dev);
    std::ofstream(dev / "uiwarp_netdev") << "lo\n";
    std::ofstream(dev / "node_guid") << "0200:00ff:fe00:0001\n";
    std::ofstream(dev / "uiwarp_mpa") << "crc required\n";
    ::setenv("SYSFS_PATH", dir, 1);
    ::unsetenv("UIWARPD_SOCKET");
    ::setenv("VERBS_LOG_LEVEL", "0", 1);
    return true;
  }();
  (void)done;
}

std::uint16_t u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | p[1] << 8); }

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  setup();
  namespace u = uiwarp::ucma;
  const int fds_before = open_fds();
  const int ch[2] = {u::open_channel(O_NONBLOCK), u::open_channel(O_NONBLOCK)};
  FUZZ_CHECK(ch[0] >= 0 && ch[1] >= 0);
  std::vector<std::uint32_t> handles;
  std::size_t pos = 0;
  while (size - pos >= kRecordHeader) {
    const std::uint8_t* r = data + pos;
    const std::uint8_t cmd = r[0], flags = r[1];
    const std::size_t in = std::min<std::size_t>(u16(r + 4), size - pos - kRecordHeader);
    pos += kRecordHeader + in;
    const Layout lay = cmd < std::size(kLayouts) ? kLayouts[cmd] : Layout{-1, -1, 0};
    std::size_t out = (flags & kFullOut) ? lay.response_size : u16(r + 2);

    std::vector<std::uint8_t> buf(sizeof(rdma_ucm_cmd_hdr) + in);
    const rdma_ucm_cmd_hdr hdr{cmd, static_cast<std::uint16_t>(in),
                               static_cast<std::uint16_t>(out)};
    std::memcpy(buf.data(), &hdr, sizeof hdr);
    std::memcpy(buf.data() + sizeof hdr, r + kRecordHeader, in);
    std::uint8_t* body = buf.data() + sizeof hdr;
    auto covers = [&](int off, std::size_t n) {
      return off >= 0 && static_cast<std::size_t>(off) + n <= in;
    };
    // Exactly `out` octets of room for the response, at the pointer the body carries.
    std::unique_ptr<std::uint8_t[]> resp(new std::uint8_t[out]);
    if (covers(lay.response, 8)) {
      const auto p = reinterpret_cast<std::uint64_t>(resp.get());
      std::memcpy(body + lay.response, &p, 8);
    }
    if (covers(lay.id, 4) && (flags & kKnownId) && !handles.empty()) {
      std::uint32_t id;
      std::memcpy(&id, body + lay.id, 4);
      id = handles[id % handles.size()];
      std::memcpy(body + lay.id, &id, 4);
    }
    // SET_OPTION's value: exactly optlen octets (at most 16), from the record's last octets.
    std::unique_ptr<std::uint8_t[]> optval;
    if (cmd == RDMA_USER_CM_CMD_SET_OPTION && in >= sizeof(rdma_ucm_set_option)) {
      rdma_ucm_set_option o;
      std::memcpy(&o, body, sizeof o);
      const std::size_t n = std::min<std::size_t>(o.optlen, 16);
      optval.reset(new std::uint8_t[n ? n : 1]);
      std::memcpy(optval.get(), r + kRecordHeader + in - std::min(n, in), std::min(n, in));
      o.optval = reinterpret_cast<std::uint64_t>(optval.get());
      o.optlen = static_cast<std::uint32_t>(n);
      std::memcpy(body, &o, sizeof o);
    }
    if (cmd == RDMA_USER_CM_CMD_MIGRATE_ID && (flags & kOwnFd) &&
        in >= sizeof(rdma_ucm_migrate_id)) {
      const std::uint32_t other = static_cast<std::uint32_t>(ch[(flags & kSecondChannel) ? 0 : 1]);
      std::memcpy(body + offsetof(rdma_ucm_migrate_id, fd), &other, 4);
    }
    const int fd = ch[(flags & kSecondChannel) ? 1 : 0];
    const std::size_t len = buf.size() - ((flags & kShortLen) && in ? 1 : 0);
    errno = 0;
    const ssize_t rc = u::command(fd, buf.data(), len);
    FUZZ_CHECK(rc == static_cast<ssize_t>(len) || (rc == -1 && errno > 0),
               "a command neither succeeded nor failed with an errno");
    if (iwarp_fuzz::verbose())
      std::fprintf(stderr, "  command %u on channel %d: %s\n", cmd, fd,
                   rc < 0 ? std::strerror(errno) : "done");
    if (rc < 0) continue;
    // New ids: CREATE_ID's handle, and a CONNECT_REQUEST's child (none without uiwarpd).
    if (cmd == RDMA_USER_CM_CMD_CREATE_ID && covers(lay.response, 8))
      handles.push_back(reinterpret_cast<const rdma_ucm_create_id_resp*>(resp.get())->id);
  }
  u::closed(ch[0]);
  u::closed(ch[1]);
  ::close(ch[0]);
  ::close(ch[1]);
  FUZZ_CHECK(u::Ucma::get().st.ids().empty(), "an id outlived both channels");
  FUZZ_CHECK(open_fds() == fds_before, "a socket or fd outlived both channels");
  return 0;
}
