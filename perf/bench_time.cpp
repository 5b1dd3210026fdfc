// perf/bench_time.cpp — timer benchmarks: Go's time package suite (sleep_test.go and
// tick_test.go of Go 1.19, the benchmarks of Go CL 34784's per-P timer table) under Go's
// names, so scripts/go-compare pairs them with Go's own, and TimerLateness: how late
// sleep() and after_func() wake, beside the floor the kernel gives a bare thread.
//
// Go's suite (AfterFunc, After, Stop, SimultaneousAfterFunc, StartStop, Reset, Sleep,
// Ticker, TickerReset, TickerResetNaive) runs through timer_benchmark(), Go's
// benchmark(b, func(n int)): first 1<<15 hour-long garbage timers are armed on EVERY P
// (one task per P; each claims the P it runs on by proc_id(), so every heap holds 1<<15
// timers, as Go CL 34784's "equal number of garbage timers on each P"), then run_parallel
// calls the body with n = 1000 per op, so one op = 1000 inner units (1000 timers fired,
// stopped, reset, ...), and ns/op compares with Go's and Go CL 34784's figures directly.
// The garbage is stopped after the timed region.
//
// TimerLateness/<Kind>=<d>/<load>: 100 tasks each do b.n back-to-back waits of d; op = one
// wait by each of the 100 tasks (ns/op ~ d + lateness + queueing). Lateness = time the
// task runs again (Sleep) or the callback starts (AfterFunc) minus (clock read just
// before the call + d), so it includes the call's own cost. Metrics p50-ns, p99-ns,
// max-ns (nearest rank over all 100 x b.n samples, kept raw in per-task vectors allocated
// before the timer) and cpu%. load=idle: nothing else runs; load=busy: procs() extra
// tasks each spin 5 µs on the clock and yield(), forever, so every P is busy and a woken
// task waits for a P's next scheduling point. A sample below zero (a wake before the
// deadline) fails the benchmark. TimerLateness/Floor=<d>/<load>: one plain std::thread
// with timer slack 1 ns (PR_SET_TIMERSLACK) doing b.n absolute futex waits
// (FUTEX_WAIT_BITSET, CLOCK_MONOTONIC) of d, op = one wait: what the kernel delivers to
// a thread that does nothing else; corun's idle Ps sleep the same way, so Sleep/idle
// minus Floor/idle is the runtime's own cost. Floor/busy runs beside the same spinning
// tasks (the thread must get a CPU from them). Sleep1=<d>: the Sleep row with one task,
// the Floor rows' shape. TimerfdFloor=<d>: the Floor row with an absolute timerfd and
// read(2) instead of the futex. Go twin: scripts/gobench/time_test.go. The busy load and
// the percentiles are perf/lateness.hpp's, shared with TimerLateness/ReadDeadline
// (bench_net.cpp).
//
// Rejected: Go's own spreading (GOMAXPROCS goroutines, wherever they run): a task that
// yields does not wake a sleeping P, so both garbage sets can land on one P. A histogram
// for lateness: raw samples give exact
// percentiles and cost 100 x b.n int64s (8 MB for Sleep=1us at -benchtime 100ms; they
// grow with -benchtime). Measuring lateness inside the runtime: the public API is what
// users see, and the same code runs under CORUN_TIMERS=global and per-p.
#include <corun/runtime.hpp>
#include <corun/sync.hpp>
#include <corun/time.hpp>

#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "lateness.hpp"

