// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// UCMA emulation: every command librdmacm 44 issues, answered the way the
// kernel's rdma_cm answers them for an iWARP device:
//  - INIT_QP_ATTR masks of iw_cm_init_qp_attr (STATE|ACCESS|PORT, RTS: PORT);
//  - CONNECT completes with ESTABLISHED, never CONNECT_RESPONSE, and ACCEPT
//    returns once the MPA Reply is out and the QP is in RTS;
//  - DESTROY_ID reports exactly the events delivered for the id (a
//    CONNECT_REQUEST counts against the listener).
// Connection set-up is uiwarpd's (cm/cm_proto.hpp); the connected socket goes
// to the provider through the ops it registered (provider_api.h).
#include "ucma.hpp"

#include "cm_proto.hpp"
#include "uiwarp/guid.hpp"
#include "uiwarp/provider_api.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <endian.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <map>
#include <mutex>
#include <net/if.h>
#include <netinet/in.h>
#include <optional>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>
#include <string>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace uiwarp::ucma {

namespace {

using cm::Msg;
using cm::MsgType;

// Event numbers of the UCMA ABI (enum rdma_cm_event_type); <rdma/rdma_cma.h>
// cannot be included together with the kernel's <rdma/rdma_user_cm.h>.
enum : std::uint32_t {
  RDMA_CM_EVENT_ADDR_RESOLVED = 0,
  RDMA_CM_EVENT_ADDR_ERROR = 1,
  RDMA_CM_EVENT_ROUTE_RESOLVED = 2,
  RDMA_CM_EVENT_CONNECT_REQUEST = 4,
  RDMA_CM_EVENT_CONNECT_ERROR = 6,
  RDMA_CM_EVENT_UNREACHABLE = 7,
  RDMA_CM_EVENT_REJECTED = 8,
  RDMA_CM_EVENT_ESTABLISHED = 9,
  RDMA_CM_EVENT_DISCONNECTED = 10,
};

// Raw system calls: our own fds must not come back through the interposers.
ssize_t sys_write(int fd, const void* b, std::size_t n) { return ::syscall(SYS_write, fd, b, n); }
ssize_t sys_read(int fd, void* b, std::size_t n) { return ::syscall(SYS_read, fd, b, n); }
int sys_close(int fd) { return static_cast<int>(::syscall(SYS_close, fd)); }

// ---- devices: the generated sysfs tree names each device's netdev and GUID ----

struct Device {
  std::string name, netdev;
  std::uint64_t guid_be = 0; // as ibv_get_device_guid() returns it
};

std::vector<Device> devices() {
  std::vector<Device> out;
  const char* sysfs = std::getenv("SYSFS_PATH");
  if (!sysfs) return out;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(sysfs) + "/class/infiniband", ec)) {
    Device d;
    d.name = e.path().filename();
    std::ifstream nd(e.path() / "uiwarp_netdev"), g(e.path() / "node_guid");
    std::getline(nd, d.netdev);
    std::string text;
    std::getline(g, text);
    auto guid = parse_guid(text);
    if (d.netdev.empty() || !guid) continue;
    d.guid_be = htobe64(*guid);
    out.push_back(d);
  }
  std::sort(out.begin(), out.end(),
            [](const Device& l, const Device& r) { return l.name < r.name; });
  return out;
}

bool is_wildcard(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (a.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr);
  return true;
}

bool same_ip(const sockaddr* a, const sockaddr_storage& b) {
  if (!a || a->sa_family != b.ss_family) return false;
  if (a->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
  return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, 16) == 0;
}

// The uiwarp device of the netdev that owns `ip` (the first device for a wildcard).
std::optional<Device> device_for(const sockaddr_storage& ip) {
  std::vector<Device> devs = devices();
  if (devs.empty()) return std::nullopt;
  if (is_wildcard(ip)) return devs.front();
  std::string ifname;
  ifaddrs* ifa = nullptr;
  if (::getifaddrs(&ifa) == 0) {
    for (ifaddrs* i = ifa; i; i = i->ifa_next)
      if (same_ip(i->ifa_addr, ip)) {
        ifname = i->ifa_name;
        break;
      }
    ::freeifaddrs(ifa);
  }
  for (const Device& d : devs)
    if (d.netdev == ifname) return d;
  return std::nullopt;
}

