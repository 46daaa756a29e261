// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The rdma_cm's ids, event channels and event queues, with the kernel's rules
// (drivers/infiniband/core/ucma.c, cma.c) and no I/O: no sockets, threads or locks. The
// emulation (ucma_emu.hpp) holds it under its lock; what a channel's fd must show (readable
// while events are queued) goes out through Signals; port conflicts follow cma_check_port.
#pragma once

#include "ucma_devices.hpp"

#include <cstdint>
#include <deque>
#include <map>
#include <netinet/in.h>
#include <optional>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>
#include <vector>

namespace uiwarp::ucma {

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

// An id's lifecycle, after the kernel's enum rdma_cm_state (cma_priv.h). Route resolution is
// immediate here, so AddrResolved stands for RDMA_CM_ADDR_RESOLVED and ROUTE_RESOLVED; the
// kernel's RDMA_CM_CONNECT lasts from rdma_connect (or a request's arrival, for its child) to
// the connection's end, and is split at ESTABLISHED, after which a lost uiwarpd no longer fails
// it. Whether the id holds a port (bound) is not a state here: resolve and listen bind too.
//
//   Idle --resolve--> AddrResolved --connect--> Connect --attached--> Established --end-->
//   Disconnected; Idle or AddrResolved --listen--> Listen; a request's child starts in
//   Connect; a failed resolve, listen or connect goes back where it came from.
enum class IdState : std::uint8_t {
  Idle,         // RDMA_CM_IDLE, RDMA_CM_ADDR_BOUND
  AddrResolved, // RDMA_CM_ADDR_RESOLVED, RDMA_CM_ROUTE_RESOLVED
  Listen,       // RDMA_CM_LISTEN
  Connect,      // RDMA_CM_CONNECT until ESTABLISHED
  Established,  // ESTABLISHED queued (the kernel stays in RDMA_CM_CONNECT)
  Disconnected, // DISCONNECTED queued (RDMA_CM_DISCONNECT)
};
const char* name(IdState s);

struct Event {
  rdma_ucm_event_resp resp{};
  std::uint32_t charged_to = 0; // the id whose events_reported counts it
};

struct Id {
  std::uint32_t handle = 0;
  std::uint64_t uid = 0;
  int channel = -1;
  std::uint16_t ps = 0;
  std::uint8_t qp_type = 0;
  sockaddr_storage src{}, dst{};
  IdState state = IdState::Idle; // change it with comp_exch (State::move), as cma_comp_exch
  bool iw = false;               // has an iw_cm id (kernel): connect, listen or a request child
  bool child = false;
  std::uint64_t token = 0; // child: uiwarpd's handle for Accept/Reject
  bool accepted = false;   // child: answered (accepted or rejected)
  bool same_host = false;  // child: its Request asked for the same-host path (ConnRequest)
  bool attaching = false;  // the socket is being handed to the provider (lock released)
  bool ended = false;      // ...and the provider reported the connection's end meanwhile
  std::uint32_t qp_num = 0;
  std::uint32_t events_reported = 0;
  std::optional<DeviceInfo> dev;
  int tos = -1;              // RDMA_OPTION_ID_TOS, applied to the TCP socket by uiwarpd
  int afonly = -1;           // RDMA_OPTION_ID_AFONLY (IPV6_V6ONLY), -1 = unset
  bool reuseaddr = false;    // RDMA_OPTION_ID_REUSEADDR
  bool bound = false;        // has a port (rdma_bind_addr, or implied by resolve/listen)
  int sock = -1;             // the TCP socket holding that port, until the QP owns it
  std::uint32_t backlog = 0; // rdma_listen's, for registering again with a new uiwarpd