namespace {

using namespace std::chrono_literals;
using corun::Chan;
using corun::Clock;
using corun::Duration;
using corun::bench::B;
using corun::bench::BusyLoad;
using corun::bench::Load;
using corun::bench::ns;
using corun::bench::PB;
using corun::bench::report_lateness;

constexpr int kGarbagePerP = 1 << 15;  // Go: garbage := make([]*Timer, 1<<15) per P
constexpr int kInner = 1000;           // Go: bench(1000) per pb.Next()
constexpr Duration kHour = 1h;

// ---- garbage timers, Go's benchmark(b, bench) ------------------------------------------

// kGarbagePerP hour-long after_func timers in the heap of every P (armed by on_every_p).
class GarbageTimers {
 public:
  GarbageTimers() : per_p_(static_cast<std::size_t>(corun::procs())) {
    corun::bench::on_every_p("bench_time", [this](int slot) {
      std::vector<corun::Timer>& v = per_p_[static_cast<std::size_t>(slot)];
      v.reserve(kGarbagePerP);
      for (int j = 0; j < kGarbagePerP; ++j) v.push_back(corun::after_func(kHour, [] {}));
    });
  }
  GarbageTimers(const GarbageTimers&) = delete;
  GarbageTimers& operator=(const GarbageTimers&) = delete;
  ~GarbageTimers() { stop(); }

  void stop() {
    for (auto& v : per_p_) {
      for (corun::Timer& t : v) t.stop();
      v.clear();
    }
  }

 private:
  std::vector<std::vector<corun::Timer>> per_p_;
};

// Go's benchmark(b, bench): garbage on every P, then bench(1000) per op on every P.
template <class F>
void timer_benchmark(B& b, F bench) {
  GarbageTimers garbage;
  b.reset_timer();
  b.run_parallel([&bench](PB& pb) {
    while (pb.next()) bench(kInner);
  });
  b.stop_timer();
  garbage.stop();
}

// ---- sleep_test.go ---------------------------------------------------------------------

// op = a chain of n+1 after_func(0) timers, each armed by the previous one's callback.
CORUN_BENCHMARK(AfterFunc) {
  timer_benchmark(b, [](int n) {
    struct Chain {
      int n;
      Chan<bool> c;
      std::function<void()> f;
    } chain{n, Chan<bool>(), {}};
    Chain* s = &chain;
    s->f = [s] {
      if (--s->n >= 0) {
        corun::after_func(0ns, s->f);
      } else {
        Chan<bool> c = s->c;  // the waiter may destroy *s once the send has matched
        c.send(true);
      }
    };
    corun::after_func(0ns, s->f);
    s->c.recv();
  });
}

// op = n sequential receives from after(1ns).
CORUN_BENCHMARK(After) {
  timer_benchmark(b, [](int n) {
    for (int i = 0; i < n; ++i) corun::after(1ns).recv();
  });
}

// op = n times new_timer(1s).stop().
CORUN_BENCHMARK(Stop) {
  timer_benchmark(b, [](int n) {
    for (int i = 0; i < n; ++i) corun::new_timer(1s).stop();
  });
}

// op = n after_func(0) timers armed at once, all fired (joined by a WaitGroup).
CORUN_BENCHMARK(SimultaneousAfterFunc) {
  timer_benchmark(b, [](int n) {
    corun::WaitGroup wg;
    wg.add(n);
    for (int i = 0; i < n; ++i) corun::after_func(0ns, [&wg] { wg.done(); });
    wg.wait();
  });
}

// op = n hour-long after_func timers armed, then all n stopped.
CORUN_BENCHMARK(StartStop) {
  timer_benchmark(b, [](int n) {
    std::vector<corun::Timer> timers;
    timers.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) timers.push_back(corun::after_func(kHour, [] {}));
    for (corun::Timer& t : timers) t.stop();
  });
}

// op = n reset(1h) of one armed timer, then stop.
CORUN_BENCHMARK(Reset) {
  timer_benchmark(b, [](int n) {
    corun::Timer t = corun::new_timer(kHour);
    for (int i = 0; i < n; ++i) t.reset(kHour);
    t.stop();
  });
}

// op = n tasks spawned, each sleep(1ns), joined.
CORUN_BENCHMARK(Sleep) {
  timer_benchmark(b, [](int n) {
    corun::WaitGroup wg;
    wg.add(n);
    for (int i = 0; i < n; ++i) {
      corun::go([&wg] {
        corun::sleep(1ns);
        wg.done();
      });
    }
    wg.wait();
  });
}

// ---- tick_test.go ----------------------------------------------------------------------

