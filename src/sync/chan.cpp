// sync/chan.cpp — send, recv, close and the shared queue/hand-off helpers (Go's
// runtime/chan.go). See chan_core.hpp for the invariants.
//
// Non-blocking fast paths read count/closed/queue heads without the lock, as Go does:
//   try_recv: "empty" then "not closed" means the channel was empty and open at the
//   moment of the first load (a channel never reopens), so returning "would block" is
//   linearizable; if it was closed, the emptiness is re-checked, since a value could
//   have been buffered between the two loads and then the channel closed.
//   try_send: "open" and "full" (no receiver / count == cap) seen at once likewise.
// The loads are acquire so the second cannot be hoisted above the first.
// A blocked task parks with the channel locked; the scheduler's commit hook unlocks it
// once the task is off its stack, so no waker can resume a task still on its way out.
#include <sched.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "os/futex.hpp"
#include "os/thread.hpp"
#include "sched/park.hpp"
#include "sched/probes.hpp"
#include "sync/chan_core.hpp"

namespace corun::detail {

// ---- waiters ---------------------------------------------------------------------------

void WaitQueue::push(ChanWaiter* w) noexcept {
  w->next = nullptr;
  w->prev = tail;
  if (tail)
    tail->next = w;
  else
    head.store(w, std::memory_order_relaxed);
  tail = w;
  w->queued = true;
}

void WaitQueue::unlink(ChanWaiter* w) noexcept {
  if (w->prev)
    w->prev->next = w->next;
  else
    head.store(w->next, std::memory_order_relaxed);
  if (w->next)
    w->next->prev = w->prev;
  else
    tail = w->prev;
  w->next = w->prev = nullptr;
  w->queued = false;
}

ChanWaiter* WaitQueue::dequeue_slow() noexcept {
  for (;;) {
    ChanWaiter* w = head.load(std::memory_order_relaxed);
    if (!w) return nullptr;
    unlink(w);
    if (!w->sel) return w;
    std::uint32_t expected = 0;
    // acq_rel: see SelectState::done.
    if (w->sel->done.compare_exchange_strong(expected, 1, std::memory_order_acq_rel,
                                             std::memory_order_relaxed)) {
      w->sel->winner = w;
      return w;
    }
    // That select already won elsewhere and will clean up its other waiters; this one
    // is off the queue now, which its owner sees through `queued`.
  }
}

void chan_wake(ChanWaiter* w) noexcept {
  if (sched::Task* t = w->task) {
    sched::ready(t);  // w may be gone once t runs
    return;
  }
  std::atomic<std::uint32_t>* word = w->sel ? &w->sel->woken : &w->woken;
  // release: the waiter, acquiring, sees the value we moved and `success`.
  word->store(1, std::memory_order_release);
  // The waiter may already have seen the store and returned; waking a dead private futex
  // address is at worst a spurious wake-up for whoever waits there next.
  os::futex_wake(word, 1);
}

std::uint64_t chan_rand_seed() noexcept {
  std::uint64_t s =
      os::monotonic_ns() ^ reinterpret_cast<std::uintptr_t>(&tls_chan_rand) ^ 0x9e3779b97f4a7c15ull;
  return s ? s : 1;
}

namespace {

void unlock_commit(void* arg) {
  chan_unlock(static_cast<ChanCore*>(arg));
}

// Waits for w, queued by the caller on one of c's queues (lock held; released here).
void wait_queued(ChanCore* c, ChanWaiter& w) noexcept {
  if (w.task) {
    sched::park(unlock_commit, c);
    return;
  }
  chan_unlock(c);
  // acquire: pairs with chan_wake's release.
  while (w.woken.load(std::memory_order_acquire) == 0) os::futex_wait(&w.woken, 0);
}

void noop_commit(void*) {}

}  // namespace

// A nil channel, or a select with no case that can ever be ready: wait forever without
// using a CPU (the task is never readied; a foreign thread sleeps on a word nobody wakes).
[[noreturn]] void block_forever() noexcept {
  if (sched::current_task()) {
    sched::park(noop_commit, nullptr);
  }
  std::atomic<std::uint32_t> never{0};
  for (;;) os::futex_wait(&never, 0);
}

// ---- the operations -------------------------------------------------------------------

ChanHeader* chan_make(std::size_t capacity, const ElemOps* ops) {
  std::size_t align = ops->align > alignof(ChanCore) ? ops->align : alignof(ChanCore);
  std::size_t head = (sizeof(ChanCore) + ops->align - 1) & ~(ops->align - 1);
  std::size_t limit = (std::size_t{1} << 40) / (ops->size ? ops->size : 1);
  if (capacity > limit)
    throw std::length_error("corun::Chan: capacity " + std::to_string(capacity) +
                            " too large (the buffer would exceed 1 TiB)");
  std::size_t bytes = head + capacity * ops->size;
  void* mem = ::operator new (bytes, std::align_val_t{align});
  auto* c = ::new (mem) ChanCore();
  c->cap = capacity;
  c->esize = ops->size;
  c->trivial = ops->trivial;
  c->ops = ops;
  c->buf = static_cast<unsigned char*>(mem) + head;
  return c;
}

void chan_destroy(ChanHeader* h) noexcept {
  ChanCore* c = core(h);
  std::size_t n = c->count.load(std::memory_order_relaxed);
  for (std::size_t i = 0, x = c->recvx; i < n; i++) {
    elem_destroy(c, c->slot(x));
    if (++x == c->cap) x = 0;
  }
  std::size_t align = c->ops->align > alignof(ChanCore) ? c->ops->align : alignof(ChanCore);
  c->~ChanCore();
  ::operator delete (static_cast<void*>(c), std::align_val_t{align});
}

[[noreturn]] void throw_negative_capacity(long long capacity) {
  throw std::invalid_argument("corun::Chan: capacity " + std::to_string(capacity) +
                              " is negative; a capacity is 0 (unbuffered) or more");
}

bool would_block() noexcept {
  sched::yield_if_preempted();  // a polling loop must not keep its P past its slice
  return false;
}

namespace {
[[noreturn]] void throw_send_closed() {
  throw closed_channel("corun: send on closed channel");
}

bool full_hint(const ChanCore* c) noexcept {
  return c->cap == 0 ? c->recvq.empty_hint() : c->count.load(std::memory_order_acquire) == c->cap;
}
bool empty_hint(const ChanCore* c) noexcept {
  return c->cap == 0 ? c->sendq.empty_hint() : c->count.load(std::memory_order_acquire) == 0;
}

// Sends under the lock if it can proceed. Returns true if done; false (lock still held)
// if the caller must wait or give up. Throws (unlocked) if closed.
[[gnu::always_inline]] inline bool send_locked(ChanCore* c, void* src) {
  if (c->closed.load(std::memory_order_relaxed)) {
    chan_unlock(c);
    throw_send_closed();
  }
  if (ChanWaiter* r = c->recvq.dequeue()) {
    chan_send_to_waiter(c, r, src);
    chan_unlock(c);
    chan_wake(r);
    return true;
  }
  if (c->count.load(std::memory_order_relaxed) < c->cap) {
    chan_buffer_put(c, src);
    chan_unlock(c);
    return true;
  }
  return false;
}

// Receives under the lock if it can proceed: 1 got a value, 0 closed and drained (both
// unlocked); -1 must wait (lock still held).
[[gnu::always_inline]] inline int recv_locked(ChanCore* c, void* dst) {
  if (ChanWaiter* s = c->sendq.dequeue()) {
    chan_recv_from_waiter(c, s, dst);
    chan_unlock(c);
    chan_wake(s);
    return 1;
  }
  if (c->count.load(std::memory_order_relaxed) > 0) {
    chan_buffer_take(c, dst);
    chan_unlock(c);
    return 1;
  }
  if (c->closed.load(std::memory_order_relaxed)) {
    chan_unlock(c);
    return 0;
  }
  return -1;
}

}  // namespace

namespace {
// The waiting halves, out of line so that the fast paths need no frame for a waiter.
[[gnu::noinline]] void send_wait(ChanCore* c, void* src) {
  CORUN_PROBE2(chan_block, c, 1);
  ChanWaiter w;
  w.task = sched::current_task();
  w.elem = src;
  c->sendq.push(&w);
  wait_queued(c, w);
  if (!w.success) throw_send_closed();  // woken by close
}

[[gnu::noinline]] bool recv_wait(ChanCore* c, void* dst) {
  CORUN_PROBE2(chan_block, c, 0);
  ChanWaiter w;
  w.task = sched::current_task();
  w.elem = dst;
  c->recvq.push(&w);
  wait_queued(c, w);
  return w.success;  // false: woken by close
}
}  // namespace

void chan_send(ChanHeader* h, void* src) {
  if (!h) block_forever();
  ChanCore* c = core(h);
  chan_lock(c);
  if (send_locked(c, src)) return;
  send_wait(c, src);
}

bool chan_try_send(ChanHeader* h, void* src) {
  if (!h) return false;
  ChanCore* c = core(h);
  if (!c->closed.load(std::memory_order_acquire) && full_hint(c)) return would_block();
  chan_lock(c);
  if (send_locked(c, src)) return true;
  chan_unlock(c);
  return would_block();
}

bool chan_recv(ChanHeader* h, void* dst) {
  if (!h) block_forever();
  ChanCore* c = core(h);
  chan_lock(c);
  int r = recv_locked(c, dst);
  if (r >= 0) return r == 1;
  return recv_wait(c, dst);
}

int chan_poll_recv(ChanHeader* h, void* dst) {
  if (!h) return would_block() ? 0 : -1;
  ChanCore* c = core(h);
  if (empty_hint(c)) {
    if (!c->closed.load(std::memory_order_acquire)) return would_block() ? 0 : -1;
    if (empty_hint(c)) return 0;  // closed and drained
  }
  chan_lock(c);
  int r = recv_locked(c, dst);
  if (r >= 0) return r;
  chan_unlock(c);
  return would_block() ? 0 : -1;
}

bool chan_try_recv(ChanHeader* h, void* dst) {
  return chan_poll_recv(h, dst) == 1;
}

void chan_close(ChanHeader* h) {
  if (!h) throw std::logic_error("corun: close of nil channel");
  ChanCore* c = core(h);
  chan_lock(c);
  if (c->closed.load(std::memory_order_relaxed)) {
    chan_unlock(c);
    throw closed_channel("corun: close of closed channel");
  }
  c->closed.store(true, std::memory_order_release);
  // Collect every waiter (success stays false), then wake them without the lock.
  ChanWaiter* wake = nullptr;
  ChanWaiter** tail = &wake;
  for (WaitQueue* q : {&c->recvq, &c->sendq}) {
    while (ChanWaiter* w = q->dequeue()) {
      w->success = false;
      *tail = w;
      tail = &w->next;
    }
  }
  chan_unlock(c);
  int woken = 0;
  for (ChanWaiter* w = wake; w; w = w->next) woken++;
  CORUN_PROBE2(chan_close, c, woken);
  while (wake) {
    ChanWaiter* nx = wake->next;  // read before the wake: the node may vanish
    chan_wake(wake);
    wake = nx;
  }
}

std::size_t chan_size(const ChanHeader* h) noexcept {
  return h ? static_cast<const ChanCore*>(h)->count.load(std::memory_order_relaxed) : 0;
}

std::size_t chan_capacity(const ChanHeader* h) noexcept {
  return h ? static_cast<const ChanCore*>(h)->cap : 0;
}

}  // namespace corun::detail
