// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The accesses a software RNIC makes as an RNIC's DMA would: placing received data into a
// program's registered memory, reading its sources for the socket, executing an Atomic on its
// target. The program synchronises with them through completions, through its peer's next
// message, or by polling the memory itself; the TCP connection in between carries the order,
// and ThreadSanitizer cannot see that (it relates a write to a read of the same descriptor,
// never of the two ends of a connection). So, as a device's stores would be, these accesses are
// left out of its view: IWARP_DMA on a function, DmaScope around a system call that copies a
// program's memory. Locks and atomics inside stay visible. Both are empty in other builds.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define IWARP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define IWARP_TSAN 1
#endif
#endif

#if defined(IWARP_TSAN)
#define IWARP_DMA __attribute__((no_sanitize("thread")))
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#else
#define IWARP_DMA
#endif

namespace iwarp {

struct DmaScope {
#if defined(IWARP_TSAN)
  DmaScope() { __tsan_ignore_thread_begin(); }
  ~DmaScope() { __tsan_ignore_thread_end(); }
#else
  DmaScope() {} // user-provided: a scope variable is not "unused"
#endif
  DmaScope(const DmaScope&) = delete;
  DmaScope& operator=(const DmaScope&) = delete;
};

} // namespace iwarp
