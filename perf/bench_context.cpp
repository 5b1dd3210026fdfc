// perf/bench_context.cpp — context benchmarks: Go 1.19's context/benchmark_test.go under
// Go's names, so scripts/go-compare pairs them with Go's own. WithTimeout/concurrency=N
// is the context half of Go CL 34784's per-P timer table (scripts/bench-all runs it
// under CORUN_TIMERS=global and per-p).
//
// - WithTimeout/concurrency=40|4000|400000: first N/procs hour-long with_timeout contexts
//   are made and held live on every P (one task per P, claiming the P it runs on by
//   proc_id() as bench_time.cpp's garbage timers do: each P's timer heap holds its share),
//   then run_parallel: op = 10 with_timeout(background, 1h), then their 10 cancels. The
//   held contexts are canceled after the timed region.
// - CommonParentCancel: run_parallel, op = with_cancel of one shared cancelable parent,
//   100 dependent divisions, cancel, 100 divisions. Go's version also checks a value the
//   root carries (ctx.Value("key")); corun's Context has no values (API.md), so that
//   lookup is left out.
// - CancelTree/depth=D/Root=Background|OpenCanceler|ClosedCanceler: op = a chain of D
//   with_cancel children built on the root (whose cancel functions are dropped, as Go
//   drops them), the root being background, a live cancelable context canceled after
//   the chain, or one canceled before it (children are born canceled).
// - CheckCanceled/Err, CheckCanceled/Done: op = err() / a non-blocking select on done()
//   of a canceled context. ContextCancelDone: the same select on a live context from
//   every P (run_parallel).
// Go's DeepValue* benchmarks need WithValue, which corun does not have.
//
// Rejected: reporting cpu% here (the op is pure CPU on every P; Go CL 34784's table is
// ns/op only).
#include <corun/chan.hpp>
#include <corun/context.hpp>
#include <corun/runtime.hpp>
#include <corun/sync.hpp>
#include <corun/time.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "bench.hpp"

namespace {

using namespace std::chrono_literals;
using corun::CancelFunc;
using corun::Clock;
using corun::Context;
using corun::bench::B;
using corun::bench::PB;

// Hides v's value from the optimiser, so the arithmetic around it runs as written.
template <class T>
inline void opaque(T& v) {
  asm volatile("" : "+r"(v));
}

// ---- WithTimeout/concurrency=N ---------------------------------------------------------

void with_timeout(B& b, int concurrency) {
  const int procs = b.procs();
  const int per_p = concurrency / procs;
  const Context root = Context::background();
  std::vector<std::vector<CancelFunc>> held(static_cast<std::size_t>(procs));
  corun::bench::on_every_p("bench_context", [&](int slot) {
    std::vector<CancelFunc>& cf = held[static_cast<std::size_t>(slot)];
    cf.reserve(static_cast<std::size_t>(per_p));
    for (int j = 0; j < per_p; ++j) cf.push_back(corun::with_timeout(root, 1h).second);
  });
  b.reset_timer();
  b.run_parallel([&root](PB& pb) {
    std::array<CancelFunc, 10> wcf;
    while (pb.next()) {
      for (CancelFunc& f : wcf) f = corun::with_timeout(root, 1h).second;
      for (CancelFunc& f : wcf) f();
    }
  });
  b.stop_timer();
  for (auto& cf : held)
    for (CancelFunc& f : cf) f();
}

// ---- CommonParentCancel ----------------------------------------------------------------

void common_parent_cancel(B& b) {
  const Context root = Context::background();
  auto [shared, shared_cancel] = corun::with_cancel(root);
  b.reset_timer();
  b.run_parallel([&shared](PB& pb) {
    std::int64_t x = 0;
    while (pb.next()) {
      auto [ctx, cancel] = corun::with_cancel(shared);
      for (int i = 0; i < 100; ++i) {
        opaque(x);
        x = corun::bench::go_div(x, x + 1);
      }
      cancel();
      for (int i = 0; i < 100; ++i) {
        opaque(x);
        x = corun::bench::go_div(x, x + 1);
      }
    }
  });
  b.stop_timer();
  shared_cancel();
}

// ---- CancelTree ------------------------------------------------------------------------

void build_context_tree(Context root, int depth) {
  for (int d = 0; d < depth; ++d) root = corun::with_cancel(root).first;
}

// ---- CheckCanceled, ContextCancelDone --------------------------------------------------

bool done_now(const Context& ctx) {
  bool done = false;
  corun::select(corun::on_recv(ctx.done(), [&done](std::optional<std::monostate>) { done = true; }),
                corun::otherwise([] {}));
  return done;
}

void context_cancel_done(B& b) {
  auto [ctx, cancel] = corun::with_cancel(Context::background());
  b.run_parallel([&ctx](PB& pb) {
    while (pb.next()) {
      bool d = done_now(ctx);
      opaque(d);
    }
  });
  b.stop_timer();
  cancel();
}

// Go's order: CommonParentCancel, WithTimeout, CancelTree, CheckCanceled, ContextCancelDone.
const bool registered = [] {
  corun::bench::register_benchmark("CommonParentCancel", &common_parent_cancel);
  for (int c = 40; c <= 400000; c *= 100)
    corun::bench::register_benchmark("WithTimeout/concurrency=" + std::to_string(c),
                                     [c](B& b) { with_timeout(b, c); });
  for (int depth : {1, 10, 100, 1000}) {
    const std::string base = "CancelTree/depth=" + std::to_string(depth);
    corun::bench::register_benchmark(base + "/Root=Background", [depth](B& b) {
      for (std::int64_t i = 0; i < b.n; ++i) build_context_tree(Context::background(), depth);
    });
    corun::bench::register_benchmark(base + "/Root=OpenCanceler", [depth](B& b) {
      for (std::int64_t i = 0; i < b.n; ++i) {
        auto [ctx, cancel] = corun::with_cancel(Context::background());
        build_context_tree(ctx, depth);
        cancel();
      }
    });
    corun::bench::register_benchmark(base + "/Root=ClosedCanceler", [depth](B& b) {
      for (std::int64_t i = 0; i < b.n; ++i) {
        auto [ctx, cancel] = corun::with_cancel(Context::background());
        cancel();
        build_context_tree(ctx, depth);
      }
    });
  }
  corun::bench::register_benchmark("CheckCanceled/Err", [](B& b) {
    auto [ctx, cancel] = corun::with_cancel(Context::background());
    cancel();
    b.reset_timer();
    for (std::int64_t i = 0; i < b.n; ++i) {
      corun::ContextError e = ctx.err();
      opaque(e);
    }
  });
  corun::bench::register_benchmark("CheckCanceled/Done", [](B& b) {
    auto [ctx, cancel] = corun::with_cancel(Context::background());
    cancel();
    b.reset_timer();
    for (std::int64_t i = 0; i < b.n; ++i) {
      bool d = done_now(ctx);
      opaque(d);
    }
  });
  corun::bench::register_benchmark("ContextCancelDone", &context_cancel_done);
  return true;
}();

}  // namespace
