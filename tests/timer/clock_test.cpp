// tests/timer/clock_test.cpp — the deadline clock (timer/clock.cpp): extrapolated
// from the cycle counter, it must never be below CLOCK_MONOTONIC (a deadline computed
// from it would fire early) and stays within a small bound above it.
#include <doctest/doctest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "os/thread.hpp"
#include "timer/timer.hpp"

TEST_SUITE("unit.timer.clock") {
  TEST_CASE("deadline_after(0) is never below the clock read before it, on several threads") {
    auto check = [](int n, std::int64_t* below, std::int64_t* worst_above) {
      for (int i = 0; i < n; i++) {
        auto t0 = static_cast<std::int64_t>(corun::os::monotonic_ns());
        std::int64_t x = corun::detail::deadline_after(corun::Duration(0));
        auto t1 = static_cast<std::int64_t>(corun::os::monotonic_ns());
        if (x < t0) (*below)++;
        if (x - t1 > *worst_above) *worst_above = x - t1;
        if (i % 1000 == 0) std::this_thread::yield();  // migrate now and then
      }
    };
    std::vector<std::int64_t> below(4, 0), above(4, 0);
    std::vector<std::thread> ts;
    for (int k = 0; k < 4; k++) ts.emplace_back(check, 300000, &below[k], &above[k]);
    for (auto& t : ts) t.join();
    for (int k = 0; k < 4; k++) {
      CHECK(below[k] == 0);
      CHECK(above[k] < 10'000);  // generous: at most ~1.1 us by design (clock.cpp)
    }
  }

  TEST_CASE("deadline_after saturates and clamps") {
    auto t0 = static_cast<std::int64_t>(corun::os::monotonic_ns());
    CHECK(corun::detail::deadline_after(corun::Duration::max()) == corun::sched::TimerHeap::kNever);
    CHECK(corun::detail::deadline_after(corun::Duration::min()) >= t0);
    CHECK(corun::detail::deadline_after(corun::Duration(-1)) >= t0);
    CHECK(corun::detail::deadline_after(std::chrono::seconds(1)) >= t0 + 1'000'000'000);
  }
}
