// tests/sched/runtime_test.cpp — the runtime as a user sees it: run/go/yield/procs/
// proc_id/blocking, errors, parallelism, wake-ups, a million tasks, oversubscription,
// and the death tests (stack overflow, exception escaping a task).
// rt.sched runs at every P count scripts/run-tests.sh sets (tests/support.hpp); the death
// tests are a unit suite (run once): each child boots the P count it needs itself.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "os/stack.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
namespace t = corun::test;

namespace {
// Spins until pred() or the generous deadline; catches hangs, not slowness.
template <class Pred>
bool wait_until(Pred pred, std::chrono::seconds limit = std::chrono::seconds(20)) {
  auto t0 = std::chrono::steady_clock::now();
  while (!pred()) {
    if (std::chrono::steady_clock::now() - t0 > limit) return false;
    corun::yield();
  }
  return true;
}

// Two tasks that only yield (at 1 P they switch straight to each other) until `stop`;
// after 20 s they set `gave_up` and end, so starving the rest fails a test, not hangs it.
void start_yielders(std::atomic<bool>& stop, std::atomic<bool>& gave_up, corun::WaitGroup& wg) {
  wg.add(2);
  for (int i = 0; i < 2; i++) {
    corun::go([&] {
      const auto t0 = std::chrono::steady_clock::now();
      for (long n = 0; !stop.load(std::memory_order_relaxed); n++) {
        if ((n & 1023) == 0 && std::chrono::steady_clock::now() - t0 > 20s) {
          gave_up = true;
          break;
        }
        corun::yield();
      }
      wg.done();
    });
  }
}

using corun::test::EnvGuard;
}  // namespace

