// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Provider objects: each wraps the libibverbs object it hands out (first member, so a
// downcast is a cast) and the libiwarp state behind it.
#pragma once

#include "drive.hpp"
#include "iwarp/memory.hpp"
#include "iwarp/qp.hpp"
#include "qp_lock.hpp"
#include "samehost/host.hpp"
#include "samehost/mapping.hpp"
#include "verbs_abi.h"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <infiniband/verbs.h>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <sys/epoll.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace uiwarp {

// Limits reported by query_device and enforced by every verb.
struct Limits {
  static constexpr std::uint32_t kMaxQp = 16384;
  static constexpr std::uint32_t kMaxQpWr = 16384;
  static constexpr std::uint32_t kMaxSge = 16;
  static constexpr std::uint32_t kMaxInline = 256;
  static constexpr std::uint32_t kMaxCq = 16384;
  static constexpr std::uint32_t kMaxCqe = 1 << 20;
  static constexpr std::uint32_t kMaxMr = (1 << 24) - 2; // 24-bit STag index, 0 unused
  static constexpr std::uint64_t kMaxMrSize = 1ull << 40;
  static constexpr std::uint32_t kMaxPd = 1 << 20;
  static constexpr std::uint32_t kMaxOrdIrd = 128; // max_qp_rd_atom / max_qp_init_rd_atom
  static constexpr std::uint32_t kMaxSrq = 16384;
  static constexpr std::uint32_t kMaxSrqWr = 16384;
  static constexpr std::uint32_t kMaxMsg = 1u << 31;
  // No IEEE OUI is registered for uiwarp; a fixed private value, stable across releases.
  static constexpr std::uint32_t kVendorId = 0x7569;     // "ui"
  static constexpr std::uint32_t kVendorPartId = 0x7770; // "wp"
};

struct Device {
  verbs_device vdev; // first: libibverbs frees it through uninit_device
  std::string netdev;
  std::string ibdev;
  std::string sysfs_path; // $SYSFS_PATH/class/infiniband/<ibdev>

  // A sysfs attribute of this device, trailing newline removed ("" if absent).
  std::string attr(const std::string& file) const;
};

struct Cq;
struct Qp;
struct Srq;
class Progress;

// Locks, in the order they are taken (never an earlier one while holding a later one):
//
//   Cq::poll_mu (an extended poll, start_poll to end_poll: the program may post meanwhile)
//   -> Cq::qps_mu, or else Context::qps_mu (shared: pollers; exclusive: QP create/destroy)
//     -> Qp::mu (the send queue, receive queue, engine and socket of one QP)
//       -> Srq::qps_mu, the SharedRecvQueue's lock, and Context::mu (the verbs that count
//          objects or change the STag table: reg, rereg, dereg)
//         -> samehost::Host's init_mu_ (the first same-host connection makes the table)
//           -> the MemoryTable's lock -> samehost::Host's mu_ (its observer calls)
//             -> Cq::mu (the completion ring)
//   Progress::timers_mu_ (taken under Qp::mu) and the QP registry's lock take nothing else.
//
// Context::mu is never held on the data path. No lock but at most Qp::mu is held while a thread
// waits for another process: a same-host peer's copy in progress is waited for by
// samehost::Host::settle() after the verb has let go of Context::mu and the table's lock
// (dereg_mr, rereg_mr, dealloc_mw, modify_qp, destroy_qp), or under its own QP's lock alone
// when a completion says an STag is invalid (Qp::reap). The progress thread reaches a QP
// through the pointer epoll hands it (Qp::refs keeps the QP alive meanwhile): nothing on the
// data path looks a QP up in a shared map.
struct Context {
  verbs_context vctx; // ibv_context is its LAST member: see of()
  Device* dev = nullptr;
  int async_wfd = -1; // libibverbs reads async events from vctx.context.async_fd
  std::mutex mu;
  iwarp::MemoryTable mem; // the STag table, behind its own reader-writer lock
  // Its copy for same-host peers, made at the first same-host connection (qp_same_host.cpp).
  samehost::Host same_host{mem};
  std::uint32_t next_pd = 1;
  std::uint32_t pds = 0, mrs = 0, cqs = 0, qps = 0, srqs = 0;
  int (*comp_channel_wfd)(int) noexcept = nullptr; // ShimOps::comp_channel_wfd, if any
  // The progress thread, started by the first connected QP: created under `mu`, read by the
  // data path without it (a poll may race a connection's start), hence published atomically.
  Progress* progress() const { return progress_run.load(std::memory_order_acquire); }
  std::unique_ptr<Progress> progress_owner;
  std::atomic<Progress*> progress_run{nullptr};
  // Every QP, for polls that adopt QPs whose own CQs nobody polls (Cq::drive).
  std::shared_mutex qps_mu;
  std::vector<Qp*> all_qps;
  // The latest Qp::reads_ns of any of them: without a recent Read responder a poll has nothing
  // to adopt and does not take qps_mu.
  std::atomic<std::int64_t> reads_ns{0};
  // What the drive policy decided for the QPs and CQs destroyed so far (under mu): one line
  // at close with VERBS_LOG_LEVEL=3 (info).
  drive::Counters drive_totals;
  void add_drive_counters(const drive::Counters& c);
  // Counts one more object of a kind that may have at most `max` (query_device's limits):
  // false, with errno ENOMEM, when there are that many; uncount() gives it back.
  bool count(std::uint32_t Context::*n, std::uint32_t max) {
    std::lock_guard lock(mu);
    if (this->*n >= max) {
      errno = ENOMEM;
      return false;
    }
    ++(this->*n);
    return true;
  }
  void uncount(std::uint32_t Context::*n) {
    std::lock_guard lock(mu);
    --(this->*n);
  }
  ~Context();

