// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA Startup Phase: the interop matrices of requirements §6 (IM-, MC-, PD-, RT-,
// IR-, RC-, OX- rows) and the startup hostile inputs of §7.1 (HX-), played by two
// MpaStartup endpoints or by one endpoint and a scripted peer that writes exact
// octets (RDMAC proxies always reply Rev 0, M=1, C=1: IOP §5.2.2, §5.3.2).
#include "hex.hpp"
#include "iwarp/crc32c.hpp"
#include "iwarp/mpa_startup.hpp"

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

using namespace iwarp;
using namespace std::chrono_literals;

namespace {

using Bytes = std::vector<std::byte>;

const MpaClock::time_point t0{};

// Octet 16 flag bits and the enhanced-data control bits (RFC 6581 §6, §9).
constexpr std::uint8_t kM = 0x80, kC = 0x40, kR = 0x20, kS = 0x10;
constexpr std::uint16_t kA = 0x8000, kB = 0x4000;  // first word: A | B | IRD
constexpr std::uint16_t kCw = 0x8000, kD = 0x4000; // second word: C | D | ORD

Bytes text(std::string_view s) {
  Bytes b;
  for (char c : s)
    b.push_back(std::byte(static_cast<unsigned char>(c)));
  return b;
}

Bytes pattern(std::size_t n, unsigned seed = 1) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = std::byte((i * 7 + seed) & 0xff);
  return b;
}

Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

using test::hex;

unsigned octet(const Bytes& b, std::size_t i) { return std::to_integer<unsigned>(b.at(i)); }
std::uint16_t word(const Bytes& b, std::size_t i) { return load_be16(b.data() + i); }

