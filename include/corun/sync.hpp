// corun/sync.hpp — WaitGroup and Mutex (API.md "Sync").
//
// Both park the waiting task, never its thread (a foreign thread that is not one of the
// runtime's blocks on a futex instead). Waiters queue FIFO in an intrusive list of nodes
// that live on the waiters' own stacks, so waiting allocates nothing.
//
// Mutex follows Go's sync.Mutex: in normal mode an unlock wakes one waiter, but a running
// task may take the mutex first (barging, after a brief spin): high throughput, since the
// lock rarely waits for a wake-up. A waiter that has waited over 1 ms switches the mutex
// to starvation mode, where unlock hands ownership straight to the oldest waiter, until
// the queue drains: no waiter starves.
#pragma once

#include <atomic>
#include <cstdint>

namespace corun {

namespace detail {
struct Waiter;
// FIFO of parked waiters guarded by a tiny spin lock (held for a few instructions).
struct WaitList {
  std::atomic<std::uint32_t> lock{0};  // 0 free, 1 held; acquire on take, release on drop
  Waiter* head = nullptr;              // guarded by lock
  Waiter* tail = nullptr;              // guarded by lock
};
}  // namespace detail

class WaitGroup {
 public:
  WaitGroup() = default;
  WaitGroup(const WaitGroup&) = delete;
  WaitGroup& operator=(const WaitGroup&) = delete;
  void add(int n = 1);  // counter < 0 throws std::logic_error (counter left unchanged)
  void done() { add(-1); }
  void wait();  // returns once the counter is zero

  // A WaitGroup may be destroyed as soon as wait() returns: the add() that reaches zero
  // touches nothing of it after releasing the waiters (Go's permit scheme, below).
 private:
  // High 32 bits: the counter; low 32 bits: waiters counted by wait() and not yet
  // released. CAS with acq_rel: done() releases the worker's writes, the waiter that
  // sees zero (or its permit) acquires them.
  std::atomic<std::uint64_t> state_{0};
  std::uint32_t permits_ = 0;  // releases not yet claimed; guarded by waiters_.lock
  detail::WaitList waiters_;
};

class Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void lock() {
    // Load, then CAS (test-and-test-and-set, as Abseil's Mutex::Lock): a CAS on a mutex
    // held on another core would pull the line over even when it fails, and a free mutex
    // whose word is not zero (a woken waiter on its way: kWoken) is taken with one CAS
    // here, not a failed CAS and a call. MutexHandoff-2 -44%, -4 -36% (perf/RESULTS.md).
    std::uint32_t zero = 0;
    // The empty asm hides that `zero` is 0, so the compiler keeps the constant in a
    // register of its own instead of reusing the one the load filled: the CAS then waits
    // only for the predicted branch, not for the load's value, and the uncontended lock
    // costs what a bare CAS does (+14% at 1 P when the CAS took the loaded value).
    asm("" : "+r"(zero));
    // relaxed: a hint; the CAS that takes the mutex decides, with acquire (the critical
    // section sees the previous holder's writes).
    const std::uint32_t seen = state_.load(std::memory_order_relaxed);
    if (seen == 0) {
      if (state_.compare_exchange_strong(zero, kLocked, std::memory_order_acquire,
                                         std::memory_order_relaxed))
        return;
    } else if (!(seen & (kLocked | kStarving))) {
      std::uint32_t old = seen;  // normal mode: a running task may barge
      if (state_.compare_exchange_strong(old, seen | kLocked, std::memory_order_acquire,
                                         std::memory_order_relaxed))
        return;
    }
    lock_slow();
  }
  bool try_lock() {
    std::uint32_t old = state_.load(std::memory_order_relaxed);
    while (!(old & (kLocked | kStarving))) {
      if (state_.compare_exchange_weak(old, old | kLocked, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }
  void unlock() {
    // release: publish the critical section to the next holder.
    std::uint32_t now = state_.fetch_sub(kLocked, std::memory_order_release) - kLocked;
    // unlock_slow returns at once in normal mode with nobody counted, or with a waiter
    // already woken or the mutex already retaken; it is needed for a waiter to wake, for
    // starvation mode, and to report an unlock of an unlocked mutex (held bit was clear).
    if (now != 0 && (!((now + kLocked) & kLocked) || (now & kStarving) ||
                     ((now >> kWaiterShift) != 0 && !(now & (kLocked | kWoken)))))
      unlock_slow(now);
  }

 private:
  static constexpr std::uint32_t kLocked = 1;       // held
  static constexpr std::uint32_t kWoken = 2;        // a woken waiter is on its way: no more wakes
  static constexpr std::uint32_t kStarving = 4;     // hand-off mode
  static constexpr std::uint32_t kWaiterShift = 3;  // bits 3..: waiters counted
  void lock_slow();
  void unlock_slow(std::uint32_t now);
  std::atomic<std::uint32_t> state_{0};
  std::uint32_t sema_ = 0;    // semaphore permits; guarded by waiters_.lock
  detail::WaitList waiters_;  // semaphore queue
};

}  // namespace corun
