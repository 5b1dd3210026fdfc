// os/thread.hpp — per-thread OS settings the runtime applies to its own threads:
// timer slack (prctl PR_SET_TIMERSLACK), thread names (for perf and top -H), and the
// monotonic clock in nanoseconds.
//
// Timer slack: Linux lets every timed sleep of a thread expire up to `slack` late so
// wake-ups can be batched; the default is 50 µs, which dwarfs a 3 µs backoff or a 10 µs
// timer. The runtime sets CORUN_TIMERSLACK_NS (default 1 µs) on the threads it creates
// and never on the caller's thread.
#pragma once

#include <cstdint>
#include <ctime>

namespace corun::os {

// Returns 0 or errno.
int set_timer_slack_ns(std::uint64_t ns) noexcept;
std::uint64_t timer_slack_ns() noexcept;          // the calling thread's current slack
void set_thread_name(const char* name) noexcept;  // truncated to 15 characters

inline std::uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

inline timespec to_timespec(std::uint64_t ns) noexcept {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000u);
  ts.tv_nsec = static_cast<long>(ns % 1000000000u);
  return ts;
}

}  // namespace corun::os
