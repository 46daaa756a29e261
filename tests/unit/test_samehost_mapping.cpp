// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Copies without a system call (providers/uiwarp/samehost/backing.hpp, mapping.hpp), with this
// process as both target and peer: which memory qualifies (a sealed memfd this process holds,
// a SysV segment) and which does not (anonymous, private, unsealed, a memfd whose descriptor
// was closed, write-sealed, a range past its mapping); the peer's mapping of it, its checks
// of what the target named, its least-recently-used bound; and place()'s octets.
#include "catch_compat.hpp"
#include "samehost/backing.hpp"
#include "samehost/mapping.hpp"

#include <cstring>
#include <fcntl.h>
#include <memory>
#include <string>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>
#include <vector>

using namespace uiwarp::samehost;

namespace {

constexpr std::size_t kBytes = 4 * 4096;

// A memfd of kBytes mapped shared, with `seals` added; its descriptor stays open unless closed.
struct Memfd {
  int fd = -1;
  char* p = nullptr;
  explicit Memfd(int seals = F_SEAL_SHRINK, unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING) {
    fd = ::memfd_create("test-mapping", flags);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, kBytes) == 0);
    void* m = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(m != MAP_FAILED);
    p = static_cast<char*>(m);
    if (seals) REQUIRE(::fcntl(fd, F_ADD_SEALS, seals) == 0);
  }
  ~Memfd() {
    ::munmap(p, kBytes);
    if (fd >= 0) ::close(fd);
  }
};

struct Segment {
  int id = -1;
  char* p = nullptr;
  Segment() {
    id = ::shmget(IPC_PRIVATE, kBytes, IPC_CREAT | 0600);
    REQUIRE(id >= 0);
    p = static_cast<char*>(::shmat(id, nullptr, 0));
    ::shmctl(id, IPC_RMID, nullptr); // gone with the last detach: the test's and the peer's
    REQUIRE(p != reinterpret_cast<char*>(-1));
  }
  ~Segment() { ::shmdt(p); }
};

} // namespace

TEST_CASE("samehost mapping: /proc/PID/maps lines parse, paths with spaces and all", "[samehost]") {
  const auto m =
      parse_maps_line("7f12a000-7f12e000 rw-s 00002000 00:01 4242   /memfd:a b (deleted)");
  REQUIRE(m);
  CHECK(m->start == 0x7f12a000);
  CHECK(m->end == 0x7f12e000);
  CHECK(m->shared);
  CHECK(m->offset == 0x2000);
  CHECK(m->major == 0);
  CHECK(m->minor == 1);
  CHECK(m->inode == 4242);
  CHECK(m->path == "/memfd:a b (deleted)");
  const auto anon = parse_maps_line("55d0c000-55d2d000 rw-p 00000000 00:00 0");
  REQUIRE(anon);
  CHECK_FALSE(anon->shared);
  CHECK(anon->path.empty());
  const auto sysv =
      parse_maps_line("7f00-8f00 rw-s 00000000 00:01 98317   /SYSV00000000 (deleted)");
  REQUIRE(sysv);
  CHECK(is_sysv_path(sysv->path));
  CHECK_FALSE(is_sysv_path("/memfd:SYSV"));
  for (const char* bad : {"", "7f00 rw-s 0 00:01 1", "7f00-7e00 rw-s 0 00:01 1",
                          "7f00-8f00 rw-s zz 00:01 1", "7f00-8f00 rw 0 00:01 1", "x-y"})
    CHECK_FALSE(parse_maps_line(bad));
}

TEST_CASE("samehost mapping: a sealed memfd and a SysV segment qualify, other memory does not",
          "[samehost]") {
  Memfd sealed;
  const Backing b = find_backing(sealed.p + 4096 + 100, 200);
  CHECK(b.kind == BackingKind::Memfd);
  CHECK(b.id == static_cast<std::uint64_t>(sealed.fd));
  CHECK(b.offset == 4096 + 100);
  CHECK(b.ino != 0);
  // The whole mapping, not a byte past it.
  CHECK(find_backing(sealed.p, kBytes).kind == BackingKind::Memfd);
  CHECK(find_backing(sealed.p + 1, kBytes).kind == BackingKind::None);
  CHECK(find_backing(sealed.p, 0).kind == BackingKind::None);

  Segment seg;
  const Backing s = find_backing(seg.p + 8, 64);
  CHECK(s.kind == BackingKind::SysV);
  CHECK(s.id == static_cast<std::uint64_t>(seg.id));
  CHECK(s.offset == 8);

  std::vector<char> heap(kBytes);
  CHECK(find_backing(heap.data(), heap.size()).kind == BackingKind::None);
  Memfd unsealed(0); // it could shrink under a copy: a SIGBUS in the peer
  CHECK(find_backing(unsealed.p, 64).kind == BackingKind::None);
  Memfd write_sealed(F_SEAL_SHRINK | F_SEAL_FUTURE_WRITE);
  CHECK(find_backing(write_sealed.p, 64).kind == BackingKind::None);
  Memfd closed;
  ::close(closed.fd); // mapped, but nothing left for the peer to open
  closed.fd = -1;
  CHECK(find_backing(closed.p, 64).kind == BackingKind::None);
  // A private mapping of the memfd: its stores are not the object's.
  void* priv = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, sealed.fd, 0);
  REQUIRE(priv != MAP_FAILED);
  CHECK(find_backing(priv, 64).kind == BackingKind::None);
  ::munmap(priv, kBytes);
}

