// perf/bench_floor.cpp — hardware floors: what this machine charges for the atomic
// instructions, cache-line transfers and futex wake-ups that corun's slowest rows (and
// Go's) are made of, so a report can say "this row cannot get below X here".
//
// Rows (op = what one b.n iteration is; plain std::threads, see below):
// - Floor/atomic=cas+xadd: one thread, op = compare_exchange_strong(0 -> 1, acquire),
//   ++counter, fetch_sub(1, release) whose new value is used (Mutex::unlock passes it to
//   unlock_slow, which makes it lock xadd, not lock sub), on one std::atomic<uint32_t>:
//   corun's uncontended Mutex::lock + unlock (sync.hpp; Go's sync.Mutex is the same), i.e.
//   two locked instructions (lock cmpxchg, lock xadd). The floor under MutexHandoff-1.
//   Floor/atomic=cas+store: the same with the unlock as a plain release store (a mov on
//   x86): what an unlock without a read-modify-write would save. Floor/atomic=load: one
//   relaxed load and compare, ++counter: the loop without locked instructions, for scale.
//   All three run on one thread whatever -cpu says (the -2 rows repeat the -1 rows).
// - Floor/line=pingpong: two threads on two CPUs pass a token through one word in one
//   cache line: thread 0 waits (PAUSE-spin on an acquire load) until the word is even,
//   then stores word+1 (release); thread 1 the same for odd. op = one handoff = one
//   transfer of the line to the waiting core (plus the invalidation of the other copy
//   when it writes). The floor under every cross-P wake-up that goes through a shared
//   word: MutexHandoff-2, and the channel's lock and waiter words in ChanProdCons*-2,
//   ChanRequestResponse-2, Select*-2. It is a floor of the machine, not of P: at -cpu 1
//   it still runs two threads (the -1 and -2 rows measure the same thing). With fewer
//   than 2 CPUs it fails with a message (the harness has no skip; two threads on one CPU
//   would measure the scheduler's time slice).
// - Floor/spinlock: b.procs() threads each loop: lock a test-and-test-and-set spin lock
//   (CAS acquire; while held, PAUSE-spin on a relaxed load), ++counter, unlock (release
//   store). op = one lock+unlock by any thread. The counter is the shared iteration count
//   (a thread stops when it finds counter == b.n under the lock: procs() lock+unlocks more
//   than b.n in all), so no other atomic is touched per op; the lock word and the counter
//   share one line (the cheapest layout). Checks: counter == b.n == the threads' own
//   counts summed (a broken lock loses increments), else std::logic_error. Metric
//   handoffs/op: the share of ops whose owner differs from the previous op's (a TTAS lock
//   barges: the releasing core often takes it again). The line moves more often than the
//   owner: a waiter's spinning load takes a shared copy, so the holder's next CAS must
//   fetch it back. The floor of MutexHandoff-2 without parking; at -cpu 1 it is one
//   uncontended thread (cas+store plus the loop).
// - Floor/futex=wake: two threads ping-pong through FUTEX_WAIT_PRIVATE / FUTEX_WAKE_PRIVATE
//   (os/futex.hpp, corun's own wrapper) on two words, one per direction, each line its own;
//   a thread calls futex_wait as soon as its word is not yet set (no spinning first). op =
//   one handoff: a release store, futex_wake, and the sleeper's wake-up until it runs and
//   hands back. Metric sleeps/op: the share of waits that really slept (returned 0, not
//   EAGAIN); near 1 means op is the full wake-to-run latency. The floor under any wake of
//   a sleeping thread: corun's idle Ms (and Go's, runtime/lock_futex.go's notesleep) sleep
//   on futexes, so ChanProdCons-2, ChanRequestResponse-2 and Select*-2, whenever the other
//   P has gone idle, pay this per wake. Two threads at every -cpu, as line=pingpong.
//
// - Floor/throw=timeout_error: one thread, op = a corun::net::timeout_error made as a
//   timed-out Conn::read makes it (the message built from "read"), thrown from two
//   frames down (noinline, one with a destructor to run) and caught by reference. The
//   API reports a timeout by exception (API.md), Go by an error value, so this is in
//   TimerLateness/ReadDeadline's lateness (taken after the catch) and not in Go's.
// - Floor/alloc=function: one thread, op = a std::function<void()> made from a lambda
//   that captures a Context-like counted handle (8 bytes, not trivially copyable), then
//   destroyed. libstdc++ keeps a functor in place only if it is trivially copyable, so
//   this is one heap allocation and free (jemalloc) and two indirect calls: what the
//   API's CancelFunc costs each with_cancel beside the node itself.
// - Floor/work=prodcons, Floor/work=div200: the local work SelectProdCons and
//   CommonParentCancel put in each op (the same loops), on b.procs() threads splitting
//   b.n: the part of those rows no runtime can remove, at P Ps.
//
// Threads: every row runs run_pinned(): plain std::threads, thread i pinned with
// pthread_setaffinity_np to CPU i % hardware_concurrency() (set explicitly: a thread
// inherits the affinity of its creator, a corun M pinned to its P's CPU), started and
// parked on a futex before the timer is reset, released when it starts, and joined after
// it stops (the timed region ends when the last body returns; it includes the gate's
// wake-up of the parked threads, tens of µs in this VM, under 0.1% of a 200 ms run). The
// main task waits in corun::blocking(), so its P is free; corun's own Ms are then idle
// (asleep on futexes) and share the CPUs with these threads only when something wakes them.
//
// Rejected: b.run_parallel — its workers are corun tasks on Ps that only switch when they
// block, so two spinning workers that land on one P never meet (pingpong would spin
// forever at -cpu 1, or whenever no other P steals the second one), which P runs which
// worker is the scheduler's choice, and PB::next() adds a shared counter; a floor must
// be the hardware alone on known CPUs. std::atomic::wait for the start/stop gates
// (libstdc++ spins and keeps its own waiter table first; os::futex is what corun parks
// on). A static split of the spinlock's b.n between threads: a barging thread finishes
// its share early and the rest runs uncontended. Spinning before futex_wait in
// futex=wake, as corun and Go do: that measures the spin, not the wake of a sleeper.
// pipe/eventfd or a condition variable for the wake: more kernel work than a futex, and
// neither runtime wakes its threads that way.
#include <corun/net.hpp>
#include <corun/runtime.hpp>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "arch/cpu.hpp"
#include "arch/spin.hpp"
#include "bench.hpp"
#include "os/futex.hpp"

