// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Test harness for the MPA startup machine (iwarp::MpaStartup), shared by the test_mpa_*.cpp
// files: exact Request/Reply frames as a scripted peer writes them (RFC 5044 §7.1, RFC 6581
// §6/§9, RDMAC proxies: Rev 0, M=1, C=1), the Terminate an endpoint must append, policies,
// two endpoints run against each other (Link, run), and the checks on an endpoint's outcome,
// including that every split of the input octets gives the same result.
#pragma once

#include "catch_compat.hpp"
#include "hex.hpp"
#include "iwarp/crc32c.hpp"
#include "iwarp/mpa_startup.hpp"

#include <functional>
#include <string>
#include <vector>

namespace mpat {

using namespace iwarp;
using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;

inline const MpaClock::time_point t0{};

// Octet 16 flag bits and the enhanced-data control bits (RFC 6581 §6, §9).
constexpr std::uint8_t kM = 0x80, kC = 0x40, kR = 0x20, kS = 0x10;
constexpr std::uint16_t kA = 0x8000, kB = 0x4000;  // first word: A | B | IRD
constexpr std::uint16_t kCw = 0x8000, kD = 0x4000; // second word: C | D | ORD

inline Bytes text(std::string_view s) {
  Bytes b;
  for (char c : s)
    b.push_back(std::byte(static_cast<unsigned char>(c)));
  return b;
}

inline Bytes pattern(std::size_t n, unsigned seed = 1) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = std::byte((i * 7 + seed) & 0xff);
  return b;
}

inline Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

using test::hex;

inline unsigned octet(const Bytes& b, std::size_t i) { return std::to_integer<unsigned>(b.at(i)); }
inline std::uint16_t word(const Bytes& b, std::size_t i) { return load_be16(b.data() + i); }

// The octets a scripted peer writes: exactly these header fields, then `pd`.
inline Bytes raw_frame(MpaKind kind, std::uint8_t flags, std::uint8_t rev, const Bytes& pd,
                       std::optional<std::uint16_t> pd_length = {}) {
  MpaFrameHeader h;
  h.kind = kind;
  h.flags = flags;
  h.rev = rev;
  h.pd_length = pd_length.value_or(static_cast<std::uint16_t>(pd.size()));
  Bytes b(kMpaFrameHeaderLen);
  h.encode(b.data());
  return b + pd;
}
inline Bytes raw_request(std::uint8_t flags, std::uint8_t rev, const Bytes& pd = {}) {
  return raw_frame(MpaKind::Request, flags, rev, pd);
}
inline Bytes raw_reply(std::uint8_t flags, std::uint8_t rev, const Bytes& pd = {}) {
  return raw_frame(MpaKind::Reply, flags, rev, pd);
}
inline Bytes enh(std::uint16_t w0, std::uint16_t w1) {
  Bytes b(4);
  store_be16(b.data(), w0);
  store_be16(b.data() + 2, w1);
  return b;
}
// What an RDMAC proxy sends (IOP §5.2.1, §5.3.2): Rev 0, M=1, C=1.
inline Bytes rdmac_request(const Bytes& pd = {}) { return raw_request(kM | kC, 0, pd); }
inline Bytes rdmac_reply(const Bytes& pd = {}) { return raw_reply(kM | kC, 0, pd); }

// The RFC 6581 TERM as the first FPDU, built by hand: [marker] | ULPDU_Length 22 |
// untagged DDP (L=1, DV) RDMAP (RV, Terminate) QN 2 MSN 1 MO 0 | L2/E0/code,
// HdrCt 0 | CRC (LSB first; zero when CRC is off).
inline Bytes expected_term(std::uint8_t code, bool crc, bool marker, std::uint8_t version = 1) {
  Bytes b;
  if (marker) b = Bytes(4); // RFC 5044 §7.1.2 r7: the first marker, FPDUPTR 0
  Bytes fpdu = {std::byte{0x00}, std::byte{0x16}, std::byte(0x40 | version),
                std::byte((version << 6) | 0x07)};
  fpdu = fpdu + Bytes(4) + enh(0, 2) + enh(0, 1) + Bytes(4);
  fpdu = fpdu + Bytes{std::byte{0x20}, std::byte(code), std::byte{0}, std::byte{0}};
  b = b + fpdu;
  Bytes c(4);
  if (crc) store_crc_le(c.data(), crc32c(b));
  return b + c;
}

inline Bytes take(MpaStartup& m) {
  Bytes b(m.output().begin(), m.output().end());
  m.consume_output(b.size());
  return b;
}

inline MpaPolicy rev1(bool markers = false, bool crc = true) {
  MpaPolicy p;
  p.revision = 1;
  p.enhanced = false;
  p.markers = markers;
  p.crc = crc;
  return p;
}
inline MpaPolicy p2p(RtrSet rtr = {true, true, true}) {
  MpaPolicy p;
  p.p2p = true;
  p.rtr = rtr;
  return p;
}
// An IETF RNIC of IOP §5.1 (RFC 5044, Rev 1).
inline MpaPolicy ietf(bool permissive, bool markers, bool crc = true) {
  MpaPolicy p = rev1(markers, crc);
  p.permissive = permissive;
  return p;
}

inline void accept_all(MpaStartup& r) { r.accept({}); }

