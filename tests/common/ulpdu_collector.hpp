// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The tests' one ULPDU-collecting sink: an iwarp::UlpduSink that lands each ULPDU of an FPDU
// stream in a buffer of its own and looks at it whole when its FPDU ends. The unit tests
// (qp_harness.hpp: the segments a Qp wrote) keep every ULPDU; the fuzz targets derive from it
// and check each ULPDU in on_ulpdu() instead (what a Qp or the MPA machine transmits).
// Header-only, on libiwarp's public API alone.
#pragma once

#include "iwarp/framing.hpp"

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace iwarp::test {

class UlpduCollector : public UlpduSink {
public:
  using Bytes = std::vector<std::byte>;

  std::vector<Bytes> ulpdus;     // the ULPDUs on_ulpdu() kept, in stream order
  std::optional<TermCode> error; // the first error an FPDU ended with (CRC, marker)
  std::size_t fpdus = 0;         // FPDUs ended; in on_ulpdu(), the index of this one

  std::optional<TermCode> ulpdu_begin(std::size_t len) override {
    cur_.assign(len, std::byte{0});
    return std::nullopt;
  }
  MutBytes ulpdu_dest(std::size_t offset, std::size_t max) override {
    return MutBytes(cur_).subspan(offset, max);
  }
  std::optional<TermCode> ulpdu_landed(std::size_t, std::size_t) override { return std::nullopt; }
  void ulpdu_end(std::optional<TermCode> e) final {
    if (e && !error) error = e;
    if (on_ulpdu(cur_, e)) ulpdus.push_back(std::move(cur_));
    ++fpdus;
  }

protected:
  // One whole ULPDU, when its FPDU ends (`e`: its CRC or marker error, if any). Returns whether
  // to keep it in `ulpdus`: by default, when it ended without an error.
  virtual bool on_ulpdu(const Bytes& ulpdu, std::optional<TermCode> e) {
    (void)ulpdu;
    return !e;
  }

private:
  Bytes cur_;
};

} // namespace iwarp::test
