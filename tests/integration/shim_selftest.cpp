// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Checks libuiwarp-shim.so from the inside: run with LD_PRELOAD=libuiwarp-shim.so (ctest does).
// Covers the /dev/infiniband redirection, the emulated CREATE_COMP_CHANNEL write and its pipe,
// fd bookkeeping across close/dup/dup2/dup3/fcntl (no leaked fds), NETLINK_RDMA blocking, the
// rdma_cm refusal, the generated-tree rule for which uverbs nodes are ours, and thread safety.
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <poll.h>
#include <rdma/ib_user_verbs.h>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

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

using wfd_fn = int (*)(int);
using is_uverbs_fn = int (*)(int);
wfd_fn shim_wfd;
is_uverbs_fn shim_is_uverbs;

int count_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1; // the DIR's own fd
}

bool fd_open(int fd) { return fcntl(fd, F_GETFD) >= 0; }

struct CreateCompChannel {
  ib_uverbs_cmd_hdr hdr;
  ib_uverbs_create_comp_channel body;
};

// What libibverbs' ibv_create_comp_channel() writes; returns the channel fd or -1.
int create_comp_channel(int cmd_fd) {
  ib_uverbs_create_comp_channel_resp resp{};
  resp.fd = 0xdeadbeef;
  CreateCompChannel req{};
  req.hdr.command = IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL;
  req.hdr.in_words = sizeof req / 4;
  req.hdr.out_words = sizeof resp / 4;
  req.body.response = reinterpret_cast<std::uintptr_t>(&resp);
  if (write(cmd_fd, &req, sizeof req) != static_cast<ssize_t>(sizeof req)) return -1;
  return static_cast<int>(resp.fd);
}

bool is_char_1_7(const struct stat& st) {
  return S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 && minor(st.st_rdev) == 7;
}