TEST_SUITE("rt.sched") {
  TEST_CASE("run returns 0, procs and proc_id are in range, and run can run again") {
    for (int round = 0; round < 3; round++) {
      int seen_procs = 0, seen_id = -2;
      int r = corun::Config{}.procs;  // silence unused warnings on some compilers
      (void)r;
      CHECK(t::procs() > 0);
      corun::Config cfg;
      cfg.procs = t::procs();
      CHECK(corun::run(cfg, [&] {
              seen_procs = corun::procs();
              seen_id = corun::proc_id();
            }) == 0);
      CHECK(seen_procs == t::procs());
      CHECK(seen_id >= 0);
      CHECK(seen_id < t::procs());
    }
    CHECK(corun::procs() == 0);
    CHECK(corun::proc_id() == -1);
  }

  TEST_CASE("go outside run throws logic_error; run inside a task throws logic_error") {
    CHECK_THROWS_AS(corun::go([] {}), std::logic_error);
    bool threw = false;
    t::run([&] {
      try {
        corun::run([] {});
      } catch (const std::logic_error&) {
        threw = true;
      }
    });
    CHECK(threw);
  }

  TEST_CASE("an exception escaping the main task comes out of run") {
    CHECK_THROWS_WITH_AS(t::run([] { throw std::runtime_error("boom"); }), "boom",
                         std::runtime_error);
    t::run([] {});  // and the next run works
  }

  TEST_CASE("bad configuration stops run with a message naming it") {
    {
      EnvGuard g("CORUN_PROCS", "abc");
      CHECK_THROWS_WITH_AS(corun::run([] {}), doctest::Contains("CORUN_PROCS"),
                           std::invalid_argument);
    }
    {
      EnvGuard g("CORUN_PORCS", "2");
      CHECK_THROWS_WITH_AS(corun::run([] {}), doctest::Contains("CORUN_PORCS"),
                           std::invalid_argument);
    }
    {
      // Checked even though Config::procs overrides it.
      EnvGuard g("CORUN_PROCS", "0");
      corun::Config cfg;
      cfg.procs = 2;
      CHECK_THROWS_AS(corun::run(cfg, [] {}), std::invalid_argument);
    }
    corun::Config bad;
    bad.procs = -3;
    CHECK_THROWS_WITH_AS(corun::run(bad, [] {}), doctest::Contains("procs = -3"),
                         std::invalid_argument);
  }

  TEST_CASE("CORUN_PROCS sets the P count; Config::procs overrides it") {
    EnvGuard g("CORUN_PROCS", "3");
    int n = 0;
    corun::run([&] { n = corun::procs(); });
    CHECK(n == 3);
    corun::Config cfg;
    cfg.procs = 5;
    corun::run(cfg, [&] { n = corun::procs(); });
    CHECK(n == 5);
  }

  TEST_CASE("spawned tasks all run; closures are destroyed once") {
    const int kTasks = t::live_cap(10000);
    std::atomic<int> ran{0};
    auto token = std::make_shared<int>(7);
    t::run([&] {
      corun::WaitGroup wg;
      wg.add(kTasks);
      for (int i = 0; i < kTasks; i++)
        corun::go([&, token] {
          ran.fetch_add(*token == 7 ? 1 : 0);
          wg.done();
        });
      wg.wait();
    });
    CHECK(ran.load() == kTasks);
    CHECK(token.use_count() == 1);
  }

  TEST_CASE("true parallelism: procs tasks are all running at once") {
    const int n = t::procs();
    std::atomic<int> arrived{0};
    bool ok = true;
    t::run([&] {
      corun::WaitGroup wg;
      wg.add(n);
      std::atomic<bool> failed{false};
      for (int i = 0; i < n; i++)
        corun::go([&] {
          arrived.fetch_add(1);
          // Spin without yielding: only n distinct Ps can make everyone arrive.
          auto t0 = std::chrono::steady_clock::now();
          while (arrived.load() < n) {
            if (std::chrono::steady_clock::now() - t0 > 20s) {
              failed = true;
              break;
            }
          }
          wg.done();
        });
      wg.wait();
      ok = !failed;
    });
    CHECK(ok);
    CHECK(arrived.load() == n);
  }

  TEST_CASE("yield lets another task on the same P make progress") {
    bool ok = false;
    t::run(
        [&] {
          std::atomic<bool> flag{false};
          corun::go([&] { flag = true; });
          ok = wait_until([&] { return flag.load(); });
        },
        1);
    CHECK(ok);
  }

  TEST_CASE("tasks yielding to each other still let the global queue and timers in") {
    // At 1 P two tasks that only yield switch straight to each other (no trip through the
    // scheduler's loop); the main task, readied through the global queue by a foreign
    // thread and then asleep on a timer, must still get its turns. The yielders give up
    // after 20 s, so starvation fails the test instead of hanging it.
    bool received = false, woke = false, starved = false;
    t::run(
        [&] {
          std::atomic<bool> stop{false}, gave_up{false};
          corun::WaitGroup wg;
          start_yielders(stop, gave_up, wg);
          corun::Chan<int> from_thread;
          std::thread th([from_thread]() mutable {
            std::this_thread::sleep_for(10ms);
            from_thread.send(7);  // readies main through the global queue
          });
          received = from_thread.recv() == 7;
          corun::blocking([&] { th.join(); });
          corun::sleep(2ms);  // a timer on this P, due while the two yield
          woke = true;
          stop = true;
          wg.wait();
          starved = gave_up.load();
        },
        1);
    CHECK(received);
    CHECK(woke);
    CHECK_FALSE(starved);
  }

  TEST_CASE("a slice that ends as a task leaves runnext still lets the global queue in") {
    // At 1 P: two yielders queued (one in runnext), the main task overruns its slice so
    // sysmon asks the P to end it, then parks; the pick that follows starts a new slice
    // mid-pick (the global queue's turn comes next). A foreign thread then readies the
    // main task through the global queue, and the yielders must let it in. Once the
    // countdown wrapped there (2^32 picks): the yielders give up after 20 s instead.
    bool received = false, starved = false;
    t::run(
        [&] {
          std::atomic<bool> stop{false}, gave_up{false};
          corun::WaitGroup wg;
          start_yielders(stop, gave_up, wg);
          // Hold the P past sysmon's 10 ms slice without a switch.
          const auto t0 = std::chrono::steady_clock::now();
          while (std::chrono::steady_clock::now() - t0 < 40ms) {
          }
          corun::Chan<int> from_thread;
          std::thread th([from_thread]() mutable {
            std::this_thread::sleep_for(10ms);
            from_thread.send(7);  // readies main through the global queue
          });
          received = from_thread.recv() == 7;
          stop = true;
          corun::blocking([&] { th.join(); });
          wg.wait();
          starved = gave_up.load();
        },
        1);
    CHECK(received);
    CHECK_FALSE(starved);
  }

  TEST_CASE("blocking() lets other tasks run on that P meanwhile") {
    bool saw_other = false;
    t::run(
        [&] {
          std::atomic<bool> other_ran{false};
          corun::go([&] { other_ran = true; });
          // One P: the other task can run only if blocking() gives the P away.
          saw_other = corun::blocking([&] {
            auto t0 = std::chrono::steady_clock::now();
            while (!other_ran.load()) {
              if (std::chrono::steady_clock::now() - t0 > 20s) return false;
              std::this_thread::sleep_for(1ms);
            }
            return true;
          });
        },
        1);
    CHECK(saw_other);
  }

  TEST_CASE("blocking() returns values and propagates exceptions") {
    t::run([] {
      CHECK(corun::blocking([] { return 42; }) == 42);
      CHECK_THROWS_WITH(corun::blocking([]() -> int { throw std::runtime_error("io"); }), "io");
      // Many short calls from many tasks, some long enough for sysmon to retake the P.
      corun::WaitGroup wg;
      std::atomic<int> sum{0};
      for (int i = 0; i < 64; i++) {
        wg.add(1);
        corun::go([&, i] {
          sum.fetch_add(corun::blocking([i] {
            if (i % 8 == 0) std::this_thread::sleep_for(2ms);
            return i;
          }));
          wg.done();
        });
      }
      wg.wait();
      CHECK(sum.load() == 63 * 64 / 2);
    });
  }

  TEST_CASE("no lost wake-ups: many rounds of park and ready across Ps") {
    const int kRounds = 20000 / t::kScale;
    int completed = 0;
    t::run([&] {
      for (int i = 0; i < kRounds; i++) {
        corun::WaitGroup wg;
        wg.add(2);
        corun::go([&] { wg.done(); });
        corun::go([&] {
          corun::yield();
          wg.done();
        });
        wg.wait();
        completed++;
      }
    });
    CHECK(completed == kRounds);
  }

  TEST_CASE("ping-pong chains between Ps keep every hand-off") {
    const int kPairs = 8, kRounds = 2000 / t::kScale;
    std::atomic<int> total{0};
    t::run([&] {
      corun::WaitGroup all;
      for (int p = 0; p < kPairs; p++) {
        all.add(1);
        corun::go([&] {
          for (int r = 0; r < kRounds; r++) {
            corun::WaitGroup ping;
            ping.add(1);
            corun::go([&] {
              total.fetch_add(1);
              ping.done();
            });
            ping.wait();
          }
          all.done();
        });
      }
      all.wait();
    });
    CHECK(total.load() == kPairs * kRounds);
  }

  TEST_CASE("one million tasks spawned and joined") {
    const int kTasks = t::live_cap(1000000 / t::kScale);
    std::atomic<int> ran{0};
    t::run([&] {
      corun::WaitGroup wg;
      wg.add(kTasks);
      for (int i = 0; i < kTasks; i++)
        corun::go([&] {
          ran.fetch_add(1, std::memory_order_relaxed);
          wg.done();
        });
      wg.wait();
    });
    CHECK(ran.load() == kTasks);
  }

  TEST_CASE("oversubscription: 16 Ps on this machine") {
    std::set<int> ids;
    corun::Mutex mu;
    std::atomic<int> ran{0};
    const int kTasks = t::live_cap(2000);
    t::run(
        [&] {
          corun::WaitGroup wg;
          for (int i = 0; i < kTasks; i++) {
            wg.add(1);
            corun::go([&] {
              for (int k = 0; k < 10; k++) corun::yield();
              mu.lock();
              ids.insert(corun::proc_id());
              mu.unlock();
              ran.fetch_add(1);
              wg.done();
            });
          }
          wg.wait();
        },
        16);
    CHECK(ran.load() == kTasks);
    CHECK(ids.size() > 1);  // work spread beyond one P
    for (int id : ids) CHECK((id >= 0 && id < 16));
  }

  TEST_CASE("a task may park inside a catch block and resume on another thread") {
    t::run([] {
      corun::WaitGroup wg;
      std::atomic<int> ok{0};
      for (int i = 0; i < 32; i++) {
        wg.add(1);
        corun::go([&] {
          try {
            throw std::runtime_error("inner");
          } catch (const std::runtime_error& e) {
            for (int k = 0; k < 20; k++) corun::yield();  // may migrate Ps and threads
            if (std::string(e.what()) == "inner" && std::uncaught_exceptions() == 0) ok++;
          }
          wg.done();
        });
      }
      wg.wait();
      CHECK(ok.load() == 32);
    });
  }

  TEST_CASE("go from a foreign thread while run is running") {
    std::atomic<bool> ran{false};
    t::run([&] {
      std::thread th([&] { corun::go([&] { ran = true; }); });
      th.join();
      CHECK(wait_until([&] { return ran.load(); }));
    });
  }

  TEST_CASE("main returning abandons live tasks; the next run is clean") {
    // Abandoned tasks' closures are never destroyed (documented), so this test keeps
    // what they capture in static storage rather than leak it.
    static std::atomic<int> after{0};
    static corun::WaitGroup gate;  // count 1 forever: never released
    gate.add(1);
    t::run([] {
      for (int i = 0; i < 100; i++)
        corun::go([] {
          gate.wait();
          after++;
        });
    });
    t::run([] {});
    CHECK(after.load() == 0);
  }
}

