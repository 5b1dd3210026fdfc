// tests/timer/heap_test.cpp — the 4-ary timer heap against a reference multiset, under
// random push/remove/update/pop sequences, with the invariant walk after every step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "sched/timer_heap.hpp"

namespace {
using corun::sched::TimerHeap;
using TimerNode = corun::sched::HeapNode;
}  // namespace

TEST_SUITE("unit.timer.heap") {
  TEST_CASE("empty heap") {
    TimerHeap h;
    CHECK(h.empty());
    CHECK(h.top() == nullptr);
    CHECK(h.pop() == nullptr);
    CHECK(h.earliest() == TimerHeap::kNever);
    CHECK(h.verify());
  }

  TEST_CASE("pops in deadline order, with ties and extreme deadlines") {
    TimerHeap h;
    std::vector<std::int64_t> whens = {5,
                                       3,
                                       9,
                                       3,
                                       std::numeric_limits<std::int64_t>::max(),
                                       std::numeric_limits<std::int64_t>::min(),
                                       0,
                                       7,
                                       7,
                                       1};
    std::vector<TimerNode> nodes(whens.size());
    for (std::size_t i = 0; i < whens.size(); i++) {
      nodes[i].when = whens[i];
      h.push(&nodes[i]);
      REQUIRE(h.verify());
    }
    std::sort(whens.begin(), whens.end());
    for (std::int64_t w : whens) {
      CHECK(h.earliest() == w);
      TimerNode* t = h.pop();
      REQUIRE(t != nullptr);
      CHECK(t->when == w);
      CHECK_FALSE(t->in_heap());
      REQUIRE(h.verify());
    }
    CHECK(h.empty());
  }

  TEST_CASE("remove from the middle, the top and the end; update both ways") {
    TimerHeap h;
    std::vector<TimerNode> nodes(100);
    for (std::size_t i = 0; i < nodes.size(); i++) {
      nodes[i].when = static_cast<std::int64_t>((i * 37) % 101);
      h.push(&nodes[i]);
    }
    h.remove(&nodes[50]);
    h.remove(h.top());
    CHECK(h.verify());
    CHECK_FALSE(nodes[50].in_heap());
    h.update(&nodes[10], -5);  // earlier: becomes the top
    CHECK(h.top() == &nodes[10]);
    h.update(&nodes[10], 1000);  // later: sinks
    CHECK(h.top() != &nodes[10]);
    CHECK(h.verify());
    h.push(&nodes[50]);  // a removed timer can be armed again
    CHECK(nodes[50].in_heap());
    CHECK(h.verify());
    CHECK(h.size() == 99);
  }

  TEST_CASE("random operations match a reference multiset") {
    std::mt19937_64 rng(20261202);
    for (int round = 0; round < 20; round++) {
      const std::size_t n = 1 + rng() % 2000;
      std::vector<TimerNode> nodes(n);
      TimerHeap h;
      std::multiset<std::pair<std::int64_t, TimerNode*>> ref;
      for (int step = 0; step < 4000; step++) {
        TimerNode* t = &nodes[rng() % n];
        const std::int64_t when = static_cast<std::int64_t>(rng() % 1000) - 100;
        switch (rng() % 4) {
          case 0:  // arm (or re-arm through update)
          case 1:
            if (t->in_heap()) {
              ref.erase(ref.find({t->when, t}));
              h.update(t, when);
            } else {
              t->when = when;
              h.push(t);
            }
            ref.insert({when, t});
            break;
          case 2:  // stop
            if (t->in_heap()) {
              ref.erase(ref.find({t->when, t}));
              h.remove(t);
            }
            break;
          case 3:  // fire the earliest
            if (TimerNode* top = h.pop()) {
              REQUIRE(!ref.empty());
              CHECK(top->when == ref.begin()->first);
              ref.erase(ref.find({top->when, top}));
            } else {
              CHECK(ref.empty());
            }
            break;
        }
        REQUIRE(h.size() == ref.size());
        REQUIRE(h.earliest() == (ref.empty() ? TimerHeap::kNever : ref.begin()->first));
        if (step % 97 == 0) REQUIRE(h.verify());
      }
      REQUIRE(h.verify());
    }
  }

  TEST_CASE("400000 timers: every index right, drained in order") {
    const std::size_t n = 400000;
    auto nodes = std::make_unique<TimerNode[]>(n);
    TimerHeap h;
    std::mt19937_64 rng(7);
    for (std::size_t i = 0; i < n; i++) {
      nodes[i].when = static_cast<std::int64_t>(rng() >> 20);
      h.push(&nodes[i]);
    }
    REQUIRE(h.verify());
    for (std::size_t i = 0; i < n; i += 3) h.remove(&nodes[i]);  // a third stopped
    REQUIRE(h.verify());
    std::int64_t last = std::numeric_limits<std::int64_t>::min();
    std::size_t popped = 0;
    bool ordered = true;
    while (TimerNode* t = h.pop()) {
      ordered &= t->when >= last;
      last = t->when;
      popped++;
    }
    CHECK(ordered);
    CHECK(popped == n - (n + 2) / 3);
  }

  TEST_CASE("update_lazy: pushed-back timers keep their place until settle_top; drained in order") {
    const std::size_t n = 5000;
    auto nodes = std::make_unique<TimerNode[]>(n);
    TimerHeap h;
    std::mt19937_64 rng(11);
    for (std::size_t i = 0; i < n; i++) {
      nodes[i].when = static_cast<std::int64_t>(rng() % 100000);
      h.push(&nodes[i]);
    }
    // Random re-deadlines, earlier (eager) and later (lazy); keys stay lower bounds.
    for (int step = 0; step < 20000; step++) {
      TimerNode* t = &nodes[rng() % n];
      h.update_lazy(t, t->when + static_cast<std::int64_t>(rng() % 50000) - 10000);
      if (step % 997 == 0) REQUIRE(h.verify());
    }
    REQUIRE(h.verify());
    std::int64_t true_min = std::numeric_limits<std::int64_t>::max();
    for (std::size_t i = 0; i < n; i++) true_min = std::min(true_min, nodes[i].when.load());
    CHECK(h.earliest() <= true_min);  // a lower bound
    // Drain the way Timers::run does: settle a top whose key is below its deadline.
    std::int64_t last = std::numeric_limits<std::int64_t>::min();
    std::size_t popped = 0;
    bool ordered = true;
    while (!h.empty()) {
      if (h.settle_top()) continue;
      CHECK(h.earliest() == h.top()->when);
      TimerNode* t = h.pop();
      ordered &= t->when >= last;
      last = t->when;
      popped++;
    }
    CHECK(ordered);
    CHECK(popped == n);
  }
}