namespace {

using corun::bench::B;

// One futex word used as a gate or a count between the main thread and the workers.
// release on every change, acquire on every read: a body's work happens before the main
// thread sees it counted (so stop_timer() comes after it), and the main thread's
// reset_timer() before the workers see the gate open.
using Word = std::atomic<std::uint32_t>;

void wait_until(Word& w, std::uint32_t want) {
  for (std::uint32_t v; (v = w.load(std::memory_order_acquire)) != want;)
    corun::os::futex_wait(&w, v);  // EAGAIN, EINTR or a spurious wake: re-check
}

// Runs body(i) for i in [0, threads) on `threads` std::threads, thread i pinned to CPU
// i % hardware_concurrency(). Timed: from the gate opening to the last body's return;
// creating, pinning and joining the threads is not. Throws std::runtime_error if a pin
// failed (the body still ran, unpinned, so the others did not wait for it forever).
template <class Body>
void run_pinned(B& b, int threads, Body body) {
  b.stop_timer();
  const unsigned ncpu = std::max(1u, std::thread::hardware_concurrency());
  const auto nthreads = static_cast<std::uint32_t>(threads);
  Word ready{0};                  // threads pinned and parked at the gate
  Word gate{0};                   // 1: go
  Word done{0};                   // bodies returned
  std::atomic<int> pin_error{0};  // relaxed: read after the joins, which order it
  corun::blocking([&] {
    std::vector<std::thread> ts;
    ts.reserve(nthreads);
    for (int i = 0; i < threads; ++i) {
      ts.emplace_back([&, i] {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(static_cast<unsigned>(i) % ncpu, &set);
        if (const int e = pthread_setaffinity_np(pthread_self(), sizeof set, &set); e != 0)
          pin_error.store(e, std::memory_order_relaxed);
        ready.fetch_add(1, std::memory_order_release);
        corun::os::futex_wake(&ready, 1);
        wait_until(gate, 1);
        body(i);
        done.fetch_add(1, std::memory_order_release);
        corun::os::futex_wake(&done, 1);
      });
    }
    wait_until(ready, nthreads);
    b.reset_timer();
    b.start_timer();
    gate.store(1, std::memory_order_release);
    corun::os::futex_wake(&gate, INT_MAX);
    wait_until(done, nthreads);
    b.stop_timer();
    for (std::thread& t : ts) t.join();
  });
  if (const int e = pin_error.load(std::memory_order_relaxed); e != 0)
    throw std::runtime_error(std::string("Floor: pthread_setaffinity_np: ") + std::strerror(e));
}

// The two-thread rows need two CPUs (see the file comment).
void need_two_cpus(const char* row) {
  if (std::thread::hardware_concurrency() < 2)
    throw std::runtime_error(std::string(row) + " needs 2 CPUs; this machine has 1");
}

void report_per_op(B& b, std::int64_t count, const char* unit) {
  b.report_metric(static_cast<double>(count) / static_cast<double>(b.n), unit);
}

// ---- Floor/atomic=... ----------------------------------------------------------------

enum class AtomicOp { cas_xadd, cas_store, load };

// n rounds of: lock (CAS 0 -> 1, acquire/release as Mutex::lock/unlock), ++counter,
// unlock(word), which returns what it left in the word (0 when it can tell nothing else).
// A value one thread cannot see there goes to `bad` and ends the loop. Inlined: each row
// gets its own loop.
template <class Unlock>
[[gnu::always_inline]] inline void cas_loop(Word& word, std::int64_t& counter, std::int64_t n,
                                            std::uint32_t& bad, Unlock unlock) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t expected = 0;
    if (!word.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
      bad = expected;
      return;
    }
    ++counter;
    if (const std::uint32_t now = unlock(word); now != 0) {
      bad = now;
      return;
    }
  }
}

