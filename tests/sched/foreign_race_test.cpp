// tests/sched/foreign_race_test.cpp — foreign threads racing the end of run() (issue 14):
// go(), after_func(), timer operations and Pool get/put called in a loop by std::threads
// while the main thread runs short runs back to back, so calls land before, during, at
// the end of and between runs.
//
// What each call must do (sched/runtime.cpp, "the foreign gate"):
//   - go(), after_func(), new_timer(), Ticker, Timer::reset: succeed while a run is
//     running, throw std::logic_error otherwise (no run, or one stopping); never anything
//     else, never touch a freed runtime. A go() that succeeded runs, or is abandoned with
//     its run (README "Ending"); it never runs after its run() returned.
//   - Timer::stop: true or false, never a crash (its heap may be drained meanwhile).
//   - Pool get/put: always work (the depot needs no runtime); every object put is later
//     returned by a get or still in the pool, none is handed to two holders.
// The assertion that matters most is that the process survives: ASan and TSan builds
// report a use of a freed runtime (the bug: SEGV in task_alloc, races with
// destroy_runtime). Counts of both outcomes are printed; that both happen is checked on
// the totals over every P count (a run lasts >= 1 ms and the gap between runs is a boot,
// so a loop that never hits one of them would mean the race is not exercised).
//
// Suite "unit.foreign": each case boots its own P counts (1, 2, 4), so it runs once.
// Bounds: kRuns runs or kBudget seconds per P count, whichever comes first; fewer runs
// under the sanitizers (kScale). Abandoned tasks' closures capture only references to
// atomics that outlive every run (they are never destroyed: README "Ending"); an
// after_func record whose firing task is abandoned so stays allocated, which LeakSanitizer
// is told (after_func_).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support.hpp"

using namespace std::chrono_literals;
namespace t = corun::test;

namespace {

constexpr int kRuns = t::kScale > 1 ? 20 : 100;  // runs per P count
constexpr double kBudget = 1.5;                  // seconds per P count, at most
constexpr int kThreads = 2;                      // foreign threads per scenario
constexpr int kProcCounts[] = {1, 2, 4};
constexpr long kBurst = t::kScale > 1 ? 2 : 8;  // foreign calls between two pauses

struct Outcome {
  std::atomic<long> ok{0};       // calls that succeeded
  std::atomic<long> refused{0};  // calls that threw std::logic_error
  std::atomic<long> other{0};    // calls that threw anything else (a failure)
};

// Calls op(), counting its outcome.
template <class Op>
void attempt(Outcome& o, Op&& op) {
  try {
    op();
    o.ok++;
  } catch (const std::logic_error&) {
    o.refused++;
  } catch (...) {
    o.other++;
  }
}

// Runs `body(k)` in a loop on kThreads foreign threads (k = thread index) while the main
// thread runs short runs at `procs` Ps: half of them sleep 1 ms in the main task, half
// return at once (the end races the boot's first wake-ups). `in_run` runs in each main
// task first. Returns the number of runs done.
template <class Body>
int race(int procs, Body body, std::function<void()> in_run = {}) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; k++)
    threads.emplace_back([&, k] {
      // A pause every few calls: the calls that make work (tasks, firings) must not
      // outrun the runtime, or a 1-Ps run would spend the budget draining a queue of
      // hundreds of thousands of tasks before its main task wakes up.
      for (long i = 1; !stop.load(std::memory_order_relaxed); i++) {
        body(k);
        if (i % kBurst == 0) std::this_thread::sleep_for(10us);
      }
    });
  const auto t0 = std::chrono::steady_clock::now();
  int runs = 0;
  for (; runs < kRuns && t::seconds_since(t0) < kBudget; runs++)
    t::run(
        [&, runs] {
          if (in_run) in_run();
          if (runs % 2 == 0) corun::sleep(1ms);
        },
        procs);
  stop = true;
  for (auto& th : threads) th.join();
  return runs;
}

std::atomic<long> g_pool_destroyed{0};

struct Obj {
  std::atomic<int> holder{0};  // 0: in the pool; else the holder's id
  Obj() = default;
  Obj(const Obj&) = delete;
  Obj& operator=(const Obj&) = delete;
  ~Obj() { g_pool_destroyed++; }
};

// after_func whose record may leak on purpose: a firing whose task is abandoned with its
// run keeps the record (an abandoned task's closure is never destroyed: README "Ending").
template <class F>
corun::Timer after_func_(corun::Duration d, F fn) {
  t::LeakCheckOff off;
  return corun::after_func(d, std::move(fn));
}

