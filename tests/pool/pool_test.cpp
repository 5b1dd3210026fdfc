// tests/pool/pool_test.cpp — corun::Pool against API.md "Pool" and include/corun/pool.hpp:
// the properties of Go's sync/pool_test.go (TestPool, TestPoolNew, TestPoolStress,
// TestPoolRelease/TestPoolGC with trims in place of GCs, BenchmarkPoolStarvation's shape)
// ported as properties, plus what corun adds: ownership under stress from tasks on
// every P and from foreign threads, batches moving between Ps through the depot, trimming
// on demand and by the CORUN_POOL_TRIM_MS timer, a pool living across two runs, the
// CORUN_POOL=global mode, destruction freeing everything, footprint figures, bad settings.
//
// Suites: "rt.pool" needs a runtime (run at CORUNTEST_PROCS=1,2,4 by scripts/run-tests.sh),
// "unit.pool" needs none (no runtime, or run() refusing to start) and runs once.
//
// Invariants the tests keep:
//  - Every object is an Obj counting its constructions and destructions in a Counters;
//    every test ends with the Pool destroyed and created == destroyed (nothing lost,
//    nothing freed twice: ASan/LSan check the rest). An Obj carries a holder token:
//    whoever gets it CASes 0 -> its id (failure = two holders), and CASes its id -> 0
//    before putting it back; the destructor counts an object destroyed while held.
//  - Order is asserted only where the contract fixes it: on one P with no yield between
//    the calls (private slot first, then the local array), and "put x then get" on an
//    otherwise empty pool. Which P a task runs on is observed (proc_id) and printed, never
//    assumed: every cross-P assertion holds wherever the tasks land.
//  - Tests that count trims or factory calls run with CORUN_POOL_TRIM_MS=3600000 so the
//    periodic trim cannot interfere; they trim with detail::pool_trim_now() and wait for
//    pool_trim_settled() (bound 10 s). Environment changes are scoped (ScopedEnv restores
//    the previous values).
//  - Helper tasks and threads record failures in atomics; CHECK/REQUIRE run only on the
//    main task or outside run() (an exception escaping a task aborts). Every spawned task
//    is waited for before the main task returns.
//  - Stress sizes shrink by kScale under the sanitizers; no timing is asserted except
//    generous bounds that catch hangs (10 s for a trim to settle or the timer to free
//    objects).
//
// Rejected: asserting the exact number of objects a trim frees after a get in between (it
// depends on how many objects one get moves from the victims into the P's cache, an
// implementation choice); asserting LIFO order in global mode (one mutex list, order not
// promised); reaching a Pool<T>'s core for pool_footprint/pool_cached through a layout
// hack — those tests drive a detail::PoolCore directly (the same code under Pool<T>).
//
// Test cases named "KNOWN ISSUE" are skipped (doctest::skip; run them with --no-skip):
// each reproduces a behaviour of the current pool that breaks the contract, with what was
// seen; drop the skip when it is fixed.
#include <doctest/doctest.h>

#include <corun/corun.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pool/pool_internal.hpp"
#include "pool/pool_state.hpp"
#include "sched/proc.hpp"
#include "support.hpp"

namespace t = corun::test;
namespace d = corun::detail;
using namespace std::chrono_literals;

namespace {

constexpr auto kSettleBound = 10.0;  // seconds: a trim not settled by then is a bug

// ---- objects that count themselves ---------------------------------------------------

struct Counters {
  std::atomic<long> made{0};        // factory calls
  std::atomic<long> created{0};     // Obj constructions
  std::atomic<long> destroyed{0};   // Obj destructions
  std::atomic<long> held_dead{0};   // destroyed while a holder token was set
  std::atomic<long> violations{0};  // a get that found a holder, a bad release, a nullptr
  bool track = false;               // keep the set of live ids (trim tests)
  int slow_dtor = 0;                // 1: ~Obj sleeps 1 ms (thread); 2: parks 1 ms in a task
  std::mutex mu;
  std::set<long> alive;  // guarded by mu, when track
};

struct Obj {
  Counters* c;
  long id;
  std::atomic<int> holder{0};  // 0 = in the pool (or fresh); else the holder's id

  explicit Obj(Counters* cs) : c(cs), id(cs->created.fetch_add(1) + 1) {
    if (c->track) {
      std::lock_guard<std::mutex> g(c->mu);
      c->alive.insert(id);
    }
  }
  ~Obj() {
    if (c->slow_dtor == 1 || (c->slow_dtor == 2 && corun::proc_id() < 0))
      std::this_thread::sleep_for(1ms);
    else if (c->slow_dtor == 2)
      corun::sleep(1ms);
    if (holder.load(std::memory_order_acquire) != 0) c->held_dead++;
    if (c->track) {
      std::lock_guard<std::mutex> g(c->mu);
      c->alive.erase(id);
    }
    c->destroyed++;
  }
  Obj(const Obj&) = delete;
  Obj& operator=(const Obj&) = delete;
};

bool is_alive(Counters& c, long id) {
  std::lock_guard<std::mutex> g(c.mu);
  return c.alive.count(id) != 0;
}

using ObjPool = corun::Pool<Obj>;

std::function<std::unique_ptr<Obj>()> factory(Counters& c) {
  return [&c] {
    c.made++;
    return std::make_unique<Obj>(&c);
  };
}

// Claims o for `me`; counts a violation if someone else holds it.
void take(Counters& c, Obj* o, int me) {
  if (!o) {
    c.violations++;
    return;
  }
  int expect = 0;
  if (!o->holder.compare_exchange_strong(expect, me, std::memory_order_acq_rel)) c.violations++;
}

void give_back(Counters& c, ObjPool& pool, std::unique_ptr<Obj> o, int me) {
  int expect = me;
  if (!o->holder.compare_exchange_strong(expect, 0, std::memory_order_acq_rel)) c.violations++;
  pool.put(std::move(o));
}

// Go's TestPoolStress, with holder tokens: get/put in a loop, sometimes holding a few
// objects, sometimes a burst of more than a P's cache (kLocalCap + 12) so batches move to
// and from the depot. `pause` runs every 64 iterations (a yield for tasks: they migrate).
template <class Pause>
void churn(Counters& c, ObjPool& pool, int me, long iters, Pause pause) {
  std::minstd_rand rng(static_cast<unsigned>(me) * 7919u + 1u);
  std::vector<std::unique_ptr<Obj>> held;
  const std::size_t kBurst = d::kLocalCap + 12;
  for (long i = 0; i < iters; i++) {
    if (i % 512 == 511) {  // burst: overflow this P's cache, then refill from the depot
      for (std::size_t k = 0; k < kBurst; k++) {
        auto o = pool.get();
        take(c, o.get(), me);
        if (o) held.push_back(std::move(o));
      }
    } else {
      auto o = pool.get();
      take(c, o.get(), me);
      if (o) held.push_back(std::move(o));
    }
    const std::size_t keep = rng() % 4;
    while (held.size() > keep) {
      give_back(c, pool, std::move(held.back()), me);
      held.pop_back();
    }
    if (i % 1000 == 0) pool.put(nullptr);
    if (i % 64 == 63) pause();
  }
  for (auto& o : held) give_back(c, pool, std::move(o), me);
}

// ---- environment and trims -------------------------------------------------------------

// Sets (or, with nullptr, unsets) variables for one scope; restores the old values.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [n, v] : vars) {
      const char* old = std::getenv(n);
      saved_.push_back({n, old ? std::string(old) : std::string(), old != nullptr});
      if (v)
        setenv(n, v, 1);
      else
        unsetenv(n);
    }
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had)
        setenv(it->name.c_str(), it->value.c_str(), 1);
      else
        unsetenv(it->name.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  struct Saved {
    std::string name, value;
    bool had;
  };
  std::vector<Saved> saved_;
};