void test_stat_and_open() {
  struct stat st {};
  check(stat("/dev/infiniband/uverbs0", &st) == 0 && is_char_1_7(st),
        "stat(/dev/infiniband/uverbs0) is a char device 1:7");
  check(lstat("/dev/infiniband/uverbs0", &st) == 0 && is_char_1_7(st), "lstat too");
  check(fstatat(AT_FDCWD, "/dev/infiniband/uverbs0", &st, 0) == 0 && is_char_1_7(st),
        "fstatat too");
  struct statx sx {};
  check(statx(AT_FDCWD, "/dev/infiniband/uverbs0", 0, STATX_TYPE, &sx) == 0 &&
            S_ISCHR(sx.stx_mode) && sx.stx_rdev_major == 1 && sx.stx_rdev_minor == 7,
        "statx too");
  check(stat("/dev/infiniband/other", &st) != 0 && errno == ENOENT,
        "other /dev/infiniband names pass through");

  int fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
  check(fd >= 0 && fstat(fd, &st) == 0 && is_char_1_7(st),
        "open(/dev/infiniband/uverbs0) gives a char device with rdev 1:7");
  check(shim_is_uverbs(fd) == 1, "uiwarp_shim_is_uverbs_fd() knows it");
  check((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0, "O_CLOEXEC is kept");
  int fd2 = openat(AT_FDCWD, "/dev/infiniband/uverbs1", O_RDWR);
  check(fd2 >= 0 && fstat(fd2, &st) == 0 && is_char_1_7(st), "openat works the same");
  close(fd2);
  check(shim_is_uverbs(fd2) == 0, "close() forgets a uverbs fd");

  char junk[24] = {};
  std::uint32_t cmd = IB_USER_VERBS_CMD_CREATE_CQ;
  std::memcpy(junk, &cmd, sizeof cmd);
  errno = 0;
  check(write(fd, junk, sizeof junk) < 0 && errno == ENOSPC,
        "other uverbs commands reach /dev/full and fail with ENOSPC");
  close(fd);

  // rdma_cm: a UCMA event channel that looks like the kernel's character device.
  int cm = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
  struct stat cst {};
  check(cm >= 0 && fstat(cm, &cst) == 0 && S_ISCHR(cst.st_mode),
        "open(/dev/infiniband/rdma_cm) gives a character device (UCMA emulation)");
  // An unknown UCMA command fails cleanly.
  std::uint32_t bad[2] = {999, 0};
  errno = 0;
  check(cm >= 0 && write(cm, bad, sizeof bad) < 0 && errno == ENOSYS,
        "an unknown UCMA command fails with ENOSYS");
  if (cm >= 0) close(cm);
}

void test_comp_channel() {
  const int before = count_fds();
  int cmd_fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
  int ch = create_comp_channel(cmd_fd);
  struct stat st {};
  check(ch >= 0 && fstat(ch, &st) == 0 && S_ISFIFO(st.st_mode),
        "CREATE_COMP_CHANNEL write returns 16 and a pipe fd in the response");
  check((fcntl(ch, F_GETFD) & FD_CLOEXEC) != 0, "the channel fd is close-on-exec");
  const int wfd = shim_wfd(ch);
  check(wfd >= 0 && wfd != ch && fstat(wfd, &st) == 0 && S_ISFIFO(st.st_mode),
        "uiwarp_shim_comp_channel_wfd() maps it to the write end");
  check((fcntl(wfd, F_GETFL) & O_NONBLOCK) != 0, "the write end is non-blocking");
  check(shim_wfd(cmd_fd) == -1 && errno == EBADF && shim_wfd(12345) == -1,
        "uiwarp_shim_comp_channel_wfd() is -1 for other fds");

  // Records: what the provider writes, libibverbs' ibv_get_cq_event() reads.
  std::uint64_t a = 0x1122334455667788ULL, b = 0x99aabbccddeeff00ULL, r = 0;
  check(write(wfd, &a, 8) == 8 && write(wfd, &b, 8) == 8, "provider writes two 8-byte records");
  pollfd p{ch, POLLIN, 0};
  check(poll(&p, 1, 0) == 1 && (p.revents & POLLIN), "poll() on the channel fd reports POLLIN");
  check(read(ch, &r, 8) == 8 && r == a, "an 8-byte read returns the first whole record");
  check(read(ch, &r, 8) == 8 && r == b, "then the second");
  int fl = fcntl(ch, F_GETFL);
  fcntl(ch, F_SETFL, fl | O_NONBLOCK);
  errno = 0;
  check(read(ch, &r, 8) < 0 && errno == EAGAIN, "O_NONBLOCK set by the app works on the read end");
  fcntl(ch, F_SETFL, fl);
  std::thread t([wfd] {
    usleep(50 * 1000);
    std::uint64_t v = 42;
    (void)!write(wfd, &v, 8);
  });
  check(read(ch, &r, 8) == 8 && r == 42, "a blocking read waits for the next record");
  t.join();

  // dup family: every copy maps to the same write end, which closes with the last copy.
  int d1 = dup(ch);
  int d2 = fcntl(ch, F_DUPFD_CLOEXEC, 100);
  int d3 = dup2(ch, 200);
  int d4 = dup3(ch, 201, O_CLOEXEC);
  check(d1 >= 0 && d2 >= 100 && d3 == 200 && d4 == 201, "dup, fcntl(F_DUPFD_CLOEXEC), dup2, dup3");
  check(shim_wfd(d1) == wfd && shim_wfd(d2) == wfd && shim_wfd(d3) == wfd && shim_wfd(d4) == wfd,
        "every dup maps to the same write end");
  close(ch);
  close(d1);
  close(d2);
  check(fd_open(wfd), "the write end stays open while a dup of the channel is open");
  // dup2 over a tracked fd closes it implicitly: d3 becomes a copy of stdin, not a channel.
  check(dup2(0, d3) == d3 && shim_wfd(d3) == -1, "dup2 over a channel fd forgets it");
  check(fd_open(wfd), "one copy (d4) still holds the write end");
  close(d3);
  close(d4);
  check(!fd_open(wfd), "closing the last copy closes the write end");
  close(cmd_fd);
  check(count_fds() == before, "no fd leaked");
}

// The number of a uverbs fd closed behind the shim's back and reused must not be intercepted.
void test_stale_entry() {
  int cmd_fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
  int p[2];
  check(pipe(p) == 0, "pipe");
  syscall(SYS_dup3, p[1], cmd_fd, O_CLOEXEC); // raw: the shim does not see it
  CreateCompChannel req{};
  req.hdr.command = IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL;
  std::uint32_t dummy = 0;
  req.body.response = reinterpret_cast<std::uintptr_t>(&dummy);
  char buf[sizeof req];
  check(write(cmd_fd, &req, sizeof req) == sizeof req && read(p[0], buf, sizeof buf) == sizeof req,
        "a reused fd number gets the real write()");
  check(shim_is_uverbs(cmd_fd) == 0, "and the stale entry is dropped");
  close(cmd_fd);
  close(p[0]);
  close(p[1]);
}

void test_netlink() {
  errno = 0;
  int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
  check(s < 0 && errno == EPROTONOSUPPORT, "socket(AF_NETLINK, NETLINK_RDMA) fails with "
                                           "EPROTONOSUPPORT");
  s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  check(s >= 0, "socket(AF_NETLINK, NETLINK_ROUTE) works");
  if (s >= 0) close(s);
  s = socket(AF_INET, SOCK_STREAM, 0);
  check(s >= 0, "socket(AF_INET) works");
  if (s >= 0) close(s);
}

bool write_file(const std::string& path, const char* s) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fputs(s, f);
  return std::fclose(f) == 0;
}

