// pool/pool_trim.hpp — between pool.cpp (the pools) and pool_trim.cpp (the registry of
// all pools, the per-run trim timer and the per-P safe-point hook).
#pragma once

#include <vector>

#include "pool/pool_state.hpp"

namespace corun::sched {
struct Runtime;
struct P;
}  // namespace corun::sched

namespace corun::detail {

// pool_trim.cpp
void pool_register(PoolState* st);
void pool_unregister(PoolState* st) noexcept;
// Arms the run's trim timer unless it is armed (one relaxed load when it is). From a task.
void pool_trimmer_ensure(sched::Runtime* rt) noexcept;

// pool.cpp, for the trimmer. Under no lock (each takes st's depot lock).
// Destroys nothing itself: the previous victims' objects go to `garbage`, unneeded nodes
// to `nodes`, for the caller to free outside every lock; the depot becomes the victims.
void pool_rotate_depot(PoolState* st, std::vector<void*>& garbage, std::vector<Batch*>& nodes);
// Moves P p's cache of st to the victims (to the depot when to_victims is false). Only at
// a safe point of p (sched/safepoint.cpp).
void pool_trim_shard(PoolState* st, sched::P* p, bool to_victims) noexcept;

}  // namespace corun::detail