// No periodic trim during the test: only pool_trim_now() trims.
#define NO_PERIODIC_TRIM ScopedEnv no_timer_trim_({{"CORUN_POOL_TRIM_MS", "3600000"}})

// From a task: one trim, then wait (yielding, then sleeping) until every P moved its cache.
bool trim_and_settle() {
  const std::uint64_t before = d::pool_trims();
  d::pool_trim_now();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; !d::pool_trim_settled(); i++) {
    if (t::seconds_since(t0) > kSettleBound) return false;
    if (i < 100)
      corun::yield();
    else
      corun::sleep(1ms);
  }
  return d::pool_trims() > before;
}

// Keeps the caller's P busy without yielding, so tasks queued behind it are stolen by the
// other Ps (spreads the tasks that follow over the Ps; nothing is asserted about where).
void busy(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Spawns n tasks running fn(i) and waits for them.
template <class F>
void spawn_wait(int n, F fn) {
  corun::WaitGroup wg;
  for (int i = 0; i < n; i++) {
    wg.add(1);
    corun::go([&, i] {
      fn(i);
      wg.done();
    });
  }
  wg.wait();
}

std::string procs_label() {
  return "P=" + std::to_string(corun::procs());
}

long stress_iters() {
  // 10 tasks x 1e6 in release (0.2-0.4 s at 1-4 Ps on 2 cores), 1e5 under the sanitizers
  // (0.1-0.5 s; TSan included: the pool's fast path has no atomics for it to slow down).
  return 1000000 / t::kScale;
}

// Objects in tasks spread over the Ps: n tasks each get `each` objects (holding them, so
// the factory runs when the caches are empty), yield, and put them back.
void spread_over_ps(ObjPool& pool, Counters& c, int n, int each) {
  spawn_wait(n, [&](int i) {
    busy(500us);
    std::vector<std::unique_ptr<Obj>> v;
    for (int k = 0; k < each; k++) {
      auto o = pool.get();
      take(c, o.get(), 1000 + i);
      if (o) v.push_back(std::move(o));
      if (k % 8 == 7) corun::yield();
    }
    corun::yield();
    for (auto& o : v) give_back(c, pool, std::move(o), 1000 + i);
  });
}

// ---- pieces shared by the sharded and global modes -------------------------------------

// TestPool / TestPoolNew on whatever P the caller is on, without yielding between calls.
// order_fixed: the sharded order (private slot, then the local array).
void basic_properties(bool order_fixed) {
  Counters c;
  {
    ObjPool empty;
    CHECK(empty.get() == nullptr);
    empty.put(nullptr);
    CHECK(empty.get() == nullptr);

    auto a = std::make_unique<Obj>(&c), b = std::make_unique<Obj>(&c);
    Obj *pa = a.get(), *pb = b.get();
    empty.put(std::move(a));
    empty.put(std::move(b));
    auto g1 = empty.get();
    auto g2 = empty.get();
    auto g3 = empty.get();
    if (order_fixed) {
      CHECK(g1.get() == pa);
      CHECK(g2.get() == pb);
    } else {
      CHECK(((g1.get() == pa && g2.get() == pb) || (g1.get() == pb && g2.get() == pa)));
    }
    CHECK(g3 == nullptr);
  }
  {
    ObjPool p(factory(c));
    auto x = p.get();  // factory
    auto y = p.get();  // factory
    CHECK(c.made.load() == 2);
    REQUIRE(x);
    REQUIRE(y);
    CHECK(x->id != y->id);
    Obj* px = x.get();
    p.put(std::move(x));
    auto z = p.get();  // the one just put, no factory
    CHECK(z.get() == px);
    CHECK(c.made.load() == 2);
    auto w = p.get();  // empty again: factory
    CHECK(c.made.load() == 3);
    p.put(std::move(y));
    p.put(std::move(z));
    p.put(std::move(w));
  }
  CHECK(c.created.load() == c.destroyed.load());
  CHECK(c.held_dead.load() == 0);
}

// TestPoolStress: 10 tasks (ids 1..10) and `foreign` std::threads (ids 101..) churning one
// pool; with trim_meanwhile the main task also trims every millisecond until they finish.
void ownership_stress(int foreign, bool trim_meanwhile, long iters) {
  Counters c;
  const auto t0 = std::chrono::steady_clock::now();
  long trims = 0;
  std::string label;
  {
    ObjPool pool(factory(c));
    t::run([&] {
      label = procs_label();
      std::atomic<int> running{10 + foreign};
      std::vector<std::thread> threads;
      for (int k = 0; k < foreign; k++)
        threads.emplace_back([&, k] {
          churn(c, pool, 101 + k, iters / 4, [] { std::this_thread::yield(); });
          running--;
        });
      corun::WaitGroup wg;
      for (int id = 1; id <= 10; id++) {
        wg.add(1);
        corun::go([&, id] {
          churn(c, pool, id, iters, [] { corun::yield(); });
          running--;
          wg.done();
        });
      }
      while (trim_meanwhile && running.load() > 0) {
        d::pool_trim_now();
        trims++;
        corun::sleep(1ms);
      }
      wg.wait();
      corun::blocking([&] {
        for (auto& th : threads) th.join();
      });
    });
    MESSAGE("ownership stress ", label, ": iters/task=", iters, " foreign threads=", foreign,
            " trims=", trims, " objects made=", c.made.load(), " in ", t::seconds_since(t0), " s");
    CHECK(c.violations.load() == 0);
    CHECK(c.held_dead.load() == 0);
    CHECK(c.created.load() == c.made.load());
  }
  CHECK(c.created.load() == c.destroyed.load());
}

// Trims on demand (periodic trim off): objects nobody took survive one trim and die at the
// second; an object got and put back between trims survives; trims settle while other Ps
// are busy and while a task sits in blocking().
void trim_properties() {
  NO_PERIODIC_TRIM;
  Counters c;
  c.track = true;
  {
    ObjPool pool(factory(c));
    t::run([&] {
      const int P = corun::procs();
      // A: cold objects, on the main task's P and on tasks spread over the Ps.
      const long K = 3 * d::kLocalCap;  // overflows one P's cache: depot batches too
      {
        std::vector<std::unique_ptr<Obj>> v;
        for (long i = 0; i < K; i++) v.push_back(pool.get());
        for (auto& o : v) pool.put(std::move(o));
      }
      spread_over_ps(pool, c, 2 * P, 10);
      const long created_a = c.created.load();
      REQUIRE(c.made.load() == created_a);
      REQUIRE(trim_and_settle());
      CHECK(c.destroyed.load() == 0);  // one trim: all are victims, none freed
      REQUIRE(trim_and_settle());
      CHECK(c.destroyed.load() == created_a);  // two trims: all freed
      CHECK(c.held_dead.load() == 0);

      // B: one hot object (got and put back between the trims) survives.
      {
        std::vector<std::unique_ptr<Obj>> v;
        for (long i = 0; i < K; i++) v.push_back(pool.get());
        for (auto& o : v) pool.put(std::move(o));
      }
      const long created_b = c.created.load();
      const long made_b = c.made.load();
      REQUIRE(trim_and_settle());
      CHECK(c.destroyed.load() == created_a);  // still all alive
      auto hot = pool.get();                   // from the victims: no factory call
      CHECK(c.made.load() == made_b);
      REQUIRE(hot);
      const long hot_id = hot->id;
      CHECK(hot_id > created_a);
      pool.put(std::move(hot));
      REQUIRE(trim_and_settle());
      CHECK(is_alive(c, hot_id));
      const long freed_b = c.destroyed.load() - created_a;
      // A get refills at most one P's cache from the victims, so the cold rest is freed.
      CHECK(freed_b >= 1);
      CHECK(freed_b <= created_b - created_a - 1);
      MESSAGE("trim ", procs_label(), ": second trim freed ", freed_b, " of ",
              created_b - created_a, " (the hot one and what its get moved survive)");
      REQUIRE(trim_and_settle());
      REQUIRE(trim_and_settle());
      CHECK(c.destroyed.load() == c.created.load());  // idle again: everything freed
      CHECK_FALSE(is_alive(c, hot_id));

      // C: trims settle while tasks keep every P busy and one task sits in blocking().
      std::atomic<bool> stop{false};
      corun::WaitGroup wg;
      for (int i = 0; i < P + 1; i++) {
        wg.add(1);
        corun::go([&, i] {
          while (!stop.load(std::memory_order_relaxed)) {
            auto o = pool.get();
            take(c, o.get(), 2000 + i);
            corun::yield();
            give_back(c, pool, std::move(o), 2000 + i);
          }
          wg.done();
        });
      }
      wg.add(1);
      corun::go([&] {
        corun::blocking([] { std::this_thread::sleep_for(200ms); });
        wg.done();
      });
      bool settled = true;
      for (int k = 0; k < 3; k++) settled = trim_and_settle() && settled;
      stop = true;
      wg.wait();
      CHECK(settled);
      CHECK(c.violations.load() == 0);
      CHECK(c.held_dead.load() == 0);
    });
  }
  CHECK(c.created.load() == c.destroyed.load());
}

// The trim timer (CORUN_POOL_TRIM_MS=20) frees idle objects held in the caches of Ps that
// then go idle, and in the depot, with no pool_trim_now() call.
void timer_trim() {
  ScopedEnv env({{"CORUN_POOL_TRIM_MS", "20"}});
  Counters c;
  {
    ObjPool pool(factory(c));
    t::run([&] {
      const int P = corun::procs();
      const std::uint64_t trims0 = d::pool_trims();
      spread_over_ps(pool, c, 4 * P, 2 * d::kLocalCap);
      const long created = c.created.load();
      const auto t0 = std::chrono::steady_clock::now();
      while (c.destroyed.load() < created && t::seconds_since(t0) < kSettleBound) corun::sleep(5ms);
      MESSAGE("timer trim ", procs_label(), ": ", c.destroyed.load(), "/", created, " freed after ",
              t::seconds_since(t0), " s, ", d::pool_trims() - trims0, " trims");
      CHECK(c.destroyed.load() == created);
      CHECK(d::pool_trims() - trims0 >= 2);
      // The pool still works after its objects were trimmed.
      auto o = pool.get();
      CHECK(o != nullptr);
      pool.put(std::move(o));
    });
  }
  CHECK(c.created.load() == c.destroyed.load());
  CHECK(c.violations.load() == 0);
}

// Fills every tier: per-P caches and depot (tasks holding more than a cache), victims (a
// trim), then caches and depot again, plus objects a foreign thread and a blocking() call
// put straight into the depot.
void fill_every_tier(ObjPool& pool, Counters& c) {
  const int P = corun::procs();
  spread_over_ps(pool, c, 2 * P, 2 * d::kLocalCap);
  REQUIRE(trim_and_settle());
  spread_over_ps(pool, c, 2 * P, d::kLocalCap / 2);
  std::thread foreign([&] {
    for (int i = 0; i < 5; i++) pool.put(std::make_unique<Obj>(&c));
  });
  corun::blocking([&] {
    foreign.join();
    for (int i = 0; i < 5; i++) pool.put(std::make_unique<Obj>(&c));
  });
  for (int i = 0; i < 5; i++) pool.put(std::make_unique<Obj>(&c));  // this P's cache
}

void destroy_obj(void* p) noexcept {
  delete static_cast<Obj*>(p);
}

}  // namespace

