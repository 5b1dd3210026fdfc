// sync/waiter.cpp — the wait lists of WaitGroup and Mutex (contract: waiter.hpp): FIFO
// links under the list's spin lock, and the wait itself. A task parks with the list
// locked and the park commit drops the lock once the task is off its stack; a foreign
// thread drops the lock and sleeps on its waiter's futex word, which the waker sets with
// release before the futex wake, so a waiter that sees it set never sleeps.
#include "sync/waiter.hpp"

#include "os/futex.hpp"
#include "sched/park.hpp"

namespace corun::detail {

void waitlist_push(WaitList& l, Waiter* w) noexcept {
  w->next = nullptr;
  if (l.tail)
    l.tail->next = w;
  else
    l.head = w;
  l.tail = w;
}

Waiter* waitlist_pop(WaitList& l) noexcept {
  Waiter* w = l.head;
  if (w) {
    l.head = w->next;
    if (!l.head) l.tail = nullptr;
    w->next = nullptr;
  }
  return w;
}

Waiter* waitlist_take_all(WaitList& l) noexcept {
  Waiter* w = l.head;
  l.head = l.tail = nullptr;
  return w;
}

namespace {
void unlock_list(void* arg) {
  waitlist_unlock(*static_cast<WaitList*>(arg));
}
}  // namespace

namespace {
void wait_pushed(WaitList& l, Waiter& w) noexcept;
}

void wait_locked(WaitList& l, Waiter& w) noexcept {
  waitlist_push(l, &w);
  wait_pushed(l, w);
}

void wait_locked_front(WaitList& l, Waiter& w) noexcept {
  w.next = l.head;
  l.head = &w;
  if (!l.tail) l.tail = &w;
  wait_pushed(l, w);
}

namespace {
void wait_pushed(WaitList& l, Waiter& w) noexcept {
  w.task = sched::current_task();
  if (w.task) {
    sched::park(unlock_list, &l);
    return;
  }
  waitlist_unlock(l);
  sleep_until_woken(&w.woken);
}
}  // namespace

void wake(Waiter* w) noexcept {
  wake_task_or_thread(w->task, &w->woken);
}

void wake_task_or_thread(sched::Task* t, std::atomic<std::uint32_t>* word) noexcept {
  if (t) {
    sched::ready(t);
    return;
  }
  word->store(1, std::memory_order_release);  // release: pairs with sleep_until_woken
  // If the waiter saw the store without sleeping, it may have returned already and this
  // wake hits a dead address: harmless for a private futex (at worst a spurious wake-up,
  // which every futex waiter tolerates).
  os::futex_wake(word, 1);
}

void sleep_until_woken(std::atomic<std::uint32_t>* word) noexcept {
  while (word->load(std::memory_order_acquire) == 0) os::futex_wait(word, 0);
}

}  // namespace corun::detail
