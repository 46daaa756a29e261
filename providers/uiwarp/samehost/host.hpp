// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// One process's side of the same-host path: the STag table it publishes to same-host peers
// (a PublishedRegion, made at the first connection that asks, so that a process that never
// has one opens no descriptor), kept equal to its device context's iwarp::MemoryTable as a
// MemoryObserver; the slots of its connections; and who this process is, as an offer or an
// answer names it. One per device context; thread-safe.
#pragma once

#include "iwarp/memory.hpp"
#include "iwarp/wire.hpp"
#include "samehost/shared_region.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <sys/types.h>

namespace uiwarp::samehost {

// Entries published: STag indexes [1, kCapacity); a region beyond goes over TCP (the memfd
// is sparse, so unused entries cost address space, not memory). Slots: connections at once.
inline constexpr Layout kLayout{1u << 18, 1024};

// This process as a peer must see it to qualify: same boot, same user, same pid namespace.
struct Identity {
  std::array<std::byte, 16> boot_id{};
  std::uint64_t pid_ns = 0;
  std::uint32_t uid = 0;
  std::uint32_t pid = 0;
  std::string error; // why it could not be read ("" when it was)
};
Identity identity();

// The offer's nonce is the table's, in 16 octets (lo then hi, little-endian).
std::array<std::byte, 16> to_bytes(Nonce n);
Nonce to_nonce(const std::array<std::byte, 16>& b);

// How many fork()s this process is from the one where the count started (a pthread_atfork
// child handler adds one, before the child runs anything else). A table or a peer's mapping
// made at another count is the parent's: a child must not write there. One relaxed load, for
// the post path.
std::uint32_t fork_generation();

// Why `offer` does not qualify for a peer that is `self`, or "" when it does.
std::string mismatch(const iwarp::SameHostOffer& offer, const Identity& self);

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
  };
  // A slot for a new connection whose end here is stream `stream` of PD `pd` (the peer's pins
  // must name both), making and filling the table first if this is the first.
  Result<Opened> open(std::uint32_t pd, std::uint32_t stream);
  // The connection ended: no pin through `slot` succeeds from now on, and the call returns
  // once none is held (or the peer is dead). The slot goes back for another connection.
  void close(std::uint32_t slot);
  // The peer using `slot` is process `pid`: if it dies holding a pin, the drain goes on.
  int watch(std::uint32_t slot, pid_t pid);
  // How far this end has processed the stream of `slot`'s connection (lock-free).
  void set_consumed(std::uint32_t slot, std::uint64_t octets);
  // The peer's answer in `slot` (probe 0: none yet), lock-free.
  SlotAnswer answer(std::uint32_t slot) const;

private:
  void published(const iwarp::MemoryRegion& r) override;
  void withdrawn(std::uint32_t index) override;
  // A child of fork() has its parent's table mapped: it must never write there. Drops it
  // (mu_ held) so that the child makes its own if it needs one.
  bool inherited_locked();
  // The lock-free readers' view of the same question.
  Publisher* publisher_here() const;

  iwarp::MemoryTable& mem_;
  std::mutex init_mu_; // open()'s first call: makes the table, then observes mem_
  std::mutex mu_;      // region_; taken inside the MemoryTable's lock by the observer calls
  std::optional<PublishedRegion> region_;
  std::uint32_t generation_ = 0;              // fork_generation() when region_ was made...
  pid_t owner_ = 0;                           // ...by this process
  std::atomic<Publisher*> fast_pub_{nullptr}; // set_consumed and answer without mu_
};

} // namespace uiwarp::samehost