TEST_SUITE("unit.pool") {
  TEST_CASE("no runtime: empty pool, nullptr puts, factory calls, put then get") {
    basic_properties(false);
    Counters c;
    {
      ObjPool p;
      auto x = std::make_unique<Obj>(&c);
      Obj* px = x.get();
      p.put(std::move(x));
      auto g = p.get();
      CHECK(g.get() == px);
      CHECK(p.get() == nullptr);
      p.put(std::move(g));  // freed by ~Pool
    }
    CHECK(c.created.load() == 1);
    CHECK(c.destroyed.load() == 1);
  }

  TEST_CASE("an exception from the factory propagates out of get") {
    corun::Pool<int> p([]() -> std::unique_ptr<int> { throw std::runtime_error("no memory"); });
    CHECK_THROWS_WITH_AS(p.get(), "no memory", std::runtime_error);
    p.put(std::make_unique<int>(7));
    auto g = p.get();  // a cached object: the factory is not called
    REQUIRE(g);
    CHECK(*g == 7);
  }

  TEST_CASE("no runtime: foreign threads share a pool with ownership tokens") {
    Counters c;
    const long iters = 100000 / t::kScale;
    {
      ObjPool pool(factory(c));
      std::vector<std::thread> th;
      for (int k = 0; k < 4; k++)
        th.emplace_back(
            [&, k] { churn(c, pool, 101 + k, iters, [] { std::this_thread::yield(); }); });
      for (auto& x : th) x.join();
      CHECK(c.violations.load() == 0);
      CHECK(c.held_dead.load() == 0);
      MESSAGE("no runtime, 4 threads x ", iters, ": objects made=", c.made.load());
    }
    CHECK(c.created.load() == c.destroyed.load());
  }

  TEST_CASE("no runtime: pool_trim_now rotates the depot (two trims free idle objects)") {
    Counters c;
    c.track = true;
    {
      ObjPool pool;
      const int K = 40;
      for (int i = 0; i < K; i++) pool.put(std::make_unique<Obj>(&c));
      d::pool_trim_now();
      CHECK(c.destroyed.load() == 0);
      d::pool_trim_now();
      CHECK(c.destroyed.load() == K);
      CHECK(pool.get() == nullptr);

      for (int i = 0; i < K; i++) pool.put(std::make_unique<Obj>(&c));
      d::pool_trim_now();
      auto hot = pool.get();  // a victim
      REQUIRE(hot);
      const long hot_id = hot->id;
      pool.put(std::move(hot));
      d::pool_trim_now();
      CHECK(is_alive(c, hot_id));
      CHECK(c.destroyed.load() > K);  // some of the cold ones went
      d::pool_trim_now();
      d::pool_trim_now();
      CHECK(c.destroyed.load() == c.created.load());
    }
    CHECK(c.created.load() == c.destroyed.load());
  }

  TEST_CASE("no runtime: footprint of a fresh pool, pool_cached counts what was put") {
    Counters c;
    {
      d::PoolCore core(&destroy_obj);
      const std::size_t fresh = d::pool_footprint(core);
      MESSAGE("sizeof(Pool<T>)=", sizeof(ObjPool), " sizeof(PoolCore)=", sizeof(d::PoolCore),
              " fresh pool_footprint=", fresh, " bytes");
      CHECK(fresh < 512);
      CHECK(fresh == sizeof(d::PoolState));  // no table yet (kNoTable is not the pool's)
      CHECK(d::pool_cached(core) == 0);
      for (int i = 0; i < 50; i++) core.put(new Obj(&c));
      CHECK(d::pool_cached(core) == 50);
      void* o = core.get();
      REQUIRE(o != nullptr);
      CHECK(d::pool_cached(core) == 49);
      core.put(o);
      MESSAGE("no runtime, 50 objects cached: pool_footprint=", d::pool_footprint(core));
    }
    CHECK(c.created.load() == 50);
    CHECK(c.destroyed.load() == 50);
  }

  // pool_trim_now() destroys the victims outside every lock; a ~Pool meanwhile must take
  // the rest itself and wait for the one the trim is destroying.
  TEST_CASE("~Pool waits for a trim elsewhere that is destroying its objects") {
    Counters c;
    c.slow_dtor = 1;
    auto pool = std::make_unique<ObjPool>();
    for (int i = 0; i < 100; i++) pool->put(std::make_unique<Obj>(&c));
    d::pool_trim_now();                          // depot -> victims
    std::thread th([] { d::pool_trim_now(); });  // destroys the victims, 1 ms each
    while (c.destroyed.load() == 0) std::this_thread::yield();
    pool.reset();
    CHECK(c.destroyed.load() == c.created.load());  // "destroying the Pool destroys everything"
    th.join();
    CHECK(c.destroyed.load() == c.created.load());
  }

  TEST_CASE("malformed CORUN_POOL / CORUN_POOL_TRIM_MS stop run with a message naming them") {
    struct Bad {
      const char* name;
      const char* value;
    };
    for (const Bad& b : {Bad{"CORUN_POOL", "bogus"}, Bad{"CORUN_POOL_TRIM_MS", "0"},
                         Bad{"CORUN_POOL_TRIM_MS", "99999999"}, Bad{"CORUN_POOL_TRIM_MS", "abc"},
                         Bad{"CORUN_POOL_TRIM_MS", "-5"}}) {
      ScopedEnv env({{b.name, b.value}});
      bool ran = false;
      std::string msg;
      try {
        corun::run([&] { ran = true; });
      } catch (const std::invalid_argument& e) {
        msg = e.what();
      }
      INFO(b.name, "=", b.value, " -> ", msg);
      CHECK_FALSE(ran);
      CHECK(msg.find(b.name) != std::string::npos);
      CHECK(msg.find(b.value) != std::string::npos);
    }
    {  // the accepted extremes start
      ScopedEnv env({{"CORUN_POOL", "global"}, {"CORUN_POOL_TRIM_MS", "1"}});
      bool ran = false;
      t::run([&] { ran = true; }, 1);
      CHECK(ran);
    }
  }
}