  // Queues an async event (IBV_EVENT_*) for ibv_get_async_event.
  void post_async_event(std::uint64_t element, std::uint32_t type);
  // Starts the progress thread unless it runs: 0 or ENOMEM.
  int start_progress();
  // In a child of fork(): forgets the parent's progress thread (Progress::inherited).
  void drop_inherited_progress();
};

// Objects that others depend on count their users: destroying one in use is
// EBUSY, as with the kernel's uverbs.
struct Pd {
  ibv_pd ibv;
  std::uint32_t id;
  std::atomic<int> users{0}; // MRs, QPs, SRQs
};

struct Mr {
  verbs_mr vmr;
  std::uint32_t pd_id;
};

struct Cq {
  verbs_cq vcq;
  bool extended = false;
  std::mutex mu;
  std::atomic<bool> event_lost{false}; // a channel event was lost and reported (Cq::push)
  std::vector<ibv_wc> ring;            // capacity = cqe
  std::size_t head = 0;
  // Written under `mu`; read without it by pollers to return at once when empty,
  // so a spinning poller does not keep taking the lock the producer needs.
  std::atomic<std::size_t> count{0};
  std::atomic<bool> armed{false}; // written under `mu`; read by the progress thread
  bool solicited_only = false;
  bool overflowed = false;
  std::uint64_t wc_flags_ex = 0; // ibv_cq_init_attr_ex.wc_flags
  ibv_wc current{};              // the entry an extended poll is on
  // The extended poll holds the CQ from start_poll to end_poll (the API keeps the current
  // entry in the shared ibv_cq_ex), but not by `mu`: between the two the program may post, and
  // a post adds completions under `mu` (a flush in ERR, a reaped send), from this thread or the
  // progress thread; holding `mu` over the program's code deadlocked both ways. This lock
  // serialises extended pollers; nobody adding completions takes it.
  std::mutex poll_mu;
  std::atomic<int> users{0}; // QPs
  // The QPs a poll of this CQ drives (it is their send or receive CQ), and how many of
  // them are parked (progress.cpp).
  std::shared_mutex qps_mu;
  std::vector<Qp*> qps;
  std::atomic<int> parked{0};
  drive::CqDrive policy; // when it was polled, and whether an idle poller gives way (drive.hpp)

  Context* ctx();
  // Adds completions; signals the channel if armed (and solicited, when asked).
  void push(const ibv_wc& wc, bool solicited);
  // A poll's first step: true if the ring holds completions, driving this CQ's QPs when it is
  // empty (drive), and giving the CPU away when it stays idle (CqDrive::on_idle_poll).
  bool ready();
  // Progress in the caller's thread: moves the bytes of this CQ's QPs that no other thread
  // is driving right now, and so their completions into the ring; then answers the Read
  // Requests of the context's QPs whose own CQs nobody polls (adopt).
  drive::Ns drive(); // returns the time it read
  void drive_one(Qp* qp, drive::Ns now, Progress* p, bool empty, bool adopted);
  void adopt(drive::Ns now, Progress* p, std::size_t mine);
  // A poll hands out completions: parked QPs go back to the progress thread.
  void unpark();
};

