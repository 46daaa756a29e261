// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// iwarp-bench: micro-benchmarks of the libiwarp data path, in bytes/second.
//
//   Crc32c/isal, Crc32c/portable   CRC32c over 4 KiB and 64 KiB
//   FpduTx/...                     framing one ULPDU into a gather list (MPA
//                                  header, PAD, CRC, markers; the payload is
//                                  referenced, not copied), 4 KiB and the
//                                  largest ULPDU (64768 octets, RFC 5044 §3)
//   FpduRx/...                     deframing a pre-built stream of such FPDUs
//                                  with feed() into preallocated memory
//   QpSend/...                     a 64 KiB Send from one Qp to another:
//                                  tx_gather -> memcpy into a pipe buffer ->
//                                  rx_feed, at MULPDU 64768 and 1448
//
// The targets: CRC32c >= 10 GB/s on one core, and framing (CRC on)
// within 10% of the CRC alone: compare FpduTx/crc/... with Crc32c/isal/...
// of the same size.
#include "iwarp/crc32c.hpp"
#include "iwarp/framing.hpp"
#include "iwarp/memory.hpp"
#include "iwarp/qp.hpp"
#include "iwarp/wire.hpp"

#include <benchmark/benchmark.h>
#include <cstring>
#include <memory>
#include <vector>

using namespace iwarp;

