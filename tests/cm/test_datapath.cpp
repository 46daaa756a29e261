// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The data path as programs drive it, through stock librdmacm and libibverbs over uiwarp-run
// (issue 10): a CQ polled from two threads, a CQ used only through its completion channel
// (RDMA Reads answered while the target sleeps), work posted by one thread while another polls,
// Reads posted behind unanswered ones and Writes posted in a burst (each sent together, also
// when no poll follows) and RDMA Reads in flight (up to ORD) when the peer is killed. Progress
// happens in the polling thread first, with the progress thread for whatever no thread drives: each
// case must see every completion exactly once, in order, and never hang.
//
// The peer of the last case is a program of its own, uiwarp-datapath-read-target
// (read_target.cpp), beside this one: it is killed with SIGKILL.
#include "connected_pair.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace dp;

namespace {

constexpr std::uint32_t kMsg = 64;

// The sequence number a message carries in its first 8 octets.
void stamp(Side& s, std::size_t off, std::uint64_t seq) { std::memcpy(s.at(off), &seq, 8); }
std::uint64_t seq_at(Side& s, std::size_t off) {
  std::uint64_t v;
  std::memcpy(&v, s.at(off), 8);
  return v;
}

// Sends n numbered messages from `from`, `window` at a time, reclaiming its send CQ.
void send_numbered(Side& from, std::size_t n, std::size_t window) {
  std::size_t posted = 0, done = 0;
  ibv_wc wc[32];
  while (done < n) {
    while (posted < n && posted - done < window) {
      std::size_t off = (posted % window) * kMsg;
      stamp(from, off, posted);
      REQUIRE(from.post(IBV_WR_SEND, posted, off, kMsg) == 0);
      ++posted;
    }
    int k = ibv_poll_cq(from.scq, 32, wc);
    REQUIRE(k >= 0);
    for (int i = 0; i < k; ++i)
      REQUIRE(wc[i].status == IBV_WC_SUCCESS);
    done += static_cast<std::size_t>(k);
  }
}

// Yields until `landed()` is true or `limit` has passed; says whether it became true.
template <class F> bool spin_until(F landed, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  bool seen = false;
  while (!(seen = landed()) && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  return seen;
}

} // namespace

TEST_CASE("a receive CQ polled from two threads: every completion once, each thread in order",
          "[datapath]") {
  constexpr std::size_t kN = 4000;
  SideOptions so;
  so.recv_depth = static_cast<int>(kN);
  ConnectedPair p(so);
  for (std::size_t i = 0; i < kN; ++i)
    REQUIRE(p.server.post_recv(i, i * kMsg, kMsg) == 0);

  std::atomic<std::size_t> total{0};
  std::vector<std::uint64_t> got[2];
  std::atomic<bool> bad_order{false}, bad_data{false};
  auto poller = [&](int t) {
    ibv_wc wc[8];
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (total.load() < kN && std::chrono::steady_clock::now() < until) {
      int k = ibv_poll_cq(p.server.rcq, 8, wc);
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != kMsg ||
            seq_at(p.server, wc[i].wr_id * kMsg) != wc[i].wr_id)
          bad_data = true;
        if (!got[t].empty() && wc[i].wr_id <= got[t].back()) bad_order = true;
        got[t].push_back(wc[i].wr_id);
      }
      total += static_cast<std::size_t>(std::max(k, 0));
    }
  };
  std::thread a(poller, 0), b(poller, 1);
  send_numbered(p.client, kN, 64);
  a.join();
  b.join();
  CHECK_FALSE(bad_data);
  CHECK_FALSE(bad_order); // completions leave a CQ in order, whichever thread takes them
  std::set<std::uint64_t> all(got[0].begin(), got[0].end());
  all.insert(got[1].begin(), got[1].end());
  CHECK(got[0].size() + got[1].size() == kN); // none twice
  CHECK(all.size() == kN);                    // none lost
}

