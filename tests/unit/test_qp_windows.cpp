// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Memory windows (RFC 5040 §2.1 STags, the RDMAC/IB verbs' Bind; memory.hpp): the STag table's
// Bind rules, and windows through the engine: a Bind and a Local Invalidate are send-queue work
// requests applied in order, a peer reaches the window's part of the region with the window's
// rights, and no more (RFC 5041 §7.2 / RFC 5040 §7.2 Terminate codes), a Send with Invalidate
// frees a type 2 window and may not touch a type 1 one (RFC 5040 §5.3: "STag cannot be
// invalidated", requirements C-07).
#include "qp_harness.hpp"

using namespace qpt;

namespace {

constexpr std::uint32_t kRemote = access::kRemoteWrite | access::kRemoteRead;

SendWr bind_wr(std::uint64_t id, std::uint32_t window, std::uint32_t new_stag, const Buf& region,
               std::size_t off, std::size_t len, std::uint32_t acc) {
  SendWr w;
  w.wr_id = id;
  w.opcode = WrOpcode::BindWindow;
  w.invalidate_stag = window;
  w.remote_stag = new_stag;
  w.bind_region = region.stag;
  w.bind_addr = region.to(off);
  w.bind_length = len;
  w.bind_access = acc;
  return w;
}

std::uint32_t next_key(std::uint32_t stag) { return (stag & ~0xffu) | ((stag + 1) & 0xff); }

// The initiator's first message: until it arrives the responder may not send (RFC 5044
// §7.1.2 r4), so its send queue would wait.
void hello(Pair& p, Buf& rx, Buf& tx) {
  REQUIRE(p.b->post_recv(recv_wr(900, {rx.all()})) == PostError::None);
  REQUIRE(p.a->post_send(send_wr(901, {tx.sge(0, 4)})) == PostError::None);
  p.pump();
  drain_cq(*p.a);
  REQUIRE(drain_cq(*p.b).size() == 1);
}

} // namespace

TEST_CASE("Memory windows: the STag table's Bind rules", "[qp][window]") {
  MemoryTable mem(7);
  Bytes host(4096);
  const std::uint32_t all = kAllAccess | access::kMwBind;
  const std::uint32_t region = mem.add(1, host.data(), 0x10000, host.size(), all);
  const std::uint32_t no_bind = mem.add(1, host.data(), 0x10000, host.size(), kAllAccess);
  const std::uint32_t read_only =
      mem.add(1, host.data(), 0x10000, host.size(), access::kRemoteRead | access::kMwBind);
  const std::uint32_t w2 = mem.add_window(1, StagKind::Window2);
  const std::uint32_t w1 = mem.add_window(1, StagKind::Window1);
  REQUIRE((w1 && w2));
  // Unbound: nothing reaches through it.
  CHECK(mem.resolve(w2, 1, 0, 0, 1, 0).error == MemError::InvalidStag);
  auto bind = [&](std::uint32_t w, std::uint32_t new_stag, std::uint32_t r, std::uint64_t addr,
                  std::uint64_t len, std::uint32_t acc, std::uint32_t pd = 1) {
    return mem.bind({w, new_stag, r, addr, len, acc, pd, 5});
  };
  const std::uint32_t w2b = next_key(w2);
  CHECK(bind(w2, w2b, no_bind, 0x10000, 16, kRemote) == MemError::Access);
  CHECK(bind(w2, w2b, read_only, 0x10000, 16, access::kRemoteWrite) == MemError::Access);
  CHECK(bind(w2, w2b, region, 0x10000, 16, kRemote, 2) == MemError::NotAssociated);
  CHECK(bind(w2, w2b + 0x100, region, 0x10000, 16, kRemote) == MemError::InvalidStag);
  CHECK(bind(w2, w2b, region, 0x10000 + 4000, 200, kRemote) == MemError::Bounds);
  CHECK(bind(w2, w2b, region, ~0ull - 4, 16, kRemote) == MemError::Wrap);
  CHECK(bind(w2, w2b, region, 0x10000, 16, access::kRemoteAtomic | access::kMwBind) ==
        std::nullopt); // a window never passes on MW_BIND
  CHECK(mem.lookup(w2b)->access == access::kRemoteAtomic);
  CHECK(mem.has_windows(region));
  // A bound type 2 window must be invalidated before it is bound again.
  CHECK(bind(w2b, next_key(w2b), region, 0x10000, 16, kRemote) == MemError::InvalidStag);
  CHECK(mem.invalidate_local(w2b, 2) == MemError::NotAssociated);
  CHECK(mem.invalidate_local(w2b, 1) == std::nullopt);
  CHECK_FALSE(mem.has_windows(region));
  REQUIRE(bind(w2b, next_key(w2b), region, 0x10100, 256, kRemote) == std::nullopt);
  const std::uint32_t w2c = next_key(w2b);
  // Stream association: only QP 5 reaches through it; the old STag is dead.
  CHECK(mem.resolve(w2c, 1, 5, 0x10100, 256, access::kRemoteWrite).host == host.data() + 0x100);
  CHECK(mem.resolve(w2c, 1, 6, 0x10100, 1, 0).error == MemError::NotAssociated);
  CHECK(mem.resolve(w2b, 1, 5, 0x10100, 1, 0).error == MemError::InvalidStag);
  CHECK(mem.resolve(w2c, 1, 5, 0x100ff, 2, 0).error == MemError::Bounds);
  CHECK(mem.resolve(w2c, 1, 5, 0x10100, 1, access::kRemoteAtomic).error == MemError::Access);
  // Never an lkey.
  CHECK(mem.resolve(w2c, 1, 5, 0x10100, 1, 0, true).error == MemError::InvalidStag);
  // Type 1: rebound at will, zero-based too, unbound by length 0, never invalidated by a peer.
  REQUIRE(bind(w1, next_key(w1), region, 0x10200, 64, kRemote | access::kZeroBased) ==
          std::nullopt);
  const std::uint32_t w1b = next_key(w1);
  CHECK(mem.resolve(w1b, 1, 9, 0, 64, access::kRemoteRead).host == host.data() + 0x200);
  CHECK(mem.invalidate(w1b, 1, 9) == MemError::Permanent);
  REQUIRE(bind(w1b, next_key(w1b), region, 0x10000, 8, kRemote) == std::nullopt);
  CHECK(mem.resolve(w1b, 1, 9, 0, 1, 0).error == MemError::InvalidStag);
  REQUIRE(bind(next_key(w1b), next_key(next_key(w1b)), 0, 0, 0, 0) == std::nullopt);
  CHECK(mem.resolve(next_key(next_key(w1b)), 1, 9, 0x10000, 1, 0).error == MemError::InvalidStag);
  // A window is freed by its index, whatever its key now; a region is not a window.
  CHECK_FALSE(mem.remove_window(region));
  CHECK(mem.remove_window(w1));
  CHECK(mem.remove_window(w2));
  CHECK_FALSE(mem.lookup(w2c));
  CHECK_FALSE(mem.modify(w2c, 1, host.data(), 0, 1, 0, true));
}

