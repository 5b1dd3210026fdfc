// sync/mutex.cpp — Mutex slow paths: Go's sync.Mutex algorithm (mutex.go), on a small
// semaphore of our own (permits + a WaitList).
//
// state_: bit 0 held, bit 1 woken (a waiter was woken and is competing: unlock wakes no
// one else), bit 2 starving (hand-off mode), bits 3.. the number of waiters counted.
//
// Normal mode: waiters queue FIFO on the semaphore; unlock clears the held bit and, if
// there are waiters and none is already woken, releases one. The woken waiter competes
// with running tasks (which may also spin briefly first) and often loses; it re-queues at
// the head (LIFO) so it is next. Once a waiter has waited over 1 ms it sets starving.
// Starvation mode: unlock hands the mutex directly to the oldest waiter (held bit stays,
// the waiter fixes the count); new arrivals neither spin nor barge, they queue. The last
// waiter, or one that waited under 1 ms, turns starvation off.
//
// Lifetime: unlock's slow path touches *this after dropping the held bit only when some
// waiter is counted; counted waiters cannot have returned, so a mutex that is unlocked
// and destroyed as soon as no one waits on it is safe (as with Go's).
// Rejected: FIFO hand-off on every contended unlock: every hand-off waits for a wake-up
// and a switch, a lock convoy under contention.
#include <cstdio>
#include <cstdlib>

#include <corun/runtime.hpp>
#include <corun/sync.hpp>

#include "arch/cpu.hpp"
#include "os/thread.hpp"
#include "sync/waiter.hpp"

namespace corun {

namespace {

constexpr std::uint64_t kStarvationNs = 1'000'000;

// Go's sync_runtime_canSpin: a few rounds, only with other Ps to make progress.
bool can_spin(int iter) {
  return iter < 4 && corun::procs() > 1 && corun::proc_id() >= 0;
}

void spin_round() {
  for (int i = 0; i < 30; i++) arch::cpu_relax();
}

// Semaphore acquire: take a permit, or queue (at the head when lifo) and wait for one.
void sema_acquire(detail::WaitList& l, std::uint32_t& permits, bool lifo) {
  detail::waitlist_lock(l);
  if (permits > 0) {
    permits--;
    detail::waitlist_unlock(l);
    return;
  }
  detail::Waiter w;
  if (lifo)
    detail::wait_locked_front(l, w);  // a woken waiter that lost the race goes first
  else
    detail::wait_locked(l, w);
}

// Semaphore release: hand the permit to the first waiter, or keep it.
void sema_release(detail::WaitList& l, std::uint32_t& permits, bool handoff) {
  detail::waitlist_lock(l);
  detail::Waiter* w = detail::waitlist_pop(l);
  if (!w) permits++;
  detail::waitlist_unlock(l);
  if (w) {
    detail::wake(w);
    // Hand-off: let the waiter (now in our P's runnext) run at once (Go's goyield).
    if (handoff && corun::proc_id() >= 0) corun::yield();
  }
}

}  // namespace

void Mutex::lock_slow() {
  std::uint64_t wait_start = 0;
  bool starving = false;
  bool awoke = false;
  int iter = 0;
  std::uint32_t old = state_.load(std::memory_order_relaxed);
  for (;;) {
    // Spin while held in normal mode: the holder may release soon.
    if ((old & (kLocked | kStarving)) == kLocked && can_spin(iter)) {
      // Set woken so unlock does not wake another waiter while we are about to take it.
      if (!awoke && !(old & kWoken) && (old >> kWaiterShift) != 0 &&
          state_.compare_exchange_weak(old, old | kWoken, std::memory_order_relaxed))
        awoke = true;
      spin_round();
      iter++;
      old = state_.load(std::memory_order_relaxed);
      continue;
    }
    std::uint32_t next = old;
    if (!(old & kStarving)) next |= kLocked;  // never barge in starvation mode
    if (old & (kLocked | kStarving)) next += 1u << kWaiterShift;
    if (starving && (old & kLocked)) next |= kStarving;
    if (awoke) next &= ~kWoken;
    // acquire: if this takes the lock, we see the previous holder's section.
    if (state_.compare_exchange_weak(old, next, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      if (!(old & (kLocked | kStarving))) return;  // taken
      bool lifo = wait_start != 0;
      if (wait_start == 0) wait_start = os::monotonic_ns();
      sema_acquire(waiters_, sema_, lifo);
      starving = starving || os::monotonic_ns() - wait_start > kStarvationNs;
      old = state_.load(std::memory_order_acquire);
      if (old & kStarving) {
        // Handed to us: the held bit is ours; drop our waiter count, maybe leave
        // starvation mode (we waited under 1 ms, or we are the last waiter).
        std::uint32_t delta = kLocked - (1u << kWaiterShift);
        if (!starving || (old >> kWaiterShift) == 1) delta -= kStarving;
        state_.fetch_add(delta, std::memory_order_acquire);
        return;
      }
      awoke = true;
      iter = 0;
    }
  }
}

void Mutex::unlock_slow(std::uint32_t now) {
  if (!((now + kLocked) & kLocked)) {
    std::fprintf(stderr, "corun: Mutex::unlock of an unlocked mutex\n");
    std::abort();
  }
  if (!(now & kStarving)) {
    std::uint32_t old = now;
    for (;;) {
      // Nobody to wake, or someone already woken / the lock already retaken.
      if ((old >> kWaiterShift) == 0 || (old & (kLocked | kWoken | kStarving))) return;
      std::uint32_t next = (old - (1u << kWaiterShift)) | kWoken;
      if (state_.compare_exchange_weak(old, next, std::memory_order_relaxed)) {
        sema_release(waiters_, sema_, false);
        return;
      }
    }
  }
  // Starvation mode: hand the mutex (held bit still set by the waiter's view: the next
  // owner sees kStarving and takes it) straight to the oldest waiter.
  sema_release(waiters_, sema_, true);
}

}  // namespace corun
