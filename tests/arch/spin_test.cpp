// tests/arch/spin_test.cpp — arch/cpu.hpp and arch/spin.hpp.
//
// Timing bounds are one-sided where it matters (a spin lasts at least what was asked) and
// generous on the other side (1 s), so a loaded machine or a sanitizer build cannot make them
// flaky. The calibration results (counter rate, cost of one cpu_relax) are printed for the
// record: they drive the runnext backoff.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "arch/cpu.hpp"
#include "arch/spin.hpp"

namespace arch = corun::arch;
using Clock = std::chrono::steady_clock;

namespace {
std::int64_t elapsed_ns(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count();
}
}  // namespace

TEST_SUITE("unit.arch") {
  TEST_CASE("spin: concurrent first use sees one calibration") {
    // First in this file so that, run alone, the threads race to calibrate. If another suite
    // calibrated already, it still checks that concurrent readers agree (and TSan sees the
    // publication as ordered).
    std::vector<double> seen(4, 0.0);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < seen.size(); ++i) {
      threads.emplace_back([&seen, i] {
        arch::calibrate();
        seen[i] = arch::cycles_per_ns();
      });
    }
    for (auto& t : threads) t.join();
    CHECK(seen[0] > 0.0);  // calibrated (all-zero "agreement" would pass the loop below)
    for (double s : seen) CHECK(s == seen[0]);
  }

  TEST_CASE("spin: calibration is sane, idempotent and reported") {
    arch::calibrate();
    const double rate = arch::cycles_per_ns();
    arch::calibrate();  // idempotent: same numbers
    CHECK(arch::cycles_per_ns() == rate);
    CHECK(rate > 0.001);
    CHECK(rate < 100.0);
    CHECK(arch::pause_cost_ns() >= 1);
    CHECK(arch::pause_cost_ps() >= 1);
    CHECK(arch::pause_cost_ns() < 100'000);  // < 100 µs per pause would be absurd
    CHECK(arch::counter_step() >= 1);
    CHECK(arch::counter_step_ns() < 100'000.0);  // qemu-user's counter: 1 µs
    const std::string source = arch::cycle_counter_usable() ? "cycle counter" : "CLOCK_MONOTONIC";
    MESSAGE("spin clock: " << source << ", " << rate << " ticks/ns; one cpu_relax() = "
                           << static_cast<double>(arch::pause_cost_ps()) / 1000.0 << " ns ("
                           << static_cast<double>(arch::pause_cost_ps()) / 1000.0 * rate
                           << " ticks); counter step " << arch::counter_step() << " ticks ("
                           << arch::counter_step_ns() << " ns)");
  }

  TEST_CASE("spin: cycles() is monotonic over many reads") {
    std::uint64_t prev = arch::cycles();
    int backwards = 0;
    for (int i = 0; i < 200'000; ++i) {
      const std::uint64_t now = arch::cycles();
      backwards += now < prev;
      prev = now;
    }
    CHECK(backwards == 0);
    const std::uint64_t a = arch::cycles();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(arch::cycles() > a);
  }

  TEST_CASE("spin: ns_to_cycles") {
    CHECK(arch::ns_to_cycles(0) == 0);
    CHECK(arch::ns_to_cycles(1000) <= arch::ns_to_cycles(2000));
    CHECK(arch::ns_to_cycles(1'000'000) >= 1'000'000 * arch::cycles_per_ns() - 1);
    CHECK(arch::ns_to_cycles(~std::uint64_t{0}) >= arch::ns_to_cycles(~std::uint64_t{0} / 2));
  }

  TEST_CASE("spin: spin_for_ns lasts at least the time asked") {
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      arch::spin_for_ns(100'000);
      const std::int64_t ns = elapsed_ns(t0);
      CHECK(ns >= 100'000);
      CHECK(ns < 1'000'000'000);
    }
    const auto t0 = Clock::now();
    arch::spin_for_ns(0);
    CHECK(elapsed_ns(t0) < 1'000'000'000);
  }

  TEST_CASE("spin: spin_until returns true soon after another thread sets the flag") {
    std::atomic<bool> flag{false};
    std::thread setter([&flag] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      flag.store(true, std::memory_order_release);  // release: pairs with the acquire below
    });
    const auto t0 = Clock::now();
    const bool ok = arch::spin_until([&] { return flag.load(std::memory_order_acquire); },
                                     5'000'000'000ull);  // 5 s budget; must end far sooner
    const std::int64_t ns = elapsed_ns(t0);
    setter.join();
    CHECK(ok);
    CHECK(ns < 1'000'000'000);
  }

  TEST_CASE("spin: spin_until is immediate when already true, false on timeout") {
    int calls = 0;
    CHECK(arch::spin_until([&] { return ++calls > 0; }, 1'000'000'000ull));
    CHECK(calls == 1);

    calls = 0;
    const auto t0 = Clock::now();
    const bool ok = arch::spin_until([&] { return ++calls < 0; }, 200'000);
    const std::int64_t ns = elapsed_ns(t0);
    CHECK_FALSE(ok);
    CHECK(calls > 1);  // the predicate is polled between bursts
    CHECK(ns >= 200'000);
    CHECK(ns < 1'000'000'000);
  }
}
