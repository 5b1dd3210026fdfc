// sync/waiter.hpp — wait lists of WaitGroup and Mutex, and the one way any corun wait ends.
//
// A Waiter lives on the waiting task's (or foreign thread's) stack for the duration of
// the wait, linked into a WaitList (include/corun/sync.hpp) whose tiny spin lock guards
// the links. A task parks through sched::park; a foreign thread sleeps on the waiter's
// futex word. The waker reads everything it needs from the node before waking: once
// woken, the waiter returns and its node is gone. Channels queue their own waiter type
// (sync/chan_core.hpp: a select waits on several queues) but end a wait the same way
// (wake_task_or_thread).
// Rejected: std::mutex for the list — it can block the M's thread inside a task, which
// stalls the whole P; the spin lock is held for a handful of instructions.
#pragma once

#include <atomic>
#include <cstdint>

#include <corun/sync.hpp>

#include "base/lock.hpp"

namespace corun::sched {
struct Task;
}

namespace corun::detail {

struct Waiter {
  sched::Task* task = nullptr;          // the parked task; nullptr for a foreign thread
  std::atomic<std::uint32_t> woken{0};  // foreign thread's futex word; release on wake
  Waiter* next = nullptr;               // guarded by the list's lock
};

// The list's lock: base's spin lock, rank waitlist, on the word the public WaitList holds
// (include/corun/ cannot see src/base, so the word is not a base::Lock).
inline void waitlist_lock(WaitList& l) noexcept {
  base::lock_word<base::LockRank::waitlist>(l.lock);
}
inline void waitlist_unlock(WaitList& l) noexcept {
  base::unlock_word<base::LockRank::waitlist>(l.lock);
}
void waitlist_push(WaitList& l, Waiter* w) noexcept;  // lock held
Waiter* waitlist_pop(WaitList& l) noexcept;           // lock held; nullptr if empty
Waiter* waitlist_take_all(WaitList& l) noexcept;      // lock held; FIFO chain via next

// Enqueues w (for the calling task or thread) and waits until wake(w). Called with the
// list locked; releases the lock while waiting; returns without it.
void wait_locked(WaitList& l, Waiter& w) noexcept;
// As wait_locked, but queues w first (LIFO): a woken waiter that lost the race re-queues
// at the head (Go's semacquire with lifo = true).
void wait_locked_front(WaitList& l, Waiter& w) noexcept;
// Wakes a waiter already removed from its list. Call without the list's lock if possible.
void wake(Waiter* w) noexcept;

// The two ways any corun wait ends, shared by wait lists and channels: a parked task is
// made runnable (t != nullptr), or a foreign thread's futex word is set and woken. The
// waker must read everything it needs from the waiter's node first: once woken, the
// waiter returns and its node (on its stack) is gone.
void wake_task_or_thread(sched::Task* t, std::atomic<std::uint32_t>* word) noexcept;
// A foreign thread's side: sleeps until wake_task_or_thread set *word (acquire: it then
// sees everything the waker wrote before waking it).
void sleep_until_woken(std::atomic<std::uint32_t>* word) noexcept;

}  // namespace corun::detail
