// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A process's side of the same-host path (providers/uiwarp/samehost/host.hpp): the shared STag
// table follows the context's iwarp::MemoryTable through every change a verb makes
// (registration, reregistration, deregistration, association, windows, invalidations), and a
// change waits for a copy in progress through the old entry. The peer is this process, attached
// to its own table as a same-host peer attaches (pidfd_getfd): what matters is what its Reader
// sees. A machine that refuses pidfd_getfd (EPERM) skips with a warning.
#include "catch_compat.hpp"
#include "iwarp/memory.hpp"
#include "samehost/host.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace uiwarp::samehost;
using namespace std::chrono_literals;
namespace acc = iwarp::access;

namespace {

constexpr std::uint32_t kPd = 4;
constexpr std::uint32_t kStream = 77;

struct Fixture {
  iwarp::MemoryTable mem{1};
  Host host{mem};
  std::optional<PeerRegion> peer;
  std::uint32_t slot = 0;
  std::vector<std::byte> buf = std::vector<std::byte>(8192);

  // False (with a warning) where this machine refuses pidfd_getfd on ourselves.
  bool attach() {
    auto o = host.open(kPd, kStream);
    REQUIRE(o);
    slot = o.value->slot;
    auto r = PeerRegion::attach(::getpid(), o.value->table_fd, o.value->nonce);
    if (!r && r.errnum == EPERM) {
      WARN("pidfd_getfd refused here: " << r.error);
      return false;
    }
    REQUIRE(r);
    peer.emplace(std::move(*r.value));
    const Reader::Owner owner = peer->reader().owner(slot);
    CHECK(owner.pd == kPd);
    CHECK(owner.stream == kStream);
    return true;
  }
  Refusal pin(std::uint32_t stag, std::uint64_t to, std::uint64_t len,
              std::uint32_t need = acc::kRemoteWrite, std::uint32_t stream = kStream) {
    const PinResult r = peer->reader().pin(slot, stag, kPd, stream, to, len, need);
    if (r) peer->reader().unpin(slot);
    return r.refusal;
  }
  std::uint32_t reg(std::uint32_t access, std::size_t off = 0, std::size_t len = 4096) {
    return mem.add(kPd, buf.data() + off, reinterpret_cast<std::uintptr_t>(buf.data() + off), len,
                   access);
  }
  std::uint64_t va(std::size_t off) const {
    return reinterpret_cast<std::uintptr_t>(buf.data() + off);
  }
};

} // namespace

TEST_CASE("samehost host: the table follows registrations, rights and deregistration",
          "[samehost]") {
  Fixture f;
  // Registered before the first connection: published when the table is made.
  const std::uint32_t early = f.reg(acc::kRemoteWrite | acc::kLocalWrite);
  const std::uint32_t local_only = f.reg(acc::kLocalWrite, 4096);
  if (!f.attach()) return;
  CHECK(f.pin(early, f.va(0), 4096) == Refusal::None);
  CHECK(f.pin(early, f.va(0), 4097) == Refusal::Bounds);
  CHECK(f.pin(early, f.va(0), 16, acc::kRemoteRead) == Refusal::Access);
  CHECK(f.pin(local_only, f.va(4096), 16) == Refusal::InvalidStag); // never shown to peers
  CHECK(f.pin(early ^ 1, f.va(0), 16) == Refusal::InvalidStag);     // another key

  // Registered after: published at once.
  const std::uint32_t late = f.reg(acc::kRemoteRead, 4096);
  CHECK(f.pin(late, f.va(4096), 100, acc::kRemoteRead) == Refusal::None);

  // Deregistered: refused; the index reused by a new registration: only the new key works.
  REQUIRE(f.mem.remove(early));
  CHECK(f.pin(early, f.va(0), 16) == Refusal::InvalidStag);
  const std::uint32_t again = f.reg(acc::kRemoteWrite);
  CHECK(f.pin(again, f.va(0), 16) == Refusal::None);
  if ((again >> 8) == (early >> 8)) CHECK(f.pin(early, f.va(0), 16) == Refusal::InvalidStag);

  // Reregistered with a new key (ibv_rereg_mr with a new translation): the old STag is dead.
  const auto rekeyed =
      f.mem.modify(again, kPd, f.buf.data(), f.va(0), 2048, acc::kRemoteWrite, /*rekey=*/true);
  REQUIRE(rekeyed);
  CHECK(f.pin(again, f.va(0), 16) == Refusal::InvalidStag);
  CHECK(f.pin(*rekeyed, f.va(0), 2048) == Refusal::None);
  CHECK(f.pin(*rekeyed, f.va(0), 2049) == Refusal::Bounds);

  // Bound to one stream (DDP-081): another stream is refused.
  REQUIRE(f.mem.associate(*rekeyed, kStream + 1));
  CHECK(f.pin(*rekeyed, f.va(0), 16) == Refusal::NotAssociated);
  REQUIRE(f.mem.associate(*rekeyed, 0));
  CHECK(f.pin(*rekeyed, f.va(0), 16) == Refusal::None);

  // Invalidated by a Send with Invalidate, or locally: refused.
  CHECK_FALSE(f.mem.invalidate(*rekeyed, kPd, kStream));
  CHECK(f.pin(*rekeyed, f.va(0), 16) == Refusal::InvalidStag);
  CHECK_FALSE(f.mem.invalidate_local(late, kPd));
  CHECK(f.pin(late, f.va(4096), 16, acc::kRemoteRead) == Refusal::InvalidStag);
}