socklen_t addr_len(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::uint16_t port_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port
                                 : reinterpret_cast<const sockaddr_in*>(&a)->sin_port;
}
void set_port(sockaddr_storage& a, std::uint16_t port_be) {
  if (a.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&a)->sin6_port = port_be;
  else
    reinterpret_cast<sockaddr_in*>(&a)->sin_port = port_be;
}

// The kernel ABI carries addresses in sockaddr_in6 or __kernel_sockaddr_storage fields.
sockaddr_storage from_abi(const void* p, std::size_t max) {
  sockaddr_storage a{};
  std::memcpy(&a, p, std::min(max, sizeof a));
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) a.ss_family = 0;
  return a;
}
void to_abi(void* p, std::size_t max, const sockaddr_storage& a) {
  std::memset(p, 0, max);
  std::memcpy(p, &a, std::min<std::size_t>(max, addr_len(a)));
}

// ---- state ------------------------------------------------------------------------------

struct Event {
  rdma_ucm_event_resp resp{};
  std::uint32_t charged_to = 0; // the id whose events_reported counts it
};

struct Channel {
  std::deque<Event> q;
  std::uint64_t gen = 0; // tells this channel from a later one that reuses its fd number
};

struct Id {
  std::uint32_t handle = 0;
  std::uint64_t uid = 0;
  int channel = -1;
  std::uint16_t ps = 0;
  std::uint8_t qp_type = 0;
  sockaddr_storage src{}, dst{};
  bool addr_resolved = false;
  bool listening = false;
  bool iw = false; // has an iw_cm id (kernel): connect, listen or a request child
  bool child = false;
  std::uint64_t token = 0; // child: uiwarpd's handle for Accept/Reject
  bool accepted = false;
  bool connecting = false;
  bool connected = false;
  bool disconnected = false; // DISCONNECTED reported
  std::uint32_t qp_num = 0;
  std::uint32_t events_reported = 0;
  std::optional<Device> dev;
  int tos = -1;    // RDMA_OPTION_ID_TOS, applied to the TCP socket by uiwarpd
  int afonly = -1; // RDMA_OPTION_ID_AFONLY, applied to the listener (IPV6_V6ONLY)
};

class Ucma {
public:
  static Ucma& get() {
    static Ucma* u = new Ucma; // never destroyed: other threads may still be inside
    return *u;
  }

  int open_channel(int flags) {
    int fd = ::eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC | ((flags & O_NONBLOCK) ? EFD_NONBLOCK : 0));
    if (fd < 0) return -1;
    std::lock_guard<std::mutex> lock(mu_);
    channels_[fd].gen = ++channel_gen_;
    return fd;
  }
  bool is_channel(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    return channels_.count(fd) != 0;
  }
  void closed(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!channels_.erase(fd)) return;
    for (auto it = ids_.begin(); it != ids_.end();) {
      if (it->second.channel == fd) {
        release(it->second);
        it = ids_.erase(it);
      } else {
        ++it;
      }
    }
  }

  ssize_t command(int fd, const void* buf, std::size_t len);

  void register_provider(const uiwarp_provider_ops* ops) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ops && ops->abi == UIWARP_PROVIDER_ABI) provider_ = ops;
  }

  void qp_event(std::uint32_t qp_num, uiwarp_qp_event, const char*) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [h, id] : ids_) {
      if (id.qp_num == qp_num && id.connected && !id.disconnected) {
        id.disconnected = true;
        queue(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      }
    }
  }