namespace {

constexpr std::size_t k4K = 4096;
constexpr std::size_t k64K = 65536;

std::vector<std::byte> filled(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = std::byte(static_cast<unsigned>((i * 131 + 7) & 0xff));
  return v;
}

// ---- CRC32c ------------------------------------------------------------------------

void BM_Crc32cIsal(benchmark::State& state) {
  const auto buf = filled(static_cast<std::size_t>(state.range(0)));
  std::uint32_t crc = kCrc32cInit;
  for (auto _ : state) {
    crc = crc32c_update(crc, buf);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  state.SetLabel(crc32c_implementation());
}
BENCHMARK(BM_Crc32cIsal)->Name("Crc32c/isal")->Arg(k4K)->Arg(k64K);

void BM_Crc32cPortable(benchmark::State& state) {
  const auto buf = filled(static_cast<std::size_t>(state.range(0)));
  std::uint32_t crc = kCrc32cInit;
  for (auto _ : state) {
    crc = crc32c_update_portable(crc, buf);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc32cPortable)->Name("Crc32c/portable")->Arg(k4K)->Arg(k64K);

// ---- FpduTx: framing ----------------------------------------------------------------

// ULPDU sizes: 4 KiB, and the largest ULPDU MPA allows (64 KiB does not fit).
constexpr std::size_t kUlpduSmall = k4K;
constexpr std::size_t kUlpduLarge = kMaxUlpdu;

// A tagged DDP header (RDMA Write), as the QP puts in front of the payload.
std::vector<std::byte> write_header() {
  DdpHeader h;
  h.tagged = true;
  h.opcode = static_cast<std::uint8_t>(Opcode::RdmaWrite);
  h.stag = 0x12345600;
  h.to = 0x7f0000001000;
  std::vector<std::byte> b(h.size());
  h.encode(b.data());
  return b;
}

// range(0): ULPDU octets; crc and markers are the template flags.
template <bool kCrc, bool kMarkers> void BM_FpduTx(benchmark::State& state) {
  const std::size_t ulpdu = static_cast<std::size_t>(state.range(0));
  const auto hdr = write_header();
  const auto payload = filled(ulpdu - hdr.size());
  const ConstBytes pieces[1] = {payload};
  FpduTx tx(kCrc, kMarkers);
  auto frame = std::make_unique<TxFrame>();
  std::size_t wire = 0;
  for (auto _ : state) {
    tx.frame(hdr, pieces, *frame);
    wire += frame->size();
    benchmark::DoNotOptimize(frame->piece_count());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * ulpdu));
  state.counters["pieces"] = static_cast<double>(frame->piece_count());
  state.counters["wire/ulpdu"] =
      static_cast<double>(wire) / static_cast<double>(state.iterations() * ulpdu);
}
BENCHMARK(BM_FpduTx<true, false>)->Name("FpduTx/crc")->Arg(kUlpduSmall)->Arg(kUlpduLarge);
BENCHMARK(BM_FpduTx<true, true>)->Name("FpduTx/crc+markers")->Arg(kUlpduSmall)->Arg(kUlpduLarge);
// Framing alone, to separate its cost from the CRC's.
BENCHMARK(BM_FpduTx<false, false>)->Name("FpduTx/nocrc")->Arg(kUlpduSmall)->Arg(kUlpduLarge);
BENCHMARK(BM_FpduTx<false, true>)->Name("FpduTx/nocrc+markers")->Arg(kUlpduSmall)->Arg(kUlpduLarge);

// ---- FpduRx: deframing --------------------------------------------------------------

// Places every ULPDU at the start of one preallocated buffer.
class BufferSink final : public UlpduSink {
public:
  explicit BufferSink(std::size_t cap) : buf_(cap) {}
  std::optional<TermCode> ulpdu_begin(std::size_t) override { return std::nullopt; }
  MutBytes ulpdu_dest(std::size_t offset, std::size_t max) override {
    return MutBytes(buf_).subspan(offset, max);
  }
  std::optional<TermCode> ulpdu_landed(std::size_t, std::size_t) override { return std::nullopt; }
  void ulpdu_end(std::optional<TermCode> error) override {
    if (error) ++errors;
    ++fpdus;
  }
  std::size_t fpdus = 0, errors = 0;

private:
  std::vector<std::byte> buf_;
};

template <bool kCrc, bool kMarkers> void BM_FpduRx(benchmark::State& state) {
  const std::size_t ulpdu = static_cast<std::size_t>(state.range(0));
  const auto hdr = write_header();
  const auto payload = filled(ulpdu - hdr.size());
  const ConstBytes pieces[1] = {payload};
  // About 1 MiB of stream, so the loop measures the steady state.
  const std::size_t count = std::max<std::size_t>(16, (1u << 20) / ulpdu);
  FpduTx tx(kCrc, kMarkers);
  std::vector<std::byte> stream;
  for (std::size_t i = 0; i < count; ++i) {
    auto f = tx.frame_bytes(hdr, pieces);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  BufferSink sink(ulpdu);
  for (auto _ : state) {
    FpduRx rx(kCrc, kMarkers); // each pass starts at stream offset 0 again
    rx.set_sink(&sink);
    rx.feed(stream);
    benchmark::DoNotOptimize(rx.error());
  }
  if (sink.errors) state.SkipWithError("deframing reported an error");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * count * ulpdu));
  state.counters["fpdus"] = static_cast<double>(count);
}
BENCHMARK(BM_FpduRx<true, false>)->Name("FpduRx/crc")->Arg(kUlpduSmall)->Arg(kUlpduLarge);
BENCHMARK(BM_FpduRx<true, true>)->Name("FpduRx/crc+markers")->Arg(kUlpduSmall)->Arg(kUlpduLarge);

// ---- Qp to Qp: a 64 KiB Send ----------------------------------------------------------

void BM_QpSend(benchmark::State& state) {
  const std::size_t mulpdu = static_cast<std::size_t>(state.range(0));
  const bool markers = state.range(1) != 0;
  MemoryTable mem_a(1), mem_b(2);
  auto src = filled(k64K);
  std::vector<std::byte> dst(k64K);
  const std::uint32_t src_key = mem_a.add(1, src.data(), 0x1000, src.size(), 0);
  const std::uint32_t dst_key = mem_b.add(1, dst.data(), 0x2000, dst.size(), access::kLocalWrite);

  QpConfig ca;
  ca.mulpdu = mulpdu;
  ca.conn.markers_tx = markers;
  ca.conn.initiator = true;
  QpConfig cb = ca;
  cb.conn.markers_tx = false;
  cb.conn.markers_rx = markers;
  cb.conn.initiator = false;
  Qp a(ca, mem_a);
  Qp b(cb, mem_b);

  std::vector<std::byte> pipe(256 * 1024);
  std::vector<ConstBytes> iov;
  std::uint64_t wr = 0;
  std::size_t fpdus = 0;
  for (auto _ : state) {
    ++wr;
    b.post_recv({wr, {{0x2000, static_cast<std::uint32_t>(dst.size()), dst_key}}});
    SendWr s;
    s.wr_id = wr;
    s.sgl = {{0x1000, static_cast<std::uint32_t>(src.size()), src_key}};
    a.post_send(std::move(s));
    bool received = false;
    while (!received) {
      iov.clear();
      a.tx_gather(iov, 64);
      std::size_t n = 0;
      for (ConstBytes p : iov) {
        if (n + p.size() > pipe.size()) break;
        std::memcpy(pipe.data() + n, p.data(), p.size());
        n += p.size();
      }
      a.tx_advance(n);
      b.rx_feed(ConstBytes(pipe).first(n));
      while (auto c = b.poll()) {
        if (c->status != WcStatus::Success) {
          state.SkipWithError("receive failed");
          return;
        }
        received = true;
      }
      if (n == 0 && !received) {
        state.SkipWithError("no progress");
        return;
      }
    }
    while (auto c = a.poll()) {
      if (c->status != WcStatus::Success) {
        state.SkipWithError("send failed");
        return;
      }
    }
  }
  fpdus = (k64K + (mulpdu - kUntaggedHdrLen) - 1) / (mulpdu - kUntaggedHdrLen);
  if (a.error() || b.error()) state.SkipWithError("QP error");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * k64K));
  state.counters["fpdus/send"] = static_cast<double>(fpdus);
}
BENCHMARK(BM_QpSend)
    ->Name("QpSend/64KiB")
    ->ArgNames({"mulpdu", "markers"})
    ->Args({static_cast<std::int64_t>(kMaxUlpdu), 0})
    ->Args({1448, 0})
    ->Args({1448, 1});

} // namespace

BENCHMARK_MAIN();
