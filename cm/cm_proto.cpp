// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "cm_proto.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <sys/uio.h>
#include <unistd.h>

namespace uiwarp::cm {

namespace {

class Writer {
public:
  void u8(std::uint8_t v) { b_.push_back(v); }
  void u16(std::uint16_t v) {
    for (int i = 0; i < 2; ++i)
      u8(std::uint8_t(v >> (8 * i)));
  }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i)
      u8(std::uint8_t(v >> (8 * i)));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i)
      u8(std::uint8_t(v >> (8 * i)));
  }
  void bytes(const void* p, std::size_t n) {
    u32(static_cast<std::uint32_t>(n));
    auto* c = static_cast<const std::uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
  }
  void addr(const sockaddr_storage& a) {
    std::size_t n = a.ss_family == AF_INET6  ? sizeof(sockaddr_in6)
                    : a.ss_family == AF_INET ? sizeof(sockaddr_in)
                                             : 0;
    bytes(&a, n);
  }
  std::vector<std::uint8_t> take() { return std::move(b_); }

private:
  std::vector<std::uint8_t> b_;
};

class Reader {
public:
  Reader(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  bool ok() const { return ok_; }
  std::uint64_t uint(int bytes) {
    if (n_ < static_cast<std::size_t>(bytes)) {
      ok_ = false;
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= std::uint64_t(p_[i]) << (8 * i);
    p_ += bytes;
    n_ -= static_cast<std::size_t>(bytes);
    return v;
  }
  std::vector<std::uint8_t> bytes(std::size_t max) {
    std::size_t len = static_cast<std::size_t>(uint(4));
    if (!ok_ || len > n_ || len > max) {
      ok_ = false;
      return {};
    }
    std::vector<std::uint8_t> v(p_, p_ + len);
    p_ += len;
    n_ -= len;
    return v;
  }
  sockaddr_storage addr() {
    sockaddr_storage a{};
    auto v = bytes(sizeof a);
    std::copy(v.begin(), v.end(), reinterpret_cast<std::uint8_t*>(&a));
    return a;
  }

private:
  const std::uint8_t* p_;
  std::size_t n_;
  bool ok_ = true;
};

} // namespace

std::vector<std::uint8_t> encode(const Msg& m) {
  Writer w;
  w.u16(static_cast<std::uint16_t>(m.type));
  w.u64(m.id);
  w.u64(m.token);
  w.u32(static_cast<std::uint32_t>(m.status));
  w.addr(m.src);
  w.addr(m.dst);
  w.bytes(m.private_data.data(), m.private_data.size());
  w.u32(m.ird);
  w.u32(m.ord);
  w.u32(m.backlog);
  w.u32(m.timeout_ms);
  const ConnParams& p = m.params;
  for (std::uint32_t v : {p.version, p.crc, p.markers_tx, p.markers_rx, p.ird, p.ord, p.initiator,
                          static_cast<std::uint32_t>(p.rtr), p.peer_ird, p.peer_ord, p.large_fpdu})
    w.u32(v);
  w.bytes(m.reason.data(), m.reason.size());
  w.u32(static_cast<std::uint32_t>(m.tos));
  w.u32(static_cast<std::uint32_t>(m.afonly));
  return w.take();
}

std::optional<Msg> decode(const std::uint8_t* p, std::size_t n) {
  Reader r(p, n);
  Msg m;
  m.type = static_cast<MsgType>(r.uint(2));
  m.id = r.uint(8);
  m.token = r.uint(8);
  m.status = static_cast<std::int32_t>(r.uint(4));
  m.src = r.addr();
  m.dst = r.addr();
  m.private_data = r.bytes(1024);
  m.ird = static_cast<std::uint32_t>(r.uint(4));
  m.ord = static_cast<std::uint32_t>(r.uint(4));
  m.backlog = static_cast<std::uint32_t>(r.uint(4));
  m.timeout_ms = static_cast<std::uint32_t>(r.uint(4));
  ConnParams& c = m.params;
  for (std::uint32_t* v :
       {&c.version, &c.crc, &c.markers_tx, &c.markers_rx, &c.ird, &c.ord, &c.initiator})
    *v = static_cast<std::uint32_t>(r.uint(4));
  c.rtr = static_cast<std::int32_t>(r.uint(4));
  c.peer_ird = static_cast<std::uint32_t>(r.uint(4));
  c.peer_ord = static_cast<std::uint32_t>(r.uint(4));
  c.large_fpdu = static_cast<std::uint32_t>(r.uint(4));
  auto reason = r.bytes(1024);
  m.reason.assign(reason.begin(), reason.end());
  m.tos = static_cast<std::int32_t>(r.uint(4));
  m.afonly = static_cast<std::int32_t>(r.uint(4));
  if (!r.ok()) return std::nullopt;
  return m;
}

int send_msg(int sock, const Msg& m, int fd) {
  std::vector<std::uint8_t> b = encode(m);
  iovec iov{b.data(), b.size()};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    h.msg_control = ctl;
    h.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &h, MSG_NOSIGNAL);
    if (n >= 0) return 0;
    if (errno != EINTR) return errno;
  }
}

std::optional<Msg> recv_msg(int sock, int* fd_out) {
  if (fd_out) *fd_out = -1;
  std::uint8_t buf[kMaxMsg];
  iovec iov{buf, sizeof buf};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  ssize_t n;
  do
    n = ::recvmsg(sock, &h, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0) {
    if (n == 0) errno = 0;
    return std::nullopt;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      if (fd_out)
        *fd_out = fd;
      else
        ::close(fd);
    }
  }
  auto m = decode(buf, static_cast<std::size_t>(n));
  if (!m) {
    if (fd_out && *fd_out >= 0) ::close(*fd_out);
    if (fd_out) *fd_out = -1;
    errno = EBADMSG;
  }
  return m;
}

std::string addr_string(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (a.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

} // namespace uiwarp::cm
