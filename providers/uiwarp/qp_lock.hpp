// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The per-QP lock: a futex mutex (atomic wait/notify) that spins briefly first. A poller
// and the progress thread meet on it for a few microseconds at a time, and a thread that
// went to sleep on it paid a futex wake-up and two context switches per message. try_lock
// never blocks and is defined for any caller, including the owner (ibv_wr_start holds the
// lock over user code that may poll a CQ of the same QP).
#pragma once

#include <atomic>

namespace uiwarp {

class QpLock {
public:
  bool try_lock() noexcept {
    int free = 0;
    return s_.compare_exchange_strong(free, 1, std::memory_order_acquire,
                                      std::memory_order_relaxed);
  }
  void lock() noexcept {
    for (int i = 0; i < kSpins; ++i) {
      if (s_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
      pause();
    }
    // 2 = locked, maybe with sleepers (Drepper, "Futexes Are Tricky", mutex 2).
    while (s_.exchange(2, std::memory_order_acquire) != 0)
      s_.wait(2, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (s_.exchange(0, std::memory_order_release) == 2) s_.notify_one();
  }

private:
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  static constexpr int kSpins = 2000; // a few tens of microseconds at most
  std::atomic<int> s_{0};
};

} // namespace uiwarp
