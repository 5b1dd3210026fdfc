// sched/idle.cpp — the idle wait (contract and invariants in idle.hpp).
//
// The waiter sleeps on its note with an absolute FUTEX_WAIT_BITSET deadline (the earliest
// timer of every heap) — or, once the runtime has descriptors, blocks in the poller
// (netpoll.hpp: epoll_pwait2 with a nanosecond timeout to that deadline), its wakers
// setting the note and then breaking the poll; tasks the poll readied go to the P it
// takes (M::polled) or, with every P busy, to the global queue; under the runtime threads' timer
// slack (CORUN_TIMERSLACK_NS); it wakes early by a low estimate of how late the kernel wakes
// it (TimerSpin in idle.hpp; CORUN_TIMER_SPIN_NS fixes the amount, CORUN_TIMER_SPIN=off turns
// it off) and spins the rest, so a timer's lateness is the spin's, not the kernel's, for at
// most one spin (<= 200 µs) per sleep: a sparse timer still sleeps, an idle runtime without
// timers sleeps with no deadline. On waking it takes Runtime::lock to tell "handed a P" (startm set
// nextp) from "a timer is due": for due timers it takes its own last P if that is idle (its thread
// is pinned to that P's CPU) and returns, so find_runnable runs them and the tasks they ready; when
// every P is busy it runs them itself, and what they ready goes through the global queue. Rejected:
// running due timers here always, without a P (their tasks would always go through the global queue
// and wait for some P's 61st schedule or idle look).
#include "sched/idle.hpp"

#include <algorithm>
#include <cerrno>

#include "arch/cpu.hpp"
#include "base/probes.hpp"
#include "os/thread.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

namespace {

// Spins (PAUSE, a clock read each) until `until` or the note is set.
void spin_until(M* m, std::int64_t until) noexcept {
  while (!m->park.is_set() && static_cast<std::int64_t>(os::monotonic_ns()) < until)
    arch::cpu_relax();
}

// After a timed sleep for `target`: if it timed out (not woken, the time has come), how
// late the kernel was goes into the estimate.
void note_sleep(M* m, std::int64_t target) noexcept {
  if (m->park.is_set()) return;
  const auto late = static_cast<std::int64_t>(os::monotonic_ns()) - target;
  if (late >= 0) idle_note_late(m->rt, late);
}

// How early this sleep wakes: none while a P spins for the near deadline (it runs it).
std::int64_t early_for(const Runtime* rt) noexcept {
  if (rt->idle.spin.spinner.load(std::memory_order_acquire)) return 0;
  return idle_early_ns(rt);
}

constexpr std::int64_t kShortWaitNs = 10'000;

}  // namespace

std::int64_t idle_early_ns(const Runtime* rt) noexcept {
  if (rt->settings.timer_spin_ns > 0) return static_cast<std::int64_t>(rt->settings.timer_spin_ns);
  if (!rt->settings.timer_spin_auto) return 0;
  return rt->idle.spin.early_ns.load(std::memory_order_relaxed);
}

std::int64_t idle_spin_window_ns(const Runtime* rt) noexcept {
  std::int64_t w = 0;
  if (rt->settings.timer_spin_ns > 0)
    w = static_cast<std::int64_t>(rt->settings.timer_spin_ns);
  else if (rt->settings.timer_spin_auto)
    w = rt->idle.spin.late_ns.load(std::memory_order_relaxed);
  return std::max(w, kShortWaitNs);
}

void idle_note_late(Runtime* rt, std::int64_t late) noexcept {
  auto& spin = rt->idle.spin;
  spin.late_ns.store(TimerSpin::next_late(spin.late_ns.load(std::memory_order_relaxed), late),
                     std::memory_order_relaxed);
  spin.early_ns.store(TimerSpin::next_early(spin.early_ns.load(std::memory_order_relaxed), late),
                      std::memory_order_relaxed);
}

