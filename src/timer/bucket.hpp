// timer/bucket.hpp — one timer heap with its lock and its published earliest deadline:
// what each P holds by value (CORUN_TIMERS=per-p), or the runtime once (=global).
//
// Plain data over arch/ and timer/heap.hpp only, so the scheduler can embed it
// (DESIGN.md "Layers"); the timer layer (timer.cpp) is the only code that locks it and
// changes the heap, and the scheduler only reads `earliest` to decide whether to call the
// timer layer's run hook and how long an idle thread may sleep.
//
// Invariants:
//   - heap and every heap member's `when`/`index`: guarded by lock.
//   - earliest == heap.earliest() whenever lock is free (every writer stores it before
//     unlocking). seq_cst stores and loads: a store of an earlier deadline and the idle
//     thread's store of the deadline it sleeps until (Runtime::watch_until) form a
//     store-buffering pair — with seq_cst on both sides one of them sees the other, so
//     a new earliest timer never sleeps unseen (sched.cpp, timer_watch).
// Rejected: a lock-free heap (stop/reset from other Ps need the index under a lock
// anyway); std::mutex (a task holding it must not put its M's thread to sleep while it
// holds a P; the hold time is a heap sift, a few hundred ns at most).
#pragma once

#include <atomic>
#include <cstdint>

#include "arch/spinlock.hpp"
#include "timer/heap.hpp"

namespace corun::timer {

struct alignas(64) TimerBucket {
  std::atomic<std::uint32_t> lock{0};  // lock_order.hpp: timer heap lock
  TimerHeap heap;                      // guarded by lock
  // Published heap.earliest(); written under lock (seq_cst, see above), read lock-free.
  std::atomic<std::int64_t> earliest{TimerHeap::kNever};

  void acquire() noexcept { detail::spin_lock(lock); }
  void release() noexcept { detail::spin_unlock(lock); }
};

}  // namespace corun::timer
