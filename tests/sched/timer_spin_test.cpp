// tests/sched/timer_spin_test.cpp — the measured timer spin (sched/idle.hpp, TimerSpin):
// the estimate's arithmetic, the start-up calibration, which setting wins
// (CORUN_TIMER_SPIN_NS over CORUN_TIMER_SPIN=auto|off), and that spinning for a deadline
// never fires a timer early, with many timers due close together.
// No timing asserts: how late timers are is perf/bench_time.cpp's TimerLateness.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "corun/corun.hpp"
#include "sched/sched.hpp"
#include "support.hpp"

namespace t = corun::test;
using corun::sched::TimerSpin;

namespace {

using Env = corun::test::EnvGuard;

std::int64_t early_in_a_run() {
  std::int64_t early = -1;
  t::run([&] { early = corun::sched::idle_early_ns(corun::sched::current_runtime()); });
  return early;
}

std::int64_t window_in_a_run() {
  std::int64_t window = -1;
  t::run([&] { window = corun::sched::idle_spin_window_ns(corun::sched::current_runtime()); });
  return window;
}

}  // namespace

TEST_SUITE("unit.timerspin") {
  TEST_CASE("the envelope rises fast, falls slowly, and is bounded") {
    std::int64_t e = 10'000;
    e = TimerSpin::next_late(e, 50'000);  // 1/4 of the way up
    CHECK(e == 20'000);
    e = TimerSpin::next_late(e, 0);  // 1/32 of the way down
    CHECK(e == 20'000 - 20'000 / 32);
    for (int i = 0; i < 200; i++) e = TimerSpin::next_late(e, 1'000'000'000);  // 1 s: clamped
    CHECK(e <= TimerSpin::kMaxNs);
    CHECK(e >= TimerSpin::kMaxNs - 4);
    CHECK(TimerSpin::next_late(100, -5) <= 100);  // a negative sample counts as 0
  }

  TEST_CASE("the early estimate rises slowly, falls fast, and is bounded") {
    std::int64_t e = 10'000;
    e = TimerSpin::next_early(e, 90'000);  // 1/16 of the way up
    CHECK(e == 15'000);
    e = TimerSpin::next_early(e, 3'000);  // 1/4 of the way down
    CHECK(e == 12'000);
    for (int i = 0; i < 400; i++) e = TimerSpin::next_early(e, 1'000'000'000);
    CHECK(e <= TimerSpin::kMaxNs);
    CHECK(e >= TimerSpin::kMaxNs - 16);
    CHECK(TimerSpin::next_early(100, -5) <= 100);
  }

  TEST_CASE("both estimates converge to steady samples; a spread splits them") {
    std::int64_t lu = 0, ld = TimerSpin::kMaxNs, eu = 0, ed = TimerSpin::kMaxNs;
    for (int i = 0; i < 2000; i++) {
      lu = TimerSpin::next_late(lu, 30'000);
      ld = TimerSpin::next_late(ld, 30'000);
      eu = TimerSpin::next_early(eu, 30'000);
      ed = TimerSpin::next_early(ed, 30'000);
    }
    for (auto v : {lu, eu}) {
      CHECK(v >= 29'000);
      CHECK(v <= 30'000);
    }
    for (auto v : {ld, ed}) {
      CHECK(v >= 30'000);
      CHECK(v <= 31'000);
    }
    // Samples of 10 and 50 µs in turn (mean 30): the envelope settles high in the spread
    // (~46 µs: a sleep woken that early rarely misses), the early estimate low (~16 µs:
    // most sleeps spin a little, some wake late).
    std::int64_t late = 30'000, early = 30'000;
    for (int i = 0; i < 2000; i++) {
      late = TimerSpin::next_late(late, i % 2 ? 10'000 : 50'000);
      early = TimerSpin::next_early(early, i % 2 ? 10'000 : 50'000);
    }
    CHECK(late >= 40'000);
    CHECK(late <= 50'000);
    CHECK(early >= 12'000);
    CHECK(early <= 24'000);
  }

  TEST_CASE("which setting decides how early a sleep wakes") {
    {
      Env a("CORUN_TIMER_SPIN", "off"), b("CORUN_TIMER_SPIN_NS", nullptr);
      CHECK(early_in_a_run() == 0);
    }
    {
      Env a("CORUN_TIMER_SPIN", "off"), b("CORUN_TIMER_SPIN_NS", "1234");
      CHECK(early_in_a_run() == 1234);  // a fixed amount wins over auto and off
    }
    {
      Env a("CORUN_TIMER_SPIN", nullptr), b("CORUN_TIMER_SPIN_NS", nullptr);
      const std::int64_t e = early_in_a_run();
      CHECK(e > 0);
      CHECK(e <= TimerSpin::kMaxNs);
    }
  }

  TEST_CASE("which setting decides how near a deadline is spun for") {
    {
      Env a("CORUN_TIMER_SPIN", "off"), b("CORUN_TIMER_SPIN_NS", nullptr);
      CHECK(window_in_a_run() == 10'000);  // the floor: nearer than any sleep
    }
    {
      Env a("CORUN_TIMER_SPIN", nullptr), b("CORUN_TIMER_SPIN_NS", "1234");
      CHECK(window_in_a_run() == 10'000);
    }
    {
      Env a("CORUN_TIMER_SPIN", nullptr), b("CORUN_TIMER_SPIN_NS", "50000");
      CHECK(window_in_a_run() == 50'000);
    }
    {
      Env a("CORUN_TIMER_SPIN", nullptr), b("CORUN_TIMER_SPIN_NS", nullptr);
      const std::int64_t w = window_in_a_run();
      CHECK(w >= 10'000);
      CHECK(w <= TimerSpin::kMaxNs);
    }
  }

  TEST_CASE("calibration measures this machine's wake-ups") {
    Env a("CORUN_TIMER_SPIN", nullptr), b("CORUN_TIMER_SPIN_NS", nullptr);
    std::int64_t measured = -1, measured_early = -1, early = -1;
    t::run(
        [&] {
          auto* rt = corun::sched::current_runtime();
          rt->idle.spin.late_ns.store(-1, std::memory_order_relaxed);  // a value it never sets
          rt->idle.spin.early_ns.store(-1, std::memory_order_relaxed);
          corun::blocking([&] { corun::sched::idle_calibrate(rt); });
          measured = rt->idle.spin.late_ns.load(std::memory_order_relaxed);
          measured_early = rt->idle.spin.early_ns.load(std::memory_order_relaxed);
          early = corun::sched::idle_early_ns(rt);
        },
        1);
    // Set (sysmon's own calibration or the waiter may store after ours: any of them is a
    // measured value) to how late a 20 µs futex sleep woke, at most the cap; and used.
    CHECK(measured >= 0);
    CHECK(measured <= TimerSpin::kMaxNs);
    CHECK(measured_early >= 0);
    CHECK(measured_early <= TimerSpin::kMaxNs);
    CHECK(early >= 0);
    CHECK(early <= TimerSpin::kMaxNs);
  }

  TEST_CASE("the waiter's backstop lag doubles while wasted and resets when needed") {
    using corun::sched::IdleWait;
    std::int64_t lag = IdleWait::kMinLagNs;
    int steps = 0;
    while (lag < IdleWait::kMaxLagNs) {
      const std::int64_t next = IdleWait::next_lag(lag, false);
      CHECK(next > lag);
      CHECK(next <= IdleWait::kMaxLagNs);
      lag = next;
      steps++;
    }
    CHECK(steps < 8);  // 20 µs to 1 ms in a handful of wasted wake-ups
    CHECK(IdleWait::next_lag(lag, false) == IdleWait::kMaxLagNs);
    CHECK(IdleWait::next_lag(lag, true) == IdleWait::kMinLagNs);
  }
}

TEST_SUITE("rt.timer") {
  TEST_CASE("a running P's deadline is the waiter's only as a late backstop") {
    // A running P runs its own timers (and spins for them when it idles): the waiter plans
    // only a plain sleep `lag` past its deadline, in case it is stuck in one long task. The
    // P's own M may spin for it at the deadline itself.
    using namespace corun::sched;
    t::run([] {
      Runtime* rt = current_runtime();
      P* p = current_m()->p;
      corun::Timer timer = corun::after_func(std::chrono::seconds(30), [] {});
      const std::int64_t e = p->timers->next();
      REQUIRE(e != TimerHeap::kNever);
      const bool per_p = p->timers == &p->own_timers;  // CORUN_TIMERS=global: anyone's
      for (std::int64_t lag : {IdleWait::kMinLagNs, IdleWait::kMaxLagNs}) {
        CAPTURE(lag);
        bool precise = !per_p;
        CHECK(timers_waiter_next(rt, lag, &precise) == (per_p ? e + lag : e));
        CHECK(precise == !per_p);
      }
      CHECK(timers_spin_next(rt, p) == e);
      timer.stop();
      bool precise = false;
      CHECK(timers_waiter_next(rt, IdleWait::kMinLagNs, &precise) == TimerHeap::kNever);
    });
  }

  TEST_CASE("a busy P's own dense timers make the idle waiter back off") {
    // One task sleeping 1 µs in a loop: its P spins for and runs its own timers. The idle
    // M's backstop wake-ups find nothing left to run, so it sleeps ever longer (at 1 P
    // there is no idle M: the one M holds the P).
    using namespace corun::sched;
    std::int64_t lag = 0;
    t::run([&] {
      Runtime* rt = current_runtime();
      if (rt->nprocs < 2 || current_m()->p->timers != &current_m()->p->own_timers) return;
      // The backstop is the idle waiter's. A run starts Ms only for work, and an M that
      // takes a P for due timers leaves the wait vacant until an M idles next: in two runs
      // of five (4 Ps, TSan) no M waited at all, and the lag never moved. So wake one
      // (wakep, for a task) and let it idle into the wait while this task keeps its P.
      for (int i = 0; i < 1000 && !idle_has_waiter(rt); i++) {
        corun::go([] {});
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
        while (!idle_has_waiter(rt) && std::chrono::steady_clock::now() < until) corun::yield();
      }
      REQUIRE(idle_has_waiter(rt));
      const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      // Looked at after every sleep: a backstop wake-up that finds the P's timer overdue
      // (a slow TSan run) sets the lag back, so the maximum may last one period only.
      while (std::chrono::steady_clock::now() < stop) {
        corun::sleep(std::chrono::microseconds(1));
        lag = rt->idle.lag_ns.load(std::memory_order_relaxed);
        if (lag >= IdleWait::kMaxLagNs) break;
      }
      CHECK(lag == IdleWait::kMaxLagNs);
    });
  }

  TEST_CASE("a train of sleepers over every P wakes whole, none early") {
    // Many tasks sleeping at once, spread over the Ps: their deadlines come in trains over
    // several idle Ps' heaps, which the waiter and the Ps it wakes share. Every sleep
    // returns, none before its time, with the spin measured and off.
    for (const char* mode : {"auto", "off"}) {
      CAPTURE(mode);
      Env a("CORUN_TIMER_SPIN", mode), b("CORUN_TIMER_SPIN_NS", nullptr);
      constexpr int kTasks = 64, kRounds = 20 / t::kScale;
      std::atomic<int> early{0}, woke{0};
      t::run([&] {
        corun::WaitGroup wg;
        wg.add(kTasks);
        for (int i = 0; i < kTasks; i++) {
          corun::go([&] {
            for (int r = 0; r < kRounds; r++) {
              const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
              corun::sleep(std::chrono::milliseconds(1));
              if (std::chrono::steady_clock::now() < deadline)
                early.fetch_add(1, std::memory_order_relaxed);
              woke.fetch_add(1, std::memory_order_relaxed);
            }
            wg.done();
          });
        }
        wg.wait();
      });
      CHECK(woke.load() == kTasks * kRounds);
      CHECK(early.load() == 0);
    }
  }

  TEST_CASE("dense after_func timers spun for never fire early") {
    // 50 tasks re-arming after_func(50 µs): deadlines ~1 µs apart, nearer than any sleep
    // honours, so the idle P spins for them (and with CORUN_TIMER_SPIN=off sleeps).
    for (const char* mode : {"auto", "off"}) {
      CAPTURE(mode);
      Env a("CORUN_TIMER_SPIN", mode), b("CORUN_TIMER_SPIN_NS", nullptr);
      constexpr int kTasks = 50, kRounds = 40 / t::kScale;
      std::atomic<int> early{0}, fired{0};
      std::atomic<std::int64_t> worst_early{0};
      t::run([&] {
        corun::WaitGroup wg;
        wg.add(kTasks);
        for (int i = 0; i < kTasks; i++) {
          corun::go([&] {
            corun::Chan<int> done(1);
            for (int r = 0; r < kRounds; r++) {
              const auto deadline =
                  std::chrono::steady_clock::now() + std::chrono::microseconds(50);
              corun::after_func(std::chrono::microseconds(50), [&, done, deadline]() mutable {
                const auto d = std::chrono::steady_clock::now() - deadline;
                if (d < std::chrono::nanoseconds(0)) {
                  early.fetch_add(1, std::memory_order_relaxed);
                  std::int64_t ns =
                      -std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
                  std::int64_t w = worst_early.load(std::memory_order_relaxed);
                  while (ns > w && !worst_early.compare_exchange_weak(w, ns)) {
                  }
                }
                fired.fetch_add(1, std::memory_order_relaxed);
                done.send(0);
              });
              done.recv();
            }
            wg.done();
          });
        }
        wg.wait();
      });
      CHECK(fired.load() == kTasks * kRounds);
      INFO("worst early firing: " << worst_early.load() << " ns");
      CHECK(early.load() == 0);
    }
  }
}