// ---- capacity ------------------------------------------------------------------------

// A run on a synthetic topology with two NUMA nodes, one PU in each (this machine has
// one node): the plan's node 1 does not exist here, so memory must not be placed by it.
CORUN_TEST_CHILD(numa_fiction) {
  std::atomic<int> ran{0};
  corun::test::run(
      [&] {
        corun::Pool<int> pool([] { return std::make_unique<int>(7); });
        corun::WaitGroup wg;
        for (int i = 0; i < 64; i++) {
          wg.add(1);
          corun::go([&] {
            auto v = pool.get();
            pool.put(std::move(v));
            ran++;
            wg.done();
          });
        }
        wg.wait();
      },
      4);
  std::printf("ran: %d\n", ran.load());
  return 0;
}

TEST_SUITE("unit.sched.capacity") {
  TEST_CASE("a synthetic two-node topology boots on a one-node machine (no placement)") {
    // Before: the plan's logical node 1 went to mbind/node_alloc, which rejected it, and
    // run() threw "StackOptions.numa_node = 1 is not an online NUMA node".
    const auto r = t::child_run(
        "numa_fiction", {"HWLOC_SYNTHETIC=pack:2 numa:1 core:1 pu:1", "CORUN_DEBUG=stealorder=1"});
    INFO(r.output);
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(r.output.find("2 NUMA node(s)") != std::string::npos);
    CHECK(r.output.find("ran: 64\n") != std::string::npos);
  }

  TEST_CASE("one million tasks parked at once (2 Ps)") {
    // A capacity test (stack slabs under vm.max_map_count, memory per task: ~4 GB RSS), not
    // a scheduling one, so it is a unit case that boots the one P count it needs instead of
    // running at every CORUNTEST_PROCS: 2 Ps, so that the tasks' stacks come from and
    // return to more than one P's cache and the wake-up of a million waiters crosses Ps.
    // ~6 s here when the VM is quiet, up to ~100 s while other builds page heavily.
    // Waits are polled with a bound, so a lost task fails with the counts, not a hang.
    const int kTasks = t::live_cap(1000000 / t::kScale);
    const auto bound = std::chrono::seconds(300);
    std::atomic<int> parked{0}, woke{0};
    int woke_early = -1;
    bool all_parked = false, all_woke = false;
    t::run(
        [&] {
          corun::WaitGroup gate;
          gate.add(1);
          for (int i = 0; i < kTasks; i++)
            corun::go([&] {
              parked.fetch_add(1, std::memory_order_relaxed);
              gate.wait();
              woke.fetch_add(1, std::memory_order_relaxed);
            });
          auto wait_for = [&](std::atomic<int>& n) {
            auto t0 = std::chrono::steady_clock::now();
            while (n.load() < kTasks && std::chrono::steady_clock::now() - t0 < bound)
              corun::sleep(10ms);
            return n.load() == kTasks;
          };
          all_parked = wait_for(parked);
          woke_early = woke.load();  // the gate is still closed: 0
          gate.done();
          all_woke = wait_for(woke);
        },
        2);
    INFO(parked.load(), " of ", kTasks, " tasks parked, ", woke.load(), " woke");
    CHECK(all_parked);
    CHECK(woke_early == 0);
    CHECK(all_woke);
  }
}

