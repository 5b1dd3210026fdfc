// sched/runq.hpp — a P's local run queue: a 256-slot ring plus the runnext slot.
//
// Go's runq design (proc.go runqput/runqget/runqgrab): only the owning P pushes (tail)
// and pops (head, by CAS, since thieves also move head); thieves take half of the ring by
// reading the slots and then CASing head forward. runnext holds the task the owner will
// run next (a task just readied or spawned inherits the rest of the time slice); thieves
// may take it too, but only on their last pass and after a backoff, because a task in
// runnext is usually about to run on its own P within nanoseconds.
//
// Separate types for the two access rules (Tokio's queue::Local / Steal): `RunQueue`
// owns the storage; `LocalEnd` is the owner's handle (push/pop), `StealEnd` the thieves'
// (steal into the thief's own LocalEnd). Slots are atomics with relaxed order so that a
// thief reading a slot the owner is overwriting is a benign, TSan-visible race: the
// thief's head CAS fails and the value is discarded.
//
// Memory orders:
//   owner push: slot store relaxed, then tail store-release (publishes the slot to
//               thieves that load-acquire tail); head load-acquire (synchronises with a
//               thief's CAS-release on head, so its slot reads happened before we
//               overwrite those slots).
//   owner pop:  head CAS-release (same reason, for thieves' view), tail is our own.
//   thief:      head and tail load-acquire, slot loads relaxed, head CAS acq_rel.
//   runnext:    exchange/CAS acq_rel: whoever takes the task sees its record; the
//               owner fills an empty slot with a store-release (see put_next).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "base/check.hpp"
#include "sched/task.hpp"

namespace corun::sched {

#ifndef CORUN_RUNQ_SIZE
#define CORUN_RUNQ_SIZE 256
#endif

class RunQueue {
 public:
  static constexpr std::uint32_t kSize = CORUN_RUNQ_SIZE;
  static_assert((kSize & (kSize - 1)) == 0, "run queue size must be a power of two");

  // Approximate size for traces and emptiness checks from other threads.
  std::uint32_t size_hint() const noexcept {
    std::uint32_t h = head.load(std::memory_order_acquire);
    std::uint32_t t = tail.load(std::memory_order_acquire);
    std::uint32_t n = t - h;
    return (n > kSize ? 0 : n) + (runnext.load(std::memory_order_relaxed) ? 1 : 0);
  }
  bool empty_hint() const noexcept { return size_hint() == 0; }

  // Empties the queue with head == tail == index (tests start near the 2^32 wrap). Only
  // while no owner and no thief uses it.
  void reset(std::uint32_t index) noexcept {
    head.store(index, std::memory_order_relaxed);
    tail.store(index, std::memory_order_relaxed);
    runnext.store(nullptr, std::memory_order_relaxed);
  }

 private:
  // Only the two ends touch the storage: the owner through LocalEnd, thieves through
  // StealEnd (which writes into the thief's own free slots, beyond its published tail).
  friend class LocalEnd;
  friend class StealEnd;
  alignas(64) std::atomic<std::uint32_t> head{0};  // owner and thieves CAS
  alignas(64) std::atomic<std::uint32_t> tail{0};  // written by the owner only
  std::atomic<Task*> runnext{nullptr};             // owner exchanges, thieves CAS
  std::array<std::atomic<Task*>, kSize> slots{};   // see header comment
};

// The owner's handle. Only the thread currently holding the P may use it.
class LocalEnd {
 public:
  explicit LocalEnd(RunQueue& q) noexcept : q_(q) {}

  // Pushes t at the tail. On a full ring, moves half of the ring plus t into `overflow`
  // (a linked batch, oldest first, via Task::next) and returns its length; else 0.
  // The fast path inlines into every caller; the full ring's (a 1 KiB stack array) does not.
  std::uint32_t push_back(Task* t, Task** overflow) noexcept {
    std::uint32_t h = q_.head.load(std::memory_order_acquire);
    std::uint32_t tl = q_.tail.load(std::memory_order_relaxed);
    if (tl - h < RunQueue::kSize) [[likely]] {
      q_.slots[tl % RunQueue::kSize].store(t, std::memory_order_relaxed);
      q_.tail.store(tl + 1, std::memory_order_release);
      return 0;
    }
    return push_back_full(t, overflow);
  }

 private:
  [[gnu::noinline]] std::uint32_t push_back_full(Task* t, Task** overflow) noexcept {
    for (;;) {
      std::uint32_t h = q_.head.load(std::memory_order_acquire);
      std::uint32_t tl = q_.tail.load(std::memory_order_relaxed);
      if (tl - h < RunQueue::kSize) {
        q_.slots[tl % RunQueue::kSize].store(t, std::memory_order_relaxed);
        q_.tail.store(tl + 1, std::memory_order_release);
        return 0;
      }
      // Full: take half of it for the global queue, as Go's runqputslow does.
      std::uint32_t n = (tl - h) / 2;
      Task* batch[RunQueue::kSize / 2 + 1];
      for (std::uint32_t i = 0; i < n; i++)
        batch[i] = q_.slots[(h + i) % RunQueue::kSize].load(std::memory_order_relaxed);
      if (!q_.head.compare_exchange_strong(h, h + n, std::memory_order_release,
                                           std::memory_order_relaxed))
        continue;  // thieves took some; the ring has room now
      batch[n] = t;
      for (std::uint32_t i = 0; i < n; i++) batch[i]->next = batch[i + 1];
      t->next = nullptr;
      *overflow = batch[0];
      return n + 1;
    }
  }

