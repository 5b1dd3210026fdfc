// corun/stats.hpp — a snapshot of the runtime's counters (Go's runtime/metrics, for what a
// server owner watches: how much each P runs, steals and parks, how many timers fire and
// how late, how often the network is polled).
//
// Every counter is per P, written only by that P's thread (or, for a timer heap, under its
// lock) and read here without stopping anything: each value is exact for some moment
// during the call, but the values are not one consistent instant (a task may be counted as
// spawned and not yet as run). Counters only grow during a run and start at zero in each
// run. CORUN_DEBUG=schedtrace=MS prints the same counters every MS ms.
// Cost on the hot paths: one relaxed load+store per task switch, park, spawn and fired
// timer, each on its P's own cache line; below this machine's noise (perf/RESULTS.md,
// "What the stats counters cost").
// Rejected: pool hit counters (a counter on the ~2 ns get/put pair would be a sizeable
// part of it: the pool reports its slow paths only); global atomics (a shared line
// written by every P — the contention the runtime exists to avoid).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace corun {

struct ProcStats {
  // Bucket i of timer_late counts timers that fired late by [2^(i-1), 2^i) µs; bucket 0
  // counts those under 1 µs late, the last those 2^(kLateBuckets-2) µs (16.4 ms) or more.
  static constexpr int kLateBuckets = 16;

  int id = -1;                      // the P's index (-1 in Stats::total())
  std::uint64_t tasks_run = 0;      // switches to a task on this P
  std::uint64_t tasks_spawned = 0;  // go() calls made on this P
  std::uint64_t steals = 0;         // tasks this P stole from other Ps
  std::uint64_t parks = 0;          // tasks that blocked (channel, lock, timer, I/O) here
  std::uint64_t timers_fired = 0;   // timers of this P's heap that fired
  std::array<std::uint64_t, kLateBuckets> timer_late{};  // how late they fired
  std::uint64_t pool_misses = 0;     // Pool gets here that found no object and made one
  std::uint64_t pool_transfers = 0;  // batches moved between this P's pool caches and a depot

  // The exclusive upper bound of bucket i of timer_late in ns (UINT64_MAX for the last).
  static std::uint64_t late_bucket_limit_ns(int i) noexcept;
};

struct Stats {
  std::vector<ProcStats> procs;     // one per P; empty when no runtime runs
  std::uint64_t netpolls = 0;       // calls into the network poller (epoll)
  std::uint64_t netpoll_ready = 0;  // tasks those polls made runnable
  // The per-P counters summed (id -1).
  ProcStats total() const noexcept;
};

// The running runtime's counters. Callable from a task or from any other thread; outside
// run() (or while it shuts down) it returns an empty Stats. Allocates (the vector).
Stats stats();

}  // namespace corun