void atomic_floor(B& b, AtomicOp kind) {
  // The lock word and the counter it guards, on one line (as a Mutex beside its data).
  struct alignas(128) State {
    Word word{0};
    std::int64_t counter = 0;  // "guarded" by word (one thread: nobody else touches it)
  } s;
  const std::int64_t n = b.n;
  std::uint32_t bad = 0;  // a value of word one thread cannot see there; 0: none
  run_pinned(b, 1, [&s, &bad, n, kind](int) {
    // Locals, so the loops keep them in registers (the closure is memory, reloaded after
    // every atomic).
    Word& word = s.word;
    std::int64_t& counter = s.counter;
    switch (kind) {
      case AtomicOp::cas_xadd:
        // The new value is used, as Mutex::unlock passes it to unlock_slow: lock xadd (a
        // tested result alone compiles to lock sub; the same cost).
        cas_loop(word, counter, n, bad,
                 [](Word& w) { return w.fetch_sub(1, std::memory_order_release) - 1; });
        break;
      case AtomicOp::cas_store:
        cas_loop(word, counter, n, bad, [](Word& w) {
          w.store(0, std::memory_order_release);  // a plain mov on x86
          return 0u;
        });
        break;
      case AtomicOp::load:
        for (std::int64_t i = 0; i < n; ++i) {
          // relaxed: only the value is compared; nothing is published through it.
          if (const std::uint32_t v = word.load(std::memory_order_relaxed); v != 0) {
            bad = v;
            break;
          }
          ++counter;
        }
        break;
    }
  });
  if (bad != 0 || s.counter != n)
    throw std::logic_error("Floor/atomic: " + std::to_string(s.counter) + " ops done, expected " +
                           std::to_string(n) + "; word held " + std::to_string(bad));
}

// ---- Floor/line=pingpong -------------------------------------------------------------

void line_pingpong(B& b) {
  need_two_cpus("Floor/line=pingpong");
  const std::uint64_t pause_ps = corun::arch::pause_cost_ps();  // calibrates, untimed
  // 128 bytes: the word alone in its line and in the adjacent-line prefetcher's pair.
  struct alignas(128) Line {
    std::atomic<std::uint64_t> word{0};  // the handoffs done so far; even: thread 0's turn
  } line;
  const auto n = static_cast<std::uint64_t>(b.n);
  run_pinned(b, 2, [&line, n](int t) {
    auto& word = line.word;  // a local: captures live in the closure, reloaded after every atomic
    for (auto v = static_cast<std::uint64_t>(t); v < n; v += 2) {
      // acquire/release: the token hands over ownership, as a lock or channel handoff
      // publishes the data written before it (both plain movs on x86).
      while (word.load(std::memory_order_acquire) != v) corun::arch::cpu_relax();
      word.store(v + 1, std::memory_order_release);
    }
  });
  if (line.word.load(std::memory_order_relaxed) != n)
    throw std::logic_error(
        "Floor/line=pingpong: " + std::to_string(line.word.load(std::memory_order_relaxed)) +
        " handoffs, expected " + std::to_string(n));
  b.report_metric(static_cast<double>(pause_ps) / 1000.0, "pause-ns");
}

