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
// The default, spin:3000, from channel measurements at 2 Ps (this 2-core VM, 6 runs
// each, medians, scripts/benchcmp): ChanSync, Chain, WaitGroupHandoff and the
// request/response latencies show no significant time difference between spin:1000,
// 3000, 10000, 30000, usleep:3 and usleep:100; CPU for ChanSync is lowest with
// spin:3000 (108% vs 136% for usleep:3, whose timer syscalls cost more than the spin,
// and 154% for spin:30000). The exception is ChanSyncWork-2 (2.9 µs of work between
// hand-offs): usleep:100 is 10% faster and uses 16% less CPU than spin:3000, because a
// thief asleep in usleep still counts as spinning, so producers skip the futex wake of
// an idle M: 9.9k futex calls per 100k ops against 75k with spin:3000, whose thief gives
// up within 3 µs, idles, and is woken again by the next hand-off. Keeping a thief that
// lost the runnext race "spinning" (cheaply) for longer is the follow-up.
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

std::unique_ptr<RunnextBackoff> make_backoff(const Backoff& b) {
  switch (b.kind) {
    case BackoffKind::spin:
      return std::make_unique<SpinBackoff>(b.amount);
    case BackoffKind::usleep:
      return std::make_unique<UsleepBackoff>(b.amount);
    case BackoffKind::yield:
      return std::make_unique<YieldBackoff>();
  }
  return std::make_unique<SpinBackoff>(3000);
}

}  // namespace corun::sched
