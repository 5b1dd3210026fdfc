// corun arch: the two CPU primitives a spin loop needs -- a pause hint and a cheap counter.
//
// What it is: cpu_relax() tells the core "I am spinning" (x86 PAUSE, aarch64 ISB SY);
// cycles() reads a cheap monotonic tick counter (x86 TSC, aarch64 CNTVCT_EL0; elsewhere
// CLOCK_MONOTONIC nanoseconds). Ticks are not nanoseconds: spin.hpp calibrates the ratio.
//
// Invariants:
//  - Both are inline, never make a syscall on x86-64/aarch64, and are safe in any thread.
//  - cycles() is only "cheap and monotonic on one CPU". The TSC is invariant and synchronised
//    across sockets on the CPUs corun targets (constant_tsc + nonstop_tsc); CNTVCT_EL0 is
//    architecturally system-wide. Callers still treat a backwards step (migration on a broken
//    machine) as "time is up", never as a huge wait -- see spin.hpp.
//  - cycles() is not serialising (no LFENCE/ISB before the read): a few cycles of reordering
//    do not matter for bounding a spin, and fencing would double the cost of each check.
//
// Why ISB rather than YIELD on aarch64: YIELD is only a hint for SMT cores, and the aarch64
// server cores corun runs on (Neoverse, Graviton, Ampere) have no SMT, so YIELD is decoded as a
// NOP and a YIELD loop hammers the load port and the contended cache line. ISB SY stalls the
// front end until the back end drains -- tens of cycles, the same order as x86 PAUSE -- so spin
// budgets in ns mean roughly the same thing on both. Rust's spin_loop hint switched for this
// reason (rust-lang/rust#84725); Go's procyield (YIELD) is discussed in golang/go#69232.
// WFE (wait for event on an exclusive monitor) would save more power, but it waits on one
// address, and spin_until takes an arbitrary predicate.
//
// Rejected: std::chrono::steady_clock for spin bounds -- a vDSO call of ~20 ns per check (and
// a real syscall in some VMs) where the counter read is a few ns; __builtin_ia32_pause is fine
// but gives nothing inline asm does not.
#pragma once

#include <cstdint>
#include <ctime>

#include "base/cpu_relax.hpp"

namespace corun::arch {

// Hint to the core that this is a spin-wait iteration (defined in base/cpu_relax.hpp, below
// the lock that spins with it). Cost varies by core: ~140 cycles on Intel Skylake and
// later, a few on AMD Zen 1, ~65 on Zen 2. spin.hpp measures it at start-up:
// pause_cost_ns().
using base::cpu_relax;

// A cheap monotonic tick counter. Units: TSC ticks (x86), generic-timer ticks (aarch64,
// CNTFRQ_EL0 per second), or nanoseconds (other architectures). spin.hpp converts.
inline std::uint64_t cycles() noexcept {
#if defined(__x86_64__)
  std::uint32_t lo, hi;
  __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
#elif defined(__aarch64__)
  std::uint64_t v;
  __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
#endif
}

// The counter's architected frequency in Hz when the hardware states it, else 0 (unknown,
// measure it). aarch64: CNTFRQ_EL0, set by firmware and exact. x86: 0 -- CPUID leaf 0x15 is
// often absent or zero in VMs, so spin.hpp measures the TSC instead.
inline std::uint64_t counter_frequency_hz() noexcept {
#if defined(__aarch64__)
  std::uint64_t v;
  __asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(v));
  return v;
#else
  return 0;
#endif
}

}  // namespace corun::arch