TEST_CASE("samehost host: windows are published while bound", "[samehost]") {
  Fixture f;
  if (!f.attach()) return;
  const std::uint32_t region = f.reg(acc::kLocalWrite | acc::kMwBind, 0, 8192);
  const std::uint32_t w2 = f.mem.add_window(kPd, iwarp::StagKind::Window2);
  REQUIRE(w2);
  CHECK(f.pin(w2, 0, 16) == Refusal::InvalidStag); // unbound
  const std::uint32_t bound = (w2 & ~0xffu) | 0x42;
  iwarp::WindowBind b{w2,  bound,  region, f.va(1024), 512, acc::kRemoteWrite | acc::kZeroBased,
                      kPd, kStream};
  REQUIRE_FALSE(f.mem.bind(b));
  CHECK(f.pin(bound, 0, 512) == Refusal::None); // zero-based
  CHECK(f.pin(bound, 0, 513) == Refusal::Bounds);
  CHECK(f.pin(bound, 0, 16, acc::kRemoteWrite, kStream + 1) == Refusal::NotAssociated);
  const PinResult p = f.peer->reader().pin(f.slot, bound, kPd, kStream, 8, 8, acc::kRemoteWrite);
  REQUIRE(p);
  CHECK(p.pin.host == f.va(1024 + 8));
  f.peer->reader().unpin(f.slot);
  CHECK_FALSE(f.mem.invalidate_local(bound, kPd));
  CHECK(f.pin(bound, 0, 16) == Refusal::InvalidStag);
  REQUIRE(f.mem.remove_window(w2));
}

TEST_CASE("samehost host: deregistration returns at once, and its thread's settle() waits for "
          "a copy in progress",
          "[samehost]") {
  Fixture f;
  if (!f.attach()) return;
  const std::uint32_t stag = f.reg(acc::kRemoteWrite);
  const std::uint32_t other = f.reg(acc::kRemoteWrite, 4096);
  const PinResult p =
      f.peer->reader().pin(f.slot, stag, kPd, kStream, f.va(0), 64, acc::kRemoteWrite);
  REQUIRE(p);
  std::atomic<bool> removed{false}, settled{false};
  std::thread t([&] {
    f.mem.remove(stag);
    removed = true;
    f.host.settle();
    settled = true;
  });
  std::this_thread::sleep_for(50ms);
  CHECK(removed.load());       // withdrawn under the table's lock, not waited for there
  CHECK_FALSE(settled.load()); // the pin holds its thread
  CHECK(f.host.unsettled());
  // Meanwhile this thread registers, deregisters and settles without waiting for the pin.
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(f.mem.remove(other));
  const std::uint32_t more = f.reg(acc::kRemoteRead, 4096);
  REQUIRE(f.mem.remove(more));
  f.host.settle();
  CHECK(std::chrono::steady_clock::now() - t0 < 40ms);
  CHECK_FALSE(settled.load());
  f.peer->reader().unpin(f.slot);
  t.join();
  CHECK(settled.load());
  CHECK_FALSE(f.host.unsettled());
  CHECK(f.pin(stag, f.va(0), 16) == Refusal::InvalidStag);
}

