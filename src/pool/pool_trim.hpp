// pool/pool_trim.hpp — between pool.cpp (the pools) and pool_trim.cpp (the registry of
// all pools, the per-run trim timer and the per-P safe-point hook).
#pragma once

#include <vector>

#include "pool/pool_state.hpp"

namespace corun::sched {
struct Runtime;
}  // namespace corun::sched

namespace corun::detail {

// pool_trim.cpp
void pool_register(PoolState* st);
void pool_unregister(PoolState* st) noexcept;
// Arms the run's trim timer unless it is armed (one relaxed load when it is). From a task.
void pool_trimmer_ensure(sched::Runtime* rt) noexcept;

// pool.cpp, for the trimmer. Under no lock (each takes st's depot lock).
// The previous victims go to st->dying (destroyed by the caller through
// pool_take_dying), the depot becomes the victims; spare nodes beyond a few go to
// `nodes` for the caller to free. True if anything is dying.
bool pool_rotate_depot(PoolState* st, std::vector<Batch*>& nodes);
// One object of st->dying, now the caller's to destroy; nullptr when none is left.
void* pool_take_dying(PoolState* st) noexcept;
// Moves P p's cache of st to the victims (to the depot when to_victims is false). Only at
// a safe point of P `proc` of run `run_id` (sched/safepoint.hpp).
void pool_trim_shard(PoolState* st, int proc, std::uint64_t run_id, bool to_victims) noexcept;

}  // namespace corun::detail