// With SYSFS_PATH, the tree decides: dev "1:7" is ours, anything else is the kernel's. The shim
// reads its environment once per process, so the checks run in a fresh copy of this program
// with SYSFS_PATH set (sysfs_rule_child), which exits with the number that failed.
int sysfs_rule_child() {
  int failed = 0;
  struct stat st {};
  if (!(stat("/dev/infiniband/uverbs3", &st) == 0 && is_char_1_7(st))) ++failed;
  errno = 0;
  if (!(stat("/dev/infiniband/uverbs7", &st) != 0 && errno == ENOENT)) failed += 2;
  return failed;
}

void test_sysfs_rule(const char* self) {
  char tmpl[] = "/tmp/uiwarp-selftest-XXXXXX";
  char* root = mkdtemp(tmpl);
  check(root != nullptr, "mkdtemp");
  if (!root) return;
  std::string r = root;
  std::string uv = r + "/class/infiniband_verbs";
  mkdir((r + "/class").c_str(), 0755);
  mkdir(uv.c_str(), 0755);
  mkdir((uv + "/uverbs3").c_str(), 0755);
  mkdir((uv + "/uverbs7").c_str(), 0755);
  write_file(uv + "/uverbs3/dev", "1:7\n");
  write_file(uv + "/uverbs7/dev", "231:199\n");
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("SYSFS_PATH", root, 1);
    execl(self, self, "--sysfs-rule", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  check(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status), "the SYSFS_PATH child");
  const int failed = WIFEXITED(status) ? WEXITSTATUS(status) : 127;
  check(failed != 127 && !(failed & 1), "SYSFS_PATH: an entry with dev 1:7 is ours");
  check(failed != 127 && !(failed & 2),
        "SYSFS_PATH: an entry with a kernel dev passes through to the real /dev");
  std::string cmd = "rm -rf '" + r + "'";
  check(std::system(cmd.c_str()) == 0, "cleanup");
}

void test_threads() {
  const int before = count_fds();
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&bad] {
      for (int i = 0; i < 200; ++i) {
        int fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
        int ch = create_comp_channel(fd);
        int d = dup(ch);
        int w = shim_wfd(d);
        std::uint64_t v = static_cast<std::uint64_t>(i), r = 0;
        if (fd < 0 || ch < 0 || d < 0 || w < 0 || write(w, &v, 8) != 8 || read(ch, &r, 8) != 8 ||
            r != v)
          ++bad;
        close(ch);
        close(d);
        close(fd);
      }
    });
  }
  for (auto& t : ts)
    t.join();
  check(bad == 0, "8 threads x 200 channels: each one works");
  check(count_fds() == before, "and no fd leaked");
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--sysfs-rule") == 0) return sysfs_rule_child();
  shim_wfd = reinterpret_cast<wfd_fn>(dlsym(RTLD_DEFAULT, "uiwarp_shim_comp_channel_wfd"));
  shim_is_uverbs = reinterpret_cast<is_uverbs_fn>(dlsym(RTLD_DEFAULT, "uiwarp_shim_is_uverbs_fd"));
  if (!shim_wfd || !shim_is_uverbs) {
    std::printf("FAIL - libuiwarp-shim.so is not preloaded\n0 passed, 1 failed\n");
    return 1;
  }
  // First the rule without a tree (ctest runs this with SYSFS_PATH unset): ours if the host
  // has no such node.
  struct stat st {};
  if (::syscall(SYS_newfstatat, AT_FDCWD, "/dev/infiniband/uverbs0", &st, 0) == 0) {
    std::printf("SKIP: this host has a kernel /dev/infiniband/uverbs0\n0 passed, 0 failed\n");
    return 0;
  }
  test_stat_and_open();
  test_comp_channel();
  test_stale_entry();
  test_netlink();
  test_sysfs_rule("/proc/self/exe");
  test_threads();
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