struct Srq {
  ibv_srq ibv;
  std::unique_ptr<iwarp::SharedRecvQueue> q; // its own lock
  std::uint32_t max_sge = 0;
  std::atomic<std::uint32_t> limit{0}; // IBV_EVENT_SRQ_LIMIT_REACHED threshold, 0 = disarmed
  std::uint32_t pd_id = 0;
  std::atomic<int> users{0}; // QPs
  std::mutex qps_mu;         // the QPs it feeds, whose waiting Sends a post may release
  std::vector<Qp*> qps;
};

using drive::Driver;

struct Qp {
  verbs_qp vqp;
  QpLock mu;
  // The verbs handle holds one reference; the progress thread holds one while it watches
  // the socket and one while the QP is on its timer list. The last one frees the QP.
  std::atomic<int> refs{1};
  // ---- the verbs attributes ----
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  ibv_qp_state state = IBV_QPS_RESET; // what ibv_query_qp says; set_state() only
  int access = 0;
  std::uint32_t pd_id = 0;
  Srq* srq = nullptr;

  // ---- work posted before the connection exists, flushed or handed on at attach ----
  struct Early {
    iwarp::Ring<iwarp::RecvWr> recv; // receives posted in INIT/RTR
    iwarp::Ring<iwarp::SendWr> send; // Sends posted in RTS while an IB-style connect is under way
  } early;

  // ---- IB-style connect (ib_connect.cpp): the shim makes the connection ----
  struct IbConnect {
    bool pending = false; // waiting for the connection
    bool path = false;    // connected (or connecting) IB-style, until RESET
    std::uint32_t peer_qpn = 0;
  } ib;

  // ---- the protocol engine, created when the CM connects the QP ----
  std::unique_ptr<iwarp::Qp> engine;

  // ---- the connection: the socket, after the CM attached it (qp_io.cpp) ----
  struct Conn {
    int fd = -1;
    bool want_write = false; // the socket was full
    bool fin_sent = false;
    bool peer_closed = false;
    bool event_reported = false;
    bool recv_wait_reported = false; // report_recv_wait said it once for this connection
    std::string addresses;           // "local -> peer", for the log lines (note_endpoints)
  } conn;

  // ---- receiving: headers and short payloads through a staging buffer, many frames per
  // system call; uninitialised, so an idle connection's pages are never touched ----
  static constexpr std::size_t kStaging = 64 << 10;
  struct Rx {
    std::unique_ptr<std::byte[]> staging;
    std::size_t pos = 0, end = 0; // what is staged and not yet fed to the engine
    bool after_direct = false;    // the last read went into place: stage up to the next header
  } rx;

  // ---- transmitting: the gather list, and the pipe that large Read Responses may take by
  // reference (qp_splice.cpp) ----
  static constexpr std::size_t kMaxIov = 256; // pieces per sendmsg, writev or vmsplice
  struct Tx {
    std::vector<iwarp::ConstBytes> pieces; // push_tx's gather list, sized once
    std::vector<std::uint8_t> by_ref;      // and which pieces may go by reference
    int pipe[2] = {-1, -1};                // the pipe's ends, once made
    std::size_t piped = 0;                 // octets in the pipe, not yet in the socket
    bool splice_failed = false;            // vmsplice was refused here: copy from then on
  } tx;