TEST_CASE("Memory windows: a peer writes and reads through a type 2 window, within its bounds",
          "[qp][window]") {
  Pair p(initiator_cfg(), responder_cfg());
  Buf src = reg(p.ma(), pattern(512, 3), access::kLocalWrite);
  Buf sink = reg(p.ma(), 512, access::kLocalWrite);
  Buf region = reg(p.mb(), 8192, kAllAccess | access::kMwBind);
  const std::uint32_t w = p.mb().add_window(1, StagKind::Window2);
  const std::uint32_t wk = next_key(w);
  // b: a Send, then the Bind: completions in that order; the Bind sends nothing.
  Buf note = reg(p.mb(), pattern(16, 9), access::kLocalWrite);
  Buf note_rx = reg(p.ma(), 64, access::kLocalWrite);
  Buf hello_rx = reg(p.mb(), 64, access::kLocalWrite);
  hello(p, hello_rx, src);
  REQUIRE(p.a->post_recv(recv_wr(1, {note_rx.all()})) == PostError::None);
  REQUIRE(p.b->post_send(send_wr(20, {note.all()})) == PostError::None);
  REQUIRE(p.b->post_send(bind_wr(21, w, wk, region, 1024, 1024, kRemote)) == PostError::None);
  p.pump();
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 2);
  check_completion(cb[0], 20, WcStatus::Success, WcOpcode::Send, 16, false);
  check_completion(cb[1], 21, WcStatus::Success, WcOpcode::BindWindow, 0, false);
  CHECK(p.segs_ba().size() == 1);
  // a: Write and Read through the window.
  REQUIRE(p.a->post_send(write_wr(1, {src.all()}, wk, region.to(1024 + 512))) == PostError::None);
  REQUIRE(p.a->post_send(read_wr(2, {sink.all()}, wk, region.to(1024 + 512))) == PostError::None);
  p.pump();
  CHECK(slice(region.data, 1536, 512) == src.data);
  CHECK(sink.data == src.data);
  auto ca = drain_cq(*p.a);
  REQUIRE(ca.size() == 3);
  check_completion(ca[2], 2, WcStatus::Success, WcOpcode::RdmaRead, 512, false);
  // One octet past the window (inside the region): the peer's stream ends with base/bounds.
  REQUIRE(p.a->post_send(write_wr(3, {src.sge(0, 2)}, wk, region.to(2047))) == PostError::None);
  p.pump();
  REQUIRE(p.b->error().has_value());
  CHECK(p.b->error()->code == term::ddp_tagged_base_bounds);
  CHECK(region.data[2048] == std::byte{0});
}

