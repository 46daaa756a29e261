// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The rdma_cm commands, one handler per RDMA_USER_CM_CMD_* in a table indexed by the command,
// as the kernel's ucma.c dispatches them (ucma_cmd_table). A command without a handler (the
// multicast ones: iWARP has none; GET_OPTION; those of newer kernels) fails at once with
// ENOSYS, as an older kernel answers it. Each handler runs with the emulation's lock held.
#include "ucma_addr.hpp"
#include "ucma_emu.hpp"
#include "uiwarp/env.hpp"
#include "uiwarp/log.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <infiniband/verbs.h>
#include <iterator>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>

namespace uiwarp::ucma {

namespace {

void log_error(const std::string& m) { log::error("rdma_cm", m); }

// One command as it came: the channel written to, the command's body (`n` octets) and the
// room the application gave its response (`out`, the header's).
struct Cmd {
  Ucma& u;
  int fd;
  const std::uint8_t* in;
  std::size_t n;
  std::size_t out;
  std::unique_lock<std::mutex>& lock;
};

// CONNECT and ACCEPT of a librdmacm older than ECE (rdma-core 31) are shorter: the kernel
// takes any body that reaches `min` and zeroes the rest (ucma_connect, ucma_accept).
template <class T> bool read_cmd_prefix(const Cmd& c, T* out, std::size_t min) {
  if (c.n < min) return false;
  *out = T{};
  std::memcpy(out, c.in, std::min(c.n, sizeof *out));
  return true;
}
// Every other command's body is read whole.
template <class T> bool read_cmd(const Cmd& c, T* out) {
  return read_cmd_prefix(c, out, sizeof *out);
}

// A command that names an id: nullptr (EINVAL) when it is short or the id unknown.
template <class T> Id* read_id_cmd(const Cmd& c, T* out) {
  return read_cmd(c, out) ? c.u.st.find(out->id) : nullptr;
}

// The response goes to the user pointer the command carries, as the kernel's copy_to_user,
// and never past the room the header gives it (the kernel copies min(out, size) where a
// response may be shorter, and refuses less than its minimum with ENOSPC: kCommands).
template <class T> void respond(const Cmd& c, std::uint64_t ptr, const T& resp) {
  std::memcpy(reinterpret_cast<void*>(ptr), &resp, std::min(c.out, sizeof resp));
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

// CONNECT's and ACCEPT's rdma_ucm_conn_param, as uiwarpd needs it: the private data for the
// MPA frame, and IRD/ORD (responder_resources/initiator_depth) for RFC 6581's negotiation.
template <class M> void set_conn_param(M& m, const rdma_ucm_conn_param& p) {
  m.private_data.assign(p.private_data,
                        p.private_data +
                            std::min<std::size_t>(p.private_data_len, RDMA_MAX_PRIVATE_DATA));
  m.ird = p.responder_resources;
  m.ord = p.initiator_depth;
}

int ucma_create_id(const Cmd& cmd) {
  rdma_ucm_create_id c;
  if (!read_cmd(cmd, &c)) return EINVAL;
  if (c.ps != RDMA_PS_TCP || c.qp_type != IBV_QPT_RC) return EPROTONOSUPPORT; // RC over TCP
  Id id;
  id.uid = c.uid;
  id.channel = cmd.fd;
  id.ps = c.ps;
  id.qp_type = c.qp_type;
  respond(cmd, c.response, rdma_ucm_create_id_resp{cmd.u.st.add_id(id).handle});
  return 0;
}

int ucma_destroy_id(const Cmd& cmd) {
  rdma_ucm_destroy_id c;
  Id* id = read_id_cmd(cmd, &c);
  if (!id) return EINVAL;
  cmd.u.release(*id);
  // Undelivered events of the id go with it.
  respond(cmd, c.response, rdma_ucm_destroy_id_resp{cmd.u.st.destroy_id(c.id)});
  return 0;
}

int ucma_bind_ip(const Cmd& cmd) {
  rdma_ucm_bind_ip c;
  Id* id = read_id_cmd(cmd, &c);
  if (!id) return EINVAL;
  sockaddr_storage a = from_abi(&c.addr, sizeof c.addr);
  if (!a.ss_family) return EAFNOSUPPORT;
  return cmd.u.bind_id(*id, a);
}

int ucma_bind(const Cmd& cmd) {
  rdma_ucm_bind c;
  Id* id = read_id_cmd(cmd, &c);
  if (!id) return EINVAL;
  sockaddr_storage a = from_abi(&c.addr, std::min<std::size_t>(c.addr_size, sizeof c.addr));
  if (!a.ss_family) return EAFNOSUPPORT; // AF_IB: librdmacm then uses the IP commands
  return cmd.u.bind_id(*id, a);
}

// RESOLVE_IP and RESOLVE_ADDR, once their addresses are read.
int resolve(const Cmd& cmd, std::uint32_t handle, sockaddr_storage src, sockaddr_storage dst) {
  Ucma& u = cmd.u;
  Id* id = u.st.find(handle);
  // rdma_resolve_addr: an id that is bound, or resolved before (resolving again).
  if (!id || (id->state != IdState::Idle && id->state != IdState::AddrResolved)) return EINVAL;
  if (!dst.ss_family) return EAFNOSUPPORT;
  // resolve_prepare_src: an unbound id is bound first (to `src`, or to the wildcard of the
  // destination's family), so its port is taken now and rdma_get_src_port reports it.
  if (!id->bound)
    if (int err = u.bind_id(*id, src.ss_family ? src : any_addr(dst.ss_family))) return err;
  if (id->src.ss_family != dst.ss_family) return EINVAL;
  src = id->src;
  // The route's source address, as the kernel's routing picks it: uiwarpd asks rtnetlink.
  int status = 0;
  if (is_wildcard(src)) {
    std::uint16_t port = port_of(src);
    status = u.daemon.send(proto::Resolve{handle, dst});
    if (!status) {
      auto p = u.daemon.await<proto::ResolveReply>(handle, cmd.lock);
      id = u.st.find(handle);
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
  id->state = status ? IdState::Idle : IdState::AddrResolved;
  u.st.queue(*id, status ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ADDR_RESOLVED, -status);
  return 0;
}

int ucma_resolve_ip(const Cmd& cmd) {
  rdma_ucm_resolve_ip c;
  if (!read_cmd(cmd, &c)) return EINVAL;
  return resolve(cmd, c.id, from_abi(&c.src_addr, sizeof c.src_addr),
                 from_abi(&c.dst_addr, sizeof c.dst_addr));
}

int ucma_resolve_addr(const Cmd& cmd) {
  rdma_ucm_resolve_addr c;
  if (!read_cmd(cmd, &c)) return EINVAL;
  return resolve(cmd, c.id,
                 from_abi(&c.src_addr, std::min<std::size_t>(c.src_size, sizeof c.src_addr)),
                 from_abi(&c.dst_addr, std::min<std::size_t>(c.dst_size, sizeof c.dst_addr)));
}

int ucma_resolve_route(const Cmd& cmd) {
  rdma_ucm_resolve_route c;
  Id* id = read_id_cmd(cmd, &c);
  if (!id || id->state != IdState::AddrResolved) return EINVAL;
  cmd.u.st.queue(*id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return 0;
}

int ucma_query_route(const Cmd& cmd) {
  rdma_ucm_query c;
  Id* id = read_id_cmd(cmd, &c);
  if (!id) return EINVAL;
  rdma_ucm_query_route_resp r{};
  if (id->dev) r.node_guid = id->dev->guid_be;
  to_abi(&r.src_addr, sizeof r.src_addr, id->src);
  to_abi(&r.dst_addr, sizeof r.dst_addr, id->dst);
  r.num_paths = 0; // iWARP has no IB path records
  r.port_num = id->dev ? 1 : 0;
  r.ibdev_index = 0xffffffff;
  respond(cmd, c.response, r);
  return 0;
}

int ucma_query(const Cmd& cmd) {
  rdma_ucm_query c;
  Id* id = read_id_cmd(cmd, &c);
  if (!id) return EINVAL;
  if (c.option == RDMA_USER_CM_QUERY_ADDR) {
    if (cmd.out < offsetof(rdma_ucm_query_addr_resp, ibdev_index)) return ENOSPC;
    rdma_ucm_query_addr_resp r{};
    if (id->dev) r.node_guid = id->dev->guid_be;
    r.port_num = id->dev ? 1 : 0;
    r.src_size = static_cast<std::uint16_t>(addr_len(id->src));
    r.dst_size = static_cast<std::uint16_t>(addr_len(id->dst));
    to_abi(&r.src_addr, sizeof r.src_addr, id->src);
    to_abi(&r.dst_addr, sizeof r.dst_addr, id->dst);
    r.ibdev_index = 0xffffffff;
    respond(cmd, c.response, r);
    return 0;
  }
  if (c.option == RDMA_USER_CM_QUERY_PATH) {
    if (cmd.out < sizeof(rdma_ucm_query_path_resp)) return ENOSPC;
    respond(cmd, c.response, rdma_ucm_query_path_resp{});
    return 0;
  }
  return ENOSYS;
}

int ucma_init_qp_attr(const Cmd& cmd) {
  rdma_ucm_init_qp_attr c;
  Id* id = read_id_cmd(cmd, &c);
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
  respond(cmd, c.response, r);
  return 0;
}

int ucma_listen(const Cmd& cmd) {
  Ucma& u = cmd.u;
  rdma_ucm_listen c;
  Id* id = read_id_cmd(cmd, &c);
  if (!id) return EINVAL;
  if (id->listening()) return 0;
  const IdState before = id->state; // Idle or AddrResolved
  if (id->child || (before != IdState::Idle && before != IdState::AddrResolved)) return EINVAL;
  // rdma_listen on an unbound id binds it to the IPv4 wildcard and an ephemeral port.
  if (!id->bound)
    if (int err = u.bind_id(*id, any_addr(AF_INET))) return err;
  if (id->reuseaddr)
    if (int err = u.st.listen_conflict(*id)) return err;
  if (id->sock < 0) return EINVAL;
  // The listening socket is the application's (it holds the port); uiwarpd accepts on it.
  if (::listen(id->sock, static_cast<int>(c.backlog ? c.backlog : 128))) return errno;
  // Listening from now on: uiwarpd may pass a connection request before its reply reaches
  // this thread (the reader thread handles both in order, this thread wakes later).
  id->state = IdState::Listen;
  id->iw = true;
  id->backlog = c.backlog;
  int err = u.daemon.send(proto::Listen{c.id, id->src, c.backlog, id->tos,
                                        mpa_overrides(id->dev, id->src), device_policies(id->src)},
                          id->sock);
  std::optional<proto::Packet> p;
  if (!err) {
    p = u.daemon.await<proto::ListenReply>(c.id, cmd.lock);
    err = !p ? ETIMEDOUT : std::get<proto::ListenReply>(p->msg).status;
  }
  id = u.st.find(c.id);
  if (!id) return EINVAL;
  if (err) {
    comp_exch(*id, IdState::Listen, before);
    if (p) log_error(std::get<proto::ListenReply>(p->msg).reason);
  }
  return err;
}

int ucma_connect(const Cmd& cmd) {
  rdma_ucm_connect c;
  if (!read_cmd_prefix(cmd, &c, offsetof(rdma_ucm_connect, ece))) return EINVAL;
  Id* id = cmd.u.st.find(c.id);
  if (!id || id->child || id->state != IdState::AddrResolved) return EINVAL;
  proto::Connect m;
  m.id = c.id;
  m.src = id->src;
  m.dst = id->dst;
  set_conn_param(m, c.conn_param);
  m.tos = id->tos;
  m.policy = mpa_overrides(id->dev, id->src);
  if (id->sock < 0) return EINVAL;
  id->qp_num = c.conn_param.qp_num;
  id->state = IdState::Connect;
  id->iw = true;
  // uiwarpd connects the id's own socket, from the port the id was bound to.
  if (int err = cmd.u.daemon.send(m, id->sock)) {
    comp_exch(*id, IdState::Connect, IdState::AddrResolved);
    return err;
  }
  return 0;
}

int ucma_accept(const Cmd& cmd) {
  Ucma& u = cmd.u;
  rdma_ucm_accept c;
  if (!read_cmd_prefix(cmd, &c, offsetof(rdma_ucm_accept, ece))) return EINVAL;
  Id* id = cmd.u.st.find(c.id);
  if (!id || !id->child || id->accepted) return EINVAL;
  id->uid = c.uid; // from now on the child's events carry its own uid
  id->qp_num = c.conn_param.qp_num;
  id->accepted = true;
  proto::Accept m;
  m.token = id->token;
  set_conn_param(m, c.conn_param);
  // The Request asked for the same-host path and uiwarpd would answer it: the accepting QP's
  // offer goes into the Reply. No QP named (the program accepts without one), no offer.
  if (id->same_host && id->qp_num && Env::get().same_host_enabled()) {
    m.same_host_offer = u.same_host_offer(id->qp_num, cmd.lock);
    if (!u.st.find(c.id)) { // destroyed meanwhile, answered as release() would have
      u.daemon.post(proto::Reject{m.token, {}});
      return EINVAL;
    }
  }
  if (int err = u.daemon.send(m)) return err;
  auto p = u.daemon.await<proto::AcceptReply>(id->token, cmd.lock);
  id = u.st.find(c.id);
  const proto::AcceptReply* r = p ? &std::get<proto::AcceptReply>(p->msg) : nullptr;
  int fd = p ? p->fd : -1;
  if (!r || !id || r->status) {
    if (fd >= 0) sys_close(fd);
    if (r && !r->reason.empty()) log_error(r->reason);
    return !r ? ETIMEDOUT : !id ? EINVAL : r->status;
  }
  if (int err = u.attach(id->qp_num, fd, r->params, cmd.lock)) return err;
  id = u.st.find(c.id);
  if (!id) return EINVAL;
  u.established(*id);
  return 0;
}

int ucma_reject(const Cmd& cmd) {
  rdma_ucm_reject c;
  Id* id = read_id_cmd(cmd, &c);
  if (!id || !id->child || id->accepted) return EINVAL;
  proto::Reject m;
  m.token = id->token;
  m.private_data.assign(c.private_data,
                        c.private_data +
                            std::min<std::size_t>(c.private_data_len, RDMA_MAX_PRIVATE_DATA));
  id->accepted = true; // answered
  return cmd.u.daemon.send(m);
}

int ucma_disconnect(const Cmd& cmd) {
  rdma_ucm_disconnect c;
  Id* id = read_id_cmd(cmd, &c);
  if (!id) return EINVAL;
  if (!id->connected()) return ENOTCONN;
  const ProviderOps* ops = cmd.u.provider();
  std::uint32_t qpn = id->qp_num;
  cmd.lock.unlock();
  int err = ops ? ops->disconnect(qpn) : ENODEV;
  cmd.lock.lock();
  return err == ENOTCONN ? 0 : err;
}

int ucma_get_event(const Cmd& cmd) {
  rdma_ucm_get_event c;
  if (!read_cmd(cmd, &c)) return EINVAL;
  Event e;
  if (int err = cmd.u.get_event(cmd.fd, &e, cmd.lock)) return err;
  respond(cmd, c.response, e.resp);
  return 0;
}

// RDMA_OPTION_ID_AFONLY (rdma_set_afonly): before the id listens or connects.
int set_afonly(Ucma& u, Id& id, int afonly) {
  if ((id.state != IdState::Idle && id.state != IdState::AddrResolved) || id.child) return EINVAL;
  // IPV6_V6ONLY cannot change on a bound socket: bind the port again with it.
  if (id.sock >= 0 && id.src.ss_family == AF_INET6 && afonly != id.afonly) {
    sockaddr_storage a = id.src;
    u.close_sock(id);
    int s = bound_socket(a, afonly);
    if (s < 0) {
      id.bound = false;
      return errno;
    }
    id.sock = s;
  }
  id.afonly = afonly;
  return 0;
}

int ucma_set_option(const Cmd& cmd) {
  rdma_ucm_set_option c;
  Id* id = read_id_cmd(cmd, &c);
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
    return set_afonly(cmd.u, *id, *static_cast<const int*>(val) != 0);
  case RDMA_OPTION_ID_REUSEADDR: { // rdma_set_reuseaddr
    if (c.optlen != sizeof(int)) return EINVAL;
    bool reuse = *static_cast<const int*>(val) != 0;
    if ((reuse && id->listening()) || (!reuse && id->bound)) return EINVAL;
    id->reuseaddr = reuse;
    return 0;
  }
  case RDMA_OPTION_ID_ACK_TIMEOUT: // an IB transport timer; TCP keeps its own
    return c.optlen == 1 ? 0 : EINVAL;
  default: return ENOSYS;
  }
}

int ucma_notify(const Cmd& cmd) {
  rdma_ucm_notify c;
  return read_id_cmd(cmd, &c) ? 0 : EINVAL;
}

int ucma_migrate_id(const Cmd& cmd) {
  rdma_ucm_migrate_id c;
  if (!read_cmd(cmd, &c)) return EINVAL;
  // Written to the new channel; c.fd names the id's current one (kernel ucma_migrate_id).
  std::uint32_t reported = 0;
  if (int err = cmd.u.st.migrate_id(c.id, static_cast<int>(c.fd), cmd.fd, &reported)) return err;
  respond(cmd, c.response, rdma_ucm_migrate_resp{reported});
  return 0;
}

using CmdHandler = int (*)(const Cmd&);

// A command's handler and the least room its response needs: less fails with ENOSPC before
// the command acts, as the kernel's handlers check out_len first. GET_EVENT, QUERY_ROUTE and
// QUERY's answers may be shorter than ours (older librdmacm); QUERY checks per option.
struct CmdEntry {
  CmdHandler handler; // nullptr: ENOSYS
  std::size_t min_out;
};

// rdma_ucm_event_resp without the ECE fields and the padding old 32-bit librdmacm omits.
constexpr std::size_t kEventRespMin = sizeof(rdma_ucm_event_resp) -
                                      sizeof(rdma_ucm_event_resp::reserved) -
                                      sizeof(rdma_ucm_event_resp::ece);

// Indexed by RDMA_USER_CM_CMD_*.
constexpr CmdEntry kCommands[] = {
    {ucma_create_id, sizeof(rdma_ucm_create_id_resp)},                    // CREATE_ID
    {ucma_destroy_id, sizeof(rdma_ucm_destroy_id_resp)},                  // DESTROY_ID
    {ucma_bind_ip, 0},                                                    // BIND_IP
    {ucma_resolve_ip, 0},                                                 // RESOLVE_IP
    {ucma_resolve_route, 0},                                              // RESOLVE_ROUTE
    {ucma_query_route, offsetof(rdma_ucm_query_route_resp, ibdev_index)}, // QUERY_ROUTE
    {ucma_connect, 0},                                                    // CONNECT
    {ucma_listen, 0},                                                     // LISTEN
    {ucma_accept, 0},                                                     // ACCEPT
    {ucma_reject, 0},                                                     // REJECT
    {ucma_disconnect, 0},                                                 // DISCONNECT
    {ucma_init_qp_attr, sizeof(ib_uverbs_qp_attr)},                       // INIT_QP_ATTR
    {ucma_get_event, kEventRespMin},                                      // GET_EVENT
    {nullptr, 0},                                                         // GET_OPTION
    {ucma_set_option, 0},                                                 // SET_OPTION
    {ucma_notify, 0},                                                     // NOTIFY
    {nullptr, 0},           // JOIN_IP_MCAST: iWARP has no multicast
    {nullptr, 0},           // LEAVE_MCAST
    {ucma_migrate_id, 0},   // MIGRATE_ID
    {ucma_query, 0},        // QUERY
    {ucma_bind, 0},         // BIND
    {ucma_resolve_addr, 0}, // RESOLVE_ADDR
    {nullptr, 0},           // JOIN_MCAST
};
static_assert(std::size(kCommands) == RDMA_USER_CM_CMD_JOIN_MCAST + 1);
static_assert(RDMA_USER_CM_CMD_MIGRATE_ID == 18 && RDMA_USER_CM_CMD_RESOLVE_ADDR == 21);

} // namespace

ssize_t Ucma::command(int fd, const void* buf, std::size_t len) {
  rdma_ucm_cmd_hdr hdr;
  if (len < sizeof hdr) {
    errno = EINVAL;
    return -1;
  }
  std::memcpy(&hdr, buf, sizeof hdr);
  if (hdr.in > len - sizeof hdr) { // a body longer than what was written (ucma_write)
    errno = EINVAL;
    return -1;
  }
  std::unique_lock<std::mutex> lock(mu_);
  // Past the table the kernel answers EINVAL; ENOSYS here too, so that a newer librdmacm's
  // commands read as not implemented (test_ucma_newer.cpp).
  const CmdEntry e = hdr.cmd < std::size(kCommands) ? kCommands[hdr.cmd] : CmdEntry{nullptr, 0};
  int err = ENOSYS;
  if (e.handler && hdr.out < e.min_out) {
    err = ENOSPC;
  } else if (e.handler) {
    const auto* body = static_cast<const std::uint8_t*>(buf) + sizeof hdr;
    err = e.handler(Cmd{*this, fd, body, hdr.in, hdr.out, lock});
  }
  if (err && !(hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT && err == EAGAIN))
    log::debug("rdma_cm", "command " + std::to_string(hdr.cmd) + ": " + std::strerror(err));
  if (err) {
    errno = err;
    return -1;
  }
  return static_cast<ssize_t>(len);
}

} // namespace uiwarp::ucma
