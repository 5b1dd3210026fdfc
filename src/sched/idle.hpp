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

// How late the kernel wakes the idle waiter (CORUN_TIMER_SPIN=auto): two estimates learned
// from the runtime's own timed sleeps (each sample feeds both). A deadline nearer than
// late_ns is spun for (a sleep would likely miss it); a farther one is slept for until
// early_ns before it, then spun for.
//   late_ns   ns; an upper envelope of recent oversleeps (rises by 1/4 of a larger sample,
//             falls by 1/32 of a smaller one: about the 0.89 expectile): how late a sleep
//             may come, so the spin window (idle_spin_window_ns).
//   early_ns  ns; a low expectile of the same samples (rises by 1/16, falls by 1/4: about
//             the 0.2 expectile): how early a sleep wakes (idle_early_ns). A wake-up before
//             it is spun away, one after it leaves the timer late by the difference; each
//             ns of it is a ns of CPU on most waits, so it sits low in the spread.
//             Both written by sysmon's start-up calibration and then by the waiter after
//             each sleep that timed out (one waiter at a time; a lost update between the
//             two is harmless); read by any P. Relaxed: hints that order nothing.
//   spinner   true while one P spins for a near deadline of another P's heap
//             (idle_spin_short) — one at a time, the others idle (on 128 cores, 127 Ps
//             spinning for one timer would burn 127 cores for it); the waiter then sleeps
//             to the deadline without spinning. A P whose own heap has the near deadline
//             spins for it without the flag: it is that timer's owner, one P per timer.
//             While it spins it holds its P, which counts as running, so the rest leave
//             that heap to it: a spinner takes it only kOwnerLagNs overdue
//             (timers_spin_next), and the waiter plans only its backstop (lag_ns below).
//             acquire/release on the claim/release pair, though it guards no data: the
//             order only keeps the hint fresh.
// Rejected: a fixed spin (CORUN_TIMER_SPIN_NS, still accepted): 10-45 µs wake-ups in a
// VM, 2-5 µs on bare metal — no constant suits both; calibrating only at start (the
// host's load changes); one estimate for both uses. The envelope alone (until 2026-12-07)
// woke every sleep that early: p50 ~0.6 µs for 1 ms sleeps instead of ~1.1 µs, but 25-45%
// more CPU per sleep (Sleep1=1ms/idle 31 vs 23 µs an op at 1 P, 37 vs 20 at 2 Ps; a bare
// futex wait costs ~24 µs here). The low expectile alone also shrank the spin window, so a
// P slept through the gaps between dense timers and woke 20-40 µs late:
// AfterFunc=50us/idle-2 p50 0.5 -> 8.2 µs (perf/RESULTS.md).
struct TimerSpin {
  static constexpr std::int64_t kInitialNs = 10'000;  // until calibrated
  static constexpr std::int64_t kMaxNs = 200'000;     // never spin longer per wait
  std::atomic<std::int64_t> late_ns{kInitialNs};
  std::atomic<std::int64_t> early_ns{kInitialNs};
  std::atomic<bool> spinner{false};
  // An estimate after one more observed oversleep `late` (pure): it moves 1/up of the way
  // toward a larger sample, 1/down toward a smaller one.
  template <std::int64_t up, std::int64_t down>
  static constexpr std::int64_t step(std::int64_t e, std::int64_t late) noexcept {
    if (late > kMaxNs) late = kMaxNs;  // a preempted vCPU is no sample
    if (late < 0) late = 0;
    return e + (late > e ? (late - e) / up : (late - e) / down);
  }
  static constexpr std::int64_t next_late(std::int64_t e, std::int64_t late) noexcept {
    return step<4, 32>(e, late);
  }
  static constexpr std::int64_t next_early(std::int64_t e, std::int64_t late) noexcept {
    return step<16, 4>(e, late);
  }
};

