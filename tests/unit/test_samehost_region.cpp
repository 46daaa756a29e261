// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The edge of the shared STag table (providers/uiwarp/samehost/shared_region.hpp) with real
// processes: a table made in a memfd, attached through pidfd_getfd by this process and by a
// forked peer, copies with process_vm_writev/readv, a drain that waits for a peer's unpin, a
// drain that a killed peer cannot hold back, and the descriptors attach() must refuse. The
// peer is a child (no Catch2 in it): pipes carry the offer down and its notes up, and order
// the steps. A machine that refuses pidfd_getfd or process_vm_* (EPERM) skips with a warning.
#include "catch_compat.hpp"
#include "iwarp/memory.hpp"
#include "samehost/shared_region.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <poll.h>
#include <string>
#include <string_view>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace uiwarp::samehost;
using iwarp::access::kRemoteRead;
using iwarp::access::kRemoteWrite;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kPd = 3;
constexpr std::uint32_t kQp = 9;
constexpr std::uint64_t kTo = 0x1000; // the TO of a buffer's first octet
constexpr std::uint32_t kIndex = 3;
constexpr std::uint32_t kStag = kIndex << 8 | 0x5a;
constexpr std::size_t kLength = 4096;
constexpr Layout kLayout{16, 4};

unsigned char pattern(std::size_t i) { return static_cast<unsigned char>(i * 7 + 3); }

std::uint64_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

EntryValue entry_for(const std::vector<unsigned char>& buffer) {
  return {kStag, kPd,           kRemoteWrite | kRemoteRead, 0,
          kTo,   buffer.size(), address(buffer.data()),     {}};
}

int open_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  REQUIRE(d);
  int n = 0;
  while (const dirent* e = ::readdir(d))
    n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// /proc/self/maps: the permissions of the mapping that starts at `p`, and the mappings of the
// tables' memfds.
std::string perms_at(const void* p) {
  char start[32];
  std::snprintf(start, sizeof start, "%jx-", static_cast<std::uintmax_t>(address(p)));
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.rfind(start, 0) == 0) return line.substr(line.find(' ') + 1, 4);
  return "none";
}
int table_mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    n += line.find("memfd:uiwarp-stags") != std::string::npos;
  return n;
}

// Closes a descriptor at the end of a scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

PublishedRegion make_table() {
  auto r = PublishedRegion::create(kLayout);
  INFO(r.error);
  REQUIRE(r);
  return std::move(*r.value);
}

// fork(), with the output buffers empty first: ThreadSanitizer's _exit flushes them, and the
// child would print what the parent had buffered once more.
pid_t fork_quietly() {
  std::cout.flush();
  std::fflush(nullptr);
  return ::fork();
}

pid_t reaped_pid() { // a pid that no longer names a process
  const pid_t pid = fork_quietly();
  if (pid == 0) ::_exit(0);
  REQUIRE(pid > 0);
  REQUIRE(::waitpid(pid, nullptr, 0) == pid);
  return pid;
}

// ---- the forked peer ------------------------------------------------------------------------

struct Offer {
  int fd = -1;
  std::uint32_t slot = 0;
  Nonce nonce;
};
// What the peer tells the parent: P pinned, U about to unpin, D done, S skip, F failed.
struct Note {
  char what = 0;
  char text[255] = {};
};

