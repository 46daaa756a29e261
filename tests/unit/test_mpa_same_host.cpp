// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// MPA startup, uiwarp's same-host extension: the Res bit kMpaFlagSameHost (RFC 5044 §7.1.1),
// offered by the initiator, echoed by a uiwarp responder with its SameHostOffer at the end of
// the Reply's private data, and what an initiator does with a Reply that misuses it (C-18).
#include "catch_compat.hpp"
#include "iwarp/conn_params.hpp"
#include "mpa_harness.hpp"
#include "same_host_samples.hpp"

using namespace mpat;

namespace {

constexpr std::uint8_t kSh = kMpaFlagSameHost;
constexpr std::uint8_t kMk = kMpaFlagUiwarpReply; // a uiwarp responder's answer, not an echo

using uiwarp::test::sample_offer;

Bytes offer_bytes(const SameHostOffer& o) {
  Bytes b(kSameHostOfferLen);
  o.encode(b.data());
  return b;
}

Bytes be(std::uint64_t v, std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[n - 1 - i] = std::byte((v >> (8 * i)) & 0xff);
  return b;
}

MpaPolicy same_host(MpaPolicy p = {}) {
  p.same_host = true;
  return p;
}

// The responder's ULP accepts with `pd` and, when its caller has one, the offer.
std::function<void(MpaStartup&)> accept_with(Bytes pd, std::optional<SameHostOffer> offer) {
  return [pd, offer](MpaStartup& r) { r.accept(pd, {}, {}, offer); };
}

} // namespace

TEST_CASE("Same-host offer: 64 octets, big-endian, in the documented layout", "[mpa][same-host]") {
  const SameHostOffer o = sample_offer();
  Bytes boot, nonce;
  for (unsigned i = 0; i < 16; ++i) {
    boot.push_back(std::byte(0xb0 + i));
    nonce.push_back(std::byte(0x50 + i));
  }
  const Bytes want = text("UWSH") + Bytes{std::byte{1}, std::byte{0}, std::byte{0}, std::byte{0}} +
                     boot + be(0xeffff001, 8) + be(1000, 4) + be(4242, 4) + be(7, 4) + be(3, 4) +
                     nonce;
  REQUIRE(want.size() == kSameHostOfferLen);
  CHECK(hex(offer_bytes(o)) == hex(want));
  CHECK(SameHostOffer::decode(want.data()) == o);
  CHECK(o.valid());
  // Reserved octets are sent as zero and ignored on receipt; magic and version are decoded as
  // they are, for the startup machine to judge.
  Bytes odd = want;
  odd[6] = std::byte{0xee};
  CHECK(SameHostOffer::decode(odd.data()) == o);
  odd[1] = std::byte{'X'};
  odd[4] = std::byte{2};
  const SameHostOffer bad = SameHostOffer::decode(odd.data());
  CHECK_FALSE(bad.valid());
  CHECK(bad.version == 2);
  CHECK(bad.slot == 3);
  // In a frame: the enhanced octets first (RFC 6581 §9), the ULP's, then the offer.
  MpaFrame f;
  f.kind = MpaKind::Reply;
  f.same_host = true;
  f.enhanced = MpaEnhanced{false, false, false, false, 5, 6};
  f.private_data = text("ulp");
  f.same_host_offer = o;
  CHECK(f.pd_length() == 4 + 3 + kSameHostOfferLen);
  CHECK(hex(f.encode()) ==
        hex(text("MPA ID Rep Frame") +
            Bytes{std::byte{kC | kS | kSh}, std::byte{2}, std::byte{0}, std::byte{71}} + enh(5, 6) +
            text("ulp") + want));
}

