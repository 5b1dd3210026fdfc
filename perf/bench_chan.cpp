// perf/bench_chan.cpp — channel and select benchmarks: Go's runtime/chan_test.go suite
// (and proc_test.go's PingPongHog) under Go's names, so scripts/go-compare pairs them
// with Go's own; the programs of the runnext-backoff change (Go CL 20835: Chain, ChainBuf,
// Sieve, Powser, from golang.org/s/go15gomaxprocs); and a request/response tail-latency
// benchmark. Twins of the ones Go's runtime package lacks are in scripts/gobench/chan_test.go.
//
// Every benchmark does exactly b.n ops (Go rounds b.N down to whole chunks of
// CallsPerSched; here the last chunk is short instead), says what its op is, reports cpu%
// (b.report_cpu()), and joins every task it started before it returns. Tasks capture
// channel handles by value (a handle keeps its channel alive: a peer may still be inside
// send() when the main task's recv() returns and the main task's handles are gone).
//
// Ported shapes (same task counts, chunk sizes, op):
// - localWork(w) and the producers' `foo *= 2; foo /= 2` keep their arithmetic through an
//   empty asm that hides foo's value from the optimiser (Go's compiler never folds them;
//   g++ would delete both loops outright).
// - SelectProdCons: Go selects on time.After(time.Hour) per task, a timer that never
//   fires; here that case is a channel nobody sends on (same select shape: a third case
//   that is never ready). corun's timers are not part of this suite.
// - PingPongHog: Go preempts the hog asynchronously; corun asks it to give up its P when
//   its 10 ms time slice is over, at its next non-blocking select that finds nothing
//   (chan.cpp's polled_nothing), so the hog is the same plain loop. Go's version also forces
//   GOMAXPROCS(1); a corun benchmark cannot change its P count, so PingPongHog-2 runs on
//   2 Ps here and on 1 in Go: only the -cpu 1 pair is like for like.
// - Sieve and Powser must leave no task parked; Go's test programs just exit. Sieve stops
//   its generator with a flag and drains (the chain closes itself, plain send/recv as in
//   sieve1.go); Powser's every channel op is a select with a per-op quit channel (the
//   demand network has cycles, so closing cannot be propagated), and a stream task that
//   sees quit unwinds with an exception caught at its root (Go twin: runtime.Goexit).
//
// Rejected: rounding b.n down as Go does (ops must equal b.n); a WaitGroup for the
// completion signals that chan_test.go sends on channels (its shapes are kept whole);
// recording ChanRequestResponse latencies in a histogram (raw samples give exact
// percentiles; they cost b.n int64s, 8 MB per million round trips, allocated untimed).
#include <corun/chan.hpp>
#include <corun/runtime.hpp>
#include <corun/sync.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench.hpp"

