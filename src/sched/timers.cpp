// sched/timers.cpp — the P's timers (contract and invariants in timers.hpp): arming,
// disarming and moving nodes, running due ones, and parking a sleeping task on one.
//
// run() pops due nodes under the lock, at most kBatch per hold (a P arming timers is never
// held off for long), then fires them with no lock held: firing creates tasks and takes
// channel locks, which must not nest inside a heap lock every other P's stop/reset needs.
// A node reset to a later deadline keeps its place and key (push_back's CAS with no lock,
// or TimerHeap::update_lazy under it); run() settles it when its stale key comes due, and
// claims a due node by CAS on its `when`, so a push-back and a firing never both win. A
// periodic node is moved to the next deadline after `now` (missed ticks skipped, as Go's)
// and fired as it stays armed.
// Rejected: firing under the lock (above); Go's adjusttimers pass (it exists for Go's
// timerModifiedEarlier: here an earlier reset edits the heap in place under the lock).
#include "sched/timers.hpp"

#include <pthread.h>

#include <vector>

#include "base/check.hpp"
#include "base/probes.hpp"
#include "os/thread.hpp"
#include "sched/idle.hpp"
#include "sched/park.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

namespace {

std::int64_t now_ns() noexcept {
  return static_cast<std::int64_t>(os::monotonic_ns());
}

constexpr int kBatch = 64;

}  // namespace

Timers* Timers::of_caller() noexcept {
  M* m = current_m();
  if (m && m->p) return m->p->timers;
  // Not an M: the runtime its foreign gate section pinned (the timer layer opens one).
  Runtime* rt = m ? m->rt : foreign_runtime();
  if (!rt) return nullptr;
  // A thread without a P: spread such threads over the Ps by thread identity, so a
  // foreign thread arming many timers does not pile them into P0's heap.
  auto h = static_cast<std::size_t>(pthread_self()) * 0x9e3779b97f4a7c15ull;
  return rt->ps[(h >> 32) % rt->ps.size()]->timers;
}

bool Timers::publish() noexcept {
  // Debug builds walk small heaps after every change (Go's verifyTimerHeap).
  CORUN_DCHECK(heap_.size() > 4096 || heap_.verify(), "timer heap %p out of order",
               static_cast<void*>(this));
  std::int64_t e = heap_.earliest();
  std::int64_t old = earliest_.load(std::memory_order_relaxed);
  if (e == old) return false;
  earliest_.store(e, std::memory_order_seq_cst);  // seq_cst: idle_wake's pair
  return e < old;
}

[[gnu::always_inline]] inline Timers* Timers::lock_owner(const TimerNode* t) noexcept {
  Timers* b = t->owner.load(std::memory_order_acquire);
  if (!b) return nullptr;
  b->lock_.lock();
  if (t->owner.load(std::memory_order_relaxed) == b) return b;
  b->lock_.unlock();  // taken out for firing meanwhile
  return nullptr;
}

bool Timers::push_locked(TimerNode* t, std::int64_t when) {
  // release: a push_back that CASes from this value (acq_rel) sees the period stored
  // before it (Ticker::reset re-reads it; timer.cpp).
  t->when.store(when, std::memory_order_release);
  try {
    heap_.push(t);
  } catch (...) {  // std::bad_alloc: t stays inactive
    t->when.store(TimerNode::kInactive, std::memory_order_relaxed);
    throw;
  }
  t->owner.store(this, std::memory_order_release);
  return publish();
}

void Timers::add(TimerNode* t, std::int64_t when) {
  bool earlier;
  {
    base::Guard g(lock_);  // dropped if push_locked throws
    earlier = push_locked(t, when);
  }
  if (earlier) idle_wake_heap(this, when);
}