TEST_CASE("a CQ used only through its completion channel; Reads answered while the target sleeps",
          "[datapath]") {
  constexpr std::size_t kN = 500;
  SideOptions so;
  so.comp_channel = true;
  so.recv_depth = static_cast<int>(kN);
  ConnectedPair p(so);
  for (std::size_t i = 0; i < kN; ++i)
    REQUIRE(p.server.post_recv(i, i * kMsg, kMsg) == 0);
  // The server's data for the client's Reads.
  const std::size_t base = 512 << 10;
  for (std::size_t i = 0; i < 64 << 10; ++i)
    p.server.buf[base + i] = static_cast<char>(i * 7 + 3);

  std::atomic<std::size_t> received{0};
  std::atomic<bool> failed{false};
  std::thread sleeper([&] { // (no Catch2 assertions off the main thread: flags instead)
    // Never polls before an event says there is something to poll (rping's pattern).
    if (ibv_req_notify_cq(p.server.rcq, 0)) failed = true;
    while (!failed && received.load() < kN) {
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      if (ibv_get_cq_event(p.server.cc, &cq, &ctx)) {
        failed = true;
        break;
      }
      ibv_ack_cq_events(cq, 1);
      if (ibv_req_notify_cq(cq, 0)) failed = true;
      ibv_wc wc[16];
      int k;
      while ((k = ibv_poll_cq(cq, 16, wc)) > 0) {
        for (int i = 0; i < k; ++i)
          if (wc[i].status != IBV_WC_SUCCESS) failed = true;
        received += static_cast<std::size_t>(k);
      }
    }
  });
  // While the server's thread sleeps in ibv_get_cq_event, its progress thread answers Reads.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto raddr = reinterpret_cast<std::uintptr_t>(p.server.at(base));
  for (int r = 0; r < 16; ++r)
    REQUIRE(p.client.post(IBV_WR_RDMA_READ, 1000 + r, 256 << 10, 4096, raddr + r * 4096,
                          p.server.mr->rkey) == 0);
  auto reads = poll_n(p.client.scq, 16);
  REQUIRE(reads.size() == 16);
  CHECK(std::memcmp(p.client.at(256 << 10), p.server.at(base), 4096) == 0);
  send_numbered(p.client, kN, 64);
  sleeper.join();
  CHECK_FALSE(failed);
  CHECK(received.load() == kN);
}

TEST_CASE("ibv_resize_cq while traffic runs: every completion once, in order", "[datapath]") {
  // The receiver resizes its CQ (larger and smaller, never below what may be queued) between
  // polls while Sends arrive; the ring must keep each completion once and in order.
  constexpr std::size_t kN = 20000, kDepth = 512;
  SideOptions so;
  so.recv_depth = static_cast<int>(kDepth);
  ConnectedPair p(so);
  for (std::size_t i = 0; i < kDepth; ++i)
    REQUIRE(p.server.post_recv(i, i * kMsg, kMsg) == 0);
  std::atomic<std::size_t> received{0}, resizes{0};
  std::atomic<bool> failed{false};
  std::thread receiver([&] { // flags, not Catch2 assertions, off the main thread
    ibv_wc wc[32];
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::size_t next = 0;
    while (next < kN && !failed && std::chrono::steady_clock::now() < until) {
      int k = ibv_poll_cq(p.server.rcq, 32, wc);
      if (k < 0) failed = true;
      for (int i = 0; i < k; ++i) {
        const std::size_t slot = wc[i].wr_id;
        if (wc[i].status != IBV_WC_SUCCESS || seq_at(p.server, slot * kMsg) != next) failed = true;
        ++next;
        if (p.server.post_recv(slot, slot * kMsg, kMsg)) failed = true;
      }
      if (k > 0 && next % 997 < static_cast<std::size_t>(k)) {
        // Every so often: 4x the receive depth, or back to the depth itself.
        const int cqe =
            (resizes.load() % 2) ? static_cast<int>(kDepth) : static_cast<int>(4 * kDepth);
        if (ibv_resize_cq(p.server.rcq, cqe)) failed = true;
        ++resizes;
      }
    }
    received = next;
  });
  send_numbered(p.client, kN, 64);
  receiver.join();
  CHECK_FALSE(failed);
  CHECK(received.load() == kN);
  CHECK(resizes.load() >= 10);
}

