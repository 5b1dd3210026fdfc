// sched/timers.hpp — the P's timers (Go 1.23's runtime/time.go `timers`): the heap each P
// embeds, who runs it, and the contract through which the timer layer arms its records.
//
// Two audiences, two halves of this header:
//   - the timer layer (src/timer/): TimerNode, the scheduler's view of a timer, which its
//     records derive from; Timers::of_caller/add/remove/modify to arm and disarm them;
//     sleep_until to park a task on one. It never sees a P, a lock or a heap.
//   - the M loop (sched.cpp, task.cpp, sysmon.cpp, idle.cpp): Timers::next/check, and the
//     TimerSet of a runtime (every heap at once: the earliest deadline, run what is due).
//
// Who runs a due timer (Go's checkTimers/stealWork/findRunnable):
//   1. its own P, at every trip through find_runnable and every 8th direct task switch
//      (one clock read, only when the P has timers);
//   2. an M about to idle its P, and every P at its 61st schedule, for every heap: an
//      idle P's timers when due, a running P's once kOwnerLagNs (20 µs) overdue — a P
//      stuck in one long task (Go's TestAfterFuncStarvation); before that they are its
//      own, since taking them fights it for locks and moves its tasks (sched.hpp);
//   3. the idle wait (idle.cpp): the one idle M that sleeps until the earliest deadline
//      of an idle P's heap, or a running P's + a backstop lag (20 µs to 1 ms, backing
//      off while its wake-ups find the P has run them itself: IdleWait::lag_ns);
//   4. sysmon, while Ps run and nobody waits idle, every 10 ms at worst.
// Firing never needs a P: ready(), go() and a non-blocking channel send all work from a
// thread without one. A node is fired outside every lock, through its own fire() (Go's
// timer.f): the scheduler calls into the timer layer only there.
//
// Invariants (Timers):
//   - heap_ and every member node's index: guarded by lock_. A node's `when` is kInactive
//     exactly while it is inactive; an armed node's `when` changes under lock_, or — only
//     upwards — by push_back()'s CAS without it. Taking a node out (firing, remove, drain)
//     is a store or CAS of kInactive under lock_, so push_back() on a node that is leaving
//     fails and its caller takes the locked path. A firer claims a due node by CAS from
//     the deadline it found, so a push-back that got in first wins and the node is
//     settled, not fired (Go 1.14's timerModifiedLater, with the status folded into
//     `when`).
//   - earliest_ == heap_.earliest() whenever lock_ is free (every writer stores it before
//     unlocking). seq_cst: a store of an earlier deadline and the idle M's store of the
//     deadline it sleeps until form a store-buffering pair (idle.cpp): with seq_cst on both
//     sides one of them sees the other, so a new earliest timer never sleeps unseen.
//   - A node is in at most one heap; node->owner says which (nullptr: inactive).
//   - A node is never fired before its deadline: run() pops only when <= now, with now
//     read after the caller saw earliest_ <= now on the same clock.
// Rejected: a lock-free heap (stop/reset from other Ps need the index under a lock
// anyway; only a push later is lock-free, and it does not touch the heap); std::mutex (a task
// holding it must not put its M's thread to sleep while it holds a P; the hold is a heap sift, a
// few hundred ns at most); function pointers the timer layer registers at start-up (two hooks
// crossing the layer boundary where the node can carry its own fire(), as Go's timer carries f). On
// 2 sockets × 64 cores: TimerSet::next() reads one line per P on each idle pass; a per-node summary
// of the earliest deadlines would bound that.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/lock.hpp"
#include "base/tsa.hpp"
#include "os/thread.hpp"
#include "sched/timer_heap.hpp"

namespace corun::sched {

struct Runtime;
struct P;
class Timers;

// A timer as the scheduler sees it. The timer layer derives its records from it and says
// what firing does; the scheduler keeps it in a heap and decides when.
class TimerNode : public HeapNode {
 public:
  // The timer's action. Called by whoever runs due timers, with no lock held, once per
  // firing: the node has left its heap (period == 0) or moved on to its next deadline
  // (period > 0, after hold()). now: the clock reading that found it due.
  virtual void fire(std::int64_t now) noexcept = 0;
  // A periodic node stays in its heap while it fires: called under the heap's lock when it
  // is taken for firing, so it can keep itself alive until fire() returns.
  virtual void hold() noexcept {}
  // The runtime ends with the node armed: it leaves its heap and never fires.
  virtual void abandon() noexcept {}
  // A reference for a caller that found the node through something other than a heap or
  // its handle — a channel it feeds (Timers::fire_due) — and must keep it alive across
  // the call: false if the node is already being destroyed (nothing held then). release()
  // drops it and may destroy the node; call it with no lock held.
  virtual bool try_hold() noexcept { return false; }
  virtual void release() noexcept {}

