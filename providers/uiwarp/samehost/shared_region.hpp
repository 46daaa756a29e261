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

#include "identity.hpp"
#include "stag_share.hpp"
#include "stream_ring.hpp"

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
  // Once no writer holds the slot: its ring's pages go back to the kernel (a hole in the memfd,
  // read as zeros), so a closed connection's ring costs no memory.
  void release_ring(std::uint32_t slot);

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
  // The same with the table's descriptor and the target's /proc/PID/mem descriptor granted by
  // the target itself (grant.hpp), where the kernel refuses the ptrace way: every copy then
  // goes through that descriptor. Takes both descriptors, attached or not.
  static Result<PeerRegion> attach_granted(pid_t pid, int table_fd, int mem_fd, Nonce expected);
  // How copies reach the target, for `uiwarp conn show`: process_vm_* for large copies and
  // /proc/PID/mem for small ones (both through the ptrace access check), /proc/PID/mem alone
  // (process_vm_* refused, by a seccomp filter say), or a descriptor the target granted.
  enum class Reach : std::uint8_t { ProcessVm, ProcMem, Granted };
  Reach reach() const { return reach_; }
  // process_vm_* was refused: every copy goes through /proc/PID/mem from now on.
  void use_proc_mem() {
    if (reach_ == Reach::ProcessVm) reach_ = Reach::ProcMem;
  }

  PeerRegion(PeerRegion&& o) noexcept;
  PeerRegion& operator=(PeerRegion&& o) noexcept;
  PeerRegion(const PeerRegion&) = delete;
  PeerRegion& operator=(const PeerRegion&) = delete;
  ~PeerRegion();

  Reader& reader() { return reader_; }
  // Our writer into the stream ring of `slot` (ours in this table), mapped read-write here.
  RingWriter ring(std::uint32_t slot) const;
  pid_t pid() const { return pid_; }
  const std::byte* address() const { return base_; }
  std::size_t bytes() const { return bytes_; }
  // False once the target no longer runs the program that offered: it exited (a zombie, or
  // its pid given to another process) or it called execve (another address space).
  bool alive() const;
  // alive(), asked at most once a millisecond: for each copy by pid, or into a mapping of
  // the target's memory (mapping.hpp), which outlives the target.
  bool alive_lately() const;

  // Copies `local` to (write) or from (read) the pinned range of the target, through `slot`:
  // the octets copied, or -errno. Fewer octets than asked is a failure too (part of the range
  // unmapped, or more local octets than the pin covers): the caller takes the TCP path.
  // -ESRCH once the target no longer runs the program that offered (alive()). Up to
  // kMemCopyMax octets go through /proc/PID/mem, whose descriptor is bound to the address space
  // it was opened on: after an exec or exit it copies nothing, so those copies never land in
  // another program. Larger ones go through process_vm_writev/readv, which is faster there
  // and names the target by pid: alive() is asked once a millisecond, and the first iovec of
  // the call goes to the table's own mapping (the slot's canary, the header's nonce), which an
  // image after an exec does not have where the offering one had it.
  static constexpr std::size_t kMemCopyMax = 16 << 10;
  ssize_t write(std::uint32_t slot, const Pin& pin, std::span<const iovec> local) const;
  ssize_t read(std::uint32_t slot, const Pin& pin, std::span<const iovec> local) const;
  // The set-up's probe: writes `value` into the probe word of `slot`'s answer with
  // process_vm_writev, as large copies go. 0 or -errno (EPERM: Yama's ptrace_scope, seccomp,
  // a target that is not dumpable; ESRCH: gone).
  int probe(std::uint32_t slot, std::uint64_t value) const;

private:
  // Checks the table in `table_fd` (the caller's to close) and maps it into `p`.
  static Result<PeerRegion> map_table(PeerRegion p, int table_fd, const std::string& what,
                                      Nonce expected);
  ssize_t copy(bool write, std::uint32_t slot, const Pin& pin, std::span<const iovec> local) const;
  ssize_t copy_vm(bool write, std::uint32_t slot, const Pin& pin,
                  std::span<const iovec> local) const;
  PeerRegion() = default;
  void reset() noexcept;

  pid_t pid_ = 0;
  int mem_fd_ = -1; // /proc/PID/mem of the target, opened at attach: its address space
  // When alive() last said yes (steady clock, ns): large copies ask again after kAliveCheckNs.
  mutable std::atomic<std::int64_t> alive_at_{0};
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  // Who mapped base_: a child of fork() has no such mapping (MADV_DONTFORK), and must not
  // unmap what it has there now.
  std::uint32_t forks_ = 0;
  pid_t owner_ = 0;
  Reach reach_ = Reach::ProcessVm;
  Reader reader_;
};

} // namespace uiwarp::samehost