// op = n ticks received from a 1 ns ticker (ticks it misses are dropped, as in Go).
CORUN_BENCHMARK(Ticker) {
  timer_benchmark(b, [](int n) {
    corun::Ticker ticker(1ns);
    Chan<Clock::time_point> c = ticker.channel();
    for (int i = 0; i < n; ++i) c.recv();
    ticker.stop();
  });
}

// op = n reset(2ns) of a 1 ns ticker.
CORUN_BENCHMARK(TickerReset) {
  timer_benchmark(b, [](int n) {
    corun::Ticker ticker(1ns);
    for (int i = 0; i < n; ++i) ticker.reset(2ns);
    ticker.stop();
  });
}

// op = n times: stop the ticker, make a new 2 ns one.
CORUN_BENCHMARK(TickerResetNaive) {
  timer_benchmark(b, [](int n) {
    corun::Ticker ticker(1ns);
    for (int i = 0; i < n; ++i) {
      ticker.stop();
      ticker = corun::Ticker(2ns);
    }
    ticker.stop();
  });
}

// ---- TimerLateness ---------------------------------------------------------------------

constexpr int kLatenessTasks = 100;

// Sleep=<d>: each of kLatenessTasks tasks does b.n sleep(d). Sleep1=<d>: one task does
// (the same shape as the Floor rows: one waiter, so its lateness compares with theirs).
void sleep_lateness_tasks(B& b, Duration d, Load load, int tasks) {
  b.stop_timer();
  const auto n = static_cast<std::size_t>(b.n);
  std::vector<std::vector<std::int64_t>> samples(static_cast<std::size_t>(tasks),
                                                 std::vector<std::int64_t>(n));
  std::optional<BusyLoad> busy;
  if (load == Load::busy) busy.emplace(b.procs());
  corun::WaitGroup done;
  done.add(tasks);
  b.reset_timer();
  b.start_timer();
  for (auto& v : samples) {
    corun::go([&done, d, out = v.data(), n] {
      for (std::size_t i = 0; i < n; ++i) {
        const auto t0 = Clock::now();
        corun::sleep(d);
        out[i] = ns(Clock::now() - t0 - d);
      }
      done.done();
    });
  }
  done.wait();
  b.stop_timer();
  busy.reset();
  report_lateness(b, samples, "sleep");
  b.report_cpu();
}

void sleep_lateness(B& b, Duration d, Load load) {
  sleep_lateness_tasks(b, d, load, kLatenessTasks);
}
void sleep1_lateness(B& b, Duration d, Load load) {
  sleep_lateness_tasks(b, d, load, 1);
}

// AfterFunc=<d>: each of kLatenessTasks tasks does b.n times: after_func(d, fn), wait for
// fn to report (over a capacity-1 channel) how late it started.
void after_func_lateness(B& b, Duration d, Load load) {
  b.stop_timer();
  const auto n = static_cast<std::size_t>(b.n);
  std::vector<std::vector<std::int64_t>> samples(kLatenessTasks, std::vector<std::int64_t>(n));
  std::optional<BusyLoad> busy;
  if (load == Load::busy) busy.emplace(b.procs());
  corun::WaitGroup done;
  done.add(kLatenessTasks);
  b.reset_timer();
  b.start_timer();
  for (auto& v : samples) {
    corun::go([&done, d, out = v.data(), n] {
      Chan<std::int64_t> late(1);
      for (std::size_t i = 0; i < n; ++i) {
        const auto deadline = Clock::now() + d;
        corun::after_func(d,
                          [late, deadline]() mutable { late.send(ns(Clock::now() - deadline)); });
        out[i] = *late.recv();
      }
      done.done();
    });
  }
  done.wait();
  b.stop_timer();
  busy.reset();
  report_lateness(b, samples, "after_func");
  b.report_cpu();
}

