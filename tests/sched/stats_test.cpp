// tests/sched/stats_test.cpp — corun::stats() (include/corun/stats.hpp): empty outside a
// run, one entry per P inside it, from a task and from a foreign thread; counters that
// move with what the program did (spawns, runs, parks, timers and their lateness buckets,
// network polls) and never go backwards; the lateness buckets' bounds.
// Counts are asserted as lower bounds: the runtime's own tasks and timers add to them.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "corun/corun.hpp"
#include "sched/timers.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
namespace t = corun::test;

namespace {

std::uint64_t late_sum(const corun::ProcStats& p) {
  std::uint64_t s = 0;
  for (auto v : p.timer_late) s += v;
  return s;
}

}  // namespace

TEST_SUITE("unit.stats") {
  TEST_CASE("outside run, stats are empty") {
    const corun::Stats s = corun::stats();
    CHECK(s.procs.empty());
    CHECK(s.netpolls == 0);
    CHECK(s.total().tasks_run == 0);
  }

  TEST_CASE("timer lateness buckets: bounds and the bucket of a lateness agree") {
    using corun::ProcStats;
    using corun::sched::Timers;
    CHECK(ProcStats::late_bucket_limit_ns(0) == 1000);
    CHECK(ProcStats::late_bucket_limit_ns(1) == 2000);
    CHECK(ProcStats::late_bucket_limit_ns(14) == 1000ull << 14);
    CHECK(ProcStats::late_bucket_limit_ns(ProcStats::kLateBuckets - 1) == UINT64_MAX);
    for (std::int64_t ns : {0LL, 1LL, 999LL, 1000LL, 1999LL, 2000LL, 3999LL, 4000LL, 50'000LL,
                            8'191'999LL, 16'383'999LL, 16'384'000LL, 1'000'000'000LL}) {
      CAPTURE(ns);
      const int b = Timers::late_bucket(ns);
      REQUIRE(b >= 0);
      REQUIRE(b < ProcStats::kLateBuckets);
      CHECK(static_cast<std::uint64_t>(ns) < ProcStats::late_bucket_limit_ns(b));
      if (b > 0) CHECK(static_cast<std::uint64_t>(ns) >= ProcStats::late_bucket_limit_ns(b - 1));
    }
    CHECK(Timers::late_bucket(-5) == 0);  // a clock read before the deadline: on time
  }
}

TEST_SUITE("rt.sched") {
  TEST_CASE("stats: one entry per P; spawns, runs, parks and timers are counted") {
    t::run([] {
      const corun::Stats before = corun::stats();
      REQUIRE(static_cast<int>(before.procs.size()) == corun::procs());
      for (int i = 0; i < corun::procs(); i++)
        CHECK(before.procs[static_cast<std::size_t>(i)].id == i);

      constexpr int kTasks = 200, kTimers = 50;
      corun::WaitGroup wg;
      wg.add(kTasks);
      for (int i = 0; i < kTasks; i++) {
        corun::go([&wg] {
          corun::Chan<int> c;  // one park each: the receiver waits for the sender
          corun::go([c] { c.send(1); });
          (void)c.recv();
          wg.done();
        });
      }
      wg.wait();
      corun::WaitGroup tw;
      tw.add(kTimers);
      for (int i = 0; i < kTimers; i++) corun::after_func(20us, [&tw] { tw.done(); });
      tw.wait();

      const corun::Stats after = corun::stats();
      const corun::ProcStats a = after.total(), b = before.total();
      CHECK(a.id == -1);
      CHECK(a.tasks_spawned - b.tasks_spawned >= 2 * kTasks);
      CHECK(a.tasks_run - b.tasks_run >= 2 * kTasks);
      CHECK(a.parks - b.parks >= kTasks);
      CHECK(a.timers_fired - b.timers_fired >= kTimers);
      // Every firing lands in one bucket (buckets are written before the count).
      CHECK(late_sum(a) >= a.timers_fired);
      // Nothing goes backwards, per P.
      for (std::size_t i = 0; i < after.procs.size(); i++) {
        CHECK(after.procs[i].tasks_run >= before.procs[i].tasks_run);
        CHECK(after.procs[i].parks >= before.procs[i].parks);
        CHECK(after.procs[i].steals >= before.procs[i].steals);
      }
    });
  }

  TEST_CASE("stats: pool misses and depot transfers are counted") {
    t::run([] {
      const corun::ProcStats b = corun::stats().total();
      corun::Pool<int> pool([] { return std::make_unique<int>(7); });
      CHECK(*pool.get() == 7);        // empty pool: a miss, made by the factory
      constexpr int kObjects = 4096;  // more than a P caches: full batches spill to the depot
      std::vector<std::unique_ptr<int>> held;
      for (int i = 0; i < kObjects; i++) held.push_back(std::make_unique<int>(i));
      for (auto& x : held) pool.put(std::move(x));
      const corun::ProcStats a = corun::stats().total();
      CHECK(a.pool_misses - b.pool_misses >= 1);
      CHECK(a.pool_transfers - b.pool_transfers >= 1);
    });
  }

  TEST_CASE("stats: a foreign thread reads them while the run goes on") {
    t::run([] {
      std::atomic<bool> stop{false};
      std::atomic<int> seen{0}, wrong{0};
      std::thread th;
      corun::blocking([&] {
        th = std::thread([&] {
          std::uint64_t last = 0;
          while (!stop.load()) {
            const corun::Stats s = corun::stats();
            if (static_cast<int>(s.procs.size()) != corun::test::procs()) wrong++;
            const std::uint64_t runs = s.total().tasks_run;
            if (runs < last) wrong++;  // counters never go backwards
            last = runs;
            seen++;
          }
        });
      });
      for (int i = 0; i < 2000 && seen.load() < 20; i++) corun::sleep(100us);
      stop = true;
      corun::blocking([&] { th.join(); });
      CHECK(seen.load() > 0);
      CHECK(wrong.load() == 0);
    });
  }

  TEST_CASE("stats: a read that waited for data counts a poll that readied it") {
    t::run([] {
      corun::net::Listener ln = corun::net::listen("127.0.0.1:0");
      corun::net::Conn c = corun::net::dial("127.0.0.1:" + std::to_string(ln.port()), 5s);
      corun::net::Conn s = ln.accept();
      const corun::Stats before = corun::stats();
      corun::go([c = std::move(c)]() mutable {
        corun::sleep(2ms);  // the reader is parked on the poller by then
        c.write("x");
      });
      std::byte b[1];
      CHECK(s.read(b) == 1);
      const corun::Stats after = corun::stats();
      CHECK(after.netpolls > before.netpolls);
      CHECK(after.netpoll_ready > before.netpoll_ready);
    });
  }
}