TEST_CASE("samehost host: an entry changed while its old value drains is published when the "
          "drain ends",
          "[samehost]") {
  Fixture f;
  if (!f.attach()) return;
  const std::uint32_t stag = f.reg(acc::kRemoteWrite);
  REQUIRE(f.peer->reader().pin(f.slot, stag, kPd, kStream, f.va(0), 64, acc::kRemoteWrite));
  // ibv_rereg_mr with a new translation while a peer copies through the old one: the new STag
  // goes over TCP (not published) until the old entry has drained.
  const auto rekeyed =
      f.mem.modify(stag, kPd, f.buf.data(), f.va(0), 2048, acc::kRemoteWrite, /*rekey=*/true);
  REQUIRE(rekeyed);
  auto second = f.host.open(kPd, kStream); // a slot of its own: the first holds the pin

  REQUIRE(second);
  const auto pin2 = [&](std::uint32_t s) {
    const PinResult r =
        f.peer->reader().pin(second.value->slot, s, kPd, kStream, f.va(0), 16, acc::kRemoteWrite);
    if (r) f.peer->reader().unpin(second.value->slot);
    return r.refusal;
  };
  CHECK(pin2(*rekeyed) == Refusal::InvalidStag);
  CHECK(pin2(stag) == Refusal::InvalidStag);
  f.peer->reader().unpin(f.slot);
  f.host.settle();
  CHECK(pin2(*rekeyed) == Refusal::None);
  CHECK(pin2(stag) == Refusal::InvalidStag);

  // Deregistered while pinned, its index reused by a new registration: the same.
  REQUIRE(f.peer->reader().pin(f.slot, *rekeyed, kPd, kStream, f.va(0), 64, acc::kRemoteWrite));
  REQUIRE(f.mem.remove(*rekeyed));
  const std::uint32_t again = f.reg(acc::kRemoteWrite);
  REQUIRE((again >> 8) == (*rekeyed >> 8)); // the only free index
  CHECK(pin2(again) == Refusal::InvalidStag);
  // Deregistered again before the drain: nothing is published for it at the end.
  REQUIRE(f.mem.remove(again));
  const std::uint32_t third = f.reg(acc::kRemoteWrite);
  f.peer->reader().unpin(f.slot);
  f.host.settle();
  CHECK(pin2(again) == Refusal::InvalidStag);
  CHECK(pin2(third) == Refusal::None);
}

TEST_CASE("samehost host: a closed slot refuses pins and reopens clean", "[samehost]") {
  Fixture f;
  if (!f.attach()) return;
  const std::uint32_t stag = f.reg(acc::kRemoteWrite);
  f.host.set_consumed(f.slot, 1234);
  CHECK(f.peer->reader().consumed(f.slot) == 1234);
  f.host.close(f.slot);
  CHECK(f.pin(stag, f.va(0), 16) == Refusal::Revoked);
  auto o = f.host.open(kPd, kStream + 5);
  REQUIRE(o);
  CHECK(f.peer->reader().consumed(o.value->slot) == 0);
  CHECK(f.peer->reader().owner(o.value->slot).stream == kStream + 5);
}

TEST_CASE("samehost host: an offer qualifies only from this host, user and pid namespace",
          "[samehost]") {
  const Identity self = identity();
  REQUIRE(self.error.empty());
  iwarp::SameHostOffer o;
  o.boot_id = self.boot_id;
  o.pid_ns = self.pid_ns;
  o.uid = self.uid;
  o.pid = self.pid + 1;
  CHECK(mismatch(o, self).empty());
  auto other = o;
  other.boot_id[3] ^= std::byte{1};
  CHECK(mismatch(other, self) == "the peer runs on another host (boot id)");
  other = o;
  other.pid_ns += 1;
  CHECK(mismatch(other, self) == "the peer is in another pid namespace");
  other = o;
  other.uid += 1;
  CHECK(mismatch(other, self) == "the peer runs as another user");
  const Nonce n{0x0102030405060708, 0x1112131415161718};
  CHECK(to_nonce(to_bytes(n)) == n);
}