void idle_calibrate(Runtime* rt) noexcept {
  constexpr int kSamples = 7;
  constexpr std::int64_t kAskNs = 20'000;
  std::atomic<std::uint32_t> word{0};  // nobody wakes it: every wait times out
  std::int64_t late[kSamples];
  int n = 0;
  for (; n < kSamples && !rt->stopping.load(std::memory_order_relaxed); n++) {
    const auto target = static_cast<std::int64_t>(os::monotonic_ns()) + kAskNs;
    const timespec ts = os::to_timespec(static_cast<std::uint64_t>(target));
    while (os::futex_wait_until(&word, 0, ts) != ETIMEDOUT) {
    }
    late[n] = static_cast<std::int64_t>(os::monotonic_ns()) - target;
  }
  if (n < kSamples) return;
  std::sort(late, late + n);
  // The 6th of 7 for the envelope, the 3rd for the low estimate: near where the running
  // estimates settle (idle.hpp).
  rt->idle.spin.late_ns.store(std::min(late[n - 2], TimerSpin::kMaxNs), std::memory_order_relaxed);
  rt->idle.spin.early_ns.store(std::min(late[2], TimerSpin::kMaxNs), std::memory_order_relaxed);
}

bool idle_try_become(Runtime* rt, M* m) noexcept {
  M* w = rt->idle.waiter.load(std::memory_order_relaxed);
  // (w == m does not happen: idle_wait returns once m no longer waits, and stopm asks
  // again before m could queue itself in the idle M list.)
  if (w && w != m) return false;
  rt->idle.waiter.store(m, std::memory_order_release);
  m->park.clear();  // under the lock: every waker changes state under it first
  return true;
}

// The waiter's sleep until `until`: in the poller once the runtime has descriptors (its
// wakers break it, idle_wake_waiter), else on its note; if precise, woken idle_early_ns
// before it and spinning the rest, else a plain sleep (a fallback: timers_waiter_next).
// Returns what the poller readied.
Task* idle_block(M* m, std::int64_t until, bool precise) {
  Runtime* rt = m->rt;
  const bool polls = rt->netpoll.inited.load(std::memory_order_acquire);
  if (until == TimerHeap::kNever) {
    if (!polls) {
      m->park.sleep();
      return nullptr;
    }
    if (m->park.is_set()) return nullptr;  // woken already (a waker sets it, then breaks)
    return netpoll(rt, until, &m->park);
  }
  const std::int64_t target = precise ? until - early_for(rt) : until;
  // A target already past (the deadline is nearer than the estimate) makes the wait return
  // at once: that is no sample of the kernel's lateness.
  const bool sampled = target > static_cast<std::int64_t>(os::monotonic_ns());
  if (!polls) {
    if (m->park.sleep_until(static_cast<std::uint64_t>(target))) return nullptr;
  } else {
    if (m->park.is_set()) return nullptr;
    if (Task* l = netpoll(rt, target, &m->park)) return l;
    // The poll returned before its target with nothing readied (events of descriptors no
    // task waits on, EINTR): no timeout, so no spin — the caller polls again. Spinning
    // here to `until` would leave I/O unpolled until then: with every task parked on I/O
    // and sysmon asleep, up to the next deadline (a 120 s connection deadline, in
    // rt.net.scale's 1-P flake), burning a core meanwhile.
    if (static_cast<std::int64_t>(os::monotonic_ns()) < target) return nullptr;
  }
  if (sampled) note_sleep(m, target);
  if (precise) spin_until(m, until);
  return nullptr;
}