// The octets a scripted peer writes: exactly these header fields, then `pd`.
Bytes raw_frame(MpaKind kind, std::uint8_t flags, std::uint8_t rev, const Bytes& pd,
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
Bytes raw_request(std::uint8_t flags, std::uint8_t rev, const Bytes& pd = {}) {
  return raw_frame(MpaKind::Request, flags, rev, pd);
}
Bytes raw_reply(std::uint8_t flags, std::uint8_t rev, const Bytes& pd = {}) {
  return raw_frame(MpaKind::Reply, flags, rev, pd);
}
Bytes enh(std::uint16_t w0, std::uint16_t w1) {
  Bytes b(4);
  store_be16(b.data(), w0);
  store_be16(b.data() + 2, w1);
  return b;
}
// What an RDMAC proxy sends (IOP §5.2.1, §5.3.2): Rev 0, M=1, C=1.
Bytes rdmac_request(const Bytes& pd = {}) { return raw_request(kM | kC, 0, pd); }
Bytes rdmac_reply(const Bytes& pd = {}) { return raw_reply(kM | kC, 0, pd); }

// The RFC 6581 TERM as the first FPDU, built by hand: [marker] | ULPDU_Length 22 |
// untagged DDP (L=1, DV) RDMAP (RV, Terminate) QN 2 MSN 1 MO 0 | L2/E0/code,
// HdrCt 0 | CRC (LSB first; zero when CRC is off).
Bytes expected_term(std::uint8_t code, bool crc, bool marker, std::uint8_t version = 1) {
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

Bytes take(MpaStartup& m) {
  Bytes b(m.output().begin(), m.output().end());
  m.consume_output(b.size());
  return b;
}

MpaPolicy rev1(bool markers = false, bool crc = true) {
  MpaPolicy p;
  p.revision = 1;
  p.enhanced = false;
  p.markers = markers;
  p.crc = crc;
  return p;
}
MpaPolicy p2p(RtrSet rtr = {true, true, true}) {
  MpaPolicy p;
  p.p2p = true;
  p.rtr = rtr;
  return p;
}
// An IETF RNIC of IOP §5.1 (RFC 5044, Rev 1).
MpaPolicy ietf(bool permissive, bool markers, bool crc = true) {
  MpaPolicy p = rev1(markers, crc);
  p.permissive = permissive;
  return p;
}

void accept_all(MpaStartup& r) { r.accept({}); }

// Two of our endpoints: the Request goes to the responder, its ULP decides, the
// Reply goes back.
struct Link {
  MpaStartup i;
  MpaStartup r;
  Bytes request;
  Bytes reply;
};
Link run(const MpaPolicy& ip, const MpaPolicy& rp, Bytes ipd = {},
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
MpaStartup initiator_vs(const MpaPolicy& p, const Bytes& reply, Bytes* request = nullptr) {
  MpaStartup i = MpaStartup::initiator(p, {}, t0);
  Bytes req = take(i);
  if (request) *request = req;
  i.on_bytes(reply);
  return i;
}
// One of our responders against a scripted initiator.
MpaStartup responder_vs(const MpaPolicy& p, const Bytes& request) {
  MpaStartup r = MpaStartup::responder(p, t0);
  r.on_bytes(request);
  return r;
}

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

void require_established(const MpaStartup& m) {
  INFO(m.error().message);
  REQUIRE(m.state() == MpaState::Established);
}

void require_failed(const MpaStartup& m, TermCode code, std::string_view message_part) {
  REQUIRE(m.state() == MpaState::Failed);
  INFO(m.error().message);
  CHECK(m.error().code == code);
  CHECK(contains(m.error().message, message_part));
}

// A Terminate FPDU with `code` is in output() and nothing else (RFC 6581 §9).
void require_term(MpaStartup& m, std::uint8_t code, bool crc = true, bool marker = false) {
  REQUIRE(m.state() == MpaState::Failed);
  CHECK(m.error().terminate_sent);
  CHECK(m.error().code == TermCode{TermLayer::Llp, 0, code});
  CHECK(hex(take(m)) == hex(expected_term(code, crc, marker)));
}

const char* state_name(MpaState s) {
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
std::string describe(const MpaStartup& m, std::size_t consumed) {
  const MpaResult& r = m.result();
  auto opt = [](const auto& o) { return o ? std::to_string(static_cast<int>(*o)) : "-"; };
  std::string s = std::string(state_name(m.state())) + " consumed=" + std::to_string(consumed);
  s += " out=" + hex(m.output());
  if (m.state() == MpaState::Failed)
    s += " err=" + std::to_string(m.error().code.code) + (m.error().terminate_sent ? "T " : " ") +
         m.error().message;
  if (m.state() != MpaState::AwaitRequest && m.state() != MpaState::AwaitReply &&
      m.state() != MpaState::Failed)
    s += " peer=" + hex(m.reply().encode());
  s += " v=" + std::to_string(r.version) + " rev=" + std::to_string(r.peer_rev) +
       " crc=" + std::to_string(r.crc) + " mtx=" + std::to_string(r.markers_tx) +
       " mrx=" + std::to_string(r.markers_rx) + " enh=" + std::to_string(r.enhanced) +
       " p2p=" + std::to_string(r.p2p) + " rtr=" + opt(r.rtr) + " ird=" + std::to_string(r.ird) +
       " ord=" + std::to_string(r.ord) + " pird=" + opt(r.peer_ird) + " pord=" + opt(r.peer_ord) +
       " pd=" + hex(r.peer_private_data);
  return s;
}

// Feeds `in` in the given chunks to a fresh machine; describes the outcome.
std::string feed_chunked(const std::function<MpaStartup()>& make, const Bytes& in,
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
void require_split_invariant(const std::function<MpaStartup()>& make, const Bytes& in) {
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

} // namespace

// ==== 6.1 MPA revision / enhanced-mode combinations ====================================

TEST_CASE("IM-01 Rev1 initiator vs RFC 5044 responder: normal rev1 connection", "[mpa]") {
  Link l = run(rev1(), rev1(), text("hello"));
  require_established(l.i);
  require_established(l.r);
  // "MPA ID Req Frame", M=0 C=1 R=0 S=0, Rev 1, PD_Length 5.
  CHECK(hex(l.request) ==
        hex(text("MPA ID Req Frame") +
            Bytes{std::byte{0x40}, std::byte{1}, std::byte{0}, std::byte{5}} + text("hello")));
  CHECK(hex(l.reply) == hex(text("MPA ID Rep Frame") +
                            Bytes{std::byte{0x40}, std::byte{1}, std::byte{0}, std::byte{0}}));
  CHECK(l.r.request().private_data == text("hello"));
  CHECK(l.r.result().peer_private_data == text("hello"));
  for (const MpaStartup* m : {&l.i, &l.r}) {
    CHECK(m->result().version == kVersionIetf);
    CHECK(m->result().peer_rev == 1);
    CHECK_FALSE(m->result().enhanced);
    CHECK(m->result().crc);
  }
}

TEST_CASE("IM-02 Rev1 initiator vs RFC 6581 responder: unenhanced Rev1 Reply, client-server",
          "[mpa]") {
  Link l = run(rev1(), MpaPolicy{}, {}, [](MpaStartup& r) { r.accept(text("ok")); });
  require_established(l.i);
  require_established(l.r);
  CHECK(octet(l.reply, 16) == kC); // S=0
  CHECK(octet(l.reply, 17) == 1);
  CHECK(word(l.reply, 18) == 2); // the ULP's 2 octets, no enhanced data
  CHECK(l.i.result().peer_private_data == text("ok"));
  CHECK_FALSE(l.i.result().enhanced);
  CHECK_FALSE(l.i.result().rtr); // client-server: the initiator's first FPDU is ULP data
  CHECK_FALSE(l.i.result().peer_ird);
}

TEST_CASE("IM-03 Rev2 S=1 vs rev2: enhanced Reply with IRD/ORD", "[mpa]") {
  MpaPolicy ip, rp;
  ip.ird = 4;
  ip.ord = 3;
  rp.ird = 5;
  rp.ord = 2;
  Link l = run(ip, rp, text("abc"));
  require_established(l.i);
  require_established(l.r);
  CHECK(octet(l.request, 16) == (kC | kS));
  CHECK(octet(l.request, 17) == 2);
  CHECK(word(l.request, 18) == 7); // 4 enhanced + 3
  CHECK(word(l.request, 20) == 4); // A=0 B=0 IRD 4
  CHECK(word(l.request, 22) == 3); // C=0 D=0 ORD 3
  CHECK(octet(l.reply, 16) == (kC | kS));
  CHECK(octet(l.reply, 17) == 2);
  CHECK(word(l.reply, 18) == 4);
  CHECK(word(l.reply, 20) == 5);                    // responder IRD 5 >= initiator ORD 3
  CHECK(word(l.reply, 22) == 2);                    // responder ORD 2 <= initiator IRD 4
  CHECK(l.r.request().private_data == text("abc")); // enhanced data hidden from the ULP
  CHECK(l.i.result().enhanced);
  CHECK(l.r.result().enhanced);
  CHECK(l.i.result().ird == 4);
  CHECK(l.i.result().ord == 3);
  CHECK(l.i.result().peer_ird == 5);
  CHECK(l.i.result().peer_ord == 2);
  CHECK(l.r.result().peer_ird == 4);
  CHECK(l.r.result().peer_ord == 3);
}

TEST_CASE("IM-04 Rev2 S=0 vs rev2: accepted, unenhanced Reply", "[mpa]") {
  MpaPolicy ip;
  ip.enhanced = false;
  Link l = run(ip, MpaPolicy{}, text("x"));
  CHECK(octet(l.request, 16) == kC);
  CHECK(octet(l.request, 17) == 2);
  CHECK(word(l.request, 18) == 1);
  require_established(l.r);
  require_established(l.i);
  CHECK(octet(l.reply, 16) == kC); // S=0
  CHECK(octet(l.reply, 17) == 1);
  CHECK_FALSE(l.r.result().enhanced);
  CHECK(l.r.request().private_data == text("x"));
  CHECK_FALSE(l.i.result().enhanced);
}

TEST_CASE("IM-05 Rev2 S=0 vs rev1-only responder: close + local error, retry Rev1 works", "[mpa]") {
  MpaPolicy ip;
  ip.enhanced = false;
  Link l = run(ip, rev1());
  require_failed(l.r, term::mpa_invalid_frame, "MPA Request Rev 2 is not supported");
  CHECK(l.reply.empty());
  REQUIRE(l.i.state() == MpaState::AwaitReply);
  l.i.on_peer_closed();
  require_failed(l.i, term::mpa_tcp_closed, "peer closed TCP before sending the MPA Reply");
  // RFC 6581 §10: the initiator MAY retry with RFC 5044 MPA.
  Link retry = run(rev1(), rev1());
  require_established(retry.i);
  require_established(retry.r);
}

TEST_CASE("IM-06 Rev2 S=1 vs rev1-only responder: closed as malformed, retry unenhanced", "[mpa]") {
  Link l = run(p2p(), rev1());
  require_failed(l.r, term::mpa_invalid_frame, "Rev 2 is not supported");
  l.i.on_peer_closed();
  require_failed(l.i, term::mpa_tcp_closed, "peer closed TCP");
  // Retry unenhanced: IRD/ORD and P2P are left to the ULP.
  Link retry = run(rev1(), rev1());
  require_established(retry.i);
  CHECK_FALSE(retry.i.result().enhanced);
  CHECK_FALSE(retry.i.result().peer_ird);
  CHECK_FALSE(retry.i.result().rtr);
}

TEST_CASE("IM-07 Rev>=3 at a rev2 endpoint: close + local error, no silent downgrade", "[mpa]") {
  for (std::uint8_t rev : {3, 4, 255}) {
    MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC, rev));
    require_failed(r, term::mpa_invalid_frame,
                   "MPA Request Rev " + std::to_string(rev) + " is not supported");
    CHECK(r.output().empty());
    MpaStartup i = initiator_vs(MpaPolicy{}, raw_reply(kC | kS, rev, enh(1, 1)));
    require_failed(i, term::mpa_invalid_frame,
                   "MPA Reply Rev " + std::to_string(rev) + " is not supported");
    CHECK(i.output().empty());
  }
}

TEST_CASE("IM-08 RDMAC Rev0 Request at a non-permissive IETF responder: Rev1 Reply, then close",
          "[mpa]") {
  MpaStartup r = responder_vs(MpaPolicy{}, rdmac_request());
  require_failed(r, term::mpa_invalid_frame, "Rev 0 (RDMAC peer) but permissive mode is off");
  // IOP §5.2.1: the Reply says Rev 1 (R=1: no Full Operation with this peer).
  CHECK(hex(take(r)) == hex(raw_reply(kC | kR, 1)));
  CHECK_FALSE(r.error().terminate_sent);
}

TEST_CASE("IM-09 RDMAC Rev0 Request at a permissive responder: Rev0 M=1 C=1, V=0", "[mpa]") {
  MpaPolicy rp;
  rp.permissive = true;
  rp.markers = false;
  rp.crc = false;
  MpaStartup r = responder_vs(rp, rdmac_request(text("pd")));
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK(r.request().rev == 0);
  CHECK(r.request().private_data == text("pd"));
  r.accept({});
  require_established(r);
  CHECK(hex(take(r)) == hex(raw_reply(kM | kC, 0)));
  CHECK(r.result().version == kVersionRdmac);
  CHECK(r.result().peer_rev == 0);
  CHECK(r.result().markers_tx);
  CHECK(r.result().markers_rx);
  CHECK(r.result().crc);
}

TEST_CASE("IM-10 Rev1 initiator vs RDMAC proxy Reply: non-permissive closes, permissive V=0",
          "[mpa]") {
  SECTION("non-permissive") {
    MpaStartup i = initiator_vs(rev1(), rdmac_reply());
    require_failed(i, term::mpa_invalid_frame, "MPA Reply Rev 0 (RDMAC peer)");
    CHECK(i.output().empty());
  }
  SECTION("permissive") {
    MpaPolicy ip = ietf(true, false, false);
    MpaStartup i = initiator_vs(ip, rdmac_reply());
    require_established(i);
    CHECK(i.result().version == kVersionRdmac);
    CHECK(i.result().markers_tx);
    CHECK(i.result().markers_rx);
    CHECK(i.result().crc);
  }
}

TEST_CASE("IM-11 enhanced Request answered unenhanced: fallback only when policy allows", "[mpa]") {
  const Bytes reply = GENERATE(raw_reply(kC, 1, text("r")), raw_reply(kC, 2, text("r")));
  SECTION("accept_unenhanced_reply (default): unenhanced fallback") {
    MpaPolicy ip = p2p();
    ip.ird = 3;
    ip.ord = 2;
    MpaStartup i = initiator_vs(ip, reply);
    require_established(i);
    CHECK_FALSE(i.result().enhanced);
    CHECK_FALSE(i.result().p2p);
    CHECK_FALSE(i.result().rtr); // no RTR: left to the ULP
    CHECK_FALSE(i.result().peer_ird);
    CHECK(i.result().ird == 3);
    CHECK(i.result().ord == 2);
    CHECK(i.result().peer_private_data == text("r"));
  }
  SECTION("strict: close") {
    MpaPolicy ip;
    ip.accept_unenhanced_reply = false;
    MpaStartup i = initiator_vs(ip, reply);
    require_failed(i, term::mpa_invalid_frame, "MPA Reply is not enhanced");
    CHECK(i.output().empty());
  }
}

TEST_CASE("IM-12 Rev1 Request with S=1: S treated as reserved, processed unenhanced", "[mpa]") {
  const Bytes pd = enh(kA | 4, kCw | 4); // looks like enhanced data, but Rev 1
  MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC | kS, 1, pd));
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK_FALSE(r.request().enhanced);
  CHECK(r.request().private_data == pd); // all of it is ULP private data
  CHECK_FALSE(r.result().peer_ird);
  r.accept({});
  require_established(r);
  const Bytes reply = take(r);
  CHECK(octet(reply, 16) == kC);
  CHECK(octet(reply, 17) == 1);
  CHECK(word(reply, 18) == 0);
  CHECK_FALSE(r.result().enhanced);
}

// ==== 6.2 Markers x CRC ===================================================================

namespace {
// One MC row: M and C of each side, then who inserts markers and whether CRC is on.
void check_mc(bool im, bool ic, bool rm, bool rc, bool crc_on) {
  Link l = run(rev1(im, ic), rev1(rm, rc));
  require_established(l.i);
  require_established(l.r);
  CHECK(octet(l.request, 16) == ((im ? kM : 0) | (ic ? kC : 0)));
  CHECK(octet(l.reply, 16) == ((rm ? kM : 0) | (rc ? kC : 0)));
  // RFC 5044 §7.1.1 (MPA-032): M in the Request asks for markers in R->I FPDUs.
  CHECK(l.i.result().markers_rx == im);
  CHECK(l.r.result().markers_tx == im);
  CHECK(l.r.result().markers_rx == rm);
  CHECK(l.i.result().markers_tx == rm);
  CHECK(l.i.result().crc == crc_on);
  CHECK(l.r.result().crc == crc_on);
}
} // namespace

TEST_CASE("MC-01 M0 C0 vs M0 C0: no markers, CRC off", "[mpa]") {
  check_mc(false, false, false, false, false);
}
TEST_CASE("MC-02 M1 C0 vs M0 C0: markers R->I only, CRC off", "[mpa]") {
  check_mc(true, false, false, false, false);
}
TEST_CASE("MC-03 M0 C0 vs M1 C0: markers I->R only, CRC off", "[mpa]") {
  check_mc(false, false, true, false, false);
}
TEST_CASE("MC-04 M1 C1 vs M1 C1: markers both ways, CRC on", "[mpa]") {
  check_mc(true, true, true, true, true);
}
TEST_CASE("MC-05 M0 C1 vs M0 C0: CRC on both ways", "[mpa]") {
  // The responder's own preference is C=0, but it sees C=1 and says so in its Reply.
  Link l = run(rev1(false, true), rev1(false, false));
  require_established(l.i);
  CHECK(octet(l.reply, 16) == kC);
  CHECK(l.i.result().crc);
  CHECK(l.r.result().crc);
}
TEST_CASE("MC-06 M0 C0 vs M0 C1: CRC on both ways", "[mpa]") {
  check_mc(false, false, false, true, true);
}
TEST_CASE("MC-07 always-CRC side receives C=0: replies C=1, CRC on both ways", "[mpa]") {
  MpaPolicy always = rev1(false, false);
  always.crc_always = true;
  SECTION("responder") {
    Link l = run(rev1(false, false), always);
    CHECK(octet(l.request, 16) == 0);
    CHECK(octet(l.reply, 16) == kC);
    CHECK(l.i.result().crc);
    CHECK(l.r.result().crc);
  }
  SECTION("initiator") {
    Link l = run(always, rev1(false, false));
    CHECK(octet(l.request, 16) == kC);
    CHECK(l.i.result().crc);
    CHECK(l.r.result().crc);
  }
  SECTION("initiator against a scripted C=0 Reply") {
    MpaStartup i = initiator_vs(always, raw_reply(0, 1));
    require_established(i);
    CHECK(i.result().crc);
  }
}

// ==== 6.3 Private data and rejection ========================================================

TEST_CASE("PD-01 PD_Length 0, 1, 511, 512 and 508 + 4 enhanced: handed over intact", "[mpa]") {
  for (std::size_t n : {0, 1, 511, 512}) {
    INFO("PD " << n);
    const Bytes req_pd = pattern(n, 3), rep_pd = pattern(n, 5);
    Link l = run(rev1(), rev1(), req_pd, [&](MpaStartup& r) { r.accept(rep_pd); });
    require_established(l.i);
    CHECK(word(l.request, 18) == n);
    CHECK(l.r.result().peer_private_data == req_pd);
    CHECK(l.i.result().peer_private_data == rep_pd);
  }
  const Bytes req_pd = pattern(508, 7), rep_pd = pattern(508, 9);
  Link l = run(MpaPolicy{}, MpaPolicy{}, req_pd, [&](MpaStartup& r) { r.accept(rep_pd); });
  require_established(l.i);
  CHECK(word(l.request, 18) == 512);
  CHECK(word(l.reply, 18) == 512);
  CHECK(l.r.request().private_data == req_pd);
  CHECK(l.i.result().peer_private_data == rep_pd);
  // 509 octets of ULP data do not fit next to the enhanced data: local error at once.
  MpaStartup big = MpaStartup::initiator(MpaPolicy{}, pattern(509), t0);
  require_failed(big, term::mpa_local_catastrophic, "private data of 509 octets exceeds 508");
  CHECK(big.output().empty());
}

TEST_CASE("PD-02 PD_Length 513..65535: receiver closes at the header", "[mpa]") {
  for (std::uint16_t len : {513, 600, 1000, 65535}) {
    INFO("PD_Length " << len);
    // Only the header arrives: the error must not wait for the private data.
    MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
    const Bytes header = raw_frame(MpaKind::Request, kC, 1, {}, len);
    CHECK(r.on_bytes(header) == header.size());
    require_failed(r, term::mpa_invalid_frame,
                   "MPA Request PD_Length " + std::to_string(len) + " exceeds 512");
    MpaStartup i = initiator_vs(rev1(), raw_frame(MpaKind::Reply, kC, 1, {}, len));
    require_failed(i, term::mpa_invalid_frame,
                   "MPA Reply PD_Length " + std::to_string(len) + " exceeds 512");
  }
}

TEST_CASE("PD-03 responder ULP rejects with PD: both exit MPA, TCP left open", "[mpa]") {
  Link l =
      run(rev1(), rev1(), text("please"), [](MpaStartup& r) { r.reject(text("no such service")); });
  CHECK(l.r.state() == MpaState::Rejected);
  CHECK(l.i.state() == MpaState::Rejected);
  CHECK(octet(l.reply, 16) == (kC | kR));
  CHECK(octet(l.reply, 17) == 1);
  CHECK(l.i.reply().reject);
  CHECK(l.i.result().peer_private_data == text("no such service"));
  CHECK(l.i.deadline() == MpaClock::time_point::max());
  CHECK(l.r.deadline() == MpaClock::time_point::max());
}

TEST_CASE("PD-04 reject for insufficient initiator IRD: required ORD in the responder ORD",
          "[mpa]") {
  MpaPolicy ip;
  ip.ird = 1;
  ip.ord = 4;
  MpaPolicy rp;
  rp.ird = 6;
  Link l = run(ip, rp, {}, [](MpaStartup& r) {
    REQUIRE(r.result().peer_ird == 1); // the ULP sees the initiator IRD before deciding
    r.reject(text("need ORD 8"), 8);
  });
  CHECK(l.r.state() == MpaState::Rejected);
  REQUIRE(l.i.state() == MpaState::Rejected);
  CHECK(octet(l.reply, 16) == (kC | kR | kS));
  CHECK(octet(l.reply, 17) == 2);
  CHECK(word(l.reply, 20) == 6); // responder IRD
  CHECK(word(l.reply, 22) == 8); // required ORD (C-11: no TERM before Full Operation)
  // EMPA-022: the initiator passes IRD/ORD to its ULP for a Reject too.
  CHECK(l.i.result().peer_ird == 6);
  CHECK(l.i.result().peer_ord == 8);
  CHECK(l.i.result().peer_private_data == text("need ORD 8"));
  CHECK(l.i.output().empty());
}

// ==== 6.4 RFC 6581 P2P / RTR and IRD/ORD =====================================================

TEST_CASE("RT-01 A=0 both: client-server, the responder sends nothing but the Reply", "[mpa]") {
  Link l = run(MpaPolicy{}, MpaPolicy{});
  require_established(l.i);
  CHECK((word(l.request, 20) & 0xc000) == 0);
  CHECK((word(l.request, 22) & 0xc000) == 0);
  CHECK((word(l.reply, 20) & 0xc000) == 0);
  CHECK((word(l.reply, 22) & 0xc000) == 0);
  CHECK(hex(l.reply) == hex(l.r.sent_frame().encode()));
  CHECK_FALSE(l.i.result().p2p);
  CHECK_FALSE(l.i.result().rtr);
  CHECK(l.i.output().empty());
}

TEST_CASE("RT-02 A=1 B / A=1 B: zero-length Send RTR", "[mpa]") {
  Link l = run(p2p({true, false, false}), p2p({true, false, false}));
  require_established(l.i);
  CHECK(word(l.request, 20) == (kA | kB | 16));
  CHECK(word(l.request, 22) == 16);
  CHECK(word(l.reply, 20) == (kA | kB | 16));
  CHECK(word(l.reply, 22) == 16);
  CHECK(l.i.result().p2p);
  CHECK(l.r.result().p2p);
  CHECK(l.i.result().rtr == RtrType::Send);
}

TEST_CASE("RT-03 A=1 C / A=1 C: zero-length RDMA Write RTR", "[mpa]") {
  Link l = run(p2p({false, true, false}), p2p({false, true, false}));
  require_established(l.i);
  CHECK(word(l.request, 20) == (kA | 16));
  CHECK(word(l.request, 22) == (kCw | 16));
  CHECK(word(l.reply, 22) == (kCw | 16));
  CHECK(l.i.result().rtr == RtrType::Write);
}

TEST_CASE("RT-04 A=1 D / A=1 D: zero-length Read RTR, IRD/ORD >= 1", "[mpa]") {
  MpaPolicy ip = p2p({false, false, true});
  ip.ord = 0; // the ULP itself does no Reads
  MpaPolicy rp = p2p({false, false, true});
  rp.ird = 0;
  Link l = run(ip, rp);
  require_established(l.i);
  CHECK(word(l.request, 22) == kD);
  CHECK(word(l.reply, 20) == (kA | 1)); // IRD raised to 1 for the Read RTR
  CHECK(word(l.reply, 22) == (kD | 16));
  CHECK(l.i.result().rtr == RtrType::Read);
  CHECK(l.i.result().ord == 1);
  CHECK(l.r.result().ird == 1);
}

TEST_CASE("RT-05 A=1 B C D: the initiator picks a mutually supported type for every subset",
          "[mpa]") {
  for (int mask = 1; mask < 8; ++mask) {
    const RtrSet rset{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    INFO("responder supports mask " << mask);
    Link l = run(p2p(), p2p(rset));
    require_established(l.i);
    CHECK(l.i.result().peer_rtr == rset);
    REQUIRE(l.i.result().rtr);
    CHECK(rset.has(*l.i.result().rtr));
    // Preference: Write, then Send, then Read.
    const RtrType want = rset.write ? RtrType::Write : rset.send ? RtrType::Send : RtrType::Read;
    CHECK(*l.i.result().rtr == want);
  }
}

TEST_CASE("RT-06 A=1 B / A=1 C: responder lists an unrequested type; initiator cannot: TERM 7",
          "[mpa]") {
  Link l = run(p2p({true, false, false}), p2p({false, true, false}));
  CHECK(word(l.reply, 20) == (kA | 16));
  CHECK(word(l.reply, 22) == (kCw | 16)); // EMPA-034: a type it supports, not requested
  CHECK(l.r.state() == MpaState::Established);
  CHECK(contains(l.i.error().message, "no matching RTR"));
  require_term(l.i, 7);
}

TEST_CASE("RT-07 A=1 B / A=1 none: responder violated the MUST, TERM 7", "[mpa]") {
  MpaStartup i = initiator_vs(p2p({true, false, false}), raw_reply(kC | kS, 2, enh(kA | 4, 4)));
  CHECK(contains(i.error().message, "the Reply listed none"));
  require_term(i, 7);
}

TEST_CASE("RT-08 A=1 / A=0: the Reply does not echo A, TERM 7", "[mpa]") {
  MpaStartup i = initiator_vs(p2p(), raw_reply(kC | kS, 2, enh(4, 4)));
  CHECK(contains(i.error().message, "A=0 does not echo the Request's A=1"));
  require_term(i, 7);
}

TEST_CASE("RT-09 A=0 with B=1 (garbage flags): ignored, Reply A=0 B/C/D=0", "[mpa]") {
  MpaStartup r = responder_vs(p2p(), raw_request(kC | kS, 2, enh(kB | 2, kCw | kD | 2)));
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK_FALSE(r.request().enhanced->p2p);
  CHECK(r.result().peer_rtr == RtrSet{});
  r.accept({});
  const Bytes reply = take(r);
  CHECK((word(reply, 20) & 0xc000) == 0);
  CHECK((word(reply, 22) & 0xc000) == 0);
  CHECK_FALSE(r.result().p2p);
}

TEST_CASE("RT-10 A=1 at a rev2 responder without P2P: still lists one RTR type", "[mpa]") {
  MpaPolicy rp;
  rp.p2p = false;
  rp.rtr = {false, false, false};
  Link l = run(p2p(), rp);
  require_established(l.r);
  CHECK((word(l.reply, 20) & kA) != 0);
  CHECK(l.r.sent_frame().enhanced->rtr_write); // C-12: at least one
  require_established(l.i);
  CHECK(l.i.result().rtr == RtrType::Write);
}

TEST_CASE("IR-01 I(IRD 4, ORD 4) vs R(IRD 8, ORD 2): IRD >= 2, ORD <= 8, peers see values",
          "[mpa]") {
  MpaPolicy ip, rp;
  ip.ird = ip.ord = 4;
  rp.ird = 8;
  rp.ord = 2;
  Link l = run(ip, rp);
  require_established(l.i);
  CHECK(word(l.reply, 20) == 8);
  CHECK(word(l.reply, 22) == 2);
  CHECK(l.i.result().ird == 4);
  CHECK(l.i.result().ord == 4);
  CHECK(l.r.result().ird == 8);
  CHECK(l.r.result().ord == 2);
  CHECK(l.i.result().peer_ird == 8);
  CHECK(l.i.result().peer_ord == 2);
  CHECK(l.r.result().peer_ird == 4);
  CHECK(l.r.result().peer_ord == 4);
}

TEST_CASE("IR-02 I(IRD 1, ORD 16) vs R that can only do IRD 8: ORD clamped to 8", "[mpa]") {
  MpaPolicy ip, rp;
  ip.ird = 1;
  ip.ord = 16;
  rp.ird = 4;
  rp.max_ird = 8;
  rp.ord = 4;
  Link l = run(ip, rp);
  require_established(l.i);
  CHECK(word(l.reply, 20) == 8); // raised from 4 as far as it can
  CHECK(word(l.reply, 22) == 1); // at most the initiator IRD
  CHECK(l.r.result().ird == 8);
  CHECK(l.r.result().ord == 1);
  CHECK(l.i.result().ord == 8);
  CHECK(l.i.result().ird == 1);
}

TEST_CASE("IR-03 I(IRD 2, ORD 0) with D only: responder raises IRD to 1", "[mpa]") {
  MpaPolicy ip = p2p({false, false, true});
  ip.ird = 2;
  ip.ord = 0;
  MpaPolicy rp;
  rp.ird = 0;
  Link l = run(ip, rp);
  require_established(l.r);
  CHECK(word(l.request, 20) == (kA | 2));
  CHECK(word(l.request, 22) == kD);
  CHECK(word(l.reply, 20) == (kA | 1));
  CHECK(word(l.reply, 22) == (kD | 2));
  CHECK(l.r.result().ird == 1);
  require_established(l.i);
  CHECK(l.i.result().rtr == RtrType::Read);
  CHECK(l.i.result().ord == 1);
  // With other types possible, IRD stays 0 and Read is not offered.
  MpaPolicy all = p2p();
  all.ord = 0;
  Link other = run(all, rp);
  CHECK(word(other.reply, 20) == (kA | kB | 0));
  CHECK(word(other.reply, 22) == (kCw | 16));
}

TEST_CASE("IR-04 initiator ORD/IRD 0x3FFF: responder keeps local values, echoes 0x3FFF", "[mpa]") {
  MpaPolicy rp;
  rp.ird = 6;
  rp.ord = 7;
  SECTION("ORD 0x3FFF") {
    MpaPolicy ip;
    ip.ord = 0x3fff;
    ip.ird = 3;
    Link l = run(ip, rp);
    CHECK(word(l.reply, 20) == 0x3fff);
    CHECK(word(l.reply, 22) == 3);
    CHECK(l.r.result().ird == 6);
    CHECK(l.r.result().ord == 3);
  }
  SECTION("IRD 0x3FFF") {
    MpaPolicy ip;
    ip.ird = 0x3fff;
    ip.ord = 2;
    Link l = run(ip, rp);
    CHECK(word(l.reply, 20) == 6);
    CHECK(word(l.reply, 22) == 0x3fff);
    CHECK(l.r.result().ird == 6);
    CHECK(l.r.result().ord == 7);
  }
  SECTION("both") {
    MpaPolicy ip;
    ip.ird = ip.ord = 0x3fff;
    Link l = run(ip, rp);
    require_established(l.i);
    CHECK(word(l.reply, 20) == 0x3fff);
    CHECK(word(l.reply, 22) == 0x3fff);
    CHECK(l.r.result().ird == 6);
    CHECK(l.r.result().ord == 7);
    CHECK(l.i.result().ird == 0x3fff);
    CHECK(l.i.result().ord == 0x3fff);
  }
}

TEST_CASE("IR-05 responder IRD/ORD 0x3FFF: initiator keeps its local ORD/IRD", "[mpa]") {
  MpaPolicy ip;
  ip.ird = 3;
  ip.ord = 9;
  MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(0x3fff, 0x3fff)));
  require_established(i);
  CHECK(i.result().ird == 3);
  CHECK(i.result().ord == 9);
  CHECK(i.result().peer_ird == 0x3fff);
  CHECK(i.result().peer_ord == 0x3fff);
}

