// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Provider objects: each wraps the libibverbs object it hands out (first member,
// so container_of is an offset of 0) and the libiwarp state behind it.
#pragma once

#include "iwarp/memory.hpp"
#include "iwarp/qp.hpp"
#include "verbs_abi.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <infiniband/verbs.h>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

template <class Outer, class Inner> Outer* container_of(Inner* p, Inner Outer::*member) {
  auto off = reinterpret_cast<std::size_t>(&(static_cast<Outer*>(nullptr)->*member));
  return reinterpret_cast<Outer*>(reinterpret_cast<char*>(p) - off);
}

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
class Progress;

// The context lock. It spins briefly before sleeping: the progress thread
// holds it for a few microseconds per wake-up, and a posting thread that went
// to sleep on it paid a futex wake-up and two context switches per message
// (ib_write_lat: about one futex call per post, most of the typical latency).
class CtxMutex {
public:
  void lock() {
    for (int i = 0; i < kSpins; ++i) {
      if (mu_.try_lock()) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
    }
    mu_.lock();
  }
  bool try_lock() { return mu_.try_lock(); }
  void unlock() { mu_.unlock(); }

private:
  static constexpr int kSpins = 2000; // a few tens of microseconds at most
  std::recursive_mutex mu_;           // recursive: ibv_wr_start holds it over user code
};

struct Context {
  verbs_context vctx; // ibv_context is its LAST member: use container_of
  Device* dev = nullptr;
  int async_wfd = -1; // libibverbs reads async events from vctx.context.async_fd
  // The one lock of a context's protocol state: the STag table, every QP
  // engine and SRQ. Engines resolve STags into host memory while reg/dereg
  // change the table, and SRQs feed several engines. CQs have their own lock,
  // always taken last.
  CtxMutex mu;
  iwarp::MemoryTable mem;
  std::uint32_t next_pd = 1;
  std::uint32_t pds = 0, mrs = 0, cqs = 0, qps = 0, srqs = 0;
  int (*comp_channel_wfd)(int) = nullptr; // from libuiwarp-shim.so
  std::unique_ptr<Progress> progress;     // started by the first connected QP
  ~Context();

  static Context* of(ibv_context* c) {
    // vctx is Context's first member, so only ibv_context's offset in it counts.
    return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) -
                                      offsetof(verbs_context, context));
  }
  // Queues an async event (IBV_EVENT_*) for ibv_get_async_event.
  void post_async_event(std::uint64_t element, std::uint32_t type);
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

inline struct Pd* pd_of(ibv_pd* p) { return reinterpret_cast<struct Pd*>(p); }

struct Cq {
  verbs_cq vcq;
  bool extended = false;
  std::mutex mu;
  std::vector<ibv_wc> ring; // capacity = cqe
  std::size_t head = 0;
  // Written under `mu`; read without it by pollers to return at once when empty,
  // so a spinning poller does not keep taking the lock the producer needs.
  std::atomic<std::size_t> count{0};
  bool armed = false;
  bool solicited_only = false;
  bool overflowed = false;
  std::uint64_t wc_flags_ex = 0; // ibv_cq_init_attr_ex.wc_flags
  ibv_wc current{};              // the entry an extended poll is on
  std::atomic<int> users{0};     // QPs

  static Cq* of(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
  static Cq* of(ibv_cq_ex* c) { return reinterpret_cast<Cq*>(c); }
  Context* ctx() { return Context::of(vcq.cq.context); }
  // Adds completions; signals the channel if armed (and solicited, when asked).
  void push(const ibv_wc& wc, bool solicited);
};

struct Srq {
  ibv_srq ibv;
  std::unique_ptr<iwarp::SharedRecvQueue> q;
  std::uint32_t max_sge = 0;
  std::uint32_t limit = 0; // IBV_EVENT_SRQ_LIMIT_REACHED threshold, 0 = disarmed
  std::uint32_t pd_id = 0;
  std::atomic<int> users{0}; // QPs
};

struct Qp {
  verbs_qp vqp;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  ibv_qp_state state = IBV_QPS_RESET;
  int access = 0;
  std::uint32_t pd_id = 0;
  Srq* srq = nullptr;
  std::deque<iwarp::RecvWr> pending_recv; // posted before the connection exists
  std::unique_ptr<iwarp::Qp> engine;      // created when the CM connects the QP