// The waiter's backstop for running Ps' timers (lag_ns): it sleeps until a running P's
// earliest deadline + lag_ns, in case that P is stuck in one long task; a running P runs
// its own timers, so mostly it has when the waiter wakes, and that wake-up was wasted.
// Each wasted one doubles the lag (up to kMaxLagNs, Go's netpoll granularity), each one
// that finds a timer overdue sets it back to kOwnerLagNs (sched.hpp). So dense timers on a
// running P cost the waiter ~1 wake-up per ms, not one per deadline (TimerLateness/
// Sleep1=1us/idle-2: 196% CPU before, the waiter waking ~80000 times a second), and a P
// that does get stuck is backstopped within kMaxLagNs, then kOwnerLagNs again.
// Written only by the waiter (one at a time), read by armers (idle_wake_heap); relaxed:
// a hint, a stale value only moves one wake-up.
struct IdleWait {
  static constexpr std::int64_t kNone = INT64_MIN;
  static constexpr std::int64_t kMinLagNs = 20'000;  // == kOwnerLagNs
  static constexpr std::int64_t kMaxLagNs = 1'000'000;
  std::atomic<M*> waiter{nullptr};
  std::atomic<std::int64_t> until{kNone};
  std::atomic<std::int64_t> lag_ns{kMinLagNs};
  TimerSpin spin;
  // The lag after a fallback wake-up that found a timer overdue (`useful`) or none (pure).
  static constexpr std::int64_t next_lag(std::int64_t lag, bool useful) noexcept {
    if (useful) return kMinLagNs;
    return lag >= kMaxLagNs / 2 ? kMaxLagNs : 2 * lag;
  }
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
// idle_wake for heap h's new earliest deadline `when`, as the waiter plans it
// (timers_waiter_next): + IdleWait::lag_ns if h's P runs (it runs its own timers; an arm
// on a busy P wakes nobody), else at `when`.
class Timers;
void idle_wake_heap(const Timers* h, std::int64_t when) noexcept;

// Before idling P p at `now`: if a timer is due within the spin window
// (idle_spin_window_ns) — closer than a sleep can honour — spins for it (PAUSE, clock-checked,
// the deadline re-read every few turns), leaving early if work shows up in p's queue or
// the global queue: for p's own earliest always, for another heap's (timers_spin_next)
// only if no other M spins for one. True if it spun (the caller looks again). Rejected:
// one spinner for own timers too — two Ps idling between dense timers of their own then
// took turns sleeping in the kernel and waking another M for them (AfterFunc=50us/idle-2's
// p50 was 4x Go's). Tried again on 2026-12-07 with the spinner re-reading every heap, so
// a P that idled left its timers to it: 115-180% CPU instead of ~196% for
// AfterFunc=50us/idle-2, but the tasks its timers readied woke the other P, which stole
// them (40-70k steals/s), and p50 went from 0.3-0.4 to 1.4-1.6 µs (RESULTS).
bool idle_spin_short(Runtime* rt, P* p, std::int64_t now) noexcept;

// How early a timed idle sleep wakes to spin for its deadline: CORUN_TIMER_SPIN_NS if set,
// else TimerSpin::early_ns (auto), else 0 (off).
std::int64_t idle_early_ns(const Runtime* rt) noexcept;
// How near a deadline is spun for rather than slept for (idle_spin_short): at least
// kShortWaitNs (10 µs); CORUN_TIMER_SPIN_NS if larger, else TimerSpin::late_ns (auto).
std::int64_t idle_spin_window_ns(const Runtime* rt) noexcept;
// Folds one observed oversleep (ns past the wake time asked for) into both estimates.
void idle_note_late(Runtime* rt, std::int64_t late_ns) noexcept;
// sysmon's start: a few short timed futex sleeps of its own set the first estimate, so
// the first timers need not wait for the waiter to learn it. Returns early at shutdown.
void idle_calibrate(Runtime* rt) noexcept;

}  // namespace corun::sched