bool Timers::remove(TimerNode* t) noexcept {
  Timers* b = lock_owner(t);
  if (!b) return false;
  b->lock_.assert_held();
  b->heap_.remove(t);
  // Relaxed: a push_back racing this sees either (header); the owner store publishes it.
  t->when.store(TimerNode::kInactive, std::memory_order_relaxed);
  // release: an arming side that sees nullptr (acquire) may add t to another heap without
  // this lock; its writes to when/index come after ours.
  t->owner.store(nullptr, std::memory_order_release);
  b->publish();
  b->lock_.unlock();
  return true;
}

bool Timers::modify(TimerNode* t, std::int64_t when, std::int64_t period) noexcept {
  if (period <= 0 && push_back(t, when)) return true;  // later: no lock at all
  Timers* b = lock_owner(t);
  if (!b) return false;
  b->lock_.assert_held();
  if (period > 0) t->period.store(period, std::memory_order_relaxed);  // firers: this lock
  // A plain store of `when` (inside update_lazy): a push_back racing it either lands
  // first and is overwritten, or fails its CAS and retries on the new value. release:
  // orders the period store above before it, for a push_back that CASes from this value
  // (acq_rel), as push_locked's store does. (Not a standalone release fence: GCC refuses
  // those under -fsanitize=thread, and TSan would not model it; a release store is the
  // same plain mov on x86.)
  b->heap_.update_lazy(t, when, std::memory_order_release);  // pushed back: O(1)
  bool earlier = b->publish();
  b->lock_.unlock();
  if (earlier) idle_wake_heap(b, when);
  return true;
}

bool Timers::check(std::int64_t now) noexcept {
  std::int64_t e = earliest_.load(std::memory_order_relaxed);
  if (e == TimerHeap::kNever) return false;
  if (now == 0) now = now_ns();
  if (now < e) return false;
  run(now);
  return true;
}