TEST_CASE("IR-06 responder ORD above the initiator's maximum IRD: TERM 6", "[mpa]") {
  MpaPolicy ip;
  ip.ird = 4;
  ip.max_ird = 8;
  MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(4, 9)));
  CHECK(contains(i.error().message, "responder ORD 9 exceeds the local maximum IRD 8"));
  CHECK(i.result().peer_ord == 9);
  require_term(i, 6);
}

TEST_CASE("IR-07 responder ORD above the advertised IRD: IRD raised (RFC 6581 §9.1 MUST)",
          "[mpa]") {
  // Decision: §9.1 says the initiator MUST set IRD >= responder ORD; we do while
  // max_ird allows (beyond it: IR-06). The ULP sees the peer's value too.
  MpaPolicy ip;
  ip.ird = 4;
  MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(16, 8)));
  require_established(i);
  CHECK(i.result().ird == 8);
  CHECK(i.result().peer_ord == 8);
}

// ==== 6.5 RDMAC vs IETF (IOP Figs. 2-4) ========================================================

namespace {
// Both endpoints are ours and IETF: V=1, markers per M bits (IOP §5.4).
void check_v1(bool i_permissive, bool im, bool r_permissive, bool rm, bool crc) {
  INFO("I M=" << im << " R M=" << rm << " crc=" << crc);
  Link l = run(ietf(i_permissive, im, crc), ietf(r_permissive, rm, crc));
  require_established(l.i);
  require_established(l.r);
  CHECK(octet(l.request, 17) == 1);
  CHECK(octet(l.reply, 17) == 1);
  for (const MpaStartup* m : {&l.i, &l.r}) {
    CHECK(m->result().version == kVersionIetf);
    CHECK(m->result().crc == crc);
  }
  CHECK(l.i.result().markers_rx == im);
  CHECK(l.r.result().markers_rx == rm);
  CHECK(l.i.result().markers_tx == rm);
  CHECK(l.r.result().markers_tx == im);
}

// Our initiator against an RDMAC proxy Reply (IOP §5.3.2): V=0, markers and CRC on.
void check_vs_rdmac_responder(bool permissive, bool im) {
  Bytes request;
  MpaStartup i = initiator_vs(ietf(permissive, im, false), rdmac_reply(), &request);
  CHECK(octet(request, 16) == (im ? kM : 0));
  CHECK(octet(request, 17) == 1);
  if (!permissive) {
    require_failed(i, term::mpa_invalid_frame, "MPA Reply Rev 0 (RDMAC peer)");
    return;
  }
  require_established(i);
  CHECK(i.result().version == kVersionRdmac);
  CHECK(i.result().markers_rx); // on even though the Request said M=0
  CHECK(i.result().markers_tx);
  CHECK(i.result().crc);
}

// An RDMAC proxy's Request at our responder (IOP §5.2.1, §5.3.1).
void check_vs_rdmac_initiator(bool permissive, bool rm) {
  MpaStartup r = responder_vs(ietf(permissive, rm, false), rdmac_request());
  if (!permissive) {
    require_failed(r, term::mpa_invalid_frame, "permissive mode is off");
    CHECK(hex(take(r)) == hex(raw_reply((rm ? kM : 0) | kC | kR, 1)));
    return;
  }
  REQUIRE(r.state() == MpaState::RequestReceived);
  r.accept({});
  require_established(r);
  CHECK(hex(take(r)) == hex(raw_reply(kM | kC, 0))); // never M=0 to RDMAC
  CHECK(r.result().version == kVersionRdmac);
  CHECK(r.result().markers_rx);
  CHECK(r.result().markers_tx);
  CHECK(r.result().crc);
}
} // namespace