  // `when` while the node is in no heap (see the invariants above).
  static constexpr std::int64_t kInactive = std::numeric_limits<std::int64_t>::min();

  // > 0: re-armed `period` ns after each deadline (missed ones skipped). Changed only by
  // add()/modify(), i.e. by the arming side (which serialises arms of one node) and
  // under the heap's lock while armed. Atomic (relaxed) because an arming side reads it
  // without either, to decide whether push_back() can keep it (timer.cpp's Ticker::reset).
  std::atomic<std::int64_t> period{0};
  // The heap it is in; nullptr when inactive. Stored (release) under that heap's lock by
  // add(); cleared under it by whoever takes the node out. Loaded with acquire.
  std::atomic<Timers*> owner{nullptr};

 protected:
  TimerNode() noexcept { when.store(kInactive, std::memory_order_relaxed); }
  ~TimerNode() = default;  // never deleted through this type
};

class alignas(64) Timers {
 public:
  // ---- the timer layer's half ----------------------------------------------------------
  // Where a timer armed by the caller goes: its P's heap (or the runtime's one heap in
  // CORUN_TIMERS=global); for a thread without a P (a foreign thread, a task in
  // blocking(), sysmon) a P's heap chosen by thread, so such threads spread their timers.
  // A thread that is not an M must call it, and use the heap, inside a foreign gate
  // section (sched/proc.hpp ForeignPin), which decides the runtime. nullptr when no
  // runtime runs (or it is stopping, for a thread that is not an M).
  static Timers* of_caller() noexcept;
  // Arms t, inactive, at `when` in this heap. The caller serialises arms of t. Wakes the
  // idle M if t is now the runtime's earliest deadline. Throws std::bad_alloc if the
  // heap cannot grow (t stays inactive).
  void add(TimerNode* t, std::int64_t when);
  // Takes t out of the heap it is in. True if it was armed; false if it was inactive or a
  // firer took it first (then it fires, or fired). remove and modify reach the heap
  // through t->owner: a thread without a P calls them inside a foreign gate section, so
  // that heap's runtime is not freed under it (its destruction drains the heaps, then
  // waits for the gate).
  static bool remove(TimerNode* t) noexcept;
  // Moves an armed t to `when` within its heap (and sets its period if period > 0); a
  // later deadline costs O(1) (TimerHeap::update_lazy). False, and nothing done, if t is
  // inactive: the caller arms it with add().
  static bool modify(TimerNode* t, std::int64_t when, std::int64_t period) noexcept;
  // modify()'s lock-free case: if t is armed and `when` is not before its deadline, moves
  // the deadline there with one CAS (no lock, no heap: the key stays a lower bound) and
  // returns true. False, nothing done, otherwise (inactive, leaving, or earlier): the
  // caller takes the locked path. Needs no foreign gate section: it touches only t.
  static bool push_back(TimerNode* t, std::int64_t when) noexcept {
    std::int64_t w = t->when.load(std::memory_order_relaxed);
    do {
      if (w == TimerNode::kInactive || when < w) return false;
      // acq_rel: release, so a firer that claims the node (acquire) sees what this side
      // wrote before; acquire, so a caller that re-reads the period after (Ticker::reset)
      // sees the one stored before the value it replaced (timers.cpp). Relaxed on
      // failure: w is only compared again.
    } while (!t->when.compare_exchange_weak(w, when, std::memory_order_acq_rel,
                                            std::memory_order_relaxed));
    return true;
  }
  // The clock reading at which armed t is due, or 0 if t is inactive or not yet due (a
  // snapshot: fire_due decides under the lock). Reads the clock only for an armed t: a
  // receiver asks this with its channel locked, so that a timer not yet due (a Ticker's
  // reader waiting for the next tick) costs the park one load and one clock read.
  static std::int64_t due_now(const TimerNode* t) noexcept {
    const std::int64_t w = t->when.load(std::memory_order_relaxed);
    if (w == TimerNode::kInactive) return 0;
    const auto now = static_cast<std::int64_t>(os::monotonic_ns());
    return w <= now ? now : 0;
  }
  // Go 1.23's maybeRunChan: fires t at `now` (due_now's reading) if it is still armed and
  // due then, instead of leaving it for whoever runs its heap next: a task about to park
  // on the channel t sends on (a Ticker's reader) gets its value without a park, a trip
  // through the scheduler and a wake-up. True if this call fired it. The caller is a task
  // on a P of t's runtime (no foreign gate section needed) and holds a reference to t
  // (try_hold), which the call consumes: a periodic firing takes it in place of hold()
  // (two atomics fewer per tick), every other outcome release()s it. t's fire() runs in
  // that task, so it must not park or yield (a chan timer's send does not).
  static bool fire_due(TimerNode* t, std::int64_t now) noexcept;
  // A snapshot: true while t is armed.
  static bool active(const TimerNode* t) noexcept {
    return t->owner.load(std::memory_order_acquire) != nullptr;
  }

