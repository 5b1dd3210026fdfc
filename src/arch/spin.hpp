// corun arch: calibrated busy-waiting -- spin for N ns, or until a predicate holds.
//
// What it is: the runnext backoff (DESIGN.md, change 2) and the timer "spin the last stretch"
// option need waits of 1-50 µs. A sleep that short lasts at least the timer slack (50 µs by
// default), so corun spins with cpu_relax() and bounds the spin with the cycle counter, whose
// rate is measured once against CLOCK_MONOTONIC (calibrate(), ~2 ms, first use or start-up).
//
// "Ticks": spin bounds are kept in the units of spin_now(): cycles() when the counter is usable,
// else CLOCK_MONOTONIC ns (then cycles_per_ns() == 1.0 and ns_to_cycles(ns) == ns). The counter
// is unusable when it reads zero, steps backwards in a burst of reads, does not advance over the
// calibration window, or gives an absurd rate (outside 1 MHz .. 100 GHz).
//
// Invariants:
//  - Calibration runs once per process (std::call_once); its results are written before
//    detail::g_calibrated is stored with release, and every reader loads it with acquire
//    before reading them, so later reads are plain loads of immutable values.
//  - A spin never lasts much longer than asked: if the counter steps backwards (migration on a
//    machine with unsynchronised counters), the unsigned "now - start" becomes huge and the
//    spin ends early. Early is harmless for a backoff; an endless spin is not.
//  - Everything here is noexcept, allocation-free and syscall-free after calibration (the
//    clock fallback uses the vDSO).
//
// Rejected: a fixed PAUSE count (Go's procyield(30)) -- PAUSE costs ~140 cycles on Intel
// Skylake+ but a few to ~65 on AMD Zen, so the same count means 10x different waits; the
// counter bound makes "spin:3000" mean 3 µs everywhere. Reading CLOCK_MONOTONIC inside the
// loop -- ~20 ns per read, and a real syscall on VMs without a stable vDSO clock.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>

#include "arch/cpu.hpp"

namespace corun::arch {

// Measures the counter rate and the cost of cpu_relax(). Idempotent and thread-safe; blocks
// concurrent callers until the first one finishes (~2.5 ms). Called implicitly on first use.
void calibrate() noexcept;

// True when spins are bounded by cycles(); false when they fall back to CLOCK_MONOTONIC.
bool cycle_counter_usable() noexcept;

// Ticks of spin_now() per nanosecond (1.0 in the clock fallback). Calibrates on first use.
double cycles_per_ns() noexcept;

// ns converted to spin_now() ticks, saturating at UINT64_MAX. Calibrates on first use.
std::uint64_t ns_to_cycles(std::uint64_t ns) noexcept;

// The counter's step in spin_now() ticks: the smallest advance seen between two successive
// reads at calibration (1 on hardware counters slower than the read; 62 for qemu-user's
// microsecond CNTVCT_EL0; 1 in the clock fallback). A bound read off the counter can be short
// by up to one step, so bounds that must not end early add one. Calibrates on first use.
std::uint64_t counter_step() noexcept;

// The same in ns (counter_step() / cycles_per_ns()).
double counter_step_ns() noexcept;

// Busy-waits (cpu_relax loop) for at least ns nanoseconds; returns at once for 0.
void spin_for_ns(std::uint64_t ns) noexcept;

// Measured cost of one cpu_relax(), rounded to the nearest ns but at least 1 (so callers may
// divide by it). It varies by core: PAUSE is ~140 cycles on Intel Skylake+, a few cycles on
// AMD Zen 1, ~65 on Zen 2; ISB is tens of cycles on Neoverse. Measure, do not assume.
std::uint64_t pause_cost_ns() noexcept;

// The same in picoseconds, unrounded (for reports and tuning output).
std::uint64_t pause_cost_ps() noexcept;

namespace detail {
// Written once inside calibrate()'s call_once, then immutable. Readers must first observe
// g_calibrated == true with an acquire load (ensure_calibrated() does it).
extern bool g_use_clock;                // spin_now() reads CLOCK_MONOTONIC instead of cycles()
extern double g_ticks_per_ns;           // spin_now() ticks per ns
extern std::uint32_t g_burst;           // cpu_relax() calls between two checks, ~50 ns worth
extern std::uint64_t g_step;            // counter_step(), >= 1
extern std::atomic<bool> g_calibrated;  // release-stored after the four above are written

inline std::uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

inline void ensure_calibrated() noexcept {
  // acquire: pairs with the release store in calibrate(), so the plain fields are visible.
  if (!g_calibrated.load(std::memory_order_acquire)) calibrate();
}

// A spin budget in ticks plus one counter step, saturating (see counter_step()). Only after
// calibration.
inline std::uint64_t add_step(std::uint64_t budget) noexcept {
  return budget > ~std::uint64_t{0} - g_step ? ~std::uint64_t{0} : budget + g_step;
}
}  // namespace detail

// Current time in spin ticks (see "Ticks" above). Only meaningful after calibration: call
// ns_to_cycles() or calibrate() first, as spin_until does.
inline std::uint64_t spin_now() noexcept {
  return detail::g_use_clock ? detail::monotonic_ns() : cycles();
}

// Spins until done() returns true (then returns true) or about ns nanoseconds pass (then
// returns false). done() is called first, then after every short burst of cpu_relax() (about
// 50 ns), so the reaction time is one burst plus the cost of done(). done() should be cheap and
// must not throw (this function is noexcept).
template <class Pred>
bool spin_until(Pred&& done, std::uint64_t ns) noexcept {
  if (done()) return true;
  // +1 step for a coarse counter (see counter_step()); ns_to_cycles calibrates on first use.
  const std::uint64_t budget = detail::add_step(ns_to_cycles(ns));
  const std::uint32_t burst = detail::g_burst;
  const std::uint64_t start = spin_now();
  for (;;) {
    for (std::uint32_t i = 0; i < burst; ++i) cpu_relax();
    if (done()) return true;
    if (spin_now() - start >= budget) return false;  // wraps to huge if the counter stepped back
  }
}

}  // namespace corun::arch