// RC-01 (RDMAC vs RDMAC) involves no IETF endpoint: nothing of ours to play.

TEST_CASE("RC-02 RDMAC initiator vs IETF non-permissive responder: Rev1 Reply, close", "[mpa]") {
  check_vs_rdmac_initiator(false, false);
  check_vs_rdmac_initiator(false, true);
}
TEST_CASE("RC-03 IETF non-permissive initiator (M=0) vs RDMAC: close on Rev0", "[mpa]") {
  check_vs_rdmac_responder(false, false);
}
TEST_CASE("RC-04 IETF non-permissive initiator (M=1) vs RDMAC: close on Rev0", "[mpa]") {
  check_vs_rdmac_responder(false, true);
}
TEST_CASE("RC-05 IETF non-permissive M=0 vs non-permissive M=0: V=1, M=0/0", "[mpa]") {
  check_v1(false, false, false, false, GENERATE(false, true));
}
TEST_CASE("RC-06 IETF non-permissive M=0 vs non-permissive M=1: V=1, M=0/1", "[mpa]") {
  check_v1(false, false, false, true, GENERATE(false, true));
}
TEST_CASE("RC-07 IETF non-permissive M=1 vs non-permissive M=0: V=1, M=1/0", "[mpa]") {
  check_v1(false, true, false, false, GENERATE(false, true));
}
TEST_CASE("RC-08 IETF non-permissive M=1 vs non-permissive M=1: V=1, M=1/1", "[mpa]") {
  check_v1(false, true, false, true, GENERATE(false, true));
}
TEST_CASE("RC-09 RDMAC initiator vs IETF permissive (would-be M=0): replies Rev0 M=1 C=1",
          "[mpa]") {
  check_vs_rdmac_initiator(true, false);
}
TEST_CASE("RC-10 RDMAC initiator vs IETF permissive (M=1): V=0, M=1/1", "[mpa]") {
  check_vs_rdmac_initiator(true, true);
}
TEST_CASE("RC-11 permissive initiator (M=0) vs RDMAC responder: V=0, markers both ways", "[mpa]") {
  check_vs_rdmac_responder(true, false);
}
TEST_CASE("RC-12 permissive initiator (M=1) vs RDMAC responder: V=0, M=1/1", "[mpa]") {
  check_vs_rdmac_responder(true, true);
}
TEST_CASE("RC-13 IETF permissive M=0 vs permissive M=0: V=1, M=0/0", "[mpa]") {
  check_v1(true, false, true, false, GENERATE(false, true));
}
TEST_CASE("RC-14 IETF permissive M=0 vs permissive M=1: V=1, M=0/1", "[mpa]") {
  check_v1(true, false, true, true, GENERATE(false, true));
}
TEST_CASE("RC-15 IETF permissive M=1 vs permissive M=0: V=1, M=1/0", "[mpa]") {
  check_v1(true, true, true, false, GENERATE(false, true));
}
TEST_CASE("RC-16 IETF permissive M=1 vs permissive M=1: V=1, M=1/1", "[mpa]") {
  check_v1(true, true, true, true, GENERATE(false, true));
}
TEST_CASE("RC-17 IETF non-permissive (M=x) vs IETF permissive (M=y): V=1, M=x/y", "[mpa]") {
  const bool crc = GENERATE(false, true);
  for (bool x : {false, true})
    for (bool y : {false, true})
      check_v1(false, x, true, y, crc);
}
TEST_CASE("RC-18 IETF permissive (M=x) vs IETF non-permissive (M=y): V=1, M=x/y", "[mpa]") {
  const bool crc = GENERATE(false, true);
  for (bool x : {false, true})
    for (bool y : {false, true})
      check_v1(true, x, false, y, crc);
}
TEST_CASE("RC-19 every V=0 connection: CRC on both ways, version 0 for DDP and RDMAP", "[mpa]") {
  // Even an RDMAC frame with C=0 and a local policy of no CRC end with CRC on.
  MpaPolicy p = ietf(true, false, false);
  MpaStartup i = initiator_vs(p, raw_reply(kM, 0));
  require_established(i);
  CHECK(i.result().version == kVersionRdmac);
  CHECK(i.result().crc);
  MpaStartup r = responder_vs(p, raw_request(kM, 0));
  r.accept({});
  require_established(r);
  CHECK(octet(take(r), 16) == (kM | kC));
  CHECK(r.result().version == kVersionRdmac);
  CHECK(r.result().crc);
  // A Terminate on a V=0 connection carries DV=RV=0 (never mixed).
  i.local_error("QP creation failed");
  REQUIRE(i.error().terminate_sent);
  CHECK(hex(take(i)) == hex(expected_term(5, true, true, kVersionRdmac)));
}
// RC-20 (peer switches DV/RV after negotiation) is checked by the data path.

