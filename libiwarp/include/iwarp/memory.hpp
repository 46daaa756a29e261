// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The STag table: registered memory as DDP tagged buffers (RFC 5041 §8, RFC 5040
// §8.1). An STag is a 24-bit index and an 8-bit key (RFC 5040 §8.1.1(8): hard to
// predict); each region belongs to a protection domain, has access rights, and
// maps a TO range (VA-based or zero-based) onto host memory. Memory windows (RFC 5040
// §2.1, the RDMAC verbs' Bind) are STags of their own that expose part of a region with
// rights of their own: type 1 belong to a PD and are rebound at will, type 2 are bound to one
// stream and must be invalidated before they are bound again. Thread-safe: a reader-writer
// lock, taken shared by the per-segment lookups of every QP and exclusively by the rare
// changes (registration, binding, invalidation).
#pragma once

#include "iwarp/wire.hpp"

#include <cstdint>
#include <optional>
#include <random>
#include <shared_mutex>
#include <vector>

namespace iwarp {

namespace access {
inline constexpr std::uint32_t kLocalWrite = 1u << 0;
inline constexpr std::uint32_t kRemoteWrite = 1u << 1;
inline constexpr std::uint32_t kRemoteRead = 1u << 2;
inline constexpr std::uint32_t kRemoteAtomic = 1u << 3;
inline constexpr std::uint32_t kMwBind = 1u << 4;
inline constexpr std::uint32_t kZeroBased = 1u << 5;
} // namespace access

enum class StagKind : std::uint8_t { Region, Window1, Window2 };

struct MemoryRegion {
  std::uint32_t stag = 0;
  std::uint32_t pd = 0;
  std::uint32_t access = 0;  // access::* bits
  std::byte* host = nullptr; // host address of TO `base`
  std::uint64_t base = 0;    // first valid TO (the iova; 0 when zero-based)
  std::uint64_t length = 0;
  std::uint32_t qp = 0; // non-zero: usable only on this stream (RFC 5041 §8.2)
  bool valid = true;    // false once invalidated (RFC 5040 §5.3)
  StagKind kind = StagKind::Region;
  std::uint32_t parent = 0; // a bound window: its region's STag
};

// A Bind (IBV_WR_BIND_MW, ibv_bind_mw): window `window` (its current STag) becomes
// `new_stag` (same index, the key the consumer chose) over [addr, addr + length) of region
// `region`, with `access` (remote rights, access::kZeroBased). Length 0 unbinds a type 1.
struct WindowBind {
  std::uint32_t window = 0, new_stag = 0, region = 0;
  std::uint64_t addr = 0, length = 0;
  std::uint32_t access = 0;
  std::uint32_t pd = 0, qp = 0; // the binding QP's
};

// Why a memory reference failed, independent of which layer reports it.
enum class MemError : std::uint8_t {
  InvalidStag,   // unknown index, wrong key, deregistered or invalidated
  NotAssociated, // another PD or another stream
  Access,        // lacks the needed access right
  Bounds,        // outside the registered range
  Wrap,          // TO + length wraps 2^64
  Permanent,     // a type 1 window: a peer may not invalidate it
};
std::string_view mem_error_name(MemError e);

// The Terminate code for a failed tagged DDP placement (RFC 5041 §7.2; access:
// requirements C-09), and for a failed Read Request source (RFC 5040 §4.8).
TermCode ddp_tagged_code(MemError e);
TermCode rdmap_protection_code(MemError e);

// Told of every change that a user of the table outside this process must see (the same-host
// path's shared copy of it, providers/uiwarp/samehost): withdrawn() before an entry changes or
// stops being usable, and returns only once nobody outside still uses it; published() after an
// entry became usable or changed. Both are called with the table's lock held exclusively, so
// they never see the table half-changed, and must not call back into it.
class MemoryObserver {
public:
  virtual void published(const MemoryRegion& r) = 0;
  virtual void withdrawn(std::uint32_t index) = 0;

protected:
  ~MemoryObserver() = default;
};

class MemoryTable {
public:
  explicit MemoryTable(std::uint64_t seed = std::random_device{}());

