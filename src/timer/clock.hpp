// timer/clock.hpp — the deadline clock's fast path, inline: deadline_after(d), the
// absolute CLOCK_MONOTONIC deadline d from now, extrapolated from the calling thread's
// (counter, clock) pair (the algorithm and its error bound: clock.cpp).
//
// Inline because it is most of a Timer::reset: a push-back is this plus one CAS (~26 ns,
// ~10 of them the counter read in this VM), and a call with a frame around it cost ~1 ns
// more. The pair is thread_local and constinit (zero: "not set up"), so other files reach
// it with a %fs-relative load, no TLS wrapper call.
// Invariant: the result is never below the real clock's now + d.
#pragma once

#include <corun/time.hpp>

#include <cstdint>

#include "arch/cpu.hpp"
#include "sched/timer_heap.hpp"

namespace corun::detail {

// One thread's (counter, clock) pair; only its thread touches it.
struct ClockPair {
  std::uint64_t ticks = 0;
  std::int64_t ns = 0;
  std::uint64_t max_ticks = 0;  // 0: not set up (or no usable counter)
  std::int64_t slack_ns = 0;    // kSlackNs + one counter step, rounded up
  // ns per tick (inflated by 1/1000) in 32.32 fixed point, rounded up: ticks * mult >> 32
  // is one multiply where a double conversion took ~4 ns of a 30 ns Timer::reset. No
  // overflow: ticks < max_ticks, so ticks * mult < (kExtrapolateNs * 1.001 + 1) << 32,
  // under 2^48.
  std::uint64_t mult = 0;
};
extern thread_local constinit ClockPair tl_clock;

// The pair is stale or not set up: reads the clock, renews the pair if the read was
// tight, and returns the reading (clock.cpp).
[[gnu::cold]] std::int64_t deadline_now_slow() noexcept;

// Absolute CLOCK_MONOTONIC deadline d from now: now for d <= 0, TimerHeap::kNever when
// it would overflow (Duration::max() never fires). Never earlier than the real clock's
// now + d.
inline std::int64_t deadline_after(Duration d) noexcept {
  const ClockPair& c = tl_clock;
  // max_ticks == 0 (no pair) fails the compare for every dt; a counter that stepped
  // backwards (another CPU's) makes dt huge and fails it too.
  const std::uint64_t dt = arch::cycles() - c.ticks;
  const std::int64_t now = dt < c.max_ticks
                               ? c.ns + c.slack_ns + static_cast<std::int64_t>((dt * c.mult) >> 32)
                               : deadline_now_slow();
  const std::int64_t n = d.count();
  if (n <= 0) return now;
  if (n >= sched::TimerHeap::kNever - now) return sched::TimerHeap::kNever;
  return now + n;
}

}  // namespace corun::detail
