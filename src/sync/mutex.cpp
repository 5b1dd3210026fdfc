// sync/mutex.cpp — Mutex slow paths (the fast paths are inline in corun/sync.hpp).
//
// state_: bit 0 = held; the rest counts queued waiters (in steps of kWaiter). The
// waiter count and the WaitList change together under the list lock, so the list holds
// exactly state_/kWaiter waiters whenever that lock is free.
// unlock with waiters hands the mutex to the oldest waiter without clearing the held
// bit (no barging, no starvation; see sync.hpp for the trade-off).
// lock spins briefly first (4 rounds of 30 pauses, Go's sync_runtime_canSpin shape):
// a critical section is often shorter than a park/ready round trip.
#include <cstdio>
#include <cstdlib>

#include <corun/runtime.hpp>
#include <corun/sync.hpp>

#include "arch/cpu.hpp"
#include "sync/waiter.hpp"

namespace corun {

void Mutex::lock_slow() {
  if (corun::procs() > 1) {
    for (int round = 0; round < 4; round++) {
      for (int i = 0; i < 30; i++) arch::cpu_relax();
      if (state_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
    }
  }
  detail::waitlist_lock(waiters_);
  std::uint32_t s = state_.fetch_add(kWaiter, std::memory_order_relaxed) + kWaiter;
  for (;;) {
    if (s & kLocked) break;
    // Free meanwhile: take it and withdraw our waiter count in one step.
    if (state_.compare_exchange_weak(s, (s - kWaiter) | kLocked, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      detail::waitlist_unlock(waiters_);
      return;
    }
  }
  detail::Waiter w;
  detail::wait_locked(waiters_, w);
  // Woken by unlock_slow: the mutex was handed to us, held bit still set. The hand-off
  // chain (list lock release/acquire, the run queue's release/acquire) orders the
  // previous holder's critical section before ours.
}

void Mutex::unlock_slow() {
  std::uint32_t s = state_.load(std::memory_order_relaxed);
  if (!(s & kLocked)) {
    std::fprintf(stderr, "corun: Mutex::unlock of an unlocked mutex\n");
    std::abort();
  }
  for (;;) {
    detail::waitlist_lock(waiters_);
    detail::Waiter* w = detail::waitlist_pop(waiters_);
    if (w) {
      // Hand over: keep the held bit, drop one waiter. release: publish our section.
      // The mutex stays held (by w) until w runs, so nobody may destroy it meanwhile.
      state_.fetch_sub(kWaiter, std::memory_order_release);
      detail::waitlist_unlock(waiters_);
      detail::wake(w);
      return;
    }
    detail::waitlist_unlock(waiters_);
    // No waiter: drop the held bit last, with a CAS, since the moment it is clear another
    // task may lock, unlock and destroy the mutex. If a waiter queued since we looked,
    // the CAS fails and we hand over to it instead.
    std::uint32_t expected = kLocked;
    if (state_.compare_exchange_strong(expected, 0, std::memory_order_release,
                                       std::memory_order_relaxed))
      return;
  }
}

}  // namespace corun