  // ---- the M loop's half ---------------------------------------------------------------
  // The earliest deadline (a lower bound after a lazy reset), TimerHeap::kNever if none.
  // relaxed for "is anything here at all?"; seq_cst for the idle wait's half of the pair.
  std::int64_t next(std::memory_order o = std::memory_order_relaxed) const noexcept {
    return earliest_.load(o);
  }
  // Runs the timers due at `now` (0: read the clock, which it does only when the heap is
  // not empty). True if it ran any.
  bool check(std::int64_t now = 0) noexcept;
  // Fires every timer due at `now`, at most kBatch per lock hold.
  void run(std::int64_t now) noexcept;
  // At runtime destruction: every armed node leaves the heap through abandon().
  void drain() noexcept;

 private:
  friend bool sleep_until(TimerNode* t, std::int64_t when);
  static void sleep_commit(void* arg) noexcept;  // sleep_until's park commit

  // Locks the heap t is armed in and returns it, or nullptr if t is inactive.
  static Timers* lock_owner(const TimerNode* t) noexcept CORUN_NO_TSA;
  // Takes armed t, due at `when` (its deadline, read under lock_) by `now`, for firing:
  // claims it by CAS on `when` (false if a push_back moved it since: then it is not
  // taken), moves a periodic t to its next deadline (and hold()s it, unless the caller
  // already holds the firing's reference: `held`) or removes a one-shot t, and counts it
  // late. The caller counts `fired`, publishes, unlocks and fires it.
  bool take_locked(TimerNode* t, std::int64_t when, std::int64_t now, bool held) noexcept
      CORUN_REQUIRES(lock_);
  // Stores heap_'s minimum into earliest_ if it changed; lock_ held. True if the
  // earliest deadline moved earlier (the idle M may need waking).
  bool publish() noexcept CORUN_REQUIRES(lock_);
  // Arms inactive t at `when` here (add's and sleep_until's shared step); true if it is
  // now this heap's earliest. Throws std::bad_alloc, t left inactive.
  bool push_locked(TimerNode* t, std::int64_t when) CORUN_REQUIRES(lock_);

  base::Lock<base::LockRank::timers> lock_;
  TimerHeap heap_ CORUN_GUARDED_BY(lock_);
  // heap_.earliest(), published; written under lock_, read lock-free (see the header).
  std::atomic<std::int64_t> earliest_{TimerHeap::kNever};

 public:
  // Firings of this heap's timers, and how late, in corun::ProcStats::timer_late's
  // buckets (stats.cpp): written by run() under lock_ (a load and a store: the lock
  // serialises the writers), read relaxed by anyone.
  static constexpr int kLateBuckets = 16;
  std::atomic<std::uint64_t> fired{0};
  std::array<std::atomic<std::uint64_t>, kLateBuckets> late{};
  // The timer_late bucket of a firing `late_ns` past its deadline.
  static int late_bucket(std::int64_t late_ns) noexcept {
    if (late_ns < 1000) return 0;
    const int b = std::bit_width(static_cast<std::uint64_t>(late_ns) / 1000);
    return b < kLateBuckets - 1 ? b : kLateBuckets - 1;
  }

  Runtime* rt = nullptr;  // the runtime whose idle M add() wakes; immutable after boot
  // The P whose own heap this is (nullptr: the one global heap); immutable after boot.
  // An arm on a running P's heap wakes the idle waiter only as late as it plans for it.
  P* proc = nullptr;
};

// Sleep: if the caller is a task that may park (sched/park.hpp can_park), arms t at `when`
// in its P's heap and parks it until t fires; t->fire() must ready the task (the one
// current_task() returned). The heap's lock is held into the park and dropped by the park
// commit, so no firer can ready a task that is not parked yet. False, with nothing done,
// when the caller cannot park: it waits some other way. Throws std::bad_alloc if the heap
// cannot grow (nothing armed).
bool sleep_until(TimerNode* t, std::int64_t when);

// Every heap of one runtime, for the M loop: the P's own (CORUN_TIMERS=per-p), or the one
// global heap (=global). Immutable after boot.
class TimerSet {
 public:
  void add_heap(Timers* t) { heaps_.push_back(t); }
  std::size_t size() const noexcept { return heaps_.size(); }
  // The earliest deadline of all heaps, kNever if none. seq_cst loads: the idle wait's
  // half of the store-buffering pair (see the header).
  std::int64_t next() const noexcept;
  // Runs the due timers of every heap at `now` (0: read the clock, once, only if some heap
  // has a timer); true if any heap was due.
  bool run_due(std::int64_t now = 0) noexcept;
  void drain() noexcept;

 private:
  std::vector<Timers*> heaps_;
};

}  // namespace corun::sched
