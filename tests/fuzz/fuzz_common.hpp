// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Helpers shared by the fuzz targets: an invariant check that aborts (so
// libFuzzer records the input as a crash), and a small deterministic PRNG the
// targets seed from the input's first octets to choose chunk sizes and the
// interleaving of API calls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace iwarp_fuzz {

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line,
                                      const char* why) {
  std::fprintf(stderr, "\n%s:%d: invariant violated: %s%s%s\n", file, line, expr,
               why[0] ? " -- " : "", why);
  std::abort();
}

// FUZZ_CHECK(cond) / FUZZ_CHECK(cond, "why"): always on, also in NDEBUG builds.
#define FUZZ_CHECK_2(cond, why)                                                                    \
  ((cond) ? (void)0 : ::iwarp_fuzz::check_failed(#cond, __FILE__, __LINE__, why))
#define FUZZ_CHECK_1(cond) FUZZ_CHECK_2(cond, "")
#define FUZZ_CHECK_PICK(_1, _2, name, ...) name
#define FUZZ_CHECK(...)                                                                            \
  FUZZ_CHECK_PICK(__VA_ARGS__, FUZZ_CHECK_2, FUZZ_CHECK_1, unused)(__VA_ARGS__)

// IWARP_FUZZ_VERBOSE=1 in the environment: targets print what each input did
// (for checking that a seed reaches what it was written for).
inline bool verbose() {
  static const bool v = [] {
    const char* e = std::getenv("IWARP_FUZZ_VERBOSE");
    return e && *e && *e != '0';
  }();
  return v;
}

// splitmix64: tiny, deterministic, good enough to spread a seed octet.
class Rng {
public:
  explicit Rng(std::uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); 0 when n == 0.
  std::size_t below(std::size_t n) { return n ? static_cast<std::size_t>(next() % n) : 0; }
  bool chance(unsigned percent) { return below(100) < percent; }
  // A read/write size as a TCP socket would hand them out: mostly small or
  // whole, sometimes a single octet, sometimes odd.
  std::size_t chunk(std::size_t left) {
    if (left == 0) return 0;
    switch (below(8)) {
    case 0: return 1;
    case 1: return 1 + below(std::min<std::size_t>(left, 7));
    case 2: return 1 + below(std::min<std::size_t>(left, 64));
    case 3: return 1 + below(std::min<std::size_t>(left, 1448));
    case 4: return 1 + below(std::min<std::size_t>(left, 9000));
    default: return left;
    }
  }

private:
  std::uint64_t s_;
};

} // namespace iwarp_fuzz
