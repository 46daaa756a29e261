// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The shim's table of the fds it emulates: uverbs device fds (backed by /dev/full), completion
// channels (pipes, whose write end the provider gets) and rdma_cm channels (ucma.hpp), kept
// right across close/dup, and the operations on them. The table has no allocation, sits behind
// one pthread mutex, and has a lock-free fast path (an atomic bitmap of tracked fd numbers) so
// that write/close/dup on ordinary fds cost one atomic load and stay async-signal-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

namespace uiwarp::shim {

enum Kind : std::uint8_t { kNone = 0, kUverbs = 1, kCompChannel = 2, kUcma = 3 };

// False: `fd` is certainly not in the table (no lock taken).
bool maybe_tracked(int fd);
// Kind of a tracked fd (kNone if not tracked).
Kind kind_of(int fd);

// open of /dev/infiniband/uverbsN: /dev/full, tracked. -1 with errno on failure.
int open_uverbs(const char* path, int flags);
// open of /dev/infiniband/rdma_cm: an event channel of the UCMA emulation, tracked.
int open_ucma(int flags);
// write() on a uverbs fd: CREATE_COMP_CHANNEL is answered here with a pipe. True if handled
// (result in *ret); other commands reach /dev/full (ENOSPC).
bool uverbs_write(int fd, const void* buf, size_t n, ssize_t* ret);
// The write end of completion channel `fd`; -1 with EBADF if it is none.
int comp_channel_wfd(int fd);

// close() of a tracked fd: drops its entry and runs the real close.
int tracked_close(int fd);
// An rdma_cm channel that is no longer the file the shim made (the program closed it with a
// call the shim does not see, such as close_range, and perhaps reused the number): the UCMA
// emulation lets go of its ids and the entry goes, as at a close. True if that was so.
bool forget_if_closed_ucma(int fd);

// The table's lock (for tracked_dup).
struct TableLock {
  TableLock();
  ~TableLock();
  TableLock(const TableLock&) = delete;
  TableLock& operator=(const TableLock&) = delete;
};
// With the lock held: `newfd` is now a copy of `oldfd`.
void duplicated(int oldfd, int newfd);

// Runs a dup-like call `op` that makes a (new or given) fd number a copy of oldfd, with the
// table locked so that fd numbers cannot be reused under its feet by our own open/pipe.
template <typename Op> int tracked_dup(int oldfd, Op op) {
  TableLock l;
  int r = op();
  if (r >= 0 && r != oldfd) duplicated(oldfd, r);
  return r;
}

} // namespace uiwarp::shim
