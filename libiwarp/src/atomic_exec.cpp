// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "atomic_exec.hpp"

#include "iwarp/dma.hpp"

#include <atomic>
#include <cstring>
#include <mutex>

namespace iwarp {

std::uint64_t atomic_result(const AtomicRequestHeader& a, std::uint64_t orig) {
  if (a.aopcode == static_cast<std::uint8_t>(AtomicOp::FetchAdd)) {
    // RFC 7306 §5.1: a mask bit marks the most significant bit of a field; carries out of
    // it are discarded. Mask 0: one 64-bit add.
    std::uint64_t res = 0, carry = 0;
    for (int bit = 0; bit < 64; ++bit) {
      std::uint64_t x = (orig >> bit) & 1, y = (a.add_swap >> bit) & 1;
      std::uint64_t s = x ^ y ^ carry;
      carry = (x & y) | (x & carry) | (y & carry);
      res |= s << bit;
      if ((a.add_swap_mask >> bit) & 1) carry = 0;
    }
    return res;
  }
  // Compare and Swap: swap the masked bits when the masked compare matches.
  if (((a.compare ^ orig) & a.compare_mask) == 0)
    return (orig & ~a.add_swap_mask) | (a.add_swap & a.add_swap_mask);
  return orig;
}

std::uint64_t atomic_execute(const AtomicRequestHeader& a, void* host) {
  const DmaScope dma; // the program's memory, as an RNIC's atomic unit reaches it (dma.hpp)
  // The target's TO is 8-octet aligned (HX-088), and so is its address in a VA-based region;
  // a zero-based region may map it elsewhere. Aligned: the CPU's compare-and-swap, atomic
  // even toward the application's own atomics. Not aligned: one lock for all such targets
  // (an address is either aligned or not, so two Atomics on one target always agree).
  if (reinterpret_cast<std::uintptr_t>(host) % alignof(std::uint64_t) == 0) {
    std::atomic_ref<std::uint64_t> target(*static_cast<std::uint64_t*>(host));
    std::uint64_t orig = target.load(std::memory_order_acquire);
    while (!target.compare_exchange_weak(orig, atomic_result(a, orig), std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
    }
    return orig;
  }
  static std::mutex unaligned;
  std::lock_guard lock(unaligned);
  std::uint64_t orig;
  std::memcpy(&orig, host, sizeof orig);
  const std::uint64_t v = atomic_result(a, orig);
  std::memcpy(host, &v, sizeof v);
  return orig;
}

} // namespace iwarp