  // ---- the same-host path (qp_same_host.cpp): RDMA Writes and Reads copied straight between
  // the two processes when both ends are uiwarp on one host ----
  struct SameHost {
    enum class State : std::uint8_t {
      Off,     // TCP only: not negotiated, refused, or ended (why says why)
      Waiting, // responder: the initiator's answer has not come yet
      On,
    };
    State state = State::Off;
    // Inbound, what the peer does here: it copies through a slot of this process's table...
    bool inbound_open = false;
    std::uint32_t inbound_slot = 0; // ...this one
    // Outbound, what we do there: we copy through our slot of the peer's table, once attached.
    std::optional<samehost::PeerRegion> peer;
    std::uint32_t outbound_slot = 0;
    samehost::Reader::Owner owner; // the peer's end: the pins' PD and stream
    std::uint64_t rtr_octets = 0;  // what attach() sent first: the RFC 6581 RTR, if any
    // samehost::fork_generation() at the probe: a child of fork() does not copy.
    std::uint32_t forks = 0;
    // How the path reaches the peer once On (PeerRegion::Reach), for a report made without
    // the QP's lock (same_host_wait_report).
    std::atomic<std::uint8_t> reach{0};
    // The stream through shared memory (qp_ring.cpp, samehost/stream_ring.hpp): what the peer
    // writes into our slot's ring, and what we write into our slot's ring in its table.
    samehost::RingReader inbound;
    samehost::RingWriter outbound;
    bool peer_on = false;   // the peer attached our table too: our stream may switch
    bool tx_ring = false;   // our stream goes into `outbound` (TCP carries doorbells only)
    bool tx_closed = false; // ...which the peer closed: nothing more leaves
    // The peer's stream comes from `inbound` now. Written under the QP's lock; atomic because
    // ibv_req_notify_cq reads it without (ring_unlook).
    std::atomic<bool> rx_ring{false};
    bool rx_eof = false;      // TCP ended after the switch: the close once the ring is read
    bool rx_reset = false;    // ...by a reset (or loss), not a FIN
    bool ring_back = false;   // the peer waits for room in `inbound`: ring it
    bool rung = false;        // this drive read doorbells: a full `outbound` is retried
    std::uint64_t rx_tcp = 0; // stream octets that came over TCP
    // Copies into the peer's regions that lie in memory both processes map (samehost/mapping.hpp),
    // and the BackingKinds `uiwarp conn show` has been told of (bit 1 << kind).
    samehost::SharedMappings maps;
    std::uint8_t maps_told = 0;
  } same_host;

  // ---- who moves the bytes, and when (drive.hpp): held posts, the receive back-off,
  // parking, held Sends, the Read Response path; its counters ----
  drive::QpDrive policy;

  // ---- what the progress thread does with it (progress.cpp) ----
  struct Watch {
    bool in_epoll = false;    // its epoll has the socket...
    std::uint32_t events = 0; // ...with these events
    bool timed = false;       // on its timer list (a reference held)...
    drive::QpDrive::Wake at;  // ...due then (under Progress::timers_mu_)
  } watch;

  // ---- ibv_wr_* (the extended send API): the batch being built, sized for the send queue ----
  struct WrBatch {
    iwarp::Ring<iwarp::SendWr> batch;
    int error = 0;
  } wr;

  Context* ctx();
  Cq* send_cq();
  Cq* recv_cq();
  bool connected() const { return engine && conn.fd >= 0; }
  // The verbs state is kept in two places, Qp::state (ibv_query_qp) and vqp.qp.state (the
  // ibv_qp libibverbs hands out); the engine's iwarp::QpState follows the connection on its
  // own. They change together here, with one exception at creation: the ibv_qp says RESET
  // (ibv_cmd_create_qp sets it for every device) while ibv_query_qp says INIT, as on an RNIC
  // (siw reports its IDLE as INIT); rdma-core's tests/test_qp.py checks both.
  void set_state(ibv_qp_state s) {
    state = s;
    vqp.qp.state = s;
  }

  void ref() { refs.fetch_add(1, std::memory_order_relaxed); }
  void unref(); // frees the QP with the last reference

