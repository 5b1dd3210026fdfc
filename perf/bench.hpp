// perf/bench.hpp — the benchmark harness of build/corun-bench (namespace corun::bench).
//
// A go-test-like harness: benchmarks register a function void(B&) under a name; the
// driver (bench.cpp) selects them with -bench REGEX and runs each one for every -cpu P
// count and -count repetition in a fresh runtime, corun::run(Config{.procs = P}, ...),
// inside the main task. Within that run it ramps b.n as Go's testing package does (N = 1,
// then predicted from the last ns/op to fill -benchtime) and prints the last run in Go's
// benchmark format, so benchstat, scripts/benchcmp and Go's own output sit side by side:
//
//   BenchmarkCreateTasks-2   	 5000000	       231.4 ns/op	     812.0 B/task
//
// Writing a benchmark (the parameter is always called `b`, as in Go):
//
//   CORUN_BENCHMARK(ChanSync) {            // op = one send+recv; say what op is
//     for (std::int64_t i = 0; i < b.n; ++i) ...;
//   }
//   // sub-benchmarks: register in a loop at static-initialisation time
//   static const bool reg = [] {
//     for (int c : {40, 4000})
//       corun::bench::register_benchmark("WithTimeout/concurrency=" + std::to_string(c),
//                                          [c](corun::bench::B& b) { ... });
//     return true;
//   }();
//
// Invariants: a benchmark body runs on the main task of a runtime with b.procs() Ps; it
// must do b.n operations (or divide its work by b.n) and leave no task running or parked
// that touches its stack once it returns (the runtime outlives the body across the ramp).
// The timer runs during the whole body unless the body stops/resets it. Metrics reported
// with report_metric() are cleared by reset_timer(), as Go's ResetTimer clears
// ReportMetric values; report_cpu() is not (it is a request, evaluated after the body).
//
// Rejected: Google Benchmark (its output is not Go's format and it knows nothing of
// booting a runtime per P count); a separate process per result (the runtime boots in
// microseconds, and one binary keeps `perf record` simple).
#pragma once

#include <corun/runtime.hpp>
#include <corun/sync.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace corun::bench {

// Go's `a / b` on int64. Go defines MinInt64 / -1 (it wraps) where x86's idiv traps, so
// Go's compiler tests the divisor for -1 before IDIVQ; ports of Go's work loops
// (localWork's and CommonParentCancel's `x /= x + 1`) divide through this, so that both
// runtimes run the same instructions. Without the test g++ fed each idiv's quotient
// straight into the next cqto: 2.97 ns per division on this EPYC against 2.70 with it,
// and 2.72 in a Go build of the same loop; ChanSyncWork (2000 divisions an op) read 1.05x
// Go's on the arithmetic alone. b == 0 is the caller's bug (Go panics; this traps).
inline std::int64_t go_div(std::int64_t a, std::int64_t b) noexcept {
  if (b == -1) return static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(a));
  return a / b;
}

// Per-benchmark options.
struct Options {
  // > 0: no ramp. The benchmark runs exactly once per result with b.n = max_n, or with the
  // -benchtime Nx count if that is smaller. For benchmarks whose op is costly in memory
  // (ParkedTasks) or whose metric needs one clean run; ns/op still divides by b.n.
  std::int64_t max_n = 0;
};

// One worker's view of a run_parallel loop (Go's testing.PB). Owned by one task.
class PB {
 public:
  // True while iterations remain: takes `grain` iterations at a time from the shared
  // counter so that the workers balance the load between them.
  bool next() {
    if (cache_ == 0) {
      // relaxed: the counter only hands out iteration counts; no data travels through
      // it (the WaitGroup that joins the workers publishes their writes).
      const std::uint64_t v = global_->fetch_add(grain_, std::memory_order_relaxed) + grain_;
      if (v <= bn_) {
        cache_ = grain_;
      } else if (v < bn_ + grain_) {
        cache_ = bn_ + grain_ - v;
      } else {
        return false;
      }
    }
    --cache_;
    return true;
  }