// ---- death tests ---------------------------------------------------------------------

namespace {
__attribute__((noinline)) int recurse(int depth) {
  volatile char pad[512];
  pad[0] = static_cast<char>(depth);
  if (depth < 1000000000) return recurse(depth + 1) + pad[0];
  return pad[0];
}
}  // namespace

CORUN_TEST_CHILD(overflow) {
  corun::Config cfg;
  cfg.procs = 1;
  corun::run(cfg, [] {
    corun::WaitGroup wg;
    wg.add(1);
    corun::go([&] {
      recurse(0);
      wg.done();
    });
    wg.wait();
  });
  return 0;
}

// Recursion of max + 1 frames of over 512 bytes each, then returns. On an unguarded stack
// an overflow faults nowhere: the guard page below it is mapped RW, and so is the top of
// the slot below, where its canary lies.
__attribute__((noinline)) int dig(int depth, int max) {
  volatile char pad[512];
  for (auto& c : pad) c = static_cast<char>(0xA5);
  if (depth < max) return dig(depth + 1, max) + pad[7];
  return pad[3];
}

// Uses up the guard-page budget with parked tasks, then overflows an unguarded stack.
CORUN_TEST_CHILD(overflow_unguarded) {
  corun::Config cfg;
  cfg.procs = 1;
  corun::run(cfg, [] {
    corun::WaitGroup gate, parked, wg;
    const int n = 20000;  // > the ~16000 guards that fit in half of vm.max_map_count
    gate.add(1);
    parked.add(n);
    for (int i = 0; i < n; i++)
      corun::go([&] {
        parked.done();
        gate.wait();
      });
    parked.wait();
    wg.add(1);
    corun::go([&] {
      // CORUN_STACK_KB=16: ~2 KiB past the RW guard page, into the slot below (an
      // overflow within the guard page harms nobody and is not reported).
      dig(0, (16 * 1024 + 4096 + 2048) / 512);
      wg.done();
    });
    wg.wait();
  });
  return 0;
}

