// timer/sleep.cpp — corun::sleep: park the task on a timer node on its own stack.
//
// A task arms a node in its P's heap and parks (sched::sleep_until, which holds the heap's
// lock into the park so that no firer can ready a task that is not parked yet). The node
// needs no allocation and no reference count: only the firer touches it, until ready().
// A thread that cannot park (not the runtime's, or inside blocking()) sleeps with an
// absolute clock_nanosleep on CLOCK_MONOTONIC, so EINTR restarts never stretch it.
// Rejected: sleeping through a channel timer (Go's old time.Sleep used a channel: an
// allocation and a channel hand-off per sleep).
#include <cerrno>
#include <ctime>

#include "os/thread.hpp"
#include "sched/park.hpp"
#include "sched/timers.hpp"
#include "timer/timer.hpp"

namespace corun {

namespace {

struct SleepNode final : sched::TimerNode {
  sched::Task* task = nullptr;
  // The node is gone once the task runs: ready() is the last touch.
  void fire(std::int64_t) noexcept override { sched::ready(task); }
  // abandon(): nothing to free; the task is abandoned with its run.
};

void thread_sleep_until(std::int64_t when) noexcept {
  timespec ts = os::to_timespec(static_cast<std::uint64_t>(when));
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace

void sleep(Duration d) {
  if (d.count() <= 0) return;
  std::int64_t when = detail::deadline_after(d);
  SleepNode node;
  node.task = sched::current_task();
  if (sched::sleep_until(&node, when)) return;
  if (when != sched::TimerHeap::kNever)
    thread_sleep_until(when);
  else
    for (;;) thread_sleep_until(detail::deadline_after(std::chrono::hours(24 * 365)));
}

}  // namespace corun
