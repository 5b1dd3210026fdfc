// timer/timer.cpp — arming, stopping, resetting and firing timers; the public Timer,
// after_func, new_timer, after and Ticker.
//
// Arming puts the record in the caller's bucket (its P's heap, sched::caller_bucket) and,
// when it became that bucket's earliest deadline, tells the scheduler (timer_armed), which
// wakes the idle watcher only if it sleeps past it. Firing is run_bucket(), the hook the
// scheduler calls for a bucket whose earliest deadline has passed: it pops due records
// under the bucket lock (at most kBatch per lock hold, so a P arming timers is never held
// off for long), then fires them with no lock held: ready the sleeper, spawn fn's task, or
// try_send the time. A chan timer's send never blocks: a full channel drops the value
// (Go's sendTime), which is also how a Ticker drops ticks for a slow reader.
// Invariants: see timer.hpp (states, lifetime). A record is never fired before its
// deadline: run_bucket pops only `when <= now`, with `now` read after the caller saw
// earliest <= now on the same clock.
// Rejected: firing under the bucket lock (fn's task creation and channel locks would nest
// inside it and stretch every other P's stop/reset); Go's adjusttimers pass (it exists
// for its lock-free status machine; corun's stop/reset edit the heap in place).
#include "timer/timer.hpp"

#include <cerrno>
#include <ctime>
#include <stdexcept>
#include <vector>

#include <corun/runtime.hpp>

#include "arch/spin.hpp"
#include "os/thread.hpp"
#include "sched/check.hpp"
#include "sched/park.hpp"
#include "sched/probes.hpp"
#include "sched/sched.hpp"

