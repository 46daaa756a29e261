// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// uiwarpd's clients (clients.hpp): admission and the protocol hello.
#include "clients.hpp"

#include "systemd_activation.hpp"

#include <cerrno>
#include <fcntl.h>
#include <fstream>
#include <sys/socket.h>
#include <unistd.h>

namespace uiwarp::daemon {

std::string describe_process(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(f, name);
  return "pid " + std::to_string(pid) + " (" + (name.empty() ? "?" : name) + ")";
}

Clients::~Clients() {
  for (const auto& [fd, c] : clients_)
    ::close(fd);
}

ClientId Clients::accept(std::string* refused) {
  refused->clear();
  int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return -1;
  // One user's connections are not another's (SO_PEERCRED).
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) ||
      (!any_user_ && cred.uid != ::geteuid() && cred.uid != 0)) {
    *refused = "refused a client of uid " + std::to_string(cred.uid);
  } else if (!same_netns(listener_, fd)) {
    // Its TCP connections would be made from our network namespace, not its own.
    *refused =
        "refused a client (" + describe_process(cred.pid) + ") from another network namespace";
  }
  if (!refused->empty()) {
    ++refused_;
    ::close(fd);
    return -1;
  }
  Client& cl = clients_[fd];
  cl.uid = cred.uid;
  cl.pid = cred.pid;
  cl.process = describe_process(cred.pid);
  return fd;
}

Clients::Read Clients::read(ClientId c, proto::Packet* out, std::string* log) {
  auto it = clients_.find(c);
  if (it == clients_.end()) return Read::Gone;
  std::optional<proto::Packet> p = proto::recv(c);
  if (!p && (errno == EAGAIN || errno == EINTR)) return Read::Idle;
  if (!it->second.greeted) return hello(c, it->second, std::move(p), log);
  if (!p) {
    if (errno == EBADMSG)
      *log = "dropped " + it->second.process + ": a message uiwarpd cannot read";
    return Read::Gone;
  }
  *out = std::move(*p);
  return Read::Message;
}

// The first message must be a Hello of our version (daemon_proto.hpp).
Clients::Read Clients::hello(ClientId c, Client& cl, std::optional<proto::Packet> p,
                             std::string* log) {
  if (!p && errno != EBADMSG) return Read::Gone; // left before saying anything
  const proto::Hello* h = p ? std::get_if<proto::Hello>(&p->msg) : nullptr;
  if (p && p->fd >= 0) ::close(p->fd);
  const std::string who = cl.process;
  const std::string ours = "uiwarpd speaks protocol " + std::to_string(proto::kVersion);
  proto::HelloReply r;
  if (!h) {
    // An older shim or CLI starts with a request: it cannot read our answer either.
    r.status = EPROTO;
    r.reason = ours + " and expects a hello first: restart the program with this uiwarp";
    *log = "dropped " + who + ": no hello (a uiwarp older than this uiwarpd?)";
  } else if (h->version != proto::kVersion) {
    r.status = EPROTO;
    r.reason = ours + ", this program " + std::to_string(h->version) +
               (h->version > proto::kVersion
                    ? ": this uiwarpd is older than the program; restart it (the system one: "
                      "systemctl restart uiwarpd.service; a per-user one: stop it, and uiwarp-run "
                      "starts the new one)"
                    : ": the program runs an older uiwarp; restart the program");
    *log = "dropped " + who + ": protocol " + std::to_string(h->version) + ", ours " +
           std::to_string(proto::kVersion);
  } else {
    cl.greeted = true;
    cl.role = h->role;
    send(c, r);
    return Read::Handled;
  }
  send(c, r);
  return Read::Gone;
}

namespace {
// A client that lets this many messages pile up is not reading: it is dropped.
constexpr std::size_t kMaxBacklog = 4096;
} // namespace

int Clients::send(ClientId c, const proto::Message& m, int fd) {
  auto it = clients_.find(c);
  if (it == clients_.end()) return ENOTCONN;
  auto& q = it->second.backlog;
  int e = q.empty() ? proto::send(c, m, fd) : EAGAIN;
  if (e != EAGAIN) return e;
  if (q.size() >= kMaxBacklog) return ENOBUFS;
  q.emplace_back(m, Fd(fd >= 0 ? ::fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1));
  return 0;
}

bool Clients::blocked(ClientId c) const {
  auto it = clients_.find(c);
  return it != clients_.end() && !it->second.backlog.empty();
}

int Clients::on_writable(ClientId c) {
  auto it = clients_.find(c);
  if (it == clients_.end()) return ENOTCONN;
  auto& q = it->second.backlog;
  while (!q.empty()) {
    int e = proto::send(c, q.front().first, q.front().second.get());
    if (e == EAGAIN) return 0;
    if (e) return e;
    q.pop_front();
  }
  return 0;
}

void Clients::drop(ClientId c) {
  if (clients_.erase(c)) ::close(c);
}

const Client* Clients::find(ClientId c) const {
  auto it = clients_.find(c);
  return it == clients_.end() ? nullptr : &it->second;
}

} // namespace uiwarp::daemon
