// sched/note.hpp — a one-shot sleep/wake-up event on a futex (Go's note).
//
// One thread sleeps on it, any thread wakes it; clear() re-arms it and must not race
// with either. A wakeup that comes before the sleep is not lost: the sleeper sees the
// key already set. Used to park idle Ms and the sysmon thread.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "os/futex.hpp"
#include "os/thread.hpp"

namespace corun::sched {

class Note {
 public:
  void clear() noexcept { key_.store(0, std::memory_order_relaxed); }

  // release: the sleeper, which load-acquires the key, sees everything the waker wrote
  // before waking it (for example the P it hands over in M::nextp).
  void wakeup() noexcept {
    if (key_.exchange(1, std::memory_order_release) == 0) os::futex_wake(&key_, 1);
  }

  void sleep() noexcept {
    while (key_.load(std::memory_order_acquire) == 0) os::futex_wait(&key_, 0);
  }

  // Sleeps until woken or until the absolute monotonic time deadline_ns; true if woken.
  bool sleep_until(std::uint64_t deadline_ns) noexcept {
    timespec ts = os::to_timespec(deadline_ns);
    while (key_.load(std::memory_order_acquire) == 0) {
      if (os::futex_wait_until(&key_, 0, ts) == ETIMEDOUT)
        return key_.load(std::memory_order_acquire) != 0;
    }
    return true;
  }

  bool is_set() const noexcept { return key_.load(std::memory_order_acquire) != 0; }

 private:
  std::atomic<std::uint32_t> key_{0};  // 0 armed, 1 woken
};

}  // namespace corun::sched
