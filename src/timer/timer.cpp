// timer/timer.cpp — the public Timer, after_func, new_timer, after and Ticker: records
// armed, stopped and reset on the P's timers (sched/timers.hpp), and what firing does.
//
// Arming puts the record in the caller's heap (Timers::of_caller: its P's); the scheduler
// wakes the idle M if it became the earliest deadline. Firing (TimerRec::fire, called by
// whoever runs the heap, with no lock held): spawn fn's task, or try_send the time. A
// chan timer's send never blocks: a full channel drops the value (Go's sendTime), which
// is also how a Ticker drops ticks for a slow reader.
// Invariants: see timer.hpp (states, lifetime).
// Threads without a P (foreign threads, tasks in blocking()) make every call below inside
// a foreign gate section (sched::ForeignPin, sched/proc.hpp), opened before the record's
// lock: the heap they arm in, stop or reset belongs to a runtime that may be ending, and
// the section keeps it from being freed meanwhile. Such a call when the run is stopping or
// gone acts as outside run(): arming throws std::logic_error; stop() and reset() of a
// record whose heap was drained with its run find it inactive (reset then throws). On a P
// the section is not opened (its run cannot end under it): one TLS load.
// Rejected: firing under the heap's lock (fn's task creation and channel locks would
// nest inside it and stretch every other P's stop/reset).
#include "timer/timer.hpp"

#include <stdexcept>
#include <string>

#include <corun/runtime.hpp>

#include "os/thread.hpp"
#include "sched/proc.hpp"
#include "sync/chan_timer.hpp"

