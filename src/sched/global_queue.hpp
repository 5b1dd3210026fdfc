// sched/global_queue.hpp — the global run queue (Go's sched.runq).
//
// Where tasks go that no P's ring can take: ring overflow (half a ring at a time), tasks
// readied or spawned by threads that hold no P (foreign threads, Ms in blocking calls),
// and tasks whose M came back from a blocking call to find no P. Every P looks here
// every 61st schedule (fairness: a full ring must not starve it) and whenever its own
// ring is empty.
//
// An intrusive FIFO (Task::next) under a mutex; `size` is an atomic copy of the length
// so that the common "is it empty?" check on every schedule takes no lock.
// Rejected: a lock-free MPMC queue — the global queue is the cold path by design, and a
// mutex lets a consumer take a batch (up to half a ring) in one critical section.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/check.hpp"
#include "base/lock.hpp"
#include "sched/task.hpp"

namespace corun::sched {

class GlobalQueue {
 public:
  // Appends the linked batch first..last (n tasks, linked by Task::next).
  void push_batch(Task* first, Task* last, std::uint32_t n) noexcept {
    last->next = nullptr;
    base::Guard g(mu_);
    if (tail_)
      tail_->next = first;
    else
      head_ = first;
    tail_ = last;
    // relaxed: readers use it as a hint and take the mutex before trusting it.
    size_.store(size_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void push(Task* t) noexcept { push_batch(t, t, 1); }

  // Takes up to max tasks (at least 1 if any); returns the first, links the rest via
  // Task::next in *rest (nullptr if none) and their count in *nrest.
  Task* pop_batch(std::uint32_t max, Task** rest, std::uint32_t* nrest) noexcept {
    *rest = nullptr;
    *nrest = 0;
    if (empty_hint()) return nullptr;
    base::Guard g(mu_);
    std::uint32_t size = size_.load(std::memory_order_relaxed);
#if CORUN_DEBUG_CHECKS
    std::uint32_t walked = 0;
    for (Task* x = head_; x; x = x->next) walked++;
    CORUN_DCHECK(walked == size, "global queue holds %u tasks, size says %u", walked, size);
#endif
    if (size == 0) return nullptr;
    std::uint32_t n = size < max ? size : max;
    Task* first = head_;
    Task* last = first;
    for (std::uint32_t i = 1; i < n; i++) last = last->next;
    head_ = last->next;
    if (!head_) tail_ = nullptr;
    last->next = nullptr;
    size_.store(size - n, std::memory_order_relaxed);
    *rest = first->next;
    *nrest = n - 1;
    first->next = nullptr;
    return first;
  }

  bool empty_hint() const noexcept {
    return size_.load(std::memory_order_relaxed) == 0;
  }
  std::uint32_t size_hint() const noexcept {
    return size_.load(std::memory_order_relaxed);
  }

 private:
  base::Lock<base::LockRank::global_runq> mu_;
  Task* head_ CORUN_GUARDED_BY(mu_) = nullptr;
  Task* tail_ CORUN_GUARDED_BY(mu_) = nullptr;
  std::atomic<std::uint32_t> size_{0};  // written under mu_; read lock-free as a hint
};

}  // namespace corun::sched
