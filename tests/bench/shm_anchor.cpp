// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarp-shm-anchor: what two processes of this machine move through memory they both map,
// with nothing else in the way: the ceiling of a Send between them, as scripts/bench shows it
// beside uiwarp's stream ring (providers/uiwarp/samehost/stream_ring.hpp). The measure of
// shared-memory transports such as Open MPI's vader or libfabric's shm: a single-producer,
// single-consumer ring of SIZE-octet slots, each message copied in by the sender and out by the
// receiver (two copies, as a Send into a posted buffer needs without a copy by the kernel), and
// a ping-pong of one such message each way, both sides spinning.
//
//   uiwarp-shm-anchor bw SIZE [SECONDS]   prints "MB/s (2^20) Mmsg/s"
//   uiwarp-shm-anchor lat SIZE [SECONDS]  prints "typical-us average-us" (one way: half a round
//                                         trip, as perftest's latency tests report it)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kSlots = 64;

// Shared by both processes; each counter on a cache line of its own.
struct Shared {
  alignas(64) std::atomic<std::uint64_t> tail{0}; // messages written (bw) / pings sent (lat)
  alignas(64) std::atomic<std::uint64_t> head{0}; // messages read (bw) / pongs sent (lat)
  alignas(64) std::atomic<bool> stop{false};
};

std::byte* slot(std::byte* data, std::size_t size, std::uint64_t n) {
  return data + (n % kSlots) * size;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The receiver (child): copies every message out until told to stop.
void bw_reader(Shared* s, std::byte* data, std::size_t size) {
  std::vector<std::byte> out(size);
  std::uint64_t head = 0;
  while (!s->stop.load(std::memory_order_relaxed)) {
    if (s->tail.load(std::memory_order_acquire) == head) continue;
    std::memcpy(out.data(), slot(data, size, head), size);
    s->head.store(++head, std::memory_order_release);
  }
}

void lat_responder(Shared* s, std::byte* data, std::size_t size) {
  std::vector<std::byte> out(size);
  std::uint64_t n = 0;
  while (!s->stop.load(std::memory_order_relaxed)) {
    if (s->tail.load(std::memory_order_acquire) == n) continue;
    std::memcpy(out.data(), data, size);        // the ping, out
    std::memcpy(data + size, out.data(), size); // the pong, in
    s->head.store(++n, std::memory_order_release);
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: uiwarp-shm-anchor bw|lat SIZE [SECONDS]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::size_t size = std::strtoull(argv[2], nullptr, 0);
  const double seconds = argc > 3 ? std::atof(argv[3]) : 3.0;
  if ((mode != "bw" && mode != "lat") || size == 0 || size > (std::size_t{1} << 22) ||
      seconds <= 0) {
    std::fprintf(stderr, "uiwarp-shm-anchor: bw or lat, SIZE 1 .. 4 MiB, SECONDS > 0\n");
    return 2;
  }
  const std::size_t data_bytes = mode == "bw" ? kSlots * size : 2 * size;
  void* m = ::mmap(nullptr, sizeof(Shared) + data_bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 1;
  auto* s = new (m) Shared;
  auto* data = static_cast<std::byte*>(m) + sizeof(Shared);
  std::memset(data, 0x5a, data_bytes); // faulted in before either side is timed
  const pid_t child = ::fork();
  if (child < 0) return 1;
  if (child == 0) {
    if (mode == "bw")
      bw_reader(s, data, size);
    else
      lat_responder(s, data, size);
    _exit(0);
  }
  std::vector<std::byte> src(size, std::byte{0x3c});
  if (mode == "bw") {
    std::uint64_t tail = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    for (;;) {
      if (tail - s->head.load(std::memory_order_acquire) == kSlots) continue; // full
      std::memcpy(slot(data, size, tail), src.data(), size);
      s->tail.store(++tail, std::memory_order_release);
      if (tail % 1024 == 0 && (elapsed = seconds_since(start)) >= seconds) break;
    }
    while (s->head.load(std::memory_order_acquire) != tail) {
    }
    elapsed = seconds_since(start);
    std::printf("%.1f %.3f\n", static_cast<double>(tail) * size / elapsed / (1 << 20),
                static_cast<double>(tail) / elapsed / 1e6);
  } else {
    std::vector<double> one_way;
    std::vector<std::byte> in(size);
    const auto start = Clock::now();
    for (std::uint64_t n = 1; seconds_since(start) < seconds || n < 1000; ++n) {
      const auto t0 = Clock::now();
      std::memcpy(data, src.data(), size); // the ping, in
      s->tail.store(n, std::memory_order_release);
      while (s->head.load(std::memory_order_acquire) != n) {
      }
      std::memcpy(in.data(), data + size, size); // the pong, out
      one_way.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
    }
    std::sort(one_way.begin(), one_way.end());
    double sum = 0;
    for (const double x : one_way)
      sum += x;
    std::printf("%.3f %.3f\n", one_way[one_way.size() / 2], sum / one_way.size());
  }
  s->stop.store(true, std::memory_order_relaxed);
  int status = 0;
  ::waitpid(child, &status, 0);
  return 0;
}
