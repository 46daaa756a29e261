// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// UCMA emulation: every command librdmacm 44 issues, answered the way the
// kernel's rdma_cm answers them for an iWARP device:
//  - INIT_QP_ATTR masks of iw_cm_init_qp_attr (STATE|ACCESS|PORT, RTS: PORT);
//  - CONNECT completes with ESTABLISHED, never CONNECT_RESPONSE, and ACCEPT
//    returns once the MPA Reply is out and the QP is in RTS;
//  - DESTROY_ID reports exactly the events delivered for the id (a
//    CONNECT_REQUEST counts against the listener).
// Connection set-up is uiwarpd's (daemon_proto.hpp); the connected socket goes
// to the provider through the ops it registered (provider_api.hpp).
#include "ucma.hpp"

#include "ucma_addr.hpp"
#include "uiwarp/daemon_proto.hpp"
#include "uiwarp/daemon_start.hpp"
#include "uiwarp/guid.hpp"
#include "uiwarp/log.hpp"
#include "uiwarp/provider_api.hpp"

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
#include <utility>
#include <vector>

namespace uiwarp::ucma {

namespace {

namespace proto = uiwarp::proto;

void log_error(const std::string& m) { log::error("rdma_cm", m); }

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

// The uiwarp device of the netdev that owns `ip`; the first device for a wildcard, and for a
// loopback address whose interface has none (the kernel's rdma_cm binds 127.0.0.1 to any
// RDMA device: siw on eth0 serves rping -a 127.0.0.1 with nothing on lo).
std::optional<Device> device_for(const sockaddr_storage& ip) {
  std::vector<Device> devs = devices();
  if (devs.empty()) return std::nullopt;
  if (is_wildcard(ip)) return devs.front();
  std::string ifname = netdev_of(ip);
  for (const Device& d : devs)
    if (d.netdev == ifname) return d;
  if (is_loopback(ip)) return devs.front();
  return std::nullopt;
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

// rdma_ucm_conn_param::private_data_len is a u8: 255 at most (uiwarpd never passes more).
std::uint8_t private_data_len(std::size_t n) {
  return static_cast<std::uint8_t>(std::min<std::size_t>(n, 255));
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
  bool attaching = false;    // the socket is being handed to the provider (lock released)
  bool ended = false;        // ...and the provider reported the connection's end meanwhile
  std::uint32_t qp_num = 0;
  std::uint32_t events_reported = 0;
  std::optional<Device> dev;
  int tos = -1;              // RDMA_OPTION_ID_TOS, applied to the TCP socket by uiwarpd
  int afonly = -1;           // RDMA_OPTION_ID_AFONLY (IPV6_V6ONLY), -1 = unset
  bool reuseaddr = false;    // RDMA_OPTION_ID_REUSEADDR
  bool bound = false;        // has a port (rdma_bind_addr, or implied by resolve/listen)
  int sock = -1;             // the TCP socket holding that port, until the QP owns it
  std::uint32_t backlog = 0; // rdma_listen's, for registering again with a new uiwarpd
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

  // The provider's half of the hand-shake (provider_api.hpp).
  bool register_provider(const ProviderOps* ops) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ops || ops->abi != kProviderAbi) {
      log_error("the provider is from another uiwarp installation (ABI " +
                std::to_string(ops ? ops->abi : 0) + ", the shim's " +
                std::to_string(kProviderAbi) + "): rdma_cm cannot attach connections to it");
      return false;
    }
    provider_ = ops;
    return true;
  }

