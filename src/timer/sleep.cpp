// timer/sleep.cpp — corun::sleep: park the task on a timer record on its own stack.
//
// A task arms a `wake` record in its P's bucket and parks while still holding the
// bucket's lock; the park commit drops the lock once the task is off its CPU, so no
// firer can ready a task that is not parked yet (sched/park.hpp protocol). The record
// needs no allocation and no reference count: only the firer touches it, until ready().
// A thread that cannot park (not the runtime's, or inside blocking()) sleeps with an
// absolute clock_nanosleep on CLOCK_MONOTONIC, so EINTR restarts never stretch it.
// Rejected: sleeping through a channel timer (Go's old time.Sleep used a channel: an
// allocation and a channel hand-off per sleep).
#include <cerrno>
#include <ctime>

#include "sched/park.hpp"
#include "sched/sched.hpp"
#include "timer/timer.hpp"

namespace corun {

namespace {

struct SleepCommit {
  timer::TimerBucket* b;
  sched::Runtime* rt;
  std::int64_t when;
  bool earlier;
};

void sleep_commit(void* arg) noexcept {
  // Copy first: once the lock is dropped the task may be readied, run, and return,
  // taking this frame with it.
  SleepCommit c = *static_cast<SleepCommit*>(arg);
  c.b->release();
  if (c.earlier) sched::timer_armed(c.rt, c.when);
}

void thread_sleep_until(std::int64_t when) noexcept {
  timespec ts = os::to_timespec(static_cast<std::uint64_t>(when));
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace

void sleep(Duration d) {
  if (d.count() <= 0) return;
  std::int64_t when = detail::deadline_after(d);
  sched::Runtime* rt = nullptr;
  timer::TimerBucket* b = sched::can_park() ? sched::caller_bucket(&rt) : nullptr;
  if (!b) {
    if (when != timer::TimerHeap::kNever)
      thread_sleep_until(when);
    else
      for (;;) thread_sleep_until(detail::deadline_after(std::chrono::hours(24 * 365)));
    return;
  }
  detail::TimerRec rec;  // kind wake, on this stack
  rec.task = sched::current_task();
  rec.rt = rt;
  b->acquire();
  rec.when = when;
  b->heap.push(&rec);
  rec.bucket.store(b, std::memory_order_relaxed);  // nobody else arms or stops it
  std::int64_t old = b->earliest.load(std::memory_order_relaxed);
  bool earlier = when < old;
  if (earlier) b->earliest.store(when, std::memory_order_seq_cst);  // timer_armed's pair
  SleepCommit c{b, rt, when, earlier};
  sched::park(sleep_commit, &c);
}

}  // namespace corun
