// pool/pool_trim.cpp — trimming without a GC: the registry of all pools, the run's trim
// timer, and the per-P hook that empties a P's caches at a safe point.
//
// Every CORUN_POOL_TRIM_MS a timer task (after_func, re-armed by itself while the run
// lasts; armed by the first pool use of the run) does, for every pool:
//   1. the previous victims are destroyed (in that task, outside every lock, one object
//      at a time taken from the pool: a destructor may do what a task does, even park,
//      and a ~Pool meanwhile takes and frees the rest), the depot becomes the victims;
//   2. sched::request_safepoint: every P moves its caches (private slot + array) to the
//      victims — its own P at once, idle Ps by this task, running Ps at their next
//      schedule (sched/safepoint.cpp).
// get() still takes victims (after the depot), so a busy pool keeps its hot objects; an
// object nobody took is destroyed at the second trim after it was last put: unused for
// between one and two periods. A P that reaches its safe point more than half a period
// late (one task ran that long without parking) moves its caches to the depot instead,
// so its objects are not freed after less than a period.
// Outside a run nothing is trimmed (no timer runs); destroying a pool frees everything.
// Rejected: one timer per pool (many pools, many wake-ups; one per run suffices); a
// trimming thread (it could not touch P-owned shards without locking them); freeing in
// the safe-point hook (it runs on the scheduler's stack, where user destructors must not).
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include <corun/time.hpp>

#include "base/lock.hpp"
#include "base/probes.hpp"
#include "os/thread.hpp"
#include "pool/pool_trim.hpp"
#include "sched/park.hpp"
#include "sched/proc.hpp"
#include "sched/safepoint.hpp"

namespace corun::detail {

namespace {

// The registry: every live PoolState, doubly linked. Taken by pool construction and
// destruction, the trim task and the safe-point hook; the depot locks nest inside it,
// nothing else does.
base::Lock<base::LockRank::pool_registry> g_registry_lock;
PoolState* g_head CORUN_GUARDED_BY(g_registry_lock) = nullptr;

// The run whose trim timer is armed (Runtime::run_id; 0: none). CAS (acq_rel) by the
// first pool use of a run; relaxed loads elsewhere (a stale read only costs the CAS).
std::atomic<std::uint64_t> g_trim_run{0};
// When the last trim started and the period then (relaxed: the hook's lateness test is a
// heuristic; a stale value only moves objects to the depot instead of the victims).
std::atomic<std::int64_t> g_trim_at_ns{0};
std::atomic<std::int64_t> g_trim_period_ns{0};
std::atomic<std::uint64_t> g_trims{0};  // relaxed: a statistic

std::int64_t now_ns() noexcept {
  return static_cast<std::int64_t>(os::monotonic_ns());
}

// The safe-point hook (sched/safepoint.cpp): P p's caches of every pool to the victims.
void trim_p(int proc, std::uint64_t run_id) noexcept {
  std::int64_t late = now_ns() - g_trim_at_ns.load(std::memory_order_relaxed);
  std::int64_t period = g_trim_period_ns.load(std::memory_order_relaxed);
  bool to_victims = period == 0 || late <= period / 2;
  base::Guard g(g_registry_lock);
  for (PoolState* st = g_head; st; st = st->reg.next) pool_trim_shard(st, proc, run_id, to_victims);
}

[[maybe_unused]] const bool g_hooked = [] {
  sched::register_safepoint_hook(trim_p);
  return true;
}();

void arm(std::uint64_t ms);

void tick() {  // an after_func task
  sched::Runtime* rt = sched::caller_runtime();
  if (sched::run_id(rt) != g_trim_run.load(std::memory_order_relaxed)) return;
  pool_trim_now();
  if (!sched::run_stopping(rt)) arm(sched::run_settings(rt).pool_trim_ms);
}

void arm(std::uint64_t ms) {
  g_trim_period_ns.store(static_cast<std::int64_t>(ms) * 1'000'000, std::memory_order_relaxed);
  corun::after_func(std::chrono::milliseconds(ms), tick);  // fire and forget; drained at exit
}

}  // namespace

void pool_register(PoolState* st) {
  base::Guard g(g_registry_lock);
  st->reg.next = g_head;
  if (g_head) g_head->reg.prev = st;
  g_head = st;
}

void pool_unregister(PoolState* st) noexcept {
  base::Guard g(g_registry_lock);
  if (st->reg.prev)
    st->reg.prev->reg.next = st->reg.next;
  else
    g_head = st->reg.next;
  if (st->reg.next) st->reg.next->reg.prev = st->reg.prev;
  st->reg.prev = st->reg.next = nullptr;
}

void pool_trimmer_ensure(sched::Runtime* rt) noexcept {
  std::uint64_t seen = g_trim_run.load(std::memory_order_relaxed);
  const std::uint64_t id = sched::run_id(rt);
  if (seen == id) return;
  if (!g_trim_run.compare_exchange_strong(seen, id, std::memory_order_acq_rel)) return;
  try {
    arm(sched::run_settings(rt).pool_trim_ms);
  } catch (...) {
    g_trim_run.store(0, std::memory_order_relaxed);  // out of memory: the next use retries
  }
}

void pool_trim_now() {
  g_trims.fetch_add(1, std::memory_order_relaxed);
  g_trim_at_ns.store(now_ns(), std::memory_order_relaxed);
  sched::Runtime* rt = sched::in_task() ? sched::caller_runtime() : nullptr;
  std::uint64_t run = rt ? sched::run_id(rt) : 0;
  std::vector<PoolState*> dying;
  std::vector<Batch*> nodes;
  {
    base::Guard g(g_registry_lock);
    for (PoolState* st = g_head; st; st = st->reg.next)
      if (pool_rotate_depot(st, nodes)) {
        st->trim_run.store(run, std::memory_order_relaxed);
        st->trimmers.fetch_add(1, std::memory_order_relaxed);  // under the registry lock
        dying.push_back(st);
      }
  }
  for (Batch* b : nodes) delete b;
  // Destructors run here, in this task (they may park), one object at a time taken from
  // the pool, so a ~Pool meanwhile (or after this task is abandoned at run end) finds
  // and frees the rest.
  std::size_t freed = 0;
  for (PoolState* st : dying) {
    PoolCore::Destroy destroy = st->destroy;
    while (void* x = pool_take_dying(st)) {
      destroy(x);
      freed++;
    }
    st->trimmers.fetch_sub(1, std::memory_order_release);  // st may be freed after this
  }
  CORUN_PROBE2(pool_trim, freed, nodes.size());
  // Destructors may have parked (we may be on another P now, or in blocking()): ask again.
  if (sched::can_park()) sched::request_safepoint(rt);
}

bool pool_trim_settled() noexcept {
  return !sched::safepoint_pending(sched::caller_runtime());
}

std::uint64_t pool_trims() noexcept {
  return g_trims.load(std::memory_order_relaxed);
}

}  // namespace corun::detail
