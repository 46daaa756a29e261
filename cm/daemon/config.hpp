// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's policy: /etc/uiwarp/uiwarpd.conf ("key = value" lines, '#' comments),
// overridden by command-line flags of the same names.
#pragma once

#include "iwarp/mpa_startup.hpp"

#include <CLI/CLI.hpp>
#include <istream>
#include <string>

namespace uiwarp::daemon {

inline constexpr const char* kDefaultConfigFile = "/etc/uiwarp/uiwarpd.conf";
// ib::kDefaultPort (daemon.cpp checks that they agree; this header stays free of the
// contracts library, for the config fuzz target).
inline constexpr std::uint16_t kDefaultIbConnectPort = 4791;

struct Config {
  // Defaults: MPA rev 2, CRC on, markers off, and peer-to-peer mode (RFC 6581 RTR):
  // without it the responder may not send before the initiator's first message
  // (RFC 5044 §7.1.2 r4), which deadlocks applications whose passive side sends
  // first (ib_write_lat). Hardware RNICs default to it too (cxgb4's peer2peer=1).
  //
  // The private data a peer may send is what the program can receive: the RDMA CM event's
  // private_data_len is 8 bits (struct rdma_ucm_conn_param), so a Request or Reply with more than
  // 255 octets of ULP private data is improperly formatted for this endpoint (RFC 5044 §7.1.2 r9,
  // HX-008) and the connection closes, instead of reaching the program as a truncated (or, from 256
  // octets on, empty) private data. RNICs draw the same line (cxgb4: MPA_MAX_PRIVATE_DATA 256).
  //
  // siw's large-FPDU flag is on: FPDUs may then exceed the TCP MSS when the peer sets it too
  // (uiwarp and siw's gso build do; others ignore a bit RFC 5044 reserves), so a 64 KiB Write
  // over a 1500-octet link is one FPDU with one header and CRC instead of 45.
  //
  // RFC 7306 (Immediate Data, Atomics) is offered with uiwarp's private flag: only a peer that
  // echoes it (another uiwarp) gets those operations; toward others they fail at post time.
  //
  // The same-host path is asked for with another private flag: a uiwarp responder answers with
  // an offer naming its process, and two uiwarp processes that share a kernel, a user and a pid
  // namespace then copy RDMA Write and Read data with process_vm_writev/readv; others ignore it.
  Config() {
    mpa.p2p = true;
    mpa.large_fpdu = true;
    mpa.rfc7306 = true;
    mpa.same_host = true;
    mpa.max_private_data = kMaxProgramPrivateData;
  }
  static constexpr std::size_t kMaxProgramPrivateData = 255;
  iwarp::MpaPolicy mpa;
  // Initiator: how long to hold the connection after the MPA Reply before handing it to the
  // application, i.e. before the first FPDU (the RTR) goes out. 0 = at once. A work-around for
  // peers with Linux siw's passive-side start-up race (siw_accept() sends the Reply before it
  // hooks its receive path; FPDUs arriving in between are not read until more data comes, and
  // the connection stalls). RFC 5044 §7.1.2 and RFC 6581 §9.2 allow sending at once.
  std::chrono::milliseconds first_fpdu_delay{0};
  // A per-user uiwarpd (not the socket-activated one) exits after this long without a client
  // (a program using the RDMA CM, `uiwarp status`) and without a TCP socket in its care, so a CI
  // job or a container leaves nothing running and a network namespace is not kept alive by it.
  // Programs' shims start it again when they need it. 0: never.
  std::chrono::seconds idle_exit{60};
  // IB-style connect (uiwarp/ib_connect.hpp): the TCP port the initiator connects to and a
  // waiting responder's uiwarpd listens on (only while a QP waits). Both hosts must agree.
  // 0: off (a QP moved to RTR with an address vector fails).
  std::uint16_t ib_connect_port = kDefaultIbConnectPort;
};

// Adds --mpa-revision, --crc, --markers, --p2p, --rtr, --ird, --ord, --permissive,
// --startup-timeout-ms, --large-fpdu, --rfc7306, --same-host, --first-fpdu-delay-ms,
// --idle-exit-s, --ib-connect-port.
void add_policy_options(CLI::App& app, Config& cfg);
// Per-device (uiwarp link add ... KEY VALUE) and per-connection (UIWARP_MPA_POLICY) overrides
// of the MPA policy: "key=value ..." with the keys in kMpaOverrideKeys, as in uiwarpd.conf,
// plus crc=required|optional (on|off) and rtr=none (p2p off). Applied over `mpa`; false with
// *err naming the key or value.
inline constexpr const char* kMpaOverrideKeys[] = {
    "mpa-revision",       "crc", "markers", "p2p",          "rtr",      "permissive",
    "startup-timeout-ms", "ird", "ord",     "recv-wait-ms", "same-host"};
bool apply_mpa_overrides(const std::string& text, iwarp::MpaPolicy& mpa, std::string* err);

// Reads `file` (a missing default file is fine) for the keys not given as flags.
bool load_config(const std::string& file, Config& cfg, const CLI::App& app, std::string* err);
// The same from a stream (`name` for messages, "name:line: ..."): `key = value` lines, '#'
// comments, blank lines. Input from whoever can write the file: every malformed line is an
// error that names it, never a crash (tests/fuzz/fuzz_config.cpp).
bool parse_config(std::istream& in, const std::string& name, Config& cfg, const CLI::App& app,
                  std::string* err);

} // namespace uiwarp::daemon
