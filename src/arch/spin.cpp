// corun arch: calibration of the spin clock and the bounded spin (see spin.hpp).
//
// Calibration, once per process:
//  1. Sanity: back-to-back cycles() reads must be non-zero and never decrease. The same
//     reads measure the counter's step: the smallest non-zero difference between two
//     successive reads (1 tick on hardware; under qemu-user 7.2 CNTVCT_EL0 is
//     CLOCK_REALTIME in whole microseconds scaled to 62.5 MHz, so 62 ticks). Bounds that
//     add "one tick" for a coarse counter add one step instead (spin.hpp, timer/clock.cpp).
//  2. Rate: read CLOCK_MONOTONIC and cycles() together (counter read on both sides of the clock
//     read, tightest of 8 tries), busy-wait ~2 ms on the clock, read both again; ticks/ns =
//     dcycles/dns. Preemption inside the window does not bias the ratio (both clocks keep
//     running); 2 ms makes the ~20 ns pairing error 1e-5. (A single unbracketed pair is
//     skewed by one slow clock read, e.g. a sanitizer's interceptor.)
//  3. If any check fails, all spins use CLOCK_MONOTONIC ns ("clock fallback"). Where the
//     hardware states the counter frequency (aarch64 CNTFRQ_EL0) and the measurement agrees
//     within 1%, the stated value is used: it is exact.
//  4. Pause cost: the cheapest of 5 rounds of 1000 cpu_relax() (the minimum filters out
//     preemption and interrupts), in ticks, converted to ps. It sets the burst length of
//     spin_until (~50 ns between predicate checks) and is reported by pause_cost_ns().
//
// Rejected: reading the TSC frequency from CPUID leaf 0x15 or /sys (often absent or zero in
// VMs); measuring longer than ~2 ms (start-up latency for no useful precision).
#include "arch/spin.hpp"

#include <cmath>
#include <mutex>

