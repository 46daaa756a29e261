// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Completion channels through stock libibverbs, the uiwarp provider and libuiwarp-shim.so (run
// under uiwarp-run): ibv_create_comp_channel() gets a pipe from the shim's emulated
// CREATE_COMP_CHANNEL; a record written to uiwarp_shim_comp_channel_wfd() the way the provider
// does comes back from ibv_get_cq_event() as the CQ; nothing leaks once everything is destroyed.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

int g_pass = 0, g_fail = 0;

void check(bool ok, const char* what) {
  if (ok) {
    ++g_pass;
    std::printf("ok - %s\n", what);
  } else {
    ++g_fail;
    std::printf("FAIL - %s (errno %d: %s)\n", what, errno, std::strerror(errno));
  }
}

int count_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;
}

} // namespace

int main() {
  using wfd_fn = int (*)(int);
  auto wfd_of = reinterpret_cast<wfd_fn>(dlsym(RTLD_DEFAULT, "uiwarp_shim_comp_channel_wfd"));
  if (!wfd_of) {
    std::printf("FAIL - libuiwarp-shim.so is not preloaded (run under uiwarp-run)\n");
    std::printf("0 passed, 1 failed\n");
    return 1;
  }
  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  ibv_device* dev = nullptr;
  for (int i = 0; list && i < num; ++i)
    if (std::strncmp(ibv_get_device_name(list[i]), "uiwarp", 6) == 0) dev = list[i];
  check(dev != nullptr, "a uiwarp device is listed");
  if (!dev) {
    std::printf("%d passed, %d failed\n", g_pass, g_fail);
    return 1;
  }
  check(dev->transport_type == IBV_TRANSPORT_IWARP, "its transport is iWARP");
  const int fds_before = count_fds();
  ibv_context* ctx = ibv_open_device(dev);
  check(ctx != nullptr, "ibv_open_device");
  if (!ctx) return 1;

  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  check(ch != nullptr, "ibv_create_comp_channel");
  if (!ch) return 1;
  struct stat st {};
  check(ch->fd > 2 && fstat(ch->fd, &st) == 0 && S_ISFIFO(st.st_mode),
        "channel->fd is a pipe (not stdin, as with an unemulated /dev/null cmd_fd)");
  const int wfd = wfd_of(ch->fd);
  check(wfd >= 0, "uiwarp_shim_comp_channel_wfd(channel->fd) finds the write end");

  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, ch, 0);
  check(cq != nullptr && cq->channel == ch, "ibv_create_cq on the channel");
  if (!cq) return 1;
  // What the provider does when a notified CQ gets a completion.
  const std::uint64_t handle = reinterpret_cast<std::uintptr_t>(cq);
  check(write(wfd, &handle, sizeof handle) == sizeof handle, "an event record is written");
  pollfd p{ch->fd, POLLIN, 0};
  check(poll(&p, 1, 1000) == 1, "the channel fd polls readable");
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  check(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq,
        "ibv_get_cq_event returns the CQ");
  ibv_ack_cq_events(cq, 1);
  check(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
  check(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
  check(fcntl(wfd, F_GETFD) < 0 && errno == EBADF, "destroying the channel closed the write end");
  check(ibv_close_device(ctx) == 0, "ibv_close_device");
  check(count_fds() == fds_before, "no fd leaked");
  ibv_free_device_list(list);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