private:
  Ucma() = default;

  // ---- events ----
  void queue(Id& id, std::uint32_t event, std::int32_t status, Event e = {}) {
    auto ch = channels_.find(id.channel);
    if (ch == channels_.end()) return;
    if (!e.resp.uid) e.resp.uid = id.uid;
    if (!e.resp.id) e.resp.id = id.handle; // a CONNECT_REQUEST names the new id instead
    e.resp.event = event;
    e.resp.status = static_cast<std::uint32_t>(status);
    if (!e.charged_to) e.charged_to = id.handle;
    ch->second.q.push_back(e);
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = sys_write(id.channel, &one, sizeof one);
    cv_.notify_all();
  }

  int get_event(int fd, const rdma_ucm_get_event& cmd, std::unique_lock<std::mutex>& lock) {
    bool nonblock = ::fcntl(fd, F_GETFL) & O_NONBLOCK;
    auto first = channels_.find(fd);
    if (first == channels_.end()) return EBADF;
    const std::uint64_t gen = first->second.gen;
    for (;;) {
      auto ch = channels_.find(fd);
      if (ch == channels_.end() || ch->second.gen != gen) {
        // Closed under a blocked reader (rping's CM thread, while main tears down): the
        // kernel's read keeps the file and sleeps on; it does not fail. Do the same.
        if (nonblock) return EAGAIN;
        cv_.wait(lock);
        continue;
      }
      if (!ch->second.q.empty()) {
        Event e = ch->second.q.front();
        ch->second.q.pop_front();
        std::uint64_t v;
        [[maybe_unused]] ssize_t n = sys_read(fd, &v, sizeof v); // one per event (semaphore)
        auto it = ids_.find(e.charged_to);
        if (it != ids_.end()) ++it->second.events_reported;
        std::memcpy(reinterpret_cast<void*>(cmd.response), &e.resp, sizeof e.resp);
        return 0;
      }
      if (nonblock) return EAGAIN;
      cv_.wait(lock);
    }
  }

  // ---- uiwarpd ----
  bool daemon_connect(std::string* err) {
    if (daemon_fd_ >= 0) return true;
    // uiwarp-run starts uiwarpd for this user and network namespace and names its socket.
    const char* env = std::getenv("UIWARPD_SOCKET");
    if (!env || !*env) {
      *err = "UIWARPD_SOCKET is not set; run the program with uiwarp-run";
      return false;
    }
    std::string path = env;
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    std::snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path.c_str());
    if (s < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&sun), sizeof sun)) {
      *err = "cannot reach uiwarpd at " + path + " (" + std::strerror(errno) +
             "); run the program with uiwarp-run, which starts it";
      if (s >= 0) sys_close(s);
      return false;
    }
    daemon_fd_ = s;
    std::thread([this, s] { reader(s); }).detach();
    return true;
  }

  int to_daemon(const Msg& m) {
    std::string err;
    if (!daemon_connect(&err)) {
      std::fprintf(stderr, "uiwarp: %s\n", err.c_str());
      return ENOTCONN;
    }
    return cm::send_msg(daemon_fd_, m);
  }

  // Waits for the reply of type `t` to `key` (the lock is released meanwhile).
  std::optional<Msg> await(MsgType t, std::uint64_t key, std::unique_lock<std::mutex>& lock) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      for (auto it = replies_.begin(); it != replies_.end(); ++it) {
        if (it->type == t && it->id == key) {
          Msg m = std::move(*it);
          replies_.erase(it);
          return m;
        }
      }
      if (daemon_fd_ < 0 || cv_.wait_until(lock, until) == std::cv_status::timeout)
        return std::nullopt;
    }
  }

  void reader(int s) {
    for (;;) {
      int fd = -1;
      auto m = cm::recv_msg(s, &fd);
      std::unique_lock<std::mutex> lock(mu_);
      if (!m) {
        if (errno == EAGAIN || errno == EINTR) continue;
        daemon_fd_ = -1;
        sys_close(s);
        daemon_gone();
        cv_.notify_all();
        return;
      }
      switch (m->type) {
      case MsgType::ListenReply:
      case MsgType::ResolveReply:
        replies_.push_back(std::move(*m));
        cv_.notify_all();
        break;
      case MsgType::AcceptReply:
        m->backlog = static_cast<std::uint32_t>(fd); // carry the fd to the waiter
        replies_.push_back(std::move(*m));
        cv_.notify_all();
        break;
      case MsgType::ConnRequest: conn_request(*m); break;
      case MsgType::ConnectReply: connect_reply(*m, fd, lock); break;
      default:
        if (fd >= 0) sys_close(fd);
        break;
      }
    }
  }

  // uiwarpd exited (or was restarted): established connections are the application's own and
  // carry on; a connect still in the MPA exchange will never be answered, so it fails now, as
  // the kernel's iw_cm reports a lost connect (CONNECT_ERROR). Waiters in await() see
  // daemon_fd_ < 0. The next command that needs the daemon connects again.
  void daemon_gone() {
    bool told = false;
    for (auto& [h, id] : ids_) {
      if (id.listening)
        std::fprintf(stderr,
                     "uiwarp: uiwarpd went away; the listener on %s takes no new connections\n",
                     cm::addr_string(id.src).c_str());
      if (!id.connecting || id.connected) continue;
      if (!told)
        std::fprintf(stderr, "uiwarp: uiwarpd went away while connecting; connect failed\n");
      told = true;
      id.connecting = false;
      queue(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNABORTED);
    }
  }

  void conn_request(const Msg& m) {
    Id* listener = nullptr;
    for (auto& [h, id] : ids_)
      if (id.listening && id.handle == m.id) listener = &id;
    if (!listener) {
      Msg r;
      r.type = MsgType::Reject;
      r.token = m.token;
      cm::send_msg(daemon_fd_, r);
      return;
    }
    Id child;
    child.handle = next_handle_++;
    child.uid = listener->uid; // until ACCEPT names the child's own uid
    child.channel = listener->channel;
    child.ps = listener->ps;
    child.qp_type = listener->qp_type;
    child.src = m.src;
    child.dst = m.dst;
    child.addr_resolved = true;
    child.iw = true;
    child.child = true;
    child.token = m.token;
    child.dev = listener->dev ? listener->dev : device_for(m.src);
    Event e;
    e.charged_to = listener->handle; // counts against the listener (DESTROY_ID)
    rdma_ucm_conn_param& c = e.resp.param.conn;
    c.private_data_len = static_cast<std::uint8_t>(
        std::min<std::size_t>(m.private_data.size(), RDMA_MAX_PRIVATE_DATA));
    std::memcpy(c.private_data, m.private_data.data(), c.private_data_len);
    // cma_iw_handler: the peer's IRD bounds our ORD and vice versa.
    c.initiator_depth = static_cast<std::uint8_t>(std::min<std::uint32_t>(m.ird, 255));
    c.responder_resources = static_cast<std::uint8_t>(std::min<std::uint32_t>(m.ord, 255));
    e.resp.id = child.handle;
    ids_[child.handle] = child;
    queue(*listener, RDMA_CM_EVENT_CONNECT_REQUEST, 0, e);
  }

  void connect_reply(const Msg& m, int fd, std::unique_lock<std::mutex>& lock) {
    auto it = ids_.find(static_cast<std::uint32_t>(m.id));
    if (it == ids_.end() || !it->second.connecting) {
      if (fd >= 0) sys_close(fd);
      return;
    }
    Id& id = it->second;
    id.connecting = false;
    Event e;
    rdma_ucm_conn_param& c = e.resp.param.conn;
    c.private_data_len = static_cast<std::uint8_t>(
        std::min<std::size_t>(m.private_data.size(), RDMA_MAX_PRIVATE_DATA));
    std::memcpy(c.private_data, m.private_data.data(), c.private_data_len);
    c.initiator_depth = static_cast<std::uint8_t>(std::min<std::uint32_t>(m.params.peer_ird, 255));
    c.responder_resources =
        static_cast<std::uint8_t>(std::min<std::uint32_t>(m.params.peer_ord, 255));
    if (m.status) {
      if (!m.reason.empty()) std::fprintf(stderr, "uiwarp: %s\n", m.reason.c_str());
      std::uint32_t ev = (m.status == ECONNREFUSED || m.status == ECONNRESET)
                             ? RDMA_CM_EVENT_REJECTED
                         : m.status == ETIMEDOUT ? RDMA_CM_EVENT_UNREACHABLE
                                                 : RDMA_CM_EVENT_CONNECT_ERROR;
      queue(id, ev, -m.status, e);
      return;
    }
    int err = attach(id.qp_num, fd, m.params, lock);
    it = ids_.find(static_cast<std::uint32_t>(m.id));
    if (it == ids_.end()) return;
    if (err) {
      std::fprintf(stderr, "uiwarp: cannot attach the connection to QP %u: %s\n", it->second.qp_num,
                   std::strerror(err));
      queue(it->second, RDMA_CM_EVENT_CONNECT_ERROR, -err, e);
      return;
    }
    it->second.connected = true;
    queue(it->second, RDMA_CM_EVENT_ESTABLISHED, 0, e);
  }

  // Hands `fd` to the provider's QP (lock released: the provider may call back).
  int attach(std::uint32_t qp_num, int fd, const cm::ConnParams& p,
             std::unique_lock<std::mutex>& lock) {
    const uiwarp_provider_ops* ops = provider_;
    if (!ops) {
      sys_close(fd);
      return ENODEV;
    }
    uiwarp_conn_params cp{p.version, p.crc, p.markers_tx, p.markers_rx, p.ird, p.ord, p.initiator,
                          p.rtr,     0,     p.large_fpdu};
    lock.unlock();
    int err = ops->attach(qp_num, fd, &cp);
    lock.lock();
    if (err) sys_close(fd);
    return err;
  }

  void release(Id& id) {
    if (daemon_fd_ < 0) return;
    if (id.listening) {
      Msg m;
      m.type = MsgType::Unlisten;
      m.id = id.handle;
      cm::send_msg(daemon_fd_, m);
    }
    if (id.child && !id.accepted) {
      Msg m; // the kernel rejects a request whose id is destroyed unanswered
      m.type = MsgType::Reject;
      m.token = id.token;
      cm::send_msg(daemon_fd_, m);
    }
  }

  // A command that names an id: nullptr (EINVAL) when it is short or the id unknown.
  template <class Cmd> Id* read_id_cmd(const std::uint8_t* in, std::size_t n, Cmd* c);

  Id* find(std::uint32_t handle) {
    auto it = ids_.find(handle);
    return it == ids_.end() ? nullptr : &it->second;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Channel> channels_;
  std::uint64_t channel_gen_ = 0;
  std::map<std::uint32_t, Id> ids_;
  std::uint32_t next_handle_ = 1;
  int daemon_fd_ = -1;
  std::deque<Msg> replies_;
  const uiwarp_provider_ops* provider_ = nullptr;

public:
  int do_command(int fd, std::uint32_t cmd, const std::uint8_t* in, std::size_t n,
                 std::unique_lock<std::mutex>& lock);
};

