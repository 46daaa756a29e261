// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// One process's side of the same-host path: the STag table it publishes to same-host peers
// (a PublishedRegion, made at the first connection that asks, so that a process that never
// has one opens no descriptor), kept equal to its device context's iwarp::MemoryTable as a
// MemoryObserver; the slots of its connections; and who this process is, as an offer or an
// answer names it (identity.hpp). One per device context; thread-safe.
#pragma once

#include "grant.hpp"
#include "identity.hpp"
#include "iwarp/memory.hpp"
#include "iwarp/wire.hpp"
#include "shared_region.hpp"
#include "stream_ring.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace uiwarp::samehost {

// Entries published: STag indexes [1, kCapacity); a region beyond goes over TCP. The memfd is
// sparse and nothing constructs an entry before it is published, so the entries cost memory
// for the pages of those in use (32 per page), and address space for the rest. Slots:
// connections at once.
inline constexpr Layout kLayout{1u << 18, 1024};

class Host final : public iwarp::MemoryObserver {
public:
  explicit Host(iwarp::MemoryTable& mem) : mem_(mem) {}
  ~Host();
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  struct Opened {
    std::uint32_t slot = 0;
    int table_fd = -1;
    Nonce nonce;
    RingReader inbound; // the slot's stream ring, empty: what the peer writes after its switch
  };
  // A slot for a new connection whose end here is stream `stream` of PD `pd` (the peer's pins
  // must name both), making and filling the table first if this is the first.
  Result<Opened> open(std::uint32_t pd, std::uint32_t stream);
  // The connection ended: no pin through `slot` succeeds from now on. A pin already held ends
  // at its unpin (settle() in this thread waits for it); the slot goes back for another
  // connection once none is held, or its peer is dead.
  void close(std::uint32_t slot);
  // The peer using `slot` is process `pid`: if it dies holding a pin, the drain goes on.
  int watch(std::uint32_t slot, pid_t pid);
  // How far this end has processed the stream of `slot`'s connection (lock-free).
  void set_consumed(std::uint32_t slot, std::uint64_t octets);
  // The peer's answer in `slot` (probe 0: none yet), lock-free.
  SlotAnswer answer(std::uint32_t slot) const;

  // Waits until no peer's copy runs or will run through what this thread withdrew (the
  // observer calls of a deregistration, reregistration, invalidation or window bind) or
  // closed: the RNIC's "its DMA has ended" before a verb returns or a completion is reported
  // (RFC 5040 §5.3). Withdrawing marks the entry under the locks and returns; this waits, so
  // call it holding neither the MemoryTable's lock nor Context::mu: a peer stopped between
  // its pin and its copy (SIGSTOP, a debugger) holds it until it runs again, and only the
  // thread that asked may wait for that. A wait past a second is logged once with the peer's
  // pid and state, and shown on the connection's `uiwarp conn show` line.
  void settle();
  // Whether anything, of any thread, waits to be settled: one relaxed load, for the poll path.
  bool unsettled() const { return pending_n_.load(std::memory_order_relaxed) != 0; }
  // The listener of this process's grants (grant.hpp), made with the table: -1 without one.
  // Readable: serve_grant() answers a waiting request, without blocking.
  int grant_fd();
  void serve_grant();

  // Where settle() tells, past a second, which connection's peer holds it back and how (QPN,
  // 0 if not known; text), and then that it no longer does (text nullptr): the provider logs
  // it and passes it on to `uiwarp conn show`.
  using WaitReport = void (*)(std::uint32_t qp_num, const char* text);
  void set_wait_report(WaitReport r) { report_ = r; }

private:
  void published(const iwarp::MemoryRegion& r) override;
  void withdrawn(std::uint32_t index) override;
  // A child of fork() has its parent's table mapped: it must never write there. Drops it
  // (mu_ held) so that the child makes its own if it needs one.
  bool inherited_locked();
  // The lock-free readers' view of the same question.
  Publisher* publisher_here() const;

  // A withdrawal (an entry's Ticket) or a close (a slot's) whose copies may still run, begun by
  // thread `tid`. An entry withdrawn, then changed and published again meanwhile (rereg_mr, a
  // registration reusing the index) keeps the new value in `deferred` until the drain ends:
  // till then peers take TCP for it.
  struct Pending {
    pid_t tid = 0;
    bool is_slot = false;
    Ticket entry;
    SlotTicket slot;
    std::optional<EntryValue> deferred;
  };
  void add_pending(Pending p);
  void erase_pending(std::size_t i);
  Pending* pending_entry(std::uint32_t index); // the entry `index`'s withdrawal, if pending
  // mu_ held: ends every pending whose copies have drained (publishing what was deferred); true
  // if `tid` has none left.
  bool reap_locked(pid_t tid);
  // mu_ held: what holds `p` back, as the log line and `uiwarp conn show` put it, and the QPN
  // of the connection whose peer it is (0: not known).
  std::string describe_wait_locked(const Pending& p, std::uint32_t& qp_num);

  iwarp::MemoryTable& mem_;
  std::mutex init_mu_; // open()'s first call: makes the table, then observes mem_
  std::mutex mu_;      // region_, pending_; taken inside the MemoryTable's lock by the observers
  std::optional<PublishedRegion> region_;
  std::optional<GrantServer> grant_; // with region_, where this network namespace allows it
  std::vector<Pending> pending_;
  std::atomic<int> pending_n_{0}; // pending_.size(), for unsettled()
  WaitReport report_ = nullptr;
  std::uint32_t generation_ = 0;              // fork_generation() when region_ was made...
  pid_t owner_ = 0;                           // ...by this process
  std::atomic<Publisher*> fast_pub_{nullptr}; // set_consumed and answer without mu_
};

} // namespace uiwarp::samehost