namespace {

using corun::Chan;
using corun::on_recv;
using corun::on_send;
using corun::otherwise;
using corun::bench::B;
using corun::bench::PB;

// Hides v's value from the optimiser (an empty asm that may read and write it), so the
// arithmetic around it is executed as written. Costs nothing at run time.
template <class T>
inline void opaque(T& v) {
  asm volatile("" : "+r"(v));
}

// Go's localWork (runtime/chan_test.go): w dependent 64-bit divisions, with Go's
// semantics (bench.hpp go_div).
bool g_always_false = false;  // never set; with g_work_sink, keeps foo observable (Go's)
std::int64_t g_work_sink = 0;

[[gnu::noinline]] void local_work(int w) {
  std::int64_t foo = 0;
  for (int i = 0; i < w; ++i) {
    opaque(foo);
    foo = corun::bench::go_div(foo, foo + 1);
  }
  bool always_false = g_always_false;
  opaque(always_false);
  if (always_false) g_work_sink += foo;
}

// The producers'/consumers' local work of benchmarkChanProdCons: foo *= 2; foo /= 2.
inline void prodcons_work(std::int64_t& foo, int w) {
  for (int i = 0; i < w; ++i) {
    foo *= 2;
    opaque(foo);
    foo /= 2;
  }
}

// Hands out up to `chunk` of the ops left in *left (relaxed: a plain work counter; the
// join publishes everything else). Returns 0 when none are left.
std::int64_t take_chunk(std::atomic<std::int64_t>* left, std::int64_t chunk) {
  const std::int64_t before = left->fetch_sub(chunk, std::memory_order_relaxed);
  if (before <= 0) return 0;
  return std::min(before, chunk);
}

// ---- ChanSync, ChanSyncWork ------------------------------------------------------------
// Go's benchmarkChanSync(b, work): 2 tasks (whatever procs is) take chunks of
// CallsPerSched = 1000 calls from a shared counter; an even chunk does (recv, work, send,
// work) per call, an odd one (send, work, recv, work), on one unbuffered channel, so the
// two tasks ping-pong. op = one call = one message through the channel. Chunks pair up
// (2j, 2j+1) and are taken in decreasing order; to make ops == b.n the last pair (0, 1) is
// short, and if b.n is odd chunk 0 ends with one extra recv and chunk 1 with one extra send.

void chan_sync(B& b, int work) {
  constexpr std::int64_t kCallsPerSched = 1000;
  constexpr int kProcs = 2;
  const std::int64_t full_pairs = b.n / (2 * kCallsPerSched);
  const std::int64_t rem = b.n % (2 * kCallsPerSched);
  const std::int64_t last_calls = rem / 2;
  const bool extra = rem % 2 != 0;
  std::atomic<std::int64_t> next_chunk{2 * full_pairs + (rem != 0 ? 2 : 0)};
  Chan<bool> c(kProcs);
  Chan<int> myc;
  for (int p = 0; p < kProcs; ++p) {
    corun::go([&next_chunk, c, myc, work, last_calls, extra, rem]() mutable {
      for (;;) {
        // relaxed: hands out chunk numbers only (the channel hand-offs order the rest).
        const std::int64_t i = next_chunk.fetch_sub(1, std::memory_order_relaxed) - 1;
        if (i < 0) break;
        const bool last_pair = rem != 0 && i < 2;
        const std::int64_t calls = last_pair ? last_calls : kCallsPerSched;
        for (std::int64_t g = 0; g < calls; ++g) {
          if (i % 2 == 0) {
            myc.recv();
            local_work(work);
            myc.send(0);
            local_work(work);
          } else {
            myc.send(0);
            local_work(work);
            myc.recv();
            local_work(work);
          }
        }
        if (last_pair && extra) {
          if (i % 2 == 0)
            myc.recv();
          else
            myc.send(0);
        }
      }
      c.send(true);
    });
  }
  for (int p = 0; p < kProcs; ++p) c.recv();
  b.report_cpu();
}

CORUN_BENCHMARK(ChanSync) {
  chan_sync(b, 0);
}

CORUN_BENCHMARK(ChanSyncWork) {
  chan_sync(b, 1000);
}

// ---- ChanProdCons{0,10,100}, ChanProdConsWork{0,10,100} -------------------------------
// Go's benchmarkChanProdCons(b, chanSize, localWork): procs producers and procs consumers
// on one channel of capacity chanSize. Producers take chunks of CallsPerSched = 1000 ops
// (the last one short), and per op do localWork rounds of foo*=2, foo/=2 then send 1;
// each producer ends with a 0. A consumer receives until its first 0, doing localWork
// rounds per value. op = one value from a producer to a consumer.

void chan_prod_cons(B& b, int chan_size, int work) {
  constexpr std::int64_t kCallsPerSched = 1000;
  const int procs = b.procs();
  std::atomic<std::int64_t> left{b.n};
  Chan<bool> c(2 * procs);
  Chan<int> myc(chan_size);
  for (int p = 0; p < procs; ++p) {
    corun::go([&left, c, myc, work]() mutable {
      std::int64_t foo = 0;
      while (const std::int64_t k = take_chunk(&left, kCallsPerSched)) {
        for (std::int64_t g = 0; g < k; ++g) {
          prodcons_work(foo, work);
          myc.send(1);
        }
      }
      myc.send(0);
      c.send(foo == 42);
    });
    corun::go([c, myc, work]() mutable {
      std::int64_t foo = 0;
      for (;;) {
        const int v = *myc.recv();
        if (v == 0) break;
        prodcons_work(foo, work);
      }
      c.send(foo == 42);
    });
  }
  for (int p = 0; p < procs; ++p) {
    c.recv();
    c.recv();
  }
  b.report_cpu();
}

const bool g_prod_cons_registered = [] {
  for (int size : {0, 10, 100}) {
    corun::bench::register_benchmark("ChanProdCons" + std::to_string(size),
                                     [size](B& b) { chan_prod_cons(b, size, 0); });
  }
  for (int size : {0, 10, 100}) {
    corun::bench::register_benchmark("ChanProdConsWork" + std::to_string(size),
                                     [size](B& b) { chan_prod_cons(b, size, 100); });
  }
  return true;
}();

// ---- ChanContended, ChanUncontended ----------------------------------------------------
// op = 100 sends then 100 receives on a buffered channel of capacity 100 * procs shared by
// all run_parallel workers (Contended), or of capacity 100 owned by each worker
// (Uncontended: never blocks).

CORUN_BENCHMARK(ChanContended) {
  constexpr int kC = 100;
  Chan<int> myc(kC * b.procs());
  b.run_parallel([&myc](PB& pb) {
    while (pb.next()) {
      for (int i = 0; i < kC; ++i) myc.send(0);
      for (int i = 0; i < kC; ++i) myc.recv();
    }
  });
  b.report_cpu();
}

CORUN_BENCHMARK(ChanUncontended) {
  constexpr int kC = 100;
  b.run_parallel([](PB& pb) {
    Chan<int> myc(kC);
    while (pb.next()) {
      for (int i = 0; i < kC; ++i) myc.send(0);
      for (int i = 0; i < kC; ++i) myc.recv();
    }
  });
  b.report_cpu();
}

// ---- SelectUncontended, SelectSyncContended, SelectProdCons ------------------------------
// SelectUncontended: each worker owns two capacity-1 channels holding one token between
// them; op = one select over both receives that moves the token to the other channel.

CORUN_BENCHMARK(SelectUncontended) {
  b.run_parallel([](PB& pb) {
    Chan<int> myc1(1);
    Chan<int> myc2(1);
    myc1.send(0);
    while (pb.next()) {
      corun::select(on_recv(myc1, [&myc2] { myc2.send(0); }),
                    on_recv(myc2, [&myc1] { myc1.send(0); }));
    }
  });
  b.report_cpu();
}

// SelectSyncContended: three shared unbuffered channels; each worker starts a sender
// task that selects a send on any of the three (or quits when done is closed), and then
// selects a receive on any of the three. op = one such receive (one rendezvous between
// some sender and some worker). The senders are joined after done is closed, untimed.
CORUN_BENCHMARK(SelectSyncContended) {
  Chan<int> myc1, myc2, myc3;
  Chan<int> done;
  corun::WaitGroup senders;
  b.run_parallel([&](PB& pb) {
    senders.add(1);
    corun::go([myc1, myc2, myc3, done, &senders] {
      for (;;) {
        const std::size_t k = corun::select(on_send(myc1, 0, [] {}), on_send(myc2, 0, [] {}),
                                            on_send(myc3, 0, [] {}), on_recv(done, [] {}));
        if (k == 3) break;
      }
      senders.done();
    });
    while (pb.next())
      corun::select(on_recv(myc1, [] {}), on_recv(myc2, [] {}), on_recv(myc3, [] {}));
  });
  b.stop_timer();
  done.close();
  senders.wait();
  b.report_cpu();
}

// SelectProdCons: ChanProdConsWork's shape with selects: procs producers and procs
// consumers on one channel of capacity 128; a producer does 100 rounds of work then
// selects {send 1, its never-ready channel (Go: time.After(time.Hour)), a shared close
// channel nobody closes}; a consumer selects the receive among the same three and then
// does 100 rounds of work. op = one value from a producer to a consumer.
CORUN_BENCHMARK(SelectProdCons) {
  constexpr std::int64_t kCallsPerSched = 1000;
  const int procs = b.procs();
  std::atomic<std::int64_t> left{b.n};
  Chan<bool> c(2 * procs);
  Chan<int> myc(128);
  Chan<bool> myclose;
  for (int p = 0; p < procs; ++p) {
    corun::go([&left, c, myc, myclose]() mutable {
      std::int64_t foo = 0;
      Chan<int> mytimer;  // never sent on: Go's time.After(time.Hour), which never fires
      while (const std::int64_t k = take_chunk(&left, kCallsPerSched)) {
        for (std::int64_t g = 0; g < k; ++g) {
          prodcons_work(foo, 100);
          corun::select(on_send(myc, 1, [] {}), on_recv(mytimer, [] {}), on_recv(myclose, [] {}));
        }
      }
      myc.send(0);
      c.send(foo == 42);
    });
    corun::go([c, myc, myclose]() mutable {
      std::int64_t foo = 0;
      Chan<int> mytimer;
      for (;;) {
        bool last = false;
        corun::select(on_recv(myc, [&last](std::optional<int> v) { last = *v == 0; }),
                      on_recv(mytimer, [] {}), on_recv(myclose, [] {}));
        if (last) break;
        prodcons_work(foo, 100);
      }
      c.send(foo == 42);
    });
  }
  for (int p = 0; p < procs; ++p) {
    c.recv();
    c.recv();
  }
  b.report_cpu();
}

// ---- PingPongHog -----------------------------------------------------------------------
// Go's BenchmarkPingPongHog (proc_test.go): a hog task spins on a non-blocking select of
// stop; two tasks bounce a value b.n times over two unbuffered channels. op = one round
// trip (ping -> pong -> ping). The timer covers the first ping to the close of stop, as
// in Go. `done` has room for the three exit signals (Go's is unbuffered; it is outside
// the timed region): a task parked on its last send would be readied but not run before
// the body returns, and the last run's such task would be abandoned unfinished when the
// runtime stops (LeakSanitizer would report its channels).

CORUN_BENCHMARK(PingPongHog) {
  if (b.n == 0) return;
  Chan<bool> stop;
  Chan<bool> done(3);
  corun::go([stop, done]() mutable {
    for (;;) {
      if (corun::select(on_recv(stop, [] {}), otherwise([] {})) == 0) {
        done.send(true);
        return;
      }
    }
  });
  Chan<bool> ping, pong;
  const std::int64_t n = b.n;
  corun::go([ping, pong, stop, done, n]() mutable {
    for (std::int64_t j = 0; j < n; ++j) pong.send(*ping.recv());
    stop.close();
    done.send(true);
  });
  corun::go([ping, pong, done, n]() mutable {
    for (std::int64_t i = 0; i < n; ++i) ping.send(*pong.recv());
    done.send(true);
  });
  b.reset_timer();
  ping.send(true);  // start the ping-pong
  stop.recv();
  b.stop_timer();
  ping.recv();  // let the last ponger exit
  done.recv();  // make sure the tasks exit
  done.recv();
  done.recv();
  b.report_cpu();
}

// ---- Chain, ChainBuf -------------------------------------------------------------------
// 100 tasks in series over 100 channels (unbuffered / capacity 1): the main task sends
// into the first, task k forwards channel k to channel k+1, the last task sums what it
// receives. The chain is started once per run (untimed); the main task pushes b.n values
// and closes the first channel; each task closes its output when its input is drained;
// the run ends when the last task has exited. op = one value through all 100 channels.

void chain(B& b, std::size_t capacity) {
  constexpr int kLength = 100;
  std::vector<Chan<std::int64_t>> ch;
  ch.reserve(kLength);
  for (int k = 0; k < kLength; ++k) ch.emplace_back(capacity);
  corun::WaitGroup exited;
  exited.add(kLength);
  for (int k = 0; k + 1 < kLength; ++k) {
    corun::go([in = ch[k], out = ch[k + 1], &exited]() mutable {
      while (auto v = in.recv()) out.send(*v);
      out.close();
      exited.done();
    });
  }
  std::int64_t sum = 0;  // written by the last task, read after exited.wait()
  corun::go([in = ch[kLength - 1], &sum, &exited]() mutable {
    while (auto v = in.recv()) sum += *v;
    exited.done();
  });
  b.reset_timer();
  for (std::int64_t i = 0; i < b.n; ++i) ch[0].send(i);
  ch[0].close();
  exited.wait();
  b.stop_timer();
  if (sum != b.n * (b.n - 1) / 2)
    throw std::logic_error("Chain: the values summed to " + std::to_string(sum) + ", expected " +
                           std::to_string(b.n * (b.n - 1) / 2));
  b.report_cpu();
}

CORUN_BENCHMARK(Chain) {
  chain(b, 0);
}

CORUN_BENCHMARK(ChainBuf) {
  chain(b, 1);
}

// ---- Sieve -----------------------------------------------------------------------------
// Go's test/chan/sieve1.go: a generator sends 2, 3, 4, ... on an unbuffered channel; the
// sieve task receives a prime from the head of its chain, sends it on `primes` and appends
// a filter task (removing its multiples) to the chain. op = a fresh sieve computing the
// first 25 primes (checked), then torn down: the main task sets `stop`, which the
// generator reads before each send, and receives primes until the chain, closing from
// the generator down, closes `primes`; every task is joined (a few more filters may be
// spawned for primes beyond 97 on their way through while it drains).

constexpr std::array<int, 25> kPrimes = {2,  3,  5,  7,  11, 13, 17, 19, 23, 29, 31, 37, 41,
                                         43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97};

void sieve_once() {
  Chan<int> primes;
  std::atomic<bool> stop{false};  // relaxed: a stop signal; the joins carry the data
  corun::WaitGroup exited;
  exited.add(1);
  corun::go([primes, &stop, &exited]() mutable {
    Chan<int> ch;
    exited.add(1);  // the sieve task itself is counted, so the counter cannot reach 0 here
    corun::go([ch, &stop, &exited]() mutable {
      for (int i = 2; !stop.load(std::memory_order_relaxed); ++i) ch.send(i);
      ch.close();
      exited.done();
    });
    while (auto prime = ch.recv()) {
      primes.send(*prime);
      Chan<int> ch1;
      exited.add(1);
      corun::go([in = ch, out = ch1, p = *prime, &exited]() mutable {
        while (auto i = in.recv())
          if (*i % p != 0) out.send(*i);
        out.close();
        exited.done();
      });
      ch = ch1;
    }
    primes.close();
    exited.done();
  });
  std::string error;  // thrown after the teardown: the tasks use this frame until then
  for (int want : kPrimes) {
    const std::optional<int> got = primes.recv();
    if (got != want) {
      error = "Sieve: got " + (got ? std::to_string(*got) : "a closed channel") + ", want " +
              std::to_string(want);
      break;
    }
  }
  stop.store(true, std::memory_order_relaxed);
  while (primes.recv()) {
  }
  exited.wait();
  if (!error.empty()) throw std::logic_error(error);
}

CORUN_BENCHMARK(Sieve) {
  for (std::int64_t i = 0; i < b.n; ++i) sieve_once();
  b.report_cpu();
}

// ---- Powser ----------------------------------------------------------------------------
// Go's test/chan/powser1.go (McIlroy, "Squinting at Power Series"): a power series is a
// demand channel pair (req, dat) served by its own task; coefficients are int64
// rationals, den == 0 ends a series. Ported: gcd, i2tor, add, mul, neg, split/dosplit
// (generations that replicate one series onto two), get, put, get2, copy, repeat, Add,
// Cmul, Sub, Mul, Diff, Integ, Exp, MonSubst (and Split); left out: the printing and
// the constructors its checks do not use (Mon, Xmul, Shift, Recip, Subst, Binom).
// op = a fresh set of streams running powser1's checks to kPowserTerms terms (Ones,
// Add, Diff, Integ, Cmul, Sub, Mul, Exp, ATan) plus sin^2 + cos^2 = 1 with sin and cos
// defined by each other (sin = Integ(0, cos), cos = Integ(1, -sin)); ~1070 stream tasks.
// The teardown that follows (quit closed, all ~1070 tasks joined) is untimed: it is not
// in Go's program, and C++ unwinding makes it several times costlier than Go's Goexit.
// Arithmetic overflow throws (Go would wrap): kPowserTerms = 18 stays inside int64.

namespace powser {

constexpr int kPowserTerms = 18;  // 20 overflows int64

struct Rat {
  std::int64_t num;
  std::int64_t den;
  friend bool operator==(const Rat&, const Rat&) = default;
};

std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw std::overflow_error("Powser: int64 overflow (lower kPowserTerms)");
  return r;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw std::overflow_error("Powser: int64 overflow (lower kPowserTerms)");
  return r;
}

std::int64_t gcd(std::int64_t u, std::int64_t v) {
  if (u < 0) return gcd(-u, v);
  if (u == 0) return v;
  return gcd(v % u, u);
}

Rat i2tor(std::int64_t u, std::int64_t v) {
  const std::int64_t g = gcd(u, v);
  if (v > 0) return {u / g, v / g};
  return {-u / g, -v / g};
}

Rat itor(std::int64_t u) {
  return i2tor(u, 1);
}

const Rat kZero = itor(0);
const Rat kOne = itor(1);
const Rat kFinis = i2tor(1, 0);  // the end mark

int end(Rat u) {
  return u.den == 0 ? 1 : 0;
}

Rat add(Rat u, Rat v) {
  const std::int64_t g = gcd(u.den, v.den);
  return i2tor(checked_add(checked_mul(u.num, v.den / g), checked_mul(v.num, u.den / g)),
               checked_mul(u.den, v.den / g));
}

Rat mul(Rat u, Rat v) {
  const std::int64_t g1 = gcd(u.num, v.den);
  const std::int64_t g2 = gcd(u.den, v.num);
  return {checked_mul(u.num / g1, v.num / g2), checked_mul(u.den / g2, v.den / g1)};
}

Rat neg(Rat u) {
  return i2tor(-u.num, u.den);
}

// Coefficients the checks expect, computed sequentially.
// exp(U) for U = Ones with its constant term ignored: Z' = Z U', z0 = 1, so
// (n+1) z[n+1] = sum_k z[k] (n-k+1).
std::vector<Rat> exp_ones(int n) {
  std::vector<Rat> z(n);
  z[0] = kOne;
  for (int m = 0; m + 1 < n; ++m) {
    Rat s = kZero;
    for (int k = 0; k <= m; ++k) s = add(s, mul(z[k], itor(m - k + 1)));
    z[m + 1] = mul(s, i2tor(1, m + 1));
  }
  return z;
}

// exp_ones must agree with powser1.go's table of exp(Ones).
void check_exp_reference() {
  constexpr std::array<std::int64_t, 10> kNum = {1, 1, 3, 13, 73, 167, 4051, 37633, 43817, 4596553};
  constexpr std::array<std::int64_t, 10> kDen = {1, 1, 2, 6, 24, 40, 720, 5040, 4480, 362880};
  const std::vector<Rat> z = exp_ones(10);
  for (std::size_t i = 0; i < kNum.size(); ++i)
    if (!(z[i] == i2tor(kNum[i], kDen[i])))
      throw std::logic_error("Powser: exp_ones disagrees with powser1.go's table");
}

struct Dch {  // a demand channel: a request (any int) on req is answered on dat
  Chan<std::int64_t> req;
  Chan<Rat> dat;
};
// The outputs of a split, shared by its generations (the current one may swap them).
using Dch2 = std::shared_ptr<std::array<Dch, 2>>;

struct Quit {};  // thrown by a stream's channel op once quit is closed; caught at its root

// One op's stream network. The main task runs check(); every stream task is spawned with
// spawn(), counted in exited_, and unwinds with Quit once quit_ is closed.
class Net {
 public:
  void run_checks(int n);
  // Closes quit and joins every stream task (each unwinds with Quit: ~1 µs per task for
  // the C++ exception, ~1000 tasks per op, so the benchmark leaves this untimed).
  void shutdown() {
    quit_.close();
    exited_.wait();
  }

