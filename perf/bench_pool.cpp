// perf/bench_pool.cpp — Pool benchmarks: Go 1.19's sync/pool_test.go suite and the
// fmt_test.go Sprintf benchmarks of Go CL 46010043's scalable-Pool table, under Go's
// names, so scripts/bench-all prints that table (CORUN_POOL=global vs sharded, the CL's
// deltas beside) and scripts/go-compare pairs our rows with Go's own; and a malloc floor.
//
// Objects: Item, 8 bytes (Go puts the int 1, an interface that allocates nothing). Every
// loop runs in b.run_parallel (Go's RunParallel: one worker task per P). Pools are made
// without a factory unless said, so get() may return nullptr (Go: Get() may return nil).
// - Pool: each worker holds one Item; op = put(obj); obj = get().
// - PoolOverflow: op = 100 puts then 100 gets; each worker keeps its 100 Items.
// - PoolStarvation: op = 67 puts (Go: count - int(count*0.33)) then 100 gets; the Items
//   got are kept for the next op's puts, and a worker allocates an Item only when it holds
//   fewer than 67.
//   All three report allocs/op: Items allocated in the timed region (the starting Items
//   and the replacements for gets that found nothing) per op. In Pool and PoolOverflow a
//   get that finds nothing also allocates (sharded: another P's cache may hold the Items).
// - PoolExpensiveNew: the factory sleeps 1 ms (corun::sleep) and counts; op = 100 gets,
//   a 32 KiB malloc+free per Item ("work"), 100 puts. Reports New/op and trims/op
//   (detail::pool_trims() over the timed region: the CORUN_POOL_TRIM_MS timer, 5 s by
//   default, so ~0 in a 100 ms run). PoolExpensiveNew/trim=8MiB also calls
//   detail::pool_trim_now() each time the workers have allocated 8 MiB of work (256
//   items, every 2.56 ops): Go's GC runs about that often here (8 MiB ballast, GOGC=100),
//   and a GC is what rotates Go's pool into its victim cache and frees it. go-compare
//   pairs Go's PoolExpensiveNew with this row (Go reports GCs/op, we trims/op).
// - Sprintf family with {fmt} (Go's fmt_test.go): SprintfEmpty, SprintfString,
//   SprintfInt, SprintfIntInt, SprintfPrefixedInt, SprintfFloat ("{}" = Go's shortest %g), and
//   SprintfManyArgs (Go: BenchmarkManyArgs, an Fprintf into a reused bytes.Buffer).
//   The row named as Go's is the pooled variant: op = get a fmt::memory_buffer from one
//   process-wide Pool (Go's fmt.ppFree; a factory makes one on a miss), clear,
//   fmt::format_to(fmt::appender(buf), ...), consume (escape: the bytes are treated as
//   read), put back.
//   <Name>/fresh: op = fmt::format(...) into a fresh std::string, consumed the same way
//   (fmt formats into a 500-byte stack buffer, then the string copies it: short results
//   fit the string's 15-byte SSO and never reach malloc). Go's Sprintf also copies its
//   buffer into a new string per call (a small GC allocation, except for ""), which the
//   pooled variant here does not: the pooled rows are the pool's cost plus formatting,
//   Go's rows add one allocation.
// - Pool/floor=loop, Pool/floor=calls, Pool/floor=slot: Pool's loop with no pool (the loop
//   alone; put and get as two out-of-line calls that swap obj with a slot; put and get as
//   inline stores and loads of one slot, with the compiler barriers of Pool's fast path):
//   the floors under Pool.
// - MallocFree: op = new Item, delete (escaped): the floor a pool must beat.
//   MallocFree/memory_buffer: the same for the Sprintf buffer (sizeof ~536 bytes). The
//   release build links jemalloc, which replaces malloc (and so operator new/delete):
//   these rows are jemalloc's thread-cache fast path; sanitizer builds use glibc.
//
// Rejected: Go's PoolSTW (a GC pause; corun has no GC, trims are incremental per P);
// Item as a bigger object (Go's is a word; MallocFree/memory_buffer shows a bigger size);
// a pool per Sprintf benchmark (Go's printers share one pool; ours does, and it is a
// global used across runs as API.md allows); copying the pooled result into a string as
// Go's Sprintf does (the row measures the pool and the formatting; the buffer is consumed
// in place); formatting through std::back_inserter(buf) (fmt 9 wraps it in an
// iterator_buffer that resizes the memory_buffer on every append, slower than /fresh),
// where fmt::appender writes into the memory_buffer as fmt::format does into its own
// stack buffer.
#include <corun/pool.hpp>
#include <corun/runtime.hpp>
#include <corun/time.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "pool/pool_internal.hpp"