namespace corun::detail {

namespace {

using timer::TimerBucket;
using timer::TimerHeap;

std::int64_t now_ns() noexcept {
  return static_cast<std::int64_t>(os::monotonic_ns());
}

// ns per cycle-counter tick, inflated by 1/1000 (deadline_now); set on first use. A plain
// double written identically by every thread that finds it 0: a benign race on one
// value, made atomic (relaxed) so TSan agrees.
std::atomic<double> g_ns_per_tick_a{0};

void release_rec(TimerRec* t) noexcept {
  // acq_rel: the last owner sees every other owner's writes before deleting.
  if (t->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete t;
}

// Stores b's heap minimum into b->earliest if it changed; b->lock held.
// Returns true if the earliest deadline moved earlier (the watcher may need waking).
bool publish_earliest(TimerBucket* b) noexcept {
  // Debug builds walk small heaps after every change (Go's verifyTimerHeap).
  CORUN_DCHECK(b->heap.size() > 4096 || b->heap.verify(), "timer heap %p out of order",
               static_cast<void*>(b));
  std::int64_t e = b->heap.earliest();
  std::int64_t old = b->earliest.load(std::memory_order_relaxed);
  if (e == old) return false;
  b->earliest.store(e, std::memory_order_seq_cst);  // seq_cst: timer_armed's pair
  return e < old;
}

// Locks and returns the bucket t is armed in, or nullptr if t is inactive.
// Called with t->mu held, so nobody else can arm t meanwhile.
TimerBucket* lock_bucket(TimerRec* t) noexcept {
  TimerBucket* b = t->bucket.load(std::memory_order_acquire);
  if (!b) return nullptr;
  b->acquire();
  if (t->bucket.load(std::memory_order_relaxed) == b) return b;
  b->release();  // popped for firing meanwhile
  return nullptr;
}

// Arms inactive t to fire at `when` in the caller's bucket; t->mu held (or t private).
// The heap takes a reference for counted records. Throws std::logic_error outside run().
void arm(TimerRec* t, std::int64_t when, const char* what) {
  sched::Runtime* rt = nullptr;
  TimerBucket* b = sched::caller_bucket(&rt);
  if (!b) throw std::logic_error(std::string(what) + " called outside corun::run: no runtime");
  if (t->kind != TimerKind::wake) t->refs.fetch_add(1, std::memory_order_relaxed);
  t->rt = rt;
  b->acquire();
  t->when = when;
  b->heap.push(t);
  t->bucket.store(b, std::memory_order_release);
  bool earlier = publish_earliest(b);
  b->release();
  if (earlier) sched::timer_armed(rt, when);
}

void fire(TimerRec* t, std::int64_t now) noexcept {
  switch (t->kind) {
    case TimerKind::wake:
      sched::ready(t->task);  // the record is gone once the task runs
      return;
    case TimerKind::func:
      try {
        // The task holds the firer's reference until fn returns.
        corun::go([t] {
          struct Drop {
            TimerRec* t;
            ~Drop() { release_rec(t); }
          } drop{t};
          t->fn();
        });
      } catch (...) {
        // No runtime any more (shutdown) or no memory for the task: the firing is lost
        // with the runtime, like every task still queued then.
        release_rec(t);
      }
      return;
    case TimerKind::chan:
      try {
        t->ch.try_send(Clock::time_point(std::chrono::nanoseconds(now)));
      } catch (const closed_channel&) {
        // The user closed the timer's channel: nothing to deliver.
      }
      release_rec(t);
      return;
  }
}

constexpr int kBatch = 64;

// The scheduler's run hook: fires every record of b due at `now`.
void run_bucket(TimerBucket* b, std::int64_t now) noexcept {
  for (;;) {
    TimerRec* due[kBatch];
    int n = 0;
    std::int64_t first_when = 0;  // for the timer_fire probe
    b->acquire();
    while (n < kBatch) {
      if (b->heap.earliest() > now) break;
      if (b->heap.settle_top()) continue;  // pushed back by a reset: not due after all
      timer::TimerNode* top = b->heap.top();
      auto* t = static_cast<TimerRec*>(top);
      if (n == 0) first_when = t->when;
      if (t->period > 0) {
        // The next tick after now (missed ticks are skipped, as Go's).
        std::int64_t steps = 1 + (now - t->when) / t->period, next = 0;
        if (__builtin_mul_overflow(steps, t->period, &next) ||
            __builtin_add_overflow(next, t->when, &next))
          next = TimerHeap::kNever;  // beyond the clock's range: no more ticks
        b->heap.update(t, next);
        t->refs.fetch_add(1, std::memory_order_relaxed);  // the firer's own reference
      } else {
        b->heap.remove(t);
        // release: a mu holder that sees nullptr (lock_bucket's acquire load) may arm t
        // in another bucket without taking this lock; its writes to when/index must
        // come after our reads and writes of them here.
        t->bucket.store(nullptr, std::memory_order_release);
      }
      due[n++] = t;
    }
    publish_earliest(b);
    b->release();
    if (n) CORUN_PROBE2(timer_fire, n, now - first_when);
    for (int i = 0; i < n; i++) fire(due[i], now);
    if (n < kBatch) return;
  }
}

// At runtime destruction: unlinks every armed record (their heap references dropped).
void drain_bucket(TimerBucket* b) noexcept {
  std::vector<TimerRec*> recs;
  b->acquire();
  while (timer::TimerNode* top = b->heap.pop()) {
    auto* t = static_cast<TimerRec*>(top);
    t->bucket.store(nullptr, std::memory_order_release);
    if (t->kind != TimerKind::wake) recs.push_back(t);  // sleepers: abandoned tasks
  }
  b->earliest.store(TimerHeap::kNever, std::memory_order_seq_cst);
  b->release();
  for (TimerRec* t : recs) release_rec(t);  // may run fn's captured destructors
}

[[maybe_unused]] const bool g_registered = [] {
  sched::register_timer_hooks(run_bucket, drain_bucket);
  return true;
}();

TimerRec* new_rec(TimerKind kind) {
  auto* t = new TimerRec();
  t->kind = kind;
  return t;
}

struct MuGuard {
  TimerRec* t;
  explicit MuGuard(TimerRec* r) noexcept : t(r) { spin_lock(t->mu); }
  ~MuGuard() { spin_unlock(t->mu); }
};

// Removes t from its heap if armed; t->mu held. True if it was armed.
bool disarm(TimerRec* t) noexcept {
  TimerBucket* b = lock_bucket(t);
  if (!b) return false;
  b->heap.remove(t);
  t->bucket.store(nullptr, std::memory_order_release);
  publish_earliest(b);
  b->release();
  if (t->kind != TimerKind::wake) release_rec(t);  // the heap's reference (never the last)
  return true;
}

}  // namespace

namespace {
// "Now" for computing deadlines, from the cycle counter when it is usable (~10 ns here
// against ~25 for clock_gettime, which was 65% of a Timer::reset in perf). Each thread
// keeps one (counter, clock) pair and extrapolates from it for at most kExtrapolateNs,
// with the counter's calibrated rate inflated by 1/1000 and kSlackNs added: the estimate
// is never below CLOCK_MONOTONIC (a deadline computed from it is never early), and a
// counter that steps backwards (another CPU's) makes the unsigned delta huge, which forces
// a clock read. The pair is taken as counter, clock, counter; it is kept only when the two
// counter reads are within kPairTightNs, so a preemption between the reads cannot leave
// the estimate ahead of the clock by the preemption (seen once: 49.6 us, in CI). Worst
// overshoot is kPairTightNs + kSlackNs + 0.1% of kExtrapolateNs ~ 1.1 us; typical ~70 ns.
// The firing side always reads the real clock.
constexpr std::uint64_t kExtrapolateNs = 50'000;
constexpr std::uint64_t kPairTightNs = 1'000;
constexpr std::int64_t kSlackNs = 20;  // covers the reads being reordered (cycles)
struct ClockPair {
  std::uint64_t ticks = 0;
  std::int64_t ns = 0;
  std::uint64_t max_ticks = 0;  // 0: not set up (or no usable counter)
};
thread_local ClockPair tl_clock;

std::int64_t deadline_now() noexcept {
  ClockPair& c = tl_clock;
  if (c.max_ticks != 0) {
    std::uint64_t dt = arch::cycles() - c.ticks;
    if (dt < c.max_ticks)
      return c.ns + kSlackNs +
             static_cast<std::int64_t>(static_cast<double>(dt) *
                                       g_ns_per_tick_a.load(std::memory_order_relaxed));
  }
  if (!arch::cycle_counter_usable()) return now_ns();
  if (g_ns_per_tick_a.load(std::memory_order_relaxed) == 0)
    g_ns_per_tick_a.store(1.001 / arch::cycles_per_ns(), std::memory_order_relaxed);
  std::uint64_t tight = arch::ns_to_cycles(kPairTightNs);
  std::uint64_t t0 = arch::cycles();
  std::int64_t ns = now_ns();  // at t0 the time was at most ns
  std::uint64_t t1 = arch::cycles();
  if (t1 - t0 < tight) {  // no preemption between: ns is at most ~1 us past t0's time
    c.ticks = t0;
    c.ns = ns;
    c.max_ticks = arch::ns_to_cycles(kExtrapolateNs);
  } else {
    c.max_ticks = 0;  // try again next call; ns itself is a correct "now"
  }
  return ns;
}
}  // namespace

std::int64_t deadline_after(Duration d) noexcept {
  std::int64_t now = deadline_now();
  std::int64_t n = d.count();
  if (n <= 0) return now;
  if (n >= TimerHeap::kNever - now) return TimerHeap::kNever;
  return now + n;
}

void timer_release(TimerRec* t) noexcept {
  release_rec(t);
}

bool timer_stop(TimerRec* t) noexcept {
  MuGuard g(t);
  return disarm(t);
}

namespace {
// Re-arms t to fire at `when` (with a new period if period > 0); t->mu held. An armed
// timer moves within its heap (it stays on the P it was armed on: one lock, no
// remove-and-push); an inactive one is armed on the caller's P. True if it was armed.
bool rearm(TimerRec* t, std::int64_t when, std::int64_t period, const char* what) {
  if (TimerBucket* b = lock_bucket(t)) {
    if (period > 0) t->period = period;  // the firer reads it under this lock
    b->heap.update_lazy(t, when);        // pushed back: O(1), settled when its key comes due
    bool earlier = publish_earliest(b);
    b->release();
    if (earlier) sched::timer_armed(t->rt, when);
    return true;
  }
  if (period > 0) t->period = period;  // inactive: only mu holders touch it
  arm(t, when, what);
  return false;
}
}  // namespace

bool timer_reset(TimerRec* t, Duration d) {
  std::int64_t when = deadline_after(d);
  MuGuard g(t);
  return rearm(t, when, 0, "corun::Timer::reset");
}

bool timer_active(TimerRec* t) noexcept {
  // acquire: a snapshot; the answer may be stale by the time the caller looks at it.
  return t->bucket.load(std::memory_order_acquire) != nullptr;
}

Chan<Clock::time_point> timer_channel(TimerRec* t) {
  return t->ch;  // nil for after_func timers
}

}  // namespace corun::detail

namespace corun {

using detail::TimerKind;
using detail::TimerRec;

namespace detail {
namespace {
// Arms t for d from now, or — d <= 0, already due — fires it at once without touching a
// heap (no clock read for after_func, no lock, no watcher): "as soon as possible" is now.
// The timer is then inactive: stop() returns false, reset() re-arms it.
void start(TimerRec* t, Duration d, const char* what) {
  if (d.count() > 0) {
    arm(t, deadline_after(d), what);
    return;
  }
  sched::Runtime* rt = nullptr;
  if (!sched::caller_bucket(&rt))
    throw std::logic_error(std::string(what) + " called outside corun::run: no runtime");
  t->refs.fetch_add(1, std::memory_order_relaxed);  // the firer's, as if popped
  fire(t, t->kind == TimerKind::chan ? now_ns() : 0);
}
}  // namespace
}  // namespace detail

Timer after_func(Duration d, std::function<void()> fn) {
  TimerRec* t = detail::new_rec(TimerKind::func);
  Timer handle(t);  // owns the first reference from here on
  t->fn = std::move(fn);
  detail::start(t, d, "corun::after_func");
  return handle;
}

Timer new_timer(Duration d) {
  TimerRec* t = detail::new_rec(TimerKind::chan);
  Timer handle(t);
  t->ch = Chan<Clock::time_point>(1);
  detail::start(t, d, "corun::new_timer");
  return handle;
}

Chan<Clock::time_point> after(Duration d) {
  return new_timer(d).channel();  // the heap's reference keeps it until it fires
}

namespace {
void check_period(Duration period, const char* what) {
  if (period.count() <= 0)
    throw std::invalid_argument(std::string(what) + ": period must be positive, got " +
                                std::to_string(period.count()) + " ns");
}
}  // namespace

Ticker::Ticker(Duration period) {
  check_period(period, "corun::Ticker");
  TimerRec* t = detail::new_rec(TimerKind::chan);
  t_ = Timer(t);
  t->ch = Chan<Clock::time_point>(1);
  t->period = period.count();
  detail::arm(t, detail::deadline_after(period), "corun::Ticker");
}

void Ticker::reset(Duration period) {
  check_period(period, "corun::Ticker::reset");
  TimerRec* t = t_.rec_;
  if (!t) throw std::logic_error("corun::Ticker::reset on a moved-from Ticker");
  std::int64_t when = detail::deadline_after(period);
  detail::MuGuard g(t);
  detail::rearm(t, when, period.count(), "corun::Ticker::reset");
}

}  // namespace corun