// Floor=<d>: one std::thread, timer slack 1 ns, b.n absolute futex waits of d on a word
// nobody changes (each ends with ETIMEDOUT; EINTR waits again for the same deadline).
// TimerfdFloor=<d>: the same with an absolute timerfd (TFD_TIMER_ABSTIME) and read(2),
// the other precise kernel wait (what an epoll-based idle loop would use).
void floor_wait(B& b, Duration d, Load load, bool timerfd) {
  b.stop_timer();
  const auto n = static_cast<std::size_t>(b.n);
  std::vector<std::vector<std::int64_t>> samples(1, std::vector<std::int64_t>(n));
  std::optional<BusyLoad> busy;
  if (load == Load::busy) busy.emplace(b.procs());
  int error = 0;  // written by the thread, read after join
  b.reset_timer();
  b.start_timer();
  corun::blocking([&] {
    std::thread t([&error, d, n, timerfd, out = samples[0].data()] {
      if (prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) != 0) {
        error = errno;
        return;
      }
      const int tfd = timerfd ? timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC) : -1;
      if (timerfd && tfd < 0) {
        error = errno;
        return;
      }
      std::uint32_t word = 0;
      for (std::size_t i = 0; i < n; ++i) {
        timespec now{};
        clock_gettime(CLOCK_MONOTONIC, &now);
        const std::int64_t deadline = now.tv_sec * 1'000'000'000LL + now.tv_nsec + ns(d);
        const timespec abs{.tv_sec = deadline / 1'000'000'000, .tv_nsec = deadline % 1'000'000'000};
        if (timerfd) {
          const itimerspec its{.it_interval = {}, .it_value = abs};
          std::uint64_t expirations = 0;
          if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr) != 0 ||
              read(tfd, &expirations, sizeof expirations) != sizeof expirations) {
            error = errno;
            break;
          }
          clock_gettime(CLOCK_MONOTONIC, &now);
          out[i] = now.tv_sec * 1'000'000'000LL + now.tv_nsec - deadline;
          continue;
        }
        for (;;) {
          const long r = syscall(SYS_futex, &word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, 0U, &abs,
                                 nullptr, FUTEX_BITSET_MATCH_ANY);
          if (r == -1 && errno == ETIMEDOUT) break;
          if (r == -1 && errno != EINTR && errno != EAGAIN) {
            error = errno;
            return;
          }
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        out[i] = now.tv_sec * 1'000'000'000LL + now.tv_nsec - deadline;
      }
      if (tfd >= 0) close(tfd);
    });
    t.join();
  });
  b.stop_timer();
  busy.reset();
  if (error != 0)
    throw std::runtime_error("Floor: prctl/futex/timerfd failed with errno " +
                             std::to_string(error));
  report_lateness(b, samples, timerfd ? "timerfd floor" : "futex floor");
  b.report_cpu();
}

void floor_lateness(B& b, Duration d, Load load) {
  floor_wait(b, d, load, false);
}
void timerfd_floor_lateness(B& b, Duration d, Load load) {
  floor_wait(b, d, load, true);
}

const bool registered = [] {
  struct Wait {
    const char* name;
    Duration d;
  };
  const Wait waits[] = {{"1us", 1us}, {"50us", 50us}, {"1ms", 1ms}};
  const std::pair<const char*, Load> loads[] = {{"idle", Load::idle}, {"busy", Load::busy}};
  using Fn = void (*)(B&, Duration, Load);
  auto add = [](std::string kind, const Wait& w, const char* load_name, Load load, Fn fn) {
    corun::bench::register_benchmark("TimerLateness/" + kind + "=" + w.name + "/" + load_name,
                                     [fn, d = w.d, load](B& b) { fn(b, d, load); });
  };
  for (const Wait& w : waits) {
    for (const auto& [load_name, load] : loads) add("Sleep", w, load_name, load, &sleep_lateness);
    for (const auto& [load_name, load] : loads) add("Sleep1", w, load_name, load, &sleep1_lateness);
    for (const auto& [load_name, load] : loads) add("Floor", w, load_name, load, &floor_lateness);
    for (const auto& [load_name, load] : loads)
      add("TimerfdFloor", w, load_name, load, &timerfd_floor_lateness);
  }
  for (const auto& [load_name, load] : loads)
    add("AfterFunc", Wait{"50us", 50us}, load_name, load, &after_func_lateness);
  return true;
}();

}  // namespace
