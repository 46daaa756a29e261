// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// libFuzzer target: the uiwarpd client protocol's decoder (uiwarp/daemon_proto.hpp,
// proto::decode), which reads whatever a local process sends on uiwarpd's socket. The input is
// one packet. The harness checks:
//  - decode never crashes or reads past the packet (ASan, UBSan);
//  - a packet that decodes is the message's whole encoding: re-encoding it gives as many octets
//    (every field has one width, nothing is skipped, nothing trails);
//  - the re-encoded message decodes again, to a message of the same type that encodes to the
//    same octets (the same message: encode writes every field).
#include "fuzz_common.hpp"
#include "uiwarp/daemon_proto.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>

using namespace iwarp_fuzz;
namespace proto = uiwarp::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::optional<proto::Message> m = proto::decode(data, size);
  if (verbose())
    std::fprintf(stderr, "  %zu octets: %s %zu\n", size, m ? "type" : "refused",
                 m ? m->index() + 1 : 0);
  if (!m) return 0;
  const proto::Bytes once = proto::encode(*m);
  FUZZ_CHECK(once.size() == size, "a decoded packet re-encodes to as many octets");
  FUZZ_CHECK(once[0] == data[0] && once[1] == data[1], "the message type is kept");
  const std::optional<proto::Message> again = proto::decode(once.data(), once.size());
  FUZZ_CHECK(again.has_value(), "an encoded message decodes");
  FUZZ_CHECK(again->index() == m->index());
  FUZZ_CHECK(proto::encode(*again) == once, "decode(encode(m)) is m");
  return 0;
}
