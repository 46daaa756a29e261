// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// iwarp-demo: two libiwarp endpoints over a real TCP connection on loopback.
// They negotiate MPA revision 2 (RFC 6581), then the initiator sends a Send, an
// RDMA Write and an RDMA Read. Every frame put on the wire is decoded and
// printed, and the data is checked at the end. libiwarp does no I/O: this file
// is the I/O edge (sockets, poll), which is the part the provider replaces.
#include "iwarp/dump.hpp"
#include "iwarp/framing.hpp"
#include "iwarp/memory.hpp"
#include "iwarp/mpa_startup.hpp"
#include "iwarp/qp.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <optional>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <vector>

using namespace iwarp;

namespace {

class Fd {
public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~Fd() { reset(); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int get() const { return fd_; }

private:
  int fd_;
};

[[noreturn]] void die(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

// Decodes the bytes one endpoint writes, as a peer would, and prints each FPDU.
class WireTap final : public UlpduSink {
public:
  WireTap(std::string dir, bool crc, bool markers) : dir_(std::move(dir)), rx_(crc, markers) {
    rx_.set_sink(this);
  }
  void saw(ConstBytes b) { rx_.feed(b); }

private:
  std::optional<TermCode> ulpdu_begin(std::size_t len) override {
    buf_.assign(len, std::byte{0});
    return std::nullopt;
  }
  MutBytes ulpdu_dest(std::size_t off, std::size_t max) override {
    return MutBytes(buf_).subspan(off, max);
  }
  std::optional<TermCode> ulpdu_landed(std::size_t, std::size_t) override { return std::nullopt; }
  void ulpdu_end(std::optional<TermCode> err) override {
    std::printf("  %s FPDU, ULPDU %5zu octets: %s%s\n", dir_.c_str(), buf_.size(),
                describe_ulpdu(buf_).c_str(),
                err ? (" -- " + std::string(term_code_name(*err))).c_str() : ", CRC ok");
  }
  std::string dir_;
  FpduRx rx_;
  std::vector<std::byte> buf_;
};

struct Endpoint {
  Endpoint(const char* n, const char* a, Fd f, MpaStartup m)
      : name(n), arrow(a), fd(std::move(f)), mpa(std::move(m)) {}
  const char* name;
  const char* arrow;
  Fd fd;
  MpaStartup mpa;
  std::optional<Qp> qp;
  std::unique_ptr<WireTap> tap;
  std::vector<std::byte> early; // FPDU octets read together with the MPA frame
};

void write_mpa(Endpoint& e) {
  ConstBytes out = e.mpa.output();
  if (out.empty()) return;
  ssize_t n = ::send(e.fd.get(), out.data(), out.size(), MSG_NOSIGNAL);
  if (n < 0 && errno != EAGAIN) die("send");
  if (n > 0) {
    std::printf("  %s %s\n", e.arrow, describe_mpa_frame(out.first(n)).c_str());
    e.mpa.consume_output(static_cast<std::size_t>(n));
  }
}

void read_mpa(Endpoint& e) {
  std::byte buf[4096];
  ssize_t n = ::recv(e.fd.get(), buf, sizeof buf, 0);
  if (n < 0 && errno == EAGAIN) return;
  if (n < 0) die("recv");
  if (n == 0) {
    e.mpa.on_peer_closed();
    return;
  }
  std::size_t used = e.mpa.on_bytes(ConstBytes(buf, static_cast<std::size_t>(n)));
  e.early.insert(e.early.end(), buf + used, buf + n);
}

// One round of data-path I/O for an endpoint: write what is ready, read what came.
void pump(Endpoint& e) {
  std::vector<ConstBytes> pieces;
  e.qp->tx_gather(pieces, 64);
  if (!pieces.empty()) {
    std::vector<iovec> iov;
    for (ConstBytes p : pieces)
      iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
    ssize_t n = ::writev(e.fd.get(), iov.data(), static_cast<int>(iov.size()));
    if (n < 0 && errno != EAGAIN) die("writev");
    for (std::size_t i = 0, left = n > 0 ? static_cast<std::size_t>(n) : 0;
         i < pieces.size() && left; ++i) {
      std::size_t k = std::min(left, pieces[i].size());
      e.tap->saw(pieces[i].first(k));
      left -= k;
    }
    if (n > 0) e.qp->tx_advance(static_cast<std::size_t>(n));
  }
  for (;;) {
    // Read straight into wherever the engine wants the octets: header buffer,
    // receive buffer or registered memory (one copy, kernel to user).
    MutBytes dst = e.qp->rx_next();
    ssize_t n = ::recv(e.fd.get(), dst.data(), dst.size(), 0);
    if (n < 0 && errno == EAGAIN) break;
    if (n < 0) die("recv");
    if (n == 0) {
      e.qp->on_peer_closed(true);
      break;
    }
    e.qp->rx_advance(static_cast<std::size_t>(n));
  }
}

std::pair<Fd, Fd> tcp_pair() {
  Fd lst(::socket(AF_INET, SOCK_STREAM, 0));
  if (lst.get() < 0) die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (::bind(lst.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) die("bind");
  if (::listen(lst.get(), 1) < 0) die("listen");
  if (::getsockname(lst.get(), reinterpret_cast<sockaddr*>(&a), &alen) < 0) die("getsockname");
  Fd c(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  if (::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 && errno != EINPROGRESS)
    die("connect");
  Fd s(::accept4(lst.get(), nullptr, nullptr, SOCK_NONBLOCK));
  if (s.get() < 0) die("accept");
  int one = 1;
  ::setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::printf("TCP connection on 127.0.0.1:%u\n", ntohs(a.sin_port));
  return {std::move(c), std::move(s)};
}

void wait_readable(Endpoint& a, Endpoint& b) {
  pollfd p[2] = {{a.fd.get(), POLLIN, 0}, {b.fd.get(), POLLIN, 0}};
  ::poll(p, 2, 20);
}

std::vector<std::byte> bytes(const std::string& s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

std::string text(const std::vector<std::byte>& v, std::size_t n) {
  return std::string(reinterpret_cast<const char*>(v.data()), std::min(n, v.size()));
}

int run() {
  auto [cfd, sfd] = tcp_pair();
  auto now = MpaClock::now();
  MpaPolicy policy; // revision 2, CRC on, markers off
  policy.p2p = true;
  Endpoint ini("initiator", "initiator -> responder", std::move(cfd),
               MpaStartup::initiator(policy, bytes("uiwarp demo"), now));
  Endpoint rsp("responder", "responder -> initiator", std::move(sfd),
               MpaStartup::responder(policy, now));

  std::printf("\nMPA startup (RFC 5044 §7.1, RFC 6581):\n");
  for (int i = 0; i < 500; ++i) {
    write_mpa(ini);
    read_mpa(rsp);
    if (rsp.mpa.state() == MpaState::RequestReceived) rsp.mpa.accept(bytes("welcome"));
    write_mpa(rsp);
    read_mpa(ini);
    if (ini.mpa.state() == MpaState::Established && rsp.mpa.state() == MpaState::Established &&
        ini.mpa.output().empty())
      break;
    for (Endpoint* e : {&ini, &rsp})
      if (e->mpa.state() == MpaState::Failed || e->mpa.state() == MpaState::Rejected)
        throw std::runtime_error(std::string(e->name) + ": MPA failed: " + e->mpa.error().message);
    wait_readable(ini, rsp);
  }
  if (ini.mpa.state() != MpaState::Established || rsp.mpa.state() != MpaState::Established)
    throw std::runtime_error("MPA startup did not complete");
  const ConnParams& r = ini.mpa.result().conn;
  std::printf("negotiated: DDP/RDMAP version %u, CRC %s, markers %s/%s, P2P %s, IRD %u ORD %u\n",
              r.version, r.crc ? "on" : "off", r.markers_tx ? "on" : "off",
              r.markers_rx ? "on" : "off", r.p2p ? "on" : "off", r.ird, r.ord);
  std::printf("responder got private data \"%s\", initiator got \"%s\"\n",
              text(rsp.mpa.result().peer_private_data, 64).c_str(),
              text(ini.mpa.result().peer_private_data, 64).c_str());

  MemoryTable mem_ini, mem_rsp;
  constexpr std::size_t kMulpdu = 1024; // small FPDUs, so the demo shows segmentation
  QpConfig ci = qp_config_from(ini.mpa.result().conn, kMulpdu);
  QpConfig cr = qp_config_from(rsp.mpa.result().conn, kMulpdu);
  ini.qp.emplace(ci, mem_ini);
  rsp.qp.emplace(cr, mem_rsp);
  ini.tap = std::make_unique<WireTap>("initiator -> responder", ci.conn.crc, ci.conn.markers_tx);
  rsp.tap = std::make_unique<WireTap>("responder -> initiator", cr.conn.crc, cr.conn.markers_tx);
  for (Endpoint* e : {&ini, &rsp})
    e->qp->rx_feed(e->early);

  // Responder memory: a receive buffer, a Write target, a Read source.
  std::vector<std::byte> recv_buf(256), target(3000), source(2500);
  for (std::size_t i = 0; i < source.size(); ++i)
    source[i] = std::byte(i * 7 + 3);
  auto addr = [](std::vector<std::byte>& v) { return reinterpret_cast<std::uint64_t>(v.data()); };
  std::uint32_t recv_key =
      mem_rsp.add(1, recv_buf.data(), addr(recv_buf), recv_buf.size(), access::kLocalWrite);
  std::uint32_t target_key = mem_rsp.add(1, target.data(), addr(target), target.size(),
                                         access::kLocalWrite | access::kRemoteWrite);
  std::uint32_t source_key =
      mem_rsp.add(1, source.data(), addr(source), source.size(), access::kRemoteRead);
  // Initiator memory: the message, the Write source, the Read sink.
  std::vector<std::byte> msg = bytes("hello from the initiator over iWARP");
  std::vector<std::byte> wsrc(target.size()), sink(source.size());
  for (std::size_t i = 0; i < wsrc.size(); ++i)
    wsrc[i] = std::byte(i * 13 + 1);
  std::uint32_t msg_key = mem_ini.add(1, msg.data(), addr(msg), msg.size(), 0);
  std::uint32_t wsrc_key = mem_ini.add(1, wsrc.data(), addr(wsrc), wsrc.size(), 0);
  std::uint32_t sink_key =
      mem_ini.add(1, sink.data(), addr(sink), sink.size(), access::kLocalWrite);

  rsp.qp->post_recv({1, {{addr(recv_buf), static_cast<std::uint32_t>(recv_buf.size()), recv_key}}});
  SendWr send;
  send.wr_id = 10;
  send.opcode = WrOpcode::Send;
  send.sgl = {{addr(msg), static_cast<std::uint32_t>(msg.size()), msg_key}};
  SendWr write;
  write.wr_id = 11;
  write.opcode = WrOpcode::RdmaWrite;
  write.sgl = {{addr(wsrc), static_cast<std::uint32_t>(wsrc.size()), wsrc_key}};
  write.remote_stag = target_key;
  write.remote_addr = addr(target);
  SendWr read;
  read.wr_id = 12;
  read.opcode = WrOpcode::RdmaRead;
  read.sgl = {{addr(sink), static_cast<std::uint32_t>(sink.size()), sink_key}};
  read.remote_stag = source_key;
  read.remote_addr = addr(source);
  for (SendWr* w : {&send, &write, &read})
    if (ini.qp->post_send(*w) != PostError::None) throw std::runtime_error("post_send failed");

  std::printf("\nFull Operation (RFC 5040/5041 over MPA FPDUs, MULPDU %zu):\n", kMulpdu);
  int done_ini = 0, done_rsp = 0;
  for (int i = 0; i < 2000 && (done_ini < 3 || done_rsp < 1); ++i) {
    pump(ini);
    pump(rsp);
    for (Endpoint* e : {&ini, &rsp}) {
      while (auto c = e->qp->poll()) {
        std::printf("  %s completion: wr_id %llu %s, %u octets, %s\n", e->name,
                    static_cast<unsigned long long>(c->wr_id),
                    c->recv                            ? "receive"
                    : c->opcode == WcOpcode::RdmaRead  ? "RDMA Read"
                    : c->opcode == WcOpcode::RdmaWrite ? "RDMA Write"
                                                       : "Send",
                    c->byte_len, std::string(wc_status_name(c->status)).c_str());
        if (c->status != WcStatus::Success)
          throw std::runtime_error(std::string(e->name) + ": work request failed");
        (e == &ini ? done_ini : done_rsp)++;
      }
      if (e->qp->error())
        throw std::runtime_error(std::string(e->name) + ": " + e->qp->error()->message);
    }
    if (done_ini < 3 || done_rsp < 1) wait_readable(ini, rsp);
  }
  if (done_ini < 3 || done_rsp < 1) throw std::runtime_error("transfer did not complete");

  bool ok = text(recv_buf, msg.size()) == text(msg, msg.size()) && target == wsrc && sink == source;
  std::printf("\nreceived Send: \"%s\"\nRDMA Write data %s, RDMA Read data %s\n",
              text(recv_buf, msg.size()).c_str(), target == wsrc ? "verified" : "WRONG",
              sink == source ? "verified" : "WRONG");
  std::printf("%s\n", ok ? "demo OK" : "demo FAILED");
  return ok ? 0 : 1;
}

} // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "iwarp-demo: %s\n", e.what());
    return 1;
  }
}
