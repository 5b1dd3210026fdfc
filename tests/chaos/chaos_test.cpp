// tests/chaos/chaos_test.cpp — a chaos test: random mixes of everything a program does
// with corun, over many seeds, checked for what must never happen (issue 14, item 5).
//
// One seed = one corun::run: 4-16 worker tasks each do 10-60 random operations — spawns
// (nested, waited for), channel sends and receives (blocking, try_, and select over two
// channels with a default case), after_func timers set, reset and stopped, context trees
// cancelled from other tasks while their deadlines run, pool get/put — while 0-2 foreign
// threads spawn tasks, arm timers and use the pool too. One seed in four ends run() in the
// middle: the main task returns while the workers are still busy (they are abandoned, as
// API.md says, never resumed). In that child a racer thread also calls go(), after_func()
// and a long-lived Pool without pause across all its runs, racing each run's start and end.
// What is checked, per seed:
//  - every message is received at most once, and only if it was offered; when the run
//    ends cleanly, exactly the messages whose send returned (or whose select case ran, or
//    whose try_send succeeded) are received, each once;
//  - a timer callback never runs before its deadline, and every arm ends exactly once:
//    fired, or ended by a stop() or reset() that returned true (clean runs; at most once
//    in interrupted ones);
//  - a context is done after its own, or an ancestor's, cancel; a deadline context is
//    never done before its deadline when the reason is deadline_exceeded;
//  - a pooled object has one owner at a time;
//  and across all seeds, no descriptor or thread outlives its run, and the memory mappings
//  do not grow with the number of runs (counted in /proc).
// A failure prints its seed; CORUNTEST_CHAOS_SEED=N replays that one seed,
// CORUNTEST_CHAOS_SECONDS=S runs seeds for S seconds (default 4 per child process).
//
// Invariants: seeds run in a child process (tests/support.hpp death tests), so a crash
// or hang is reported with the seed printed before it; the interrupted seeds run in a
// child of their own with LeakSanitizer off, since abandoned tasks leak their closures by
// contract, while clean seeds keep it on. A seed's own foreign threads are joined before
// its main task returns; the racer (Racer) is the one that races run()'s end. Sizes stay
// under TSan's live-fiber budget (corun::test::kMaxLive).
// Rejected: asserting on timing beyond "never early" (a shared machine); random
// durations above a millisecond (a seed must stay short so many run).
#include <doctest/doctest.h>

#include <corun/corun.hpp>

#include <dirent.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support.hpp"

namespace t = corun::test;
using corun::Chan;
using corun::Clock;
using corun::Duration;
using namespace std::chrono_literals;

namespace {

constexpr bool kSan = CORUN_ASAN || CORUN_TSAN;
constexpr auto kHang = std::chrono::seconds(kSan ? 60 : 20);  // a wait longer is a hang
constexpr int kChans = 3;
constexpr int kMaxMsgs = 4096;  // message ids per seed
constexpr int kMaxTimers = 256;
constexpr int kMapsSlack = 64;  // mappings an allocator may add over a child's runs

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Failures recorded by any task or thread of a seed; read after run() returned.
class Failures {
 public:
  void add(std::string what) {
    std::lock_guard<std::mutex> g(mu_);
    if (list_.size() < 20) list_.push_back(std::move(what));
    count_++;
  }
  int count() const {
    std::lock_guard<std::mutex> g(mu_);
    return count_;
  }
  std::string text() const {
    std::lock_guard<std::mutex> g(mu_);
    std::string s;
    for (const auto& f : list_) s += "  " + f + "\n";
    return s;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> list_;  // guarded by mu_
  int count_ = 0;                  // guarded by mu_
};

struct Pooled {
  std::atomic<int> owners{0};
};

// One after_func timer's arms and their ends. Atomics: set by the arming task, read by
// the callback's task and by the checks after run().
struct TimerRec {
  corun::Timer timer;                     // touched only by the task that armed it
  std::atomic<std::int64_t> earliest{0};  // earliest deadline of any arm (ns)
  std::atomic<int> arms{0}, fired{0}, ended_by_call{0};
};

// Everything one seed's tasks share. Lives in the test thread's frame until run()
// returned and the checks ran: abandoned tasks never run again, so they never touch it
// after that.
struct Seed {
  explicit Seed(std::uint64_t s) : seed(s) {}
  std::uint64_t seed;
  Failures fail;
  std::array<Chan<int>, kChans> chans{Chan<int>(0), Chan<int>(1), Chan<int>(4)};
  std::array<std::atomic<std::uint8_t>, kMaxMsgs> offered{};   // a send of it started
  std::array<std::atomic<std::uint8_t>, kMaxMsgs> sent{};      // its send completed
  std::array<std::atomic<std::uint8_t>, kMaxMsgs> received{};  // times received
  std::atomic<int> next_msg{0};
  std::array<TimerRec, kMaxTimers> timers;
  std::atomic<int> next_timer{0};
  corun::Pool<Pooled> pool{[] { return std::make_unique<Pooled>(); }};
  std::atomic<int> spawned_ran{0};
  // What the main task waits on. Here, not in its frame: in an interrupted run the main
  // task returns while workers still run, and one already on a CPU finishes its step.
  corun::WaitGroup receivers, workers;
  std::atomic<int> outstanding{0};  // foreign threads' tasks and timers not yet run