bool Timers::take_locked(TimerNode* t, std::int64_t when, std::int64_t now, bool held) noexcept {
  const std::int64_t period = t->period.load(std::memory_order_relaxed);
  std::int64_t next = TimerNode::kInactive;
  if (period > 0) {
    // The next deadline after now (missed ones are skipped, as Go's).
    std::int64_t steps = 1 + (now - when) / period;
    if (__builtin_mul_overflow(steps, period, &next) || __builtin_add_overflow(next, when, &next))
      next = TimerHeap::kNever;  // beyond the clock's range: no more firings
  }
  // The claim: a push_back (Timers::push_back) that moved `when` since the caller read it
  // makes it fail, and the node is not taken. acquire: pairs with push_back's release;
  // relaxed on failure (nothing read through it).
  std::int64_t seen = when;
  if (!t->when.compare_exchange_strong(seen, next, std::memory_order_acquire,
                                       std::memory_order_relaxed))
    return false;
  auto& bucket = late[static_cast<std::size_t>(late_bucket(now - when))];
  bucket.store(bucket.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (period > 0) {
    heap_.rekey(t, next);  // `when` is already next, or later (a push_back since)
    if (!held) t->hold();
  } else {
    heap_.remove(t);
    // release: see remove().
    t->owner.store(nullptr, std::memory_order_release);
  }
  return true;
}

void Timers::run(std::int64_t now) noexcept {
  for (;;) {
    TimerNode* due[kBatch];
    int n = 0;
    std::int64_t first_when = 0;  // for the timer_fire probe
    {
      base::Guard g(lock_);
      while (n < kBatch) {
        if (heap_.earliest() > now) break;
        if (heap_.settle_top()) continue;  // pushed back by a reset: not due after all
        auto* t = static_cast<TimerNode*>(heap_.top());
        const std::int64_t when = heap_.earliest();  // == t->when as settle_top saw it
        // Not taken: pushed back since settle_top; it is settled again on the next turn.
        if (!take_locked(t, when, now, false)) continue;
        if (n == 0) first_when = when;
        due[n++] = t;
      }
      publish();
      fired.store(fired.load(std::memory_order_relaxed) + static_cast<std::uint64_t>(n),
                  std::memory_order_relaxed);
    }
    if (n) CORUN_PROBE2(timer_fire, n, now - first_when);
    for (int i = 0; i < n; i++) due[i]->fire(now);
    if (n < kBatch) return;
  }
}

bool Timers::fire_due(TimerNode* t, std::int64_t now) noexcept {
  Timers* b = lock_owner(t);  // nullptr: taken out (fired, stopped) since due_now
  std::int64_t w = 0;
  bool took = false, periodic = false;
  if (b) {  // still armed, here
    b->lock_.assert_held();
    w = t->when.load(std::memory_order_relaxed);  // under lock_: only push_back moves it now
    periodic = t->period.load(std::memory_order_relaxed) > 0;
    took = w <= now && b->take_locked(t, w, now, true);
    if (took) {
      b->fired.store(b->fired.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      b->publish();  // later or the same: no idle wake-up needed
    }
    b->lock_.unlock();
  }
  if (took) {
    CORUN_PROBE2(timer_fire, 1, now - w);
    t->fire(now);  // a periodic firing releases the caller's reference
  }
  if (!took || !periodic) t->release();  // the caller's reference (may destroy t)
  return took;
}

void Timers::drain() noexcept {
  std::vector<TimerNode*> nodes;
  {
    base::Guard g(lock_);
    while (HeapNode* top = heap_.pop()) {
      auto* t = static_cast<TimerNode*>(top);
      t->when.store(TimerNode::kInactive, std::memory_order_relaxed);
      t->owner.store(nullptr, std::memory_order_release);
      nodes.push_back(t);
    }
    earliest_.store(TimerHeap::kNever, std::memory_order_seq_cst);
  }
  for (TimerNode* t : nodes) t->abandon();  // may run captured destructors: no lock held
}

namespace {
struct SleepCommit {
  Timers* b;
  std::int64_t when;
  bool earlier;
};
}  // namespace

// The park commit of sleep_until: drops the heap's lock once the task is off its stack.
void Timers::sleep_commit(void* arg) noexcept CORUN_NO_TSA {
  // Copy first: once the lock is dropped the task may be readied, run, and return,
  // taking this frame with it.
  SleepCommit c = *static_cast<SleepCommit*>(arg);
  c.b->lock_.unlock();
  if (c.earlier) idle_wake_heap(c.b, c.when);
}

// The lock is taken here and dropped by sleep_commit after the switch: beyond the
// analysis, hence CORUN_NO_TSA.
bool sleep_until(TimerNode* t, std::int64_t when) CORUN_NO_TSA {
  if (!can_park()) return false;
  Timers* b = Timers::of_caller();
  b->lock_.lock();
  bool earlier;
  try {
    earlier = b->push_locked(t, when);
  } catch (...) {  // std::bad_alloc: the heap cannot grow; nothing armed
    b->lock_.unlock();
    throw;
  }
  SleepCommit c{b, when, earlier};
  park(Timers::sleep_commit, &c);
  return true;
}

// ---- TimerSet ---------------------------------------------------------------------------

std::int64_t TimerSet::next() const noexcept {
  std::int64_t e = TimerHeap::kNever;
  for (const Timers* t : heaps_) {
    std::int64_t w = t->next(std::memory_order_seq_cst);
    if (w < e) e = w;
  }
  return e;
}

bool TimerSet::run_due(std::int64_t now) noexcept {
  if (now == 0) {
    // One clock read, only if some heap has a timer at all.
    std::int64_t e = next();
    if (e == TimerHeap::kNever) return false;
    now = now_ns();
    if (e > now) return false;
  }
  bool any = false;
  for (Timers* t : heaps_) {
    if (t->next() <= now) {
      t->run(now);
      any = true;
    }
  }
  return any;
}

void TimerSet::drain() noexcept {
  for (Timers* t : heaps_) t->drain();
}

}  // namespace corun::sched