// Bounds what the foreign threads start that makes a task (go(), a timer due soon) and
// that has not run yet. Under the sanitizers every such task holds a sanitizer fiber
// while it waits, and TSan counts fibers against its limit of 8128 threads: with another
// process loading the machine, a 1-P run fell behind the foreign threads by 7500 tasks
// and TSan died ("Thread limit exceeded"). At kCap outstanding a call is skipped after a
// short pause and the count starts afresh (the rest were abandoned with their run, or run
// soon), so a run abandons at most kThreads * kCap of them.
struct Outstanding {
  static constexpr long kCap = t::kScale > 1 ? 16 : 1024;
  std::atomic<long> n{0};  // started by the foreign threads, not run yet
  bool full() {
    if (n.load() < kCap) return false;
    std::this_thread::sleep_for(200us);
    n = 0;
    return true;
  }
};

void report(const std::string& what, int procs, int runs, const Outcome& o) {
  MESSAGE(what, " at P=", procs, ": ", runs, " runs, ", o.ok.load(), " succeeded, ",
          o.refused.load(), " refused (logic_error)");
}

}  // namespace

TEST_SUITE("unit.foreign") {
  TEST_CASE("go() from foreign threads racing the end of run: runs, or logic_error") {
    long ok = 0, refused = 0;
    for (int procs : kProcCounts) {
      Outcome o;
      std::atomic<long> ran{0};
      std::atomic<long> bad_procs{0};
      Outstanding out;
      int runs = race(procs, [&](int) {
        if (out.full()) return;
        attempt(o, [&] {
          corun::go([&ran, &out] {
            ran++;
            out.n--;
          });
          out.n++;
        });
        int n = corun::procs();  // 0 between runs, the run's P count during one
        if (n != 0 && n != procs) bad_procs++;
      });
      report("go", procs, runs, o);
      CHECK(o.other.load() == 0);
      CHECK(bad_procs.load() == 0);
      CHECK(ran.load() <= o.ok.load());  // a task runs at most once, only if go() succeeded
      ok += o.ok.load();
      refused += o.refused.load();
    }
    CHECK(ok > 0);
    CHECK(refused > 0);
  }

  TEST_CASE("after_func() and new_timer() from foreign threads racing the end of run") {
    long ok = 0, refused = 0;
    for (int procs : kProcCounts) {
      Outcome o;
      std::atomic<long> fired{0};
      std::atomic<long> n{0};
      Outstanding out;
      int runs = race(procs, [&](int) {
        long i = n++;
        if (i % 4 < 2 && out.full()) return;
        attempt(o, [&] {
          switch (i % 4) {
            case 0:  // due at once: fired by the caller, through go()
              out.n++;
              after_func_(0ns, [&fired, &out] {
                fired++;
                out.n--;
              });
              break;
            case 1:  // due soon: in a heap when the run ends, or fired
              out.n++;
              after_func_(100us, [&fired, &out] {
                fired++;
                out.n--;
              });
              break;
            case 2:  // never due in a run: drained (abandoned) at the run's end
              after_func_(1h, [&fired] { fired++; });
              break;
            default:
              (void)corun::new_timer(50us);
              break;
          }
        });
      });
      report("after_func/new_timer", procs, runs, o);
      CHECK(o.other.load() == 0);
      ok += o.ok.load();
      refused += o.refused.load();
    }
    CHECK(ok > 0);
    CHECK(refused > 0);
  }

  TEST_CASE("Timer and Ticker operations from foreign threads racing the end of run") {
    // Each thread keeps one Timer and one Ticker across runs: created in one run, they are
    // stopped and reset while it ends, between runs and in the next one.
    long ok = 0, refused = 0;
    for (int procs : kProcCounts) {
      Outcome o;
      std::atomic<long> stops_true{0}, stops_false{0};
      struct Kept {
        std::optional<corun::Timer> timer;
        std::optional<corun::Ticker> ticker;
        long i = 0;
      };
      std::vector<Kept> kept(kThreads);
      Outstanding out;  // firings of the resets to 200 µs
      int runs = race(procs, [&](int k) {
        Kept& me = kept[static_cast<std::size_t>(k)];
        long i = me.i++;
        switch (i % 6) {
          case 0:
            attempt(o, [&] { me.timer = after_func_(1h, [&out] { out.n--; }); });
            break;
          case 1:
            if (me.timer) attempt(o, [&] { me.timer->reset(1h); });
            break;
          case 2:
            if (me.timer) (me.timer->stop() ? stops_true : stops_false)++;
            break;
          case 3:
            if (me.timer && !out.full()) {
              out.n++;  // a reset of a timer not yet fired re-arms it: n overcounts
              attempt(o, [&] { me.timer->reset(200us); });
            }
            break;
          case 4:
            attempt(o, [&] { me.ticker.emplace(1h); });
            break;
          default:
            if (me.ticker) attempt(o, [&] { me.ticker->reset(30min); });
            if (i % 12 == 5) me.ticker.reset();  // ~Ticker stops it
            break;
        }
      });
      kept.clear();  // the handles go outside any run: only their records are freed
      report("Timer/Ticker ops", procs, runs, o);
      MESSAGE("  Timer::stop: ", stops_true.load(), " true, ", stops_false.load(), " false");
      CHECK(o.other.load() == 0);
      ok += o.ok.load();
      refused += o.refused.load();
    }
    CHECK(ok > 0);
    CHECK(refused > 0);
  }

  TEST_CASE("Pool get/put from foreign threads racing the end of run keeps every object") {
    std::atomic<long> created{0}, gets{0}, puts{0}, violations{0};
    g_pool_destroyed = 0;
    {
      corun::Pool<Obj> pool;  // no make(): get() returns nullptr on an empty pool
      auto put = [&](std::unique_ptr<Obj> x, int me) {
        int expect = me;
        if (!x->holder.compare_exchange_strong(expect, 0)) violations++;
        puts++;
        pool.put(std::move(x));
      };
      auto get = [&](int me) -> std::unique_ptr<Obj> {
        std::unique_ptr<Obj> x = pool.get();
        if (!x) return x;
        gets++;
        int expect = 0;
        if (!x->holder.compare_exchange_strong(expect, me)) violations++;
        return x;
      };
      auto fresh = [&](int me) {
        created++;
        auto x = std::make_unique<Obj>();
        x->holder = me;
        return x;
      };
      for (int procs : kProcCounts) {
        std::vector<std::vector<std::unique_ptr<Obj>>> held(kThreads);
        std::vector<long> steps(kThreads, 0);
        int runs = race(
            procs,
            [&](int k) {
              const int me = 100 + k;
              auto& mine = held[static_cast<std::size_t>(k)];
              long i = steps[static_cast<std::size_t>(k)]++;
              if (i % 3 == 0 && mine.size() < 40) {
                mine.push_back(fresh(me));
              } else if (i % 3 == 1) {
                if (auto x = get(me)) mine.push_back(std::move(x));
              } else if (!mine.empty()) {
                put(std::move(mine.back()), me);
                mine.pop_back();
              }
            },
            [&] {
              // The main task churns too, so the run installs shards and arms its trim
              // timer; it holds nothing when it returns.
              std::vector<std::unique_ptr<Obj>> mine;
              for (int r = 0; r < 3; r++) {
                for (int j = 0; j < 40; j++)
                  if (auto x = get(1)) mine.push_back(std::move(x));
                for (int j = 0; j < 10; j++) mine.push_back(fresh(1));
                while (!mine.empty()) {
                  put(std::move(mine.back()), 1);
                  mine.pop_back();
                }
                corun::yield();
              }
            });
        for (int k = 0; k < kThreads; k++)
          for (auto& x : held[static_cast<std::size_t>(k)]) put(std::move(x), 100 + k);
        MESSAGE("Pool at P=", procs, ": ", runs, " runs, ", gets.load(), " gets, ", puts.load(),
                " puts so far");
      }
      // Nothing is held: every object put and not taken back is in the pool (a trim may
      // have freed some: the trim period, 5 s by default, is longer than these runs).
      CHECK(violations.load() == 0);
      CHECK(puts.load() - gets.load() == created.load());
      CHECK(created.load() > 0);
      // The pool still works after the last run, from this (foreign) thread.
      put(fresh(7), 7);
      auto x = get(7);
      REQUIRE(x);
      put(std::move(x), 7);
      CHECK(puts.load() - gets.load() == created.load());
    }
    CHECK(violations.load() == 0);
    CHECK(g_pool_destroyed.load() == created.load());  // ~Pool freed each object once
  }
}