TEST_CASE("one thread posts Sends while another polls the send CQ", "[datapath]") {
  constexpr std::size_t kN = 20000;
  SideOptions so, co;
  so.recv_depth = 512;
  co.send_depth = 128;
  ConnectedPair p(so, co);
  std::atomic<std::size_t> sent_done{0}, recv_done{0};
  std::atomic<bool> failed{false};
  for (std::size_t i = 0; i < 512; ++i)
    REQUIRE(p.server.post_recv(i, (i % 512) * kMsg, kMsg) == 0);
  std::thread receiver([&] { // reposts as it goes (the hold covers a late repost)
    ibv_wc wc[32];
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (recv_done.load() < kN && std::chrono::steady_clock::now() < until) {
      int k = ibv_poll_cq(p.server.rcq, 32, wc);
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) failed = true;
        p.server.post_recv(wc[i].wr_id, (wc[i].wr_id % 512) * kMsg, kMsg);
      }
      recv_done += static_cast<std::size_t>(std::max(k, 0));
    }
  });
  std::thread poller([&] {
    ibv_wc wc[32];
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (sent_done.load() < kN && std::chrono::steady_clock::now() < until) {
      int k = ibv_poll_cq(p.client.scq, 32, wc);
      for (int i = 0; i < k; ++i)
        if (wc[i].status != IBV_WC_SUCCESS) failed = true;
      sent_done += static_cast<std::size_t>(std::max(k, 0));
    }
  });
  std::size_t posted = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (posted < kN && std::chrono::steady_clock::now() < until) {
    if (posted - sent_done.load() >= 128) continue; // the send queue is full
    int err = p.client.post(IBV_WR_SEND, posted, (posted % 128) * kMsg, kMsg);
    if (err == ENOMEM) continue; // the poller has not reclaimed the slot yet
    REQUIRE(err == 0);
    ++posted;
  }
  poller.join();
  receiver.join();
  CHECK_FALSE(failed);
  CHECK(posted == kN);
  CHECK(sent_done.load() == kN);
  CHECK(recv_done.load() == kN);
}

TEST_CASE("polls that stop after parking a QP: a Write into memory the program spins on lands",
          "[datapath]") {
  // Empty polls in a tight loop park the QP (the progress thread stops watching its socket);
  // when they stop, the progress thread's timer takes it back. The thread must not be asleep
  // without a timeout at that moment (it was, on an idle context, before the fix).
  ConnectedPair p;
  std::this_thread::sleep_for(std::chrono::milliseconds(20)); // both progress threads idle
  ibv_wc wc;
  const auto polls_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < polls_until)
    REQUIRE(ibv_poll_cq(p.server.rcq, 1, &wc) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::size_t off = 4096;
  volatile char* flag = p.server.at(off);
  *flag = 0;
  std::memset(p.client.at(0), 0x5a, 64);
  REQUIRE(p.client.post(IBV_WR_RDMA_WRITE, 1, 0, 64,
                        reinterpret_cast<std::uintptr_t>(p.server.at(off)),
                        p.server.mr->rkey) == 0);
  REQUIRE(poll_n(p.client.scq, 1).size() == 1);
  CHECK(spin_until([&] { return *flag == 0x5a; }, std::chrono::seconds(10)));
}

