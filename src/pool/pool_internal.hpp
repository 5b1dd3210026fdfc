// pool/pool_internal.hpp — the pool's internals that tests, benchmarks and the trimmer
// share (Go's export_test.go idea): sizes, trimming on demand, footprint accounting.
#pragma once

#include <cstddef>
#include <cstdint>

#include <corun/pool.hpp>

namespace corun::detail {

// Per-P cache: a private slot plus kLocalCap slots; a full array moves kBatch (half) into
// a batch node, which stays on the P's own stack of up to kLocalBatches full nodes (no
// lock) or, when that is full, goes to the depot; an empty array takes a batch back from
// the P's stack first, then the depot.
inline constexpr std::uint32_t kLocalCap = 28;
inline constexpr std::uint32_t kBatch = kLocalCap / 2;
inline constexpr std::uint32_t kLocalBatches = 4;

// One trim, as the CORUN_POOL_TRIM_MS timer does it, for every pool: destroys the
// previous victims, moves each depot to its victims, then has every P move its cache to
// the victims (at its next safe point; the caller's own P at once). From a task of the
// running runtime; elsewhere it only rotates the depots.
void pool_trim_now();
// True once every P has moved its cache for the last trim (tests poll it, yielding).
bool pool_trim_settled() noexcept;
// Trims done since the process started (any runtime; relaxed counter).
std::uint64_t pool_trims() noexcept;

// Bytes of the pool's own structures (state, shard table, shards, batch nodes), not
// counting the cached objects. Exact when no get/put runs.
std::size_t pool_footprint(const PoolCore& c) noexcept;
// Objects the pool holds (per-P caches, depot, victims). Exact when no get/put runs.
std::size_t pool_cached(const PoolCore& c) noexcept;

}  // namespace corun::detail