  int new_msg() {
    int id = next_msg.fetch_add(1, std::memory_order_relaxed);
    if (id >= kMaxMsgs) return -1;
    offered[static_cast<std::size_t>(id)].store(1, std::memory_order_relaxed);
    return id;
  }
  void got(int id) {
    if (id < 0 || id >= kMaxMsgs) {
      fail.add("received a message id never made: " + std::to_string(id));
      return;
    }
    auto i = static_cast<std::size_t>(id);
    if (!offered[i].load(std::memory_order_relaxed))
      fail.add("received message " + std::to_string(id) + " that nobody offered");
    if (received[i].fetch_add(1, std::memory_order_relaxed) != 0)
      fail.add("message " + std::to_string(id) + " received twice");
  }
};

using Rng = std::mt19937_64;

int pick(Rng& r, int lo, int hi) {  // [lo, hi]
  return std::uniform_int_distribution<int>(lo, hi)(r);
}

// One get/put of `pool`, checking that the object has one owner at a time.
void use_pool(corun::Pool<Pooled>& pool, Failures& fail) {
  std::unique_ptr<Pooled> p = pool.get();
  if (!p) return fail.add("pool with make() returned nullptr");
  if (p->owners.fetch_add(1, std::memory_order_acq_rel) != 0)
    fail.add("a pooled object was handed to two owners");
  p->owners.fetch_sub(1, std::memory_order_acq_rel);
  pool.put(std::move(p));
}

void use_pool(Seed& s) {
  use_pool(s.pool, s.fail);
}

void arm_timer(Seed& s, Rng& r) {
  int id = s.next_timer.fetch_add(1, std::memory_order_relaxed);
  if (id >= kMaxTimers) return;
  TimerRec& rec = s.timers[static_cast<std::size_t>(id)];
  const Duration d = std::chrono::microseconds(pick(r, 0, 300));
  rec.earliest.store(now_ns() + d.count(), std::memory_order_relaxed);
  rec.arms.store(1, std::memory_order_relaxed);
  Seed* sp = &s;
  TimerRec* rp = &rec;
  rec.timer = corun::after_func(d, [sp, rp] {
    if (now_ns() < rp->earliest.load(std::memory_order_relaxed))
      sp->fail.add("a timer callback ran before its deadline");
    rp->fired.fetch_add(1, std::memory_order_relaxed);
  });
  // Maybe reset or stop it, after letting other tasks run.
  int what = pick(r, 0, 3);
  if (what == 0) return;
  if (pick(r, 0, 1)) corun::yield();
  if (what == 1) {
    if (rec.timer.stop()) rec.ended_by_call.fetch_add(1, std::memory_order_relaxed);
  } else {
    const Duration d2 = std::chrono::microseconds(pick(r, 0, 300));
    const std::int64_t dl = now_ns() + d2.count();
    if (dl < rec.earliest.load(std::memory_order_relaxed))
      rec.earliest.store(dl, std::memory_order_relaxed);
    rec.arms.fetch_add(1, std::memory_order_relaxed);  // before the re-arm can fire
    if (rec.timer.reset(d2)) rec.ended_by_call.fetch_add(1, std::memory_order_relaxed);
  }
}

void context_tree(Seed& s, Rng& r) {
  auto [root, cancel_root] = corun::with_cancel(corun::Context::background());
  auto [mid, cancel_mid] = corun::with_cancel(root);
  const Duration d = std::chrono::microseconds(pick(r, 0, 400));
  const auto deadline = Clock::now() + d;
  auto [leaf, cancel_leaf] = corun::with_deadline(mid, deadline);
  // Cancel root or mid from another task (maybe on another P), or let the deadline pass.
  int which = pick(r, 0, 2);
  corun::WaitGroup wg;
  if (which < 2) {
    wg.add(1);
    corun::CancelFunc c = which == 0 ? cancel_root : cancel_mid;
    corun::go([c, &wg] {
      corun::yield();
      c();
      wg.done();
    });
  }
  // The leaf must end: by a cancel above it or by its deadline. (A timer stopped after:
  // one still armed when run() returns would be abandoned, a leak under ASan.)
  corun::Timer hang = corun::new_timer(kHang);
  bool ended = corun::select(corun::on_recv(leaf.done(), [](auto) {}),
                             corun::on_recv(hang.channel(), [](auto) {})) == 0;
  hang.stop();
  if (!ended) {
    s.fail.add("a context leaf never became done");
  } else {
    corun::ContextError e = leaf.err();
    if (e == corun::ContextError::none) s.fail.add("a done context reports no error");
    if (e == corun::ContextError::deadline_exceeded && Clock::now() < deadline)
      s.fail.add("a deadline context was done before its deadline");
  }
  wg.wait();
  if (which == 0 && mid.err() == corun::ContextError::none)
    s.fail.add("a child of a cancelled root is not done");
  cancel_leaf();
  cancel_mid();
  cancel_root();
}

void channel_op(Seed& s, Rng& r) {
  Chan<int>& a = s.chans[static_cast<std::size_t>(pick(r, 0, kChans - 1))];
  Chan<int>& b = s.chans[static_cast<std::size_t>(pick(r, 0, kChans - 1))];
  switch (pick(r, 0, 3)) {
    case 0: {  // blocking send
      int id = s.new_msg();
      if (id < 0) return;
      a.send(id);
      s.sent[static_cast<std::size_t>(id)].store(1, std::memory_order_relaxed);
      break;
    }
    case 1: {  // try_send
      int id = s.new_msg();
      if (id < 0) return;
      if (a.try_send(id)) s.sent[static_cast<std::size_t>(id)].store(1, std::memory_order_relaxed);
      break;
    }
    case 2: {  // select over two sends and a default: at most one of them is sent
      int x = s.new_msg(), y = s.new_msg();
      if (x < 0 || y < 0) return;
      std::atomic<std::uint8_t>* sx = &s.sent[static_cast<std::size_t>(x)];
      std::atomic<std::uint8_t>* sy = &s.sent[static_cast<std::size_t>(y)];
      corun::select(corun::on_send(a, x, [sx] { sx->store(1, std::memory_order_relaxed); }),
                    corun::on_send(b, y, [sy] { sy->store(1, std::memory_order_relaxed); }),
                    corun::otherwise([] {}));
      break;
    }
    default: {  // a receive by a worker, beside the channels' own receivers
      if (std::optional<int> v = a.try_recv()) s.got(*v);
      break;
    }
  }
}

void worker(Seed& s, std::uint64_t wseed) {
  Rng r(wseed);
  const int ops = pick(r, 10, 60);
  for (int i = 0; i < ops; i++) {
    switch (pick(r, 0, 9)) {
      case 0:
      case 1:
      case 2:
      case 3:
        channel_op(s, r);
        break;
      case 4:
      case 5:
        arm_timer(s, r);
        break;
      case 6:
        context_tree(s, r);
        break;
      case 7:
        use_pool(s);
        break;
      case 8: {  // nested spawns, waited for
        int n = pick(r, 1, 4);
        corun::WaitGroup wg;
        wg.add(n);
        for (int k = 0; k < n; k++)
          corun::go([&s, &wg] {
            use_pool(s);
            s.spawned_ran.fetch_add(1, std::memory_order_relaxed);
            wg.done();
          });
        wg.wait();
        break;
      }
      default:
        if (pick(r, 0, 1))
          corun::yield();
        else
          corun::sleep(std::chrono::microseconds(pick(r, 0, 50)));
    }
  }
}

// A foreign thread: spawns tasks, arms fire-and-forget timers, uses the pool.
void foreign(Seed& s, std::uint64_t fseed, std::atomic<int>* outstanding) {
  Rng r(fseed);
  const int ops = pick(r, 5, 40);
  for (int i = 0; i < ops; i++) {
    switch (pick(r, 0, 2)) {
      case 0:
        outstanding->fetch_add(1, std::memory_order_relaxed);
        corun::go([&s, outstanding] {
          s.spawned_ran.fetch_add(1, std::memory_order_relaxed);
          outstanding->fetch_sub(1, std::memory_order_relaxed);
        });
        break;
      case 1: {
        outstanding->fetch_add(1, std::memory_order_relaxed);
        corun::after_func(std::chrono::microseconds(pick(r, 0, 200)),
                          [outstanding] { outstanding->fetch_sub(1, std::memory_order_relaxed); });
        break;
      }
      default:
        use_pool(s);
    }
  }
}

// Runs one seed; returns its failures (empty: passed). interrupted: the main task returns
// while the workers still run.
std::string run_seed(std::uint64_t seed, bool interrupted) {
  auto s = std::make_unique<Seed>(seed);
  Rng r(seed);
  t::run([&] {
    Seed& sd = *s;
    const int nworkers = pick(r, 4, 16);
    const int nforeign = pick(r, 0, 2);
    // One receiver per channel, until the channel is closed.
    sd.receivers.add(kChans);
    for (auto& c : sd.chans)
      corun::go([&sd, c]() mutable {
        while (std::optional<int> v = c.recv()) sd.got(*v);
        sd.receivers.done();
      });
    sd.workers.add(nworkers);
    for (int i = 0; i < nworkers; i++)
      corun::go([&sd, ws = r()] {
        worker(sd, ws);
        sd.workers.done();
      });
    std::vector<std::thread> threads;
    for (int i = 0; i < nforeign; i++)
      threads.emplace_back(foreign, std::ref(sd), r(), &sd.outstanding);
    corun::blocking([&] {
      for (auto& th : threads) th.join();
    });
    if (interrupted) {
      corun::sleep(std::chrono::microseconds(pick(r, 0, 2000)));
      return;  // the workers, receivers and timers are abandoned
    }
    sd.workers.wait();
    for (auto& c : sd.chans) c.close();
    sd.receivers.wait();
    // Every timer arm ends (fired or ended by a call), and the foreign threads' tasks
    // and timers run.
    const auto limit = Clock::now() + kHang;
    auto settled = [&] {
      if (sd.outstanding.load(std::memory_order_relaxed) != 0) return false;
      int n = std::min(sd.next_timer.load(std::memory_order_relaxed), kMaxTimers);
      for (int i = 0; i < n; i++) {
        const TimerRec& t = sd.timers[static_cast<std::size_t>(i)];
        if (t.fired.load(std::memory_order_relaxed) +
                t.ended_by_call.load(std::memory_order_relaxed) <
            t.arms.load(std::memory_order_relaxed))
          return false;
      }
      return true;
    };
    while (!settled() && Clock::now() < limit) corun::sleep(100us);
    if (!settled()) sd.fail.add("timers or foreign-spawned tasks never finished");
  });
  // Checks after run(): every task that could touch *s is finished or abandoned.
  const int msgs = std::min(s->next_msg.load(), kMaxMsgs);
  for (int i = 0; i < msgs; i++) {
    auto k = static_cast<std::size_t>(i);
    int got = s->received[k].load(), sent = s->sent[k].load();
    if (got > 1) continue;  // already reported
    if (!interrupted && got != sent)
      s->fail.add("message " + std::to_string(i) +
                  (sent ? " sent but never received" : " received but its send never ran"));
  }
  const int timers = std::min(s->next_timer.load(), kMaxTimers);
  for (int i = 0; i < timers; i++) {
    const TimerRec& t = s->timers[static_cast<std::size_t>(i)];
    int ended = t.fired.load() + t.ended_by_call.load(), arms = t.arms.load();
    if (ended > arms || (!interrupted && ended != arms))
      s->fail.add("timer " + std::to_string(i) + ": " + std::to_string(arms) + " arm(s), " +
                  std::to_string(t.fired.load()) + " fired, " +
                  std::to_string(t.ended_by_call.load()) + " ended by stop/reset");
  }
  return s->fail.count() ? s->fail.text() : std::string();
}

int count_dir(const char* path) {
  int n = 0;
  if (DIR* d = opendir(path)) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') n++;
    closedir(d);
  }
  return n;
}

int count_lines(const char* path) {
  int n = 0;
  if (std::FILE* f = std::fopen(path, "r")) {
    for (int c; (c = std::fgetc(f)) != EOF;)
      if (c == '\n') n++;
    std::fclose(f);
  }
  return n;
}

double chaos_seconds() {
  const char* e = std::getenv("CORUNTEST_CHAOS_SECONDS");
  double v = e ? std::atof(e) : 4.0;
  return v > 0 ? v : 4.0;
}

// A foreign thread that lives across the child's runs and calls into corun without
// pause, so its calls race every run's start and end (issue 14 item 1's contract): go()
// and after_func() either take (a run is on) or throw std::logic_error (none is), nothing
// else; a Pool that outlives the runs keeps handing out each object to one owner at a time.
// What it spawns touches only this struct, which outlives every run; tasks and timers a
// run's end abandons leak their closures by contract, so it runs only in the child with
// LeakSanitizer off.
struct Racer {
  Failures fail;
  std::atomic<bool> stop{false};
  std::atomic<long> taken{0}, refused{0}, ran{0}, pooled{0};
  corun::Pool<Pooled> pool{[] { return std::make_unique<Pooled>(); }};
  std::thread th;