// ==== 6.6 Other cross-implementation scenarios =================================================

TEST_CASE("OX-02 Initiator/Initiator: both detect a Request where a Reply is expected", "[mpa]") {
  MpaStartup a = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  MpaStartup b = MpaStartup::initiator(rev1(), text("b"), t0);
  const Bytes from_a = take(a), from_b = take(b);
  a.on_bytes(from_b);
  b.on_bytes(from_a);
  for (const MpaStartup* m : {&a, &b})
    require_failed(*m, term::mpa_invalid_frame, "Initiator/Initiator");
}

TEST_CASE("OX-03 Responder/Responder: both time out", "[mpa]") {
  MpaPolicy p;
  p.timeout = 5s;
  MpaStartup a = MpaStartup::responder(p, t0), b = MpaStartup::responder(p, t0 + 1s);
  CHECK(a.deadline() == t0 + 5s);
  a.on_timer(t0 + 4999ms);
  b.on_timer(t0 + 5s);
  CHECK(a.state() == MpaState::AwaitRequest);
  CHECK(b.state() == MpaState::AwaitRequest);
  a.on_timer(t0 + 5s);
  b.on_timer(t0 + 6s);
  for (const MpaStartup* m : {&a, &b})
    require_failed(*m, term::mpa_tcp_closed, "timed out after 5000 ms waiting for the MPA Request");
}