TEST_CASE("a parked QP whose socket is full: its pollers send, and when they stop the progress "
          "thread does",
          "[datapath]") {
  // Pollers of a parked QP retry its full socket themselves (the progress thread leaves
  // EPOLLOUT unwatched); when the polls stop, the timer takes the QP back and room in the
  // socket must wake the progress thread again. 16 MiB of Writes cannot fit in the socket
  // buffers, so the socket is full while the client polls and when it stops.
  constexpr std::size_t kWrites = 32, kLen = 512 << 10, kMarker = 1000 << 10;
  ConnectedPair p;
  for (std::size_t i = 0; i < kLen; ++i)
    p.client.buf[i] = static_cast<char>(i * 13 + 5);
  volatile char* flag = p.server.at(kMarker);
  *flag = 0;
  p.client.buf[kMarker] = 0x3c;
  for (std::size_t i = 0; i < kWrites; ++i)
    REQUIRE(p.client.post(IBV_WR_RDMA_WRITE, i, 0, static_cast<std::uint32_t>(kLen),
                          reinterpret_cast<std::uintptr_t>(p.server.at(0)),
                          p.server.mr->rkey) == 0);
  REQUIRE(p.client.post(IBV_WR_RDMA_WRITE, kWrites, kMarker, 1,
                        reinterpret_cast<std::uintptr_t>(p.server.at(kMarker)),
                        p.server.mr->rkey) == 0);
  // Empty polls in a tight loop park the QP; completions found on the way are kept.
  std::vector<ibv_wc> wcs;
  for (int i = 0; i < 200; ++i) {
    ibv_wc wc;
    if (ibv_poll_cq(p.client.scq, 1, &wc) == 1) wcs.push_back(wc);
  }
  CHECK(spin_until([&] { return *flag == 0x3c; }, std::chrono::seconds(20)));
  for (const ibv_wc& wc : poll_n(p.client.scq, kWrites + 1 - wcs.size()))
    wcs.push_back(wc);
  REQUIRE(wcs.size() == kWrites + 1);
  for (std::size_t i = 0; i <= kWrites; ++i) {
    CHECK(wcs[i].wr_id == i);
    CHECK(wcs[i].status == IBV_WC_SUCCESS);
  }
  CHECK(std::memcmp(p.server.at(0), p.client.at(0), kLen) == 0);
}

TEST_CASE("a Read responder whose CQs nobody polls: a poll of another CQ answers, and the QP "
          "goes while one spins",
          "[datapath]") {
  // perftest's servers spin on their control connection's CQ while the data QP answers Reads
  // (Cq::adopt). Here a thread spins on a CQ with no QP while the client reads, then the
  // responder's QP is destroyed under the spinning poll with Reads still in flight.
  constexpr std::size_t kReads = 3000, kWindow = 16, kLen = 4096;
  ConnectedPair p;
  const std::size_t base = 512 << 10;
  for (std::size_t i = 0; i < 256 << 10; ++i)
    p.server.buf[base + i] = static_cast<char>(i * 13 + 5);
  ibv_cq* spare = ibv_create_cq(p.server.id->verbs, 4, nullptr, nullptr, 0);
  REQUIRE(spare != nullptr);
  std::atomic<bool> stop{false}, spare_got{false};
  std::thread spinner([&] {
    ibv_wc wc;
    while (!stop.load())
      if (ibv_poll_cq(spare, 1, &wc) != 0) spare_got = true;
  });
  const auto raddr = reinterpret_cast<std::uintptr_t>(p.server.at(base));
  auto slot = [](std::size_t i) { return (i % kWindow) * kLen; };
  auto src = [](std::size_t i) { return ((i * 7) % 64) * kLen; };
  std::size_t posted = 0, done = 0;
  ibv_wc wc[32];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done < kReads && std::chrono::steady_clock::now() < until) {
    while (posted < kReads && posted - done < kWindow) {
      REQUIRE(p.client.post(IBV_WR_RDMA_READ, posted, slot(posted), kLen, raddr + src(posted),
                            p.server.mr->rkey) == 0);
      ++posted;
    }
    int k = ibv_poll_cq(p.client.scq, 32, wc);
    REQUIRE(k >= 0);
    for (int i = 0; i < k; ++i) {
      REQUIRE(wc[i].status == IBV_WC_SUCCESS);
      REQUIRE(wc[i].wr_id == done); // Reads complete in order (RFC 5040 §7.3)
      REQUIRE(std::memcmp(p.client.at(slot(done)), p.server.at(base + src(done)), kLen) == 0);
      ++done;
    }
  }
  REQUIRE(done == kReads);
  // Reads in flight while the responder's QP goes: each completes, read or flushed.
  for (std::size_t i = 0; i < kWindow; ++i)
    REQUIRE(p.client.post(IBV_WR_RDMA_READ, i, slot(i), kLen, raddr + src(i), p.server.mr->rkey) ==
            0);
  rdma_destroy_qp(p.server.id);
  std::size_t last = 0;
  const auto until2 = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (last < kWindow && std::chrono::steady_clock::now() < until2) {
    int k = ibv_poll_cq(p.client.scq, 32, wc);
    REQUIRE(k >= 0);
    for (int i = 0; i < k; ++i) {
      INFO("wr_id " << wc[i].wr_id << ": " << ibv_wc_status_str(wc[i].status));
      CHECK((wc[i].status == IBV_WC_SUCCESS || wc[i].status == IBV_WC_WR_FLUSH_ERR));
    }
    last += static_cast<std::size_t>(k);
  }
  CHECK(last == kWindow);
  stop = true;
  spinner.join();
  CHECK_FALSE(spare_got.load());
  CHECK(ibv_destroy_cq(spare) == 0);
}

