// tests/sched/runq_test.cpp — the local run queue alone (no runtime): counts, half
// steals, overflow batches, runnext, and every task taken exactly once while an owner
// pushes and pops against concurrent thieves.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "sched/runq.hpp"

using namespace corun::sched;

namespace {
struct NoBackoff final : RunnextBackoff {
  void wait() const noexcept override {}
};
}  // namespace

TEST_SUITE("sched.runq") {
  TEST_CASE("push and pop keep FIFO order; runnext comes first") {
    auto q = std::make_unique<RunQueue>();
    std::vector<Task> tasks(10);
    LocalEnd local(*q);
    Task* of = nullptr;
    for (int i = 0; i < 5; i++) CHECK(local.push_back(&tasks[i], &of) == 0);
    CHECK(local.put_next(&tasks[9]) == nullptr);
    CHECK(local.put_next(&tasks[8]) == &tasks[9]);  // displaced one goes back to the caller
    CHECK(local.pop() == &tasks[8]);
    for (int i = 0; i < 5; i++) CHECK(local.pop() == &tasks[i]);
    CHECK(local.pop() == nullptr);
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
    std::vector<Task> tasks(11);
    LocalEnd vl(*victim), tl(*thief);
    Task* of = nullptr;
    for (int i = 0; i < 10; i++) vl.push_back(&tasks[i], &of);
    vl.put_next(&tasks[10]);
    NoBackoff nb;
    std::uint32_t n = StealEnd(*victim).steal_into(tl, false, false, nb);
    CHECK(n == 5);
    tl.publish(n);
    for (int i = 0; i < 5; i++) CHECK(tl.pop() == &tasks[i]);
    // Drain the victim's ring; then only take_next reaches runnext.
    for (int i = 5; i < 10; i++) CHECK(vl.pop_ring() == &tasks[i]);
    CHECK(StealEnd(*victim).steal_into(tl, false, true, nb) == 0);
    CHECK(StealEnd(*victim).steal_into(tl, true, true, nb) == 1);
    tl.publish(1);
    CHECK(tl.pop() == &tasks[10]);
    CHECK(victim->empty_hint());  // runnext taken too
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
