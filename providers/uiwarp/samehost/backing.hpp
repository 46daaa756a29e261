// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The target's half of copies without a system call: which object a registered region lies in,
// when a same-host peer can map that object too and then copy with loads and stores into its
// own mapping of it (mapping.hpp) instead of process_vm_writev or /proc/PID/mem.
//
// Only objects whose pages cannot go away under a peer's copy qualify, since a load or store
// past the end of a mapped file is a SIGBUS in the peer, not an error it can report:
//  - a memfd (or other shmem file) sealed against shrinking (F_SEAL_SHRINK), mapped shared,
//    that this process still holds a descriptor of: QEMU's memory-backend-memfd, a program's
//    own memfd_create buffers. The peer opens it as /proc/PID/fd/N, which the kernel allows a
//    process of the same user without ptrace's attach right (Yama's ptrace_scope 1 keeps it).
//  - a System V shared memory segment (perftest's --use_hugepages, shmget/shmat programs):
//    it cannot shrink, and the peer attaches it by its shmid in the same IPC namespace.
// Anything else, anonymous or private memory above all, keeps the system call. Nothing here
// changes the program's own mappings: a region is looked up as the program mapped it.
#pragma once

#include "stag_share.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace uiwarp::samehost {

// The Backing of [addr, addr + len) in this process (BackingKind::None if none qualifies). Reads
// /proc/self/maps and, for a file, this process's descriptors: at registration, never per
// message.
Backing find_backing(const void* addr, std::size_t len);

// The inode of this process's IPC namespace (a shmid names a segment in that one only), 0 if
// it cannot be read.
std::uint64_t ipc_namespace();

// One line of /proc/PID/maps.
struct MapsLine {
  std::uint64_t start = 0, end = 0, offset = 0;
  bool shared = false; // 's' in the permissions: MAP_SHARED
  unsigned major = 0, minor = 0;
  std::uint64_t inode = 0;
  std::string_view path; // "" for anonymous memory; may hold spaces
};
std::optional<MapsLine> parse_maps_line(std::string_view line);

// Whether a mapping's path is a SysV segment's ("/SYSV0000002a (deleted)": its key; the line's
// inode is the shmid).
bool is_sysv_path(std::string_view path);

} // namespace uiwarp::samehost