TEST_CASE("samehost mapping: the peer copies into its own mapping, the target sees it",
          "[samehost]") {
  Memfd target;
  Segment seg;
  SharedMappings maps;
  CHECK(maps.kinds().empty());
  const Backing b = find_backing(target.p + 512, 1024);
  REQUIRE(b.kind == BackingKind::Memfd);
  std::byte* at = maps.at(::getpid(), b, 1024);
  REQUIRE(at);
  CHECK(static_cast<void*>(at) != static_cast<void*>(target.p + 512)); // a mapping of its own
  const char msg[] = "placed by loads and stores";
  iovec v{const_cast<char*>(msg), sizeof msg};
  place(true, at, {&v, 1}, sizeof msg);
  CHECK(std::memcmp(target.p + 512, msg, sizeof msg) == 0);
  CHECK(maps.kinds() == "memfd");
  // The same object again: the same mapping.
  Backing later = b;
  later.offset += 100;
  CHECK(maps.at(::getpid(), later, 10) == at + 100);
  // Past the object's end: the system call, which the pin's bounds then decide.
  later.offset = kBytes - 10;
  CHECK(maps.at(::getpid(), later, 11) == nullptr);

  const Backing s = find_backing(seg.p, 4096);
  REQUIRE(s.kind == BackingKind::SysV);
  std::byte* sat = maps.at(::getpid(), s, 4096);
  REQUIRE(sat);
  std::memcpy(seg.p + 7, "segment", 7);
  char back[7];
  iovec r{back, sizeof back};
  Backing at7 = s;
  at7.offset = 7;
  place(false, maps.at(::getpid(), at7, 7), {&r, 1}, sizeof back);
  CHECK(std::memcmp(back, "segment", 7) == 0);
  CHECK(maps.kinds() == "memfd and SysV segment");
  maps.clear();
  CHECK(maps.kinds().empty());
}

TEST_CASE("samehost mapping: what the target named is checked, and a refusal is remembered",
          "[samehost]") {
  Memfd target;
  SharedMappings maps;
  Backing b = find_backing(target.p, 64);
  REQUIRE(b.kind == BackingKind::Memfd);
  Backing other = b;
  other.ino += 1; // the descriptor now names another file: closed and reused
  CHECK(maps.at(::getpid(), other, 64) == nullptr);
  Backing no_fd = b;
  no_fd.id = 100000; // no such descriptor
  CHECK(maps.at(::getpid(), no_fd, 64) == nullptr);
  Segment seg;
  Backing ns = find_backing(seg.p, 64);
  REQUIRE(ns.kind == BackingKind::SysV);
  ns.dev += 1; // another IPC namespace's shmid
  CHECK(maps.at(::getpid(), ns, 64) == nullptr);
  CHECK(maps.kinds().empty());
  CHECK(maps.at(::getpid(), b, 64) != nullptr); // the real one still maps
}

TEST_CASE("samehost mapping: a QP keeps its few most recently used mappings", "[samehost]") {
  std::vector<std::unique_ptr<Memfd>> objects;
  SharedMappings maps;
  std::vector<Backing> bs;
  for (std::size_t i = 0; i <= SharedMappings::kMaxMappings; ++i) {
    objects.push_back(std::make_unique<Memfd>());
    bs.push_back(find_backing(objects.back()->p, 64));
    REQUIRE(bs.back().kind == BackingKind::Memfd);
  }
  std::vector<std::byte*> first;
  for (std::size_t i = 0; i < SharedMappings::kMaxMappings; ++i)
    first.push_back(maps.at(::getpid(), bs[i], 64));
  CHECK(maps.at(::getpid(), bs[1], 64) == first[1]); // 0 is now the least recently used
  // One more: the least recently used goes, the others stay where they were.
  REQUIRE(maps.at(::getpid(), bs.back(), 64) != nullptr);
  for (std::size_t i = 1; i < SharedMappings::kMaxMappings; ++i)
    CHECK(maps.at(::getpid(), bs[i], 64) == first[i]);
  // 0 maps again, where the kernel puts it now, and still reaches the object.
  std::byte* again = maps.at(::getpid(), bs[0], 64);
  REQUIRE(again);
  const char c = 'q';
  iovec v{const_cast<char*>(&c), 1};
  place(true, again, {&v, 1}, 1);
  CHECK(objects[0]->p[0] == 'q');
}

TEST_CASE("samehost mapping: place() moves exactly the octets asked, across iovecs", "[samehost]") {
  std::vector<char> target(64, '.');
  char a[] = "abc", b[] = "", c[] = "defgh";
  const iovec in[] = {{a, 3}, {b, 0}, {c, 5}};
  place(true, reinterpret_cast<std::byte*>(target.data()) + 1, in, 7); // 'h' is not asked for
  CHECK(std::string(target.data(), 10) == ".abcdefg..");
  char x[2] = {}, y[4] = {};
  const iovec out[] = {{x, 2}, {y, 4}};
  place(false, reinterpret_cast<std::byte*>(target.data()) + 1, out, 5);
  CHECK(std::string(x, 2) == "ab");
  CHECK(std::string(y, 3) == "cde");
  CHECK(y[3] == 0);
  place(true, reinterpret_cast<std::byte*>(target.data()), in, 0);
  CHECK(target[0] == '.');
}