TEST_CASE("Memory windows: Send with Invalidate and Local Invalidate end a type 2 window, a type "
          "1 window cannot be invalidated by the peer (C-07)",
          "[qp][window]") {
  const bool remote = GENERATE(true, false);
  INFO((remote ? "Send with Invalidate" : "Local Invalidate"));
  Pair p(initiator_cfg(), responder_cfg());
  Buf src = reg(p.ma(), pattern(64, 3), access::kLocalWrite);
  Buf region = reg(p.mb(), 4096, kAllAccess | access::kMwBind);
  Buf rx = reg(p.mb(), 64, access::kLocalWrite);
  const std::uint32_t w = p.mb().add_window(1, StagKind::Window2);
  REQUIRE(p.b->post_send(bind_wr(1, w, next_key(w), region, 0, 4096, kRemote)) == PostError::None);
  p.pump();
  const std::uint32_t wk = next_key(w);
  if (remote) {
    REQUIRE(p.b->post_recv(recv_wr(5, {rx.all()})) == PostError::None);
    SendWr inv = send_wr(6, {src.sge(0, 8)}, WrOpcode::SendInvalidate);
    inv.invalidate_stag = wk;
    REQUIRE(p.a->post_send(inv) == PostError::None);
  } else {
    SendWr li;
    li.wr_id = 7;
    li.opcode = WrOpcode::LocalInvalidate;
    li.invalidate_stag = wk;
    REQUIRE(p.b->post_send(li) == PostError::None);
  }
  p.pump();
  auto cb = drain_cq(*p.b);
  REQUIRE(cb.size() == 2);
  if (remote) {
    CHECK(cb[1].invalidated == wk);
  } else {
    check_completion(cb[1], 7, WcStatus::Success, WcOpcode::LocalInvalidate, 0, false);
  }
  REQUIRE(p.a->post_send(write_wr(8, {src.all()}, wk, region.to(0))) == PostError::None);
  p.pump();
  REQUIRE(p.b->error().has_value());
  CHECK(p.b->error()->code == term::ddp_tagged_invalid_stag);
  CHECK(all_zero(region.data));
}

TEST_CASE("Memory windows: a peer's Send with Invalidate of a type 1 window is refused (C-07), "
          "a failed Bind ends the stream with a bind error",
          "[qp][window]") {
  {
    Pair p(initiator_cfg(), responder_cfg());
    Buf src = reg(p.ma(), pattern(8, 3), access::kLocalWrite);
    Buf region = reg(p.mb(), 4096, kAllAccess | access::kMwBind);
    Buf rx = reg(p.mb(), 64, access::kLocalWrite);
    const std::uint32_t w = p.mb().add_window(1, StagKind::Window1);
    REQUIRE(p.b->post_send(bind_wr(1, w, next_key(w), region, 0, 64, kRemote)) == PostError::None);
    p.pump(); // the peer learns the STag only after the Bind completed
    REQUIRE(drain_cq(*p.b).size() == 1);
    REQUIRE(p.b->post_recv(recv_wr(5, {rx.all()})) == PostError::None);
    SendWr inv = send_wr(6, {src.all()}, WrOpcode::SendInvalidate);
    inv.invalidate_stag = next_key(w);
    REQUIRE(p.a->post_send(inv) == PostError::None);
    p.pump();
    REQUIRE(p.b->error().has_value());
    INFO("Terminate " << int(p.b->error()->code.layer) << "/" << int(p.b->error()->code.etype)
                      << "/" << int(p.b->error()->code.code) << ": " << p.b->error()->message);
    CHECK(p.b->error()->code == term::rdmap_stag_cannot_invalidate);
    CHECK(p.mb().lookup(next_key(w))->valid);
  }
  {
    Pair p(initiator_cfg(), responder_cfg());
    Buf region = reg(p.mb(), 4096, kAllAccess); // no MW_BIND right
    Buf src = reg(p.ma(), pattern(8, 3), access::kLocalWrite);
    Buf rx = reg(p.mb(), 64, access::kLocalWrite);
    hello(p, rx, src);
    const std::uint32_t w = p.mb().add_window(1, StagKind::Window2);
    REQUIRE(p.b->post_send(bind_wr(1, w, next_key(w), region, 0, 64, kRemote)) == PostError::None);
    SendWr later = send_wr(2, {});
    REQUIRE(p.b->post_send(later) == PostError::None);
    p.pump();
    auto cb = drain_cq(*p.b);
    REQUIRE(cb.size() == 2);
    check_completion(cb[0], 1, WcStatus::MwBind, WcOpcode::BindWindow, 0, false);
    CHECK(cb[1].status == WcStatus::Flushed);
    CHECK(p.b->state() == QpState::Error);
    CHECK(p.a->error().has_value()); // the peer got the Terminate
  }
}
