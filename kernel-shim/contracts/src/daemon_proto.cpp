// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The uiwarpd client protocol's encoding (daemon_proto.hpp). Each message lists its fields once
// (fields() below), and the same list writes and reads it: little-endian integers, length-
// prefixed octet strings with a limit, addresses as the sockaddr of their family. The message
// type is the variant's index plus one: append new messages at the end of Message.
#include "uiwarp/daemon_proto.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

namespace uiwarp::proto {

namespace {

constexpr std::size_t kMaxString = 1024; // private data, reasons, status lines

class Writer {
public:
  template <class T> void operator()(const T& v) { put(v); }
  Bytes take() { return std::move(b_); }

private:
  void uint(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      b_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  template <class T> void put(const T& v) { uint(static_cast<std::uint64_t>(v), sizeof(T)); }
  void blob(const void* p, std::size_t n) {
    uint(n, 4);
    auto* c = static_cast<const std::uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
  }
  void put(const Bytes& v) { blob(v.data(), v.size()); }
  void put(const std::string& v) { blob(v.data(), v.size()); }
  void put(const sockaddr_storage& a) {
    blob(&a, a.ss_family == AF_INET6  ? sizeof(sockaddr_in6)
             : a.ss_family == AF_INET ? sizeof(sockaddr_in)
                                      : 0);
  }
  void put(const iwarp::ConnParams& p) {
    for (std::uint64_t v :
         {std::uint64_t{p.version}, std::uint64_t{p.crc}, std::uint64_t{p.markers_tx},
          std::uint64_t{p.markers_rx}, std::uint64_t{p.ird}, std::uint64_t{p.ord},
          std::uint64_t{p.peer_ird}, std::uint64_t{p.peer_ord}, std::uint64_t{p.initiator},
          std::uint64_t{p.p2p}, static_cast<std::uint64_t>(p.rtr), std::uint64_t{p.large_fpdu},
          std::uint64_t{p.rfc7306}})
      uint(v, 2);
    uint(p.recv_wait_ms, 4);
    put(p.same_host);
    put(p.peer_same_host);
    put(p.peer_off_host);
  }
  // A presence octet, then the offer's kSameHostOfferLen octets as the MPA Reply carries them.
  void put(const std::optional<iwarp::SameHostOffer>& o) {
    put(o.has_value());
    if (!o) return;
    std::byte raw[iwarp::kSameHostOfferLen];
    o->encode(raw);
    for (std::byte x : raw)
      b_.push_back(static_cast<std::uint8_t>(x));
  }
  Bytes b_;
};

class Reader {
public:
  Reader(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  template <class T> void operator()(T& v) { get(v); }
  bool done() const { return ok_ && n_ == 0; }

private:
  std::uint64_t uint(int n) {
    if (n_ < static_cast<std::size_t>(n)) {
      ok_ = false;
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= std::uint64_t{p_[i]} << (8 * i);
    p_ += n;
    n_ -= static_cast<std::size_t>(n);
    return v;
  }
  template <class T> void get(T& v) { v = static_cast<T>(uint(sizeof(T))); }
  void get(bool& v) {
    std::uint64_t x = uint(1);
    if (x > 1) ok_ = false;
    v = x != 0;
  }
  std::size_t blob_len(std::size_t max) {
    auto len = static_cast<std::size_t>(uint(4));
    if (!ok_ || len > n_ || len > max) {
      ok_ = false;
      return 0;
    }
    return len;
  }
  void get(Bytes& v) {
    std::size_t len = blob_len(kMaxString);
    v.assign(p_, p_ + len);
    p_ += len;
    n_ -= len;
  }
  void get(std::string& v) {
    std::size_t len = blob_len(kMaxString);
    v.assign(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    n_ -= len;
  }
  void get(sockaddr_storage& a) {
    a = sockaddr_storage{};
    std::size_t len = blob_len(sizeof a);
    std::memcpy(&a, p_, len);
    p_ += len;
    n_ -= len;
    // Only what the writer sends: an empty address, or a whole one of its family.
    if ((len == 0 && a.ss_family == 0) || (len == sizeof(sockaddr_in) && a.ss_family == AF_INET) ||
        (len == sizeof(sockaddr_in6) && a.ss_family == AF_INET6))
      return;
    ok_ = false;
  }
  void get(iwarp::ConnParams& p) {
    auto u = [&] { return uint(2); };
    p.version = static_cast<std::uint8_t>(u());
    p.crc = u() != 0;
    p.markers_tx = u() != 0;
    p.markers_rx = u() != 0;
    p.ird = static_cast<std::uint16_t>(u());
    p.ord = static_cast<std::uint16_t>(u());
    p.peer_ird = static_cast<std::uint16_t>(u());
    p.peer_ord = static_cast<std::uint16_t>(u());
    p.initiator = u() != 0;
    p.p2p = u() != 0;
    std::uint64_t rtr = u();
    if (rtr > static_cast<std::uint64_t>(iwarp::RtrType::Read)) ok_ = false;
    p.rtr = static_cast<iwarp::RtrType>(rtr);
    p.large_fpdu = u() != 0;
    p.rfc7306 = u() != 0;
    p.recv_wait_ms = static_cast<std::uint32_t>(uint(4));
    get(p.same_host);
    get(p.peer_same_host);
    get(p.peer_off_host);
  }
  // Only a valid offer (magic and version) is sent: anything else is not a message.
  void get(std::optional<iwarp::SameHostOffer>& o) {
    bool present = false;
    get(present);
    o.reset();
    if (!ok_ || !present) return;
    if (n_ < iwarp::kSameHostOfferLen) {
      ok_ = false;
      return;
    }
    const iwarp::SameHostOffer x =
        iwarp::SameHostOffer::decode(reinterpret_cast<const std::byte*>(p_));
    p_ += iwarp::kSameHostOfferLen;
    n_ -= iwarp::kSameHostOfferLen;
    if (!x.valid()) {
      ok_ = false;
      return;
    }
    o = x;
  }
  const std::uint8_t* p_;
  std::size_t n_;
  bool ok_ = true;
};

// The fields of each message, in wire order: one list for both directions.
template <class Io> void fields(Io& io, Hello& m) { io(m.version), io(m.role); }
template <class Io> void fields(Io& io, HelloReply& m) {
  io(m.version), io(m.status), io(m.reason);
}
template <class Io> void fields(Io& io, Listen& m) {
  io(m.id), io(m.addr), io(m.backlog), io(m.tos), io(m.policy), io(m.device_policies);
}
template <class Io> void fields(Io& io, ListenReply& m) { io(m.id), io(m.status), io(m.reason); }
template <class Io> void fields(Io& io, Unlisten& m) { io(m.id); }
template <class Io> void fields(Io& io, Connect& m) {
  io(m.id), io(m.src), io(m.dst), io(m.private_data), io(m.ird), io(m.ord), io(m.timeout_ms),
      io(m.tos), io(m.policy);
}
template <class Io> void fields(Io& io, ConnectReply& m) {
  io(m.id), io(m.status), io(m.reason), io(m.params), io(m.private_data), io(m.src), io(m.dst);
}
template <class Io> void fields(Io& io, ConnRequest& m) {
  io(m.listen_id), io(m.token), io(m.src), io(m.dst), io(m.private_data), io(m.ird), io(m.ord),
      io(m.same_host);
}
template <class Io> void fields(Io& io, Accept& m) {
  io(m.token), io(m.private_data), io(m.ird), io(m.ord), io(m.same_host_offer);
}
template <class Io> void fields(Io& io, AcceptReply& m) {
  io(m.token), io(m.status), io(m.reason), io(m.params), io(m.src), io(m.dst);
}
template <class Io> void fields(Io& io, Reject& m) { io(m.token), io(m.private_data); }
template <class Io> void fields(Io& io, Resolve& m) { io(m.id), io(m.dst); }
template <class Io> void fields(Io& io, ResolveReply& m) {
  io(m.id), io(m.status), io(m.src), io(m.netdev);
}
template <class Io> void fields(Io& io, Status& m) {
  io(m.connections_only), io(m.closed), io(m.json);
}
template <class Io> void fields(Io& io, StatusLine& m) { io(m.text); }
template <class Io> void fields(Io&, StatusEnd&) {}
template <class Io> void fields(Io& io, IbConnect& m) {
  io(m.id), io(m.local), io(m.peer), io(m.local_qpn), io(m.peer_qpn), io(m.ird), io(m.ord),
      io(m.timeout_ms), io(m.initiator), io(m.same_host_offer);
}
template <class Io> void fields(Io& io, Closed& m) {
  io(m.local), io(m.peer), io(m.qp_num), io(m.reason), io(m.drive), io(m.path);
}
template <class Io> void fields(Io& io, Attached& m) {
  io(m.local), io(m.peer), io(m.qp_num), io(m.device), io(m.path);
}
template <class Io> void fields(Io& io, Path& m) {
  io(m.local), io(m.peer), io(m.qp_num), io(m.text);
}

// The variant alternative with wire type `t` (index + 1), default-constructed.
template <std::size_t I = 0> std::optional<Message> make(std::uint16_t t) {
  if constexpr (I < std::variant_size_v<Message>) {
    if (t == I + 1) return Message(std::in_place_index<I>);
    return make<I + 1>(t);
  } else {
    return std::nullopt;
  }
}

int sys_close(int fd) { return static_cast<int>(::syscall(SYS_close, fd)); }

} // namespace

Bytes encode(const Message& m) {
  Writer w;
  w(static_cast<std::uint16_t>(m.index() + 1));
  Message copy = m; // fields() takes the message by reference, for reading as well
  std::visit([&](auto& msg) { fields(w, msg); }, copy);
  return w.take();
}

std::optional<Message> decode(const std::uint8_t* p, std::size_t n) {
  if (n < 2) return std::nullopt;
  auto m = make(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
  if (!m) return std::nullopt;
  Reader r(p + 2, n - 2);
  std::visit([&](auto& msg) { fields(r, msg); }, *m);
  if (!r.done()) return std::nullopt;
  return m;
}

int send(int sock, const Message& m, int fd) {
  Bytes b = encode(m);
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
    if (::sendmsg(sock, &h, MSG_NOSIGNAL) >= 0) return 0;
    if (errno != EINTR) return errno;
  }
}

std::optional<Packet> recv(int sock) {
  std::uint8_t buf[kMaxPacket];
  iovec iov{buf, sizeof buf};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  // Room for one socket: the kernel closes any further ones a client might send (MSG_CTRUNC).
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
  int fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)))
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  auto m = decode(buf, static_cast<std::size_t>(n));
  if (!m || (h.msg_flags & MSG_TRUNC)) {
    if (fd >= 0) sys_close(fd);
    errno = EBADMSG;
    return std::nullopt;
  }
  return Packet{std::move(*m), fd};
}

int connect_daemon(const std::string& path, Role role, std::string* err) {
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  if (path.size() >= sizeof sun.sun_path) {
    *err = "uiwarpd socket path too long: " + path;
    if (s >= 0) sys_close(s);
    return -1;
  }
  std::memcpy(sun.sun_path, path.c_str(), path.size());
  if (s < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&sun), sizeof sun)) {
    *err = "cannot reach uiwarpd at " + path + " (" + std::strerror(errno) + ")";
    if (s >= 0) sys_close(s);
    return -1;
  }
  const std::string restart =
      "; restart it (the system one: systemctl restart uiwarpd.service; a per-user one: stop "
      "it, and uiwarp-run starts the new one)";
  int e = send(s, Hello{kVersion, role});
  pollfd pfd{s, POLLIN, 0};
  std::optional<Packet> r;
  if (!e && ::poll(&pfd, 1, 5000) == 1) r = recv(s);
  const HelloReply* hr = r ? std::get_if<HelloReply>(&r->msg) : nullptr;
  if (!hr || hr->status) {
    if (hr)
      *err = "uiwarpd at " + path + ": " + hr->reason;
    else
      *err = "uiwarpd at " + path + " does not answer this program's hello (protocol " +
             std::to_string(kVersion) + "): it is probably older than this program" + restart;
    if (r && r->fd >= 0) sys_close(r->fd);
    sys_close(s);
    return -1;
  }
  return s;
}

std::string addr_string(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (a.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in->sin6_port));
  }
  return "?";
}

} // namespace uiwarp::proto