TEST_CASE("samehost host: closing a slot whose peer was killed holding a pin returns, unwatched",
          "[samehost]") {
  // The responder of a connection watches its peer only when it posts a Write or Read of its
  // own; a peer killed in a copy must not hold the connection's end forever either way.
  Fixture f;
  auto o = f.host.open(kPd, kStream);
  REQUIRE(o);
  const std::uint32_t stag = f.reg(acc::kRemoteWrite);
  int up[2];
  REQUIRE(::pipe(up) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) { // the peer: attach, answer, probe, pin, then wait to be killed
    auto r = PeerRegion::attach(::getppid(), o.value->table_fd, o.value->nonce);
    char note = 'F';
    if (r) {
      r.value->reader().write_answer(o.value->slot,
                                     {static_cast<std::uint64_t>(::getpid()), 0, 0, {}, 0});
      const bool probed = r.value->probe(o.value->slot, 1) == 0;
      const PinResult p = r.value->reader().pin(o.value->slot, stag, kPd, kStream,
                                                reinterpret_cast<std::uintptr_t>(f.buf.data()), 16,
                                                acc::kRemoteWrite);
      note = !probed ? 'S' : p ? 'P' : 'F';
    } else if (r.errnum == EPERM) {
      note = 'S';
    }
    if (::write(up[1], &note, 1) != 1) _exit(1);
    for (;;)
      ::pause();
  }
  char note = 0;
  REQUIRE(::read(up[0], &note, 1) == 1);
  if (note == 'S') {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    WARN("pidfd_getfd or process_vm_writev refused here");
    return;
  }
  REQUIRE(note == 'P');
  ::kill(child, SIGKILL); // dies holding the pin; not reaped yet (a zombie) while settle waits
  const auto t0 = std::chrono::steady_clock::now();
  f.host.close(o.value->slot); // revokes, and returns: the pin is the thread's to settle
  CHECK(std::chrono::steady_clock::now() - t0 < 100ms);
  f.host.settle();
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK_FALSE(f.host.unsettled());
  ::waitpid(child, nullptr, 0);
  ::close(up[0]);
  ::close(up[1]);
}