template <class T> bool read_cmd(const std::uint8_t* in, std::size_t n, T* out) {
  if (n < sizeof *out) return false;
  std::memcpy(out, in, sizeof *out);
  return true;
}

template <class Cmd> Id* Ucma::read_id_cmd(const std::uint8_t* in, std::size_t n, Cmd* c) {
  return read_cmd(in, n, c) ? find(c->id) : nullptr;
}

// CONNECT's and ACCEPT's rdma_ucm_conn_param, as uiwarpd needs it: the private data for the
// MPA frame, and IRD/ORD (responder_resources/initiator_depth) for RFC 6581's negotiation.
void set_conn_param(Msg& m, const rdma_ucm_conn_param& p) {
  m.private_data.assign(p.private_data,
                        p.private_data +
                            std::min<std::size_t>(p.private_data_len, RDMA_MAX_PRIVATE_DATA));
  m.ird = p.responder_resources;
  m.ord = p.initiator_depth;
}

template <class T> void respond(std::uint64_t ptr, const T& resp) {
  std::memcpy(reinterpret_cast<void*>(ptr), &resp, sizeof resp);
}

ssize_t Ucma::command(int fd, const void* buf, std::size_t len) {
  rdma_ucm_cmd_hdr hdr;
  if (len < sizeof hdr) {
    errno = EINVAL;
    return -1;
  }
  std::memcpy(&hdr, buf, sizeof hdr);
  std::size_t in = std::min<std::size_t>(hdr.in, len - sizeof hdr);
  std::unique_lock<std::mutex> lock(mu_);
  int err = do_command(fd, hdr.cmd, static_cast<const std::uint8_t*>(buf) + sizeof hdr, in, lock);
  if (err) {
    errno = err;
    return -1;
  }
  return static_cast<ssize_t>(len);
}

