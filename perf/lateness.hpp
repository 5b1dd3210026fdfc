// perf/lateness.hpp — what the timer-lateness benchmarks share (TimerLateness/* in
// bench_time.cpp and TimerLateness/ReadDeadline in bench_net.cpp): the busy load and the
// percentile report, so every lateness row is measured and summarised the same way and
// rows from the two files can be printed side by side.
//
// Invariants: BusyLoad's tasks are all running when its constructor returns and all
// joined when stop() (or the destructor) returns; report_lateness reads raw samples in
// ns past the deadline and throws if one is negative (a wake before the deadline is a
// bug, not a fast sample).
// Rejected: a copy of these in each benchmark file (two busy loads that drift apart make
// their rows incomparable); a histogram (raw samples give exact percentiles).
#pragma once

#include <corun/runtime.hpp>
#include <corun/sync.hpp>
#include <corun/time.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"

namespace corun::bench {

enum class Load { idle, busy };

// busy load: each task spins this long on the clock between yields
inline constexpr Duration kSpinChunk = std::chrono::microseconds(5);

// `tasks` extra tasks that spin kSpinChunk on the clock and yield, until stop(). Started
// (all running) when the constructor returns; stop() joins them.
class BusyLoad {
 public:
  explicit BusyLoad(int tasks) : tasks_(tasks) {
    finished_.add(tasks);
    for (int i = 0; i < tasks; ++i) {
      corun::go([this] {
        // relaxed: plain signals; finished_ orders the tasks' exit before stop() returns.
        started_.fetch_add(1, std::memory_order_relaxed);
        while (!stop_.load(std::memory_order_relaxed)) {
          const auto until = Clock::now() + kSpinChunk;
          while (Clock::now() < until) {
          }
          corun::yield();
        }
        finished_.done();
      });
    }
    while (started_.load(std::memory_order_relaxed) < tasks_) corun::yield();
  }
  BusyLoad(const BusyLoad&) = delete;
  BusyLoad& operator=(const BusyLoad&) = delete;
  ~BusyLoad() { stop(); }
  void stop() {
    if (stop_.exchange(true, std::memory_order_relaxed)) return;
    finished_.wait();
  }

 private:
  int tasks_;
  std::atomic<bool> stop_{false};
  std::atomic<int> started_{0};
  corun::WaitGroup finished_;
};

inline std::int64_t ns(Duration d) {
  return d.count();
}

// Reports p50-ns, p99-ns, max-ns of all samples (nearest rank: the ceil(q n)-th
// smallest). Throws if a sample is negative: something woke before its deadline.
inline void report_lateness(B& b, const std::vector<std::vector<std::int64_t>>& samples,
                            const std::string& what) {
  std::vector<std::int64_t> all;
  for (const auto& v : samples) all.insert(all.end(), v.begin(), v.end());
  if (all.empty()) return;
  std::sort(all.begin(), all.end());
  if (all.front() < 0)
    throw std::logic_error(what + ": woke " + std::to_string(-all.front()) +
                           " ns before the deadline");
  auto percentile = [&all](std::size_t permille) {
    return static_cast<double>(all[(permille * all.size() + 999) / 1000 - 1]);
  };
  b.report_metric(percentile(500), "p50-ns");
  b.report_metric(percentile(990), "p99-ns");
  b.report_metric(static_cast<double>(all.back()), "max-ns");
}

}  // namespace corun::bench