  // Registers memory; returns the STag (also the lkey/rkey). `base` is the first
  // TO of the region (its iova, or 0 with access::kZeroBased).
  std::uint32_t add(std::uint32_t pd, std::byte* host, std::uint64_t base, std::uint64_t length,
                    std::uint32_t access);
  // Changes a region in place (rereg_mr) and returns its STag: with `rekey` a new key, so that
  // the STags handed out before are dead (a new translation); without, the same STag with the
  // new PD and rights (as rxe and mlx5 keep theirs across an access or PD change).
  std::optional<std::uint32_t> modify(std::uint32_t stag, std::uint32_t pd, std::byte* host,
                                      std::uint64_t base, std::uint64_t length,
                                      std::uint32_t access, bool rekey);
  bool remove(std::uint32_t stag);
  // Restricts a region to one stream (RFC 5041 §8.2 DDP-Stream association,
  // DDP-081); `qp` 0 returns it to PD-wide use. False if the STag is unknown.
  bool associate(std::uint32_t stag, std::uint32_t qp);
  // Remote invalidation (Send with Invalidate, RFC 5040 §5.3): the STag stays allocated but
  // unusable. InvalidStag if it is unknown or already invalid, NotAssociated if it belongs
  // to another PD or stream; nothing changes then.
  std::optional<MemError> invalidate(std::uint32_t stag, std::uint32_t pd, std::uint32_t qp);
  // Local invalidation: false if the STag is unknown.
  bool invalidate(std::uint32_t stag);
  // Memory windows. A new window is unbound (its STag invalid until a Bind).
  std::uint32_t add_window(std::uint32_t pd, StagKind kind);
  // The checks of a Bind, in order: the window (its PD, its index, a type 2 still bound:
  // InvalidStag / NotAssociated), the region (InvalidStag, NotAssociated, no MW_BIND right or
  // remote write/atomic without local write: Access), the range (Wrap, Bounds).
  std::optional<MemError> bind(const WindowBind& b);
  // Whether any bound window exposes region `stag` (it may not be deregistered then).
  bool has_windows(std::uint32_t stag) const;
  // Frees the window whose STag has `stag`'s index, whatever its current key.
  bool remove_window(std::uint32_t stag);
  // Local Invalidate (IBV_WR_LOCAL_INV) by a stream of `pd`: a region or a type 2 window.
  std::optional<MemError> invalidate_local(std::uint32_t stag, std::uint32_t pd);
  // A copy of the region `stag` names (a copy: the table may change meanwhile).
  std::optional<MemoryRegion> lookup(std::uint32_t stag) const;
  std::size_t size() const;
  // From now on `o` (which outlives the table, or is replaced first) is told of every change;
  // every usable entry is published() to it at once.
  void set_observer(MemoryObserver* o);

  // Validates [to, to+len) of `stag` for a stream of protection domain `pd` and
  // stream id `qp`, needing `need` access bits. On success, the host address. `local`: an
  // lkey of a local SGE, which a window never is.
  struct Resolved {
    std::byte* host = nullptr;
    std::optional<MemError> error;
  };
  Resolved resolve(std::uint32_t stag, std::uint32_t pd, std::uint32_t qp, std::uint64_t to,
                   std::uint64_t len, std::uint32_t need, bool local = false) const;

private:
  const MemoryRegion* find(std::uint32_t stag) const; // lock held
  std::uint8_t next_key();
  void withdraw(std::uint32_t index);  // lock held: before entry `index` changes
  void republish(std::uint32_t index); // lock held: after it changed
  MemoryObserver* observer_ = nullptr;
  mutable std::shared_mutex mu_;
  std::vector<MemoryRegion> regions_; // index = stag >> 8
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
  std::size_t windows_ = 0; // allocated windows: has_windows() scans only when there are any
  std::mt19937_64 rng_;
};

} // namespace iwarp
