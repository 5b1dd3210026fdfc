// base/cpu_relax.hpp — the spin-wait hint (x86 PAUSE, aarch64 ISB SY).
//
// It lives in base, below arch, because the one lock type (base/lock.hpp) spins with it
// and every layer, arch and os included, takes that lock. arch/cpu.hpp re-exports it as
// arch::cpu_relax beside the cycle counter, and explains the choice of instruction per
// architecture (ISB rather than YIELD on aarch64). Inline, no syscall, any thread.
#pragma once

namespace corun::base {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ __volatile__("pause" ::: "memory");
#elif defined(__aarch64__)
  __asm__ __volatile__("isb sy" ::: "memory");
#else
  __asm__ __volatile__("" ::: "memory");
#endif
}

}  // namespace corun::base
