// timer/clock.cpp — the deadline clock's slow path (the fast path is inline in
// timer/clock.hpp): "now" for computing a timer's deadline, from the cycle counter when it
// is usable: clock_gettime (~21 ns here) would be most of a Timer::reset.
//
// Each thread keeps one (counter, clock) pair and extrapolates from it for at most
// kExtrapolateNs, with the counter's calibrated rate inflated by 1/1000 and kSlackNs
// added: the estimate is never below CLOCK_MONOTONIC (a deadline computed from it is
// never early), and a counter that steps backwards (another CPU's) makes the unsigned
// delta huge, which forces a clock read. The pair is taken as counter, clock, counter; it
// is kept only when the two counter reads are within kPairTightNs, so a preemption between
// the reads cannot leave the estimate ahead of the clock by the length of the preemption.
// A counter only says time is past the start of its current step, so the estimate adds one
// counter step (arch::counter_step_ns(): 16-40 ns on aarch64 hardware, 1 us under qemu-user,
// whose CNTVCT_EL0 moves in microseconds) on top of kSlackNs: without it the estimate was
// up to a step below the clock, and a deadline early by as much.
// Worst overshoot is kPairTightNs + kSlackNs + one step + 0.1% of kExtrapolateNs ~ 1.1 us
// on hardware (~2.1 us under qemu). The firing side always reads the real clock
// (sched/timers.cpp).
// Rejected: a process-wide pair (a shared line written every 50 µs by every P); the
// kernel's CLOCK_MONOTONIC_COARSE (a tick behind: deadlines early by up to 4 ms).
#include <atomic>
#include <cmath>
#include <cstdint>

#include "arch/cpu.hpp"
#include "arch/spin.hpp"
#include "os/thread.hpp"
#include "timer/clock.hpp"

namespace corun::detail {

namespace {

constexpr std::uint64_t kExtrapolateNs = 50'000;
constexpr std::uint64_t kPairTightNs = 1'000;
constexpr std::int64_t kSlackNs = 20;  // covers the reads being reordered (cycles)

// ns per counter tick, inflated by 1/1000; set on first use. Written identically by every
// thread that finds it 0: a benign race on one value, made atomic (relaxed) for TSan.
std::atomic<double> g_ns_per_tick{0};

std::int64_t now_ns() noexcept {
  return static_cast<std::int64_t>(os::monotonic_ns());
}

}  // namespace

thread_local constinit ClockPair tl_clock;

std::int64_t deadline_now_slow() noexcept {
  ClockPair& c = tl_clock;
  if (!arch::cycle_counter_usable()) return now_ns();
  if (g_ns_per_tick.load(std::memory_order_relaxed) == 0)
    g_ns_per_tick.store(1.001 / arch::cycles_per_ns(), std::memory_order_relaxed);
  std::uint64_t tight = arch::ns_to_cycles(kPairTightNs);
  std::uint64_t t0 = arch::cycles();
  std::int64_t ns = now_ns();  // at t0 the time was at most ns
  std::uint64_t t1 = arch::cycles();
  if (t1 - t0 < tight) {  // no preemption between: ns is at most ~1 us past t0's time
    c.ticks = t0;
    c.ns = ns;
    c.max_ticks = arch::ns_to_cycles(kExtrapolateNs);
    c.slack_ns = kSlackNs + static_cast<std::int64_t>(std::ceil(arch::counter_step_ns()));
    c.mult = static_cast<std::uint64_t>(
        std::ceil(g_ns_per_tick.load(std::memory_order_relaxed) * 4294967296.0));
  } else {
    c.max_ticks = 0;  // try again next call; ns itself is a correct "now"
  }
  return ns;
}

}  // namespace corun::detail
