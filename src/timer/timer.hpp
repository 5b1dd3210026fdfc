// timer/timer.hpp — the timer record behind corun::Timer, Ticker, after(), and sleep().
//
// A record sits in at most one bucket's heap (timer/bucket.hpp). Its states, and who owns
// what in each (Go's timer status comments):
//   inactive  bucket == nullptr: never armed, stopped, or popped for firing. Only a holder
//             of `mu` may arm it (push into a bucket and set `bucket`).
//   armed     bucket == b, in b's heap: `when`/`index` are b's (b->lock). b->lock holders
//             may pop it (firing: bucket set to nullptr under b->lock, the heap's
//             reference passes to the firer) or, holding mu too, remove or move it.
// So stop() — mu, then the record's bucket lock — returns true exactly when it removed
// the record before a firer popped it: the decision to fire is taken under the bucket
// lock and is final. A periodic record (Ticker) stays armed: the firer moves it to its
// next deadline under the same lock and fires a copy of the moment.
// Lifetime: `refs` counts the handle (Timer) and the heap (one while armed) and a firer
// in flight; the last release deletes. Sleep records live on the sleeping task's stack,
// are not counted, and are touched by the firer only until it calls ready().
// Rejected: Go's lock-free status machine (timerModifying, timerMoving, …): it exists to
// avoid a per-P lock on the fast path; corun's per-P lock is uncontended on that path
// (the arming P's own), and a lock makes the stop/fire race easy to state and check.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include <corun/time.hpp>

#include "timer/bucket.hpp"

namespace corun::sched {
struct Task;
struct Runtime;
}  // namespace corun::sched

namespace corun::detail {

enum class TimerKind : std::uint8_t {
  wake,  // sleep(): ready `task` (record on the task's stack, not counted)
  func,  // after_func: run `fn` in a new task
  chan,  // new_timer/after/Ticker: send the firing time on `ch` without blocking
};

struct TimerRec : timer::TimerNode {
  TimerKind kind = TimerKind::wake;
  std::atomic<std::uint32_t> refs{1};  // acq_rel decrement, see lifetime above
  std::atomic<std::uint32_t> mu{0};    // arm/stop/reset of this record (lock_order #5)
  // The heap it is in. Set (release) by a mu holder under the bucket's lock; cleared
  // under the bucket's lock by whoever removes it. acquire loads by lock_bucket().
  std::atomic<timer::TimerBucket*> bucket{nullptr};
  std::int64_t period = 0;              // > 0: periodic (Ticker); mu + bucket lock to change
  sched::Runtime* rt = nullptr;         // runtime of the bucket it was last armed in (mu)
  sched::Task* task = nullptr;          // wake
  std::function<void()> fn;             // func: immutable after creation
  Chan<Clock::time_point> ch{nullptr};  // chan: immutable after creation
};

// Absolute CLOCK_MONOTONIC deadline d from now: now for d <= 0, TimerHeap::kNever when
// it would overflow (Duration::max() never fires).
std::int64_t deadline_after(Duration d) noexcept;

}  // namespace corun::detail
