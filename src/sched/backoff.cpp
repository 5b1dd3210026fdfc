// sched/backoff.cpp — what a thief does before taking a running victim's runnext
// (CORUN_RUNNEXT_BACKOFF), the subject of Go CL 20835.
//
// A task in a running P's runnext was usually put there nanoseconds ago by a channel
// hand-off and will run on that P as soon as the current task blocks. Stealing it at
// once bounces it between Ps; so the thief waits a little and steals only if it is still
// there. Go waited usleep(100), then usleep(3) — but a usleep asks the kernel for a
// timer, and with the default 50 µs timer slack "3 µs" lasts 50 µs or more. corun spins
// on the pause instruction for a calibrated number of nanoseconds. usleep and yield stay
// selectable to reproduce Go's before and after.
// Rejected: stopping the spin as soon as the slot changes (polling it every ~50 ns). The
// owner writes runnext at every spawn and hand-off, so the polling thief bounced that
// cache line: CreateTasks-2 took 81.6 ns/op polling vs 57.9 without (median of 5, this
// machine). The thief has nothing else to do meanwhile, so ending early bought nothing.
// Measured too: WaitGroupHandoff-2 is 175 ns with usleep:100 vs 204 with spin:3000 — a
// thief asleep in usleep still counts as spinning, so the producer skips the futex wake
// of an idle M; what the default should be is measured with channels (issue 3).
#include <sched.h>
#include <unistd.h>

#include <memory>

#include "arch/spin.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

namespace {

struct SpinBackoff final : RunnextBackoff {
  std::uint64_t ns;
  explicit SpinBackoff(std::uint64_t n) : ns(n) {}
  void wait() const noexcept override { arch::spin_for_ns(ns); }  // no polling: see above
};

struct UsleepBackoff final : RunnextBackoff {
  std::uint64_t us;
  explicit UsleepBackoff(std::uint64_t u) : us(u) {}
  void wait() const noexcept override { usleep(static_cast<useconds_t>(us)); }
};

struct YieldBackoff final : RunnextBackoff {
  void wait() const noexcept override { sched_yield(); }
};

}  // namespace

std::unique_ptr<RunnextBackoff> make_backoff(const os::Backoff& b) {
  switch (b.kind) {
    case os::BackoffKind::spin:
      return std::make_unique<SpinBackoff>(b.amount);
    case os::BackoffKind::usleep:
      return std::make_unique<UsleepBackoff>(b.amount);
    case os::BackoffKind::yield:
      return std::make_unique<YieldBackoff>();
  }
  return std::make_unique<SpinBackoff>(3000);
}

}  // namespace corun::sched
