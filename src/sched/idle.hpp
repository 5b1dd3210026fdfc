// sched/idle.hpp — the idle wait: the one place an idle runtime sleeps until something
// is due (Go's findRunnable ending in netpoll(delay) with the timer deadline as delay).
//
// When an M finds no work and no other M waits idle, it becomes the waiter: it sleeps
// until the earliest timer deadline of every P (and, once the runtime has descriptors,
// until I/O is ready — in this same wait, epoll_pwait2 with that deadline), runs what came due,
// with an idle P if there is one, and goes back to sleep. Every other idle M sleeps on
// its note without a deadline. So an idle runtime makes no wake-ups but the ones its
// timers ask for, and one timer wakes one thread, not every idle one.
//
// Who touches what:
//   IdleWait::waiter  the waiting M, at most one, never in the idle M list. Written under
//                     Runtime::lock (idle_try_become, idle_take, idle_stop, and the waiter
//                     leaving); read lock-free by idle_wake (acquire; the M record is never
//                     freed before the runtime).
//   IdleWait::until   the deadline the waiter sleeps until: kNone when nobody sleeps (or
//                     it was already woken), TimerHeap::kNever without a deadline. seq_cst:
//                     with the heaps' `earliest` stores it forms a store-buffering pair
//                     (timers.hpp): the waiter stores `until` then scans the heaps, an
//                     armer stores its heap's earliest then loads `until`; one of them sees
//                     the other, so a new earliest timer never sleeps unseen.
// Rejected: every idle M sleeping until the earliest deadline (a thundering herd on 128
// cores for one timer); a dedicated timer thread (Go before 1.14: one more thread hop
// before the woken task runs); handing the wait to another idle M whenever the waiter
// takes a P (a futex wake before the woken task can run, several futex calls per sleep
// where leaving the wait vacant until an M idles next costs about one).
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>

#include "base/tsa.hpp"

namespace corun::sched {

struct M;
struct P;
struct Runtime;

// How late the kernel wakes the idle waiter (CORUN_TIMER_SPIN=auto): an estimate learned
// from the runtime's own timed sleeps, so that a deadline nearer than it is spun for and a
// farther one is slept for until that much before it, then spun for.
//   late_ns   ns; an upper envelope of recent oversleeps (rises by 1/4 of a larger sample,
//             falls by 1/32 of a smaller one: a fraction of the wake-ups still land late,
//             but not half of them, as a mean would leave). Written by sysmon's start-up
//             calibration and then by the waiter after each sleep that timed out (one
//             waiter at a time; a lost update between the two is harmless); read by any
//             P. Relaxed: a hint that orders nothing.
//   spinner   true while one P spins for a near deadline of another P's heap
//             (idle_spin_short) — one at a time, the others idle (on 128 cores, 127 Ps
//             spinning for one timer would burn 127 cores for it); the waiter then sleeps
//             to the deadline without spinning. A P whose own heap has the near deadline
//             spins for it without the flag: it is that timer's owner, one P per timer.
//             It says so in P::own_spin, and the rest leave that deadline to it: no
//             spinner claims it, and the waiter sleeps past it by kOwnerLagNs without
//             waking early or spinning, as the fallback for an owner that stops early
//             (it then wakes the waiter) or runs a long task after (timers_waiter_next).
//             Before, a single sleeper at 2 Ps had both Ps spinning for its deadline:
//             TimerLateness/Sleep1=50us/idle-2 used 167% CPU, now 53% (n=10, p=0.000).
//             acquire/release on the claim/release pair, though it guards no data: the
//             order only keeps the hint fresh.
// Rejected: a fixed spin (CORUN_TIMER_SPIN_NS, still accepted): 10-45 µs wake-ups in a
// VM, 2-5 µs on bare metal — no constant suits both; the mean oversleep (half the wake-ups
// late); calibrating only at start (the host's load changes).
struct TimerSpin {
  static constexpr std::int64_t kInitialNs = 10'000;  // until calibrated
  static constexpr std::int64_t kMaxNs = 200'000;     // never spin longer per wait
  std::atomic<std::int64_t> late_ns{kInitialNs};
  std::atomic<bool> spinner{false};
  // The estimate after one more observed oversleep `late` (pure).
  static constexpr std::int64_t next(std::int64_t e, std::int64_t late) noexcept {
    if (late > kMaxNs) late = kMaxNs;  // a preempted vCPU is no sample
    if (late < 0) late = 0;
    return e + (late > e ? (late - e) / 4 : (late - e) / 32);
  }
};

struct IdleWait {
  static constexpr std::int64_t kNone = INT64_MIN;
  std::atomic<M*> waiter{nullptr};
  std::atomic<std::int64_t> until{kNone};
  TimerSpin spin;
};

// Under Runtime::lock: if nobody waits, m becomes the waiter (its note cleared) and the
// caller, once it has dropped the lock, calls idle_wait(m). False if another M waits.
bool idle_try_become(Runtime* rt, M* m) noexcept;
// The waiter's loop (lock not held). Returns when it is no longer the waiter: startm
// handed it a P (m->nextp), it took an idle P to run due timers (m->nextp), or shutdown.
void idle_wait(M* m);
// Under Runtime::lock: takes the waiter for startm (used when no other M idles); nullptr
// if there is none.
M* idle_take(Runtime* rt) noexcept;
// Under Runtime::lock, at shutdown: wakes the waiter, which then leaves.
void idle_stop(Runtime* rt) noexcept;
// True if some M waits idle (relaxed: a hint for who else must look at timers).
bool idle_has_waiter(const Runtime* rt) noexcept;

// A heap's earliest deadline just became `when` (called after its lock is dropped): wakes
// the waiter if it sleeps past it. With no waiter and a P idle, an armer that holds no
// running P (a foreign thread, a task in blocking()) starts an M, which idles and waits.
// start_idle = false: only the sleeping waiter is woken (the caller, about to idle, would
// become the waiter itself).
void idle_wake(Runtime* rt, std::int64_t when, bool start_idle = true) noexcept;

// Before idling P p at `now`: if a timer is due within the spin window (max(10 µs,
// idle_early_ns)) — closer than a sleep can honour — spins for it (PAUSE, clock-checked),
// leaving early if work shows up in p's queue or the global queue: for p's own earliest
// always, for another P's only if no other P spins for one nor its owner for it. True if
// it spun (the caller looks again). Rejected: one spinner for own timers too — two Ps
// idling between dense timers of their own then took turns sleeping in the kernel and
// waking another M for them (AfterFunc=50us/idle-2's p50 was 4x Go's).
bool idle_spin_short(Runtime* rt, P* p, std::int64_t now) noexcept;

// How early a timed idle sleep wakes to spin for its deadline: CORUN_TIMER_SPIN_NS if set,
// else the measured wake-up lateness (auto), else 0 (off).
std::int64_t idle_early_ns(const Runtime* rt) noexcept;
// Folds one observed oversleep (ns past the wake time asked for) into the estimate.
void idle_note_late(Runtime* rt, std::int64_t late_ns) noexcept;
// sysmon's start: a few short timed futex sleeps of its own set the first estimate, so
// the first timers need not wait for the waiter to learn it. Returns early at shutdown.
void idle_calibrate(Runtime* rt) noexcept;

}  // namespace corun::sched
