// perf/bench_sched.cpp — scheduler benchmarks: spawning, yielding, parking hand-offs and
// the memory a parked task costs. Public API only (corun::go, yield, procs, WaitGroup,
// Mutex), so they run unchanged against any runtime build and compare with Go's
// runtime benchmarks (scripts/go-compare --map CreateGoroutines=CreateTasks,...).
//
// Each benchmark says what its op is; ns/op = timed wall time / b.n. Every task a body
// starts has finished (or is released and joined) before the body returns.
//
// Rejected: channels for the completion signals Go's versions use (chan is a layer above
// sched; a WaitGroup is the same one wake-up); pinning tasks to Ps (the public API has no
// such thing, and placement is what the scheduler is measured on).
#include <corun/runtime.hpp>
#include <corun/sync.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>

#include "bench.hpp"

namespace {

using corun::bench::B;
using corun::bench::PB;

// ---- CreateTasks, CreateTasksParallel -------------------------------------------------
// Go's benchmarkCreateGoroutines(b, procs) (runtime/proc_test.go): `procs` chains; a
// chain link f(k) spawns f(k-1) and exits, f(0) signals the main task. The main task
// starts each chain with f(b.n / procs) and waits for all signals.
// op = one task spawned, run and finished (b.n/procs + 1 tasks per chain, as in Go).

void chain_link(corun::WaitGroup* done, std::int64_t k) {
  if (k == 0) {
    done->done();
    return;
  }
  corun::go([done, k] { chain_link(done, k - 1); });
}

void create_tasks(B& b, int chains) {
  corun::WaitGroup done;
  done.add(chains);
  const std::int64_t per_chain = b.n / chains;
  for (int i = 0; i < chains; ++i) corun::go([&done, per_chain] { chain_link(&done, per_chain); });
  done.wait();
}

CORUN_BENCHMARK(CreateTasks) {
  create_tasks(b, 1);
}

CORUN_BENCHMARK(CreateTasksParallel) {
  create_tasks(b, b.procs());
}

// ---- Yield ----------------------------------------------------------------------------
// op = one corun::yield() by the measured (main) task while procs() background tasks
// yield in a loop: one switch away from the main task and back, plus whatever tasks its
// P runs in between (with P = 1: main + 1 background task, so an op is two switches).
// Background tasks are started and running before the timer starts.

CORUN_BENCHMARK(Yield) {
  const int others = b.procs();
  // Both flags are plain signals that carry no data: relaxed loads/stores suffice; the
  // WaitGroup orders the background tasks' exit before the body returns.
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  corun::WaitGroup finished;
  finished.add(others);
  for (int i = 0; i < others; ++i) {
    corun::go([&] {
      started.fetch_add(1, std::memory_order_relaxed);
      while (!stop.load(std::memory_order_relaxed)) corun::yield();
      finished.done();
    });
  }
  while (started.load(std::memory_order_relaxed) < others) corun::yield();
  b.reset_timer();
  for (std::int64_t i = 0; i < b.n; ++i) corun::yield();
  b.stop_timer();
  stop.store(true, std::memory_order_relaxed);
  finished.wait();
}

// ---- WaitGroupHandoff -----------------------------------------------------------------
// op = one round trip between two tasks: main releases the partner through one WaitGroup
// and parks on another until the partner releases it back (two wake-ups, two parks).
// Each side re-arms (add(1)) the WaitGroup it waits on before releasing the other, so
// no done() ever runs on a zero counter.

CORUN_BENCHMARK(WaitGroupHandoff) {
  const std::int64_t rounds = b.n;
  corun::WaitGroup to_partner, to_main, finished;
  to_partner.add(1);
  finished.add(1);
  corun::go([&, rounds] {
    for (std::int64_t i = 0; i < rounds; ++i) {
      to_partner.wait();
      if (i + 1 < rounds) to_partner.add(1);  // re-arm before releasing main
      to_main.done();
    }
    finished.done();
  });
  b.reset_timer();
  for (std::int64_t i = 0; i < rounds; ++i) {
    to_main.add(1);  // re-arm before releasing the partner
    to_partner.done();
    to_main.wait();
  }
  b.stop_timer();
  finished.wait();
}

// ---- MutexHandoff ---------------------------------------------------------------------
// op = one lock() + unlock() of one shared Mutex, by any of procs() tasks (run_parallel)
// that do nothing else. With P = 1 the single task never meets contention (tasks switch
// only when they block), so -cpu 1 measures the uncontended fast path; with P >= 2 every
// op may park and be woken (corun's Mutex is Go's: barging in normal mode, FIFO hand-off
// in starvation mode; see sync.hpp).

CORUN_BENCHMARK(MutexHandoff) {
  corun::Mutex mu;
  std::int64_t counter = 0;  // guarded by mu
  b.run_parallel([&](PB& pb) {
    while (pb.next()) {
      mu.lock();
      ++counter;
      mu.unlock();
    }
  });
  b.stop_timer();
  if (counter != b.n)
    throw std::logic_error("MutexHandoff: " + std::to_string(counter) +
                           " increments under the "
                           "mutex, expected " +
                           std::to_string(b.n));
}

// ---- ParkedTasks ----------------------------------------------------------------------
// op = spawn one task and run it until it parks on a shared WaitGroup (the gate).
// Metric B/task = growth of the process's resident memory (VmRSS) from before the first
// spawn to when all n tasks have reported in, / n: what a parked task costs in memory
// (Go: ~2-8 KiB per goroutine). The tasks are then released and joined, untimed.
// Runs once with a fixed n (no ramp: a ramp would reuse the stacks of its earlier runs
// and hide their memory), n = min(1'000'000, MemAvailable / 32 KiB); -benchtime Nx lowers
// it. "Reported in" = a task called parked.done() right before gate.wait(): a few may
// still be on their way to park when VmRSS is read, with their stacks already touched.

std::int64_t read_kib_field(const char* path, const std::string& field) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size())) * 1024;
  throw std::runtime_error(std::string("no ") + field + " line in " + path);
}

std::int64_t parked_tasks_n() {
  std::int64_t avail = 0;
  try {
    avail = read_kib_field("/proc/meminfo", "MemAvailable:");
  } catch (const std::exception&) {
    avail = std::int64_t{4} << 30;  // no /proc/meminfo: assume 4 GiB
  }
  return std::clamp<std::int64_t>(avail / (32 * 1024), 1'000, 1'000'000);
}

CORUN_BENCHMARK_WITH(ParkedTasks, corun::bench::Options{.max_n = parked_tasks_n()}) {
  const int n = static_cast<int>(b.n);  // <= 1'000'000 (Options::max_n)
  corun::WaitGroup gate, parked, finished;
  gate.add(1);
  parked.add(n);
  finished.add(n);
  b.stop_timer();
  const std::int64_t rss_before = read_kib_field("/proc/self/status", "VmRSS:");
  b.reset_timer();
  b.start_timer();
  for (int i = 0; i < n; ++i) {
    corun::go([&] {
      parked.done();
      gate.wait();
      finished.done();
    });
  }
  parked.wait();
  b.stop_timer();
  const std::int64_t rss_parked = read_kib_field("/proc/self/status", "VmRSS:");
  gate.done();
  finished.wait();
  b.report_metric(static_cast<double>(rss_parked - rss_before) / static_cast<double>(n), "B/task");
}

}  // namespace