void idle_wait(M* m) {
  Runtime* rt = m->rt;
  for (;;) {
    // Publish "asleep with no deadline" first, then scan: an arm after our scan sees
    // kNever and wakes us (the seq_cst pair of idle.hpp).
    rt->idle.until.store(TimerHeap::kNever, std::memory_order_seq_cst);
    // The earliest deadline of an idle P's heap, woken early for and spun for; a running
    // P runs its own (at its schedules, spinning for them when it idles), so its heap is
    // ours only as a backstop, lag after its deadline, slept for (timers_waiter_next). A P
    // that idles meanwhile wakes us (find_runnable) and we plan again.
    bool precise = true;
    const std::int64_t lag = rt->idle.lag_ns.load(std::memory_order_relaxed);
    std::int64_t until = timers_waiter_next(rt, lag, &precise);
    CORUN_PROBE1(timer_watch, until == TimerHeap::kNever ? -1 : until);
    if (until != TimerHeap::kNever) {
      std::int64_t expect = TimerHeap::kNever;
      // Fails only if an armer already claimed the wake-up (our note is set).
      rt->idle.until.compare_exchange_strong(expect, until, std::memory_order_seq_cst);
    }
    Task* polled = idle_block(m, until, precise);
    std::int64_t now = 0;
    bool due = false;
    {
      base::Guard g(rt->lock);
      if (rt->idle.waiter.load(std::memory_order_relaxed) != m ||
          rt->stopping.load(std::memory_order_acquire)) {
        // startm handed us a P (the polled tasks run on it first), or shutdown.
        if (polled) {
          Task* last = polled;
          while (last->next) last = last->next;
          last->next = m->polled;
          m->polled = polled;
        }
        return;
      }
      m->park.clear();  // under the lock: startm cannot be handing us a P meanwhile
      now = static_cast<std::int64_t>(os::monotonic_ns());
      due = timers_idle_next(rt) <= now;
      // A backstop wake-up (a running P's deadline + lag) that slept its full time: was it
      // needed (IdleWait::next_lag)? One woken early, or by I/O, tells nothing.
      if (!precise && until != TimerHeap::kNever && now >= until && !polled)
        rt->idle.lag_ns.store(IdleWait::next_lag(lag, due), std::memory_order_relaxed);
      if (!due && !polled) continue;  // woken by an arm, or early: scan again
      // Our own P again if it is idle: this thread is pinned to its CPU.
      if (P* p = pidleget(rt, m->lastp)) {
        // Leave the wait vacant until an M idles next (stopm): see idle.hpp, Rejected.
        // Meanwhile running Ps look at every heap at their 61st schedule and before
        // idling, and sysmon runs overdue timers while nobody waits.
        rt->idle.waiter.store(nullptr, std::memory_order_relaxed);
        rt->idle.until.store(IdleWait::kNone, std::memory_order_seq_cst);
        m->nextp = p;
        m->polled = polled;
        return;
      }
    }
    // Every P is busy: what the poller readied goes to the global queue, and due timers
    // run here (what they ready goes there too).
    if (polled) inject_list(rt, polled);
    if (due) run_due_timers(rt, nullptr, now);
  }
}

M* idle_take(Runtime* rt) noexcept {
  M* m = rt->idle.waiter.load(std::memory_order_relaxed);
  if (m) {
    rt->idle.waiter.store(nullptr, std::memory_order_relaxed);
    rt->idle.until.store(IdleWait::kNone, std::memory_order_seq_cst);
  }
  return m;
}

void idle_stop(Runtime* rt) noexcept {
  if (M* w = rt->idle.waiter.load(std::memory_order_relaxed)) {
    rt->idle.waiter.store(nullptr, std::memory_order_relaxed);
    w->nextp = nullptr;
    w->park.wakeup();
    netpoll_break(rt);
  }
}

bool idle_has_waiter(const Runtime* rt) noexcept {
  return rt->idle.waiter.load(std::memory_order_relaxed) != nullptr;
}