 private:
  friend class B;
  PB(std::atomic<std::uint64_t>* global, std::uint64_t grain, std::uint64_t bn)
      : global_(global), grain_(grain), bn_(bn) {}
  std::atomic<std::uint64_t>* global_;  // shared by all workers of one run_parallel call
  std::uint64_t grain_;
  std::uint64_t bn_;
  std::uint64_t cache_ = 0;  // iterations this worker still owns
};

class B {
 public:
  std::int64_t n = 0;  // iterations to do in this run; set by the harness

  void reset_timer();  // zero the elapsed time (and CPU time, metrics); keeps it running if on
  void start_timer();  // no-op if already running
  void stop_timer();   // no-op if already stopped

  // Prints `value unit` after ns/op (Go's b.ReportMetric), for per-op figures the harness
  // cannot know, e.g. "B/task". unit must be non-empty without whitespace; reporting the
  // same unit twice keeps the last value. Throws std::invalid_argument on a bad unit.
  void report_metric(double value, std::string unit);

  // Reports the CPU use of the timed region as "<v> cpu%": (user+sys CPU seconds of the
  // whole process, getrusage RUSAGE_SELF) / wall seconds * 100. 200 means two CPUs busy:
  // it shows what spinning Ms cost beside the ns/op they buy. Also "<v> cpu-ns/op", that
  // CPU time per op: the fair comparison with a runtime that does fewer ops per second
  // (Go's timers fire up to 1 ms late, so its dense-timer rows use less CPU per second).
  void report_cpu() { want_cpu_ = true; }

  // Go's RunParallel: starts one task per P (corun::procs()), each calling body(PB&);
  // PB::next() hands out the b.n iterations between them. Returns when all are done.
  // Throws std::logic_error if a body returned while iterations remained. An exception
  // escaping body ends the process (it escapes a task).
  template <class F>
  void run_parallel(F&& body);

  int procs() const { return procs_; }  // number of Ps of this run

 private:
  friend struct Runner;
  void begin_run(std::int64_t iterations);  // harness: before calling the body
  void end_run();                           // harness: after the body returned

  int procs_ = 0;
  bool timer_on_ = false;
  std::int64_t start_ns_ = 0;      // steady clock at start_timer
  std::int64_t start_cpu_ns_ = 0;  // process CPU time at start_timer
  std::int64_t duration_ns_ = 0;   // timed wall time of this run so far
  std::int64_t cpu_ns_ = 0;        // timed process CPU time of this run so far
  std::int64_t previous_n_ = 0;    // n of the previous run (for run_parallel's grain)
  std::int64_t previous_ns_ = 0;   // its duration
  bool want_cpu_ = false;
  std::map<std::string, double> extra_;  // unit -> value, printed sorted by unit (as Go)
};

// Registers a benchmark named `name` (printed as Benchmark<name>; '/' allowed for
// sub-benchmarks, no whitespace). Call at static-initialisation time or before
// corun::bench::main. A duplicate or malformed name makes main() exit with status 2.
void register_benchmark(std::string name, std::function<void(B&)> fn, Options opts = {});

// The driver: parses the flags (-bench, -cpu, -count, -benchtime, -list, -h), runs and
// prints. Returns the process exit status (0 ok, 1 a benchmark failed, 2 bad usage).
int main(int argc, char** argv);