TEST_CASE("RDMA Reads posted while earlier ones are unanswered: they go without a poll, in order",
          "[datapath]") {
  // Such a Read waits for the next drive (Qp::drive_reads): a poll, or the earlier Read's
  // response, whoever reads it. Here nobody polls until the data is in place: the progress
  // thread reads the first response and must send the Reads posted behind it.
  constexpr std::size_t kBig = 256 << 10, kLen = 4096, kSmall = 8, kAll = kBig + kSmall * kLen;
  ConnectedPair p;
  const std::size_t src = 512 << 10;
  for (std::size_t i = 0; i < kAll; ++i)
    p.server.buf[src + i] = static_cast<char>(i * 29 + 3);
  const auto raddr = reinterpret_cast<std::uintptr_t>(p.server.at(src));
  REQUIRE(p.client.post(IBV_WR_RDMA_READ, 0, 0, kBig, raddr, p.server.mr->rkey) == 0);
  for (std::size_t i = 0; i < kSmall; ++i) {
    const std::size_t off = kBig + i * kLen;
    REQUIRE(p.client.post(IBV_WR_RDMA_READ, 1 + i, off, kLen, raddr + off, p.server.mr->rkey) == 0);
  }
  const std::size_t last = kBig + (kSmall - 1) * kLen;
  CHECK(spin_until([&] { return placed(p.client.at(last), p.server.at(src + last), kLen); },
                   std::chrono::seconds(10)));
  std::vector<ibv_wc> wcs = poll_n(p.client.scq, kSmall + 1);
  REQUIRE(wcs.size() == kSmall + 1);
  for (std::size_t i = 0; i < wcs.size(); ++i) {
    CHECK(wcs[i].wr_id == i);
    CHECK(wcs[i].status == IBV_WC_SUCCESS);
  }
  CHECK(std::memcmp(p.client.at(0), p.server.at(src), kAll) == 0);
}