 private:
  template <class F>
  void spawn(F f) {
    exited_.add(1);
    corun::go([this, f = std::move(f)]() mutable {
      try {
        f();
      } catch (const Quit&) {
      }
      exited_.done();
    });
  }

  template <class T>
  T recv(const Chan<T>& c) {
    std::optional<T> got;
    corun::select(on_recv(c, [&got](std::optional<T> v) { got = std::move(v); }),
                  on_recv(quit_, [] {}));
    if (!got) throw Quit{};
    return *got;
  }

  template <class T>
  void send(const Chan<T>& c, T v) {
    if (corun::select(on_send(c, std::move(v), [] {}), on_recv(quit_, [] {})) == 1) throw Quit{};
  }

  std::int64_t next_seqno() {
    // relaxed: powser1's global seqno++ (a racy counter in Go); the value is never used.
    return seqno_.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  static Dch mkdch() { return Dch{Chan<std::int64_t>(), Chan<Rat>()}; }
  static Dch2 mkdch2() {
    return std::make_shared<std::array<Dch, 2>>(std::array{mkdch(), mkdch()});
  }

  // split reads a single demand channel and replicates its output onto two, which may be
  // read at different rates (powser1's comment): a generation serves one datum to both.
  void dosplit(Dch in, Dch2 out, Chan<int> wait) {
    bool both = false;  // do not service both channels
    std::array<Dch, 2>& o = *out;
    const std::size_t k =
        corun::select(on_recv(o[0].req, [] {}), on_recv(wait, [] {}), on_recv(quit_, [] {}));
    if (k == 2) throw Quit{};
    if (k == 1) {
      both = true;
      const std::size_t k2 =
          corun::select(on_recv(o[0].req, [] {}), on_recv(o[1].req, [] {}), on_recv(quit_, [] {}));
      if (k2 == 2) throw Quit{};
      if (k2 == 1) std::swap(o[0], o[1]);
    }
    send(in.req, next_seqno());
    Chan<int> release;
    spawn([this, in, out, release] { dosplit(in, out, release); });
    const Rat dat = recv(in.dat);
    send(o[0].dat, dat);
    if (!both) recv(wait);
    recv(o[1].req);
    send(o[1].dat, dat);
    send(release, 0);
  }

  void split(const Dch& in, const Dch2& out) {
    Chan<int> release;
    spawn([this, in, out, release] { dosplit(in, out, release); });
    send(release, 0);
  }

  void put(Rat dat, const Dch& out) {
    recv(out.req);
    send(out.dat, dat);
  }

  Rat get(const Dch& in) {
    send(in.req, next_seqno());
    return recv(in.dat);
  }

  // One rat from each of 2 demand channels, requests and answers in any order (nil
  // channels disable the cases already done).
  std::array<Rat, 2> get2(const Dch& in0, const Dch& in1) {
    std::array<Chan<std::int64_t>, 2> req = {in0.req, in1.req};
    std::array<Chan<Rat>, 2> dat = {Chan<Rat>::nil(), Chan<Rat>::nil()};
    std::array<Rat, 2> out{};
    for (int n = 4; n > 0; --n) {
      const std::int64_t s = next_seqno();
      auto sent0 = [&] {
        dat[0] = in0.dat;
        req[0] = nullptr;
      };
      auto sent1 = [&] {
        dat[1] = in1.dat;
        req[1] = nullptr;
      };
      auto got0 = [&](std::optional<Rat> it) {
        out[0] = *it;
        dat[0] = nullptr;
      };
      auto got1 = [&](std::optional<Rat> it) {
        out[1] = *it;
        dat[1] = nullptr;
      };
      const std::size_t k =
          corun::select(on_send(req[0], s, sent0), on_send(req[1], s, sent1), on_recv(dat[0], got0),
                        on_recv(dat[1], got1), on_recv(quit_, [] {}));
      if (k == 4) throw Quit{};
    }
    return out;
  }

  void copy(const Dch& in, const Dch& out) {
    for (;;) {
      recv(out.req);
      send(out.dat, get(in));
    }
  }

  void repeat(Rat dat, const Dch& out) {
    for (;;) put(dat, out);
  }

  // A pair of series identical to U; the pair is read before the split task may swap it.
  std::array<Dch, 2> Split(const Dch& U) {
    Dch2 UU = mkdch2();
    std::array<Dch, 2> pair = *UU;
    spawn([this, U, UU] { split(U, UU); });
    return pair;
  }

  Dch Add(const Dch& U, const Dch& V) {
    Dch Z = mkdch();
    spawn([this, U, V, Z] {
      for (;;) {
        recv(Z.req);
        const std::array<Rat, 2> uv = get2(U, V);
        switch (end(uv[0]) + 2 * end(uv[1])) {
          case 0:
            send(Z.dat, add(uv[0], uv[1]));
            break;
          case 1:
            send(Z.dat, uv[1]);
            copy(V, Z);
            break;
          case 2:
            send(Z.dat, uv[0]);
            copy(U, Z);
            break;
          case 3:
            send(Z.dat, kFinis);
            break;
        }
      }
    });
    return Z;
  }

  Dch Cmul(Rat c, const Dch& U) {
    Dch Z = mkdch();
    spawn([this, c, U, Z] {
      bool done = false;
      while (!done) {
        recv(Z.req);
        const Rat u = get(U);
        if (end(u) != 0)
          done = true;
        else
          send(Z.dat, mul(c, u));
      }
      send(Z.dat, kFinis);
    });
    return Z;
  }

  Dch Sub(const Dch& U, const Dch& V) { return Add(U, Cmul(neg(kOne), V)); }

  Dch Rep(Rat c) {
    Dch Z = mkdch();
    spawn([this, c, Z] { repeat(c, Z); });
    return Z;
  }

  // Multiply: U = u + x UU, V = v + x VV, UV = u v + x (u VV + v UU) + x^2 UU VV.
  Dch Mul(const Dch& U, const Dch& V) {
    Dch Z = mkdch();
    spawn([this, U, V, Z] {
      recv(Z.req);
      const std::array<Rat, 2> uv = get2(U, V);
      if (end(uv[0]) != 0 || end(uv[1]) != 0) {
        send(Z.dat, kFinis);
      } else {
        send(Z.dat, mul(uv[0], uv[1]));
        const std::array<Dch, 2> UU = Split(U);
        const std::array<Dch, 2> VV = Split(V);
        const Dch W = Add(Cmul(uv[0], VV[0]), Cmul(uv[1], UU[0]));
        recv(Z.req);
        send(Z.dat, get(W));
        copy(Add(W, Mul(UU[1], VV[1])), Z);
      }
    });
    return Z;
  }

  Dch Diff(const Dch& U) {
    Dch Z = mkdch();
    spawn([this, U, Z] {
      recv(Z.req);
      Rat u = get(U);
      if (end(u) == 0) {
        bool done = false;
        for (std::int64_t i = 1; !done; ++i) {
          u = get(U);
          if (end(u) != 0) {
            done = true;
          } else {
            send(Z.dat, mul(itor(i), u));
            recv(Z.req);
          }
        }
      }
      send(Z.dat, kFinis);
    });
    return Z;
  }

  // Integrate, with constant of integration c.
  Dch Integ(Rat c, const Dch& U) {
    Dch Z = mkdch();
    spawn([this, c, U, Z] {
      put(c, Z);
      bool done = false;
      for (std::int64_t i = 1; !done; ++i) {
        recv(Z.req);
        const Rat u = get(U);
        if (end(u) != 0) done = true;
        send(Z.dat, mul(i2tor(1, i), u));
      }
      send(Z.dat, kFinis);
    });
    return Z;
  }

  // Exponential of a series with constant term 0 (it is ignored): Z = exp(U), DZ = Z DU.
  Dch Exp(const Dch& U) {
    Dch2 ZZ = mkdch2();
    const std::array<Dch, 2> zz = *ZZ;
    split(Integ(kOne, Mul(zz[0], Diff(U))), ZZ);
    return zz[1];
  }

  // Monomial substitution U(c x^n): each U[i] times c^i, followed by n-1 zeros.
  Dch MonSubst(const Dch& U, Rat c0, int n) {
    Dch Z = mkdch();
    spawn([this, U, c0, n, Z] {
      Rat c = kOne;
      for (;;) {
        recv(Z.req);
        const Rat u = get(U);
        send(Z.dat, mul(u, c));
        c = mul(c, c0);
        if (end(u) != 0) {
          send(Z.dat, kFinis);
          break;
        }
        for (int i = 1; i < n; ++i) {
          recv(Z.req);
          send(Z.dat, kZero);
        }
      }
    });
    return Z;
  }

  void check(const Dch& U, Rat c, int count, const char* what) {
    for (int i = 0; i < count; ++i) {
      const Rat r = get(U);
      if (!(r == c))
        throw std::logic_error(std::string("Powser: ") + what + " term " + std::to_string(i) +
                               ": got " + std::to_string(r.num) + "/" + std::to_string(r.den) +
                               ", want " + std::to_string(c.num) + "/" + std::to_string(c.den));
    }
  }

  void checka(const Dch& U, const std::vector<Rat>& a, const char* what) {
    for (const Rat& r : a) check(U, r, 1, what);
  }

  Chan<bool> quit_;          // closed when the op's checks are done: every stream unwinds
  corun::WaitGroup exited_;  // counts the live stream tasks
  std::atomic<std::int64_t> seqno_{0};
};

void Net::run_checks(int n) {
  const Dch ones = Rep(kOne);
  const Dch twos = Rep(itor(2));
  std::vector<Rat> a(n);

  check(ones, kOne, 5, "Ones");
  check(Add(ones, ones), itor(2), 0, "Add Ones Ones");
  check(Add(ones, twos), itor(3), 0, "Add Ones Twos");
  const Dch d = Diff(ones);
  for (int i = 0; i < n; ++i) a[i] = itor(i + 1);
  checka(d, a, "Diff");  // 1 2 3 4 5
  const Dch in = Integ(kZero, ones);
  a[0] = kZero;
  for (int i = 1; i < n; ++i) a[i] = i2tor(1, i);
  checka(in, a, "Integ");  // 0 1 1/2 1/3 1/4
  check(Cmul(neg(kOne), twos), itor(-2), 10, "CMul");
  check(Sub(ones, twos), itor(-1), 0, "Sub Ones Twos");
  const Dch m = Mul(ones, ones);
  for (int i = 0; i < n; ++i) a[i] = itor(i + 1);
  checka(m, a, "Mul");  // 1 2 3 4 5
  // 1 1 3/2 13/6 73/24
  checka(Exp(ones), exp_ones(n), "Exp");
  const Dch at = Integ(kZero, MonSubst(ones, neg(kOne), 2));
  for (int c = 1, i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      a[i] = kZero;
    } else {
      a[i] = i2tor(c, i);
      c *= -1;
    }
  }
  checka(at, a, "ATan");  // 0 1 0 -1/3 0 1/5

