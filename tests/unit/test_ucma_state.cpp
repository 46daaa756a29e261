// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The rdma_cm's id/channel/event rules (kernel-shim/shim/ucma_state.hpp) without a process, a
// daemon or a socket: the order events come out of a channel, what GET_EVENT does with an
// empty, closed or reused channel, what DESTROY_ID and MIGRATE_ID report and move (librdmacm
// waits for events_completed >= events_reported, docs/architecture.md), and the port
// conflicts of bind and listen (cma_check_port, cma_bind_listen).
#include "catch_compat.hpp"
#include "ucma_state.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <map>

using namespace uiwarp::ucma;

namespace {

// What each channel's eventfd would count: one per queued event.
struct Counts final : Signals {
  std::map<int, int> readable;
  void queued(int ch) override { ++readable[ch]; }
  void taken(int ch) override { --readable[ch]; }
};

struct Fixture {
  Counts counts;
  State st{counts};

  std::uint32_t id_on(int channel, std::uint64_t uid = 0) {
    Id id;
    id.channel = channel;
    id.uid = uid;
    return st.add_id(id).handle;
  }
  Id& id(std::uint32_t h) {
    Id* p = st.find(h);
    REQUIRE(p != nullptr);
    return *p;
  }
  void queue(std::uint32_t h, std::uint32_t event, std::int32_t status = 0) {
    st.queue(id(h), event, status);
  }
  // The next event of `fd` (REQUIREs one).
  Event take(int fd) {
    Event e;
    REQUIRE(st.take_event(fd, st.generation(fd), &e) == State::Take::Delivered);
    return e;
  }
  // The eventfd shows what the queue holds.
  void check_readable(int fd) { CHECK(counts.readable[fd] == static_cast<int>(st.queued(fd))); }
};

sockaddr_storage ip(int family, const char* text, std::uint16_t port) {
  sockaddr_storage a{};
  if (family == AF_INET) {
    auto& s = reinterpret_cast<sockaddr_in&>(a);
    s.sin_family = AF_INET;
    inet_pton(AF_INET, text, &s.sin_addr);
    s.sin_port = htons(port);
  } else {
    auto& s = reinterpret_cast<sockaddr_in6&>(a);
    s.sin6_family = AF_INET6;
    inet_pton(AF_INET6, text, &s.sin6_addr);
    s.sin6_port = htons(port);
  }
  return a;
}

// An id bound to `a`, as bind_id leaves it (the socket aside).
std::uint32_t bound_id(Fixture& f, const sockaddr_storage& a, bool reuseaddr = false,
                       int afonly = -1) {
  std::uint32_t h = f.id_on(3);
  Id& id = f.id(h);
  id.src = a;
  id.reuseaddr = reuseaddr;
  id.afonly = afonly;
  id.bound = true;
  return h;
}

} // namespace

TEST_CASE("UCMA state: a channel's events come out in the order they were queued", "[ucma]") {
  Fixture f;
  f.st.open_channel(3);
  std::uint32_t a = f.id_on(3, 0xa), b = f.id_on(3, 0xb);
  f.queue(a, RDMA_CM_EVENT_ADDR_RESOLVED);
  f.queue(b, RDMA_CM_EVENT_ADDR_ERROR, -ENODEV);
  f.queue(a, RDMA_CM_EVENT_ROUTE_RESOLVED);
  CHECK(f.st.queued(3) == 3);
  f.check_readable(3);

  Event e = f.take(3);
  CHECK(e.resp.id == a);
  CHECK(e.resp.uid == 0xa);
  CHECK(e.resp.event == RDMA_CM_EVENT_ADDR_RESOLVED);
  e = f.take(3);
  CHECK(e.resp.id == b);
  CHECK(e.resp.event == RDMA_CM_EVENT_ADDR_ERROR);
  CHECK(static_cast<std::int32_t>(e.resp.status) == -ENODEV);
  f.check_readable(3);
  e = f.take(3);
  CHECK(e.resp.event == RDMA_CM_EVENT_ROUTE_RESOLVED);
  CHECK(f.id(a).events_reported == 2);
  CHECK(f.id(b).events_reported == 1);
  f.check_readable(3);
  CHECK(f.st.take_event(3, f.st.generation(3), &e) == State::Take::Empty);
}