namespace corun::arch {

namespace detail {
// Written only inside the call_once below; immutable afterwards (see spin.hpp).
bool g_use_clock = true;
double g_ticks_per_ns = 1.0;
std::uint32_t g_burst = 1;
std::uint64_t g_step = 1;
std::atomic<bool> g_calibrated{false};
}  // namespace detail

namespace {

std::once_flag g_once;
// Written only inside the call_once; read after ensure_calibrated() (acquire).
std::uint64_t g_pause_ps = 1000;

constexpr std::uint64_t kCalibrationNs = 2'000'000;  // 2 ms
constexpr double kMinTicksPerNs = 0.001;             // 1 MHz counter
constexpr double kMaxTicksPerNs = 100.0;             // 100 GHz counter
constexpr int kPauseRounds = 5;
constexpr int kPausesPerRound = 1000;
constexpr double kBurstTargetNs = 50.0;
constexpr std::uint32_t kMaxBurst = 64;

constexpr int kStepAdvances = 8;          // counter advances seen to measure its step
constexpr int kStepMaxReads = 1'000'000;  // ~ms on hardware; a stuck counter fails later

// Checks that reads are non-zero and never decrease, and measures the step (the smallest
// advance between two successive reads) into *step; 0 when the counter never advanced.
bool counter_looks_sane(std::uint64_t* step) noexcept {
  *step = 0;
  std::uint64_t prev = cycles();
  if (prev == 0) return false;
  int advances = 0;
  for (int i = 0; i < kStepMaxReads && (i < 64 || advances < kStepAdvances); ++i) {
    const std::uint64_t now = cycles();
    if (now < prev) return false;
    if (now > prev) {
      if (*step == 0 || now - prev < *step) *step = now - prev;
      ++advances;
    }
    prev = now;
  }
  return true;
}

// One simultaneous reading of both clocks: the counter read on either side of the clock read,
// keeping the tightest of a few tries, so a slow clock_gettime (first call, an interceptor
// under a sanitizer, preemption) does not skew the pair.
struct ClockPair {
  std::uint64_t ns;
  std::uint64_t ticks;
};

ClockPair read_pair() noexcept {
  ClockPair best{0, 0};
  std::uint64_t best_width = ~std::uint64_t{0};
  for (int i = 0; i < 8; ++i) {
    const std::uint64_t a = cycles();
    const std::uint64_t ns = detail::monotonic_ns();
    const std::uint64_t b = cycles();
    if (b >= a && b - a < best_width) {
      best_width = b - a;
      best = ClockPair{ns, a + (b - a) / 2};
    }
  }
  return best;
}

// Ticks per ns of cycles() against CLOCK_MONOTONIC, or 0 when the counter is unusable;
// *step as counter_looks_sane.
double measure_rate(std::uint64_t* step) noexcept {
  if (!counter_looks_sane(step)) return 0;
  const ClockPair p0 = read_pair();
  if (p0.ticks == 0) return 0;
  while (detail::monotonic_ns() - p0.ns < kCalibrationNs) cpu_relax();
  const ClockPair p1 = read_pair();
  if (p1.ticks <= p0.ticks || p1.ns <= p0.ns) return 0;
  const double rate = static_cast<double>(p1.ticks - p0.ticks) / static_cast<double>(p1.ns - p0.ns);
  if (!(rate >= kMinTicksPerNs && rate <= kMaxTicksPerNs)) return 0;
  // An architected frequency (aarch64 CNTFRQ_EL0) is exact where the measurement carries the
  // clocks' jitter. Trust it when the measurement confirms it within 1%.
  const double stated = static_cast<double>(counter_frequency_hz()) / 1e9;
  if (stated > 0 && std::fabs(rate - stated) <= 0.01 * stated) return stated;
  return rate;
}

void calibrate_once() noexcept {
  std::uint64_t step = 0;
  const double rate = measure_rate(&step);
  detail::g_use_clock = rate == 0;
  detail::g_ticks_per_ns = rate == 0 ? 1.0 : rate;
  // The clock fallback counts in ns (its vDSO resolution is 1 ns on the kernels we run on).
  detail::g_step = rate == 0 || step == 0 ? 1 : step;

  // Pause cost in ticks of the chosen spin clock.
  auto now = [] { return detail::g_use_clock ? detail::monotonic_ns() : cycles(); };
  std::uint64_t best = ~std::uint64_t{0};
  for (int r = 0; r < kPauseRounds; ++r) {
    const std::uint64_t a = now();
    for (int i = 0; i < kPausesPerRound; ++i) cpu_relax();
    const std::uint64_t b = now();
    if (b > a && b - a < best) best = b - a;
  }
  double pause_ns = 1.0;  // if every round looked broken, assume 1 ns
  if (best != ~std::uint64_t{0}) {
    pause_ns = static_cast<double>(best) / kPausesPerRound / detail::g_ticks_per_ns;
  }
  g_pause_ps = static_cast<std::uint64_t>(std::llround(pause_ns * 1000.0));
  if (g_pause_ps == 0) g_pause_ps = 1;
  double burst = std::ceil(kBurstTargetNs / pause_ns);
  if (burst < 1) burst = 1;
  if (burst > kMaxBurst) burst = kMaxBurst;
  detail::g_burst = static_cast<std::uint32_t>(burst);

  // release: publishes the fields above to readers that load g_calibrated with acquire
  // (readers that go through call_once are synchronised by it anyway).
  detail::g_calibrated.store(true, std::memory_order_release);
}

}  // namespace

void calibrate() noexcept {
  // std::call_once can only throw if the callable throws (it does not) or on a system error
  // creating the once state, which glibc's implementation cannot report.
  std::call_once(g_once, calibrate_once);
}

bool cycle_counter_usable() noexcept {
  detail::ensure_calibrated();
  return !detail::g_use_clock;
}

double cycles_per_ns() noexcept {
  detail::ensure_calibrated();
  return detail::g_ticks_per_ns;
}

std::uint64_t ns_to_cycles(std::uint64_t ns) noexcept {
  detail::ensure_calibrated();
  if (detail::g_use_clock) return ns;
  const double t = static_cast<double>(ns) * detail::g_ticks_per_ns;
  if (t >= 18446744073709549568.0) return ~std::uint64_t{0};  // largest double below 2^64
  return static_cast<std::uint64_t>(std::ceil(t));            // round up: spins last at least ns
}

void spin_for_ns(std::uint64_t ns) noexcept {
  if (ns == 0) return;
  // +1 step: the start read may come just before the counter steps, so with a coarse counter
  // (aarch64: often 16-40 ns per tick; 1 us under qemu-user) "budget ticks seen" can be up to
  // one step short of budget ticks elapsed. Saturation: ns_to_cycles returns at most
  // UINT64_MAX, and add_step keeps it there.
  const std::uint64_t budget = detail::add_step(ns_to_cycles(ns));  // calibrates on first use
  const std::uint32_t burst = detail::g_burst;
  const std::uint64_t start = spin_now();
  do {
    for (std::uint32_t i = 0; i < burst; ++i) cpu_relax();
  } while (spin_now() - start < budget);  // wraps to huge (= stop) if the counter stepped back
}

std::uint64_t counter_step() noexcept {
  detail::ensure_calibrated();
  return detail::g_step;
}

double counter_step_ns() noexcept {
  detail::ensure_calibrated();
  return static_cast<double>(detail::g_step) / detail::g_ticks_per_ns;
}

std::uint64_t pause_cost_ns() noexcept {
  detail::ensure_calibrated();
  const std::uint64_t ns = (g_pause_ps + 500) / 1000;
  return ns == 0 ? 1 : ns;
}

std::uint64_t pause_cost_ps() noexcept {
  detail::ensure_calibrated();
  return g_pause_ps;
}

}  // namespace corun::arch
