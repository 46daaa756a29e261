// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The rdma_cm's ids, channels and events, without I/O: see ucma_state.hpp.
#include "ucma_state.hpp"

#include "ucma_addr.hpp"

#include <cerrno>
#include <iterator>
#include <utility>

namespace uiwarp::ucma {

namespace {

Binding binding(const Id& id) {
  return Binding{id.src, id.reuseaddr,
                 id.afonly >= 0 ? id.afonly != 0 : default_afonly(id.src.ss_family)};
}

} // namespace

const char* name(IdState s) {
  static constexpr const char* kNames[] = {"idle",    "addr-resolved", "listen",
                                           "connect", "established",   "disconnected"};
  static_assert(std::size(kNames) == static_cast<std::size_t>(IdState::Disconnected) + 1);
  return kNames[static_cast<std::size_t>(s)];
}

bool comp_exch(Id& id, IdState from, IdState to) {
  if (id.state != from) return false;
  id.state = to;
  return true;
}

std::optional<std::uint64_t> State::generation(int fd) const {
  auto ch = channels_.find(fd);
  return ch == channels_.end() ? std::nullopt : std::optional(ch->second.gen);
}

std::vector<Id> State::close_channel(int fd) {
  std::vector<Id> gone;
  if (!channels_.erase(fd)) return gone;
  for (auto it = ids_.begin(); it != ids_.end();) {
    if (it->second.channel == fd) {
      gone.push_back(it->second);
      it = ids_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

std::size_t State::queued(int fd) const {
  auto ch = channels_.find(fd);
  return ch == channels_.end() ? 0 : ch->second.q.size();
}

Id& State::add_id(Id id) {
  id.handle = next_handle_++;
  return ids_[id.handle] = id;
}

Id* State::find(std::uint32_t handle) {
  auto it = ids_.find(handle);
  return it == ids_.end() ? nullptr : &it->second;
}

void State::queue(Id& id, std::uint32_t event, std::int32_t status, Event e) {
  auto ch = channels_.find(id.channel);
  if (ch == channels_.end()) return;
  if (!e.resp.uid) e.resp.uid = id.uid;
  if (!e.resp.id) e.resp.id = id.handle; // a CONNECT_REQUEST names the new id instead
  e.resp.event = event;
  e.resp.status = static_cast<std::uint32_t>(status);
  if (!e.charged_to) e.charged_to = id.handle;
  ch->second.q.push_back(e);
  signals_.queued(id.channel);
}

State::Take State::take_event(int fd, std::optional<std::uint64_t> gen, Event* out) {
  auto ch = channels_.find(fd);
  if (!gen || ch == channels_.end() || ch->second.gen != *gen) return Take::Gone;
  if (ch->second.q.empty()) return Take::Empty;
  *out = ch->second.q.front();
  ch->second.q.pop_front();
  signals_.taken(fd);
  if (Id* id = find(out->charged_to)) ++id->events_reported;
  return Take::Delivered;
}

std::uint32_t State::destroy_id(std::uint32_t handle) {
  Id* id = find(handle);
  auto ch = channels_.find(id->channel);
  if (ch != channels_.end()) {
    auto& q = ch->second.q;
    for (auto it = q.begin(); it != q.end();) {
      if (it->resp.id == handle || it->charged_to == handle) {
        signals_.taken(id->channel);
        it = q.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::uint32_t reported = id->events_reported;
  ids_.erase(handle);
  return reported;
}

int State::migrate_id(std::uint32_t handle, int from, int to, std::uint32_t* reported) {
  Id* id = find(handle);
  if (!id || id->channel != from || !channels_.count(to)) return EINVAL;
  *reported = id->events_reported;
  if (to == from) return 0;
  auto& from_q = channels_[from].q;
  auto& to_q = channels_[to].q;
  for (auto it = from_q.begin(); it != from_q.end();) {
    if (it->resp.id == handle) {
      signals_.taken(from);
      to_q.push_back(*it);
      signals_.queued(to);
      it = from_q.erase(it);
    } else {
      ++it;
    }
  }
  id->channel = to;
  return 0;
}

bool State::connected(Id& id, Event e) {
  if (!comp_exch(id, IdState::Connect, IdState::Established)) return false;
  queue(id, RDMA_CM_EVENT_ESTABLISHED, 0, e);
  if (std::exchange(id.ended, false) && comp_exch(id, IdState::Established, IdState::Disconnected))
    queue(id, RDMA_CM_EVENT_DISCONNECTED, 0);
  return true;
}

void State::qp_ended(std::uint32_t qp_num) {
  for (auto& [h, id] : ids_) {
    if (id.qp_num != qp_num) continue;
    if (id.attaching)
      id.ended = true;
    else if (comp_exch(id, IdState::Established, IdState::Disconnected))
      queue(id, RDMA_CM_EVENT_DISCONNECTED, 0);
  }
}

void State::set_attaching(std::uint32_t qp_num, bool on) {
  for (auto& [h, id] : ids_)
    if (id.qp_num == qp_num) id.attaching = on;
}

int State::fail_connects(std::int32_t status) {
  int n = 0;
  for (auto& [h, id] : ids_) {
    // A connect whose socket is being attached is past uiwarpd: it completes by itself.
    if (!id.connecting() || id.attaching) continue;
    id.state = IdState::AddrResolved;
    queue(id, RDMA_CM_EVENT_CONNECT_ERROR, status);
    ++n;
  }
  return n;
}

int State::bind_conflict(const Id& id, const sockaddr_storage& a) const {
  if (!port_of(a)) return 0;
  Binding mine{a, id.reuseaddr, id.afonly >= 0 ? id.afonly != 0 : default_afonly(a.ss_family)};
  for (const auto& [h, other] : ids_)
    if (other.bound && &other != &id)
      if (int err = port_conflict(mine, binding(other), id.reuseaddr)) return err;
  return 0;
}

int State::listen_conflict(const Id& id) const {
  for (const auto& [h, other] : ids_)
    if (other.bound && &other != &id)
      if (int err = port_conflict(binding(id), binding(other), false)) return err;
  return 0;
}

} // namespace uiwarp::ucma