namespace {

using namespace std::chrono_literals;
using corun::Pool;
using corun::bench::B;
using corun::bench::PB;

// The pooled object of Pool, PoolOverflow, PoolStarvation and PoolExpensiveNew.
struct Item {
  std::int64_t v = 1;
};

// Makes the compiler assume the bytes at p are read and written here (an empty asm with a
// memory clobber): keeps new/delete pairs and formatted buffers from being optimised away.
inline void escape(const void* p) {
  asm volatile("" : : "g"(p) : "memory");
}

// Adds a worker's allocation count to the run's total once, at the worker's end.
// relaxed: run_parallel's WaitGroup orders these adds before the main task's load.
inline void add_count(std::atomic<std::int64_t>& total, std::int64_t n) {
  total.fetch_add(n, std::memory_order_relaxed);
}

void report_per_op(B& b, std::int64_t count, const char* unit) {
  b.report_metric(static_cast<double>(count) / static_cast<double>(b.n), unit);
}

// ---- sync/pool_test.go ---------------------------------------------------------------

// op = one put, then one get (of the object just put, unless another worker took it).
CORUN_BENCHMARK(Pool) {
  Pool<Item> p;
  std::atomic<std::int64_t> allocs{0};
  b.run_parallel([&](PB& pb) {
    std::int64_t n = 1;
    auto obj = std::make_unique<Item>();
    while (pb.next()) {
      p.put(std::move(obj));
      obj = p.get();
      if (!obj) {
        obj = std::make_unique<Item>();
        ++n;
      }
    }
    add_count(allocs, n);
  });
  b.stop_timer();
  report_per_op(b, allocs.load(std::memory_order_relaxed), "allocs/op");
}

// The floors under Pool's op, same loop and object: what is left when the pool is free.
// - Pool/floor=loop: the run_parallel loop alone (PB::next(), the moves of obj).
// - Pool/floor=calls: put and get as two out-of-line calls that only swap obj with one
//   slot of the worker: the least an out-of-line put/get can cost.
// A noinline function with an empty asm so the calls are neither inlined nor removed.
__attribute__((noinline)) void floor_put(void** slot, void* x) {
  *slot = x;
  asm volatile("" : : : "memory");
}
__attribute__((noinline)) void* floor_get(void** slot) {
  void* x = *slot;
  *slot = nullptr;
  asm volatile("" : : : "memory");
  return x;
}

enum class Floor { loop, calls, slot };

void pool_floor(B& b, Floor f) {
  b.run_parallel([f](PB& pb) {
    auto obj = std::make_unique<Item>();
    void* slot = nullptr;
    if (f == Floor::slot) {
      // The inline fast path's traffic on the slot alone: the store of put, a compiler
      // barrier (Pool's get finds the slot anew, so it reloads what put stored), the
      // load and store of get. The get's load waits for the put's store (store-to-load
      // forwarding, ~5 cycles) and the next put's check for that store again.
      while (pb.next()) {
        void* volatile* s = reinterpret_cast<void* volatile*>(&slot);
        if (!*s) *s = obj.release();
        asm volatile("" : : : "memory");
        void* x = *s;
        *s = nullptr;
        asm volatile("" : : : "memory");
        obj.reset(static_cast<Item*>(x));
        if (!obj) obj = std::make_unique<Item>();
      }
    } else if (f == Floor::calls) {
      while (pb.next()) {
        floor_put(&slot, obj.release());
        obj.reset(static_cast<Item*>(floor_get(&slot)));
        if (!obj) obj = std::make_unique<Item>();
      }
    } else {
      while (pb.next()) {
        escape(obj.get());
        if (!obj) obj = std::make_unique<Item>();
      }
    }
  });
}

[[maybe_unused]] const bool reg_pool_floor = [] {
  corun::bench::register_benchmark("Pool/floor=loop", [](B& b) { pool_floor(b, Floor::loop); });
  corun::bench::register_benchmark("Pool/floor=calls", [](B& b) { pool_floor(b, Floor::calls); });
  corun::bench::register_benchmark("Pool/floor=slot", [](B& b) { pool_floor(b, Floor::slot); });
  return true;
}();

// op = 100 puts, then 100 gets.
CORUN_BENCHMARK(PoolOverflow) {
  constexpr int kCount = 100;
  Pool<Item> p;
  std::atomic<std::int64_t> allocs{0};
  b.run_parallel([&](PB& pb) {
    std::int64_t n = kCount;
    std::vector<std::unique_ptr<Item>> held(kCount);
    for (auto& o : held) o = std::make_unique<Item>();
    while (pb.next()) {
      for (auto& o : held) p.put(std::move(o));
      for (auto& o : held) {
        o = p.get();
        if (!o) {
          o = std::make_unique<Item>();
          ++n;
        }
      }
    }
    add_count(allocs, n);
  });
  b.stop_timer();
  report_per_op(b, allocs.load(std::memory_order_relaxed), "allocs/op");
}

// op = 67 puts, then 100 gets (a third of them find nothing, or take another P's Items).
CORUN_BENCHMARK(PoolStarvation) {
  constexpr int kCount = 100;
  constexpr int kStarved = kCount - static_cast<int>(static_cast<float>(kCount) * 0.33f);
  static_assert(kStarved == 67);
  Pool<Item> p;
  std::atomic<std::int64_t> allocs{0};
  b.run_parallel([&](PB& pb) {
    std::int64_t n = 0;
    std::vector<std::unique_ptr<Item>> held;  // what this worker holds between ops
    held.reserve(4 * kCount);
    while (pb.next()) {
      for (; held.size() < kStarved; ++n) held.push_back(std::make_unique<Item>());
      for (int i = 0; i < kStarved; ++i) {
        p.put(std::move(held.back()));
        held.pop_back();
      }
      for (int i = 0; i < kCount; ++i)
        if (auto o = p.get()) held.push_back(std::move(o));
    }
    add_count(allocs, n);
  });
  b.stop_timer();
  report_per_op(b, allocs.load(std::memory_order_relaxed), "allocs/op");
}

// op = 100 gets (the factory sleeps 1 ms), 32 KiB of malloc+free per item, 100 puts.
// trim_every_items > 0: pool_trim_now() each time that many items of work were done.
void pool_expensive_new(B& b, std::int64_t trim_every_items) {
  constexpr int kItems = 100;
  constexpr std::size_t kWork = 32 << 10;
  std::atomic<std::int64_t> news{0};
  std::atomic<std::int64_t> items{0};
  Pool<Item> p([&news] {
    news.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count, read after the join
    corun::sleep(1ms);
    return std::make_unique<Item>();
  });
  const std::uint64_t trims0 = corun::detail::pool_trims();
  b.run_parallel([&](PB& pb) {
    std::vector<std::unique_ptr<Item>> held(kItems);
    while (pb.next()) {
      for (auto& o : held) {
        o = p.get();
        void* work = std::malloc(kWork);
        escape(work);
        std::free(work);
      }
      for (auto& o : held) p.put(std::move(o));
      if (trim_every_items > 0) {
        // relaxed: only decides who trims; the trim synchronises itself.
        const std::int64_t before = items.fetch_add(kItems, std::memory_order_relaxed);
        if (before / trim_every_items != (before + kItems) / trim_every_items)
          corun::detail::pool_trim_now();
      }
    }
  });
  b.stop_timer();
  report_per_op(b, news.load(std::memory_order_relaxed), "New/op");
  report_per_op(b, static_cast<std::int64_t>(corun::detail::pool_trims() - trims0), "trims/op");
}

[[maybe_unused]] const bool reg_expensive_new = [] {
  corun::bench::register_benchmark("PoolExpensiveNew", [](B& b) { pool_expensive_new(b, 0); });
  // 8 MiB / 32 KiB = 256 items of work between trims.
  corun::bench::register_benchmark("PoolExpensiveNew/trim=8MiB",
                                   [](B& b) { pool_expensive_new(b, (8 << 20) / (32 << 10)); });
  return true;
}();

// ---- fmt_test.go: Sprintf with a pooled buffer, and with a fresh string ----------------

// Go's fmt.ppFree: one pool of printers' buffers for every Sprintf benchmark and run.
Pool<fmt::memory_buffer>& printers() {
  static Pool<fmt::memory_buffer> pool([] { return std::make_unique<fmt::memory_buffer>(); });
  return pool;
}

// op = get a buffer, clear it, format into it, consume it, put it back.
template <class Format>
void sprintf_pooled(B& b, Format format) {
  Pool<fmt::memory_buffer>& pool = printers();
  b.run_parallel([&pool, &format](PB& pb) {
    while (pb.next()) {
      std::unique_ptr<fmt::memory_buffer> buf = pool.get();
      buf->clear();
      format(*buf);
      escape(buf->data());
      pool.put(std::move(buf));
    }
  });
}

// op = one fmt::format into a fresh std::string, consumed, destroyed.
template <class Format>
void sprintf_fresh(B& b, Format format) {
  b.run_parallel([&format](PB& pb) {
    while (pb.next()) {
      std::string s = format();
      escape(s.data());
    }
  });
}

// Registers Name (pooled) and Name/fresh; the macro keeps each format string a literal
// (fmt checks it at compile time) in both variants.
#define CORUN_SPRINTF_BENCH(Name, ...)                                                        \
  corun::bench::register_benchmark(#Name, [](B& b) {                                          \
    sprintf_pooled(                                                                           \
        b, [](fmt::memory_buffer& buf) { fmt::format_to(fmt::appender(buf), __VA_ARGS__); }); \
  });                                                                                         \
  corun::bench::register_benchmark(                                                           \
      #Name "/fresh", [](B& b) { sprintf_fresh(b, [] { return fmt::format(__VA_ARGS__); }); })

[[maybe_unused]] const bool reg_sprintf = [] {
  CORUN_SPRINTF_BENCH(SprintfEmpty, "");
  CORUN_SPRINTF_BENCH(SprintfString, "{}", "hello");
  CORUN_SPRINTF_BENCH(SprintfInt, "{}", 5);
  CORUN_SPRINTF_BENCH(SprintfIntInt, "{} {}", 5, 6);
  CORUN_SPRINTF_BENCH(SprintfPrefixedInt,
                      "This is some meaningless prefix text that needs to be scanned {}", 6);
  // Go's %g without a precision prints the shortest digits that round-trip ("5.23184"),
  // which is {fmt}'s "{}" (Dragonbox); "{:g}" is printf's %g (6 significant digits, a
  // slower fixed-precision path).
  CORUN_SPRINTF_BENCH(SprintfFloat, "{}", 5.23184);
  CORUN_SPRINTF_BENCH(SprintfManyArgs, "{:2}/{:2}/{:2} {}:{}:{} {} {}\n", 3, 4, 5, 11, 12, 13,
                      "hello", "world");
  return true;
}();

#undef CORUN_SPRINTF_BENCH

// ---- the floor: malloc + free of the pooled objects' sizes ----------------------------

// op = new T, delete (jemalloc's thread cache in the release build).
template <class T>
void malloc_free(B& b) {
  b.run_parallel([](PB& pb) {
    while (pb.next()) {
      T* p = new T;
      escape(p);
      delete p;
    }
  });
}

[[maybe_unused]] const bool reg_malloc = [] {
  corun::bench::register_benchmark("MallocFree", [](B& b) { malloc_free<Item>(b); });
  corun::bench::register_benchmark("MallocFree/memory_buffer",
                                   [](B& b) { malloc_free<fmt::memory_buffer>(b); });
  return true;
}();

}  // namespace