template <class F>
void B::run_parallel(F&& body) {
  if (n <= 0) return;
  // Grain: the iterations that took ~100 µs in the previous run, within [1, 1e4]
  // (Go's rule: amortise the counter, still balance the load).
  std::uint64_t grain = 1;
  if (previous_n_ > 0 && previous_ns_ > 0)
    grain = static_cast<std::uint64_t>(100'000.0 * static_cast<double>(previous_n_) /
                                       static_cast<double>(previous_ns_));
  if (grain < 1) grain = 1;
  if (grain > 10'000) grain = 10'000;

  std::atomic<std::uint64_t> counter{0};
  const int workers = corun::procs();
  const auto bn = static_cast<std::uint64_t>(n);
  corun::WaitGroup wg;
  wg.add(workers);
  for (int i = 0; i < workers; ++i) {
    corun::go([&counter, &body, &wg, grain, bn] {
      PB pb(&counter, grain, bn);
      body(pb);
      wg.done();
    });
  }
  wg.wait();
  // relaxed: wg.wait() already ordered the workers' increments before this load.
  if (counter.load(std::memory_order_relaxed) <= bn)
    throw std::logic_error("run_parallel: body returned before PB::next() returned false");
}

// Runs fn(slot) once for every slot 0..procs()-1, each from a task running on P `slot`,
// and returns when all calls returned. fn must not block or yield (its task would
// migrate). One task per P claims the P it finds itself on (proc_id()), runs fn, then
// holds that P (spinning, no yield) until every P is claimed, so the tasks still queued
// behind it must be stolen by the other Ps; while it holds, it spawns an empty task every
// 50 µs, since a spawn wakes an idle P (yield does not). A task that finds its P already
// claimed yields and tries again. After 200 ms a task takes any free slot and says so on
// stderr (the per-P heaps are then uneven).
template <class F>
void on_every_p(const char* who, F fn) {
  const int procs = corun::procs();
  std::vector<std::atomic<bool>> claimed(static_cast<std::size_t>(procs));
  std::atomic<int> nclaimed{0};
  corun::WaitGroup wg;
  wg.add(procs);
  for (int i = 0; i < procs; ++i) {
    corun::go([&claimed, &nclaimed, &wg, &fn, procs, who] {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      // relaxed: a claim only picks a slot; the WaitGroup publishes fn's writes.
      auto claim = [&](int q) {
        if (claimed[static_cast<std::size_t>(q)].exchange(true, std::memory_order_relaxed))
          return false;
        nclaimed.fetch_add(1, std::memory_order_relaxed);
        return true;
      };
      int slot = -1;
      while (slot < 0) {
        const int p = corun::proc_id();
        if (claim(p)) {
          slot = p;
          fn(slot);
          if (corun::proc_id() != slot)
            std::fprintf(stderr, "%s: the work of P%d moved to P%d\n", who, slot, corun::proc_id());
          auto nudge = std::chrono::steady_clock::now();
          while (nclaimed.load(std::memory_order_relaxed) < procs &&
                 std::chrono::steady_clock::now() < give_up) {
            if (std::chrono::steady_clock::now() >= nudge) {
              corun::go([] {});
              nudge = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
            }
          }
        } else if (std::chrono::steady_clock::now() > give_up) {
          for (int q = 0; q < procs && slot < 0; ++q)
            if (claim(q)) slot = q;
          std::fprintf(stderr, "%s: the work of P%d done on P%d\n", who, slot, p);
          fn(slot);
        } else {
          corun::yield();
        }
      }
      wg.done();
    });
  }
  wg.wait();
}

}  // namespace corun::bench

// Defines and registers a benchmark; the body follows as a function body taking `B& b`.
#define CORUN_BENCHMARK_WITH(Name, ...)                                                       \
  static void corun_bench_fn_##Name([[maybe_unused]] ::corun::bench::B& b);                   \
  [[maybe_unused]] static const bool corun_bench_reg_##Name =                                 \
      (::corun::bench::register_benchmark(#Name, &corun_bench_fn_##Name, __VA_ARGS__), true); \
  static void corun_bench_fn_##Name([[maybe_unused]] ::corun::bench::B& b)

#define CORUN_BENCHMARK(Name) CORUN_BENCHMARK_WITH(Name, ::corun::bench::Options{})