  void call(Rng& r) {
    try {
      if (pick(r, 0, 1) == 0)
        corun::go([this] { ran.fetch_add(1, std::memory_order_relaxed); });
      else
        corun::after_func(std::chrono::microseconds(pick(r, 0, 100)),
                          [this] { ran.fetch_add(1, std::memory_order_relaxed); });
      taken.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::logic_error&) {
      refused.fetch_add(1, std::memory_order_relaxed);  // no run on: as outside run()
    } catch (const std::exception& e) {
      fail.add(std::string("racer: a call threw something else: ") + e.what());
    }
  }
  void use_pool() {
    ::use_pool(pool, fail);
    pooled.fetch_add(1, std::memory_order_relaxed);
  }
  void start(std::uint64_t seed) {
    th = std::thread([this, seed] {
      Rng r(seed);
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 8; i++) {
          if (pick(r, 0, 2) == 0)
            use_pool();
          else
            call(r);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(pick(r, 0, 50)));
      }
    });
  }
  void finish() {
    stop.store(true, std::memory_order_relaxed);
    th.join();
  }
};

// The child's body: seeds for chaos_seconds(), or the one in CORUNTEST_CHAOS_SEED.
// interrupted_every: every how many seeds one ends run() in the middle (0: never).
// racer: a foreign thread calls in across all the runs (Racer).
int chaos_child(int interrupted_every, bool racer) {
  const char* one = std::getenv("CORUNTEST_CHAOS_SEED");
  std::random_device rd;
  std::uint64_t base = one ? std::strtoull(one, nullptr, 10) : (std::uint64_t{rd()} << 20);
  run_seed(base, false);  // warm-up: the first run's one-time allocations
  const int fds0 = count_dir("/proc/self/fd"), threads0 = count_dir("/proc/self/task");
  const int maps0 = count_lines("/proc/self/maps");
  std::unique_ptr<Racer> rc;
  if (racer) {
    rc = std::make_unique<Racer>();
    rc->start(base ^ 0x5eed);
  }
  const auto end = Clock::now() + std::chrono::duration<double>(chaos_seconds());
  int n = 0;
  for (std::uint64_t seed = base;; seed++) {
    bool interrupted =
        interrupted_every && seed % static_cast<std::uint64_t>(interrupted_every) == 0;
    std::fprintf(stderr, "chaos: seed %llu%s\n", static_cast<unsigned long long>(seed),
                 interrupted ? " (run ends mid-way)" : "");
    std::string f = run_seed(seed, interrupted);
    n++;
    if (rc && f.empty() && rc->fail.count()) f = rc->fail.text();
    if (!f.empty()) {
      if (rc) rc->finish();
      std::fprintf(stderr, "chaos: seed %llu FAILED (replay: CORUNTEST_CHAOS_SEED=%llu):\n%s",
                   static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
                   f.c_str());
      return 1;
    }
    if (one || Clock::now() >= end) break;
  }
  if (rc) {
    rc->finish();
    if (rc->fail.count()) {
      std::fprintf(stderr, "chaos: racer FAILED:\n%s", rc->fail.text().c_str());
      return 1;
    }
    std::fprintf(stderr,
                 "chaos: racer: %ld calls taken, %ld refused (no run on), %ld ran, %ld pool "
                 "uses\n",
                 rc->taken.load(), rc->refused.load(), rc->ran.load(), rc->pooled.load());
  }
  // Nothing outlives its run: descriptors at once, threads once exited (joined Ms may
  // take a moment to leave /proc).
  const int fds1 = count_dir("/proc/self/fd");
  int threads1 = count_dir("/proc/self/task");
  for (int i = 0; i < 200 && threads1 > threads0; i++) {
    std::this_thread::sleep_for(10ms);
    threads1 = count_dir("/proc/self/task");
  }
  const int maps1 = count_lines("/proc/self/maps");
  std::fprintf(stderr, "chaos: %d seeds from %llu; fds %d -> %d, threads %d -> %d, maps %d -> %d\n",
               n, static_cast<unsigned long long>(base), fds0, fds1, threads0, threads1, maps0,
               maps1);
  if (fds1 > fds0 || threads1 > threads0) {
    std::fprintf(stderr, "chaos: descriptors or threads outlived their runs\n");
    return 1;
  }
  // Mappings: each run's stack slabs are unmapped with it; the allocator (jemalloc, or
  // ASan's) may keep a few more regions, never a number that grows with the seeds. Not
  // under TSan: its shadow splits into more mappings as memory comes and goes (146 more
  // after 60 runs, all in its shadow range).
  if (!CORUN_TSAN && maps1 > maps0 + kMapsSlack) {
    std::fprintf(stderr, "chaos: memory mappings grew by %d over %d runs (slack %d)\n",
                 maps1 - maps0, n, kMapsSlack);
    return 1;
  }
  return 0;
}

}  // namespace

CORUN_TEST_CHILD(chaos_clean) {
  return chaos_child(0, false);
}

CORUN_TEST_CHILD(chaos_interrupted) {
  return chaos_child(2, true);
}

TEST_SUITE("rt.chaos") {
  TEST_CASE("chaos: random mixes over many seeds, every run ending cleanly (child)") {
    t::ChildResult r = t::child_run("chaos_clean");
    CHECK_MESSAGE(
        (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0),
        "child status " << r.status << ":\n"
                        << r.output.substr(r.output.size() > 6000 ? r.output.size() - 6000 : 0));
  }
  TEST_CASE("chaos: every other run() ending in the middle, a foreign thread racing (child)") {
    // Abandoned tasks leak their closures by contract: LeakSanitizer is off in this child.
    t::ChildResult r = t::child_run("chaos_interrupted", {"LSAN_OPTIONS=detect_leaks=0"});
    CHECK_MESSAGE(
        (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0),
        "child status " << r.status << ":\n"
                        << r.output.substr(r.output.size() > 6000 ? r.output.size() - 6000 : 0));
  }
}