  // With `mu` held (qp_io.cpp):
  // Moves bytes both ways (as much as `who` does, see Driver) and completions to the CQs,
  // then tells the progress thread what to watch; `now` is the caller's mono_ns().
  void drive(Driver who, drive::Ns now);
  // Moves the engine's completions to the CQs; `until_flushed`: only those before the first
  // flushed one.
  void reap(bool until_flushed = false);
  // A work request that never reached the engine (posted in ERR, or held before a connection
  // that did not come) completes with IBV_WC_WR_FLUSH_ERR on its CQ.
  void flush_completion(const iwarp::RecvWr& w);
  void flush_completion(const iwarp::SendWr& w);
  // Flushes everything outstanding (QP to ERR).
  void flush();
  // The log lines of qp_report.cpp: "connection A -> B, QP 0x..."; why the connection ended
  // (not for an orderly close or the program's own flush); a Send that waits for a receive.
  void note_endpoints(); // at attach
  std::string endpoints() const;
  void report_end() const;
  void report_recv_wait();
  // Transmits what the engine has ready; notes a full socket, which is tried again only
  // with `retry_full` (the progress thread, and pollers of a parked QP; not every post).
  void push_tx(bool retry_full);
  // After a post (`reads_only`: of RDMA Reads alone): transmits now, or leaves what was
  // posted for the next drive when one is sure to come soon (qp_io.cpp).
  void drive_posted(bool reads_only);
  // A send into the socket failed with `err` (not EINTR): full (want_write, tried again when
  // there is room), or the connection is gone.
  void tx_error(int err);
  struct PushClock { // a push_tx that sends large Read Responses, timed for want_splice
    Qp* qp;
    std::int64_t t0 = 0;
    drive::QpDrive::Path path = drive::QpDrive::Path::Copy;
    std::size_t octets = 0;
    ~PushClock();
  };
  // The pipe path of push_tx (qp_splice.cpp): whether the gathered pieces should take it (and
  // its pipe exists); puts them into the pipe until it is full and returns how many octets it
  // took; moves the pipe into the socket (false: full, or the connection failed); closes it.
  bool want_splice(PushClock& clock);
  std::size_t fill_pipe();
  bool drain_pipe();
  void close_pipe();
  // Reads and processes what the socket (or the stream ring) has, up to `budget` octets;
  // false if it had nothing.
  bool pull_rx(Driver who, std::size_t budget, drive::Ns now);
  // The same-host stream ring (qp_ring.cpp), with `mu` held. Switches our stream to the ring
  // once it may (the peer attached ours, nothing of ours left on TCP); true if it goes there.
  bool ring_tx_ready();
  // A Send waiting for a buffer of the QP's SRQ takes one posted since: true if it did (the
  // caller reads on). Any thread may have posted it, so every drive and the progress thread's
  // look at a waiting QP ask.
  bool retry_srq_hold(drive::Ns now);
  void push_ring();
  void ring_discard();
  // The engine's next octets into tx.pieces: how many (0: nothing to send).
  std::size_t ring_gather();
  void ring_in_child();
  // Switches to reading the ring once TCP has brought every octet before the peer's switch.
  bool ring_rx_ready();
  bool pull_ring(Driver who, std::size_t budget, drive::Ns now);
  // A CQ of this QP was armed: no poll stands for the reader now. True if the ring already
  // holds octets, which the caller has read (the progress thread).
  bool ring_unlook();
  // Of `got` octets TCP just brought, how many are the stream's (the rest are doorbells);
  // counts them.
  std::size_t tcp_stream_octets(std::size_t got);
  void doorbell();
  // Reads the doorbells the socket holds, which carry nothing, up to its end: what ended it
  // (None: only doorbells so far). True in `got` if it read anything or the end.
  enum class SocketEnd : std::uint8_t { None, Fin, Reset };
  SocketEnd read_doorbells(bool& got);
  // The peer wrote an impossible ring position: the connection ends as a TCP reset would.
  void ring_broken(const char* what);
  // After I/O: completions, close handling, events to the CM; the async events of a QP that
  // enters ERR there.
  void after_io();
  // The QP entered ERR and its completions are in its CQs: IBV_EVENT_QP_LAST_WQE_REACHED if it
  // takes its receives from an SRQ (once per entry into ERR).
  void last_wqe_reached();
  // Drops the connection and the engine (QP to RESET, destroy).
  void detach();
  // The same-host path (qp_same_host.cpp), with `mu` held. At attach: take it (initiator) or
  // wait for the initiator's answer (responder), as `p` negotiated.
  void same_host_attach(const iwarp::ConnParams& p);
  // After attach() sent what a connection starts with (the RTR in peer-to-peer mode).
  void same_host_started();
  // A responder: takes the initiator's answer once it is in our slot (then On), or gives up
  // the path when data came without one.
  void same_host_finish();
  // An RDMA Write or Read posted: true if it was copied and completed here; false, and the
  // caller posts it to the engine, whenever TCP must carry it (also to get its exact error).
  bool same_host_post(const iwarp::SendWr& w);
  // The connection ended or the QP goes: the peer's copies through our slot stop (this waits
  // for one in progress), and ours into the peer stop.
  void same_host_end(const char* why);
};

