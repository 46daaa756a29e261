// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The initiator's half of copies without a system call: its own mappings of the objects a
// target's regions lie in (backing.hpp), made at a region's first copy and kept for the next.
// A pinned copy (stag_share.hpp) whose Pin names a Backing goes into this mapping with loads
// and stores, under the same pin as the system call it replaces: the pin is what a
// deregistration at the target waits for, whatever moves the octets.
//
// What the peer checks before it maps, since the target's words are only the target's word:
// the object is the one it named (a memfd's device and inode, a segment's IPC namespace), it
// cannot shrink (a memfd's F_SEAL_SHRINK; a segment never does), and the pinned range lies
// inside it. A mapping that cannot be made is remembered as such, and those copies keep the
// system call. Each QP keeps a few mappings (kMaxMappings), the least recently used one going
// first: a mapping holds its object's memory until it goes, as any process mapping it does.
#pragma once

#include "stag_share.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <sys/types.h>
#include <sys/uio.h>

namespace uiwarp::samehost {

class SharedMappings {
public:
  static constexpr std::size_t kMaxMappings = 4;

  SharedMappings() = default;
  SharedMappings(const SharedMappings&) = delete;
  SharedMappings& operator=(const SharedMappings&) = delete;
  ~SharedMappings() { clear(); }

  // This process's address of the pinned range `b.offset`, `length` octets, in the object of
  // process `pid` that `b` names, mapped at its first use; nullptr if it cannot be (copy with
  // the system call then). Not thread-safe: one QP's, under its lock.
  std::byte* at(pid_t pid, const Backing& b, std::uint64_t length);
  // What copies went into, for `uiwarp conn show`: "memfd", "SysV segment", both joined by
  // " and ", or "" while none did.
  std::string kinds() const;
  // Unmaps everything (in the process that mapped it: a child of fork() has none of it).
  void clear();

private:
  struct Map {
    Backing key; // offset 0
    std::byte* base = nullptr;
    std::size_t bytes = 0;
    bool failed = false; // tried, and refused: not again
    std::uint64_t used = 0;
  };
  void drop(Map& m);
  Map* find_or_make(pid_t pid, const Backing& key);

  std::array<Map, kMaxMappings> maps_{};
  std::uint64_t uses_ = 0;
  std::uint32_t forks_ = 0;
  pid_t owner_ = 0;
};

// Copies `length` octets between `local` and `target` (to it for a Write, from it for a Read)
// in ascending order, the last octet last: a program that polls the last octet of a Write's
// buffer, as perftest's latency tests do, then finds the rest there, as process_vm_writev and
// an RNIC's in-order placement leave it. Plain memcpy may store the head last.
void place(bool write, std::byte* target, std::span<const iovec> local, std::uint64_t length);

} // namespace uiwarp::samehost