template <class T> bool send(int fd, const T& v) { // at most PIPE_BUF: one write
  return ::write(fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v);
}
template <class T> bool recv(int fd, T& v) {
  auto* p = reinterpret_cast<char*>(&v);
  for (std::size_t got = 0; got < sizeof v;) {
    const ssize_t n = ::read(fd, p + got, sizeof v - got);
    if (n <= 0 && !(n < 0 && errno == EINTR)) return false;
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  return true;
}
bool note(int fd, char what, std::string_view text = {}) {
  Note n;
  n.what = what;
  text.copy(n.text, sizeof n.text - 1);
  return send(fd, n);
}
int fail(int fd, char what, std::string_view text) {
  note(fd, what, text);
  return 1;
}
bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

enum class Script {
  Write,         // pin, write the pattern, unpin
  HoldUntilTold, // pin, say P, wait for the parent's word, hold on a little, write, U, unpin
  HoldForever,   // pin, say P, never unpin
};

// The child's whole life: attach to the parent's table, answer in its slot, pin the buffer's
// entry and copy into it as the script says. Exit 0, or a note saying why not.
int peer_main(int in, int out, Script script) {
  Offer o;
  if (!recv(in, o)) return 2;
  auto r = PeerRegion::attach(::getppid(), o.fd, o.nonce);
  if (!r) return fail(out, r.errnum == EPERM ? 'S' : 'F', r.error);
  PeerRegion& peer = *r.value;
  Reader& reader = peer.reader();
  reader.write_answer(o.slot, {static_cast<std::uint64_t>(::getpid()),
                               static_cast<std::uint64_t>(o.fd), o.slot, o.nonce, 0});
  // The probe word last, by the kernel's copy as the set-up does: the answer is ready.
  if (const int e = peer.probe(o.slot, 1); e < 0)
    return fail(out, e == -EPERM ? 'S' : 'F', "probe: " + std::to_string(-e));
  const PinResult pin = reader.pin(o.slot, kStag, kPd, kQp, kTo, kLength, kRemoteWrite);
  if (!pin) return fail(out, 'F', reason_name(pin.refusal));
  if (script != Script::Write) note(out, 'P');
  if (script == Script::HoldForever)
    for (;;)
      ::pause();
  if (script == Script::HoldUntilTold) {
    char go = 0;
    if (!recv(in, go)) return 2;
    // Still pinned: a drain that ends now, before the copy, shows in the parent's checks.
    ::usleep(50'000);
  }
  std::vector<unsigned char> data(kLength);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = pattern(i);
  const iovec local{data.data(), data.size()};
  const ssize_t n = peer.write(o.slot, pin.pin, {&local, 1});
  if (script == Script::HoldUntilTold) note(out, 'U'); // before the unpin: ordered by it
  reader.unpin(o.slot);
  if (n == -EPERM) return fail(out, 'S', "process_vm_writev: Operation not permitted");
  if (n != static_cast<ssize_t>(kLength))
    return fail(out, 'F', "process_vm_writev gave " + std::to_string(n));
  note(out, 'D');
  return 0;
}

// A forked peer, killed and reaped at the end of the test whatever happened.
class Peer {
public:
  explicit Peer(Script script) {
    int down[2], up[2];
    REQUIRE(::pipe2(down, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(up, O_CLOEXEC) == 0);
    pid_ = fork_quietly();
    if (pid_ == 0) {
      ::close(down[1]);
      ::close(up[0]);
      ::_exit(peer_main(down[0], up[1], script)); // none of the parent's atexit handlers
    }
    ::close(down[0]);
    ::close(up[1]);
    down_ = down[1];
    up_ = up[0];
    REQUIRE(pid_ > 0);
    // Under Yama's ptrace_scope 1 only ancestors may take our descriptors; this lets the
    // child too (EINVAL without Yama: nothing to lift).
    ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(pid_), 0, 0, 0);
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer() {
    ::close(down_);
    ::close(up_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  int down() const { return down_; }
  int up() const { return up_; }
  int reap() {
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    pid_ = 0;
    return status;
  }

private:
  pid_t pid_ = -1;
  int down_ = -1, up_ = -1;
};

// The peer's next note. False, with a warning, when this machine refuses what the peer needs
// (the test then ends); any other failure of the peer fails the test.
bool next(Peer& peer, char expected) {
  Note n;
  REQUIRE(recv(peer.up(), n)); // end of file: the peer died
  if (n.what == 'S') {
    WARN("skipped, refused on this machine: " << n.text);
    return false;
  }
  INFO("the peer says " << n.what << ": " << n.text);
  REQUIRE(n.what == expected);
  return true;
}

// A table with the buffer's entry published and a slot opened for the peer, offered to it.
struct Offered {
  explicit Offered(Peer& peer) : table(make_table()), buffer(kLength, 0) {
    REQUIRE(table.publisher().publish(entry_for(buffer)));
    const auto s = table.publisher().open_slot();
    REQUIRE(s);
    slot = *s;
    REQUIRE(send(peer.down(), Offer{table.fd(), slot, table.nonce()}));
  }
  bool holds_pattern() const {
    for (std::size_t i = 0; i < buffer.size(); ++i)
      if (buffer[i] != pattern(i)) return false;
    return true;
  }
  PublishedRegion table;
  std::vector<unsigned char> buffer;
  std::uint32_t slot = 0;
};

} // namespace

TEST_CASE("samehost region: a table attached in one process carries a Write and a Read",
          "[samehost]") {
  PublishedRegion t = make_table();
  CHECK(t.bytes() == kLayout.bytes());
  CHECK((::fcntl(t.fd(), F_GETFD) & FD_CLOEXEC) != 0);
  const int seals = ::fcntl(t.fd(), F_GET_SEALS);
  CHECK((seals & F_SEAL_SHRINK) != 0);
  CHECK((seals & F_SEAL_GROW) != 0);
  CHECK((seals & F_SEAL_SEAL) != 0);
  CHECK(::ftruncate(t.fd(), 0) != 0);             // sealed: it cannot shrink under a peer
  CHECK_FALSE(t.nonce() == make_table().nonce()); // random, one per table

  std::vector<unsigned char> buffer(kLength, 0);
  REQUIRE(t.publisher().publish(entry_for(buffer)));
  const auto slot = t.publisher().open_slot();
  REQUIRE(slot);

  auto attached = PeerRegion::attach(::getpid(), t.fd(), t.nonce());
  if (!attached && attached.errnum == EPERM) {
    WARN("skipped, refused on this machine: " << attached.error);
    return;
  }
  INFO(attached.error);
  REQUIRE(attached);
  PeerRegion& peer = *attached.value;
  CHECK(attached.error.empty());
  CHECK(peer.alive());
  CHECK(peer.pid() == ::getpid());
  CHECK(peer.reader().layout() == kLayout);
  CHECK(peer.reader().nonce() == t.nonce());
  // Its own mapping, the header and entries read-only, the slots writable, adjacent.
  CHECK(peer.address() != t.address());
  CHECK(perms_at(peer.address()) == "r--s");
  CHECK(perms_at(peer.address() + kLayout.slots_offset()) == "rw-s");
  // The slots are shared memory: the peer's answer is the target's to read.
  const SlotAnswer a{static_cast<std::uint64_t>(::getpid()), 5, *slot, t.nonce(), 0x77};
  peer.reader().write_answer(*slot, a);
  CHECK(t.publisher().answer(*slot) == a);

  // A Write of 200 octets at TO + 100.
  const PinResult w = peer.reader().pin(*slot, kStag, kPd, kQp, kTo + 100, 200, kRemoteWrite);
  REQUIRE(w);
  CHECK(w.pin.host == address(buffer.data()) + 100);
  std::vector<unsigned char> data(300);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = pattern(i);
  const iovec whole{data.data(), 200};
  const ssize_t n = peer.write(*slot, w.pin, {&whole, 1});
  if (n == -EPERM) {
    peer.reader().unpin(*slot);
    WARN("skipped, refused on this machine: process_vm_writev: Operation not permitted");
    return;
  }
  CHECK(n == 200);
  // More local octets than the pin covers: the kernel stops at the pin, a short count.
  const iovec too_long{data.data(), 300};
  CHECK(peer.write(*slot, w.pin, {&too_long, 1}) == 200);
  peer.reader().unpin(*slot);
  CHECK(std::equal(data.begin(), data.begin() + 200, buffer.begin() + 100));
  CHECK(buffer[99] == 0);
  CHECK(buffer[300] == 0);

  // A Read of 100 octets at TO + 1000, into two local pieces.
  for (std::size_t i = 1000; i < 1100; ++i)
    buffer[i] = static_cast<unsigned char>(~pattern(i));
  const PinResult r = peer.reader().pin(*slot, kStag, kPd, kQp, kTo + 1000, 100, kRemoteRead);
  REQUIRE(r);
  unsigned char first[40] = {}, second[60] = {};
  const iovec pieces[] = {{first, sizeof first}, {second, sizeof second}};
  CHECK(peer.read(*slot, r.pin, pieces) == 100);
  peer.reader().unpin(*slot);
  CHECK(std::equal(first, first + 40, buffer.begin() + 1000));
  CHECK(std::equal(second, second + 60, buffer.begin() + 1040));

  // Every pin dropped: invalidation has nothing to wait for.
  const Ticket tk = t.publisher().begin_invalidate(kIndex);
  CHECK(tk.pending);
  CHECK(t.wait_drained(tk, Clock::now() + 1s));
}

TEST_CASE("samehost region: wait_drained gives false at its deadline while a live holder pins, "
          "true after the unpin",
          "[samehost]") {
  PublishedRegion t = make_table();
  std::vector<unsigned char> buffer(kLength, 0);
  REQUIRE(t.publisher().publish(entry_for(buffer)));
  const auto slot = t.publisher().open_slot();
  REQUIRE(slot);
  Reader reader; // a holder in this process, over the target's own mapping
  REQUIRE(reader.attach({t.address(), t.bytes()}) == AttachError::None);
  REQUIRE(reader.pin(*slot, kStag, kPd, kQp, kTo, 64, kRemoteWrite));
  // The holder's process, alive: watched, and it does not count as gone.
  CHECK(t.watch_peer(*slot, ::getpid()) == 0);
  CHECK(t.watch_peer(kLayout.slots, ::getpid()) == -EINVAL);
  CHECK(t.watch_peer(*slot, reaped_pid()) == -ESRCH); // nothing watched: not taken for dead

  const Ticket tk = t.publisher().begin_invalidate(kIndex);
  const auto start = Clock::now();
  CHECK_FALSE(t.wait_drained(tk, start + 30ms));
  CHECK(Clock::now() - start >= 30ms);
  const SlotTicket closing = t.publisher().close_slot(*slot);
  CHECK(closing.pending);
  CHECK_FALSE(t.wait_drained(closing, Clock::now() + 5ms));
  CHECK_FALSE(t.wait_drained(closing, Clock::now() - 1s)); // a deadline already past

  reader.unpin(*slot);
  CHECK(t.wait_drained(closing));
  CHECK(t.wait_drained(tk));
  t.unwatch_peer(*slot);
}

TEST_CASE("samehost region: a forked peer attaches to its parent's table and writes a pinned "
          "buffer",
          "[samehost]") {
  Peer child(Script::Write);
  Offered o(child);
  if (!next(child, 'D')) return;
  CHECK(o.holds_pattern());
  // What the child wrote in its slot during set-up.
  const SlotAnswer a = o.table.publisher().answer(o.slot);
  CHECK(a.pid == static_cast<std::uint64_t>(child.pid()));
  CHECK(a.slot == o.slot);
  CHECK(a.nonce == o.table.nonce());
  const int status = child.reap();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The child unpinned: nothing to wait for.
  CHECK(o.table.publisher().drained(o.table.publisher().begin_invalidate(kIndex)));
}

TEST_CASE("samehost region: deregistration waits for a forked peer's unpin", "[samehost]") {
  Peer child(Script::HoldUntilTold);
  Offered o(child);
  if (!next(child, 'P')) return;
  const Ticket tk = o.table.publisher().begin_invalidate(kIndex);
  REQUIRE(tk.pending);
  CHECK_FALSE(o.table.publisher().drained(tk)); // the child's pin holds it
  REQUIRE(send(child.down(), 'I'));             // the child copies now, pinned before
  REQUIRE(o.table.wait_drained(tk, Clock::now() + 30s));
  // The child said U just before its unpin: it is there as the drain ends, and so is the
  // copy the child made, pinned, after the invalidation.
  const bool said = readable(child.up());
  const bool landed = o.holds_pattern();
  if (!next(child, 'U') || !next(child, 'D')) return;
  CHECK(said);
  CHECK(landed);
  const int status = child.reap();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("samehost region: a peer killed holding its pin does not hold deregistration back",
          "[samehost]") {
  Peer child(Script::HoldForever);
  Offered o(child);
  if (!next(child, 'P')) return;
  Publisher& pub = o.table.publisher();
  // The child's pid, from its slot's answer area, written before it pinned.
  const SlotAnswer a = pub.answer(o.slot);
  REQUIRE(a.pid == static_cast<std::uint64_t>(child.pid()));
  REQUIRE(o.table.watch_peer(o.slot, static_cast<pid_t>(a.pid)) == 0);
  const Ticket tk = pub.begin_invalidate(kIndex);
  REQUIRE(tk.pending);
  CHECK_FALSE(o.table.wait_drained(tk, Clock::now() + 20ms)); // alive and pinned

  REQUIRE(::kill(child.pid(), SIGKILL) == 0); // not reaped: a zombie counts as gone
  CHECK(o.table.wait_drained(tk, Clock::now() + 30s));
  // Its slot is closed for good, and the entry is free for the next registration.
  CHECK_FALSE(pub.close_slot(o.slot).pending);
  CHECK(pub.publish(entry_for(o.buffer)));
  const int status = child.reap();
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("samehost region: attach refuses a wrong nonce, descriptors that are not a sealed "
          "table, and a dead pid, and leaks nothing",
          "[samehost]") {
  PublishedRegion t = make_table();
  int ends[2];
  REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
  const Fd pipe_r{ends[0]}, pipe_w{ends[1]};
  // Memfds that are not a table: one that can shrink, one sealed but zero.
  const Fd unsealed{::memfd_create("not-a-table", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  const Fd zeroed{::memfd_create("not-a-table", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  REQUIRE(unsealed.fd >= 0);
  REQUIRE(zeroed.fd >= 0);
  REQUIRE(::ftruncate(unsealed.fd, static_cast<off_t>(kLayout.bytes())) == 0);
  REQUIRE(::ftruncate(zeroed.fd, static_cast<off_t>(kLayout.bytes())) == 0);
  REQUIRE(::fcntl(zeroed.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
  const pid_t gone = reaped_pid();
  {
    const auto ok = PeerRegion::attach(::getpid(), t.fd(), t.nonce());
    if (!ok && ok.errnum == EPERM) {
      WARN("skipped, refused on this machine: " << ok.error);
      return;
    }
    INFO(ok.error);
    REQUIRE(ok); // the control: the right nonce attaches
  }
  const int fds = open_fds(), maps = table_mappings();
  const std::string self = "pid " + std::to_string(::getpid());
  struct Case {
    const char* what;
    pid_t pid;
    int fd;
    Nonce nonce;
    std::string says;
    int errnum;
  };
  const Nonce wrong{t.nonce().lo ^ 1, t.nonce().hi};
  const Case cases[] = {
      {"wrong nonce", ::getpid(), t.fd(), wrong,
       "nonce mismatch: " + self + " is not the process that offered", 0},
      {"a pipe", ::getpid(), pipe_r.fd, t.nonce(), "is not a memfd", 0},
      {"a memfd that can shrink", ::getpid(), unsealed.fd, t.nonce(), "seals missing", 0},
      {"a sealed memfd that is not a table", ::getpid(), zeroed.fd, t.nonce(),
       "not a shared STag table", 0},
      {"no such descriptor", ::getpid(), 1 << 20, t.nonce(), "pidfd_getfd", EBADF},
      {"no such process", gone, t.fd(), t.nonce(), "pidfd_open(pid " + std::to_string(gone), ESRCH},
  };
  for (const Case& c : cases) {
    const auto r = PeerRegion::attach(c.pid, c.fd, c.nonce);
    INFO(c.what << ": " << r.error);
    CHECK_FALSE(r);
    CHECK(r.error.find(c.says) != std::string::npos);
    CHECK(r.errnum == c.errnum);
  }
  CHECK(open_fds() == fds);
  CHECK(table_mappings() == maps); // the nonce is checked after mapping: unmapped again
}