// Two of our endpoints: the Request goes to the responder, its ULP decides, the
// Reply goes back.
struct Link {
  MpaStartup i;
  MpaStartup r;
  Bytes request;
  Bytes reply;
};
inline Link run(const MpaPolicy& ip, const MpaPolicy& rp, Bytes ipd = {},
                const std::function<void(MpaStartup&)>& decide = accept_all) {
  Link l{MpaStartup::initiator(ip, std::move(ipd), t0), MpaStartup::responder(rp, t0), {}, {}};
  l.request = take(l.i);
  l.r.on_bytes(l.request);
  if (l.r.state() == MpaState::RequestReceived) decide(l.r);
  l.reply = take(l.r);
  if (!l.reply.empty()) l.i.on_bytes(l.reply);
  return l;
}

// One of our initiators against a scripted responder.
inline MpaStartup initiator_vs(const MpaPolicy& p, const Bytes& reply, Bytes* request = nullptr) {
  MpaStartup i = MpaStartup::initiator(p, {}, t0);
  Bytes req = take(i);
  if (request) *request = req;
  i.on_bytes(reply);
  return i;
}
// One of our responders against a scripted initiator.
inline MpaStartup responder_vs(const MpaPolicy& p, const Bytes& request) {
  MpaStartup r = MpaStartup::responder(p, t0);
  r.on_bytes(request);
  return r;
}

inline bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

inline void require_established(const MpaStartup& m) {
  INFO(m.error().message);
  REQUIRE(m.state() == MpaState::Established);
}

inline void require_failed(const MpaStartup& m, TermCode code, std::string_view message_part) {
  REQUIRE(m.state() == MpaState::Failed);
  INFO(m.error().message);
  CHECK(m.error().code == code);
  CHECK(contains(m.error().message, message_part));
}

// A Terminate FPDU with `code` is in output() and nothing else (RFC 6581 §9).
inline void require_term(MpaStartup& m, std::uint8_t code, bool crc = true, bool marker = false) {
  REQUIRE(m.state() == MpaState::Failed);
  CHECK(m.error().terminate_sent);
  CHECK(m.error().code == TermCode{TermLayer::Llp, 0, code});
  CHECK(hex(take(m)) == hex(expected_term(code, crc, marker)));
}

inline const char* state_name(MpaState s) {
  switch (s) {
  case MpaState::AwaitRequest: return "AwaitRequest";
  case MpaState::RequestReceived: return "RequestReceived";
  case MpaState::AwaitReply: return "AwaitReply";
  case MpaState::Established: return "Established";
  case MpaState::Rejected: return "Rejected";
  case MpaState::Failed: return "Failed";
  }
  return "?";
}

// Everything observable, for comparing differently chunked runs.
inline std::string describe(const MpaStartup& m, std::size_t consumed) {
  const MpaResult& r = m.result();
  std::string s = std::string(state_name(m.state())) + " consumed=" + std::to_string(consumed);
  s += " out=" + hex(m.output());
  if (m.state() == MpaState::Failed)
    s += " err=" + std::to_string(m.error().code.code) + (m.error().terminate_sent ? "T " : " ") +
         m.error().message;
  if (m.state() != MpaState::AwaitRequest && m.state() != MpaState::AwaitReply &&
      m.state() != MpaState::Failed)
    s += " peer=" + hex(m.reply().encode());
  const ConnParams& c = r.conn;
  s += " v=" + std::to_string(c.version) + " rev=" + std::to_string(r.peer_rev) +
       " crc=" + std::to_string(c.crc) + " mtx=" + std::to_string(c.markers_tx) +
       " mrx=" + std::to_string(c.markers_rx) + " enh=" + std::to_string(r.enhanced) +
       " p2p=" + std::to_string(c.p2p) + " rtr=" + std::to_string(static_cast<int>(c.rtr)) +
       " ird=" + std::to_string(c.ird) + " ord=" + std::to_string(c.ord) +
       " pird=" + std::to_string(c.peer_ird) + " pord=" + std::to_string(c.peer_ord) +
       " pd=" + hex(r.peer_private_data);
  return s;
}

// Feeds `in` in the given chunks to a fresh machine; describes the outcome.
inline std::string feed_chunked(const std::function<MpaStartup()>& make, const Bytes& in,
                                const std::vector<std::size_t>& cuts) {
  MpaStartup m = make();
  std::size_t consumed = 0, from = 0;
  for (std::size_t i = 0; i <= cuts.size(); ++i) {
    std::size_t to = i < cuts.size() ? cuts[i] : in.size();
    ConstBytes chunk(in.data() + from, to - from);
    // A caller stops feeding once the machine leaves the startup exchange.
    if (m.state() == MpaState::AwaitRequest || m.state() == MpaState::AwaitReply) {
      std::size_t n = m.on_bytes(chunk);
      consumed += n;
      if (n < chunk.size()) break;
    }
    from = to;
  }
  return describe(m, consumed);
}

// Splitting the input at every offset, and byte-at-a-time, changes nothing.
inline void require_split_invariant(const std::function<MpaStartup()>& make, const Bytes& in) {
  const std::string whole = feed_chunked(make, in, {});
  for (std::size_t k = 1; k < in.size(); ++k) {
    INFO("split at " << k);
    REQUIRE(feed_chunked(make, in, {k}) == whole);
  }
  std::vector<std::size_t> every;
  for (std::size_t k = 1; k < in.size(); ++k)
    every.push_back(k);
  REQUIRE(feed_chunked(make, in, every) == whole);
}

} // namespace mpat