void idle_wake(Runtime* rt, std::int64_t when, bool start_idle) noexcept {
  // seq_cst load: after our seq_cst store of the heap's earliest (idle.hpp).
  std::int64_t w = rt->idle.until.load(std::memory_order_seq_cst);
  if (w == IdleWait::kNone) {
    if (!start_idle) return;
    // Nobody asleep. If nobody waits at all while a P idles and the armer holds no
    // running P (a foreign thread, or a task in blocking()), start an M: it finds nothing
    // to run, idles, and becomes the waiter. An armer on a running P needs none: its P
    // runs its own timers, and its M becomes the waiter if it idles.
    M* m = current_m();
    if ((!m || !m->p) && !rt->idle.waiter.load(std::memory_order_acquire) &&
        rt->npidle.load(std::memory_order_relaxed) > 0)
      wakep(rt);
    return;
  }
  while (when < w) {
    if (rt->idle.until.compare_exchange_weak(w, IdleWait::kNone, std::memory_order_seq_cst)) {
      // acquire: the M record is fully set up (it is never freed before the runtime).
      if (M* m = rt->idle.waiter.load(std::memory_order_acquire)) {
        m->park.wakeup();
        netpoll_break(rt);  // if it blocks in the poller
      }
      return;
    }
  }
}

void idle_wake_heap(const Timers* h, std::int64_t when) noexcept {
  Runtime* rt = h->rt;
  // seq_cst: after the heap's seq_cst earliest store, as timers_waiter_next reads the
  // status after its store of `until`; a P idling after this load wakes the waiter itself.
  if (h->proc && h->proc->status.load(std::memory_order_seq_cst) == PStatus::running) {
    const std::int64_t lag = rt->idle.lag_ns.load(std::memory_order_relaxed);
    when = when > TimerHeap::kNever - lag ? TimerHeap::kNever : when + lag;
  }
  idle_wake(rt, when);
}

namespace {

// Spins (PAUSE, a clock read each) holding p until `e`, re-reading `next()` every kRescan
// turns (a deadline may have come nearer), or until work shows up in p's queue or the
// global queue, or the runtime stops.
template <class Next>
void spin_for(Runtime* rt, P* p, std::int64_t e, Next next) noexcept {
  constexpr unsigned kRescan = 8;
  for (unsigned n = 1; static_cast<std::int64_t>(os::monotonic_ns()) < e; n++) {
    arch::cpu_relax();  // one PAUSE per clock read: the wait is short
    if (!p->runq.empty_hint() || !rt->runq.empty_hint() ||
        rt->stopping.load(std::memory_order_relaxed))
      return;
    if (n % kRescan == 0) e = std::min(e, next());
  }
}

}  // namespace

bool idle_spin_short(Runtime* rt, P* p, std::int64_t now) noexcept {
  // Nearer than a sleep can honour (a futex wake-up comes 10-45 µs late in a VM even with
  // 1 ns slack, and costs ~5 µs of syscalls): wait here, holding the P, as Go's spinning
  // Ms do.
  const std::int64_t window = idle_spin_window_ns(rt);
  // Our own heap's timer: ours to spin for, beside any spinner (each P for its own). While
  // we hold the P it counts as running, so the others leave that heap to us: no spinner
  // spins for it, and the waiter plans only its late backstop (timers_waiter_next).
  if (p->timers == &p->own_timers) {
    const std::int64_t own = p->timers->next();
    if (own != TimerHeap::kNever && own - now <= window) {
      spin_for(rt, p, own, [p] { return p->timers->next(); });
      return true;
    }
  }
  // The first moment another heap's timer is ours (timers_spin_next: an idle P's at its
  // deadline, a running P's once kOwnerLagNs overdue), if no other M spins for one.
  const std::int64_t e = timers_spin_next(rt, p);
  if (e == TimerHeap::kNever || e - now > window) return false;
  auto& spinner = rt->idle.spin.spinner;
  // One spinner: the others idle, and the waiter among them sleeps to the deadline.
  if (spinner.load(std::memory_order_relaxed) || spinner.exchange(true, std::memory_order_acquire))
    return false;
  // Re-read every heap as we spin: a P that idles meanwhile leaves its timers to us. On 2 x
  // 64 cores that is 128 lines per rescan, by one M at a time.
  spin_for(rt, p, e, [rt, p] { return timers_spin_next(rt, p); });
  spinner.store(false, std::memory_order_release);
  return true;
}

}  // namespace corun::sched