TEST_CASE("UCMA state: GET_EVENT waits on an empty, closed or reused channel, never fails",
          "[ucma]") {
  Fixture f;
  f.st.open_channel(3);
  Event e;
  const auto gen = f.st.generation(3);
  REQUIRE(gen);
  CHECK(f.st.take_event(3, gen, &e) == State::Take::Empty); // blocks, or EAGAIN
  // The channel was missing when the command started (closed before it took the lock).
  CHECK(f.st.take_event(3, std::nullopt, &e) == State::Take::Gone);
  // Closed under the reader: the kernel's read holds the file and sleeps on.
  f.st.close_channel(3);
  CHECK_FALSE(f.st.is_channel(3));
  CHECK(f.st.take_event(3, gen, &e) == State::Take::Gone);
  // A new channel on the same fd number is not the reader's, even with events queued.
  f.st.open_channel(3);
  CHECK(f.st.generation(3) != gen);
  f.queue(f.id_on(3), RDMA_CM_EVENT_ADDR_RESOLVED);
  CHECK(f.st.take_event(3, gen, &e) == State::Take::Gone);
  CHECK(f.st.take_event(3, f.st.generation(3), &e) == State::Take::Delivered);
}

TEST_CASE("UCMA state: a CONNECT_REQUEST names the child and counts against the listener",
          "[ucma]") {
  Fixture f;
  f.st.open_channel(3);
  std::uint32_t listener = f.id_on(3, 0x11), child = f.id_on(3);
  Event req;
  req.resp.id = child;
  req.charged_to = listener;
  f.st.queue(f.id(listener), RDMA_CM_EVENT_CONNECT_REQUEST, 0, req);
  Event e = f.take(3);
  CHECK(e.resp.id == child);
  CHECK(e.resp.uid == 0x11); // the listener's, until ACCEPT names the child's
  CHECK(e.resp.event == RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(f.id(listener).events_reported == 1);
  CHECK(f.id(child).events_reported == 0);
}

TEST_CASE("UCMA state: DESTROY_ID drops the id's pending events, reports the delivered ones",
          "[ucma]") {
  Fixture f;
  f.st.open_channel(3);
  std::uint32_t a = f.id_on(3), b = f.id_on(3);
  f.queue(a, RDMA_CM_EVENT_ADDR_RESOLVED);
  f.queue(b, RDMA_CM_EVENT_ADDR_RESOLVED);
  f.queue(a, RDMA_CM_EVENT_ROUTE_RESOLVED);
  f.queue(a, RDMA_CM_EVENT_ESTABLISHED);
  CHECK(f.take(3).resp.id == a);
  CHECK(f.st.destroy_id(a) == 1); // what rdma_destroy_id waits to have acknowledged
  CHECK(f.st.find(a) == nullptr);
  CHECK(f.st.queued(3) == 1);
  f.check_readable(3);
  CHECK(f.take(3).resp.id == b);

  SECTION("a listener's destroy drops the requests charged to it; a child's, the one naming it") {
    std::uint32_t listener = f.id_on(3);
    for (int i = 0; i < 2; ++i) {
      Event req;
      req.resp.id = f.id_on(3);
      req.charged_to = listener;
      f.st.queue(f.id(listener), RDMA_CM_EVENT_CONNECT_REQUEST, 0, req);
    }
    const std::uint32_t second_child = listener + 2;
    CHECK(f.st.destroy_id(second_child) == 0);
    CHECK(f.st.queued(3) == 1);
    CHECK(f.st.destroy_id(listener) == 0);
    CHECK(f.st.queued(3) == 0);
    f.check_readable(3);
  }
}

TEST_CASE("UCMA state: MIGRATE_ID moves the id and its queued events to the new channel",
          "[ucma]") {
  Fixture f;
  f.st.open_channel(3);
  f.st.open_channel(4);
  std::uint32_t a = f.id_on(3), b = f.id_on(3);
  f.queue(a, RDMA_CM_EVENT_ADDR_RESOLVED);
  f.queue(b, RDMA_CM_EVENT_ADDR_RESOLVED);
  f.queue(a, RDMA_CM_EVENT_ROUTE_RESOLVED);
  CHECK(f.take(3).resp.id == a);
  std::uint32_t reported = 99;
  CHECK(f.st.migrate_id(a, 4, 3, &reported) == EINVAL); // `from` must be its channel
  CHECK(f.st.migrate_id(a, 3, 5, &reported) == EINVAL); // no channel 5
  CHECK(f.st.migrate_id(999, 3, 4, &reported) == EINVAL);
  CHECK(reported == 99);
  CHECK(f.st.migrate_id(a, 3, 3, &reported) == 0); // to itself: nothing moves
  CHECK(reported == 1);
  CHECK(f.st.queued(3) == 2);

  CHECK(f.st.migrate_id(a, 3, 4, &reported) == 0);
  CHECK(reported == 1);
  CHECK(f.id(a).channel == 4);
  CHECK(f.st.queued(3) == 1);
  CHECK(f.st.queued(4) == 1);
  f.check_readable(3);
  f.check_readable(4);
  CHECK(f.take(4).resp.event == RDMA_CM_EVENT_ROUTE_RESOLVED);
  CHECK(f.take(3).resp.id == b);
  f.queue(a, RDMA_CM_EVENT_ESTABLISHED); // later events follow the id
  CHECK(f.st.queued(4) == 1);
  CHECK(f.id(a).events_reported == 2);
}

TEST_CASE("UCMA state: closing a channel takes its ids, not the others'", "[ucma]") {
  Fixture f;
  f.st.open_channel(3);
  f.st.open_channel(4);
  std::uint32_t a = f.id_on(3), b = f.id_on(4), c = f.id_on(3);
  std::vector<Id> gone = f.st.close_channel(3);
  REQUIRE(gone.size() == 2);
  CHECK(gone[0].handle == a);
  CHECK(gone[1].handle == c);
  CHECK(f.st.find(a) == nullptr);
  CHECK(f.st.find(b) != nullptr);
  CHECK(f.st.close_channel(3).empty()); // closed once
  f.queue(b, RDMA_CM_EVENT_ADDR_RESOLVED);
  CHECK(f.st.queued(4) == 1);
}

TEST_CASE("UCMA state: ESTABLISHED then one DISCONNECTED, also when the end came during attach",
          "[ucma]") {
  Fixture f;
  f.st.open_channel(3);
  std::uint32_t a = f.id_on(3);
  f.id(a).qp_num = 7;
  f.id(a).state = IdState::Connect;
  SECTION("ended after ESTABLISHED") {
    CHECK(f.st.connected(f.id(a)));
    CHECK(f.id(a).state == IdState::Established);
    f.st.qp_ended(7);
    f.st.qp_ended(7);
  }
  SECTION("ended while the socket was being attached") {
    f.st.set_attaching(7, true);
    f.st.qp_ended(7);
    CHECK(f.st.queued(3) == 0);
    f.st.set_attaching(7, false);
    CHECK(f.st.connected(f.id(a)));
  }
  CHECK(f.id(a).state == IdState::Disconnected);
  CHECK(f.id(a).connected());
  CHECK(f.take(3).resp.event == RDMA_CM_EVENT_ESTABLISHED);
  CHECK(f.take(3).resp.event == RDMA_CM_EVENT_DISCONNECTED);
  CHECK(f.st.queued(3) == 0);
}

TEST_CASE("UCMA state: the id lifecycle moves only from the state a transition names", "[ucma]") {
  Fixture f;
  f.st.open_channel(3);
  Id& id = f.id(f.id_on(3));
  CHECK(id.state == IdState::Idle);
  CHECK_FALSE(id.addr_resolved());
  // cma_comp_exch: from the named state only; anything else is refused and changes nothing.
  CHECK_FALSE(comp_exch(id, IdState::AddrResolved, IdState::Connect));
  CHECK(id.state == IdState::Idle);
  CHECK(comp_exch(id, IdState::Idle, IdState::AddrResolved));
  CHECK(id.addr_resolved());
  CHECK_FALSE(id.connecting());
  CHECK(comp_exch(id, IdState::AddrResolved, IdState::Connect));
  CHECK(id.connecting());
  CHECK_FALSE(id.connected());
  // ESTABLISHED only from Connect: a second one is refused and queues nothing.
  CHECK(f.st.connected(id));
  CHECK_FALSE(f.st.connected(id));
  CHECK(f.st.queued(3) == 1);
  CHECK(id.connected());
  CHECK_FALSE(id.connecting());
  // An id that never connected has no connection to end.
  Id& idle = f.id(f.id_on(3));
  idle.qp_num = 9;
  f.st.qp_ended(9);
  CHECK(idle.state == IdState::Idle);
  CHECK(f.st.queued(3) == 1);
  // A request's child connects without connecting(): rdma_connect's checks leave it alone.
  Id child;
  child.child = true;
  child.state = IdState::Connect;
  CHECK_FALSE(child.connecting());
  CHECK(child.addr_resolved());
  CHECK(std::string(name(IdState::Disconnected)) == "disconnected");
}

TEST_CASE("UCMA state: a lost uiwarpd fails the connects in progress only", "[ucma]") {
  Fixture f;
  f.st.open_channel(3);
  std::uint32_t a = f.id_on(3), b = f.id_on(3), c = f.id_on(3);
  f.id(a).state = IdState::Connect;
  f.id(b).state = IdState::Established;
  // One whose socket is being attached is past uiwarpd: it completes by itself.
  f.id(c).state = IdState::Connect;
  f.id(c).qp_num = 5;
  f.st.set_attaching(5, true);
  CHECK(f.st.fail_connects(-ECONNABORTED) == 1);
  CHECK_FALSE(f.id(a).connecting());
  CHECK(f.id(a).state == IdState::AddrResolved);
  CHECK(f.id(b).state == IdState::Established);
  CHECK(f.id(c).state == IdState::Connect);
  Event e = f.take(3);
  CHECK(e.resp.id == a);
  CHECK(e.resp.event == RDMA_CM_EVENT_CONNECT_ERROR);
  CHECK(static_cast<std::int32_t>(e.resp.status) == -ECONNABORTED);
  CHECK(f.st.queued(3) == 0);
  CHECK(f.id(c).events_reported == 0);
}

TEST_CASE("UCMA state: bind port conflicts follow cma_check_port", "[ucma]") {
  Fixture f;
  bound_id(f, ip(AF_INET, "192.0.2.1", 5000));
  Id& me = f.id(f.id_on(3));
  CHECK(f.st.bind_conflict(me, ip(AF_INET, "192.0.2.1", 5000)) == EADDRINUSE);
  CHECK(f.st.bind_conflict(me, ip(AF_INET, "0.0.0.0", 5000)) == EADDRNOTAVAIL);
  CHECK(f.st.bind_conflict(me, ip(AF_INET, "192.0.2.2", 5000)) == 0);
  CHECK(f.st.bind_conflict(me, ip(AF_INET, "192.0.2.1", 5001)) == 0);
  CHECK(f.st.bind_conflict(me, ip(AF_INET, "192.0.2.1", 0)) == 0); // an ephemeral port
  me.reuseaddr = true;                                             // only one side allows reuse
  CHECK(f.st.bind_conflict(me, ip(AF_INET, "192.0.2.1", 5000)) == EADDRINUSE);

  SECTION("both allow reuse") {
    Fixture g;
    bound_id(g, ip(AF_INET, "192.0.2.1", 5000), true);
    Id& other = g.id(g.id_on(3));
    other.reuseaddr = true;
    CHECK(g.st.bind_conflict(other, ip(AF_INET, "192.0.2.1", 5000)) == 0);
  }
  SECTION("an id that is not bound holds no port") {
    Fixture g;
    g.id(bound_id(g, ip(AF_INET, "192.0.2.1", 5000))).bound = false;
    CHECK(g.st.bind_conflict(g.id(g.id_on(3)), ip(AF_INET, "192.0.2.1", 5000)) == 0);
  }
  SECTION("an IPv6-only id and an IPv4 id keep their families apart") {
    Fixture g;
    bound_id(g, ip(AF_INET, "0.0.0.0", 5000));
    Id& v6 = g.id(g.id_on(3));
    v6.afonly = 1;
    CHECK(g.st.bind_conflict(v6, ip(AF_INET6, "::", 5000)) == 0);
    v6.afonly = 0; // dual-stack: its wildcard covers IPv4's
    CHECK(g.st.bind_conflict(v6, ip(AF_INET6, "::", 5000)) == EADDRNOTAVAIL);
  }
}

TEST_CASE("UCMA state: LISTEN after a reuseaddr bind needs the port to itself "
          "(cma_bind_listen)",
          "[ucma]") {
  Fixture f;
  std::uint32_t x = bound_id(f, ip(AF_INET, "192.0.2.1", 5000), true);
  std::uint32_t y = bound_id(f, ip(AF_INET, "192.0.2.1", 5000), true);
  CHECK(f.st.listen_conflict(f.id(x)) == EADDRINUSE);
  f.st.destroy_id(y);
  CHECK(f.st.listen_conflict(f.id(x)) == 0);
  bound_id(f, ip(AF_INET, "0.0.0.0", 5000), true);
  CHECK(f.st.listen_conflict(f.id(x)) == EADDRNOTAVAIL);
  bound_id(f, ip(AF_INET, "192.0.2.1", 6000), true); // another port: no matter
  std::uint32_t z = bound_id(f, ip(AF_INET, "192.0.2.9", 7000), true);
  CHECK(f.st.listen_conflict(f.id(z)) == 0);
}