  // sin = Integ(0, cos), cos = Integ(1, -sin); sin^2 + cos^2 = 1 0 0 0 ...
  const Dch2 SS = mkdch2();
  const Dch2 CC = mkdch2();
  const std::array<Dch, 2> ss = *SS;
  const std::array<Dch, 2> cc = *CC;
  split(Integ(kOne, Cmul(neg(kOne), ss[0])), CC);
  split(Integ(kZero, cc[0]), SS);
  const std::array<Dch, 2> s = Split(ss[1]);
  const std::array<Dch, 2> c = Split(cc[1]);
  for (int i = 0; i < n; ++i) a[i] = i == 0 ? kOne : kZero;
  checka(Add(Mul(s[0], s[1]), Mul(c[0], c[1])), a, "sin^2+cos^2");
}

}  // namespace powser

CORUN_BENCHMARK(Powser) {
  powser::check_exp_reference();
  b.reset_timer();
  for (std::int64_t i = 0; i < b.n; ++i) {
    powser::Net net;
    try {
      net.run_checks(powser::kPowserTerms);
    } catch (...) {
      net.shutdown();  // the stream tasks use net until they are joined
      throw;
    }
    b.stop_timer();
    net.shutdown();
    b.start_timer();
  }
  b.report_cpu();
}