TEST_CASE("Same-host: both ends offer, the offer arrives intact, the ULP data is unchanged",
          "[mpa][same-host]") {
  const SameHostOffer o = sample_offer();
  struct Case {
    const char* name;
    MpaPolicy policy;
    Bytes ipd, rpd;
    std::size_t enhanced;
  };
  const Case cases[] = {
      {"rev 2 with private data", same_host(), text("hello"), text("welcome"), 4},
      {"rev 2 without private data", same_host(), {}, {}, 4},
      {"rev 2 peer-to-peer", same_host(p2p()), pattern(40), pattern(33, 5), 4},
      {"rev 1", same_host(rev1()), text("hello"), text("welcome"), 0},
      {"rev 1 without private data", same_host(rev1()), {}, {}, 0},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Link l = run(c.policy, c.policy, c.ipd, accept_with(c.rpd, o));
    require_established(l.i);
    require_established(l.r);
    // The Request: only the bit, its private data the ULP's alone.
    CHECK((octet(l.request, 16) & kSh) != 0);
    CHECK(word(l.request, 18) == c.enhanced + c.ipd.size());
    CHECK(l.r.request().same_host);
    CHECK(l.r.request().private_data == c.ipd);
    CHECK(l.r.result().peer_private_data == c.ipd);
    // The Reply: the bit, and the offer after the ULP's private data.
    CHECK((octet(l.reply, 16) & kSh) != 0);
    REQUIRE(word(l.reply, 18) == c.enhanced + c.rpd.size() + kSameHostOfferLen);
    CHECK(hex(Bytes(l.reply.end() - kSameHostOfferLen, l.reply.end())) == hex(offer_bytes(o)));
    CHECK(hex(Bytes(l.reply.begin() + kMpaFrameHeaderLen + c.enhanced,
                    l.reply.end() - kSameHostOfferLen)) == hex(c.rpd));
    // The initiator: the offer apart, the ULP's private data as the responder's ULP gave it.
    CHECK(l.i.result().conn.same_host);
    REQUIRE(l.i.result().conn.peer_same_host);
    CHECK(*l.i.result().conn.peer_same_host == o);
    CHECK(l.i.result().peer_private_data == c.rpd);
    CHECK(l.i.reply().private_data == c.rpd);
    CHECK(l.i.reply().same_host_offer == o);
    CHECK(l.r.result().conn.same_host);
    CHECK_FALSE(l.r.result().conn.peer_same_host);
    CHECK(l.r.sent_frame().same_host_offer == o);
    // Into the connection's parameters, and the one-line description.
    const ConnParams& ip = l.i.result().conn;
    const ConnParams& rp = l.r.result().conn;
    CHECK(ip.same_host);
    CHECK(ip.peer_same_host == o);
    CHECK(rp.same_host);
    CHECK_FALSE(rp.peer_same_host);
    CHECK(contains(describe(ip), " same-host"));
    CHECK(contains(describe(rp), " same-host"));
  }
}

TEST_CASE("Same-host: near-maximum ULP private data leaves no room, the offer is dropped",
          "[mpa][same-host]") {
  const SameHostOffer o = sample_offer();
  // 512 octets of private data in all (RFC 5044 §7.1.1): the enhanced ones, the ULP's, the offer.
  for (auto [policy, room] : {std::pair{same_host(), std::size_t{512 - 4 - 64}},
                              std::pair{same_host(rev1()), std::size_t{512 - 64}}}) {
    INFO("room " << room);
    const std::size_t enhanced = policy.enhanced && policy.revision == 2 ? 4 : 0;
    Link fits = run(policy, policy, {}, accept_with(pattern(room, 3), o));
    require_established(fits.i);
    CHECK(word(fits.reply, 18) == 512);
    CHECK(fits.i.result().conn.peer_same_host == o);
    CHECK(fits.i.result().peer_private_data == pattern(room, 3));
    for (std::size_t n : {room + 1, 512 - enhanced}) {
      INFO("ULP private data " << n);
      Link full = run(policy, policy, {}, accept_with(pattern(n, 4), o));
      require_established(full.i);
      require_established(full.r);
      CHECK((octet(full.reply, 16) & kSh) == 0);
      CHECK(word(full.reply, 18) == enhanced + n);
      CHECK_FALSE(full.i.result().conn.same_host);
      CHECK_FALSE(full.i.result().conn.peer_same_host);
      CHECK_FALSE(full.r.result().conn.same_host);
      CHECK(full.i.result().peer_private_data == pattern(n, 4));
      CHECK_FALSE(contains(describe(full.i.result().conn), "same"));
    }
  }
}