TEST_CASE("OX-10 siw's large-FPDU Res bit: used only when both set it, ignored otherwise",
          "[mpa]") {
  MpaPolicy big;
  big.large_fpdu = true;
  Link both = run(big, big);
  require_established(both.i);
  CHECK(octet(both.request, 16) == (kC | kS | kMpaFlagLargeFpdu));
  CHECK(octet(both.reply, 16) == (kC | kS | kMpaFlagLargeFpdu));
  CHECK(both.i.result().large_fpdu);
  CHECK(both.r.result().large_fpdu);
  Link one = run(big, MpaPolicy{});
  require_established(one.i);
  CHECK(octet(one.reply, 16) == (kC | kS)); // not echoed
  CHECK_FALSE(one.i.result().large_fpdu);
  CHECK_FALSE(one.r.result().large_fpdu);
  MpaStartup i = initiator_vs(rev1(), raw_reply(kC | kMpaFlagLargeFpdu, 1));
  require_established(i);
  CHECK_FALSE(i.result().large_fpdu);
}

// ==== 7.1 hostile input in the startup phase ================================================

TEST_CASE("HX-001 junk instead of a Request key fails at the first wrong octet", "[mpa]") {
  struct Junk {
    Bytes in;
    std::size_t bad; // first octet that cannot be a key
  };
  Bytes tls = {std::byte{0x16}, std::byte{0x03}, std::byte{0x01}, std::byte{0x02}, std::byte{0x00}};
  Bytes random = pattern(64, 0x2b);
  for (const Junk& j :
       {Junk{text("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 0}, Junk{tls, 0}, Junk{random, 0},
        Junk{text("MPA ID Rex Frame"), 9}, Junk{text("MPA ID Req Frame\n"), 99}}) {
    MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
    const std::size_t n = r.on_bytes(j.in);
    if (j.bad == 99) { // a good key: only the header is incomplete
      CHECK(r.state() == MpaState::AwaitRequest);
      continue;
    }
    CHECK(n == j.bad + 1);
    require_failed(r, term::mpa_invalid_frame,
                   "invalid MPA Request key: octet " + std::to_string(j.bad));
  }
  MpaStartup r = responder_vs(MpaPolicy{}, text("GET / HTTP/1.0"));
  CHECK(r.error().message ==
        "invalid MPA Request key: octet 0 is 0x47 ('G'), expected 'M' of \"MPA ID Req Frame\" "
        "(RFC 5044 §7.1.1)");
}

TEST_CASE("HX-002 Reply key mismatch: initiator closes with code 4", "[mpa]") {
  Bytes bad = raw_reply(kC, 1);
  bad[0] = std::byte{'m'};
  MpaStartup i = initiator_vs(rev1(), bad);
  require_failed(i, term::mpa_invalid_frame, "invalid MPA Reply key: octet 0");
  MpaStartup j = initiator_vs(rev1(), text("MPA ID Rep Fram!"));
  require_failed(j, term::mpa_invalid_frame, "octet 15 is 0x21 ('!')");
}

TEST_CASE("HX-003 Request key while awaiting the Reply: Initiator/Initiator detected", "[mpa]") {
  MpaStartup i = initiator_vs(MpaPolicy{}, raw_request(kC, 1));
  require_failed(i, term::mpa_invalid_frame,
                 "received an MPA Request while awaiting the MPA Reply");
  // A responder that gets a Reply key fails the same way.
  MpaStartup r = responder_vs(MpaPolicy{}, raw_reply(kC, 1));
  require_failed(r, term::mpa_invalid_frame, "received an MPA Reply while awaiting");
}

TEST_CASE("HX-004 no Request ever arrives: timeout", "[mpa]") {
  MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
  CHECK(r.deadline() == t0 + 60s); // MPA-069 default
  r.on_timer(t0 + 59s);
  CHECK(r.state() == MpaState::AwaitRequest);
  r.on_timer(t0 + 60s);
  require_failed(r, term::mpa_tcp_closed, "timed out after 60000 ms waiting for the MPA Request");
  // Same for an initiator whose Reply never comes, and a responder ULP that never decides.
  MpaStartup i = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  i.on_timer(t0 + 61s);
  require_failed(i, term::mpa_tcp_closed, "waiting for the MPA Reply");
  MpaStartup q = responder_vs(MpaPolicy{}, raw_request(kC, 1));
  q.on_timer(t0 + 60s);
  require_failed(q, term::mpa_tcp_closed, "waiting for the local accept or reject");
}

TEST_CASE("HX-005 frame trickled byte by byte: the deadline covers the whole exchange", "[mpa]") {
  MpaPolicy p;
  p.timeout = 10s;
  MpaStartup r = MpaStartup::responder(p, t0);
  const Bytes req = raw_request(kC, 1, pattern(100));
  for (std::size_t k = 0; k < 19; ++k) {
    r.on_bytes(ConstBytes(req).subspan(k, 1));
    r.on_timer(t0 + std::chrono::milliseconds(500 * k));
  }
  CHECK(r.state() == MpaState::AwaitRequest);
  r.on_timer(t0 + 10s);
  require_failed(r, term::mpa_tcp_closed, "(19 octets received)");
}

TEST_CASE("HX-006 PD_Length > 512: close + local error", "[mpa]") {
  MpaStartup i = initiator_vs(MpaPolicy{}, raw_frame(MpaKind::Reply, kC | kS, 2, {}, 600));
  CHECK(i.error().message == "MPA Reply PD_Length 600 exceeds 512 (RFC 5044 §7.1.1)");
  require_failed(i, term::mpa_invalid_frame, "PD_Length 600");
}

TEST_CASE("HX-007 peer closes before the PD is complete: malformed frame", "[mpa]") {
  MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
  const Bytes req = raw_request(kC, 1, pattern(100));
  r.on_bytes(ConstBytes(req).first(60));
  r.on_peer_closed();
  require_failed(r, term::mpa_invalid_frame, "MPA Request PD incomplete");
  CHECK(contains(r.error().message, "40 of 100"));
  MpaStartup h = MpaStartup::responder(MpaPolicy{}, t0);
  h.on_bytes(ConstBytes(req).first(12));
  h.on_peer_closed();
  require_failed(h, term::mpa_invalid_frame, "header incomplete");
  MpaStartup i = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  const Bytes rep = raw_reply(kC | kS, 2, enh(1, 1) + pattern(8));
  i.on_bytes(ConstBytes(rep).first(rep.size() - 1));
  i.on_peer_closed();
  require_failed(i, term::mpa_invalid_frame, "MPA Reply PD incomplete");
}

TEST_CASE("HX-008 PD longer than the local PD buffer: closed, buffer never exceeded", "[mpa]") {
  MpaPolicy p;
  p.max_private_data = 16;
  MpaStartup r = MpaStartup::responder(p, t0);
  const Bytes header = raw_frame(MpaKind::Request, kC, 1, {}, 17);
  CHECK(r.on_bytes(header) == header.size());
  require_failed(r, term::mpa_invalid_frame,
                 "MPA Request private data of 17 octets exceeds the local buffer of 16 octets");
  // The enhanced data does not count against the ULP's buffer.
  MpaStartup ok = responder_vs(p, raw_request(kC | kS, 2, enh(1, 1) + pattern(16)));
  CHECK(ok.state() == MpaState::RequestReceived);
  MpaStartup i = initiator_vs(p, raw_reply(kC | kS, 2, enh(1, 1) + pattern(17)));
  require_failed(i, term::mpa_invalid_frame, "MPA Reply private data of 17 octets");
}

TEST_CASE("HX-009 unsupported Rev: Rev0 non-permissive, Rev2 at rev-1-only, Rev>=3 at rev2",
          "[mpa]") {
  struct Case {
    MpaPolicy policy;
    std::uint8_t rev;
    std::string_view message;
  };
  for (const Case& c : {Case{MpaPolicy{}, 0, "Rev 0 (RDMAC peer)"},
                        Case{rev1(), 2, "Rev 2 is not supported (local maximum Rev 1"},
                        Case{MpaPolicy{}, 3, "Rev 3 is not supported (local maximum Rev 2"}}) {
    require_failed(responder_vs(c.policy, raw_request(kM | kC, c.rev)), term::mpa_invalid_frame,
                   c.message);
    MpaPolicy ip = c.policy;
    ip.enhanced = false;
    require_failed(initiator_vs(ip, raw_reply(kM | kC, c.rev)), term::mpa_invalid_frame, c.message);
  }
}

TEST_CASE("HX-010 R=1 in a Request and Res bits set: not checked", "[mpa]") {
  MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC | kR | 0x07, 1, text("p")));
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK_FALSE(r.request().reject);
  r.accept({});
  require_established(r);
  MpaStartup i = initiator_vs(rev1(), raw_reply(kC | 0x0f, 1));
  require_established(i);
}

