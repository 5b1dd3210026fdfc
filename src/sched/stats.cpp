// sched/stats.cpp — corun::stats() (include/corun/stats.hpp): a snapshot of the per-P
// counters (PStats in sched.hpp), each timer heap's firings and lateness buckets
// (Timers::fired/late), and the poller's counts (Netpoll::polls/readied); plus the pool's
// slow-path counters (proc.hpp's count_pool_*).
//
// Invariants: nothing here writes a counter or takes a lock; each counter is one relaxed
// load (the counters order nothing, and a snapshot need not be one instant). The runtime
// cannot be freed under the reader: a task holds it by its P, any other thread by the
// foreign gate (proc.hpp's ForeignPin) for the length of the copy.
// CORUN_TIMERS=global keeps every timer in one heap: its counts are reported under P 0.
// Rejected: stopping the Ps for a consistent snapshot (Go's runtime/metrics does not either;
// a monitoring call must not stall the server it watches).
#include <corun/stats.hpp>

#include <limits>

#include "sched/proc.hpp"
#include "sched/sched.hpp"

namespace corun {

static_assert(ProcStats::kLateBuckets == sched::Timers::kLateBuckets);

std::uint64_t ProcStats::late_bucket_limit_ns(int i) noexcept {
  if (i < 0) return 0;
  if (i >= kLateBuckets - 1) return std::numeric_limits<std::uint64_t>::max();
  return 1000ull << i;
}

ProcStats Stats::total() const noexcept {
  ProcStats t;
  for (const ProcStats& p : procs) {
    t.tasks_run += p.tasks_run;
    t.tasks_spawned += p.tasks_spawned;
    t.steals += p.steals;
    t.parks += p.parks;
    t.timers_fired += p.timers_fired;
    for (int i = 0; i < ProcStats::kLateBuckets; i++)
      t.timer_late[static_cast<std::size_t>(i)] += p.timer_late[static_cast<std::size_t>(i)];
    t.pool_misses += p.pool_misses;
    t.pool_transfers += p.pool_transfers;
  }
  return t;
}

namespace {

void add_timers(ProcStats& out, const sched::Timers& h) {
  out.timers_fired += h.fired.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < out.timer_late.size(); i++)
    out.timer_late[i] += h.late[i].load(std::memory_order_relaxed);
}

}  // namespace

Stats stats() {
  Stats s;
  sched::ForeignPin pin;  // for a thread without a P; a task's P holds its runtime
  sched::Runtime* rt = sched::caller_runtime();
  if (!rt || rt->stopping.load(std::memory_order_acquire)) return s;
  s.procs.resize(rt->ps.size());
  for (std::size_t i = 0; i < rt->ps.size(); i++) {
    const sched::P* p = rt->ps[i];
    ProcStats& o = s.procs[i];
    o.id = p->id;
    o.tasks_run = p->stats.runs.load(std::memory_order_relaxed);
    o.tasks_spawned = p->stats.spawned.load(std::memory_order_relaxed);
    o.steals = p->stats.steals.load(std::memory_order_relaxed);
    o.parks = p->stats.parks.load(std::memory_order_relaxed);
    o.pool_misses = p->stats.pool_misses.load(std::memory_order_relaxed);
    o.pool_transfers = p->stats.pool_transfers.load(std::memory_order_relaxed);
    add_timers(o, p->own_timers);
  }
  if (!s.procs.empty()) add_timers(s.procs[0], rt->global_timers);
  s.netpolls = rt->netpoll.polls.load(std::memory_order_relaxed);
  s.netpoll_ready = rt->netpoll.readied.load(std::memory_order_relaxed);
  return s;
}

}  // namespace corun

namespace corun::sched {

void count_pool_miss() noexcept {
  M* m = current_m();
  if (m && m->p) bump(m->p->stats.pool_misses);
}

void count_pool_transfer() noexcept {
  M* m = current_m();
  if (m && m->p) bump(m->p->stats.pool_transfers);
}

}  // namespace corun::sched