TEST_CASE("Writes posted back to back and then no poll: they land, each completes once, in order",
          "[datapath]") {
  // Posts that follow one another while the program polls its send CQ wait for its next poll
  // (Qp::drive_posted). This program polls once, posts a burst, and then spins on the memory
  // the Writes fill without polling again: the progress thread must send the burst.
  // Back to back is measured against what a transmitting post takes, so 64 KiB Writes posted
  // some microseconds apart (longer than the 2 us floor) form a burst as well.
  auto burst = [](std::size_t len, std::chrono::microseconds pace) {
    constexpr std::size_t kWrites = 8;
    ConnectedPair p;
    const std::size_t dst = 256 << 10;
    for (std::size_t i = 0; i < kWrites * len; ++i)
      p.client.buf[i] = static_cast<char>(i * 7 + 1);
    ibv_wc wc;
    REQUIRE(ibv_poll_cq(p.client.scq, 1, &wc) == 0); // "the program polls"
    for (std::size_t i = 0; i < kWrites; ++i) {
      const auto next = std::chrono::steady_clock::now() + pace;
      REQUIRE(p.client.post(IBV_WR_RDMA_WRITE, i, i * len, static_cast<std::uint32_t>(len),
                            reinterpret_cast<std::uintptr_t>(p.server.at(dst + i * len)),
                            p.server.mr->rkey) == 0);
      while (std::chrono::steady_clock::now() < next) {
      }
    }
    // The completions below say the Writes went to TCP, not that they were placed: the wait
    // sees every octet of all of them.
    CHECK(spin_until([&] { return placed(p.server.at(dst), p.client.at(0), kWrites * len); },
                     std::chrono::seconds(10)));
    std::vector<ibv_wc> wcs = poll_n(p.client.scq, kWrites);
    REQUIRE(wcs.size() == kWrites);
    for (std::size_t i = 0; i < kWrites; ++i) {
      CHECK(wcs[i].wr_id == i);
      CHECK(wcs[i].status == IBV_WC_SUCCESS);
    }
    ibv_wc extra;
    CHECK(ibv_poll_cq(p.client.scq, 1, &extra) == 0);
  };
  SECTION("64-octet Writes, as fast as the program posts") { burst(64, {}); }
  SECTION("64 KiB Writes, 5 us apart") { burst(64 << 10, std::chrono::microseconds(5)); }
}

TEST_CASE("a receive that frees a waiting Send, and then no poll: all that waited behind it is "
          "read",
          "[datapath]") {
  // A Send that finds no receive holds the stream behind it (the receive wait). The post of the
  // receive reads on up to a budget (kReleaseBudget, 256 KiB); through the stream ring it also
  // takes the doorbells of all that waited, so what lies beyond the budget must bring the
  // progress thread by itself. This program then spins on the memory the last Send fills and
  // never polls (QEMU's RDMA migration destination sleeps on its channel instead: the same
  // need, and its migration stalled when it was not met).
  constexpr std::uint32_t kBig = 700 << 10;
  constexpr std::size_t kAt = 4096;
  ConnectedPair p;
  // One exchange each way first: on the same-host path both streams are in the ring then.
  REQUIRE(p.server.post_recv(10, 0, 64) == 0);
  REQUIRE(p.client.post_recv(20, 0, 64) == 0);
  REQUIRE(p.client.post(IBV_WR_SEND, 0, 0, 64) == 0);
  REQUIRE(poll_n(p.server.rcq, 1).size() == 1);
  REQUIRE(p.server.post(IBV_WR_SEND, 0, 0, 64) == 0);
  REQUIRE(poll_n(p.client.rcq, 1).size() == 1);
  REQUIRE(poll_n(p.client.scq, 1).size() == 1);
  REQUIRE(poll_n(p.server.scq, 1).size() == 1);
  for (std::size_t i = 0; i < kBig; ++i)
    p.client.buf[kAt + i] = static_cast<char>(i * 13 + 5);
  REQUIRE(p.client.post(IBV_WR_SEND, 1, 0, 64) == 0);
  REQUIRE(p.client.post(IBV_WR_SEND, 2, kAt, kBig) == 0);
  // Both in the ring, or the socket, before any receive is posted.
  REQUIRE(poll_n(p.client.scq, 2, 2000).size() == 2);
  REQUIRE(p.server.post_recv(11, 0, 64) == 0);
  REQUIRE(p.server.post_recv(12, kAt, kBig) == 0);
  CHECK(spin_until([&] { return placed(p.server.at(kAt), p.client.at(kAt), kBig); },
                   std::chrono::seconds(10)));
  const std::vector<ibv_wc> got = poll_n(p.server.rcq, 2);
  REQUIRE(got.size() == 2);
  CHECK(got[0].wr_id == 11);
  CHECK(got[0].byte_len == 64);
  CHECK(got[1].wr_id == 12);
  CHECK(got[1].byte_len == kBig);
}