TEST_CASE("HX-011 Reply with R=1: exit MPA, PD to the ULP, TCP left open", "[mpa]") {
  MpaStartup i = initiator_vs(p2p(), raw_reply(kC | kR | kS, 2, enh(kA | 2, 3) + text("busy")));
  CHECK(i.state() == MpaState::Rejected);
  CHECK(i.result().peer_private_data == text("busy"));
  CHECK(i.result().peer_ird == 2);
  CHECK(i.result().peer_ord == 3);
  CHECK(i.output().empty()); // no TERM: never in Full Operation
}

TEST_CASE("HX-012 S=1 but PD_Length < 4: improperly formatted", "[mpa]") {
  for (std::uint16_t len : {0, 2, 3}) {
    MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC | kS, 2, pattern(len)));
    require_failed(r, term::mpa_invalid_frame,
                   "S=1 but PD_Length " + std::to_string(len) + " cannot hold");
    MpaStartup i = initiator_vs(MpaPolicy{}, raw_reply(kC | kS, 2, pattern(len)));
    require_failed(i, term::mpa_invalid_frame, "MPA Reply has S=1 but PD_Length");
  }
}

TEST_CASE("HX-013 A=0 with B/C/D set: B/C/D ignored", "[mpa]") {
  MpaStartup i = initiator_vs(MpaPolicy{}, raw_reply(kC | kS, 2, enh(kB | 4, kCw | kD | 4)));
  require_established(i);
  CHECK(i.result().peer_rtr == RtrSet{});
  CHECK_FALSE(i.result().rtr);
  CHECK_FALSE(i.result().p2p);
}

TEST_CASE("HX-014 Reply A differs from Request A, or lists no usable RTR: TERM 7", "[mpa]") {
  SECTION("Request A=0, Reply A=1") {
    MpaStartup i = initiator_vs(MpaPolicy{}, raw_reply(kC | kS, 2, enh(kA | kB | 4, 4)));
    require_term(i, 7);
  }
  SECTION("no usable RTR, with markers toward the responder") {
    MpaPolicy ip = p2p({false, true, false});
    ip.crc = false;
    MpaStartup i = initiator_vs(ip, raw_reply(kM | kS, 2, enh(kA | kB | 4, kD | 4)));
    CHECK(i.result().markers_tx);
    CHECK_FALSE(i.result().crc);
    require_term(i, 7, false, true);
  }
  SECTION("Read listed but responder IRD 0") {
    MpaStartup i = initiator_vs(p2p({false, false, true}), raw_reply(kC | kS, 2, enh(kA, kD)));
    CHECK(contains(i.error().message, "Read needs responder IRD >= 1"));
    require_term(i, 7);
  }
}

TEST_CASE("HX-015 responder ORD exceeds the initiator's possible IRD: TERM 6", "[mpa]") {
  MpaPolicy ip;
  ip.max_ird = 16;
  MpaStartup i = initiator_vs(ip, raw_reply(kM | kC | kS, 2, enh(16, 17)));
  CHECK(i.result().markers_tx);
  require_term(i, 6, true, true);
}

TEST_CASE("HX-016 absurd IRD/ORD such as 0x3FFE: clamped to local limits or rejected", "[mpa]") {
  MpaPolicy ip;
  ip.ird = 4;
  ip.ord = 5;
  SECTION("initiator: responder IRD 0x3FFE clamps nothing above the local ORD") {
    MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(0x3ffe, 2)));
    require_established(i);
    CHECK(i.result().ord == 5);
    CHECK(i.result().ird == 4);
  }
  SECTION("initiator: responder ORD 0x3FFE is beyond max_ird") {
    MpaStartup i = initiator_vs(ip, raw_reply(kC | kS, 2, enh(4, 0x3ffe)));
    require_term(i, 6);
  }
  SECTION("responder: initiator ORD/IRD 0x3FFE") {
    MpaPolicy rp;
    rp.ird = 2;
    rp.ord = 3;
    rp.max_ird = 64;
    MpaStartup r = responder_vs(rp, raw_request(kC | kS, 2, enh(0x3ffe, 0x3ffe)));
    r.accept({});
    const Bytes reply = take(r);
    CHECK(word(reply, 20) == 64); // raised only as far as max_ird
    CHECK(word(reply, 22) == 3);
  }
}

