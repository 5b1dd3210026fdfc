// timer/timer.hpp — the timer record behind corun::Timer, Ticker and after(), and the
// deadline clock every timer of this layer computes its deadline with.
//
// A record is a sched::TimerNode (sched/timers.hpp): the scheduler keeps it in a P's heap
// and calls fire() when it is due; this layer says what firing does. States, and who owns
// what in each (Go's timer status comments):
//   inactive  owner == nullptr: never armed, stopped, or taken for firing. Only a holder
//             of `mu` may arm it (Timers::add).
//   armed     in a heap (owner): its when/index are that heap's. Whoever runs the heap may
//             take it for firing (the decision is taken under the heap's lock, by CAS on
//             `when`, and is final); holders of `mu` may remove or move it
//             (Timers::remove/modify); anyone may push its deadline later without mu or
//             the heap's lock (Timers::push_back, one CAS: Timer::reset's and a same-period
//             Ticker::reset's fast path).
// So stop() — mu, then the heap's lock inside Timers::remove — returns true exactly when it
// removed the record before a firer took it, and a reset returns true exactly when its
// deadline replaced one no firer had taken. A periodic record (Ticker) stays armed: the
// firer moves it to its next deadline under the heap's lock and fires a copy of the moment.
// Sends of a chan record are in order: the firer sends max(the moment the firing was
// decided, the last value sent) under send_mu, so the values a reader receives never
// decrease, each is at or after its deadline (API.md: deadline <= value <= receipt), and
// the n-th of a Ticker's is at least n periods after it was armed. Firings are taken
// under the heap's lock but sent after it (fire runs unlocked), so without send_mu a firer
// delayed between the two (preempted: 4 Ps on 2 cores did it within seconds) could send
// tick k after another had sent tick k+1, a value up to a period "early" for its place
// (rt.timer AfterStress caught it). Rejected: reading the clock again at the send (the
// firing decision read it just before; a second read was 11% of a Ticker tick).
// Lifetime: `refs` counts the handle (Timer), the heap (one while armed), a firer in
// flight and a receiver firing it early (sync/chan_timer.hpp: a chan record is bound to
// its channel, whose receive fires a due timer instead of parking); the last release
// unbinds the channel, then deletes. corun::sleep uses its own node on the task's stack
// (sleep.cpp), not a record.
// Rejected: Go's whole lock-free status machine (timerModifying, timerMoving, …): only
// its timerModifiedLater case is kept (push_back), because there the two uncontended
// locks were the cost (a reset took 37 ns, a push-back 26, of which ~10 are the counter
// read); stop, arming and earlier resets keep the locks, which make their races easy to
// state and check.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include <corun/time.hpp>

#include "base/lock.hpp"
#include "sched/timers.hpp"
#include "timer/clock.hpp"

namespace corun::detail {

enum class TimerKind : std::uint8_t {
  func,  // after_func: run `fn` in a new task
  chan,  // new_timer/after/Ticker: send the firing time on `ch` without blocking
  call,  // after_call (the library's own): run `fn` on the firing thread itself
};

struct TimerRec final : sched::TimerNode {
  TimerKind kind = TimerKind::func;
  std::atomic<std::uint32_t> refs{1};                    // acq_rel decrement, see lifetime above
  base::Lock<base::LockRank::timer_rec> mu;              // arm/stop/reset of this record
  std::function<void()> fn;                              // func, call: immutable after creation
  Chan<Clock::time_point> ch{nullptr};                   // chan: immutable after creation;
                                                         // Timer::channel() hands out &ch
  base::Lock<base::LockRank::timer_send> send_mu;        // chan: a firer's send, in order
  std::int64_t last_sent CORUN_GUARDED_BY(send_mu) = 0;  // chan: the latest value sent

  void fire(std::int64_t now) noexcept override;  // timer.cpp
  void hold() noexcept override {                 // a periodic firing's own reference
    refs.fetch_add(1, std::memory_order_relaxed);
  }
  void abandon() noexcept override;  // drops the heap's reference
  // A receiver's reference (sync/chan_timer.hpp): taken only while refs > 0, as a
  // weak_ptr::lock. relaxed: the channel's lock, held by the caller, keeps the memory
  // valid; what it then reads of the record has its own orders.
  bool try_hold() noexcept override {
    std::uint32_t r = refs.load(std::memory_order_relaxed);
    do {
      if (r == 0) return false;  // being destroyed: it waits for the caller's lock
    } while (!refs.compare_exchange_weak(r, r + 1, std::memory_order_relaxed));
    return true;
  }
  void release() noexcept override;
};

// after_func for the library's own callbacks: `fn` runs on the thread that fires the timer
// — a P's M between tasks, the idle M or sysmon, with no lock held, not in a task — or, for
// d <= 0, in the caller. So it must not block, park, throw or run user code; it may take
// spin locks, close channels and ready tasks (as a chan timer's send does). No task is
// made: nothing is left queued (and abandoned, leaking what fn holds) when a run ends
// just after the firing. Context deadlines use it (context.cpp).
Timer after_call(Duration d, std::function<void()> fn);

}  // namespace corun::detail
