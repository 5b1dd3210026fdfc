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
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

#include "base/probes.hpp"
#include "os/futex.hpp"
#include "os/thread.hpp"
#include "sched/park.hpp"
#include "sync/chan_core.hpp"
#include "sync/chan_timer.hpp"
#include "sync/waiter.hpp"

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
  // A select's waiters share one futex word (a foreign thread waits on all at once).
  wake_task_or_thread(w->task, w->sel ? &w->sel->woken : &w->woken);
}

std::uint64_t chan_rand_seed() noexcept {
  std::uint64_t s =
      os::monotonic_ns() ^ reinterpret_cast<std::uintptr_t>(&tls_chan_rand) ^ 0x9e3779b97f4a7c15ull;
  return s ? s : 1;
}

namespace {

// The park commit: drops the lock the parked task took (beyond the analysis).
void unlock_commit(void* arg) CORUN_NO_TSA {
  static_cast<ChanCore*>(arg)->lock.unlock();
}

// Waits for w, queued by the caller on one of c's queues (lock held; released here, for
// a task by the park commit: beyond the analysis).
void wait_queued(ChanCore* c, ChanWaiter& w) noexcept CORUN_RELEASE(c->lock) CORUN_NO_TSA {
  if (w.task) {
    sched::park(unlock_commit, c);
    return;
  }
  c->lock.unlock();
  sleep_until_woken(&w.woken);
}

// Queues a waiter for the calling task or thread on q (c locked; unlocked here) and waits;
// returns its `success` (false: woken by close). Out of line, so that the fast paths need
// no frame for a waiter.
[[gnu::noinline]] bool wait_on(ChanCore* c, WaitQueue& q, void* elem, int is_send)
    CORUN_RELEASE(c->lock) {
  CORUN_PROBE2(chan_block, c, is_send);
  ChanWaiter w;
  w.task = sched::current_task();
  w.elem = elem;
  q.push(&w);
  wait_queued(c, w);
  return w.success;
}

// Ends a step that moved something or found the channel closed: drops the lock, then
// wakes the peer the step took.
inline void finish_step(ChanCore* c, ChanWaiter* wake) noexcept CORUN_RELEASE(c->lock) {
  c->lock.unlock();
  if (wake) chan_wake(wake);
}

// Chan's byte allocation: the core, then the ring, aligned for both.
std::size_t alloc_align(const ElemOps* ops) noexcept {
  return ops->align > alignof(ChanCore) ? ops->align : alignof(ChanCore);
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

namespace {
// The existing negative-capacity message, with the std::size_t the caller passed.
[[noreturn]] void throw_negative_size_t_capacity(std::size_t capacity) {
  const auto as_signed = static_cast<long long>(capacity);  // two's complement (C++20)
  throw std::invalid_argument("corun::Chan: capacity " + std::to_string(as_signed) +
                              " is negative (" + std::to_string(capacity) +
                              " as std::size_t); a capacity is 0 (unbuffered) or more");
}
}  // namespace

// capacity arrives as a std::size_t: Chan(std::size_t), or Chan(I) once it checked that an
// integer is not negative. A value with the top bit set is no buffer anyone can allocate
// and is what a negative number becomes on its way to std::size_t (an unscoped enum, a
// class converting to int, an explicit cast, unsigned arithmetic below zero): it is
// reported as that negative number, with std::invalid_argument as for Chan<T>(-1).
ChanHeader* chan_make(std::size_t capacity, const ElemOps* ops) {
  if (capacity > static_cast<std::size_t>(INT64_MAX)) throw_negative_size_t_capacity(capacity);
  std::size_t align = alloc_align(ops);
  std::size_t head = (sizeof(ChanCore) + ops->align - 1) & ~(ops->align - 1);
  std::size_t limit = (std::size_t{1} << 40) / (ops->size ? ops->size : 1);
  if (capacity > limit)
    throw std::length_error("corun::Chan: capacity " + std::to_string(capacity) +
                            " too large for " + std::to_string(ops->size) +
                            "-byte values; a capacity is 0 (unbuffered) to " +
                            std::to_string(limit) + " (a buffer of at most 1 TiB)");
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

// The last handle is gone: nobody else can reach c, so its fields need no lock (beyond
// the analysis).
void chan_destroy(ChanHeader* h) noexcept CORUN_NO_TSA {
  ChanCore* c = core(h);
  std::size_t n = c->count.load(std::memory_order_relaxed);
  for (std::size_t i = 0, x = c->recvx; i < n; i++) {
    elem_destroy(c, c->slot(x));
    if (++x == c->cap) x = 0;
  }
  std::size_t align = alloc_align(c->ops);
  c->~ChanCore();
  ::operator delete (static_cast<void*>(c), std::align_val_t{align});
}

[[noreturn]] void throw_negative_capacity(long long capacity) {
  throw std::invalid_argument("corun::Chan: capacity " + std::to_string(capacity) +
                              " is negative; a capacity is 0 (unbuffered) or more");
}

void throw_send_closed() {
  throw closed_channel("corun: send on closed channel");
}

void chan_send(ChanHeader* h, void* src) {
  if (!h) block_forever();
  ChanCore* c = core(h);
  c->lock.lock();
  ChanWaiter* wake;
  Step st = send_step(c, src, &wake);
  if (st == Step::blocked) {
    if (!wait_on(c, c->sendq, src, 1)) throw_send_closed();  // woken by close
    return;
  }
  finish_step(c, wake);
  if (st == Step::closed) throw_send_closed();
}

bool chan_offer(ChanHeader* h, void* src) {
  if (!h) return false;
  ChanCore* c = core(h);
  if (!c->closed.load(std::memory_order_acquire) && full_hint(c)) return false;
  c->lock.lock();
  ChanWaiter* wake;
  Step st = send_step(c, src, &wake);
  if (st == Step::blocked) {
    c->lock.unlock();
    return false;
  }
  finish_step(c, wake);
  if (st == Step::closed) throw_send_closed();
  return true;
}

bool chan_try_send(ChanHeader* h, void* src) {
  if (chan_offer(h, src)) return true;
  polled_nothing();
  return false;
}

void chan_bind_timer(ChanHeader* h, sched::TimerNode* t) noexcept {
  ChanCore* c = core(h);
  base::Guard g(c->lock);
  c->timer = t;
}

namespace {
// A receive found c empty and c is bound to a timer: if the timer is due, fire it now
// (sched::Timers::fire_due), so its value is in c (or with another receiver) before this
// task parks. c locked on entry and on return; true if the lock was dropped in between,
// and then the caller must take its step again, fired or not: another firer may have sent
// meanwhile (a stale "blocked" parked a task beside a full buffer). A timer not yet due
// costs one load and a clock read, the lock kept. Only a task on a P (fire_due's
// contract; a foreign thread would need a gate section to reach the heap, and simply
// waits). Out of line: the plain receive saves no registers for it.
[[gnu::noinline]] bool fire_bound_timer(ChanCore* c) noexcept CORUN_REQUIRES(c->lock) {
  sched::TimerNode* t = c->timer;
  if (!sched::can_park()) return false;
  const std::int64_t now = sched::Timers::due_now(t);
  if (now == 0 || !t->try_hold()) return false;
  c->lock.unlock();
  // Consumes the reference; its release may destroy t, which unbinds it under c's lock:
  // not held here.
  sched::Timers::fire_due(t, now);
  // A preemption point, as a poll's: a loop receiving from an always-due timer (a 1 ns
  // Ticker) no longer parks, and would otherwise hold its P for good. No lock is held.
  sched::yield_if_preempted();
  c->lock.lock();
  return true;
}
}  // namespace

bool chan_recv(ChanHeader* h, void* dst) {
  if (!h) block_forever();
  ChanCore* c = core(h);
  c->lock.lock();
  ChanWaiter* wake;
  Step st = recv_step(c, dst, &wake);
  if (st == Step::blocked) {
    // A timer's channel whose timer is due: its value without a park (chan_timer.hpp).
    if (c->timer && fire_bound_timer(c)) st = recv_step(c, dst, &wake);
    if (st == Step::blocked) return wait_on(c, c->recvq, dst, 0);
  }
  finish_step(c, wake);
  return st == Step::done;
}

int chan_poll_recv(ChanHeader* h, void* dst) {
  ChanCore* c = h ? core(h) : nullptr;
  // Lock-free "would block" (see the header comment): empty, then open.
  bool worth_locking = c != nullptr;
  if (c && empty_hint(c)) {
    if (!c->closed.load(std::memory_order_acquire))
      worth_locking = false;
    else if (empty_hint(c))
      return 0;  // closed and drained
  }
  if (worth_locking) {
    c->lock.lock();
    ChanWaiter* wake;
    Step st = recv_step(c, dst, &wake);
    if (st != Step::blocked) {
      finish_step(c, wake);
      return st == Step::done ? 1 : 0;
    }
    c->lock.unlock();
  }
  polled_nothing();
  return -1;
}

bool chan_try_recv(ChanHeader* h, void* dst) {
  return chan_poll_recv(h, dst) == 1;
}

void chan_close(ChanHeader* h) {
  if (!h) throw std::logic_error("corun: close of nil channel");
  ChanCore* c = core(h);
  c->lock.lock();
  if (c->closed.load(std::memory_order_relaxed)) {
    c->lock.unlock();
    throw closed_channel("corun: close of closed channel");
  }
  c->closed.store(true, std::memory_order_release);
  // Collect every waiter (success stays false), then wake them without the lock.
  ChanWaiter* wake = nullptr;
  ChanWaiter** tail = &wake;
  int woken = 0;
  for (WaitQueue* q : {&c->recvq, &c->sendq}) {
    while (ChanWaiter* w = q->dequeue()) {
      w->success = false;
      *tail = w;
      tail = &w->next;
      woken++;
    }
  }
  c->lock.unlock();
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
