// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The edge of the shared STag table (stag_share.hpp): the memory two processes share and the
// way a peer reaches it. The target makes a sealed memfd, maps it and publishes its table there
// (PublishedRegion); it offers the descriptor's number, its pid and the table's nonce during
// connection set-up. The initiator takes the descriptor out of the target with pidfd_getfd,
// maps the header and entries read-only and the slots read-write, checks the nonce (PeerRegion),
// and then copies straight into or out of the target with process_vm_writev/readv.
// Both classes report failures as values with a reason; nothing here throws or prints.
#pragma once

#include "samehost/stag_share.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <sys/types.h>
#include <sys/uio.h>
#include <vector>

namespace uiwarp::samehost {

// A value, or the reason there is none (C++20 has no std::expected).
template <class T> struct Result {
  std::optional<T> value;
  std::string error; // "<step>: <strerror>" or the check that failed; empty on success
  int errnum = 0;    // errno of the failing system call; 0 when a check failed
  explicit operator bool() const { return value.has_value(); }
};

using Deadline = std::optional<std::chrono::steady_clock::time_point>;

// Target side: one per device context, made when the first peer asks. Not thread-safe, like
// the Publisher it holds: the caller serialises its calls.
class PublishedRegion {
public:
  // memfd (close-on-exec, sealed against shrinking and growing), mapped shared read-write, a
  // fresh random nonce, and a Publisher laid out over it.
  static Result<PublishedRegion> create(Layout layout);

  PublishedRegion(PublishedRegion&& o) noexcept;
  PublishedRegion& operator=(PublishedRegion&& o) noexcept;
  PublishedRegion(const PublishedRegion&) = delete;
  PublishedRegion& operator=(const PublishedRegion&) = delete;
  ~PublishedRegion();

  Publisher& publisher() { return pub_; }
  int fd() const { return fd_; } // the number offered to peers
  Nonce nonce() const { return nonce_; }
  std::byte* address() const { return base_; }
  std::size_t bytes() const { return bytes_; }

  // Watches the process `pid` (as this process numbers it: SlotAnswer::pid, which the peer
  // wrote during set-up) as the user of `slot`, replacing an earlier watch of that slot.
  // 0 or -errno; -ESRCH: no such process, nothing watched (a pid this process cannot see,
  // e.g. from another pid namespace, must not pass for a dead peer).
  int watch_peer(std::uint32_t slot, pid_t pid);
  // When the slot's connection closes: the slot's next peer is another process.
  void unwatch_peer(std::uint32_t slot);

  // drained() until true, or false once `deadline` passes. Meanwhile a watched peer that has
  // exited loses its slot (release_slot): a peer killed while it held a pin must not hold
  // deregistration back forever, and a process that no longer runs copies nothing.
  bool wait_drained(const Ticket& t, Deadline deadline = std::nullopt);
  bool wait_drained(const SlotTicket& t, Deadline deadline = std::nullopt);

  // Waits up to timeout_ns on the watched peers (0: a look), then releases the slot of each
  // that has exited (release_slot). True if it released one.
  bool release_dead_peers(int timeout_ns);

private:
  struct Watch {
    std::uint32_t slot;
    int pidfd;
  };
  PublishedRegion() = default;
  template <class Done> bool wait(Done done, Deadline deadline);
  void reset() noexcept;

  int fd_ = -1;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  Nonce nonce_;
  Publisher pub_;
  std::vector<Watch> watches_;
};

// Initiator side: one per (target process, table). Thread-safe as the Reader is: each thread
// pins through a slot of its own.
class PeerRegion {
public:
  // Takes descriptor `remote_fd` out of process `pid` and maps the table in it; refuses
  // (closing all it opened) unless it is a sealed memfd holding a table whose nonce is
  // `expected`, the one the offer carried.
  static Result<PeerRegion> attach(pid_t pid, int remote_fd, Nonce expected);

  PeerRegion(PeerRegion&& o) noexcept;
  PeerRegion& operator=(PeerRegion&& o) noexcept;
  PeerRegion(const PeerRegion&) = delete;
  PeerRegion& operator=(const PeerRegion&) = delete;
  ~PeerRegion();

  Reader& reader() { return reader_; }
  pid_t pid() const { return pid_; }
  const std::byte* address() const { return base_; }
  std::size_t bytes() const { return bytes_; }
  // False once the target has exited (its pidfd polls readable).
  bool alive() const;

  // Copies `local` to (write) or from (read) the pinned range of the target, in one system
  // call: the octets copied, or -errno. Fewer octets than asked is a failure too (part of the
  // range unmapped, or more local octets than the pin covers): the caller takes the TCP path.
  // -ESRCH once the target has exited: process_vm_* names it by pid, which another process
  // may get after it is reaped. (Checked once a millisecond, not per call: see copy().)
  ssize_t write(const Pin& pin, std::span<const iovec> local) const;
  ssize_t read(const Pin& pin, std::span<const iovec> local) const;
  // The set-up's probe: writes `value` into the probe word of `slot`'s answer with
  // process_vm_writev, the way the data path copies. 0 or -errno (EPERM: Yama's ptrace_scope,
  // seccomp, a target that is not dumpable; ESRCH: gone).
  int probe(std::uint32_t slot, std::uint64_t value) const;

private:
  using VmCopy = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long,
                             unsigned long);
  ssize_t copy(VmCopy op, const Pin& pin, std::span<const iovec> local) const;
  PeerRegion() = default;
  void reset() noexcept;

  pid_t pid_ = 0;
  int pidfd_ = -1;
  // When alive() last said yes (steady clock, ns): copy() asks again after kAliveCheckNs.
  mutable std::atomic<std::int64_t> alive_at_{0};
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  Reader reader_;
};

} // namespace uiwarp::samehost