TEST_CASE("samehost host: a child of fork() writes nothing into its parent's table", "[samehost]") {
  // The child has the parent's table mapped (MAP_SHARED): a QP it inherited and drives must not
  // move the parent's connection's consumed word, nor read the parent's answers as its own.
  Fixture f;
  if (!f.attach()) return;
  f.host.set_consumed(f.slot, 1000);
  f.peer->reader().write_answer(f.slot, {static_cast<std::uint64_t>(::getpid()), 3, 0, {}, 9});
  const std::uint32_t before = fork_generation();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    f.host.set_consumed(f.slot, 2000);
    const bool counted = fork_generation() == before + 1;
    const bool no_answer = f.host.answer(f.slot).probe == 0;
    f.host.close(f.slot); // the parent's slot: a child neither closes it nor waits on it
    _exit(counted && no_answer ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(fork_generation() == before);
  CHECK(f.peer->reader().consumed(f.slot) == 1000);
  CHECK(f.host.answer(f.slot).probe == 9);
  const std::uint32_t stag = f.reg(acc::kRemoteWrite);
  CHECK(f.pin(stag, f.va(0), 16) == Refusal::None);
}

namespace {
std::mutex g_report_mu;
std::vector<std::pair<std::uint32_t, std::string>> g_reports;
void record_report(std::uint32_t qp, const char* text) {
  std::lock_guard lock(g_report_mu);
  g_reports.emplace_back(qp, text ? text : "");
}
} // namespace

TEST_CASE("samehost host: a wait on a stopped peer says which pid, its state and the MR, once",
          "[samehost]") {
  Fixture f;
  f.host.set_wait_report(record_report);
  auto o = f.host.open(kPd, kStream);
  REQUIRE(o);
  const std::uint32_t stag = f.reg(acc::kRemoteWrite);
  int up[2];
  REQUIRE(::pipe(up) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) { // the peer: pins, stops itself (as a debugger would stop it), then unpins
    auto r = PeerRegion::attach(::getppid(), o.value->table_fd, o.value->nonce);
    char note = r ? 'F' : r.errnum == EPERM ? 'S' : 'F';
    if (r) {
      r.value->reader().write_answer(o.value->slot,
                                     {static_cast<std::uint64_t>(::getpid()), 0, 0, {}, 1});
      const PinResult p = r.value->reader().pin(o.value->slot, stag, kPd, kStream,
                                                reinterpret_cast<std::uintptr_t>(f.buf.data()), 16,
                                                acc::kRemoteWrite);
      note = p ? 'P' : 'F';
    }
    if (::write(up[1], &note, 1) != 1 || note != 'P') _exit(1);
    ::raise(SIGSTOP);
    r.value->reader().unpin(o.value->slot);
    _exit(0);
  }
  char note = 0;
  REQUIRE(::read(up[0], &note, 1) == 1);
  ::close(up[0]);
  ::close(up[1]);
  if (note == 'S') {
    ::waitpid(child, nullptr, 0);
    WARN("pidfd_getfd refused here");
    return;
  }
  REQUIRE(note == 'P');
  int status = 0;
  REQUIRE(::waitpid(child, &status, WUNTRACED) == child); // stopped, holding the pin
  REQUIRE(WIFSTOPPED(status));
  std::atomic<bool> settled{false};
  std::thread t([&] {
    f.mem.remove(stag);
    f.host.settle();
    settled = true;
  });
  std::this_thread::sleep_for(1300ms);
  CHECK_FALSE(settled.load());
  {
    std::lock_guard lock(g_report_mu);
    REQUIRE(g_reports.size() == 1);
    CHECK(g_reports[0].first == kStream);
    char mr[16];
    std::snprintf(mr, sizeof mr, "%#x", stag);
    CHECK(g_reports[0].second ==
          "waiting for pid " + std::to_string(child) + " (stopped) to finish a copy into MR " + mr);
  }
  ::kill(child, SIGCONT);
  t.join();
  CHECK(settled.load());
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  std::lock_guard lock(g_report_mu);
  REQUIRE(g_reports.size() == 2); // and that it is over
  CHECK(g_reports[1].first == kStream);
  CHECK(g_reports[1].second.empty());
  g_reports.clear();
}

TEST_CASE("samehost host: the table costs memory for the entries in use, not its capacity",
          "[samehost]") {
  Fixture f;
  for (int i = 0; i < 100; ++i)
    f.reg(acc::kRemoteWrite);
  REQUIRE(f.host.open(kPd, kStream));
  // /proc/self/smaps: the memfd's resident size (header, the entries of 100 regions, slots).
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_table = false;
  long rss_kb = -1;
  while (std::getline(smaps, line)) {
    if (line.find("memfd:uiwarp-stags") != std::string::npos) {
      in_table = true;
    } else if (in_table && line.rfind("Rss:", 0) == 0) {
      rss_kb = std::stol(line.substr(4));
      break;
    }
  }
  REQUIRE(rss_kb >= 0);
  INFO("the table's Rss: " << rss_kb << " kB of " << kLayout.bytes() / 1024 << " kB mapped");
  CHECK(rss_kb < 1024);
}

TEST_CASE("samehost host: a child of fork() forgets its parent's peer mapping without unmapping "
          "what it has there",
          "[samehost]") {
  // The child never receives the peer's table (MADV_DONTFORK): the range is free in it, and
  // may hold something of the child's own by the time it drops the inherited PeerRegion.
  Fixture f;
  if (!f.attach()) return;
  std::byte* at = const_cast<std::byte*>(f.peer->address());
  const std::size_t bytes = f.peer->bytes();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Not inherited: mincore says a page is unmapped (ENOMEM). The child takes the range's first
    // and last pages where they are free; where one is not, the runtime has mapped something
    // there since fork (ThreadSanitizer starts a thread in the child, whose stack the kernel
    // places in the free range), which must survive just the same. Nothing wider than a page is
    // mapped MAP_FIXED, which would clobber such a mapping (and ThreadSanitizer's mmap does not
    // honour MAP_FIXED_NOREPLACE).
    const long page = ::sysconf(_SC_PAGESIZE);
    std::byte* const ends[] = {at, at + bytes - page};
    unsigned char vec[1];
    int free_pages = 0;
    for (std::byte* p : ends) {
      if (::mincore(p, page, vec) == 0) continue; // the runtime's
      if (errno != ENOMEM) _exit(4);
      ++free_pages;
      void* mine =
          ::mmap(p, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (mine != p) _exit(3);
      *static_cast<volatile char*>(mine) = 1;
    }
    if (free_pages == 0) _exit(2); // both ends mapped: the table came with the fork
    f.peer.reset();                // the child's QP gives up the path
    // Still mapped: mincore fails with ENOMEM on an unmapped range.
    for (std::byte* p : ends)
      if (::mincore(p, page, vec) != 0) _exit(1);
    _exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO("the child's wait status " << status);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(f.pin(f.reg(acc::kRemoteWrite), f.va(0), 16) == Refusal::None); // the parent's works
}
