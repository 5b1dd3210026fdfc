// sched/timers.cpp — the scheduler's side of timers: which heap a timer goes into, when
// due timers run, and waking the idle thread that sleeps until the earliest deadline.
//
// Who runs a due timer (Go's checkTimers/stealWork/findRunnable):
//   1. its own P, at every trip through find_runnable (one clock read when the P has
//      timers; direct task-to-task switches go through find_runnable every 61st pick,
//      so a P busy handing values around still looks at least that often);
//   2. an M about to idle its P, and every P at its 61st schedule (with the global
//      queue), for every P's bucket: the timers of a P stuck in one long task (Go's
//      TestAfterFuncStarvation);
//   3. the watcher: the one idle M that sleeps (absolute futex wait, sched.cpp) until
//      the earliest deadline of all buckets; it takes an idle P to run them, or runs
//      them without one when every P is busy (ready() then goes through the global
//      queue);
//   4. sysmon, when Ps run but no M watches (sysmon.cpp), every 10 ms at worst.
// Firing never needs a P: ready(), go() and a non-blocking channel send all work from a
// thread without one.
//
// Arming a timer earlier than what the watcher sleeps until wakes it (timer_armed): the
// bucket's `earliest` store and the watcher's `watch_until` store are seq_cst, and each
// side loads the other's after its own store, so either the watcher's scan sees the new
// timer or the armer sees the old deadline and wakes it (store-buffering pattern).
// Rejected: every idle M sleeping until the earliest deadline (all of them would wake
// for one timer: a thundering herd on 128 cores); a dedicated timer thread (Go before
// 1.14: one more thread hop, i.e. one more wake-up's latency, before the task runs).
// What changes on 2 sockets × 64 cores: earliest_timer() reads one cache line per P on
// every watcher pass; a per-node summary of the earliest deadlines would bound that.
#include <pthread.h>

#include "os/thread.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

namespace {
// Set once at static initialisation by the timer layer; nullptr when it is not linked
// (then no timer can exist). Plain pointers: written before main, read after.
RunTimersFn g_run = nullptr;
DrainTimersFn g_drain = nullptr;

std::int64_t now_ns() noexcept {
  return static_cast<std::int64_t>(os::monotonic_ns());
}
}  // namespace

void register_timer_hooks(RunTimersFn run, DrainTimersFn drain) noexcept {
  g_run = run;
  g_drain = drain;
}

timer::TimerBucket* caller_bucket(Runtime** out) noexcept {
  M* m = current_m();
  Runtime* rt = m ? m->rt : current_runtime();
  *out = rt;
  if (!rt) return nullptr;
  if (m && m->p) return m->p->tb;
  // A thread without a P: spread such threads over the Ps by thread identity, so a
  // foreign thread arming many timers does not pile them into P0's heap.
  auto h = static_cast<std::size_t>(pthread_self()) * 0x9e3779b97f4a7c15ull;
  return rt->ps[(h >> 32) % rt->ps.size()]->tb;
}

void timer_armed(Runtime* rt, std::int64_t when) noexcept {
  // seq_cst load: after our seq_cst store of the bucket's earliest (see the header).
  std::int64_t w = rt->watch_until.load(std::memory_order_seq_cst);
  if (w == Runtime::kWatchNone) {
    // No watcher asleep. If none exists at all while a P idles and the armer holds no
    // running P (a foreign thread, or a task in blocking()), start an M: it finds
    // nothing to run, idles, and becomes the watcher. An armer on a running P needs
    // none: its P runs its own timers, and becomes the watcher's if it idles.
    M* m = current_m();
    if ((!m || !m->p) && !rt->watcher.load(std::memory_order_acquire) &&
        rt->npidle.load(std::memory_order_relaxed) > 0)
      wakep(rt);
    return;
  }
  while (when < w) {
    if (rt->watch_until.compare_exchange_weak(w, Runtime::kWatchNone, std::memory_order_seq_cst)) {
      // acquire: the M record is fully set up (it is never freed before the runtime).
      if (M* m = rt->watcher.load(std::memory_order_acquire)) m->park.wakeup();
      return;
    }
  }
}

bool check_timers(Runtime* rt, P* p) noexcept {
  (void)rt;
  std::int64_t e = p->tb->earliest.load(std::memory_order_relaxed);
  if (e == timer::TimerHeap::kNever) return false;
  std::int64_t now = now_ns();
  if (now < e) return false;
  g_run(p->tb, now);
  return true;
}

bool run_all_due_timers(Runtime* rt, std::int64_t now) noexcept {
  bool any = false;
  if (rt->settings.timers == os::TimerMode::global) {
    if (rt->global_timers.earliest.load(std::memory_order_relaxed) <= now) {
      g_run(&rt->global_timers, now);
      any = true;
    }
    return any;
  }
  for (P* p : rt->ps) {
    if (p->timers.earliest.load(std::memory_order_relaxed) <= now) {
      g_run(&p->timers, now);
      any = true;
    }
  }
  return any;
}

bool any_timer_due(Runtime* rt) noexcept {
  // One clock read, only if some P has a timer at all.
  std::int64_t e = earliest_timer(rt);
  return e != timer::TimerHeap::kNever && e <= now_ns();
}

std::int64_t earliest_timer(Runtime* rt) noexcept {
  // seq_cst loads: the watcher's half of the store-buffering pair (see the header).
  if (rt->settings.timers == os::TimerMode::global)
    return rt->global_timers.earliest.load(std::memory_order_seq_cst);
  std::int64_t e = timer::TimerHeap::kNever;
  for (P* p : rt->ps) {
    std::int64_t w = p->timers.earliest.load(std::memory_order_seq_cst);
    if (w < e) e = w;
  }
  return e;
}

void drain_timers(Runtime* rt) noexcept {
  if (!g_drain) return;
  g_drain(&rt->global_timers);
  for (P* p : rt->ps) g_drain(&p->timers);
}

}  // namespace corun::sched
