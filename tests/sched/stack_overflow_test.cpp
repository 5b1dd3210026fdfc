// tests/sched/stack_overflow_test.cpp — stack overflows of real tasks, end to end: each
// scenario runs in a child process (tests/support.hpp "death tests") and the parent checks
// how it died and what it printed.
//
// Unguarded stacks come from os::set_auto_guard_budget_for_testing(0) (every stack but each
// slab's first has no guard page) instead of 16'000 parked tasks; one scenario does it the
// real way (20'000 parked tasks) to see the warning's real numbers. Neighbours below the
// overflowing task are tasks parked for good, so a damaged neighbour is never resumed and
// the process cannot hang on it; each child also bounds itself (a 10 s sleep, then exit 0,
// which fails the test instead of hanging it).
//
// Sanitizer builds: the overflow scenarios are skipped. ASan and TSan own SIGSEGV (corun
// installs no handler: CORUN_OS_SANITIZER_OWNS_SEGV), and a write past a task's stack lands
// in a neighbour's frames, whose shadow ASan has poisoned: ASan reports it first, in its own
// words. The warning scenario runs everywhere.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "os/stack.hpp"
#include "sched/park.hpp"
#include "sched/task.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
namespace t = corun::test;

namespace {

void say_id() {
  std::fprintf(stderr, "child: task %llu overflows\n",
               static_cast<unsigned long long>(corun::sched::current_task()->id));
}

// The task id the child announced, or "" if none.
std::string announced_id(const std::string& out) {
  const std::string key = "child: task ";
  auto at = out.find(key);
  if (at == std::string::npos) return "";
  auto end = out.find(' ', at + key.size());
  return out.substr(at + key.size(), end - at - key.size());
}

// A zero fill of N bytes on the stack: the frame reaches N bytes below the caller.
template <std::size_t N>
__attribute__((noinline)) int zero_fill() {
  std::array<char, N> buf{};
  asm volatile("" : : "r"(buf.data()) : "memory");  // the fill must happen
  return buf[N / 2];
}

__attribute__((noinline)) int recurse_forever(int depth) {
  volatile char pad[512];
  pad[0] = static_cast<char>(depth);
  if (depth < 1000000000) return recurse_forever(depth + 1) + pad[0];
  return pad[0];
}

// Parks `n` tasks for good (their stacks are carved before the next task's), runs `fn` in a
// new task, then sleeps 10 s: an overflow that is not reported ends with exit 0.
template <class F>
void with_parked_neighbours(int n, F fn) {
  corun::Config cfg;
  cfg.procs = 1;
  corun::run(cfg, [n, fn] {
    auto gate = std::make_shared<corun::WaitGroup>();
    gate->add(1);
    for (int i = 0; i < n; i++) corun::go([gate] { gate->wait(); });
    corun::go([fn] { fn(); });
    corun::sleep(10s);
  });
}

}  // namespace

// 70 KiB of zeros on a 64 KiB unguarded stack: through its RW guard page into the top of
// the parked neighbour below (the canary there, then its task record), ~2 KiB past
// lo - page. No fault: the canary names it when the task exits.
CORUN_TEST_CHILD(stack_zero_fill) {
  corun::os::set_auto_guard_budget_for_testing(0);
  with_parked_neighbours(8, [] {
    say_id();
    (void)zero_fill<70 * 1024>();
  });
  return 0;
}

// The same after a zero fill that returns and parks (not exiting): caught at the park.
CORUN_TEST_CHILD(stack_zero_fill_park) {
  corun::os::set_auto_guard_budget_for_testing(0);
  with_parked_neighbours(8, [] {
    say_id();
    (void)zero_fill<70 * 1024>();
    corun::sleep(5s);
  });
  return 0;
}

// The case, the real way: 20'000 parked tasks use up the guard budget (at the
// default vm.max_map_count), then a 16 KiB task zero-fills 22 KiB (past lo - page).
CORUN_TEST_CHILD(stack_zero_fill_20k) {
  with_parked_neighbours(20000, [] {
    say_id();
    (void)zero_fill<22 * 1024>();
  });
  return 0;
}

// Infinite recursion on an unguarded stack: down through the parked neighbours to the
// slab guard, a fault inside the slabs below the running stack.
CORUN_TEST_CHILD(stack_recursion_unguarded) {
  corun::os::set_auto_guard_budget_for_testing(0);
  with_parked_neighbours(4, [] {
    say_id();
    (void)recurse_forever(0);
  });
  return 0;
}

// The guarded case, unchanged: a guard page hit, and no unguarded-stack warning.
CORUN_TEST_CHILD(stack_recursion_guarded) {
  with_parked_neighbours(4, [] {
    say_id();
    (void)recurse_forever(0);
  });
  return 0;
}

// Tasks on unguarded stacks never touch [hi, hi + kCanaryBytes), where the canary of the
// stack above lies: 300 tasks, each with its record below hi, deep-ish frames, yields and a
// sleep (the scheduler checks every canary at each switch: a touched one aborts), exit 0.
__attribute__((noinline)) int use_frames(int depth) {
  volatile char pad[256];
  for (auto& c : pad) c = static_cast<char>(depth);
  if (depth > 0) return use_frames(depth - 1) + pad[7];
  corun::yield();
  return pad[0];
}