// ---- ChanRequestResponse ---------------------------------------------------------------
// Tail latency of a request/response server: one server task per P receives requests on
// one shared unbuffered channel and answers each on the reply channel the request
// carries; 4 x procs client tasks each loop: stamp, send a request, receive the reply,
// stamp. Each client allocates its reply channel (Chan<Reply>, capacity 1) once and
// reuses it for all its requests (so the figure is scheduling and channel cost, not
// allocation). op = one round trip; b.n round trips are split evenly between the clients.
// Metrics: p50-ns, p99-ns, p999-ns, max-ns and mean-ns of the round-trip times
// (steady_clock, per-client sample vectors allocated before the timer starts, merged after
// it stops), starved% (the share of all round-trip time in round trips over 100 µs), and
// cpu%.

struct Reply {
  std::int64_t v;
};
struct Request {
  std::int64_t v;
  Chan<Reply> reply;
};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr std::int64_t kStarvedNs = 100'000;  // a round trip this long was passed over

CORUN_BENCHMARK(ChanRequestResponse) {
  const int servers = b.procs();
  const int clients = 4 * b.procs();
  b.stop_timer();
  std::vector<std::vector<std::int64_t>> samples(clients);
  for (int c = 0; c < clients; ++c) samples[c].resize(b.n / clients + (c < b.n % clients ? 1 : 0));
  Chan<Request> requests;
  corun::WaitGroup servers_exited, clients_done;
  servers_exited.add(servers);
  for (int s = 0; s < servers; ++s) {
    corun::go([requests, &servers_exited]() mutable {
      while (auto r = requests.recv()) r->reply.send(Reply{r->v + 1});
      servers_exited.done();
    });
  }
  b.reset_timer();
  b.start_timer();
  clients_done.add(clients);
  for (int c = 0; c < clients; ++c) {
    corun::go([requests, out = &samples[c], &clients_done]() mutable {
      Chan<Reply> reply(1);
      std::int64_t* lat = out->data();
      const std::size_t count = out->size();
      for (std::size_t i = 0; i < count; ++i) {
        const std::int64_t t0 = now_ns();
        requests.send(Request{static_cast<std::int64_t>(i), reply});
        const std::optional<Reply> r = reply.recv();
        lat[i] = now_ns() - t0;
        if (!r || r->v != static_cast<std::int64_t>(i) + 1)
          throw std::logic_error("ChanRequestResponse: wrong reply");
      }
      clients_done.done();
    });
  }
  clients_done.wait();
  b.stop_timer();
  requests.close();
  servers_exited.wait();

  std::vector<std::int64_t> all;
  all.reserve(static_cast<std::size_t>(b.n));
  for (const auto& v : samples) all.insert(all.end(), v.begin(), v.end());
  if (all.empty()) return;
  // Nearest-rank percentile: the smallest sample with at least permille/1000 of all
  // samples <= it, i.e. the ceil(q n)-th smallest.
  auto percentile = [&all](std::size_t permille) {
    const std::size_t rank = (permille * all.size() + 999) / 1000 - 1;
    std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(rank), all.end());
    return static_cast<double>(all[rank]);
  };
  b.report_metric(percentile(500), "p50-ns");
  b.report_metric(percentile(990), "p99-ns");
  b.report_metric(percentile(999), "p999-ns");
  // The tail past p999 (a client passed over for whole time slices while a request and
  // its reply ping-pong on one P) and the mean it drags up: clients x ns/op.
  b.report_metric(percentile(1000), "max-ns");
  double sum = 0;
  for (std::int64_t v : all) sum += static_cast<double>(v);
  b.report_metric(sum / static_cast<double>(all.size()), "mean-ns");
  // The share of all round-trip time spent in round trips over 100 µs: clients passed
  // over while others' hand-off chains hold the Ps (RESULTS, 2026-12-07 later). While it
  // is high, few clients are active at a time, and p50 is their round trip.
  double starved = 0;
  for (std::int64_t v : all)
    if (v > kStarvedNs) starved += static_cast<double>(v);
  b.report_metric(sum > 0 ? 100 * starved / sum : 0, "starved%");
  b.report_cpu();
}

}  // namespace
