// tests/sched/runq_test.cpp — the local run queue alone (no runtime): counts, half
// steals, overflow batches, runnext, every sequence of operations against a model, and
// every task taken exactly once while an owner pushes and pops against concurrent thieves.
//
// Size-agnostic: every count derives from RunQueue::kSize, so the same cases run in the
// normal build (256 slots) and in `make test RUNQ=4` (CORUN_RUNQ_SIZE=4), where the short
// exhaustive sequences below reach a full ring, overflow and wrap-around that 256 slots
// never reach in a few operations (Tokio's loom build shrinks its queue the same way).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "arch/sanitizer.hpp"

#include "sched/runq.hpp"

using namespace corun::sched;

namespace {
struct NoBackoff final : RunnextBackoff {
  void wait() const noexcept override {}
};
}  // namespace

TEST_SUITE("unit.sched.runq") {
  TEST_CASE("push and pop keep FIFO order; runnext comes first") {
    auto q = std::make_unique<RunQueue>();
    std::vector<Task> tasks(10);
    LocalEnd local(*q);
    Task* of = nullptr;
    const int n = static_cast<int>(std::min<std::uint32_t>(5, RunQueue::kSize));  // no overflow
    for (int i = 0; i < n; i++) CHECK(local.push_back(&tasks[i], &of) == 0);
    CHECK(q->size_hint() == static_cast<std::uint32_t>(n));
    CHECK(local.put_next(&tasks[9]) == nullptr);
    CHECK(local.put_next(&tasks[8]) == &tasks[9]);  // displaced one goes back to the caller
    CHECK(local.pop() == &tasks[8]);
    for (int i = 0; i < n; i++) CHECK(local.pop() == &tasks[i]);
    CHECK(local.pop() == nullptr);
    CHECK(q->empty_hint());
  }

  TEST_CASE("a full ring overflows half of itself plus the new task, oldest first") {
    auto q = std::make_unique<RunQueue>();
    std::vector<Task> tasks(RunQueue::kSize + 1);
    LocalEnd local(*q);
    Task* of = nullptr;
    for (std::uint32_t i = 0; i < RunQueue::kSize; i++)
      REQUIRE(local.push_back(&tasks[i], &of) == 0);
    std::uint32_t n = local.push_back(&tasks[RunQueue::kSize], &of);
    REQUIRE(n == RunQueue::kSize / 2 + 1);
    Task* t = of;
    for (std::uint32_t i = 0; i < RunQueue::kSize / 2; i++, t = t->next) CHECK(t == &tasks[i]);
    CHECK(t == &tasks[RunQueue::kSize]);
    CHECK(t->next == nullptr);
    for (std::uint32_t i = RunQueue::kSize / 2; i < RunQueue::kSize; i++)
      CHECK(local.pop() == &tasks[i]);
  }

  TEST_CASE("a steal takes half (rounded up), runnext only when asked") {
    auto victim = std::make_unique<RunQueue>();
    auto thief = std::make_unique<RunQueue>();
    // An odd count that fits the ring, so "rounded up" shows: 9 of 256 slots, 3 of 4.
    const std::uint32_t k = std::min<std::uint32_t>(9, RunQueue::kSize - 1);
    const std::uint32_t half = k - k / 2;
    std::vector<Task> tasks(k + 1);
    LocalEnd vl(*victim), tl(*thief);
    Task* of = nullptr;
    for (std::uint32_t i = 0; i < k; i++) REQUIRE(vl.push_back(&tasks[i], &of) == 0);
    vl.put_next(&tasks[k]);
    NoBackoff nb;
    std::uint32_t n = StealEnd(*victim).steal_into(tl, false, false, nb);
    CHECK(n == half);
    tl.publish(n);
    for (std::uint32_t i = 0; i < half; i++) CHECK(tl.pop() == &tasks[i]);
    CHECK(tl.pop() == nullptr);
    // Drain the victim's ring; then only take_next reaches runnext.
    for (std::uint32_t i = half; i < k; i++) CHECK(vl.pop_ring() == &tasks[i]);
    CHECK(StealEnd(*victim).steal_into(tl, false, true, nb) == 0);
    CHECK(StealEnd(*victim).steal_into(tl, true, true, nb) == 1);
    tl.publish(1);
    CHECK(tl.pop() == &tasks[k]);
    CHECK(victim->empty_hint());  // runnext taken too
  }

  TEST_CASE("every short sequence of owner and thief operations matches a model") {
    // Exhaustive over all sequences of kLen operations (push, put_next, pop, steal without
    // and with runnext), from a fresh queue and from indices about to wrap past 2^32. The
    // model: a FIFO ring of at most kSize, the runnext slot, and the overflow rule (a full
    // ring gives its oldest half plus the new task, oldest first). At 4 slots (RUNQ=4) the
    // sequences fill, overflow and wrap the ring many times; at 256 they check the rest.
    constexpr int kOps = 5;
    constexpr int kLen = (CORUN_ASAN || CORUN_TSAN) ? 6 : 8;
    int sequences = 0;
    std::string first_bad;
    auto fail = [&](const std::vector<int>& seq, int step, const std::string& what) {
      if (!first_bad.empty()) return;
      first_bad = "ops";
      for (int op : seq) first_bad += " " + std::to_string(op);
      first_bad += " (0 push, 1 put_next, 2 pop, 3 steal, 4 steal+next), step " +
                   std::to_string(step) + ": " + what;
    };
    auto q = std::make_unique<RunQueue>();
    auto thief = std::make_unique<RunQueue>();
    std::vector<Task> tasks(kLen * 2 + 1);
    const int id_count = static_cast<int>(tasks.size());
    auto id = [&](Task* t) { return t ? static_cast<int>(t - tasks.data()) : -1; };
    NoBackoff nb;
    for (std::uint32_t start : {0u, 0xffffffffu - 2}) {
      if (!first_bad.empty()) break;
      std::vector<int> seq(kLen, 0);
      for (;;) {
        sequences++;
        q->reset(start);
        LocalEnd local(*q);
        std::deque<int> ring;  // the model
        int next = -1;
        int fresh = 0;
        // Owner push as runqput does it; checks the overflow batch against the model.
        auto push = [&](int t, int step) {
          Task* of = nullptr;
          std::uint32_t n = local.push_back(&tasks[static_cast<std::size_t>(t)], &of);
          if (ring.size() < RunQueue::kSize) {
            if (n != 0) fail(seq, step, "push overflowed a ring that was not full");
            ring.push_back(t);
            return;
          }
          std::vector<int> want(ring.begin(), ring.begin() + RunQueue::kSize / 2);
          ring.erase(ring.begin(), ring.begin() + RunQueue::kSize / 2);
          want.push_back(t);
          std::vector<int> got;
          for (Task* x = of; x && got.size() <= want.size(); x = x->next) got.push_back(id(x));
          if (n != want.size() || got != want) fail(seq, step, "wrong overflow batch");
        };
        for (int step = 0; step < kLen && first_bad.empty(); step++) {
          switch (seq[static_cast<std::size_t>(step)]) {
            case 0:
              push(fresh++, step);
              break;
            case 1: {
              const int t = fresh++;
              Task* old = local.put_next(&tasks[static_cast<std::size_t>(t)]);
              if (id(old) != next) fail(seq, step, "put_next displaced the wrong task");
              next = t;
              if (old) push(id(old), step);
              break;
            }
            case 2: {
              int want = next;
              if (want >= 0) {
                next = -1;
              } else if (!ring.empty()) {
                want = ring.front();
                ring.pop_front();
              }
              if (id(local.pop()) != want) fail(seq, step, "pop returned the wrong task");
              break;
            }
            default: {
              const bool take_next = seq[static_cast<std::size_t>(step)] == 4;
              thief->reset(start + 7);  // the thief's ring is empty, at its own offset
              LocalEnd tl(*thief);
              std::uint32_t n = StealEnd(*q).steal_into(tl, take_next, false, nb);
              std::vector<int> want;
              const std::size_t half = ring.size() - ring.size() / 2;
              if (half > 0) {
                want.assign(ring.begin(), ring.begin() + static_cast<std::ptrdiff_t>(half));
                ring.erase(ring.begin(), ring.begin() + static_cast<std::ptrdiff_t>(half));
              } else if (take_next && next >= 0) {
                want.push_back(next);
                next = -1;
              }
              tl.publish(n);
              std::vector<int> got;
              while (Task* x = tl.pop()) got.push_back(id(x));
              if (n != want.size() || got != want) fail(seq, step, "steal took the wrong tasks");
              break;
            }
          }
          if (q->size_hint() != ring.size() + (next >= 0 ? 1 : 0))
            fail(seq, step, "size_hint disagrees with the model");
          if (fresh > id_count) fail(seq, step, "test bug: out of tasks");
        }
        // Drain: what is left comes out runnext first, then the ring in order.
        std::vector<int> want;
        if (next >= 0) want.push_back(next);
        want.insert(want.end(), ring.begin(), ring.end());
        std::vector<int> got;
        while (Task* x = local.pop()) got.push_back(id(x));
        if (got != want) fail(seq, kLen, "drain returned the wrong tasks");
        // Next sequence (odometer over kOps^kLen).
        std::size_t i = 0;
        while (i < seq.size() && ++seq[i] == kOps) seq[i++] = 0;
        if (i == seq.size() || !first_bad.empty()) break;
      }
    }
    MESSAGE(sequences << " sequences of " << kLen << " operations, ring of " << RunQueue::kSize);
    CHECK_MESSAGE(first_bad.empty(), first_bad);
  }

  TEST_CASE("owner and thieves racing: every task is taken exactly once") {
    constexpr int kTasks = 200000;
    constexpr int kThieves = 3;
    std::vector<Task> tasks(kTasks);
    std::vector<std::atomic<int>> taken(kTasks);
    for (auto& t : taken) t.store(0);
    auto owner_q = std::make_unique<RunQueue>();
    std::vector<std::unique_ptr<RunQueue>> thief_q;
    for (int i = 0; i < kThieves; i++) thief_q.push_back(std::make_unique<RunQueue>());
    std::atomic<int> done_count{0};
    std::atomic<bool> owner_done{false};
    auto index_of = [&](Task* t) { return static_cast<int>(t - tasks.data()); };

    std::vector<std::thread> thieves;
    for (int k = 0; k < kThieves; k++) {
      thieves.emplace_back([&, k] {
        NoBackoff nb;
        LocalEnd mine(*thief_q[k]);
        for (;;) {
          std::uint32_t n = StealEnd(*owner_q).steal_into(mine, (k & 1) != 0, true, nb);
          if (n) {
            mine.publish(n);
            while (Task* t = mine.pop()) {
              taken[index_of(t)].fetch_add(1);
              done_count.fetch_add(1);
            }
          } else if (owner_done.load()) {
            break;
          }
        }
      });
    }
    LocalEnd local(*owner_q);
    Task* of = nullptr;
    auto take_batch = [&](Task* t) {
      for (; t; t = t->next) {
        taken[index_of(t)].fetch_add(1);
        done_count.fetch_add(1);
      }
    };
    for (int i = 0; i < kTasks; i++) {
      Task* t = &tasks[i];
      if (i % 3 == 0) t = local.put_next(t);  // as runqput(next=true): displaced one to the ring
      if (t && local.push_back(t, &of)) take_batch(of);
      if (i % 7 == 0) {
        if (Task* p = local.pop()) {
          taken[index_of(p)].fetch_add(1);
          done_count.fetch_add(1);
        }
      }
    }
    while (Task* t = local.pop()) {
      taken[index_of(t)].fetch_add(1);
      done_count.fetch_add(1);
    }
    owner_done.store(true);
    for (auto& th : thieves) th.join();
    int dup = 0;
    for (auto& t : taken) dup += t.load() > 1 ? 1 : 0;
    CHECK(dup == 0);
    CHECK(done_count.load() == kTasks);  // none lost
  }
}