TEST_CASE("Same-host: no bit and no trailer unless both policies and the caller offer it",
          "[mpa][same-host]") {
  const SameHostOffer o = sample_offer();
  SECTION("responder policy off") {
    Link l = run(same_host(), MpaPolicy{}, text("hi"), accept_with(text("ok"), o));
    require_established(l.i);
    CHECK((octet(l.request, 16) & kSh) != 0);
    CHECK(octet(l.reply, 16) == (kC | kS | kMk));
    CHECK(word(l.reply, 18) == 4 + 2);
    CHECK(l.i.result().peer_private_data == text("ok"));
    CHECK_FALSE(l.i.result().conn.same_host);
    CHECK_FALSE(l.i.result().conn.peer_same_host);
    CHECK_FALSE(l.r.result().conn.same_host);
  }
  SECTION("initiator policy off") {
    Link l = run(MpaPolicy{}, same_host(), text("hi"), accept_with(text("ok"), o));
    require_established(l.i);
    CHECK(octet(l.request, 16) == (kC | kS));
    CHECK_FALSE(l.r.request().same_host);
    CHECK(octet(l.reply, 16) == (kC | kS)); // an echo, never an offer
    CHECK(word(l.reply, 18) == 4 + 2);
    CHECK_FALSE(l.i.result().conn.same_host);
    CHECK_FALSE(l.r.result().conn.same_host);
  }
  SECTION("no offer from the responder's caller") {
    Link l = run(same_host(), same_host(), text("hi"), accept_with(text("ok"), std::nullopt));
    require_established(l.i);
    CHECK(octet(l.reply, 16) == (kC | kS | kMk));
    CHECK(word(l.reply, 18) == 4 + 2);
    CHECK_FALSE(l.i.result().conn.same_host);
    CHECK_FALSE(l.r.result().conn.same_host);
  }
  SECTION("a reject never carries it") {
    Link l = run(same_host(), same_host(), text("hi"), [](MpaStartup& r) { r.reject(text("no")); });
    CHECK(l.i.state() == MpaState::Rejected);
    CHECK(octet(l.reply, 16) == (kC | kR | kS | kMk));
    CHECK(l.i.result().peer_private_data == text("no"));
    CHECK_FALSE(l.i.result().conn.same_host);
    CHECK_FALSE(l.r.result().conn.same_host);
  }
}

TEST_CASE("OX-10 same-host Request toward a peer that is not uiwarp: only the bit, same PD",
          "[mpa][same-host]") {
  // The exact octets: a peer that ignores the Res bit (RFC 5044 §7.1.1) sees a plain Request.
  MpaPolicy p = same_host();
  p.ird = 4;
  p.ord = 3;
  MpaStartup i = MpaStartup::initiator(p, text("hello"), t0);
  CHECK(hex(take(i)) ==
        hex(text("MPA ID Req Frame") +
            Bytes{std::byte{kC | kS | kSh}, std::byte{2}, std::byte{0}, std::byte{9}} + enh(4, 3) +
            text("hello")));
  MpaStartup r1 = MpaStartup::initiator(same_host(rev1()), text("hello"), t0);
  CHECK(hex(take(r1)) ==
        hex(text("MPA ID Req Frame") +
            Bytes{std::byte{kC | kSh}, std::byte{1}, std::byte{0}, std::byte{5}} + text("hello")));
  // Its Reply has no bit: no same-host path, and the connection works as ever.
  i.on_bytes(raw_reply(kC | kS, 2, enh(8, 2) + text("plain")));
  require_established(i);
  CHECK(i.result().peer_private_data == text("plain"));
  CHECK_FALSE(i.result().conn.same_host);
  CHECK_FALSE(i.result().conn.peer_same_host);
}

