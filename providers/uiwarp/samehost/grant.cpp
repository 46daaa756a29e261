// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The grant of a target's memory to its same-host peer (grant.hpp): an abstract unix socket,
// one request, one answer with two descriptors.
#include "grant.hpp"

#include "result.hpp"

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <utility>

namespace uiwarp::samehost {
namespace {

using detail::failed;
using detail::failed_call;
using detail::made;

constexpr std::uint64_t kRequestMagic = 0x74'6e'61'72'67'77'69'75; // "uiwgrant", little-endian
constexpr std::uint64_t kGranted = 1;
constexpr int kRequestWaitMs = 5; // the progress thread's longest wait for one request

struct Request {
  std::uint64_t magic = kRequestMagic;
  std::uint64_t nonce_lo = 0, nonce_hi = 0;
};

// The abstract address of `name`: a leading NUL, no terminator (unix(7)).
socklen_t abstract_address(const std::string& name, sockaddr_un& a) {
  a = {};
  a.sun_family = AF_UNIX;
  const std::size_t n = std::min(name.size(), sizeof a.sun_path - 1);
  std::memcpy(a.sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

bool peer_is(int fd, pid_t pid, uid_t uid) {
  ucred c{};
  socklen_t len = sizeof c;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) return false;
  return c.uid == uid && (pid == 0 || c.pid == pid);
}

} // namespace

std::string grant_name(pid_t pid, int table_fd) {
  return "uiwarp-grant-" + std::to_string(pid) + "-" + std::to_string(table_fd);
}

// ---- the target ------------------------------------------------------------------------------

Result<GrantServer> GrantServer::listen(int table_fd, Nonce nonce) {
  GrantServer g; // its destructor closes what a failure leaves open
  g.table_fd_ = table_fd;
  g.nonce_ = nonce;
  g.mem_fd_ = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  if (g.mem_fd_ < 0) return failed_call<GrantServer>(errno, "open(/proc/self/mem)");
  g.listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (g.listen_fd_ < 0) return failed_call<GrantServer>(errno, "socket(AF_UNIX)");
  const std::string name = grant_name(::getpid(), table_fd);
  sockaddr_un a;
  const socklen_t len = abstract_address(name, a);
  if (::bind(g.listen_fd_, reinterpret_cast<sockaddr*>(&a), len) != 0)
    return failed_call<GrantServer>(errno, "bind(@", name, ")");
  if (::listen(g.listen_fd_, 16) != 0) return failed_call<GrantServer>(errno, "listen");
  return made(std::move(g));
}

GrantServer::GrantServer(GrantServer&& o) noexcept { *this = std::move(o); }

GrantServer& GrantServer::operator=(GrantServer&& o) noexcept {
  if (this == &o) return *this;
  reset();
  listen_fd_ = std::exchange(o.listen_fd_, -1);
  table_fd_ = std::exchange(o.table_fd_, -1);
  mem_fd_ = std::exchange(o.mem_fd_, -1);
  nonce_ = std::exchange(o.nonce_, Nonce{});
  return *this;
}

GrantServer::~GrantServer() { reset(); }

void GrantServer::reset() noexcept {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (mem_fd_ >= 0) ::close(mem_fd_);
  listen_fd_ = mem_fd_ = table_fd_ = -1;
}

void GrantServer::serve_one() const {
  const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (c < 0) return;
  // The requester sends its request right after its connect, so it is here already but for a
  // requester preempted between the two calls: a process of this user is given kRequestWaitMs
  // for it (and asks again if closed). Another user's connection is closed at once.
  Request r;
  bool ok = peer_is(c, 0, ::geteuid());
  if (ok) {
    pollfd p{c, POLLIN, 0};
    ok = ::poll(&p, 1, kRequestWaitMs) == 1 &&
         ::recv(c, &r, sizeof r, MSG_DONTWAIT) == static_cast<ssize_t>(sizeof r) &&
         r.magic == kRequestMagic && r.nonce_lo == nonce_.lo && r.nonce_hi == nonce_.hi;
  }
  if (ok) {
    const int fds[2] = {table_fd_, mem_fd_};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
    std::uint64_t word = kGranted;
    iovec iov{&word, sizeof word};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr* h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof fds);
    std::memcpy(CMSG_DATA(h), fds, sizeof fds);
    [[maybe_unused]] const ssize_t n = ::sendmsg(c, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  ::close(c);
}

// ---- the requester ---------------------------------------------------------------------------

Result<GrantRequest> GrantRequest::start(pid_t pid, int table_fd, Nonce nonce) {
  GrantRequest g;
  g.pid_ = pid;
  g.fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (g.fd_ < 0) return failed_call<GrantRequest>(errno, "socket(AF_UNIX)");
  const std::string name = grant_name(pid, table_fd);
  sockaddr_un a;
  const socklen_t len = abstract_address(name, a);
  if (::connect(g.fd_, reinterpret_cast<sockaddr*>(&a), len) != 0)
    return failed_call<GrantRequest>(errno, "connect(@", name,
                                     ") (the peer's grant of its memory; another network "
                                     "namespace has none)");
  // The request at once, before the target accepts (a unix socket queues it): the target's
  // wait for it (kRequestWaitMs) then never depends on this thread being scheduled again.
  const Request r{kRequestMagic, nonce.lo, nonce.hi};
  if (::send(g.fd_, &r, sizeof r, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof r))
    return failed_call<GrantRequest>(errno, "send(@", name, ")");
  // Before any answer is read: descriptors from a listener that is not the target are never
  // taken. Such a listener has had the nonce, which opens nothing without the table's
  // descriptor, and the target answers only its own user.
  if (!peer_is(g.fd_, pid, ::geteuid()))
    return failed<GrantRequest>("@" + name + " is not pid " + std::to_string(pid) + "'s");
  return made(std::move(g));
}

GrantRequest::GrantRequest(GrantRequest&& o) noexcept { *this = std::move(o); }

GrantRequest& GrantRequest::operator=(GrantRequest&& o) noexcept {
  if (this == &o) return *this;
  reset();
  fd_ = std::exchange(o.fd_, -1);
  pid_ = std::exchange(o.pid_, 0);
  return *this;
}

GrantRequest::~GrantRequest() { reset(); }

void GrantRequest::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<GrantRequest::Granted> GrantRequest::poll() {
  std::uint64_t word = 0;
  iovec iov{&word, sizeof word};
  int fds[2] = {-1, -1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(fd_, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return {}; // not yet
  if (n < 0) return failed_call<Granted>(errno, "recvmsg (the peer's grant)");
  const cmsghdr* h = CMSG_FIRSTHDR(&m);
  if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
      h->cmsg_len == CMSG_LEN(sizeof fds))
    std::memcpy(fds, CMSG_DATA(h), sizeof fds);
  if (n != sizeof word || word != kGranted || fds[0] < 0 || fds[1] < 0) {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    return n == 0 ? failed<Granted>("the peer refused its grant (closed)", ECONNRESET)
                  : failed<Granted>("the peer's grant is malformed");
  }
  reset(); // one answer per request
  return made(Granted{fds[0], fds[1]});
}

} // namespace uiwarp::samehost
