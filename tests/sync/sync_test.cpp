// tests/sync/sync_test.cpp — WaitGroup and Mutex: counting, exclusion under contention
// across Ps, hand-off, foreign threads mixed with tasks.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "support.hpp"

namespace t = corun::test;

namespace {
// Starts a task that takes mu, appends id to order, and lets go (wg counts it). The
// ordering tests run at 1 P, so order needs no lock of its own beyond mu.
void spawn_locker(corun::Mutex& mu, corun::WaitGroup& wg, std::vector<int>& order, int id) {
  wg.add(1);
  corun::go([&mu, &wg, &order, id] {
    mu.lock();
    order.push_back(id);
    mu.unlock();
    wg.done();
  });
}
}  // namespace

TEST_SUITE("rt.sync") {
  TEST_CASE("WaitGroup: wait on zero returns; negative counter throws and is not applied") {
    t::run([] {
      corun::WaitGroup wg;
      wg.wait();
      CHECK_THROWS_AS(wg.done(), std::logic_error);
      wg.add(2);
      CHECK_THROWS_AS(wg.add(-3), std::logic_error);
      wg.done();
      wg.done();
      wg.wait();
    });
    corun::WaitGroup outside;  // usable without a runtime too
    outside.add(1);
    outside.done();
    outside.wait();
  }

  TEST_CASE("WaitGroup: many waiters are all released, tasks and foreign threads alike") {
    const int kWaiters = 200;
    std::atomic<int> released{0};
    t::run([&] {
      corun::WaitGroup gate, all;
      gate.add(1);
      for (int i = 0; i < kWaiters; i++) {
        all.add(1);
        corun::go([&] {
          gate.wait();
          released++;
          all.done();
        });
      }
      std::thread foreign([&] {
        gate.wait();
        released++;
      });
      corun::yield();
      gate.done();
      all.wait();
      foreign.join();
    });
    CHECK(released.load() == kWaiters + 1);
  }

  TEST_CASE("Mutex: exclusion under contention from many tasks on all Ps") {
    const int kTasks = 16, kIters = 20000 / t::kScale;
    long counter = 0;  // deliberately not atomic: the mutex protects it
    t::run([&] {
      corun::Mutex mu;
      corun::WaitGroup wg;
      for (int i = 0; i < kTasks; i++) {
        wg.add(1);
        corun::go([&] {
          for (int k = 0; k < kIters; k++) {
            mu.lock();
            counter++;
            if (k % 64 == 0) corun::yield();  // hold it across a switch sometimes
            mu.unlock();
          }
          wg.done();
        });
      }
      wg.wait();
    });
    CHECK(counter == static_cast<long>(kTasks) * kIters);
  }

  TEST_CASE("Mutex: try_lock, and foreign threads contending with tasks") {
    long counter = 0;
    t::run([&] {
      corun::Mutex mu;
      CHECK(mu.try_lock());
      CHECK_FALSE(mu.try_lock());
      mu.unlock();
      corun::WaitGroup wg;
      const int kIters = 5000 / t::kScale;
      for (int i = 0; i < 4; i++) {
        wg.add(1);
        corun::go([&] {
          for (int k = 0; k < kIters; k++) {
            std::lock_guard<corun::Mutex> g(mu);
            counter++;
          }
          wg.done();
        });
      }
      std::thread foreign([&] {
        for (int k = 0; k < kIters; k++) {
          std::lock_guard<corun::Mutex> g(mu);
          counter++;
        }
      });
      wg.wait();
      foreign.join();
      CHECK(counter == 5L * kIters);
    });
  }

  TEST_CASE("Mutex: a waiter is not starved by a task re-locking in a loop") {
    // Go's TestMutexFairness: a hog holds the mutex across a switch, again and again; a
    // barging hog would win every race, so only starvation mode lets the other task in.
    // Without it the main task would wait forever; the hog gives up after a bound, so
    // starvation fails the CHECK (after 20 s) instead of hanging the suite.
    const double bound = 20;  // seconds; a hang bound, not a timing assert
    double took = -1;
    int hog_rounds = 0;
    t::run([&] {
      corun::Mutex mu;
      std::atomic<bool> stop{false};
      corun::WaitGroup wg;
      wg.add(1);
      auto t0 = std::chrono::steady_clock::now();
      corun::go([&] {
        while (!stop.load() && t::seconds_since(t0) < bound) {
          mu.lock();
          corun::yield();  // hold it across a switch
          mu.unlock();
          hog_rounds++;
        }
        wg.done();
      });
      corun::yield();  // let the hog start
      for (int i = 0; i < 10; i++) {
        mu.lock();
        mu.unlock();
      }
      took = t::seconds_since(t0);
      stop = true;
      wg.wait();
    });
    INFO("10 lock/unlock took ", took, " s while the hog re-locked ", hog_rounds, " times");
    CHECK(took < bound);
  }

  TEST_CASE("Mutex: a running task takes a free mutex before the waiter it woke") {
    // Normal mode barges (Go's sync.Mutex): unlock wakes the waiter, but at 1 P it is only
    // runnable, and the unlocker's next lock finds the mutex free with kWoken set and takes
    // it inline (one CAS from the word it read). Twice: the first waiter, woken again,
    // re-queues at the head while the second queues behind it; the unlocks in between wake
    // nobody twice. Once the first has run, the word must be clean: its unlock wakes the
    // second (a kWoken left set would leave it parked, and wg.wait() would never return).
    std::vector<int> order;
    t::run(
        [&] {
          corun::Mutex mu;
          corun::WaitGroup wg;
          mu.lock();
          for (int w = 1; w <= 2; w++) {
            spawn_locker(mu, wg, order, w);
            for (int k = 0; k < 3; k++) corun::yield();  // it parks on the mutex
            mu.unlock();                                 // wakes it: runnable, not running
            mu.lock();                                   // barges ahead of it
            order.push_back(-w);
            if (w == 2) mu.unlock();
          }
          wg.wait();
          CHECK(mu.try_lock());
          mu.unlock();
        },
        1);
    CHECK(order == std::vector<int>{-1, -2, 1, 2});
  }

  TEST_CASE("Mutex: ownership is handed to the longest waiter (FIFO)") {
    std::vector<int> order;
    t::run(
        [&] {
          corun::Mutex mu;
          corun::WaitGroup wg;
          mu.lock();
          for (int i = 0; i < 5; i++) {
            spawn_locker(mu, wg, order, i);
            for (int k = 0; k < 3; k++) corun::yield();  // let it queue before the next
          }
          mu.unlock();
          wg.wait();
        },
        1);
    CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  }
}