  void qp_event(std::uint32_t qp_num, QpEvent, const char*) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [h, id] : ids_) {
      if (id.qp_num != qp_num) continue;
      if (id.attaching) {
        // The peer closed before attach() returned (ESTABLISHED is not queued yet): the
        // DISCONNECTED follows it (connected()).
        id.ended = true;
      } else if (id.connected && !id.disconnected) {
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
    const int flags = ::fcntl(fd, F_GETFL);
    const bool nonblock = flags >= 0 && (flags & O_NONBLOCK);
    // The shim's write() found `fd` to be a channel (the kernel's fdget) before this thread
    // took the lock; a channel missing now was closed in between (rping's CM thread asks for
    // its next event while main tears down). The kernel's write holds the file and sleeps on.
    auto first = channels_.find(fd);
    const std::optional<std::uint64_t> gen =
        first == channels_.end() ? std::nullopt : std::optional(first->second.gen);
    for (;;) {
      auto ch = channels_.find(fd);
      if (!gen || ch == channels_.end() || ch->second.gen != *gen) {
        // Closed under a blocked reader: the kernel's read keeps the file and sleeps on; it
        // does not fail. Do the same.
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
    int s = proto::connect_daemon(env, proto::Role::Shim, err);
    if (s < 0) {
      *err += "; run the program with uiwarp-run, which starts it";
      return false;
    }
    daemon_fd_ = s;
    std::thread([this, s] { reader(s); }).detach();
    return true;
  }

  int to_daemon(const proto::Message& m, int fd = -1) {
    std::string err;
    if (!daemon_connect(&err)) {
      log_error(err);
      return ENOTCONN;
    }
    return proto::send(daemon_fd_, m, fd);
  }

  // Waits for the reply `Reply` to `key` (the lock is released meanwhile): the packet, whose
  // socket (if any) the caller owns; nullopt when uiwarpd left or did not answer.
  template <class Reply>
  std::optional<proto::Packet> await(std::uint64_t key, std::unique_lock<std::mutex>& lock) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      for (auto it = replies_.begin(); it != replies_.end(); ++it) {
        const Reply* r = std::get_if<Reply>(&it->msg);
        if (r && reply_key(*r) == key) {
          proto::Packet p = std::move(*it);
          replies_.erase(it);
          return p;
        }
      }
      if (daemon_fd_ < 0 || cv_.wait_until(lock, until) == std::cv_status::timeout)
        return std::nullopt;
    }
  }
  static std::uint64_t reply_key(const proto::ListenReply& r) { return r.id; }
  static std::uint64_t reply_key(const proto::ResolveReply& r) { return r.id; }
  static std::uint64_t reply_key(const proto::AcceptReply& r) { return r.token; }

  void reader(int s) {
    for (;;) {
      auto p = proto::recv(s);
      std::unique_lock<std::mutex> lock(mu_);
      if (!p) {
        if (errno == EAGAIN || errno == EINTR) continue;
        daemon_fd_ = -1;
        sys_close(s);
        daemon_gone();
        cv_.notify_all();
        return;
      }
      if (auto* m = std::get_if<proto::ConnRequest>(&p->msg)) {
        if (p->fd >= 0) sys_close(p->fd);
        conn_request(*m);
      } else if (auto* r = std::get_if<proto::ConnectReply>(&p->msg)) {
        connect_reply(*r, p->fd, lock);
      } else if (std::holds_alternative<proto::ListenReply>(p->msg) ||
                 std::holds_alternative<proto::ResolveReply>(p->msg) ||
                 std::holds_alternative<proto::AcceptReply>(p->msg)) {
        replies_.push_back(std::move(*p)); // the waiter takes it, with its socket
        cv_.notify_all();
      } else if (p->fd >= 0) {
        sys_close(p->fd);
      }
    }
  }

  // uiwarpd exited (or was restarted): established connections are the application's own and
  // carry on; a connect still in the MPA exchange will never be answered, so it fails now, as
  // the kernel's iw_cm reports a lost connect (CONNECT_ERROR). Waiters in await() see
  // daemon_fd_ < 0. The next command that needs the daemon connects again, and listeners are
  // registered again with a new daemon at once (relisten()).
  void daemon_gone() {
    bool told = false;
    for (auto& [h, id] : ids_) {
      if (id.listening && !relistening_) {
        relistening_ = true;
        std::thread([this] { relisten(); }).detach();
      }
      if (!id.connecting || id.connected) continue;
      if (!told) log_error("uiwarpd went away while connecting; connect failed");
      told = true;
      id.connecting = false;
      queue(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNABORTED);
    }
  }

  // Listening ids outlive their uiwarpd: their sockets still listen (the kernel queues new
  // connections in the backlog), so a new daemon takes them over. The per-user daemon that
  // uiwarp-run started is started again (kRestartEnv); systemd starts the system one when its
  // socket is connected to. Tries with a growing pause (20 ms to 1 s) until every listener is
  // registered or none is left; a daemon that refuses (another protocol version) is named once.
  void relisten() {
    std::string said;
    for (int pause_ms = 20;; pause_ms = std::min(pause_ms * 2, 1000)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      std::string err;
      const char* sock = std::getenv("UIWARPD_SOCKET");
      const char* start = std::getenv(kRestartEnv);
      if (sock && *sock && start && *start) ensure_daemon(start, sock, &err);
      std::unique_lock<std::mutex> lock(mu_);
      std::vector<std::uint32_t> listening;
      for (auto& [h, id] : ids_)
        if (id.listening && id.sock >= 0) listening.push_back(h);
      if (listening.empty()) {
        relistening_ = false;
        return;
      }
      if (daemon_fd_ < 0 && !daemon_connect(&err)) {
        if (err != said) log_error("uiwarpd went away: " + err);
        said = err;
        continue;
      }
      for (std::uint32_t h : listening) {
        Id* id = find(h);
        if (!id || !id->listening || id->sock < 0 || daemon_fd_ < 0) continue;
        std::optional<proto::Packet> p;
        if (!proto::send(daemon_fd_, proto::Listen{h, id->src, id->backlog, id->tos}, id->sock))
          p = await<proto::ListenReply>(h, lock);
        if (p && std::get<proto::ListenReply>(p->msg).status)
          log_error("uiwarpd refused the listener on " + proto::addr_string(id->src) + ": " +
                    std::get<proto::ListenReply>(p->msg).reason);
      }
      if (daemon_fd_ >= 0) {
        log::info("rdma_cm", "uiwarpd went away; " + std::to_string(listening.size()) +
                                 " listener(s) registered again with the new uiwarpd");
        relistening_ = false;
        return;
      }
    }
  }

  void conn_request(const proto::ConnRequest& m) {
    Id* listener = nullptr;
    for (auto& [h, id] : ids_)
      if (id.listening && id.handle == m.listen_id) listener = &id;
    if (!listener) {
      proto::send(daemon_fd_, proto::Reject{m.token, {}});
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
    c.private_data_len = private_data_len(m.private_data.size());
    std::memcpy(c.private_data, m.private_data.data(), c.private_data_len);
    // cma_iw_handler: the peer's IRD bounds our ORD and vice versa.
    c.initiator_depth = static_cast<std::uint8_t>(std::min<std::uint32_t>(m.ird, 255));
    c.responder_resources = static_cast<std::uint8_t>(std::min<std::uint32_t>(m.ord, 255));
    e.resp.id = child.handle;
    ids_[child.handle] = child;
    queue(*listener, RDMA_CM_EVENT_CONNECT_REQUEST, 0, e);
  }

  void connect_reply(const proto::ConnectReply& m, int fd, std::unique_lock<std::mutex>& lock) {
    auto it = ids_.find(static_cast<std::uint32_t>(m.id));
    if (it == ids_.end() || !it->second.connecting) {
      if (fd >= 0) sys_close(fd);
      return;
    }
    Id& id = it->second;
    id.connecting = false;
    Event e;
    rdma_ucm_conn_param& c = e.resp.param.conn;
    c.private_data_len = private_data_len(m.private_data.size());
    std::memcpy(c.private_data, m.private_data.data(), c.private_data_len);
    c.initiator_depth = static_cast<std::uint8_t>(std::min<std::uint32_t>(m.params.peer_ird, 255));
    c.responder_resources =
        static_cast<std::uint8_t>(std::min<std::uint32_t>(m.params.peer_ord, 255));
    // uiwarpd connected the id's own socket and passes it back; the QP will own it.
    if (fd < 0) std::swap(fd, id.sock);
    close_sock(id);
    if (m.status) {
      if (fd >= 0) sys_close(fd);
      if (!m.reason.empty()) log_error(m.reason);
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
      log_error("cannot attach the connection to QP " + std::to_string(it->second.qp_num) + ": " +
                std::strerror(err));
      queue(it->second, RDMA_CM_EVENT_CONNECT_ERROR, -err, e);
      return;
    }
    connected(it->second, e);
  }

  // Hands `fd` to the provider's QP (lock released: the provider may call back).
  int attach(std::uint32_t qp_num, int fd, const iwarp::ConnParams& p,
             std::unique_lock<std::mutex>& lock) {
    const ProviderOps* ops = provider_;
    if (!ops) {
      sys_close(fd);
      return ENODEV;
    }
    set_attaching(qp_num, true);
    lock.unlock();
    int err = ops->attach(qp_num, fd, p);
    lock.lock();
    set_attaching(qp_num, false);
    if (err) sys_close(fd);
    return err;
  }

  void set_attaching(std::uint32_t qp_num, bool on) {
    for (auto& [h, id] : ids_)
      if (id.qp_num == qp_num) id.attaching = on;
  }

  // ESTABLISHED, then DISCONNECTED at once if the connection ended while it was attached.
  void connected(Id& id, Event e = {}) {
    id.connected = true;
    queue(id, RDMA_CM_EVENT_ESTABLISHED, 0, e);
    if (std::exchange(id.ended, false) && !id.disconnected) {
      id.disconnected = true;
      queue(id, RDMA_CM_EVENT_DISCONNECTED, 0);
    }
  }

  void release(Id& id) {
    if (id.listening && daemon_fd_ >= 0) proto::send(daemon_fd_, proto::Unlisten{id.handle});
    // uiwarpd holds a copy of a listening socket until it reads the Unlisten; the kernel frees
    // the port when rdma_destroy_id returns (cma_release_port), and perftest binds it again at
    // once. shutdown() ends the listen for every copy (inet_shutdown -> tcp_disconnect).
    if (id.listening && id.sock >= 0) ::shutdown(id.sock, SHUT_RDWR);
    close_sock(id);
    if (daemon_fd_ < 0) return;
    // The kernel rejects a request whose id is destroyed unanswered.
    if (id.child && !id.accepted) proto::send(daemon_fd_, proto::Reject{id.token, {}});
  }

  // rdma_bind_addr (also the implicit binds of resolve and listen): checks the address,
  // finds its device, takes the port, and fails as the kernel does (see ucma_addr.hpp).
  int bind_id(Id& id, sockaddr_storage a) {
    if (id.bound) return EINVAL; // cma_comp_exch(IDLE, ADDR_BOUND)
    if (int err = check_bind_address(a)) return err;
    std::optional<Device> dev = device_for(a);
    if (!dev) return ENODEV; // cma_acquire_dev_by_src_ip: no uiwarp device on that netdev
    Binding mine{a, id.reuseaddr, id.afonly >= 0 ? id.afonly != 0 : default_afonly(a.ss_family)};
    if (port_of(a))
      for (const auto& [h, other] : ids_)
        if (other.bound && &other != &id)
          if (int err = port_conflict(mine, binding(other), id.reuseaddr)) return err;
    int s = bound_socket(a, id.afonly);
    if (s < 0) return errno;
    id.sock = s;
    id.src = a;
    id.dev = dev;
    id.bound = true;
    return 0;
  }

  Binding binding(const Id& id) const {
    return Binding{id.src, id.reuseaddr,
                   id.afonly >= 0 ? id.afonly != 0 : default_afonly(id.src.ss_family)};
  }

  // cma_bind_listen: an id that allowed reuse at bind must have the port to itself to listen.
  int listen_conflict(const Id& id) const {
    for (const auto& [h, other] : ids_)
      if (other.bound && &other != &id)
        if (int err = port_conflict(binding(id), binding(other), false)) return err;
    return 0;
  }

  void close_sock(Id& id) {
    if (id.sock >= 0) sys_close(id.sock);
    id.sock = -1;
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
  bool relistening_ = false; // relisten() runs
  std::deque<proto::Packet> replies_;
  const ProviderOps* provider_ = nullptr;

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
template <class M> void set_conn_param(M& m, const rdma_ucm_conn_param& p) {
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
  if (err && !(hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT && err == EAGAIN))
    log::debug("rdma_cm", "command " + std::to_string(hdr.cmd) + ": " + std::strerror(err));
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
    return bind_id(*id, a);
  }
  case RDMA_USER_CM_CMD_BIND: {
    rdma_ucm_bind c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id) return EINVAL;
    sockaddr_storage a = from_abi(&c.addr, std::min<std::size_t>(c.addr_size, sizeof c.addr));
    if (!a.ss_family) return EAFNOSUPPORT; // AF_IB: librdmacm then uses the IP commands
    return bind_id(*id, a);
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
    // resolve_prepare_src: an unbound id is bound first (to `src`, or to the wildcard of the
    // destination's family), so its port is taken now and rdma_get_src_port reports it.
    if (!id->bound)
      if (int err = bind_id(*id, src.ss_family ? src : any_addr(dst.ss_family))) return err;
    if (id->src.ss_family != dst.ss_family) return EINVAL;
    src = id->src;
    // The route's source address, as the kernel's routing picks it: uiwarpd asks rtnetlink.
    int status = 0;
    if (is_wildcard(src)) {
      std::uint16_t port = port_of(src);
      status = to_daemon(proto::Resolve{handle, dst});
      if (!status) {
        auto p = await<proto::ResolveReply>(handle, lock);
        id = find(handle);
        if (!id) return EINVAL;
        if (!p) {
          status = ETIMEDOUT;
        } else if (const auto& r = std::get<proto::ResolveReply>(p->msg); r.status) {
          status = r.status;
          log_error(r.netdev); // the reason
        } else {
          src = r.src;
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
    if (!id) return EINVAL;
    if (id->listening) return 0;
    if (id->child || id->connecting || id->connected) return EINVAL;
    // rdma_listen on an unbound id binds it to the IPv4 wildcard and an ephemeral port.
    if (!id->bound)
      if (int err = bind_id(*id, any_addr(AF_INET))) return err;
    if (id->reuseaddr)
      if (int err = listen_conflict(*id)) return err;
    if (id->sock < 0) return EINVAL;
    // The listening socket is the application's (it holds the port); uiwarpd accepts on it.
    if (::listen(id->sock, static_cast<int>(c.backlog ? c.backlog : 128))) return errno;
    // Listening from now on: uiwarpd may pass a connection request before its reply reaches
    // this thread (the reader thread handles both in order, this thread wakes later).
    id->listening = id->iw = true;
    id->backlog = c.backlog;
    int err = to_daemon(proto::Listen{c.id, id->src, c.backlog, id->tos}, id->sock);
    std::optional<proto::Packet> p;
    if (!err) {
      p = await<proto::ListenReply>(c.id, lock);
      err = !p ? ETIMEDOUT : std::get<proto::ListenReply>(p->msg).status;
    }
    id = find(c.id);
    if (!id) return EINVAL;
    if (err) {
      id->listening = false;
      if (p) log_error(std::get<proto::ListenReply>(p->msg).reason);
    }
    return err;
  }
  case RDMA_USER_CM_CMD_CONNECT: {
    rdma_ucm_connect c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id || !id->addr_resolved || id->connecting || id->connected) return EINVAL;
    proto::Connect m;
    m.id = c.id;
    m.src = id->src;
    m.dst = id->dst;
    set_conn_param(m, c.conn_param);
    m.tos = id->tos;
    if (id->sock < 0) return EINVAL;
    id->qp_num = c.conn_param.qp_num;
    id->connecting = id->iw = true;
    // uiwarpd connects the id's own socket, from the port the id was bound to.
    if (int err = to_daemon(m, id->sock)) {
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
    proto::Accept m;
    m.token = id->token;
    set_conn_param(m, c.conn_param);
    if (int err = to_daemon(m)) return err;
    auto p = await<proto::AcceptReply>(id->token, lock);
    id = find(c.id);
    const proto::AcceptReply* r = p ? &std::get<proto::AcceptReply>(p->msg) : nullptr;
    int fd = p ? p->fd : -1;
    if (!r || !id || r->status) {
      if (fd >= 0) sys_close(fd);
      if (r && !r->reason.empty()) log_error(r->reason);
      return !r ? ETIMEDOUT : !id ? EINVAL : r->status;
    }
    std::uint32_t handle = c.id;
    if (int err = attach(id->qp_num, fd, r->params, lock)) return err;
    id = find(handle);
    if (!id) return EINVAL;
    connected(*id);
    return 0;
  }
  case RDMA_USER_CM_CMD_REJECT: {
    rdma_ucm_reject c;
    Id* id = read_id_cmd(in, n, &c);
    if (!id || !id->child || id->accepted) return EINVAL;
    proto::Reject m;
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
    const ProviderOps* ops = provider_;
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
    case RDMA_OPTION_ID_AFONLY: { // rdma_set_afonly: before the id listens or connects
      if (c.optlen != sizeof(int)) return EINVAL;
      if (id->listening || id->connecting || id->connected || id->child) return EINVAL;
      int afonly = *static_cast<const int*>(val) != 0;
      // IPV6_V6ONLY cannot change on a bound socket: bind the port again with it.
      if (id->sock >= 0 && id->src.ss_family == AF_INET6 && afonly != id->afonly) {
        sockaddr_storage a = id->src;
        close_sock(*id);
        int s = bound_socket(a, afonly);
        if (s < 0) {
          id->bound = false;
          return errno;
        }
        id->sock = s;
      }
      id->afonly = afonly;
      return 0;
    }
    case RDMA_OPTION_ID_REUSEADDR: { // rdma_set_reuseaddr
      if (c.optlen != sizeof(int)) return EINVAL;
      bool reuse = *static_cast<const int*>(val) != 0;
      if ((reuse && id->listening) || (!reuse && id->bound)) return EINVAL;
      id->reuseaddr = reuse;
      return 0;
    }
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

namespace uiwarp::ucma {
namespace {
void qp_event(std::uint32_t qp_num, QpEvent event, const char* reason) noexcept {
  Ucma::get().qp_event(qp_num, event, reason);
}
constexpr ShimOps kShimOps = {kProviderAbi, qp_event};
} // namespace
} // namespace uiwarp::ucma

// The shim's half of the provider hand-shake (provider_api.hpp).
extern "C" __attribute__((visibility("default"))) const uiwarp::ShimOps*
uiwarp_shim_register_provider(const uiwarp::ProviderOps* ops) noexcept {
  return uiwarp::ucma::Ucma::get().register_provider(ops) ? &uiwarp::ucma::kShimOps : nullptr;
}
