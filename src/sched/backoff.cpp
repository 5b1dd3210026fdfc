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
// owner writes runnext at every spawn and hand-off, so a polling thief bounces that cache
// line and slows the owner down; the thief has nothing else to do meanwhile, so ending
// early buys nothing.
// The default, spin:3000: spin lengths from 1 to 30 µs and usleep:3/100 give the same
// hand-off times at 2 Ps, and 3 µs costs the least CPU (a usleep's timer syscalls cost
// more than the spin; longer spins burn more). Where hand-offs are a few µs of work apart,
// usleep:100 does better: a thief asleep in usleep still counts as spinning, so producers
// skip the futex wake of an idle M, while a spinning thief gives up within 3 µs, idles,
// and is woken again by the next hand-off. Keeping a thief that lost the runnext race
// "spinning" (cheaply) for longer is the follow-up.
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