 public:
  // Puts t in runnext; the task it displaces (if any) is returned for push_back.
  // Thieves only ever clear runnext (CAS non-null -> null) and only the owner fills it,
  // so an empty slot stays empty until we write it: a plain store-release (publishing
  // t's record to a thief's CAS) suffices, saving an RMW on every channel hand-off.
  Task* put_next(Task* t) noexcept {
    if (q_.runnext.load(std::memory_order_relaxed) == nullptr) {
      q_.runnext.store(t, std::memory_order_release);
      return nullptr;
    }
    return q_.runnext.exchange(t, std::memory_order_acq_rel);
  }

  // runnext first, then the ring's head.
  Task* pop() noexcept {
    if (Task* next = take_next()) return next;
    return pop_ring();
  }

  // Empties runnext and returns what it held (nullptr if empty, or a thief got it first).
  Task* take_next() noexcept {
    Task* next = q_.runnext.load(std::memory_order_relaxed);
    if (next && q_.runnext.compare_exchange_strong(next, nullptr, std::memory_order_acq_rel,
                                                   std::memory_order_relaxed))
      return next;
    return nullptr;
  }

  Task* pop_ring() noexcept {
    for (;;) {
      std::uint32_t h = q_.head.load(std::memory_order_acquire);
      std::uint32_t tl = q_.tail.load(std::memory_order_relaxed);
      if (tl == h) return nullptr;
      Task* t = q_.slots[h % RunQueue::kSize].load(std::memory_order_relaxed);
      if (q_.head.compare_exchange_strong(h, h + 1, std::memory_order_release,
                                          std::memory_order_relaxed))
        return t;
    }
  }

  // Appends n tasks already written at slots [tail, tail+n) by a steal; publishes them.
  void publish(std::uint32_t n) noexcept {
    std::uint32_t tl = q_.tail.load(std::memory_order_relaxed);
    CORUN_DCHECK(tl + n - q_.head.load(std::memory_order_relaxed) <= RunQueue::kSize,
                 "publishing %u stolen tasks overfills the ring", n);
    q_.tail.store(tl + n, std::memory_order_release);
  }

  // After a steal of n >= 1 tasks: publishes all but the newest, which it returns for
  // the thief to run at once (Go's runqsteal returning the last one).
  Task* publish_stolen(std::uint32_t n) noexcept {
    std::uint32_t tl = q_.tail.load(std::memory_order_relaxed);
    Task* t = q_.slots[(tl + n - 1) % RunQueue::kSize].load(std::memory_order_relaxed);
    if (n > 1) publish(n - 1);
    return t;
  }

 private:
  friend class StealEnd;  // writes stolen tasks into our free slots
  RunQueue& q_;
};

// What a thief does while the victim's runnext looks about to run.
struct RunnextBackoff {
  virtual void wait() const noexcept = 0;
  virtual ~RunnextBackoff() = default;
};

// The thieves' handle on a victim's queue.
class StealEnd {
 public:
  explicit StealEnd(RunQueue& victim) noexcept : v_(victim) {}

  // Moves half of the victim's ring into the thief's ring (unpublished slots after its
  // tail) and returns the count. With take_next and an empty ring, takes the victim's
  // runnext (after backoff.wait() when victim_running) and returns 1.
  std::uint32_t steal_into(LocalEnd& thief, bool take_next, bool victim_running,
                           const RunnextBackoff& backoff) noexcept {
    RunQueue& tq = thief.q_;
    std::uint32_t ttail = tq.tail.load(std::memory_order_relaxed);
    for (;;) {
      std::uint32_t h = v_.head.load(std::memory_order_acquire);
      std::uint32_t t = v_.tail.load(std::memory_order_acquire);
      std::uint32_t n = t - h;
      n = n - n / 2;
      if (n == 0) {
        if (!take_next) return 0;
        Task* next = v_.runnext.load(std::memory_order_acquire);
        if (!next) return 0;
        if (victim_running) {
          // The victim is about to run `next` itself (it is running and put it there).
          // Stealing it now would bounce the task between Ps; give the victim a moment.
          backoff.wait();
        }
        if (!v_.runnext.compare_exchange_strong(next, nullptr, std::memory_order_acq_rel,
                                                std::memory_order_relaxed))
          continue;
        tq.slots[ttail % RunQueue::kSize].store(next, std::memory_order_relaxed);
        return 1;
      }
      if (n > RunQueue::kSize / 2) continue;  // h and t read at different times; retry
      for (std::uint32_t i = 0; i < n; i++) {
        Task* task = v_.slots[(h + i) % RunQueue::kSize].load(std::memory_order_relaxed);
        tq.slots[(ttail + i) % RunQueue::kSize].store(task, std::memory_order_relaxed);
      }
      if (v_.head.compare_exchange_strong(h, h + n, std::memory_order_acq_rel,
                                          std::memory_order_relaxed))
        return n;
    }
  }

 private:
  RunQueue& v_;
};

}  // namespace corun::sched