TEST_CASE("RDMA Reads in flight up to ORD when the peer is killed: all complete, none hang",
          "[datapath]") {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  self[n] = 0;
  std::string target(self);
  target = target.substr(0, target.rfind('/') + 1) + "uiwarp-datapath-read-target";
  const std::string port = std::to_string(20000 + getpid() % 20000);
  int out[2];
  REQUIRE(::pipe(out) == 0);
  pid_t peer = ::fork();
  REQUIRE(peer >= 0);
  if (peer == 0) { // a fresh process: exec, so nothing of this one's verbs state is shared
    ::dup2(out[1], 1);
    // Reads in flight are TCP's: the same-host path would copy each at its post.
    ::setenv("UIWARP_SAME_HOST", "off", 1);
    ::execl(target.c_str(), target.c_str(), port.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  FILE* from = ::fdopen(out[0], "r");
  char line[128] = {};
  REQUIRE(std::fgets(line, sizeof line, from) != nullptr); // LISTENING
  REQUIRE(std::string(line) == "LISTENING\n");

  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  REQUIRE(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(port)));
  REQUIRE(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&a), 5000) == 0);
  expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  REQUIRE(rdma_resolve_route(id, 5000) == 0);
  expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  Side c;
  c.opt.send_depth = 32;
  c.opt.buf_size = 16 << 20;
  c.ch = ch;
  c.setup(id);
  rdma_conn_param cp{};
  cp.initiator_depth = cp.responder_resources = 16;
  REQUIRE(rdma_connect(id, &cp) == 0);
  expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
  REQUIRE(std::fgets(line, sizeof line, from) != nullptr);
  unsigned long raddr = 0;
  unsigned rkey = 0;
  REQUIRE(std::sscanf(line, "%lu %u", &raddr, &rkey) == 2);

  // ORD (16) Reads of 1 MiB each: the responses are still streaming when the peer dies. The
  // peer is killed as soon as the first Read has completed: the responses have started, and the
  // rest (19 MiB) cannot all arrive in the time a SIGKILL takes. (A fixed head start let a fast
  // data path finish every Read before the kill.)
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  REQUIRE(ibv_query_qp(c.qp(), &qa, IBV_QP_MAX_QP_RD_ATOMIC, &qi) == 0);
  const int ord = std::max<int>(qa.max_rd_atomic, 1);
  for (int r = 0; r < ord + 4; ++r) // beyond ORD: these wait in the send queue
    REQUIRE(c.post(IBV_WR_RDMA_READ, r, 0, 1 << 20, raddr, rkey) == 0);
  std::vector<ibv_wc> done;
  ibv_wc wc[32];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done.empty() && std::chrono::steady_clock::now() < until) {
    int k = ibv_poll_cq(c.scq, 1, wc);
    REQUIRE(k >= 0);
    done.insert(done.end(), wc, wc + k);
  }
  REQUIRE(done.size() == 1);
  ::kill(peer, SIGKILL);
  ::waitpid(peer, nullptr, 0);
  std::fclose(from);

  // Every Read completes (some may have succeeded; the rest in error), in posting order.
  while (done.size() < static_cast<std::size_t>(ord + 4) &&
         std::chrono::steady_clock::now() < until) {
    int k = ibv_poll_cq(c.scq, 32, wc);
    REQUIRE(k >= 0);
    done.insert(done.end(), wc, wc + k);
  }
  REQUIRE(done.size() == static_cast<std::size_t>(ord + 4));
  bool failed_seen = false;
  for (std::size_t i = 0; i < done.size(); ++i) {
    CHECK(done[i].wr_id == i);
    if (done[i].status != IBV_WC_SUCCESS) failed_seen = true;
    if (failed_seen) CHECK(done[i].status != IBV_WC_SUCCESS); // nothing succeeds after a failure
  }
  CHECK(failed_seen);
  // The CM says the connection is gone.
  rdma_cm_event* e = nullptr;
  REQUIRE(rdma_get_cm_event(ch, &e) == 0);
  CHECK(e->event == RDMA_CM_EVENT_DISCONNECTED);
  rdma_ack_cm_event(e);
}