namespace corun::detail {

namespace {

using sched::TimerHeap;
using sched::Timers;

void release_rec(TimerRec* t) noexcept {
  // acq_rel: the last owner sees every other owner's writes before deleting.
  if (t->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // A receiver may still have read the pointer under the channel's lock; it then fails
  // try_hold and drops the lock, which this waits for (chan_timer.hpp).
  if (t->kind == TimerKind::chan && t->ch) chan_bind_timer(header_of(t->ch), nullptr);
  delete t;
}

// A chan record's channel, made and bound before the record is armed.
void make_channel(TimerRec* t) {
  t->ch = Chan<Clock::time_point>(1);
  chan_bind_timer(header_of(t->ch), t);
}

Timers* caller_timers(const char* what) {
  Timers* b = Timers::of_caller();
  if (!b) throw std::logic_error(std::string(what) + " called outside corun::run: no runtime");
  return b;
}

// Arms inactive t to fire at `when` on the caller's P; t->mu held (or t private). The
// heap takes a reference. Throws std::logic_error outside run().
void arm(TimerRec* t, std::int64_t when, const char* what) {
  Timers* b = caller_timers(what);
  t->refs.fetch_add(1, std::memory_order_relaxed);  // the heap's
  try {
    b->add(t, when);
  } catch (...) {
    t->refs.fetch_sub(1, std::memory_order_relaxed);  // never the last: the caller's
    throw;
  }
}

// Removes t from its heap if armed; t->mu held. True if it was armed.
bool disarm(TimerRec* t) noexcept {
  if (!Timers::remove(t)) return false;
  release_rec(t);  // the heap's reference (never the last: the handle holds one)
  return true;
}

// Re-arms t to fire at `when` (with a new period if period > 0); t->mu held. An armed
// timer moves within its heap (it stays on the P it was armed on: one lock, no
// remove-and-add); an inactive one is armed on the caller's P. True if it was armed.
bool rearm(TimerRec* t, std::int64_t when, std::int64_t period, const char* what) {
  if (Timers::modify(t, when, period)) return true;
  if (period > 0) t->period.store(period, std::memory_order_relaxed);  // inactive: mu's
  arm(t, when, what);
  return false;
}

TimerRec* new_rec(TimerKind kind) {
  auto* t = new TimerRec();
  t->kind = kind;
  return t;
}

// Arms t for d from now, or — d <= 0, already due — fires it at once without touching a
// heap (no clock read for after_func, no lock, no wake-up): "as soon as possible" is now.
// The timer is then inactive: stop() returns false, reset() re-arms it.
void start(TimerRec* t, Duration d, const char* what) {
  if (d.count() > 0) {
    arm(t, deadline_after(d), what);
    return;
  }
  caller_timers(what);                              // the runtime check
  t->refs.fetch_add(1, std::memory_order_relaxed);  // the firer's, as if taken from a heap
  t->fire(t->kind == TimerKind::chan ? static_cast<std::int64_t>(os::monotonic_ns()) : 0);
}

void check_period(Duration period, const char* what) {
  if (period.count() <= 0)
    throw std::invalid_argument(std::string(what) + ": period must be positive, got " +
                                std::to_string(period.count()) + " ns");
}

}  // namespace

void TimerRec::fire(std::int64_t now) noexcept {
  // This call holds a reference: the heap's (passed on when the record was taken out),
  // or for a periodic record the one hold() took.
  switch (kind) {
    case TimerKind::func:
      try {
        // The task holds the firer's reference until fn returns.
        corun::go([t = this] {
          struct Drop {
            TimerRec* t;
            ~Drop() { release_rec(t); }
          } drop{t};
          t->fn();
        });
      } catch (...) {
        // No runtime any more (shutdown) or no memory for the task: the firing is lost
        // with the runtime, like every task still queued then.
        release_rec(this);
      }
      return;
    case TimerKind::call:
      fn();  // noexcept by after_call's contract: fire() is noexcept
      release_rec(this);
      return;
    case TimerKind::chan:
      try {
        // The moment the firing was decided at, in send order (timer.hpp): never before
        // a value already sent.
        base::Guard g(send_mu);
        const std::int64_t at = now > last_sent ? now : last_sent;
        last_sent = at;
        Clock::time_point v{std::chrono::nanoseconds(at)};
        chan_offer(header_of(ch), &v);  // never yields: send_mu is held (chan_timer.hpp)
      } catch (const closed_channel&) {
        // The user closed the timer's channel: nothing to deliver.
      }
      release_rec(this);
      return;
  }
}

void TimerRec::abandon() noexcept {
  release_rec(this);  // may run fn's captured destructors (the caller holds no lock)
}

void TimerRec::release() noexcept {
  release_rec(this);
}

void timer_release(TimerRec* t) noexcept {
  release_rec(t);
}

bool timer_stop(TimerRec* t) noexcept {
  sched::ForeignPin pin;
  base::Guard g(t->mu);
  return disarm(t);
}

namespace {
// timer_reset's locked path: out of line, so the push-back saves no registers for it.
[[gnu::noinline]] bool reset_locked(TimerRec* t, std::int64_t when) {
  sched::ForeignPin pin;
  base::Guard g(t->mu);
  return rearm(t, when, 0, "corun::Timer::reset");
}
}  // namespace

bool timer_reset(TimerRec* t, Duration d) {
  std::int64_t when = deadline_after(d);
  // An armed timer pushed later (a deadline renewed at every request): one CAS, no lock,
  // no gate section (it touches only the record, which the handle keeps).
  if (Timers::push_back(t, when)) return true;
  return reset_locked(t, when);
}

bool timer_active(TimerRec* t) noexcept {
  return Timers::active(t);  // a snapshot, stale by the time the caller looks at it
}

const Chan<Clock::time_point>& timer_channel(TimerRec* t) noexcept {
  // The record's channel lives as long as the record; after_func timers have none and
  // hand out the static nil one, as empty handles do.
  return t->kind == TimerKind::chan ? t->ch : nil_chan<Clock::time_point>;
}

}  // namespace corun::detail

namespace corun {

using detail::TimerKind;
using detail::TimerRec;

namespace {
Timer func_timer(TimerKind kind, Duration d, std::function<void()> fn, const char* what) {
  TimerRec* t = detail::new_rec(kind);
  Timer handle(t);  // owns the first reference from here on
  t->fn = std::move(fn);
  sched::ForeignPin pin;
  detail::start(t, d, what);
  return handle;
}
}  // namespace

Timer after_func(Duration d, std::function<void()> fn) {
  return func_timer(TimerKind::func, d, std::move(fn), "corun::after_func");
}

Timer detail::after_call(Duration d, std::function<void()> fn) {
  return func_timer(TimerKind::call, d, std::move(fn), "corun::with_deadline");
}

Timer new_timer(Duration d) {
  TimerRec* t = detail::new_rec(TimerKind::chan);
  Timer handle(t);
  detail::make_channel(t);
  sched::ForeignPin pin;
  detail::start(t, d, "corun::new_timer");
  return handle;
}

Chan<Clock::time_point> after(Duration d) {
  // A copy of the handle, made before the temporary Timer goes: the heap's reference to
  // the record keeps the timer until it fires, the copy keeps the channel.
  return new_timer(d).channel();
}

Ticker::Ticker(Duration period) {
  detail::check_period(period, "corun::Ticker");
  TimerRec* t = detail::new_rec(TimerKind::chan);
  t_ = Timer(t);
  detail::make_channel(t);
  t->period.store(period.count(), std::memory_order_relaxed);  // before arming: private
  sched::ForeignPin pin;
  detail::arm(t, detail::deadline_after(period), "corun::Ticker");
}

void Ticker::reset(Duration period) {
  detail::check_period(period, "corun::Ticker::reset");
  TimerRec* t = t_.rec_;
  if (!t) throw std::logic_error("corun::Ticker::reset on a moved-from Ticker");
  std::int64_t when = detail::deadline_after(period);
  // Same period, later deadline: timer_reset's lock-free case. Then the period is read
  // again: a reset with another period that ran meanwhile (it stores the period before
  // `when`, under mu) may have been overtaken by this CAS, and this call must not leave
  // its deadline with that period, so it redoes itself under mu.
  const std::int64_t p = period.count();
  if (t->period.load(std::memory_order_relaxed) == p && sched::Timers::push_back(t, when) &&
      t->period.load(std::memory_order_relaxed) == p)
    return;
  sched::ForeignPin pin;
  base::Guard g(t->mu);
  detail::rearm(t, when, p, "corun::Ticker::reset");
}

}  // namespace corun