// ---- Floor/spinlock ------------------------------------------------------------------

void spinlock_floor(B& b) {
  const std::uint64_t pause_ps = corun::arch::pause_cost_ps();  // calibrates, untimed
  const int threads = b.procs();
  struct alignas(128) Lock {
    Word held{0};               // 0 free, 1 held; acquire on take, release on drop
    std::int64_t counter = 0;   // ops done; guarded by held
    int owner = -1;             // thread of the last op; guarded by held
    std::int64_t handoffs = 0;  // ops whose owner differs from the last op's; guarded by held
  } state;
  const std::int64_t n = b.n;
  std::vector<std::int64_t> mine(static_cast<std::size_t>(threads));  // slot t: thread t's
  run_pinned(b, threads, [&state, &mine, n](int t) {
    Lock& s = state;  // a local: captures live in the closure, reloaded after every atomic
    std::int64_t ops = 0;
    for (;;) {
      for (;;) {  // test-and-test-and-set
        std::uint32_t expected = 0;
        if (s.held.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                           std::memory_order_relaxed))
          break;
        // relaxed: only waits for a free lock; the CAS above takes it with acquire.
        while (s.held.load(std::memory_order_relaxed) != 0) corun::arch::cpu_relax();
      }
      const bool more = s.counter < n;
      if (more) {
        ++s.counter;
        if (s.owner != t) {
          ++s.handoffs;
          s.owner = t;
        }
      }
      s.held.store(0, std::memory_order_release);
      if (!more) break;
      ++ops;
    }
    mine[static_cast<std::size_t>(t)] = ops;  // read after the join
  });
  std::int64_t sum = 0;
  for (std::int64_t ops : mine) sum += ops;
  if (state.counter != n || sum != n)
    throw std::logic_error("Floor/spinlock: " + std::to_string(state.counter) +
                           " increments under the lock, " + std::to_string(sum) +
                           " ops by the threads, expected " + std::to_string(n));
  // The first op of each thread counts as a handoff; < procs() of b.n.
  report_per_op(b, state.handoffs, "handoffs/op");
  b.report_metric(static_cast<double>(pause_ps) / 1000.0, "pause-ns");
}

// ---- Floor/futex=wake ----------------------------------------------------------------

void futex_wake_floor(B& b) {
  need_two_cpus("Floor/futex=wake");
  struct alignas(128) Slot {
    // The last handoff delivered to this slot's thread, as its index + 1 (mod 2^32; the
    // threads are in lockstep, so no value comes round again while one waits for it).
    Word to{0};
  };
  Slot slots[2];
  std::int64_t sleeps[2] = {0, 0};  // slot t: thread t's; read after the join
  int errors[2] = {0, 0};           // slot t: thread t's first unexpected futex_wait errno
  const std::int64_t n = b.n;
  run_pinned(b, 2, [&slots, &sleeps, &errors, n](int t) {
    Word& in = slots[t].to;
    Word& out = slots[1 - t].to;
    std::int64_t slept = 0;
    for (std::int64_t h = t; h < n; h += 2) {  // handoff h is thread (h % 2)'s
      if (h > 0) {
        // Wait for handoff h - 1 (the other thread's). acquire: pairs with its release.
        const auto want = static_cast<std::uint32_t>(h);
        for (std::uint32_t v; (v = in.load(std::memory_order_acquire)) != want;) {
          const int r = corun::os::futex_wait(&in, v);
          if (r == 0)
            ++slept;
          else if (r != EAGAIN && r != EINTR && errors[t] == 0)
            errors[t] = r;  // keep going (spinning) so the other thread is not stranded
        }
      }
      out.store(static_cast<std::uint32_t>(h + 1), std::memory_order_release);
      corun::os::futex_wake(&out, 1);
    }
    sleeps[t] = slept;
  });
  for (int e : errors)
    if (e != 0) throw std::runtime_error(std::string("Floor/futex=wake: ") + std::strerror(e));
  // A wait can return 0 spuriously and wait again: sleeps/op may exceed 1 by that much.
  report_per_op(b, sleeps[0] + sleeps[1], "sleeps/op");
}