  bool addr_resolved() const { return state != IdState::Idle && state != IdState::Listen; }
  bool listening() const { return state == IdState::Listen; }
  bool connecting() const { return state == IdState::Connect && !child; } // rdma_connect's
  bool connected() const { return state == IdState::Established || state == IdState::Disconnected; }
};

// cma_comp_exch: moves `id` from `from` to `to` and says true, or leaves it and says false when
// it is in another state (the command then fails, as the kernel's does, with EINVAL).
bool comp_exch(Id& id, IdState from, IdState to);

// What a channel's fd shows: one count per queued event (an EFD_SEMAPHORE eventfd).
class Signals {
public:
  virtual void queued(int channel) = 0; // an event was queued on `channel`
  virtual void taken(int channel) = 0;  // one left it (delivered, dropped or moved away)

protected:
  ~Signals() = default;
};

class State {
public:
  explicit State(Signals& s) : signals_(s) {}

  // ---- channels (named by their fd) ----
  void open_channel(int fd) { channels_[fd].gen = ++channel_gen_; }
  bool is_channel(int fd) const { return channels_.count(fd) != 0; }
  // Tells a channel from a later one that reuses its fd number; nullopt: no channel.
  std::optional<std::uint64_t> generation(int fd) const;
  // close(): the channel and its ids go; returns the ids, whose sockets the caller releases.
  std::vector<Id> close_channel(int fd);
  std::size_t queued(int fd) const;

  // ---- ids ----
  Id& add_id(Id id); // gives it the next handle
  Id* find(std::uint32_t handle);
  std::map<std::uint32_t, Id>& ids() { return ids_; }

  // ---- events ----
  // Queues `event` on the id's channel (nothing when the channel is gone). `e` may name
  // another id (a CONNECT_REQUEST names the new child) and whom it is charged to.
  void queue(Id& id, std::uint32_t event, std::int32_t status, Event e = {});

  // GET_EVENT's step: the oldest event of channel `fd`, which now counts as reported.
  // `gen` is the channel's generation when the command started. Empty and Gone both mean
  // "wait" (or EAGAIN when non-blocking): the kernel's read holds the file of a channel closed
  // under it and sleeps on, it does not fail.
  enum class Take { Delivered, Empty, Gone };
  Take take_event(int fd, std::optional<std::uint64_t> gen, Event* out);

  // DESTROY_ID: drops the id and its undelivered events (those naming it or charged to it);
  // returns its events_reported, what rdma_destroy_id waits to have seen. The id must exist.
  std::uint32_t destroy_id(std::uint32_t handle);

  // MIGRATE_ID (ucma_migrate_id): the id moves from channel `from` (its current one, or
  // EINVAL) to `to`, with the events queued for it. 0 or EINVAL; *reported = events_reported.
  int migrate_id(std::uint32_t handle, int from, int to, std::uint32_t* reported);

  // ---- connections ----
  // ESTABLISHED, then DISCONNECTED at once if the connection ended while it was attached;
  // false (nothing queued) unless the id was in Connect.
  [[nodiscard]] bool connected(Id& id, Event e = {});
  // The provider saw the connection of QP `qp_num` end: DISCONNECTED, once; or, while the
  // socket is being attached (ESTABLISHED not queued yet), after ESTABLISHED (connected()).
  void qp_ended(std::uint32_t qp_num);
  void set_attaching(std::uint32_t qp_num, bool on);
  // uiwarpd left: connects in the MPA exchange fail (CONNECT_ERROR, `status`). How many.
  int fail_connects(std::int32_t status);

  // ---- ports (cma_check_port, cma_bind_listen) ----
  // Binding `id` to `a`: 0, or the conflict with another bound id (port 0 never conflicts).
  int bind_conflict(const Id& id, const sockaddr_storage& a) const;
  // LISTEN on an id that allowed reuse at bind: it must have the port to itself.
  int listen_conflict(const Id& id) const;

private:
  struct Channel {
    std::deque<Event> q;
    std::uint64_t gen = 0;
  };

  Signals& signals_;
  std::map<int, Channel> channels_;
  std::uint64_t channel_gen_ = 0;
  std::map<std::uint32_t, Id> ids_;
  std::uint32_t next_handle_ = 1;
};

} // namespace uiwarp::ucma
