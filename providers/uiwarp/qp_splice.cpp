// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Large RDMA Read Responses leave without a copy, as siw's do (it sends them from the
// registered pages): the payload is vmsplice'd into a pipe of the QP's own by reference, the
// frame's own octets (header, CRC, small payloads) are written into it in between, and the pipe
// is spliced to the socket. sendmsg copies every octet into the socket; this way TCP holds the
// registered pages themselves, and the receiver's read is the only copy. libiwarp says which
// pieces may go so (Qp::tx_gather's by_ref: a Read Response's payload, which nothing changes
// until the requester has it, and only on a connection without CRC: with CRC the frame carries
// a copy, the octets its CRC covers); a Send's or Write's payload is always copied, since its
// completion lets the program reuse the buffer at once.
//
// Which is cheaper depends on the machine (a copy is dear under emulation, cheap next to
// pinning pages and three more system calls on a real CPU), so each QP times both, and the drive
// policy chooses (QpDrive::choose_path); docs/performance.md has the measurements. Only pieces of
// kSpliceMin octets or more ever go by reference.
//
// Order: once the pipe holds octets, they are the stream's next ones; nothing is sent with
// sendmsg until they are in the socket (push_tx drains the pipe first), and the FIN waits for
// them too (after_io). The engine counts octets as sent when the pipe takes them.
#include "iwarp/dma.hpp"
#include "provider.hpp"
#include "uiwarp/env.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

namespace uiwarp {

namespace {

using drive::tuning::kSpliceMin;
// 64 pages: several 64 KiB responses per splice. A user's pipes beyond
// /proc/sys/fs/pipe-user-pages-soft get one page each; that one still works, slowly.
constexpr int kPipeSize = 256 << 10;

// UIWARP_TX_SPLICE: auto (timed, the default), on (always by reference), off (always copied).
using SpliceMode = drive::QpDrive::SpliceMode;
SpliceMode splice_mode() {
  static const SpliceMode m = [] {
    const char* v = Env::get().value(EnvVar::TxSplice);
    if (v && std::strcmp(v, "on") == 0) return SpliceMode::On;
    if (v && std::strcmp(v, "off") == 0) return SpliceMode::Off;
    return SpliceMode::Auto;
  }();
  return m;
}

bool by_reference(const std::vector<std::uint8_t>& by_ref,
                  const std::vector<iwarp::ConstBytes>& pieces, std::size_t i) {
  return by_ref[i] && pieces[i].size() >= kSpliceMin;
}

} // namespace

bool Qp::want_splice(PushClock& clock) {
  const SpliceMode mode = splice_mode();
  if (mode == SpliceMode::Off || tx.splice_failed) return false;
  bool any = false;
  for (std::size_t i = 0; i < tx.pieces.size() && !any; ++i)
    any = by_reference(tx.by_ref, tx.pieces, i);
  if (!any) return false;
  // A push keeps the path it started with.
  if (!clock.t0) {
    clock.t0 = mono_ns();
    clock.path = policy.choose_path(mode);
  }
  if (clock.path != drive::QpDrive::Path::Splice) return false;
  if (tx.pipe[0] >= 0) return true;
  // The socket becomes non-blocking for splice (every other call on it says MSG_DONTWAIT).
  int p[2];
  const int fl = ::fcntl(conn.fd, F_GETFL);
  if (fl < 0 || ::fcntl(conn.fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
      ::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
    tx.splice_failed = true;
    return false;
  }
  ::fcntl(p[1], F_SETPIPE_SZ, kPipeSize); // best effort: the default is 64 KiB
  tx.pipe[0] = p[0];
  tx.pipe[1] = p[1];
  return true;
}

// A timed push ends: its path's time and octets count towards the next choice.
Qp::PushClock::~PushClock() {
  if (t0) qp->policy.on_pushed(path, mono_ns() - t0, octets);
}

std::size_t Qp::fill_pipe() {
  std::size_t took = 0;
  iovec iov[kMaxIov];
  std::size_t i = 0;
  while (i < tx.pieces.size()) {
    // One piece by reference, or the run of pieces up to the next one, copied.
    const bool ref = !tx.splice_failed && by_reference(tx.by_ref, tx.pieces, i);
    std::size_t j = i + 1;
    while (!ref && j < tx.pieces.size() &&
           !(!tx.splice_failed && by_reference(tx.by_ref, tx.pieces, j)))
      ++j;
    std::size_t want = 0;
    for (std::size_t k = i; k < j; ++k) {
      iov[k - i] = {const_cast<std::byte*>(tx.pieces[k].data()), tx.pieces[k].size()};
      want += tx.pieces[k].size();
    }
    const auto cnt = j - i;
    ssize_t n;
    {
      const iwarp::DmaScope dma; // the kernel reads the program's sources
      n = ref ? ::vmsplice(tx.pipe[1], iov, cnt, SPLICE_F_NONBLOCK)
              : ::writev(tx.pipe[1], iov, static_cast<int>(cnt));
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (ref && errno != EAGAIN) { // refused (a seccomp profile): copy from now on
        tx.splice_failed = true;
        continue;
      }
      break; // the pipe is full
    }
    took += static_cast<std::size_t>(n);
    if (static_cast<std::size_t>(n) < want) break; // full after part of it
    i = j;
  }
  tx.piped += took;
  return took;
}

bool Qp::drain_pipe() {
  while (tx.piped > 0) {
    ssize_t n = ::splice(tx.pipe[0], nullptr, conn.fd, nullptr, tx.piped,
                         SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0) {
      if (errno == EINTR) continue;
      tx_error(errno);
      return false;
    }
    tx.piped -= static_cast<std::size_t>(n);
  }
  return true;
}

void Qp::close_pipe() {
  for (int& p : tx.pipe) {
    if (p >= 0) ::close(p);
    p = -1;
  }
  tx.piped = 0;
}

} // namespace uiwarp