TEST_CASE("C-18 a uiwarp Reply whose same-host offer is short or malformed fails, HX-010 elsewhere",
          "[mpa][same-host][hostile]") {
  const Bytes good = offer_bytes(sample_offer());
  auto with = [&](std::size_t at, std::uint8_t v) {
    Bytes b = good;
    b[at] = std::byte{v};
    return b;
  };
  struct Case {
    const char* name;
    MpaPolicy policy;
    Bytes reply;
    const char* message;
  };
  MpaPolicy permissive = same_host(rev1());
  permissive.permissive = true;
  const Case cases[] = {
      {"short trailer", same_host(), raw_reply(kC | kS | kSh | kMk, 2, enh(8, 8) + pattern(63)),
       "MPA Reply has uiwarp's same-host bit but PD_Length 67 cannot hold the 64-octet same-host "
       "offer after the enhanced data"},
      {"no trailer, rev 1", same_host(rev1()), raw_reply(kC | kSh | kMk, 1, text("abc")),
       "but PD_Length 3 cannot hold the 64-octet same-host offer (a Res bit"},
      {"bad magic", same_host(),
       raw_reply(kC | kS | kSh | kMk, 2, enh(8, 8) + text("x") + with(3, 'X')),
       "same-host offer has magic 0x55 ('U') 0x57 ('W') 0x53 ('S') 0x58 ('X'), expected \"UWSH\""},
      {"bad version", same_host(), raw_reply(kC | kS | kSh | kMk, 2, enh(8, 8) + with(4, 2)),
       "same-host offer has version 2, expected 1"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    MpaStartup i = initiator_vs(c.policy, c.reply);
    require_failed(i, term::mpa_invalid_frame, c.message);
    CHECK_FALSE(i.error().terminate_sent); // never in Full Operation: close (RFC 5044 §7.1.2)
    CHECK(i.output().empty());
    CHECK_FALSE(i.result().conn.same_host);
  }
  // HX-010: where no offer can be (not asked, a reject, an RDMAC peer), the bit is not checked
  // and the private data stays the ULP's, whatever its length.
  struct Ignored {
    const char* name;
    MpaPolicy policy;
    Bytes reply;
    Bytes ulp;
    bool rejected;
  };
  const Ignored ignored[] = {
      {"never asked", MpaPolicy{}, raw_reply(kC | kS | kSh | kMk, 2, enh(8, 8) + good), good,
       false},
      {"never asked, rev 1", rev1(), raw_reply(kC | kSh | kMk, 1, text("abc")), text("abc"), false},
      {"in a reject", same_host(), raw_reply(kC | kR | kS | kSh | kMk, 2, enh(8, 8) + text("no")),
       text("no"), true},
      {"from an RDMAC peer", permissive, raw_reply(kM | kC | kSh | kMk, 0, text("r")), text("r"),
       false},
  };
  for (const Ignored& c : ignored) {
    INFO(c.name);
    MpaStartup i = initiator_vs(c.policy, c.reply);
    if (c.rejected)
      CHECK(i.state() == MpaState::Rejected);
    else
      require_established(i);
    CHECK_FALSE(i.result().conn.same_host);
    CHECK(i.result().peer_private_data == c.ulp);
  }
  // The offer goes to its own field: a small local buffer for the ULP's data still takes it.
  MpaPolicy small = same_host();
  small.max_private_data = 16;
  MpaStartup i =
      initiator_vs(small, raw_reply(kC | kS | kSh | kMk, 2, enh(8, 8) + pattern(16) + good));
  require_established(i);
  CHECK(i.result().peer_private_data == pattern(16));
  CHECK(i.result().conn.peer_same_host == sample_offer());
  MpaStartup over =
      initiator_vs(small, raw_reply(kC | kS | kSh | kMk, 2, enh(8, 8) + pattern(17) + good));
  require_failed(over, term::mpa_invalid_frame, "private data of 17 octets exceeds the local");
}

TEST_CASE("Same-host: RDMAC (Rev 0) peers never get the bit or the offer", "[mpa][same-host]") {
  MpaPolicy p = same_host();
  p.permissive = true;
  MpaStartup r = responder_vs(p, raw_request(kM | kC | kSh, 0, text("rdmac")));
  REQUIRE(r.state() == MpaState::RequestReceived);
  CHECK(r.request().same_host);
  r.accept(text("ok"), {}, {}, sample_offer());
  require_established(r);
  const Bytes reply = take(r);
  CHECK(octet(reply, 16) == (kM | kC));
  CHECK(octet(reply, 17) == 0);
  CHECK(word(reply, 18) == 2);
  CHECK(r.result().conn.version == kVersionRdmac);
  CHECK_FALSE(r.result().conn.same_host);
  // An RDMAC Reply with no bit: version 0, no same-host path (a Reply with it is C-18's).
  MpaStartup i = initiator_vs(p, rdmac_reply(text("r0")));
  require_established(i);
  CHECK(i.result().conn.version == kVersionRdmac);
  CHECK_FALSE(i.result().conn.same_host);
  CHECK(i.result().peer_private_data == text("r0"));
}

TEST_CASE("Same-host: every split of the Reply gives the same result", "[mpa][same-host]") {
  const Bytes tail = pattern(9, 0x77); // the first FPDU octets, never consumed
  const Bytes good = offer_bytes(sample_offer());
  auto initiator = [](MpaPolicy p) {
    return [p] {
      MpaStartup i = MpaStartup::initiator(p, text("req"), t0);
      i.consume_output(i.output().size());
      return i;
    };
  };
  SECTION("offer accepted") {
    require_split_invariant(initiator(same_host()),
                            raw_reply(kC | kS | kSh | kMk, 2, enh(8, 2) + text("yes") + good) +
                                tail);
    require_split_invariant(initiator(same_host(rev1())),
                            raw_reply(kC | kSh | kMk, 1, good) + tail);
  }
  SECTION("short trailer") {
    require_split_invariant(initiator(same_host()),
                            raw_reply(kC | kS | kSh | kMk, 2, enh(8, 2) + pattern(60)) + tail);
  }
  SECTION("bad magic") {
    Bytes bad = good;
    bad[0] = std::byte{'u'};
    require_split_invariant(initiator(same_host()),
                            raw_reply(kC | kS | kSh | kMk, 2, enh(8, 2) + bad) + tail);
  }
  SECTION("never asked") {
    require_split_invariant(initiator(MpaPolicy{}),
                            raw_reply(kC | kS | kSh | kMk, 2, enh(8, 2) + good) + tail);
  }
  SECTION("split results carry the same offer") {
    const Bytes in = raw_reply(kC | kS | kSh | kMk, 2, enh(8, 2) + text("yes") + good);
    for (std::size_t k = 1; k < in.size(); ++k) {
      MpaStartup i = initiator(same_host())();
      i.on_bytes(ConstBytes(in).first(k));
      i.on_bytes(ConstBytes(in).subspan(k));
      INFO("split at " << k);
      require_established(i);
      CHECK(i.result().conn.peer_same_host == sample_offer());
      CHECK(i.result().peer_private_data == text("yes"));
    }
  }
}

TEST_CASE("OX-10 a responder that returns the Request's own bits (siw) agrees to no uiwarp "
          "extension",
          "[mpa][same-host][rfc7306]") {
  MpaPolicy both = same_host();
  both.rfc7306 = true;
  // Linux siw writes its Reply over the Request's header: 0x04 and 0x02 come back, with no mark
  // and no offer. The private data is the ULP's, all of it, whatever it holds.
  const Bytes pd = pattern(70) + offer_bytes(sample_offer());
  MpaStartup i = initiator_vs(both, raw_reply(kC | kS | kMpaFlagRfc7306 | kSh, 2, enh(8, 8) + pd));
  require_established(i);
  CHECK_FALSE(i.result().conn.rfc7306);
  CHECK_FALSE(i.result().conn.same_host);
  CHECK_FALSE(i.result().conn.peer_same_host);
  CHECK(i.result().peer_private_data == pd);

  // A uiwarp responder marks its answers, and only toward a Request with uiwarp's bits.
  Link l = run(both, both, {}, accept_with({}, sample_offer()));
  require_established(l.i);
  CHECK((octet(l.reply, 16) & kMk) != 0);
  CHECK(l.i.result().conn.rfc7306);
  CHECK(l.i.result().conn.same_host);
  CHECK((octet(l.request, 16) & kMk) == 0); // an initiator never sets it
  Link plain = run(MpaPolicy{}, both);
  require_established(plain.i);
  CHECK((octet(plain.reply, 16) & (kMk | kSh | kMpaFlagRfc7306)) == 0);
}