CORUN_TEST_CHILD(stack_reserved_top) {
  corun::os::set_auto_guard_budget_for_testing(0);
  corun::Config cfg;
  cfg.procs = 2;
  std::atomic<int> bad{0};
  corun::run(cfg, [&bad] {
    corun::WaitGroup wg;
    wg.add(300);
    for (int i = 0; i < 300; i++)
      corun::go([&wg, &bad, i] {
        corun::sched::Task* t = corun::sched::current_task();
        const auto* rec_end = reinterpret_cast<const std::byte*>(t) + sizeof(*t);
        const bool ok = rec_end <= t->stack.hi && t->stack.canary != t->stack.hi &&
                        (t->stack.canary == nullptr || t->stack.canary < t->stack.lo);
        (void)use_frames(20 + i % 20);
        corun::sleep(1ms);
        (void)use_frames(10);
        if (!ok) bad.fetch_add(1, std::memory_order_relaxed);  // a counter
        wg.done();
      });
    wg.wait();
  });
  std::fprintf(stderr, "child: %d tasks with a record at or above hi\n", bad.load());
  return bad.load() == 0 ? 0 : 1;
}

// Three waves of short tasks on unguarded stacks: one warning, and a clean exit.
CORUN_TEST_CHILD(stack_warn_once) {
  corun::os::set_auto_guard_budget_for_testing(0);
  corun::Config cfg;
  cfg.procs = 2;
  corun::run(cfg, [] {
    for (int wave = 0; wave < 3; wave++) {
      corun::WaitGroup wg;
      wg.add(100);
      for (int i = 0; i < 100; i++) corun::go([&wg] { wg.done(); });
      wg.wait();
    }
  });
  return 0;
}

namespace {

std::size_t count_of(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) n++;
  return n;
}

[[maybe_unused]] long max_map_count() {
  std::ifstream f("/proc/sys/vm/max_map_count");
  long v = 65530;
  f >> v;
  return v;
}

[[maybe_unused]] void check_named(const t::ChildResult& r, const char* how) {
  INFO(r.output);
  const std::string id = announced_id(r.output);
  REQUIRE(!id.empty());
  CHECK(r.signaled(SIGABRT));
  CHECK(r.output.find("corun: task " + id + " overflowed its stack") != std::string::npos);
  CHECK(r.output.find(how) != std::string::npos);
}

}  // namespace

TEST_SUITE("unit.sched.stack") {
#if !CORUN_OS_SANITIZER_OWNS_SEGV  // see the file comment
  TEST_CASE("a zero fill past an unguarded stack is named by the canary at exit") {
    check_named(t::child_run("stack_zero_fill", {"CORUN_STACK_KB=64"}), "canary");
  }

  TEST_CASE("a zero fill past an unguarded stack is named by the canary at the next park") {
    check_named(t::child_run("stack_zero_fill_park", {"CORUN_STACK_KB=64"}), "canary");
  }

  TEST_CASE("with 20'000 parked tasks: the warning's numbers, then the zero fill is named") {
    auto r = t::child_run("stack_zero_fill_20k", {"CORUN_STACK_KB=16"});
    const long limit = max_map_count();
    if (limit / 4 >= 20000) {
      MESSAGE("vm.max_map_count " << limit << " guards all 20'000 stacks: skipped");
      return;
    }
    check_named(r, "canary");
    CHECK(count_of(r.output, "task stacks guarded") == 1);
    CHECK(r.output.find("(vm.max_map_count=" + std::to_string(limit) + ")") != std::string::npos);
    CHECK(r.output.find("sysctl -w vm.max_map_count=262144") != std::string::npos);
  }

  TEST_CASE("deep recursion on an unguarded stack is named at the fault, below the stack") {
    check_named(t::child_run("stack_recursion_unguarded", {"CORUN_STACK_KB=64"}),
                "fault in a guard page below the stack");
  }

  TEST_CASE("deep recursion on a guarded stack: a guard page hit, and no warning") {
    auto r = t::child_run("stack_recursion_guarded", {"CORUN_STACK_KB=64"});
    check_named(r, "guard page hit");
    CHECK(count_of(r.output, "task stacks guarded") == 0);
  }
#endif

  TEST_CASE("tasks never touch the reserved top of their stack (the canary above)") {
    auto r = t::child_run("stack_reserved_top", {"CORUN_STACK_KB=64"});
    INFO(r.output);
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(r.output.find("overflowed") == std::string::npos);
  }

  TEST_CASE("tasks on unguarded stacks: one warning per process, with the remedy") {
    auto r = t::child_run("stack_warn_once");
    INFO(r.output);
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(count_of(r.output, "task stacks guarded (vm.max_map_count=") == 1);
    CHECK(r.output.find("have no guard page") != std::string::npos);
    CHECK(r.output.find("raise vm.max_map_count") != std::string::npos);
  }
}
