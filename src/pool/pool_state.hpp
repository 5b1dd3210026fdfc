// pool/pool_state.hpp — the data behind a PoolCore: per-P shards, batch nodes, the depot.
//
// Who touches what:
//   Shard       one P's cache of one pool. Only the P's owner (the task running on it,
//               inside get/put, which never park) — or whoever runs that P's safe point
//               (sched/safepoint.cpp: the owner between tasks, or a trimmer holding the
//               idle P) — touches it, with plain loads and stores. The P hand-over
//               (Runtime::lock, P::status release/acquire) orders successive owners.
//   ShardTable  one per run that used the pool: shards[i] is written by P i's owner (at
//               its first use; until then it is the read-only no-shard slot, never null)
//               and read by it and its safe points. Tables are published
//               through PoolCore::table_ (release, under the depot lock) and never freed
//               before the pool: a stale table may still be read by a get/put racing
//               with the install, which only compares its run_key and moves on.
//   PoolState   the depot: batches of up to kBatch objects in LIFO lists (full: the
//               current generation; victim: the previous one; empty: spare nodes),
//               guarded by `lock` (a spin lock: O(1) under it, never held across a call
//               out). `has_items` is a hint read without the lock so an empty pool's
//               get does not take it (relaxed both ways: a stale "empty" costs one make()).
//               `dying`: victims of the last trim, destroyed one by one by the trim task.
// Invariants: every cached object is in exactly one place (one shard slot, or one
// batch slot); batch nodes in the depot's `full`/`victim` and a shard's `full` hold
// 1..kBatch objects, in `empty` and a shard's `spare` none.
// Why a shard keeps its own stack of full batches (Bonwick's magazine layer: a CPU keeps
// a loaded and a previous magazine so that it does not hit the depot at every magazine
// boundary): with the array alone, Go's PoolOverflow (100 puts, 100 gets per P) sends 5
// batches each way through the depot per round, and the depot's line bounces between the
// cores. With 4 own batches (85 objects per P before the depot) most rounds stay on the
// P. Rejected: a bigger array (every shard pays for it, used or not; batch nodes are
// allocated only by a P that overflows).
// What changes on 2 sockets × 64 cores: the depot is one lock and one line for all 128
// Ps; the batch transfer makes a P touch it once per kBatch overflowing puts, which the
// Go CL 46010043 found enough at 32 Ps. A per-node depot would be the next step if perf
// shows it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/lock.hpp"
#include "pool/pool_internal.hpp"

namespace corun::detail {

struct Batch {
  Batch* next = nullptr;
  std::uint32_t n = 0;
  void* items[kBatch];
};
static_assert(sizeof(Batch) == 128, "two batch nodes per 256 bytes: keep it so");

struct alignas(64) Shard {
  PoolSlot priv = 0;       // get takes it first, put fills it first (Go's private); 0: empty
  Batch* full = nullptr;   // this P's own full batches, newest first (at most kLocalBatches)
  Batch* spare = nullptr;  // empty nodes for the next overflows, so they allocate nothing
  std::uint32_t n = 0;     // used slots of local
  std::uint16_t nfull = 0, nspare = 0;
  void* local[kLocalCap];  // LIFO: local[n-1] is the most recently put (warmest)
};
static_assert(sizeof(Shard) == 256, "four cache lines per P per pool (footprint: perf/RESULTS.md)");

// The one slot that stands for "no shard" in every table (pool.cpp): read-only, holding
// kPoolNoShard. As a Shard*, only its first member may be read; shard() hides it.
extern const PoolSlot kNoShardSlot;
inline Shard* no_shard() noexcept {
  return reinterpret_cast<Shard*>(const_cast<PoolSlot*>(&kNoShardSlot));
}

// run_key, n, older (a ShardTable*): in the head, which pool.hpp's inline get/put read.
struct ShardTable : PoolTableHead {
  // P i's shard, or nullptr: what every reader but the inline fast path uses.
  Shard* shard(std::uint32_t i) const noexcept {
    return shards[i] == no_shard() ? nullptr : shards[i];
  }
  Shard* shards[];  // n entries, no_shard() until P i first uses the pool
};
// The array starts at or after the head's end and adds nothing to the size: so it starts
// right there (offsetof is not for a class with a base).
static_assert(sizeof(ShardTable) == sizeof(PoolTableHead),
              "pool.hpp my_shards: the shard pointers follow the head");
static_assert(offsetof(Shard, priv) == 0, "pool.hpp my_shards: a shard begins with priv");

struct PoolRegistryLink {
  struct PoolState* prev = nullptr;
  struct PoolState* next = nullptr;
};

struct alignas(64) PoolState {
  PoolCore* core = nullptr;
  PoolCore::Destroy destroy = nullptr;
  PoolRegistryLink reg;  // the list of all pools (pool_trim.cpp g_registry_lock)

  base::Lock<base::LockRank::pool_depot> lock;  // the depot
  std::atomic<bool> has_items{false};           // full || victim, as last seen under lock
  Batch* full CORUN_GUARDED_BY(lock) = nullptr;
  Batch* victim CORUN_GUARDED_BY(lock) = nullptr;
  Batch* empty CORUN_GUARDED_BY(lock) = nullptr;
  std::uint32_t nodes CORUN_GUARDED_BY(lock) = 0;  // nodes in the depot lists (footprint)
  // Batch nodes held by shards (their full and spare stacks). A statistic for the
  // footprint: relaxed, changed by owners of Ps without the depot lock.
  std::atomic<std::uint32_t> shard_nodes{0};
  ShardTable* retired CORUN_GUARDED_BY(lock) = nullptr;  // older tables
  // The run (Runtime::run_id) in which this pool found CORUN_POOL=global, so its get/put
  // go straight to the depot without asking the runtime again. Relaxed: a stale value
  // only sends one call through install(), which reads the setting itself.
  std::atomic<std::uint64_t> global_run{0};
  // Victims a trim is destroying, one object at a time taken under the depot lock (so
  // ~PoolCore can take the rest, and an abandoned trim task strands none of them).
  Batch* dying CORUN_GUARDED_BY(lock) = nullptr;
  // Trims that may still touch this state: incremented under the registry lock (so not
  // after ~PoolCore unregistered it), decremented (release) when done; ~PoolCore waits
  // (acquire) for 0. trim_run: the run of the last trim task (0: a thread outside any
  // task), so ~PoolCore does not wait for a task abandoned when its run ended.
  std::atomic<int> trimmers{0};
  std::atomic<std::uint64_t> trim_run{0};
};

}  // namespace corun::detail