// ---- Floor/work=... ------------------------------------------------------------------
// The local work some Go benchmarks put in each op, alone: the share of the op neither
// runtime can remove. b.procs() threads split b.n (the work of one op at P Ps, if it
// spreads perfectly). Each loop is the benchmark's own (copied, three lines).
// - work=prodcons: SelectProdCons' (and ChanProdConsWork's) 100 rounds of foo *= 2;
//   foo /= 2 by the producer and 100 by the consumer (bench_chan.cpp prodcons_work).
// - work=div200: CommonParentCancel's 200 dependent divisions x /= x + 1, with Go's
//   semantics (go_div), as bench_context.cpp does them.
template <class T>
inline void keep(T& v) {
  asm volatile("" : "+r"(v));  // the value is used and changed: no folding, no hoisting
}

enum class Work { prodcons, div200 };

void work_floor(B& b, Work w) {
  const int threads = b.procs();
  std::vector<std::int64_t> sink(static_cast<std::size_t>(threads));
  const std::int64_t n = b.n;
  run_pinned(b, threads, [&sink, n, threads, w](int t) {
    const std::int64_t mine = n / threads + (t < n % threads ? 1 : 0);
    std::int64_t x = 0;
    for (std::int64_t op = 0; op < mine; ++op) {
      if (w == Work::prodcons) {
        for (int i = 0; i < 200; ++i) {
          x *= 2;
          keep(x);
          x /= 2;
        }
      } else {
        for (int i = 0; i < 200; ++i) {
          keep(x);
          x = corun::bench::go_div(x, x + 1);
        }
      }
    }
    sink[static_cast<std::size_t>(t)] = x;
  });
  if (sink[0] == 42) std::printf("%c", ' ');  // used: the loops stay
}

// Two frames down, as Conn::read reaches throw_poll; `guard` has a destructor to run.
struct Guard {
  std::int64_t* n;
  ~Guard() { ++*n; }
};
[[gnu::noinline]] void throw_timeout(const char* op) {
  throw corun::net::timeout_error(std::string("corun::net: ") + op +
                                  ": i/o timeout (deadline passed)");
}
[[gnu::noinline]] void call_throwing(std::int64_t* unwound) {
  Guard g{unwound};
  throw_timeout("read");
}

void throw_floor(B& b) {
  const std::int64_t n = b.n;
  std::int64_t caught = 0, unwound = 0;
  run_pinned(b, 1, [&caught, &unwound, n](int) {
    for (std::int64_t op = 0; op < n; ++op) {
      try {
        call_throwing(&unwound);
      } catch (const corun::net::timeout_error&) {
        ++caught;
      }
    }
  });
  if (caught != n || unwound != n)
    throw std::logic_error("Floor/throw: " + std::to_string(caught) + " caught, " +
                           std::to_string(unwound) + " unwound, expected " + std::to_string(n));
}

// A stand-in for Context: one pointer with a counted copy (not trivially copyable).
struct Counted {
  std::int64_t* refs;
  explicit Counted(std::int64_t* r) : refs(r) { ++*refs; }
  Counted(const Counted& o) : refs(o.refs) { ++*refs; }
  ~Counted() { --*refs; }
};

void function_floor(B& b) {
  const std::int64_t n = b.n;
  std::int64_t refs = 0;
  run_pinned(b, 1, [&refs, n](int) {
    for (std::int64_t op = 0; op < n; ++op) {
      // 8 bytes, as with_cancel's lambda (one Context); never called, as a CancelFunc
      // of a request that ends without canceling.
      std::function<void()> f = [c = Counted(&refs)] { ++*c.refs; };
      asm volatile("" : : "g"(&f) : "memory");  // f escapes: it is made and destroyed
    }
  });
  if (refs != 0)
    throw std::logic_error("Floor/alloc=function: " + std::to_string(refs) + " refs left");
}

[[maybe_unused]] const bool registered = [] {
  using corun::bench::register_benchmark;
  register_benchmark("Floor/atomic=cas+xadd", [](B& b) { atomic_floor(b, AtomicOp::cas_xadd); });
  register_benchmark("Floor/atomic=cas+store", [](B& b) { atomic_floor(b, AtomicOp::cas_store); });
  register_benchmark("Floor/atomic=load", [](B& b) { atomic_floor(b, AtomicOp::load); });
  register_benchmark("Floor/line=pingpong", line_pingpong);
  register_benchmark("Floor/spinlock", spinlock_floor);
  register_benchmark("Floor/futex=wake", futex_wake_floor);
  register_benchmark("Floor/work=prodcons", [](B& b) { work_floor(b, Work::prodcons); });
  register_benchmark("Floor/work=div200", [](B& b) { work_floor(b, Work::div200); });
  register_benchmark("Floor/throw=timeout_error", throw_floor);
  register_benchmark("Floor/alloc=function", function_floor);
  return true;
}();

}  // namespace