// From the libibverbs object to the provider's, as rdma-core's providers do it (rxe's to_r*()):
// each provider object begins with the libibverbs object it hands out, so the downcast is a
// cast; Context's ibv_context sits inside its first member, verbs_context.
inline Device* to_dev(ibv_device* d) { return reinterpret_cast<Device*>(d); }
inline Device* to_dev(verbs_device* d) { return reinterpret_cast<Device*>(d); }
inline Context* to_ctx(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) - offsetof(verbs_context, context));
}
inline Pd* to_pd(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
inline Mr* to_mr(verbs_mr* m) { return reinterpret_cast<Mr*>(m); }
inline Cq* to_cq(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
inline Cq* to_cq(ibv_cq_ex* c) { return reinterpret_cast<Cq*>(c); }
inline Qp* to_qp(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
inline Qp* to_qp(ibv_qp_ex* q) { return reinterpret_cast<Qp*>(q); }
inline Srq* to_srq(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
inline Context* Cq::ctx() { return to_ctx(vcq.cq.context); }
inline Context* Qp::ctx() { return to_ctx(vqp.qp.context); }
inline Cq* Qp::send_cq() { return to_cq(vqp.qp.send_cq); }
inline Cq* Qp::recv_cq() { return to_cq(vqp.qp.recv_cq); }

// QPN -> QP registry for the CM (verbs_qp.cpp); not used on the data path. The QP comes
// with a reference taken (unref() it), so a concurrent destroy_qp cannot free it.
Qp* find_qp(std::uint32_t qp_num);

// Monotonic nanoseconds (the vDSO's clock_gettime: no system call).
std::int64_t mono_ns();

// Per-context progress thread: epoll over the connected QPs' sockets, for what no polling
// thread does (see progress.cpp).
class Progress {
public:
  Progress();
  ~Progress();
  bool ok() const { return epfd_ >= 0; }
  // A child of fork() inherits the object but not its thread (fork copies only the caller),
  // and its epoll set is the parent's own: the child must neither use nor join it.
  bool inherited() const { return owner_ != ::getpid(); }
  // In such a child: closes the child's copies of the descriptors; the object is then left
  // alone (never destroyed: its thread cannot be joined).
  void abandon();
  int add(Qp* qp);     // qp->mu held; takes a reference
  void remove(Qp* qp); // qp->mu held; the reference goes once the thread is done with it
  // qp->mu held: watch what the QP's state asks for, and look at it when its drive says.
  void sync(Qp* qp, drive::Ns now);
  // qp->mu held: a poll drove the QP at `now` and its CQ was `empty` after it (QpDrive::on_poll
  // parks or unparks it).
  void polled(Qp* qp, drive::Ns now, bool empty);
  void set_parked(Qp* qp, bool parked, drive::Ns now); // qp->mu held
  void kick();                                         // look at every timed QP now
  // qp->mu held: the QP's drive has a new poll_at() (held posts, parking, a held Send); the
  // thread looks at the QP by then (the list holds a reference while it has the QP).
  void schedule(Qp* qp, drive::Ns now);
  // Answers the same-host grants of `host` (its listener) from now on.
  void watch_grants(samehost::Host& host);

private:
  void run();
  void take_events(int n, const epoll_event* evs, drive::Ns now);
  void check_timers(drive::Ns now);
  drive::Ns sleep_ns(drive::Ns now); // -1: until an event; sets wake_at_
  void release(Qp* qp);              // drops a reference after the current batch of events
  int epfd_ = -1;
  int wakefd_ = -1;
  pid_t owner_ = ::getpid();
  std::atomic<bool> stop_{false};
  std::atomic<samehost::Host*> grants_{nullptr}; // epoll's tag for its listener: &grants_
  int grant_fd_ = -1;                            // the listener watched (under timers_mu_)
  std::mutex timers_mu_; // timers_, released_, wake_at_ and each listed Qp's timer_at
  std::vector<Qp*> timers_;
  std::vector<Qp*> released_;
  drive::Ns wake_at_ = 0; // the thread's next wake-up at the latest (when it sleeps)
  std::thread thread_;
};

// Translations shared by the verbs (static tables in translate.cpp).
ibv_wc_status wc_status(iwarp::WcStatus s);
ibv_wc_opcode wc_opcode(iwarp::WcOpcode o);
ibv_wc to_ibv_wc(const iwarp::Completion& c, std::uint32_t qp_num);
std::uint32_t to_iwarp_access(int ibv_access);

// Verbs, grouped by file (verbs_device.cpp, verbs_mem.cpp, verbs_cq.cpp, verbs_qp.cpp,
// verbs_srq.cpp). noexcept: they are called from libibverbs' C frames, so nothing may unwind.
int query_device_ex(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*,
                    size_t) noexcept;
int query_port(ibv_context*, uint8_t, ibv_port_attr*) noexcept;
void async_event(ibv_context*, ibv_async_event*) noexcept;

ibv_pd* alloc_pd(ibv_context*) noexcept;
int dealloc_pd(ibv_pd*) noexcept;
ibv_mr* reg_mr(ibv_pd*, void*, size_t, uint64_t, int) noexcept;
int rereg_mr(verbs_mr*, int, ibv_pd*, void*, size_t, int) noexcept;
int dereg_mr(verbs_mr*) noexcept;
ibv_mw* alloc_mw(ibv_pd*, ibv_mw_type) noexcept; // verbs_mw.cpp
int dealloc_mw(ibv_mw*) noexcept;
int bind_mw(ibv_qp*, ibv_mw*, ibv_mw_bind*) noexcept;

ibv_cq* create_cq(ibv_context*, int, ibv_comp_channel*, int) noexcept;
ibv_cq_ex* create_cq_ex(ibv_context*, ibv_cq_init_attr_ex*) noexcept;
int destroy_cq(ibv_cq*) noexcept;
int resize_cq(ibv_cq*, int) noexcept;
int poll_cq(ibv_cq*, int, ibv_wc*) noexcept;
int req_notify_cq(ibv_cq*, int) noexcept;
void cq_event(ibv_cq*) noexcept;
int modify_cq(ibv_cq*, ibv_modify_cq_attr*) noexcept;

ibv_qp* create_qp(ibv_pd*, ibv_qp_init_attr*) noexcept;
ibv_qp* create_qp_ex(ibv_context*, ibv_qp_init_attr_ex*) noexcept;
int modify_qp(ibv_qp*, ibv_qp_attr*, int) noexcept;
int query_qp(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*) noexcept;
int destroy_qp(ibv_qp*) noexcept;
int post_send(ibv_qp*, ibv_send_wr*, ibv_send_wr**) noexcept;
int post_recv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) noexcept;

ibv_srq* create_srq(ibv_pd*, ibv_srq_init_attr*) noexcept;
ibv_srq* create_srq_ex(ibv_context*, ibv_srq_init_attr_ex*) noexcept;
int modify_srq(ibv_srq*, ibv_srq_attr*, int) noexcept;
int query_srq(ibv_srq*, ibv_srq_attr*) noexcept;
int destroy_srq(ibv_srq*) noexcept;
int post_srq_recv(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**) noexcept;

// Why a verb that iWARP cannot honour failed, once per cause (a warning, log.hpp).
void explain(const char* what);

struct ShimOps;
// The shim's ops, once the provider registered with it (cm_attach.cpp); nullptr without one.
const ShimOps* shim();

// IB-style connect (ib_connect.cpp), qp->mu held: INIT -> RTR with an address vector asks the
// shim for the connection (0 or an errno, explained); ib_cancel ends a wait (RESET, ERR,
// destroy). ib_failed is the shim's report that it never came.
int ib_rtr(Qp* qp, const ibv_qp_attr& attr, int mask);
void ib_cancel(Qp* qp);
void ib_failed(std::uint32_t qp_num, int error, const char* reason) noexcept;

// The path `uiwarp conn show` names for a connection whose copies reach the peer so
// (qp_same_host.cpp).
const char* reach_name(samehost::PeerRegion::Reach r);
// ...and for QP qp's path once On, under its lock: the reach, the stream's ring, the memory it
// copies into by loads and stores. Passed on to `uiwarp conn show`.
void report_same_host_path(const Qp* qp);

// samehost::Host's wait report (qp_same_host.cpp): a verb waits for the same-host peer of QP
// qp_num to finish a copy (`text` says who and what), or no longer does (nullptr).
void same_host_wait_report(std::uint32_t qp_num, const char* text) noexcept;

// The same-host offer of QP qp_num at rdma_accept (ProviderOps::same_host_offer,
// qp_same_host.cpp).
bool same_host_offer(std::uint32_t qp_num, iwarp::SameHostOffer* out) noexcept;
// The same, qp->mu held: IB-style connect's responder makes its offer at RTR (ib_connect.cpp).
bool same_host_offer_locked(Qp* qp, iwarp::SameHostOffer* out);

} // namespace uiwarp
