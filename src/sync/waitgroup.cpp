// sync/waitgroup.cpp — WaitGroup (Go's sync.WaitGroup).
//
// state_ packs the counter and the number of waiters, so the add() that brings the
// counter to zero knows whether anyone waits; with no waiter it touches nothing more.
// With w waiters it hands out w permits under the list lock and wakes the queued ones.
// A waiter counts itself in state_ first, then takes the list lock and either claims a
// permit (released before it could queue) or queues and parks. So every counted waiter
// returns only after the releasing add() has dropped the list lock, and a WaitGroup can
// be destroyed by a waiter the moment wait() returns (Go gets this from its semaphore;
// a naive "lock the list when the counter hits zero" touches freed memory).
// A negative counter is refused with a CAS before anyone sees it (Go panics; we throw and
// leave the counter as it was).
#include <cstdint>
#include <stdexcept>
#include <string>

#include <corun/sync.hpp>

#include "sync/waiter.hpp"

namespace corun {

namespace {
constexpr std::uint64_t kWaiterMask = 0xffffffffu;
std::int32_t counter_of(std::uint64_t s) {
  return static_cast<std::int32_t>(s >> 32);
}
std::uint64_t pack(std::int64_t counter, std::uint32_t waiters) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(counter)) << 32) | waiters;
}
}  // namespace

void WaitGroup::add(int n) {
  std::uint64_t s = state_.load(std::memory_order_relaxed);
  std::int64_t c;
  std::uint32_t w;
  do {
    c = static_cast<std::int64_t>(counter_of(s)) + n;
    w = static_cast<std::uint32_t>(s & kWaiterMask);
    if (c < 0)
      throw std::logic_error("corun::WaitGroup: counter would become " + std::to_string(c) +
                             " (done() or add(negative) called more often than add())");
    if (c > INT32_MAX) throw std::logic_error("corun::WaitGroup: counter overflow");
    // acq_rel: release the caller's writes to the waiters; acquire other done()s' writes
    // so the one reaching zero passes them all on.
  } while (!state_.compare_exchange_weak(s, pack(c, w), std::memory_order_acq_rel,
                                         std::memory_order_relaxed));
  if (c != 0 || w == 0 || n == 0) return;
  // Zero with w waiters, all blocked until released: reset the waiter count (a new
  // wait() from now on sees zero and returns at once), then release exactly w.
  std::uint64_t expected = pack(0, w);
  state_.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
  detail::waitlist_lock(waiters_);
  permits_ += w;
  detail::Waiter* wake_list = nullptr;
  detail::Waiter** tail = &wake_list;
  while (permits_ > 0) {
    detail::Waiter* x = detail::waitlist_pop(waiters_);
    if (!x) break;  // the rest claim their permit when they reach the lock
    permits_--;
    *tail = x;
    tail = &x->next;
  }
  *tail = nullptr;
  detail::waitlist_unlock(waiters_);  // the last touch of *this
  while (wake_list) {
    detail::Waiter* next = wake_list->next;  // read before waking: the node dies with it
    detail::wake(wake_list);
    wake_list = next;
  }
}

void WaitGroup::wait() {
  std::uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (counter_of(s) == 0) return;  // acquire: we see every done()'s writes
    if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
      break;
  }
  detail::waitlist_lock(waiters_);
  if (permits_ > 0) {  // released before we could queue
    permits_--;
    detail::waitlist_unlock(waiters_);
    return;
  }
  detail::Waiter w;
  detail::wait_locked(waiters_, w);
}

}  // namespace corun
