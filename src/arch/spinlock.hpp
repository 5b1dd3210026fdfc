// arch/spinlock.hpp — the tiny lock of wait lists, channels and timer heaps (lock_order.hpp).
//
// A test-and-test-and-set lock on one 32-bit word: 0 free, 1 held. It is held for a few
// dozen instructions and never across a park (the scheduler's commit hook drops it once
// the task is off its stack), so waiters spin: PAUSE 128 times, then sched_yield — a
// holder preempted by the kernel (more Ps than cores) gets the CPU instead of us
// burning our time slice.
// Rejected: std::mutex — inside a task it could put the M's thread to sleep while it
// holds a P; a futex-parking lock (Go's lock_futex) — the hold time is shorter than a
// futex round trip, so sleeping only pays under oversubscription, which yield covers.
// On 2 sockets × 64 cores a channel hammered by every P makes this line bounce between
// sockets like any lock; the cure there is fewer shared channels, not a fancier lock.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "arch/cpu.hpp"

namespace corun::detail {

inline void spin_lock(std::atomic<std::uint32_t>& l) noexcept {
  // acquire: the critical section sees the previous holder's writes.
  if (l.exchange(1, std::memory_order_acquire) == 0) return;
  // Exponential backoff between looks at the word: a contender polling every PAUSE
  // keeps pulling the line (which holds the channel's hot fields too) away from the
  // holder mid-critical-section; Go's lock polls every 30 PAUSEs.
  for (int pauses = 1, spins = 0;;) {
    for (int k = 0; k < pauses; k++) arch::cpu_relax();
    if (pauses < 32) pauses *= 2;
    if (l.load(std::memory_order_relaxed) == 0 && l.exchange(1, std::memory_order_acquire) == 0)
      return;
    if (++spins >= 16) {
      sched_yield();
      spins = 0;
    }
  }
}

inline void spin_unlock(std::atomic<std::uint32_t>& l) noexcept {
  l.store(0, std::memory_order_release);  // release: publish the critical section
}

}  // namespace corun::detail