int Ucma::do_command(int fd, std::uint32_t cmd, const std::uint8_t* in, std::size_t n,
                     std::unique_lock<std::mutex>& lock) {
  switch (cmd) {
  case RDMA_USER_CM_CMD_CREATE_ID: {
    rdma_ucm_create_id c;
    if (!read_cmd(in, n, &c)) return EINVAL;
    if (c.ps != RDMA_PS_TCP || c.qp_type != IBV_QPT_RC)
      return EPROTONOSUPPORT; // iWARP: RC over TCP
    Id id;
    id.handle = next_handle_++;
    id.uid = c.uid;
    id.channel = fd;
    id.ps = c.ps;
    id.qp_type = c.qp_type;
    ids_[id.handle] = id;
    respond(c.response, rdma_ucm_create_id_resp{id.handle});
    return 0;
  }
  case RDMA_USER_CM_CMD_DESTROY_ID: {
    rdma_ucm_destroy_id c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    // Undelivered events of the id go with it.
    auto& q = channels_[id->channel].q;
    for (auto it = q.begin(); it != q.end();) {
      if (it->resp.id == c.id || (it->charged_to == c.id)) {
        std::uint64_t v;
        [[maybe_unused]] ssize_t r = sys_read(id->channel, &v, sizeof v);
        it = q.erase(it);
      } else {
        ++it;
      }
    }
    release(*id);
    respond(c.response, rdma_ucm_destroy_id_resp{id->events_reported});
    ids_.erase(c.id);
    return 0;
  }
  case RDMA_USER_CM_CMD_BIND_IP: {
    rdma_ucm_bind_ip c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    sockaddr_storage a = from_abi(&c.addr, sizeof c.addr);
    if (!a.ss_family) return EAFNOSUPPORT;
    id->src = a;
    id->dev = device_for(a);
    if (!id->dev) return EADDRNOTAVAIL; // no uiwarp device on that address's netdev
    return 0;
  }
  case RDMA_USER_CM_CMD_BIND: {
    rdma_ucm_bind c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    sockaddr_storage a = from_abi(&c.addr, std::min<std::size_t>(c.addr_size, sizeof c.addr));
    if (!a.ss_family) return EAFNOSUPPORT; // AF_IB: librdmacm then uses the IP commands
    id->src = a;
    id->dev = device_for(a);
    return id->dev ? 0 : EADDRNOTAVAIL;
  }
  case RDMA_USER_CM_CMD_RESOLVE_IP:
  case RDMA_USER_CM_CMD_RESOLVE_ADDR: {
    sockaddr_storage src{}, dst{};
    std::uint32_t handle;
    if (cmd == RDMA_USER_CM_CMD_RESOLVE_IP) {
      rdma_ucm_resolve_ip c;
      if (!read_cmd(in, n, &c)) return EINVAL;
      src = from_abi(&c.src_addr, sizeof c.src_addr);
      dst = from_abi(&c.dst_addr, sizeof c.dst_addr);
      handle = c.id;
    } else {
      rdma_ucm_resolve_addr c;
      if (!read_cmd(in, n, &c)) return EINVAL;
      src = from_abi(&c.src_addr, std::min<std::size_t>(c.src_size, sizeof c.src_addr));
      dst = from_abi(&c.dst_addr, std::min<std::size_t>(c.dst_size, sizeof c.dst_addr));
      handle = c.id;
    }
    Id* id = find(handle);
    if (!id) return EINVAL;
    if (!dst.ss_family) return EAFNOSUPPORT;
    if (!src.ss_family && id->src.ss_family) src = id->src;
    // The route's source address, as the kernel's routing picks it: uiwarpd asks rtnetlink.
    int status = 0;
    if (!src.ss_family || is_wildcard(src)) {
      std::uint16_t port = src.ss_family ? port_of(src) : 0;
      Msg m;
      m.type = MsgType::Resolve;
      m.id = handle;
      m.dst = dst;
      status = to_daemon(m);
      if (!status) {
        auto r = await(MsgType::ResolveReply, handle, lock);
        id = find(handle);
        if (!id) return EINVAL;
        if (!r) {
          status = ETIMEDOUT;
        } else if (r->status) {
          status = r->status;
          std::fprintf(stderr, "uiwarp: %s\n", r->reason.c_str());
        } else {
          src = r->src;
        }
      }
      set_port(src, port);
    }
    if (!status) {
      id->dev = device_for(src);
      if (!id->dev) status = ENODEV; // no uiwarp device on the route's netdev
    }
    id->src = src;
    id->dst = dst;
    id->addr_resolved = status == 0;
    queue(*id, status ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ADDR_RESOLVED, -status);
    return 0;
  }
  case RDMA_USER_CM_CMD_RESOLVE_ROUTE: {
    rdma_ucm_resolve_route c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    if (!id->addr_resolved) return EINVAL;
    queue(*id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    return 0;
  }
  case RDMA_USER_CM_CMD_QUERY_ROUTE: {
    rdma_ucm_query c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    rdma_ucm_query_route_resp r{};
    if (id->dev) r.node_guid = id->dev->guid_be;
    to_abi(&r.src_addr, sizeof r.src_addr, id->src);
    to_abi(&r.dst_addr, sizeof r.dst_addr, id->dst);
    r.num_paths = 0; // iWARP has no IB path records
    r.port_num = id->dev ? 1 : 0;
    r.ibdev_index = 0xffffffff;
    respond(c.response, r);
    return 0;
  }
  case RDMA_USER_CM_CMD_QUERY: {
    rdma_ucm_query c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    if (c.option == RDMA_USER_CM_QUERY_ADDR) {
      rdma_ucm_query_addr_resp r{};
      if (id->dev) r.node_guid = id->dev->guid_be;
      r.port_num = id->dev ? 1 : 0;
      r.src_size = static_cast<std::uint16_t>(addr_len(id->src));
      r.dst_size = static_cast<std::uint16_t>(addr_len(id->dst));
      to_abi(&r.src_addr, sizeof r.src_addr, id->src);
      to_abi(&r.dst_addr, sizeof r.dst_addr, id->dst);
      r.ibdev_index = 0xffffffff;
      respond(c.response, r);
      return 0;
    }
    if (c.option == RDMA_USER_CM_QUERY_PATH) {
      rdma_ucm_query_path_resp r{};
      respond(c.response, r);
      return 0;
    }
    return ENOSYS;
  }
  case RDMA_USER_CM_CMD_INIT_QP_ATTR: {
    rdma_ucm_init_qp_attr c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    // iw_cm_init_qp_attr (kernel): INIT/RTR: STATE|ACCESS|PORT, access granted
    // only once an iw_cm id exists; RTS: PORT alone, no state change.
    ib_uverbs_qp_attr r{};
    r.qp_state = c.qp_state;
    r.port_num = 1;
    switch (c.qp_state) {
    case IBV_QPS_INIT:
    case IBV_QPS_RTR:
      r.qp_attr_mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT;
      r.qp_access_flags =
          id->iw ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0;
      break;
    case IBV_QPS_RTS: r.qp_attr_mask = IBV_QP_PORT; break;
    default: return EINVAL;
    }
    respond(c.response, r);
    return 0;
  }
  case RDMA_USER_CM_CMD_LISTEN: {
    rdma_ucm_listen c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id || !id->src.ss_family) return EINVAL;
    if (id->listening) return 0;
    Msg m;
    m.type = MsgType::Listen;
    m.id = c.id;
    m.src = id->src;
    m.backlog = c.backlog;
    m.tos = id->tos;
    m.afonly = id->afonly;
    if (int err = to_daemon(m)) return err;
    auto r = await(MsgType::ListenReply, c.id, lock);
    id = find(c.id);
    if (!r) return ETIMEDOUT;
    if (!id) return EINVAL;
    if (r->status) {
      std::fprintf(stderr, "uiwarp: %s\n", r->reason.c_str());
      return r->status;
    }
    id->src = r->src;
    id->listening = id->iw = true;
    return 0;
  }
  case RDMA_USER_CM_CMD_CONNECT: {
    rdma_ucm_connect c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id || !id->addr_resolved || id->connecting || id->connected) return EINVAL;
    Msg m;
    m.type = MsgType::Connect;
    m.id = c.id;
    m.src = id->src;
    m.dst = id->dst;
    set_conn_param(m, c.conn_param);
    m.tos = id->tos;
    id->qp_num = c.conn_param.qp_num;
    id->connecting = id->iw = true;
    if (int err = to_daemon(m)) {
      id->connecting = false;
      return err;
    }
    return 0;
  }
  case RDMA_USER_CM_CMD_ACCEPT: {
    rdma_ucm_accept c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id || !id->child || id->accepted) return EINVAL;
    id->uid = c.uid; // from now on the child's events carry its own uid
    id->qp_num = c.conn_param.qp_num;
    id->accepted = true;
    Msg m;
    m.type = MsgType::Accept;
    m.token = id->token;
    set_conn_param(m, c.conn_param);
    if (int err = to_daemon(m)) return err;
    auto r = await(MsgType::AcceptReply, id->token, lock);
    id = find(c.id);
    int fd = r ? static_cast<int>(r->backlog) : -1;
    if (!r || !id || r->status) {
      if (fd >= 0) sys_close(fd);
      if (r && !r->reason.empty()) std::fprintf(stderr, "uiwarp: %s\n", r->reason.c_str());
      return !r ? ETIMEDOUT : !id ? EINVAL : r->status;
    }
    std::uint32_t handle = c.id;
    if (int err = attach(id->qp_num, fd, r->params, lock)) return err;
    id = find(handle);
    if (!id) return EINVAL;
    id->connected = true;
    queue(*id, RDMA_CM_EVENT_ESTABLISHED, 0);
    return 0;
  }
  case RDMA_USER_CM_CMD_REJECT: {
    rdma_ucm_reject c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id || !id->child || id->accepted) return EINVAL;
    Msg m;
    m.type = MsgType::Reject;
    m.token = id->token;
    m.private_data.assign(c.private_data,
                          c.private_data +
                              std::min<std::size_t>(c.private_data_len, RDMA_MAX_PRIVATE_DATA));
    id->accepted = true; // answered
    return to_daemon(m);
  }
  case RDMA_USER_CM_CMD_DISCONNECT: {
    rdma_ucm_disconnect c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    if (!id->connected) return ENOTCONN;
    const uiwarp_provider_ops* ops = provider_;
    std::uint32_t qpn = id->qp_num;
    lock.unlock();
    int err = ops ? ops->disconnect(qpn) : ENODEV;
    lock.lock();
    return err == ENOTCONN ? 0 : err;
  }
  case RDMA_USER_CM_CMD_GET_EVENT: {
    rdma_ucm_get_event c;
    if (!read_cmd(in, n, &c)) return EINVAL;
    return get_event(fd, c, lock);
  }
  case RDMA_USER_CM_CMD_SET_OPTION: {
    rdma_ucm_set_option c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    if (c.level != RDMA_OPTION_ID) return ENOSYS;
    const void* val = reinterpret_cast<const void*>(c.optval);
    switch (c.optname) {
    case RDMA_OPTION_ID_TOS: // a u8, as the kernel's ucma_set_option_id insists
      if (c.optlen != 1) return EINVAL;
      id->tos = *static_cast<const std::uint8_t*>(val);
      return 0;
    case RDMA_OPTION_ID_AFONLY:
      if (c.optlen != sizeof(int)) return EINVAL;
      id->afonly = *static_cast<const int*>(val) != 0;
      return 0;
    case RDMA_OPTION_ID_REUSEADDR: // uiwarpd's listeners always reuse addresses
      return c.optlen == sizeof(int) ? 0 : EINVAL;
    case RDMA_OPTION_ID_ACK_TIMEOUT: // an IB transport timer; TCP keeps its own
      return c.optlen == 1 ? 0 : EINVAL;
    default: return ENOSYS;
    }
  }
  case RDMA_USER_CM_CMD_NOTIFY: {
    rdma_ucm_notify c;
    if (!read_cmd(in, n, &c)) return EINVAL;
    return find(c.id) ? 0 : EINVAL;
  }
  case RDMA_USER_CM_CMD_MIGRATE_ID: {
    rdma_ucm_migrate_id c;
    if (!read_cmd(in, n, &c)) return EINVAL;
    // Written to the new channel; c.fd names the id's current one (kernel ucma_migrate_id).
    Id* id = find(c.id);
    int to = fd;
    if (!id || id->channel != static_cast<int>(c.fd) || !channels_.count(to)) return EINVAL;
    if (to == id->channel) {
      respond(c.response, rdma_ucm_migrate_resp{id->events_reported});
      return 0;
    }
    // Queued events move with the id.
    auto& from_q = channels_[id->channel].q;
    for (auto it = from_q.begin(); it != from_q.end();) {
      if (it->resp.id == c.id) {
        std::uint64_t v = 1;
        [[maybe_unused]] ssize_t r = sys_read(id->channel, &v, sizeof v);
        channels_[to].q.push_back(*it);
        [[maybe_unused]] ssize_t w = sys_write(to, &v, sizeof v);
        it = from_q.erase(it);
      } else {
        ++it;
      }
    }
    id->channel = to;
    respond(c.response, rdma_ucm_migrate_resp{id->events_reported});
    return 0;
  }
  case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
  case RDMA_USER_CM_CMD_JOIN_MCAST:
  case RDMA_USER_CM_CMD_LEAVE_MCAST: return ENOSYS; // iWARP has no multicast
  default: return ENOSYS;
  }
}

} // namespace

int open_channel(int flags) { return Ucma::get().open_channel(flags); }
bool is_channel(int fd) { return Ucma::get().is_channel(fd); }
ssize_t command(int fd, const void* buf, std::size_t len) {
  return Ucma::get().command(fd, buf, len);
}
void closed(int fd) { Ucma::get().closed(fd); }
void fix_stat(struct stat* st) {
  st->st_mode = S_IFCHR | 0666;
  st->st_rdev = makedev(10, 58); // misc device, as the kernel's rdma_cm
}

} // namespace uiwarp::ucma

extern "C" __attribute__((visibility("default"))) void
uiwarp_shim_register_provider(const uiwarp_provider_ops* ops) {
  uiwarp::ucma::Ucma::get().register_provider(ops);
}

extern "C" __attribute__((visibility("default"))) void
uiwarp_shim_qp_event(std::uint32_t qp_num, uiwarp_qp_event event, const char* reason) {
  uiwarp::ucma::Ucma::get().qp_event(qp_num, event, reason);
}
