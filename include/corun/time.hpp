// corun/time.hpp — sleeping, timers and tickers (API.md "Time"), Go's semantics (time
// package up to Go 1.22: channel timers have capacity 1 and stop() does not drain them).
//
// Every timer lives in the heap of the P whose task armed it (per-P heaps, Go CL 34784);
// a timer's deadline is an absolute CLOCK_MONOTONIC time. Due timers run when their P
// schedules, when an idle thread's precise sleep (an absolute futex wait) ends at the
// earliest deadline, or — if every P is stuck in one long task — from the system monitor.
// Firing never happens before the deadline by Clock.
//
// Timer is a move-only handle holding a reference to the library's timer record; the
// record lives while a handle or its heap holds it, so dropping the handle of an armed
// timer does not stop it (fire-and-forget after_func). stop() and reset() may be called
// from any task on any P, or from a thread that is not the runtime's, concurrently with
// firing: the decision to fire is taken under the heap's lock, so stop() returns true
// exactly when it removed the timer before that decision.
//
// Beyond API.md: a default-constructed (or moved-from) Timer is empty — stop() and
// reset() return false, channel() refers to a nil channel; Timer::active(); Ticker is
// move-only. Durations saturate: now + Duration::max() is "never", without overflow.
// Rejected: std::function in the handle (a second allocation per timer; the library keeps
// fn in the record it allocates anyway); a templated after_func (API.md fixes the
// std::function signature, and one non-template path is what perf shows).
#pragma once

#include <chrono>
#include <functional>
#include <utility>

#include <corun/chan.hpp>

namespace corun {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC
using Duration = std::chrono::nanoseconds;

namespace detail {
struct TimerRec;                           // src/timer/timer.hpp
void timer_release(TimerRec* t) noexcept;  // drops the handle's reference
bool timer_stop(TimerRec* t) noexcept;
bool timer_reset(TimerRec* t, Duration d);
bool timer_active(TimerRec* t) noexcept;
const Chan<Clock::time_point>& timer_channel(TimerRec* t) noexcept;  // the record's
}  // namespace detail

// Blocks the calling task (or thread, outside the runtime) for at least d; d <= 0
// returns at once.
void sleep(Duration d);

class Timer {
 public:
  Timer() noexcept = default;
  Timer(Timer&& o) noexcept : rec_(std::exchange(o.rec_, nullptr)) {}
  Timer& operator=(Timer&& o) noexcept {
    if (this != &o) {
      if (rec_) detail::timer_release(rec_);
      rec_ = std::exchange(o.rec_, nullptr);
    }
    return *this;
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  ~Timer() {
    if (rec_) detail::timer_release(rec_);  // does not stop the timer
  }

  // True if this call stopped the timer before it fired; false if it had already fired,
  // been stopped, or the handle is empty.
  bool stop() noexcept { return rec_ && detail::timer_stop(rec_); }
  // Re-arms the timer to fire d from now (on the caller's P); true if it had been
  // active. A stopped or fired timer can be reset. False on an empty handle.
  bool reset(Duration d) { return rec_ && detail::timer_reset(rec_, d); }
  // Timers from new_timer(): the channel the firing time is sent on (capacity 1), the
  // same object on every call; after_func timers and empty handles: one static nil
  // channel. The reference is good while the record lives — at least as long as this
  // handle, or the handle it is moved to; copy it (Chan c = t.channel();) to keep it
  // longer.
  const Chan<Clock::time_point>& channel() const noexcept {
    return rec_ ? detail::timer_channel(rec_) : detail::nil_chan<Clock::time_point>;
  }
  bool active() const noexcept { return rec_ && detail::timer_active(rec_); }

  explicit Timer(detail::TimerRec* rec) noexcept : rec_(rec) {}  // the library's

 private:
  friend class Ticker;
  detail::TimerRec* rec_ = nullptr;
};

// fn runs in its own task once d has passed (each time the timer fires, after resets).
Timer after_func(Duration d, std::function<void()> fn);
// A timer that sends the time it fired on channel() once d has passed.
Timer new_timer(Duration d);
// new_timer(d).channel(): the timer cannot be stopped; it is freed once it fired.
Chan<Clock::time_point> after(Duration d);

class Ticker {
 public:
  // Sends the time on channel() every period; a tick the reader has not taken yet makes
  // later ticks be dropped (capacity 1). period <= 0 throws std::invalid_argument.
  explicit Ticker(Duration period);
  Ticker(Ticker&& o) noexcept = default;
  Ticker& operator=(Ticker&& o) noexcept {
    if (this != &o) {
      stop();
      t_ = std::move(o.t_);
    }
    return *this;
  }
  ~Ticker() { stop(); }
  void stop() noexcept { t_.stop(); }
  // Stops the ticker and restarts it with the new period, the next tick one period from
  // now. period <= 0 throws std::invalid_argument (and leaves the ticker as it was).
  void reset(Duration period);
  // The same object on every call, good while this Ticker (or the one it is moved to)
  // lives; reset() keeps it.
  const Chan<Clock::time_point>& channel() const noexcept { return t_.channel(); }

 private:
  Timer t_;
};

}  // namespace corun