TEST_CASE("HX-017 FPDUs right after the Request/Reply are left to the data path", "[mpa]") {
  const Bytes fpdu = pattern(40, 0x55);
  const Bytes req = raw_request(kC | kS, 2, enh(2, 2) + text("pd"));
  MpaStartup r = MpaStartup::responder(MpaPolicy{}, t0);
  CHECK(r.on_bytes(req + fpdu) == req.size());
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK(r.on_bytes(fpdu) == 0); // still not the startup machine's
  const Bytes rep = raw_reply(kC | kS, 2, enh(2, 2));
  MpaStartup i = MpaStartup::initiator(MpaPolicy{}, {}, t0);
  CHECK(i.on_bytes(rep + fpdu) == rep.size());
  require_established(i);
}

TEST_CASE("HX-018 our responder sends nothing before the initiator's first FPDU", "[mpa]") {
  MpaStartup i = MpaStartup::initiator(p2p(), {}, t0);
  MpaStartup r = MpaStartup::responder(p2p(), t0);
  r.on_bytes(take(i));
  CHECK(r.output().empty()); // nothing before accept()
  r.accept(text("hi"));
  require_established(r);
  // Only the Reply: no marker, no FPDU (RFC 5044 §7.1.2 r4, RFC 6581 §5).
  CHECK(hex(r.output()) == hex(r.sent_frame().encode()));
  CHECK(r.output().size() == kMpaFrameHeaderLen + 4 + 2);
}

TEST_CASE("HX-019 the chosen RTR is always one both ends listed", "[mpa]") {
  // Decision (data path): the responder accepts any valid first FPDU as the RTR;
  // the startup machine guarantees our initiator only picks a negotiated type.
  for (int im = 1; im < 8; ++im) {
    for (int rm = 0; rm < 8; ++rm) {
      const RtrSet is{(im & 1) != 0, (im & 2) != 0, (im & 4) != 0};
      const RtrSet rs{(rm & 1) != 0, (rm & 2) != 0, (rm & 4) != 0};
      INFO("initiator " << im << " responder " << rm);
      Link l = run(p2p(is), p2p(rs));
      require_established(l.r);
      const MpaEnhanced& listed = *l.r.sent_frame().enhanced;
      const RtrSet lset{listed.rtr_send, listed.rtr_write, listed.rtr_read};
      CHECK(lset.any());
      if (l.i.state() == MpaState::Established) {
        REQUIRE(l.i.result().rtr);
        CHECK(is.has(*l.i.result().rtr));
        CHECK(lset.has(*l.i.result().rtr));
      } else {
        CHECK(l.i.error().code == term::mpa_no_matching_rtr);
        const bool mutual =
            (is.send && lset.send) || (is.write && lset.write) || (is.read && lset.read);
        CHECK_FALSE(mutual);
      }
    }
  }
}

TEST_CASE("HX-020 local failure during enhanced setup: TERM 5 once in Full Operation", "[mpa]") {
  SECTION("initiator after the Reply") {
    Link l = run(p2p(), p2p());
    require_established(l.i);
    l.i.local_error("cannot create the QP");
    CHECK(l.i.error().message == "cannot create the QP");
    require_term(l.i, 5);
  }
  SECTION("responder after accept: the TERM follows the Reply") {
    MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kM | kC | kS, 2, enh(1, 1)));
    r.accept({});
    r.local_error("out of memory");
    REQUIRE(r.state() == MpaState::Failed);
    CHECK(r.error().terminate_sent);
    CHECK(hex(take(r)) == hex(r.sent_frame().encode() + expected_term(5, true, true)));
  }
  SECTION("before Full Operation: no TERM") {
    MpaStartup i = MpaStartup::initiator(MpaPolicy{}, {}, t0);
    take(i);
    i.local_error("route lost");
    require_failed(i, term::mpa_local_catastrophic, "route lost");
    CHECK_FALSE(i.error().terminate_sent);
    CHECK(i.output().empty());
  }
}

// ==== byte stream handling ===================================================================

TEST_CASE("MPA startup: byte-at-a-time and every split point give the same result", "[mpa]") {
  const Bytes tail = pattern(9, 0x77); // the first FPDU octets, never consumed
  auto responder = [](MpaPolicy p = {}) { return [p] { return MpaStartup::responder(p, t0); }; };
  auto initiator = [](MpaPolicy p = {}) {
    return [p] {
      MpaStartup i = MpaStartup::initiator(p, {}, t0);
      i.consume_output(i.output().size());
      return i;
    };
  };
  SECTION("enhanced Request with PD") {
    require_split_invariant(responder(),
                            raw_request(kC | kS, 2, enh(kA | kB | 3, 4) + pattern(30)) + tail);
  }
  SECTION("Reply accepted") {
    require_split_invariant(initiator(p2p()),
                            raw_reply(kC | kS, 2, enh(kA | 8, kCw | 2) + text("yes")) + tail);
  }
  SECTION("Reply leading to TERM 7") {
    require_split_invariant(initiator(p2p()), raw_reply(kC | kS, 2, enh(4, 4)) + tail);
  }
  SECTION("Reply rejected") {
    require_split_invariant(initiator(), raw_reply(kC | kR | kS, 2, enh(1, 9)) + text("no"));
  }
  SECTION("HTTP junk") { require_split_invariant(responder(), text("GET / HTTP/1.1\r\n\r\n")); }
  SECTION("almost a key") {
    require_split_invariant(responder(), text("MPA ID Req Frame") + tail);
    require_split_invariant(responder(), text("MPA ID Req Fram?") + tail);
  }
  SECTION("PD_Length 600") {
    require_split_invariant(responder(), raw_frame(MpaKind::Request, kC, 1, pattern(30), 600));
  }
  SECTION("RDMAC Request at non-permissive and permissive responders") {
    require_split_invariant(responder(), rdmac_request(pattern(5)) + tail);
    MpaPolicy p;
    p.permissive = true;
    require_split_invariant(responder(p), rdmac_request(pattern(5)) + tail);
  }
  SECTION("Initiator/Initiator") {
    require_split_invariant(initiator(), raw_request(kC, 1) + tail);
  }
}

TEST_CASE("MPA startup: output is written piecewise and bytes after the end are ignored", "[mpa]") {
  MpaStartup i = MpaStartup::initiator(rev1(), text("abc"), t0);
  const std::size_t total = i.output().size();
  REQUIRE(total == kMpaFrameHeaderLen + 3);
  i.consume_output(3);
  CHECK(i.output().size() == total - 3);
  CHECK(std::to_integer<char>(i.output()[0]) == ' '); // "MPA ID Req Frame" from octet 3
  i.consume_output(total - 3);
  CHECK(i.output().empty());
  i.on_bytes(raw_reply(kC, 1));
  require_established(i);
  CHECK(i.on_bytes(pattern(4)) == 0);
  i.on_peer_closed(); // after the exchange: the data path's business
  i.on_timer(t0 + 1000s);
  require_established(i);
  CHECK(i.deadline() == MpaClock::time_point::max());
}

TEST_CASE("MPA startup: invalid local use fails clearly", "[mpa]") {
  MpaPolicy p;
  p.revision = 3;
  require_failed(MpaStartup::responder(p, t0), term::mpa_local_catastrophic,
                 "local policy MPA revision 3 is not supported");
  MpaStartup r = responder_vs(MpaPolicy{}, raw_request(kC | kS, 2, enh(1, 1)));
  r.accept(pattern(509));
  require_failed(r, term::mpa_local_catastrophic,
                 "MPA Reply private data of 509 octets exceeds 508");
  MpaPolicy plain;
  plain.enhanced = false;
  MpaStartup e = responder_vs(plain, raw_request(kC | kS, 2, enh(1, 1)));
  require_failed(e, term::mpa_invalid_frame, "enhanced connection setup is disabled locally");
  MpaStartup s = initiator_vs(rev1(), raw_reply(kC | kS, 1, enh(1, 1))); // Rev1: S reserved
  require_established(s);
  MpaStartup t = initiator_vs(
      [] {
        MpaPolicy q;
        q.enhanced = false;
        return q;
      }(),
      raw_reply(kC | kS, 2, enh(1, 1)));
  require_failed(t, term::mpa_invalid_frame, "MPA Reply is enhanced (S=1) but the Request was not");
}