TEST_SUITE("rt.pool") {
  TEST_CASE("one P: empty pool, factory calls, private slot then array (Go's TestPool order)") {
    t::run([] { basic_properties(true); }, 1);
  }

  TEST_CASE("any P count: the same properties on the main task's P") {
    t::run([] { basic_properties(true); });
  }

  TEST_CASE(
      "one P: the cache holds kLocalCap + 1 + kLocalBatches * kBatch; one more put moves "
      "kBatch to the depot") {
    constexpr std::uint32_t kHeld = d::kLocalCap + 1 + d::kLocalBatches * d::kBatch;
    Counters c;
    {
      ObjPool pool;
      t::run(
          [&] {
            // Drains the depot from a thread without a P; returns how many it held.
            auto drain_off_p = [&] {
              std::vector<std::unique_ptr<Obj>> got;
              std::thread th([&] {
                while (auto o = pool.get()) got.push_back(std::move(o));
              });
              corun::blocking([&] { th.join(); });
              const std::size_t n = got.size();
              for (auto& o : got) pool.put(std::move(o));  // back into this P's cache
              return n;
            };
            std::vector<std::unique_ptr<Obj>> v;
            for (std::uint32_t i = 0; i < kHeld; i++) v.push_back(std::make_unique<Obj>(&c));
            for (auto& o : v) pool.put(std::move(o));
            // Private slot + full array + the P's own full batches: nothing in the depot.
            CHECK(drain_off_p() == 0);
            // The drain put nothing back, so the cache is still full: one more put spills.
            pool.put(std::make_unique<Obj>(&c));
            CHECK(drain_off_p() == d::kBatch);
          },
          1);
    }
    CHECK(c.created.load() == static_cast<long>(kHeld) + 1);
    CHECK(c.created.load() == c.destroyed.load());
  }

  TEST_CASE("foreign threads and blocking() put and get through the depot") {
    Counters c;
    for (int n : {1, t::procs()}) {
      ObjPool pool;
      t::run(
          [&] {
            // A std::thread inside the runtime: its put is its own get's.
            auto y = std::make_unique<Obj>(&c);
            Obj* py = y.get();
            Obj* got = nullptr;
            std::unique_ptr<Obj> keep;
            auto z = std::make_unique<Obj>(&c);
            Obj* pz = z.get();
            std::thread th([&] {
              pool.put(std::move(y));
              keep = pool.get();
              got = keep.get();
              pool.put(std::move(z));  // left in the depot for the task
            });
            corun::blocking([&] { th.join(); });
            CHECK(got == py);
            auto g = pool.get();  // this P's cache is empty: the depot's object
            CHECK(g.get() == pz);
            CHECK(pool.get() == nullptr);
            // blocking(): the thread has no P while in it, so it uses the depot too.
            auto w = std::make_unique<Obj>(&c);
            Obj* pw = w.get();
            corun::blocking([&] { pool.put(std::move(w)); });
            auto h = pool.get();
            CHECK(h.get() == pw);
            pool.put(std::move(keep));
            pool.put(std::move(g));
            pool.put(std::move(h));
          },
          n);
    }
    CHECK(c.created.load() == c.destroyed.load());
  }

  // pool.cpp current_shard: one compare of the table's run_key with tls_proc.key's top half
  // stands for "a table is installed" (else kNoTable, whose run_key is no run's) and "the
  // caller is on a P" (else key 0). A thread without a P that got through it would use a
  // shard (shards[-1], or a P's): here its put then get would return the P's private
  // object A instead of its own, and the final get would miss A.
  TEST_CASE("a P's key matches its own run's tables only, and gives its id") {
    namespace d = corun::detail;
    CHECK(d::proc_in_run(d::proc_key(5, 3), d::proc_run_key(5)) == 3);
    CHECK(d::proc_in_run(d::proc_key(5, 0), d::proc_run_key(5)) == 0);
    CHECK(d::proc_in_run(d::proc_key(6, 3), d::proc_run_key(5)) == -1);  // another run
    CHECK(d::proc_in_run(0, d::proc_run_key(5)) == -1);                  // no P
    CHECK(d::proc_in_run(d::proc_key(5, 3), ~std::uint64_t{0}) == -1);   // kNoTable
  }

  TEST_CASE("off a P the run-id compare alone keeps a thread out of the shards") {
    namespace s = corun::sched;
    CHECK(s::tls_proc.id == -1);  // outside run: no P, run id 0
    CHECK(s::tls_proc.run_id == 0);
    CHECK(s::tls_proc.key == 0);
    Counters c;
    for (int n : {1, t::procs()}) {
      ObjPool pool;
      std::atomic<int> bad{0};  // set by the foreign thread (no CHECK off the main task)
      auto own_round_trip = [&pool, &c, &bad] {
        if (s::tls_proc.id != -1 || s::tls_proc.run_id != 0) bad++;
        auto x = std::make_unique<Obj>(&c);
        Obj* px = x.get();
        pool.put(std::move(x));
        auto got = pool.get();
        if (got.get() != px) bad++;
      };
      t::run(
          [&] {
            CHECK(s::tls_proc.id == corun::proc_id());
            CHECK(s::tls_proc.run_id != 0);
            std::thread before(own_round_trip);  // no table yet: kNoTable
            corun::blocking([&] { before.join(); });
            auto a = std::make_unique<Obj>(&c);
            Obj* pa = a.get();
            const int p0 = corun::proc_id();
            pool.put(std::move(a));             // installs the table and this P's shard: A in priv
            std::thread after(own_round_trip);  // the table serves this run, not this thread
            corun::blocking([&] { after.join(); });
            corun::blocking(own_round_trip);  // an M without its P
            CHECK(bad.load() == 0);
            if (corun::proc_id() == p0) {  // blocking() may have moved us to another P
              auto got = pool.get();
              CHECK(got.get() == pa);
              CHECK(pool.get() == nullptr);
            } else {
              MESSAGE("main task moved from P ", p0, " to P ", corun::proc_id());
            }
          },
          n);
    }
    CHECK(c.created.load() == c.destroyed.load());
  }

  // pool.hpp: a P that has not used the pool yet finds the read-only no-shard slot (value
  // 1) in the run's table. Its get must see "empty" (not return the 1 as an object) and
  // its put "full" (not store there: the slot is in .rodata, a store would fault); both go
  // out of line, install the P's shard, and from then on the P's own private slot serves.
  TEST_CASE("a P without a shard yet goes through the no-shard slot, out of line") {
    NO_PERIODIC_TRIM;
    Counters c;
    for (int n : {2, t::procs(), 4}) {
      ObjPool pool;
      std::atomic<int> bad{0}, tried{0};
      t::run(
          [&] {
            auto a = std::make_unique<Obj>(&c);
            Obj* pa = a.get();
            const int p0 = corun::proc_id();
            pool.put(std::move(a));  // the run's table, P p0's shard: A in its private slot
            // Tasks until one runs on another P (its first use of the pool); bounded.
            for (int round = 0; round < 50 && tried.load() == 0; round++)
              spawn_wait(2 * n, [&](int) {
                busy(1ms);
                if (corun::proc_id() == p0 || tried.exchange(1) != 0) return;
                if (pool.get() != nullptr) bad++;  // depot empty, A is P p0's: nothing
                auto b = std::make_unique<Obj>(&c);
                Obj* pb = b.get();
                pool.put(std::move(b));  // its own shard now
                auto got = pool.get();
                if (got.get() != pb) bad++;
              });
            CHECK(bad.load() == 0);
            CHECK(d::kNoShardSlot == d::kPoolNoShard);
            if (tried.load() == 0) MESSAGE("no task ran on another P at ", n, " Ps");
            if (corun::proc_id() == p0) CHECK(pool.get().get() == pa);
          },
          n);
    }
    CHECK(c.created.load() == c.destroyed.load());
  }

  // <corun/proc_tls.hpp> this_proc(): pool.hpp's inline get/put find the caller's P through
  // it, from the user's own function, where a task may park and resume on another thread.
  // It must be the library's record (the same address as sched::tls_proc) on every thread,
  // and be read afresh after each park: tasks here yield and wait on a channel (resuming
  // wherever they are woken), and after each one this_proc() must name the P they now run
  // on. A cached thread pointer would name the P of the thread they left.
  // The library's record as an out-of-line call computes it: what the test compares with
  // (&tls_proc written in the task's loop would itself be cached across the parks).
  __attribute__((noinline)) const void* library_record() {
    asm volatile("" ::: "memory");
    return &corun::sched::tls_proc;
  }
  TEST_CASE("this_proc() and this_proc_key() read the library's record afresh after every park") {
    namespace s = corun::sched;
    if (!corun::detail::kInlineProcTls) return;  // no inline path on this architecture
    CHECK(corun::detail::this_proc() == &s::tls_proc);
    std::atomic<int> bad{0};
    std::thread foreign([&bad] {
      const auto* me = corun::detail::this_proc();
      if (me != &s::tls_proc || me->id != -1 || me->run_id != 0) bad++;
      if (corun::detail::this_proc_key() != 0 || me->key != 0) bad++;
    });
    foreign.join();
    CHECK(bad.load() == 0);
    std::atomic<int> moved{0};  // thread changes seen by the tasks, all runs
    for (int n : {1, t::procs(), 4}) {
      t::run(
          [&bad, &moved] {
            constexpr int kTasks = 64, kRounds = 1000;  // ~10 ms: other Ps wake, steal
            corun::Chan<int> ping(0);
            corun::WaitGroup wg;
            wg.add(kTasks);
            for (int i = 0; i < kTasks; i++)
              corun::go([&, i] {
                const void* last = library_record();
                for (int r = 0; r < kRounds; r++) {
                  if ((r + i) % 2)
                    corun::yield();
                  else if (i % 2)
                    ping.send(r);
                  else
                    ping.recv();
                  const auto* me = corun::detail::this_proc();
                  const void* lib = library_record();
                  if (me != lib || me->id != corun::proc_id() || me->run_id == 0) bad++;
                  // The key as get/put read it (through %fs on x86-64): the same record.
                  const std::uint64_t key = corun::detail::this_proc_key();
                  if (key >> 32 != me->run_id ||
                      static_cast<int>(key & 0xffffffffu) != corun::proc_id())
                    bad++;
                  if (lib != last) moved++;
                  last = lib;
                }
                wg.done();
              });
            wg.wait();
          },
          n);
      CHECK(bad.load() == 0);
    }
    // Without moves a run proves less (a cached pointer is right on one thread). Most runs
    // at 2+ Ps move tasks, but not all (CI's RUNQ=4 leg once saw none): said, not asserted.
    if (t::procs() > 1 && moved.load() == 0) MESSAGE("no task changed threads in this run");
  }

  TEST_CASE("ownership stress: 10 tasks, yields, bursts over the cache size") {
    ownership_stress(0, false, stress_iters());
  }

  TEST_CASE("ownership stress: tasks and foreign threads together") {
    ownership_stress(2, false, stress_iters());
  }

  TEST_CASE("ownership stress: tasks and foreign threads while the main task trims") {
    ownership_stress(2, true, stress_iters());
  }

  TEST_CASE("starvation: objects put on one P are got on others without the factory") {
    NO_PERIODIC_TRIM;
    const int n = std::max(2, t::procs());
    Counters c;
    {
      ObjPool pool(factory(c));
      t::run(
          [&] {
            const int K = 600, G = 8, M = 40;  // G*M + M (foreign) gets, well under K - caches
            static_assert(600 > (8 + 1) * 40 + 4 * (d::kLocalCap + 1));
            int putter_p = -1;
            spawn_wait(1, [&](int) {
              putter_p = corun::proc_id();
              std::vector<std::unique_ptr<Obj>> v;
              for (int i = 0; i < K; i++) v.push_back(pool.get());
              for (auto& o : v) pool.put(std::move(o));  // overflows: batches to the depot
            });
            REQUIRE(c.made.load() == K);
            std::vector<std::vector<std::unique_ptr<Obj>>> got(G + 1);
            std::vector<int> where(G, -1);
            std::thread foreign([&] {
              for (int m = 0; m < M; m++) {
                auto o = pool.get();
                take(c, o.get(), 100);
                if (o) got[G].push_back(std::move(o));
              }
            });
            spawn_wait(G, [&](int g) {
              busy(2ms);
              where[g] = corun::proc_id();
              for (int m = 0; m < M; m++) {
                auto o = pool.get();
                take(c, o.get(), g + 1);
                if (o) got[g].push_back(std::move(o));
                if (m % 8 == 7) corun::yield();
              }
            });
            corun::blocking([&] { foreign.join(); });
            int elsewhere = 0;
            std::string ps;
            for (int g = 0; g < G; g++) {
              elsewhere += where[g] != putter_p;
              ps += std::to_string(where[g]) + " ";
            }
            MESSAGE("starvation at ", n, " Ps: putter on P", putter_p, ", getters on Ps ", ps, "(",
                    elsewhere, " elsewhere); factory calls during the gets: ", c.made.load() - K);
            CHECK(c.made.load() == K);  // every get found a cached object
            CHECK(c.violations.load() == 0);
            for (int g = 0; g <= G; g++) {
              CHECK(got[g].size() == static_cast<std::size_t>(M));
              for (auto& o : got[g]) give_back(c, pool, std::move(o), g == G ? 100 : g + 1);
            }
          },
          n);
    }
    CHECK(c.created.load() == c.destroyed.load());
  }

  TEST_CASE("trim on demand: one trim keeps idle objects, two free them, hot ones stay") {
    trim_properties();
  }

  TEST_CASE("trim by the CORUN_POOL_TRIM_MS timer frees idle objects on every P") {
    timer_trim();
  }

  TEST_CASE("a long-lived pool across runs: objects from run 1 serve runs 2 and 3") {
    NO_PERIODIC_TRIM;
    Counters c;
    {
      ObjPool pool(factory(c));
      const int K = 100;
      t::run([&] {
        spread_over_ps(pool, c, 4, K / 4);  // tasks on (possibly) several Ps
      });
      const long made = c.made.load();
      REQUIRE(made >= K / 4);
      REQUIRE(made <= K);
      for (int n : {1, t::procs()}) {
        t::run(
            [&] {
              std::vector<std::unique_ptr<Obj>> v;
              for (long i = 0; i < made; i++) {
                auto o = pool.get();
                take(c, o.get(), 7);
                v.push_back(std::move(o));
              }
              CHECK(c.made.load() == made);  // all came from run 1, none from the factory
              for (auto& o : v) give_back(c, pool, std::move(o), 7);
            },
            n);
      }
      CHECK(c.destroyed.load() == 0);
      CHECK(c.violations.load() == 0);
    }
    CHECK(c.created.load() == c.destroyed.load());  // ~Pool after the runs frees them
  }

  TEST_CASE("destroying a pool frees what caches, depot and victims hold") {
    NO_PERIODIC_TRIM;
    Counters c;
    SUBCASE("destroyed after the run") {
      {
        ObjPool pool(factory(c));
        t::run([&] { fill_every_tier(pool, c); });
        CHECK(c.destroyed.load() == 0);
      }
      CHECK(c.created.load() > 0);
      CHECK(c.created.load() == c.destroyed.load());
    }
    SUBCASE("destroyed inside the run, by a task on some P") {
      t::run([&] {
        auto pool = std::make_unique<ObjPool>(factory(c));
        fill_every_tier(*pool, c);
        CHECK(c.destroyed.load() == 0);
        spawn_wait(1, [&](int) { pool.reset(); });
        CHECK(c.created.load() > 0);
        CHECK(c.created.load() == c.destroyed.load());
        // A trim after the pool is gone touches nothing of it.
        CHECK(trim_and_settle());
      });
    }
    CHECK(c.held_dead.load() == 0);
  }

  TEST_CASE("pools born and destroyed while the timer trims every millisecond") {
    ScopedEnv env({{"CORUN_POOL_TRIM_MS", "1"}});
    Counters c;
    const int rounds = 200 / t::kScale + 10;
    t::run([&] {
      for (int r = 0; r < rounds; r++) {
        ObjPool pool(factory(c));
        spread_over_ps(pool, c, 2, 5);
        if (r % 4 == 0) corun::sleep(1ms);  // let a trim land on a live pool
      }
    });
    CHECK(c.created.load() == c.destroyed.load());
    CHECK(c.violations.load() == 0);
  }

  TEST_CASE("footprint: small when fresh, bounded after use on every P; pool_cached exact") {
    NO_PERIODIC_TRIM;
    Counters c;
    {
      d::PoolCore core(&destroy_obj);
      const std::size_t fresh = d::pool_footprint(core);
      CHECK(fresh < 512);
      t::run([&] {
        const std::size_t P = static_cast<std::size_t>(corun::procs());
        const int K = 100;
        for (int i = 0; i < K; i++) core.put(new Obj(&c));
        CHECK(d::pool_cached(core) == static_cast<std::size_t>(K));
        std::vector<std::atomic<int>> seen(P);
        const int ops = 2000 / t::kScale;
        spawn_wait(static_cast<int>(4 * P), [&](int i) {
          busy(2ms);
          std::vector<void*> held;
          for (int k = 0; k < ops; k++) {
            seen[static_cast<std::size_t>(corun::proc_id())]++;
            const std::size_t want = (k % 200 == 199) ? d::kLocalCap + 8 : 1;
            for (std::size_t h = 0; h < want; h++) {
              void* o = core.get();
              if (!o) o = new Obj(&c);
              take(c, static_cast<Obj*>(o), 3000 + i);
              held.push_back(o);
            }
            for (void* o : held) {
              int me = 3000 + i;
              if (!static_cast<Obj*>(o)->holder.compare_exchange_strong(me, 0)) c.violations++;
              core.put(o);
            }
            held.clear();
            if (k % 16 == 15) corun::yield();
          }
        });
        const std::size_t cached = d::pool_cached(core);
        const std::size_t used = d::pool_footprint(core);
        std::string on;
        for (std::size_t p = 0; p < P; p++) on += std::to_string(seen[p].load()) + " ";
        // State, shard table (8 B/P), a 256-byte shard per P, batch nodes (128 B each,
        // at most one per kBatch cached objects plus a few partial ones and up to
        // kLocalBatches + 1 spares per P).
        const std::size_t bound =
            512 + 8 * P + 256 * P + 128 * (cached / d::kBatch + (d::kLocalBatches + 3) * P + 4);
        MESSAGE("footprint at ", P, " Ps: fresh ", fresh, " B; after ", 4 * P, " tasks x ", ops,
                " ops (per-P op counts ", on, "), ", cached, " objects cached: ", used,
                " B (bound ", bound, ")");
        CHECK(cached == static_cast<std::size_t>(c.created.load()));  // all were put back
        CHECK(used <= bound);
        REQUIRE(trim_and_settle());
        CHECK(d::pool_cached(core) == cached);  // victims still count
        REQUIRE(trim_and_settle());
        CHECK(d::pool_cached(core) == 0);
        CHECK(c.destroyed.load() == c.created.load());
        const std::size_t idle = d::pool_footprint(core);
        MESSAGE("footprint at ", P, " Ps after two trims (nothing cached): ", idle, " B");
        CHECK(idle <= 512 + 8 * P + 256 * P + 128 * (2 * P + 4));
      });
    }
    CHECK(c.created.load() == c.destroyed.load());
    CHECK(c.violations.load() == 0);
  }

  // A pool that the run uses only off-P (blocking() calls, foreign threads) must be
  // trimmed too: the run's trim timer is armed by an off-P put as well (found by this
  // test: 0 of 10 freed after 2 s at CORUN_POOL_TRIM_MS=20 when only install() armed it).
  TEST_CASE("a pool used only off-P during a run is trimmed") {
    ScopedEnv env({{"CORUN_POOL_TRIM_MS", "20"}});
    Counters c;
    ObjPool pool;
    t::run([&] {
      corun::blocking([&] {
        for (int i = 0; i < 10; i++) pool.put(std::make_unique<Obj>(&c));
      });
      const auto t0 = std::chrono::steady_clock::now();
      while (c.destroyed.load() < 10 && t::seconds_since(t0) < 2) corun::sleep(10ms);
      CHECK(c.destroyed.load() == 10);
    });
  }

  // A ~T that parks (allowed: a destructor may do what a task does) lets the main task
  // return while the trim task is inside it; the trim task is abandoned with the run. The
  // objects it had not reached yet stay in the pool, and ~Pool frees them (not the trim
  // task's local variables, which an abandoned task never destroys). The one whose
  // destructor never finishes is the only loss (its memory is excluded from LSan).
  TEST_CASE("a trim task abandoned at run end strands no object but the one it is destroying") {
    ScopedEnv env({{"CORUN_POOL_TRIM_MS", "3600000"}});  // only our trim task trims
    Counters c;
    c.slow_dtor = 2;
    {
      ObjPool pool;
      t::run([&] {
        {
          corun::test::LeakCheckOff off;  // one of them is never freed (see above)
          for (int i = 0; i < 200; i++) pool.put(std::make_unique<Obj>(&c));
        }
        corun::go([] {
          // This task is abandoned inside a destructor: what it allocates on its way
          // there (pool_trim_now's list) is lost with it, by the runtime's semantics.
          // It parks only inside ~Obj, after its allocations, so they come from the
          // thread it runs on when the second trim starts.
          corun::test::leak_check_off_for_this_thread();
          d::pool_trim_now();  // depot and caches -> victims
          while (!d::pool_trim_settled()) corun::yield();
          corun::test::leak_check_off_for_this_thread();  // yield may have moved us
          d::pool_trim_now();  // destroys the victims, parking 1 ms in each ~Obj
        });
        while (c.destroyed.load() == 0) corun::sleep(100us);
      });
    }
    // Exactly one ~Obj was in progress in the abandoned trim task; every other is done.
    CHECK(c.destroyed.load() == c.created.load() - 1);
  }

  TEST_CASE("CORUN_POOL=global: basic properties, ownership stress, trims") {
    ScopedEnv env({{"CORUN_POOL", "global"}});
    t::run([] { basic_properties(false); });
    ownership_stress(1, false, stress_iters() / 4);  // one lock for all: slower per op
    ownership_stress(1, true, stress_iters() / 4);
    trim_properties();
    timer_trim();
  }
}