  // The connection (after the CM attached it; see progress.cpp).
  int fd = -1;
  bool want_write = false; // socket full: wait for EPOLLOUT
  bool fin_sent = false;
  bool peer_closed = false;
  bool event_reported = false;
  std::vector<std::byte> staging; // small reads (headers) land here first
  std::size_t staged_pos = 0, staged_end = 0;
  std::vector<iwarp::ConstBytes>
      tx_pieces; // push_tx's gather list, kept to avoid a malloc per post

  // ibv_wr_* (extended send API): the WR being built and the batch.
  std::vector<iwarp::SendWr> wr_batch;
  int wr_error = 0;

  static Qp* of(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
  static Qp* of(ibv_qp_ex* q) { return reinterpret_cast<Qp*>(q); }
  ibv_qp* ibv() { return &vqp.qp; }
  Context* ctx() { return Context::of(vqp.qp.context); }
  // Moves the engine's completions to the CQs (qp lock held).
  void reap();
  // Flushes everything outstanding (QP to ERR).
  void flush();
  // Transmits what the engine has ready, from the calling thread (context lock
  // held); arms EPOLLOUT if the socket is full.
  void push_tx();
  // Reads and processes what the socket has (progress thread).
  void pull_rx();
  // After I/O: completions, close handling, events to the CM.
  void after_io();
  // Drops the connection and the engine (QP to RESET, destroy).
  void detach();
  ~Qp();
};

// QPN -> QP registry for the CM (verbs_qp.cpp).
Qp* find_qp(std::uint32_t qp_num);

// Per-context progress thread: epoll over the connected QPs' sockets.
class Progress {
public:
  explicit Progress(Context* ctx);
  ~Progress();
  bool ok() const { return epfd_ >= 0; }
  int add(Qp* qp);
  void remove(Qp* qp);
  void update(Qp* qp); // re-arm EPOLLOUT interest after want_write changed

private:
  void run();
  Context* ctx_;
  int epfd_ = -1;
  int stopfd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Translations shared by the verbs (static tables in translate.cpp).
ibv_wc_status wc_status(iwarp::WcStatus s);
ibv_wc_opcode wc_opcode(iwarp::WcOpcode o);
ibv_wc to_ibv_wc(const iwarp::Completion& c, std::uint32_t qp_num);
std::uint32_t to_iwarp_access(int ibv_access);

// Verbs, grouped by file (verbs_device.cpp, verbs_mem.cpp, verbs_cq.cpp, verbs_qp.cpp).
int query_device_ex(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*, size_t);
int query_port(ibv_context*, uint8_t, ibv_port_attr*);
void async_event(ibv_context*, ibv_async_event*);

ibv_pd* alloc_pd(ibv_context*);
int dealloc_pd(ibv_pd*);
ibv_mr* reg_mr(ibv_pd*, void*, size_t, uint64_t, int);
int rereg_mr(verbs_mr*, int, ibv_pd*, void*, size_t, int);
int dereg_mr(verbs_mr*);
ibv_mw* alloc_mw(ibv_pd*, ibv_mw_type);

ibv_cq* create_cq(ibv_context*, int, ibv_comp_channel*, int);
ibv_cq_ex* create_cq_ex(ibv_context*, ibv_cq_init_attr_ex*);
int destroy_cq(ibv_cq*);
int resize_cq(ibv_cq*, int);
int poll_cq(ibv_cq*, int, ibv_wc*);
int req_notify_cq(ibv_cq*, int);
void cq_event(ibv_cq*);
int modify_cq(ibv_cq*, ibv_modify_cq_attr*);

ibv_qp* create_qp(ibv_pd*, ibv_qp_init_attr*);
ibv_qp* create_qp_ex(ibv_context*, ibv_qp_init_attr_ex*);
int modify_qp(ibv_qp*, ibv_qp_attr*, int);
int query_qp(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*);
int destroy_qp(ibv_qp*);
int post_send(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
int post_recv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);

ibv_srq* create_srq(ibv_pd*, ibv_srq_init_attr*);
ibv_srq* create_srq_ex(ibv_context*, ibv_srq_init_attr_ex*);
int modify_srq(ibv_srq*, ibv_srq_attr*, int);
int query_srq(ibv_srq*, ibv_srq_attr*);
int destroy_srq(ibv_srq*);
int post_srq_recv(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**);

// One-line reason on stderr for a verb that iWARP cannot honour (once per cause).
void explain(const char* what);

} // namespace uiwarp