// Runs ~60 ms so that schedtrace=10 prints a few lines.
CORUN_TEST_CHILD(trace) {
  corun::Config cfg;
  cfg.procs = 2;
  corun::run(cfg, [] {
    auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(60)) corun::yield();
  });
  return 0;
}

CORUN_TEST_CHILD(escape) {
  corun::Config cfg;
  cfg.procs = 1;
  corun::run(cfg, [] {
    corun::WaitGroup wg;
    wg.add(1);
    corun::go([] { throw std::runtime_error("kaboom"); });
    wg.wait();
  });
  return 0;
}

TEST_SUITE("unit.sched.death") {
  TEST_CASE("CORUN_DEBUG: schedtrace prints per-P lines, stealorder prints the plan") {
    auto r = t::child_run("trace", {"CORUN_DEBUG=schedtrace=10,stealorder=1"});
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(r.output.find("corun: SCHED ") != std::string::npos);
    CHECK(r.output.find(" timerspin=") != std::string::npos);  // the measured timer spin
    CHECK(r.output.find(" runs=[") != std::string::npos);      // corun::stats()'s counters
    CHECK(r.output.find(" parks=[") != std::string::npos);
    CHECK(r.output.find("procs=2 idleprocs=") != std::string::npos);
    CHECK(r.output.find("victims") != std::string::npos);
  }

  TEST_CASE("an exception escaping a task prints its id and what() and aborts") {
    auto r = t::child_run("escape");
    CHECK(r.signaled(SIGABRT));
    CHECK(r.output.find("terminated by exception: kaboom") != std::string::npos);
    CHECK(r.output.find("corun: task ") != std::string::npos);
  }

#if !CORUN_OS_SANITIZER_OWNS_SEGV  // ASan/TSan own SIGSEGV
  TEST_CASE("a task overflowing its stack is named, not silent corruption") {
    auto r = t::child_run("overflow", {"CORUN_STACK_KB=64"});
    CHECK(WIFSIGNALED(r.status));
    CHECK(r.output.find("overflowed its stack") != std::string::npos);
  }

  TEST_CASE("beyond the guard budget, the canary names an overflowing task") {
    auto r = t::child_run("overflow_unguarded", {"CORUN_STACK_KB=16"});
    CHECK(r.signaled(SIGABRT));
    CHECK(r.output.find("overflowed its stack") != std::string::npos);
    CHECK(r.output.find("canary") != std::string::npos);
  }
#endif
}
