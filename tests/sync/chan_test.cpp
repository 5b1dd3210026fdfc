// tests/sync/chan_test.cpp — Chan<T> and select: the properties of Go's runtime/chan_test.go
// (TestChan, TestNonblockRecvRace, TestNonblockSelectRace{,2}, TestSelfSelect,
// TestSelectFairness, TestPseudoRandomSend, TestMultiConsumer) and proc_test.go's
// TestPingPongHog, ported as properties rather than line by line, plus what C++ adds:
// move-only and destructor-counted values, nil channels, foreign (non-runtime) threads.
//
// Invariants the tests keep:
//  - Every test runs inside corun::test::run at the P count of CORUNTEST_PROCS (1, 2, 4);
//    PingPongHog pins itself to one P, as Go's test does with GOMAXPROCS(1).
//  - No timing asserts. "Blocked" is established by yielding (and, for foreign threads, a
//    short sleep) before the other side acts; at P > 1 the other side may not have parked
//    yet, which only means some iterations exercise the fast path instead. What is asserted
//    holds on either path (e.g. "nothing was received before anything was sent").
//  - Tasks other than main record failures in atomics; the main task CHECKs them (no
//    REQUIRE inside a task: an exception escaping a task aborts the process).
//  - A check that would otherwise turn a bug into a hang breaks out first (stale waiters
//    are detected with try_* before a blocking pair is attempted; PingPongHog has a
//    watchdog thread that closes `done` if the main task is starved).
//  - Every spawned task is waited for (a WaitGroup) before the main task returns: a task
//    still alive then is abandoned with its closure, and the Chan handles it holds would
//    show up as leaks under ASan.
//  - Sizes shrink by kScale under the sanitizers; live tasks stay far below live_cap.
//
// Rejected: sleeping to "make sure" a task blocked (Go's time.Sleep(1ms)) — it is a
// timing assumption and slow; porting Go's code literally — several Go idioms (`range`
// over a channel, `c1[k] = nil` in a select loop) map to recv()/nullopt and nil handles.
#include <doctest/doctest.h>

#include <corun/chan.hpp>
#include <corun/corun.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "arch/cpu.hpp"
#include "support.hpp"

namespace t = corun::test;
using corun::Chan;

namespace {

constexpr int kNone = -1000000;  // stands for std::nullopt in CHECK messages
int val(const std::optional<int>& v) {
  return v ? *v : kNone;
}

void yield_n(int n) {
  for (int i = 0; i < n; i++) corun::yield();
}

// Yields until pred() holds; false after a generous hang bound (not a timing assert).
template <class Pred>
bool yield_until(Pred pred) {
  auto t0 = std::chrono::steady_clock::now();
  while (!pred()) {
    if (t::seconds_since(t0) > 30) return false;
    corun::yield();
  }
  return true;
}

// Gives a foreign thread time to park, without holding the P.
void let_foreign_park() {
  corun::blocking([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
}

constexpr std::size_t kCaps[] = {0, 1, 2, 10, 100};

// Spins until pred() holds, yielding the P now and then (so one P still makes progress)
// and the thread less often (so a spinning M gives its core to the M it waits for when
// the Ps outnumber the cores or the machine is busy).
template <class Pred>
void spin_until(Pred pred) {
  for (unsigned k = 1; !pred(); k++) {
    if (k % 1024 == 0)
      corun::blocking([] { std::this_thread::yield(); });
    else if (k % 32 == 0)
      corun::yield();
    else
      corun::arch::cpu_relax();
  }
}

// Rounds with a SpinPartner stop early after this long: under CPU contention (4 Ps on 2
// cores, or a busy machine) a hand-off between two spinning threads can cost an OS time
// slice, and a fixed count could then take minutes. Fewer rounds, same assertions.
constexpr double kRaceBudgetSeconds = 1.0;

// A helper task that runs one job per round while spinning between rounds, so that at
// P > 1 it sits on another P and its job overlaps the main task's next steps for real.
// (A task spawned per iteration lands in the spawner's runnext and mostly runs only
// once the spawner blocks, on the same P: Go's test shapes then race nothing.)
// Hand-offs use atomics, not channels: a channel wake-up would pull both onto one P.
class SpinPartner {
 public:
  SpinPartner() {
    wg_.add(1);
    corun::go([this] {
      int seen = 0;
      for (;;) {
        spin_until([&] { return round_.load(std::memory_order_acquire) != seen; });
        seen = round_.load(std::memory_order_acquire);
        if (seen < 0) break;
        job_();
        done_.store(seen, std::memory_order_release);  // job_ may be replaced after this
      }
      wg_.done();
    });
  }
  SpinPartner(const SpinPartner&) = delete;
  SpinPartner& operator=(const SpinPartner&) = delete;
  ~SpinPartner() {
    round_.store(-1, std::memory_order_release);
    wg_.wait();
  }
  void start(std::function<void()> job) {  // the previous round must be joined
    job_ = std::move(job);
    round_.store(++last_, std::memory_order_release);
  }
  void join() {
    spin_until([&] { return done_.load(std::memory_order_acquire) == last_; });
  }

 private:
  std::function<void()> job_;
  int last_ = 0;               // main task only
  std::atomic<int> round_{0};  // release by main: job_ is ready; -1: stop
  std::atomic<int> done_{0};   // release by the partner: its job finished
  corun::WaitGroup wg_;
};

// Burns a few hundred ns at most, varying with i, so racing steps land at different points.
void jitter(int i) {
  for (int k = 0; k < (i % 16) * 8; k++) corun::arch::cpu_relax();
}

// A move-only value that counts the end of its identity (destruction or being
// overwritten), so values left in a channel can be checked for destruction.
struct Tracked {
  std::atomic<int>* ended = nullptr;  // nullptr: moved-from or default, not counted
  int v = 0;
  Tracked() = default;
  Tracked(std::atomic<int>* e, int value) : ended(e), v(value) {}
  Tracked(Tracked&& o) noexcept : ended(std::exchange(o.ended, nullptr)), v(o.v) {}
  Tracked& operator=(Tracked&& o) noexcept {
    if (this != &o) {
      if (ended) ended->fetch_add(1);
      ended = std::exchange(o.ended, nullptr);
      v = o.v;
    }
    return *this;
  }
  Tracked(const Tracked&) = delete;
  Tracked& operator=(const Tracked&) = delete;
  ~Tracked() {
    if (ended) ended->fetch_add(1);
  }
};

// The message of the exception of type E that f throws; "" if it throws nothing.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return {};
}

enum UnscopedCapacity : int { kMinusOne = -1 };

// A class that converts to a negative int (no integer type of its own).
struct ConvertsToMinusOne {
  operator int() const { return -1; }  // NOLINT: implicit on purpose
};

}  // namespace

// Construction needs no runtime (a channel is only memory until a task waits on it).
TEST_SUITE("unit.chan") {
  TEST_CASE("every spelling of a negative capacity throws std::invalid_argument") {
    const std::string minus_one =
        "corun::Chan: capacity -1 is negative; a capacity is 0 "
        "(unbuffered) or more";
    // Integer types take the constructor template: the exact message with the value.
    CHECK(message_of<std::invalid_argument>([] { Chan<int> c(-1); }) == minus_one);
    CHECK(message_of<std::invalid_argument>([] { Chan<int> c(-1L); }) == minus_one);
    CHECK(message_of<std::invalid_argument>([] { Chan<int> c{-1}; }) == minus_one);
    CHECK(message_of<std::invalid_argument>([] { Chan<int> c(-1LL); }) == minus_one);
    CHECK(message_of<std::invalid_argument>([] { Chan<int> c(static_cast<short>(-1)); }) ==
          minus_one);
    CHECK(message_of<std::invalid_argument>([] { Chan<int> c(static_cast<signed char>(-1)); }) ==
          minus_one);
    const std::ptrdiff_t diff = -5;
    CHECK(message_of<std::invalid_argument>([&] { Chan<std::string> c(diff); }) ==
          "corun::Chan: capacity -5 is negative; a capacity is 0 (unbuffered) or more");
    CHECK(message_of<std::invalid_argument>([] {
            Chan<int> c(std::numeric_limits<long long>::min());
          }).find("capacity -9223372036854775808 is negative") != std::string::npos);
    // Already a std::size_t (a cast, unsigned arithmetic gone below zero, an unscoped enum
    // or a class converting to int): the same error, naming the size_t it arrived as.
    const std::string minus_one_size_t =
        "corun::Chan: capacity -1 is negative (18446744073709551615 as std::size_t); a "
        "capacity is 0 (unbuffered) or more";
    CHECK(message_of<std::invalid_argument>([] { Chan<int> c(static_cast<std::size_t>(-1)); }) ==
          minus_one_size_t);
    CHECK(message_of<std::invalid_argument>([] {
            const std::size_t have = 2, want = 3;
            Chan<int> c(have - want);
          }) == minus_one_size_t);
    CHECK(message_of<std::invalid_argument>([] { Chan<int> c(kMinusOne); }) == minus_one_size_t);
    CHECK(message_of<std::invalid_argument>([] { Chan<int> c(ConvertsToMinusOne{}); }) ==
          minus_one_size_t);
    // The first std::size_t that is no buffer: INT64_MAX + 1 (INT64_MIN as a signed number).
    CHECK(message_of<std::invalid_argument>([] {
            Chan<char> c(static_cast<std::size_t>(INT64_MAX) + 1);
          }).find("capacity -9223372036854775808 is negative") != std::string::npos);
    // All of them are std::logic_error too, as any constructor argument error is.
    CHECK_THROWS_AS(Chan<int>(-1), std::logic_error);
  }

  TEST_CASE("a huge capacity throws std::length_error naming the largest accepted") {
    const std::string m = message_of<std::length_error>(
        [] { Chan<std::uint32_t> c(static_cast<std::size_t>(INT64_MAX)); });
    CHECK(m ==
          "corun::Chan: capacity 9223372036854775807 too large for 4-byte values; a capacity "
          "is 0 (unbuffered) to 274877906944 (a buffer of at most 1 TiB)");
    CHECK_THROWS_AS(Chan<char>((std::size_t{1} << 40) + 1), std::length_error);
    CHECK_THROWS_AS(Chan<int>(std::int64_t{1} << 40), std::length_error);
  }

  TEST_CASE("capacity 0 and small capacities of every integer type construct") {
    CHECK(Chan<int>().capacity() == 0);
    CHECK(Chan<int>(0).capacity() == 0);
    CHECK(Chan<int>{3}.capacity() == 3);
    CHECK(Chan<int>(3L).capacity() == 3);
    CHECK(Chan<int>(3u).capacity() == 3);
    CHECK(Chan<int>(std::size_t{3}).capacity() == 3);
    CHECK(Chan<int>(static_cast<unsigned char>(255)).capacity() == 255);
    CHECK(Chan<int>(true).capacity() == 1);  // bool is no integer here: std::size_t 1
  }
}

TEST_SUITE("rt.chan") {
  TEST_CASE("recv on empty and send on full block; try_* and select-otherwise never block") {
    std::atomic<int> early{0}, wrong{0};
    t::run([&] {
      for (std::size_t cap : kCaps) {
        {  // Receive from an empty channel blocks until a send wakes it.
          Chan<int> c(cap);
          CHECK(c.capacity() == cap);
          CHECK(c.size() == 0);
          std::atomic<int> received{0};
          corun::WaitGroup wg;
          for (int i = 0; i < 2; i++) {
            wg.add(1);
            corun::go([&, c]() mutable {
              if (val(c.recv()) != 7) wrong++;
              received++;
              wg.done();
            });
          }
          yield_n(20);
          if (received.load() != 0) early++;
          CHECK_FALSE(c.try_recv().has_value());
          bool took_default = false;
          std::size_t idx = corun::select(corun::on_recv(c, [&](std::optional<int>) {}),
                                          corun::otherwise([&] { took_default = true; }));
          CHECK(idx == 1);
          CHECK(took_default);
          c.send(7);
          c.send(7);
          wg.wait();
          CHECK(received.load() == 2);
          CHECK(c.size() == 0);
        }
        {  // Send to a full channel blocks until a receive makes room.
          Chan<int> c(cap);
          for (std::size_t i = 0; i < cap; i++) c.send(static_cast<int>(i));
          CHECK(c.size() == cap);
          CHECK(c.capacity() == cap);
          std::atomic<bool> sent{false};
          corun::WaitGroup wg;
          wg.add(1);
          corun::go([&, c]() mutable {
            c.send(-1);
            sent = true;
            wg.done();
          });
          yield_n(20);
          if (sent.load()) early++;
          CHECK_FALSE(c.try_send(-2));
          std::size_t idx = corun::select(corun::on_send(c, -3, [] {}), corun::otherwise([] {}));
          CHECK(idx == 1);
          CHECK(c.size() == cap);
          // The first recv frees a slot (cap > 0) or takes the value (cap 0); the blocked
          // sender's value comes after everything already buffered.
          for (std::size_t i = 0; i < cap; i++)
            if (val(c.recv()) != static_cast<int>(i)) wrong++;
          CHECK(val(c.recv()) == -1);
          wg.wait();
          CHECK(sent.load());
          CHECK(c.size() == 0);
        }
      }
    });
    CHECK(early.load() == 0);
    CHECK(wrong.load() == 0);
  }

  TEST_CASE("close: buffered values drain in order then nullopt; close wakes every waiter") {
    std::atomic<int> wrong{0};
    t::run([&] {
      for (std::size_t cap : kCaps) {
        {  // Buffered values survive close and drain in order; then nullopt forever.
          Chan<int> c(cap);
          for (std::size_t i = 0; i < cap; i++) c.send(static_cast<int>(i));
          c.close();
          CHECK(c.size() == cap);
          for (std::size_t i = 0; i < cap; i++)
            if (val(c.recv()) != static_cast<int>(i)) wrong++;
          CHECK(val(c.recv()) == kNone);
          CHECK(val(c.recv()) == kNone);
          CHECK(val(c.try_recv()) == kNone);
          CHECK(c.size() == 0);
          CHECK_THROWS_AS(c.send(1), corun::closed_channel);
          CHECK_THROWS_AS(c.try_send(1), corun::closed_channel);
          CHECK_THROWS_AS(c.close(), corun::closed_channel);
          CHECK_THROWS_AS(corun::select(corun::on_send(c, 1, [] {})), corun::closed_channel);
          CHECK_THROWS_AS(corun::select(corun::on_send(c, 1, [] {}), corun::otherwise([] {})),
                          corun::closed_channel);
          // A recv case on a closed channel is ready: select returns at once with nullopt,
          // even with a never-ready case beside it.
          Chan<int> never;
          int got = 0;
          std::size_t idx =
              corun::select(corun::on_recv(never, [&](std::optional<int> v) { got = val(v); }),
                            corun::on_recv(c, [&](std::optional<int> v) { got = val(v); }));
          CHECK(idx == 1);
          CHECK(got == kNone);
        }
        {  // close wakes all blocked receivers with nullopt.
          Chan<int> c(cap);
          std::atomic<int> started{0}, nulls{0};
          corun::WaitGroup wg;
          const int kReceivers = 5;
          for (int k = 0; k < kReceivers; k++) {
            wg.add(1);
            corun::go([&, c]() mutable {
              started++;
              if (!c.recv()) nulls++;
              wg.done();
            });
          }
          CHECK(yield_until([&] { return started.load() == kReceivers; }));
          yield_n(20);
          c.close();
          wg.wait();
          CHECK(nulls.load() == kReceivers);
        }
        {  // close makes blocked senders (send and select-send) throw closed_channel; the
           // buffered values still drain.
          Chan<int> c(cap);
          for (std::size_t i = 0; i < cap; i++) c.send(static_cast<int>(i));
          std::atomic<int> started{0}, threw{0}, returned{0};
          corun::WaitGroup wg;
          for (int k = 0; k < 3; k++) {
            wg.add(1);
            corun::go([&, c, k]() mutable {
              started++;
              try {
                if (k == 2) {
                  Chan<int> never;
                  corun::select(corun::on_recv(never, [](std::optional<int>) {}),
                                corun::on_send(c, 100 + k, [] {}));
                } else {
                  c.send(100 + k);
                }
                returned++;
              } catch (const corun::closed_channel&) {
                threw++;
              }
              wg.done();
            });
          }
          CHECK(yield_until([&] { return started.load() == 3; }));
          yield_n(20);
          c.close();
          wg.wait();
          CHECK(threw.load() == 3);
          CHECK(returned.load() == 0);
          for (std::size_t i = 0; i < cap; i++)
            if (val(c.recv()) != static_cast<int>(i)) wrong++;
          CHECK(val(c.recv()) == kNone);
        }
      }
      // closed_channel is a logic_error; closing a nil channel is a logic_error too.
      Chan<int> c(1);
      c.close();
      CHECK_THROWS_AS(c.close(), std::logic_error);
      Chan<int> nil(nullptr);
      CHECK_THROWS_AS(nil.close(), std::logic_error);
    });
    CHECK(wrong.load() == 0);
  }

  TEST_CASE("FIFO: one sender, one receiver, 1000 values at every capacity") {
    std::atomic<int> wrong{0};
    t::run([&] {
      for (std::size_t cap : kCaps) {
        Chan<int> c(cap);
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([&, c]() mutable {
          for (int i = 0; i < 1000; i++) c.send(i);
          wg.done();
        });
        int bad = 0;
        for (int i = 0; i < 1000; i++)
          if (val(c.recv()) != i) bad++;
        CHECK_MESSAGE(bad == 0, "capacity " << cap);
        wg.wait();
        // The same through select on both sides.
        wg.add(1);
        corun::go([&, c]() mutable {
          Chan<int> never;
          for (int i = 0; i < 1000; i++)
            corun::select(corun::on_send(c, i, [] {}),
                          corun::on_recv(never, [](std::optional<int>) { std::abort(); }));
          wg.done();
        });
        for (int i = 0; i < 1000; i++)
          corun::select(corun::on_recv(c, [&, i](std::optional<int> v) {
            if (val(v) != i) wrong++;
          }));
        wg.wait();
      }
    });
    CHECK(wrong.load() == 0);
  }

  TEST_CASE("4 senders x 1000 values to 4 receivers: every value arrives exactly 4 times") {
    t::run([&] {
      constexpr int P = 4, L = 1000;
      for (std::size_t cap : {std::size_t{0}, std::size_t{1}, std::size_t{10}, std::size_t{100}}) {
        Chan<int> c(cap);
        Chan<std::vector<int>> done;  // non-trivial T, unbuffered
        corun::WaitGroup wg;          // every task ends before run() returns (see the header)
        for (int p = 0; p < P; p++) {
          wg.add(1);
          corun::go([c, &wg]() mutable {
            for (int i = 0; i < L; i++) c.send(i);
            wg.done();
          });
        }
        for (int p = 0; p < P; p++) {
          wg.add(1);
          corun::go([c, done, &wg]() mutable {
            std::vector<int> recv(L + 1, 0);  // recv[L]: anything out of range
            for (int i = 0; i < L; i++) {
              int v = val(c.recv());
              recv[v >= 0 && v < L ? v : L]++;
            }
            done.send(std::move(recv));
            wg.done();
          });
        }
        std::vector<int> total(L + 1, 0);
        for (int p = 0; p < P; p++) {
          auto r = done.recv();
          if (!r || r->size() != static_cast<std::size_t>(L + 1)) {
            total[L]++;
            continue;
          }
          for (int k = 0; k <= L; k++) total[k] += (*r)[k];
        }
        wg.wait();
        int wrong = 0;
        for (int k = 0; k < L; k++)
          if (total[k] != P) wrong++;
        CHECK_MESSAGE(wrong == 0, "capacity " << cap);
        CHECK_MESSAGE(total[L] == 0, "capacity " << cap);
        CHECK(c.size() == 0);
      }
    });
  }

  TEST_CASE("non-blocking recv racing close never misses the buffered value (NonblockRecvRace)") {
    const int n = 2000 / t::kScale;
    std::atomic<int> took_default{0}, not_once{0};
    t::run([&] {
      for (int i = 0; i < n; i++) {
        Chan<int> c(1);
        c.send(1);
        Chan<int> res(1);  // what the task got: 1, or kNone
        const bool use_select = i % 2 == 0;
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([c, res, use_select, &took_default, &wg]() mutable {
          int got = kNone;
          if (use_select) {
            // The channel is always ready (a value, or closed): default is never right.
            std::size_t idx =
                corun::select(corun::on_recv(c, [&](std::optional<int> v) { got = val(v); }),
                              corun::otherwise([] {}));
            if (idx == 1) took_default++;
          } else {
            // try_recv cannot tell "would block" from "closed and drained", so only the
            // exactly-once delivery below is checked for it.
            got = val(c.try_recv());
          }
          res.send(got);
          wg.done();
        });
        c.close();
        int mine = val(c.recv());
        int theirs = val(res.recv());
        wg.wait();
        if ((mine == 1) + (theirs == 1) != 1) not_once++;
      }
      // The same with the probe on a spinning partner, racing close and recv for real.
      SpinPartner partner;
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 10 * n && t::seconds_since(t0) < kRaceBudgetSeconds; i++) {
        Chan<int> c(1);
        c.send(1);
        int theirs = kNone;
        const bool use_select = i % 2 == 0;
        partner.start([&] {
          if (use_select) {
            if (corun::select(corun::on_recv(c, [&](std::optional<int> v) { theirs = val(v); }),
                              corun::otherwise([] {})) == 1)
              took_default++;
          } else {
            theirs = val(c.try_recv());
          }
        });
        jitter(i);
        c.close();
        int mine = val(c.recv());
        partner.join();
        if ((mine == 1) + (theirs == 1) != 1) not_once++;
      }
    });
    CHECK(took_default.load() == 0);
    CHECK(not_once.load() == 0);
  }

  TEST_CASE("a non-blocking select sees one moment in time (NonblockSelectRace, ...Race2)") {
    const int n = 4000 / t::kScale;
    std::atomic<int> defaults{0};
    t::run([&] {
      for (int variant = 0; variant < 2; variant++) {
        Chan<bool> done(1);
        for (int i = 0; i < n; i++) {
          // From the moment the task exists, c1 or c2 is ready for receiving: c1 holds a
          // value until c2 becomes ready (a value, or closed in variant 2).
          Chan<int> c1(1);
          Chan<int> c2(variant == 0 ? 1 : 0);
          c1.send(1);
          corun::WaitGroup wg;
          wg.add(1);
          corun::go([c1, c2, done, &wg]() mutable {
            std::size_t idx = corun::select(corun::on_recv(c1, [](std::optional<int>) {}),
                                            corun::on_recv(c2, [](std::optional<int>) {}),
                                            corun::otherwise([] {}));
            done.send(idx != 2);
            wg.done();
          });
          if (variant == 0)
            c2.send(1);
          else
            c2.close();
          corun::select(corun::on_recv(c1, [](std::optional<int>) {}), corun::otherwise([] {}));
          auto ok = done.recv();
          if (!ok || !*ok) defaults++;
          wg.wait();
        }
      }
      // The same with the select on a spinning partner, overlapping the main task's steps.
      SpinPartner partner;
      for (int variant = 0; variant < 2; variant++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 5 * n && t::seconds_since(t0) < kRaceBudgetSeconds / 2; i++) {
          Chan<int> c1(1);
          Chan<int> c2(variant == 0 ? 1 : 0);
          c1.send(1);
          partner.start([&] {
            if (corun::select(corun::on_recv(c1, [](std::optional<int>) {}),
                              corun::on_recv(c2, [](std::optional<int>) {}),
                              corun::otherwise([] {})) == 2)
              defaults++;
          });
          jitter(i);
          if (variant == 0)
            c2.send(1);
          else
            c2.close();
          corun::select(corun::on_recv(c1, [](std::optional<int>) {}), corun::otherwise([] {}));
          partner.join();
        }
      }
    });
    CHECK(defaults.load() == 0);
  }

  TEST_CASE("select with send and recv on one channel never receives its own value") {
    std::atomic<int> self{0}, unbalanced{0};
    t::run([&] {
      {  // Alone on an unbuffered channel: neither case can proceed, so default.
        Chan<int> c;
        std::size_t idx =
            corun::select(corun::on_send(c, 1, [] {}), corun::on_recv(c, [](std::optional<int>) {}),
                          corun::otherwise([] {}));
        CHECK(idx == 2);
        CHECK_FALSE(c.try_recv().has_value());
      }
      {  // Alone on a buffered channel: the value goes through the buffer, so receiving it
         // back later is allowed (Go asserts nothing for cap > 0).
        Chan<int> c(1);
        std::size_t idx = corun::select(corun::on_send(c, 1, [] {}),
                                        corun::on_recv(c, [](std::optional<int>) {}));
        CHECK(idx == 0);
        int got = 0;
        idx = corun::select(corun::on_send(c, 2, [] {}),
                            corun::on_recv(c, [&](std::optional<int> v) { got = val(v); }));
        CHECK(idx == 1);
        CHECK(got == 1);
      }
      // Go's TestSelfSelect: two tasks, each selecting send/recv on the same channel.
      for (std::size_t cap : {std::size_t{0}, std::size_t{1}, std::size_t{10}}) {
        Chan<int> c(cap);
        long sends[2] = {0, 0}, recvs[2] = {0, 0};  // each written by its own task only
        corun::WaitGroup wg;
        for (int p = 0; p < 2; p++) {
          wg.add(1);
          corun::go([&, c, p, cap]() mutable {
            auto on_value = [&, p, cap](std::optional<int> v) {
              if (!v || (cap == 0 && *v == p)) self++;
              recvs[p]++;
            };
            auto on_sent = [&, p] { sends[p]++; };
            for (int i = 0; i < 1000; i++) {
              if (p == 0 || i % 2 == 0)
                corun::select(corun::on_send(c, p, on_sent), corun::on_recv(c, on_value));
              else
                corun::select(corun::on_recv(c, on_value), corun::on_send(c, p, on_sent));
            }
            wg.done();
          });
        }
        wg.wait();
        // Every value sent was received or is still buffered; unbuffered, each send pairs
        // with the other task's receive.
        if (sends[0] + sends[1] - recvs[0] - recvs[1] != static_cast<long>(c.size())) unbalanced++;
        if (cap == 0 && (sends[0] != recvs[1] || sends[1] != recvs[0])) unbalanced++;
      }
    });
    CHECK(self.load() == 0);
    CHECK(unbalanced.load() == 0);
  }

  TEST_CASE("select picks uniformly among eight ready cases") {
    // Eight ready cases take seven random steps of the poll-order shuffle, from more than
    // one 64-bit draw (select.cpp takes three 16-bit draws from each): every case must come
    // up about 1/8 of the time (10 binomial sigmas).
    constexpr int kCases = 8;
    const int trials = 16000 / t::kScale;
    const double p = 1.0 / kCases;
    const double tolerance = 10 * std::sqrt(trials * p * (1 - p));
    std::array<int, kCases> cnt{};
    int wrong = 0;
    t::run([&] {
      std::vector<Chan<int>> cs;
      for (int k = 0; k < kCases; k++) {
        cs.emplace_back(trials + 1);
        for (int i = 0; i < trials + 1; i++) cs[k].send(k);
      }
      for (int i = 0; i < trials; i++) {
        int b = kNone;
        auto h = [&b](std::optional<int> v) { b = val(v); };
        std::size_t idx = corun::select(corun::on_recv(cs[0], h), corun::on_recv(cs[1], h),
                                        corun::on_recv(cs[2], h), corun::on_recv(cs[3], h),
                                        corun::on_recv(cs[4], h), corun::on_recv(cs[5], h),
                                        corun::on_recv(cs[6], h), corun::on_recv(cs[7], h));
        if (idx >= kCases || b != static_cast<int>(idx))
          wrong++;
        else
          cnt[idx]++;
      }
    });
    CHECK(wrong == 0);
    for (int k = 0; k < kCases; k++)
      CHECK_MESSAGE(std::abs(cnt[k] - trials * p) <= tolerance, "case " << k << ": " << cnt[k]);
  }

  TEST_CASE("select is fair among ready cases and never takes default then (SelectFairness)") {
    const int trials = 10000;
    const double tolerance = 10 * std::sqrt(trials / 4.0);  // 10 binomial sigmas
    t::run([&] {
      for (int with_default = 0; with_default < 2; with_default++) {
        Chan<int> c1(trials + 1), c2(trials + 1), c3, c4;  // c3, c4 never ready
        for (int i = 0; i < trials + 1; i++) {
          c1.send(1);
          c2.send(2);
        }
        int cnt1 = 0, cnt2 = 0, other = 0;
        for (int i = 0; i < trials; i++) {
          int b = 0;
          auto h = [&b](std::optional<int> v) { b = val(v); };
          std::size_t idx;
          if (with_default)
            idx = corun::select(corun::on_recv(c3, h), corun::on_recv(c4, h), corun::on_recv(c1, h),
                                corun::on_recv(c2, h), corun::otherwise([] {}));
          else
            idx = corun::select(corun::on_recv(c3, h), corun::on_recv(c4, h), corun::on_recv(c1, h),
                                corun::on_recv(c2, h));
          if (idx == 2 && b == 1)
            cnt1++;
          else if (idx == 3 && b == 2)
            cnt2++;
          else
            other++;
        }
        CHECK_MESSAGE(other == 0, "with_default " << with_default);
        CHECK_MESSAGE(std::abs(cnt1 - trials / 2.0) <= tolerance,
                      "unfair select: " << cnt1 << " vs " << cnt2 << ", default " << with_default);
      }
      // Go's TestPseudoRandomSend: two send cases on one channel are picked at random.
      Chan<int> c(trials);
      for (int i = 0; i < trials; i++)
        corun::select(corun::on_send(c, 1, [] {}), corun::on_send(c, 0, [] {}));
      int ones = 0;
      for (int i = 0; i < trials; i++) ones += val(c.recv()) == 1;
      CHECK_MESSAGE(std::abs(ones - trials / 2.0) <= tolerance, "ones " << ones);
    });
  }

  TEST_CASE("a blocking select of more cases than fit inline is woken by any one of them") {
    // Twelve cases: the waiters live in a heap array (select.cpp keeps 8 inline), built
    // only for the cases queued. Each round a partner sends on a different channel; the
    // select must take exactly that case, and every other channel must be left with no
    // stale receiver (an unbuffered try_send finds nobody).
    constexpr int kCases = 12;
    int wrong = 0, stale = 0;
    t::run([&] {
      std::vector<Chan<int>> cs(kCases);
      corun::WaitGroup wg;
      for (int round = 0; round < 2 * kCases; round++) {
        const int target = (round * 5) % kCases;
        wg.add(1);
        corun::go([&wg, c = cs[target], round]() mutable {
          yield_n(round % 3);
          c.send(round);
          wg.done();
        });
        int got = kNone;
        auto h = [&got](std::optional<int> v) { got = val(v); };
        std::size_t idx = corun::select(
            corun::on_recv(cs[0], h), corun::on_recv(cs[1], h), corun::on_recv(cs[2], h),
            corun::on_recv(cs[3], h), corun::on_recv(cs[4], h), corun::on_recv(cs[5], h),
            corun::on_recv(cs[6], h), corun::on_recv(cs[7], h), corun::on_recv(cs[8], h),
            corun::on_recv(cs[9], h), corun::on_recv(cs[10], h), corun::on_recv(cs[11], h));
        wg.wait();
        if (idx != static_cast<std::size_t>(target) || got != round) wrong++;
        for (auto& c : cs)
          if (c.try_send(-1)) stale++;
      }
    });
    CHECK(wrong == 0);
    CHECK(stale == 0);
  }

  TEST_CASE("the same channel twice in a select, or a lost case, leaves no stale waiter") {
    const int reps = 1000 / t::kScale;
    std::atomic<int> wrong{0}, stale{0};
    t::run([&] {
      corun::WaitGroup wg;
      auto spawn = [&wg](auto fn) {
        wg.add(1);
        corun::go([&wg, fn]() mutable {
          fn();
          wg.done();
        });
      };
      // No waiter left on c: unbuffered, try_send finds no receiver and try_recv no sender;
      // buffered (empty), a try_send value stays in the buffer for try_recv to get back.
      auto no_stale = [](Chan<int>& c, std::size_t cap) {
        if (cap == 0) return !c.try_send(-7) && !c.try_recv().has_value();
        return c.try_send(-7) && c.size() == 1 && val(c.try_recv()) == -7 &&
               !c.try_recv().has_value();
      };
      // A later blocking pair still works (only attempted when no_stale held).
      auto pair_works = [&](Chan<int>& c, int v) {
        int got = kNone;
        spawn([&got, c]() mutable { got = val(c.recv()); });
        c.send(v);
        wg.wait();
        return got == v;
      };
      for (std::size_t cap : {std::size_t{0}, std::size_t{1}}) {
        Chan<int> c(cap);
        for (int i = 0; i < reps && stale.load() == 0; i++) {
          // (a) recv, recv on the same channel.
          spawn([c, i]() mutable {
            yield_n(i % 4);
            c.send(i);
          });
          int got = kNone;
          auto h = [&got](std::optional<int> v) { got = val(v); };
          corun::select(corun::on_recv(c, h), corun::on_recv(c, h));
          wg.wait();
          if (got != i) wrong++;
          if (!no_stale(c, cap)) {
            stale++;
            break;
          }
          if (!pair_works(c, i)) wrong++;

          // (b) send, recv on the same unbuffered channel: the partner pairs with one case.
          if (cap == 0) {
            const bool partner_sends = i % 2 == 1;
            int partner_got = kNone;
            spawn([c, i, partner_sends, &partner_got]() mutable {
              yield_n(i % 3);
              if (partner_sends)
                c.send(1000 + i);
              else
                partner_got = val(c.recv());
            });
            got = kNone;
            std::size_t idx = corun::select(corun::on_send(c, i, [] {}), corun::on_recv(c, h));
            wg.wait();
            if (partner_sends && (idx != 1 || got != 1000 + i)) wrong++;
            if (!partner_sends && (idx != 0 || partner_got != i)) wrong++;
            if (!no_stale(c, cap)) {
              stale++;
              break;
            }
            if (!pair_works(c, i)) wrong++;
          }

          // (c) Waiting on A and B, B wins: A keeps no receiver.
          Chan<int> b;
          spawn([b, i]() mutable {
            yield_n(i % 3);
            b.send(i);
          });
          got = kNone;
          std::size_t idx = corun::select(corun::on_recv(c, h), corun::on_recv(b, h));
          wg.wait();
          if (idx != 1 || got != i) wrong++;
          if (!no_stale(c, cap)) {
            stale++;
            break;
          }

          // (d) Sending on A (full) and B, B wins: A keeps no sender.
          if (cap == 1) c.send(-1);  // full
          spawn([b, i, &got]() mutable {
            yield_n(i % 3);
            got = val(b.recv());
          });
          idx = corun::select(corun::on_send(c, 5000 + i, [] {}), corun::on_send(b, i, [] {}));
          wg.wait();
          if (idx != 1 || got != i) wrong++;
          if (cap == 1 && val(c.try_recv()) != -1) wrong++;
          if (!no_stale(c, cap)) {
            stale++;
            break;
          }
          if (!pair_works(c, i)) wrong++;
        }
      }
    });
    CHECK(stale.load() == 0);
    CHECK(wrong.load() == 0);
  }

  TEST_CASE("23 workers forward every item exactly once (MultiConsumer)") {
    constexpr int nwork = 23;
    const int niter = 271828 / t::kScale;
    long n = 0, s = 0, expect = 0;
    t::run([&] {
      static constexpr int pn[] = {2, 3, 7, 11, 13, 17, 19, 23, 27, 31};
      Chan<int> q(nwork * 3), r(nwork * 3);
      corun::WaitGroup wg;
      for (int w = 0; w < nwork; w++) {
        wg.add(1);
        corun::go([&wg, q, r, w]() mutable {
          for (;;) {
            auto v = q.recv();
            if (!v) break;
            if (pn[w % 10] == *v) corun::yield();  // mess with the FIFO-ish order
            r.send(*v);
          }
          wg.done();
        });
      }
      // Feeder and closer. `expect` is read by main only after r is closed and drained:
      // the close is what orders it (TSan checks the channel provides that edge).
      corun::WaitGroup fed;
      fed.add(1);
      corun::go([&, q, r]() mutable {
        for (int i = 0; i < niter; i++) {
          int v = pn[i % 10];
          expect += v;
          q.send(v);
        }
        q.close();
        wg.wait();
        r.close();
        fed.done();
      });
      for (;;) {
        auto v = r.recv();
        if (!v) break;
        n++;
        s += *v;
      }
      fed.wait();
    });
    CHECK(n == niter);
    CHECK(s == expect);
  }

#if !CORUN_TSAN  // TSan reorders the scheduler (Go skips this test under -race too)
  TEST_CASE("PingPongHog: pairs handing off through runnext share one P fairly") {
    // Two hog tasks ping-pong 1e6 increments per turn, two light ones 1e3. If a hand-off
    // to the woken task (which lands in runnext and inherits the time slice) were never
    // cut off, the hog pair would keep the P; counts within 20x mean both pairs got turns.
    long hog_count = 0, light_count = 0;
    bool starved = false;
    t::run(
        [&] {
          Chan<bool> done, hog_chan, light_chan;
          auto player = [done](long limit, long* counter, Chan<bool> wake) mutable {
            for (;;) {
              bool quit = false;
              corun::select(corun::on_recv(done, [&](std::optional<bool>) { quit = true; }),
                            corun::on_recv(wake, [&](std::optional<bool>) {
                              long k = 0;
                              for (long i = 0; i < limit; i++) {
                                k++;
                                asm volatile("" : "+r"(k));  // keep the loop: real work
                              }
                              *counter += k;
                            }));
              if (quit) return;
              wake.send(true);
            }
          };
          corun::WaitGroup players;
          players.add(4);
          for (int i = 0; i < 2; i++)
            corun::go([player, &hog_count, hog_chan, &players]() mutable {
              player(1000000, &hog_count, hog_chan);
              players.done();
            });
          for (int i = 0; i < 2; i++)
            corun::go([player, &light_count, light_chan, &players]() mutable {
              player(1000, &light_count, light_chan);
              players.done();
            });

          // Watchdog: if the main task never runs again (a pair keeps the P), close `done`
          // from outside so the test fails instead of hanging.
          std::mutex mu;
          std::condition_variable cv;
          bool finished = false;
          std::atomic<bool> closed{false};
          std::thread watchdog([&] {
            std::unique_lock<std::mutex> lk(mu);
            if (!cv.wait_for(lk, std::chrono::seconds(10), [&] { return finished; })) {
              starved = true;
              if (!closed.exchange(true)) done.close();
            }
          });

          hog_chan.send(true);
          light_chan.send(true);
          auto t0 = std::chrono::steady_clock::now();
          while (t::seconds_since(t0) < 0.1) corun::yield();
          if (!closed.exchange(true)) done.close();
          // Each pair has exactly one "ball": its holder ends blocked in wake.send.
          hog_chan.recv();
          light_chan.recv();
          players.wait();
          {
            std::lock_guard<std::mutex> lk(mu);
            finished = true;
          }
          cv.notify_all();
          corun::blocking([&] { watchdog.join(); });
        },
        1);
    CHECK_FALSE(starved);
    CHECK_MESSAGE(hog_count / 20 <= light_count, "hog " << hog_count << " light " << light_count);
    CHECK_MESSAGE(light_count / 20 <= hog_count, "hog " << hog_count << " light " << light_count);
  }
#endif

  TEST_CASE("A loop polling with select(case, otherwise()), try_recv or try_send yields its P") {
    // The polls' would-block checks are inline (chan.hpp) and reach the scheduler only
    // through preempt_hint: at 1 P the polling task must still give way to the task that
    // will make its poll succeed, once sysmon ends its time slice (10 ms). Each loop gives
    // up after 5 s, so a poll that never yields fails here instead of hanging.
    for (int kind = 0; kind < 3; kind++) {
      CAPTURE(kind);
      bool ok = false;
      t::run([&] {
        Chan<int> c(kind == 2 ? 1 : 0);
        if (kind == 2) c.send(0);  // full: try_send would block until the peer takes it
        // The peer is waited for: a task still alive when run() ends is abandoned with its
        // closure (API.md), and ASan would report its handle on c as a leak.
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([c, kind, &wg] {
          if (kind == 2)
            c.recv();
          else
            c.send(1);
          wg.done();
        });
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!ok && std::chrono::steady_clock::now() < give_up) {
          if (kind == 0)
            corun::select(corun::on_recv(c, [&](std::optional<int>) { ok = true; }),
                          corun::otherwise([] {}));
          else if (kind == 1)
            ok = c.try_recv().has_value();
          else
            ok = c.try_send(2);
        }
        if (ok) wg.wait();
      });
      CHECK(ok);
    }
  }

  TEST_CASE("move-only values through channels and select; leftovers are destroyed") {
    std::atomic<int> ended{0};
    t::run([&] {
      using P = std::unique_ptr<int>;
      {  // Buffered, in order; a rejected try_send value is simply destroyed.
        Chan<P> c(3);
        for (int i = 0; i < 3; i++) c.send(std::make_unique<int>(i));
        CHECK_FALSE(c.try_send(std::make_unique<int>(99)));
        for (int i = 0; i < 3; i++) {
          auto p = c.recv();
          CHECK((p && *p && **p == i));
        }
      }
      {  // Unbuffered, from a task.
        Chan<P> c;
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([c, &wg]() mutable {
          c.send(std::make_unique<int>(7));
          wg.done();
        });
        auto p = c.recv();
        CHECK((p && *p && **p == 7));
        wg.wait();
      }
      {  // Select send and recv; a losing send case's value is not leaked (ASan).
        Chan<P> c(1), full(1);
        full.send(std::make_unique<int>(1));
        std::size_t idx = corun::select(corun::on_send(full, std::make_unique<int>(2), [] {}),
                                        corun::on_send(c, std::make_unique<int>(5), [] {}));
        CHECK(idx == 1);
        P got;
        idx = corun::select(corun::on_recv(c,
                                           [&](std::optional<P> v) {
                                             if (v) got = std::move(*v);
                                           }),
                            corun::otherwise([] {}));
        CHECK(idx == 0);
        CHECK((got && *got == 5));
        // Unbuffered select hand-off between tasks.
        Chan<P> u;
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([u, &wg]() mutable {
          corun::select(corun::on_send(u, std::make_unique<int>(9), [] {}));
          wg.done();
        });
        got.reset();
        corun::select(corun::on_recv(u, [&](std::optional<P> v) {
          if (v) got = std::move(*v);
        }));
        CHECK((got && *got == 9));
        wg.wait();
        // `full` still holds a unique_ptr: destroyed with the channel (ASan leak check).
      }
      {  // Values left in the buffer end with the last handle, not with close or a copy.
        Chan<Tracked> c(8);
        for (int i = 0; i < 5; i++) c.send(Tracked(&ended, i));
        CHECK(ended.load() == 0);
        {
          auto v = c.recv();
          CHECK((v && v->v == 0));
        }
        CHECK(ended.load() == 1);
        {
          Chan<Tracked> copy = c;
          CHECK(copy == c);
        }
        CHECK(ended.load() == 1);
        c.close();
        CHECK(ended.load() == 1);
        CHECK(c.size() == 4);
      }
      CHECK(ended.load() == 5);
      {  // A sender blocked with a move-only value when close comes: the value ends.
        Chan<Tracked> c;
        std::atomic<bool> threw{false};
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([&, c]() mutable {
          try {
            c.send(Tracked(&ended, 100));
          } catch (const corun::closed_channel&) {
            threw = true;
          }
          wg.done();
        });
        yield_n(10);
        c.close();
        wg.wait();
        CHECK(threw.load());
        CHECK(ended.load() == 6);
      }
      {  // A value handed through an unbuffered channel ends exactly once, at the receiver.
        Chan<Tracked> c;
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([c, &ended, &wg]() mutable {
          c.send(Tracked(&ended, 200));
          wg.done();
        });
        {
          auto v = c.recv();
          CHECK((v && v->v == 200));
          CHECK(ended.load() == 6);
        }
        CHECK(ended.load() == 7);
        wg.wait();
      }
    });
    CHECK(ended.load() == 7);
  }

  TEST_CASE("nil channels are never ready; a closed channel's recv case is ready at once") {
    std::atomic<int> wrong{0};
    t::run([&] {
      Chan<int> nil(nullptr);
      CHECK_FALSE(static_cast<bool>(nil));
      CHECK(static_cast<bool>(Chan<int>(0)));
      CHECK_FALSE(nil.try_send(1));
      CHECK_FALSE(nil.try_recv().has_value());
      CHECK(nil.size() == 0);
      CHECK(nil.capacity() == 0);
      CHECK_THROWS_AS(nil.close(), std::logic_error);

      // Only nil cases plus otherwise: otherwise.
      std::size_t idx = corun::select(corun::on_recv(nil, [](std::optional<int>) {}),
                                      corun::on_send(nil, 1, [] {}), corun::otherwise([] {}));
      CHECK(idx == 2);

      // A nil case beside a ready one: always the ready one.
      Chan<int> ready(1);
      for (int i = 0; i < 200; i++) {
        ready.send(i);
        int got = kNone;
        idx = corun::select(corun::on_recv(nil, [](std::optional<int>) {}),
                            corun::on_send(nil, 1, [] {}),
                            corun::on_recv(ready, [&](std::optional<int> v) { got = val(v); }),
                            corun::otherwise([] {}));
        if (idx != 2 || got != i) wrong++;
      }

      // Blocking select with a nil case: woken by the other case only.
      for (int i = 0; i < 20; i++) {
        Chan<int> later;
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([later, i, &wg]() mutable {
          yield_n(i % 4);
          later.send(i);
          wg.done();
        });
        int got = kNone;
        idx = corun::select(corun::on_recv(nil, [](std::optional<int>) {}),
                            corun::on_recv(later, [&](std::optional<int> v) { got = val(v); }),
                            corun::on_send(nil, 3, [] {}));
        if (idx != 1 || got != i) wrong++;
        wg.wait();
      }

      // A blocking select over a closed channel returns at once with nullopt.
      Chan<int> closed;
      closed.close();
      bool was_null = false;
      idx = corun::select(corun::on_recv(closed, [&](std::optional<int> v) { was_null = !v; }));
      CHECK(idx == 0);
      CHECK(was_null);
      idx = corun::select(corun::on_recv(nil, [](std::optional<int>) {}),
                          corun::on_recv(closed, [](std::optional<int>) {}));
      CHECK(idx == 1);

      // Handles: copies are the same channel; distinct channels are not.
      Chan<int> a(1);
      Chan<int> b = a;
      CHECK(a == b);
      CHECK_FALSE(a == Chan<int>(1));
      a.send(4);
      CHECK(b.size() == 1);
      CHECK(val(b.try_recv()) == 4);
    });
    CHECK(wrong.load() == 0);
  }

  TEST_CASE("foreign threads block in recv, send and select and are woken by tasks") {
    std::atomic<int> wrong{0};
    t::run([&] {
      {  // A foreign thread blocks in recv; the main task, then another task, send to it.
        Chan<int> c;
        std::atomic<bool> started{false};
        int got1 = 0, got2 = 0;
        std::thread th([&] {
          started = true;
          got1 = val(c.recv());
          got2 = val(c.recv());
        });
        CHECK(yield_until([&] { return started.load(); }));
        let_foreign_park();
        c.send(41);
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([&wg, c]() mutable {
          c.send(42);
          wg.done();
        });
        wg.wait();
        corun::blocking([&] { th.join(); });
        CHECK(got1 == 41);
        CHECK(got2 == 42);
      }
      {  // A foreign thread sends (blocking on a full buffer) to a task, then closes.
        Chan<int> c(2);
        std::thread th([c]() mutable {
          for (int i = 0; i < 100; i++) c.send(i);
          c.close();
        });
        let_foreign_park();
        for (int i = 0; i < 100; i++)
          if (val(c.recv()) != i) wrong++;
        CHECK(val(c.recv()) == kNone);
        corun::blocking([&] { th.join(); });
      }
      {  // A foreign thread blocks in a select; a task makes one case ready.
        Chan<int> a, b;
        std::atomic<bool> started{false};
        std::size_t idx = 99;
        int got = 0;
        std::thread th([&] {
          started = true;
          idx = corun::select(corun::on_recv(a, [&](std::optional<int> v) { got = val(v); }),
                              corun::on_recv(b, [&](std::optional<int> v) { got = val(v); }));
        });
        CHECK(yield_until([&] { return started.load(); }));
        let_foreign_park();
        corun::WaitGroup wg;
        wg.add(1);
        corun::go([&wg, b]() mutable {
          b.send(5);
          wg.done();
        });
        wg.wait();
        corun::blocking([&] { th.join(); });
        CHECK(idx == 1);
        CHECK(got == 5);
        CHECK_FALSE(a.try_send(1));  // the foreign select left no receiver on a
      }
      {  // Round trips between a foreign echo thread and a task, unbuffered both ways.
        Chan<int> req, resp;
        std::thread th([req, resp]() mutable {
          for (;;) {
            auto v = req.recv();
            if (!v) break;
            resp.send(*v * 2);
          }
        });
        const int kTrips = 2000 / t::kScale;
        for (int i = 0; i < kTrips; i++) {
          req.send(i);
          if (val(resp.recv()) != 2 * i) wrong++;
        }
        req.close();
        corun::blocking([&] { th.join(); });
      }
    });
    CHECK(wrong.load() == 0);
  }

  TEST_CASE("stress: random sends, receives, selects and close; sent values arrive once") {
    // Senders send unique ids with send, try_send, select over two channels, or a polling
    // select; receivers use select over all channels (a closed one becomes nil, Go's
    // `c = nil` idiom), plain recv, or polling select + try_recv. Rounds alternate between
    // closing after all senders finished and closing while they are still sending.
    // Property: an id arrives iff its send succeeded, and at most once.
    constexpr int kSenders = 4, kReceivers = 4, kChans = 3;
    const int per = 10000 / t::kScale;
    const int total = kSenders * per;
    for (int round = 0; round < 6; round++) {
      const bool early_close = round % 2 == 1;
      std::vector<std::atomic<int>> sent(total), recvd(total);
      std::atomic<int> received_total{0}, out_of_range{0};
      t::run([&] {
        std::array<Chan<int>, kChans> ch = {Chan<int>(0), Chan<int>(1), Chan<int>(4)};
        corun::WaitGroup senders, receivers;
        auto record = [&](int id) {
          if (id < 0 || id >= total) {
            out_of_range++;
            return;
          }
          recvd[id]++;
          received_total++;
        };
        for (int s = 0; s < kSenders; s++) {
          senders.add(1);
          corun::go([&, s] {
            std::mt19937 rng(static_cast<unsigned>(round * 100 + s));
            try {
              for (int i = 0; i < per; i++) {
                const int id = s * per + i;
                const int a = static_cast<int>(rng() % kChans);
                const int b = (a + 1 + static_cast<int>(rng() % (kChans - 1))) % kChans;
                auto ok = [&sent, id] { sent[id] = 1; };
                switch (rng() % 4) {
                  case 0:
                    ch[a].send(id);
                    ok();
                    break;
                  case 1:
                    while (!ch[a].try_send(id)) corun::yield();
                    ok();
                    break;
                  case 2:
                    corun::select(corun::on_send(ch[a], id, ok), corun::on_send(ch[b], id, ok));
                    break;
                  default:
                    while (corun::select(corun::on_send(ch[a], id, ok),
                                         corun::on_send(ch[b], id, ok),
                                         corun::otherwise([] {})) == 2)
                      corun::yield();
                    break;
                }
              }
            } catch (const corun::closed_channel&) {
            }
            senders.done();
          });
        }
        for (int r = 0; r < kReceivers; r++) {
          receivers.add(1);
          corun::go([&, r] {
            if (r == 2) {  // plain recv, one channel after the other
              for (auto c : ch)
                for (;;) {
                  auto v = c.recv();
                  if (!v) break;
                  record(*v);
                }
              receivers.done();
              return;
            }
            std::array<Chan<int>, kChans> mine = ch;
            int open = kChans;
            auto take = [&](int k) {
              return [&, k](std::optional<int> v) {
                if (v) {
                  record(*v);
                } else {
                  mine[k] = Chan<int>(nullptr);
                  open--;
                }
              };
            };
            std::mt19937 rng(static_cast<unsigned>(round * 100 + 50 + r));
            while (open > 0) {
              if (r == 3) {  // polling
                if (rng() % 2 == 0) {
                  auto v = ch[rng() % kChans].try_recv();
                  if (v) record(*v);
                }
                if (corun::select(corun::on_recv(mine[0], take(0)),
                                  corun::on_recv(mine[1], take(1)),
                                  corun::on_recv(mine[2], take(2)), corun::otherwise([] {})) == 3)
                  corun::yield();
              } else {
                corun::select(corun::on_recv(mine[0], take(0)), corun::on_recv(mine[1], take(1)),
                              corun::on_recv(mine[2], take(2)));
              }
            }
            receivers.done();
          });
        }
        if (early_close)
          CHECK(yield_until([&] { return received_total.load() >= total / 4; }));
        else
          senders.wait();
        for (auto& c : ch) c.close();
        senders.wait();
        receivers.wait();
      });
      int dup = 0, lost = 0, phantom = 0, unsent = 0;
      for (int id = 0; id < total; id++) {
        const int s = sent[id].load(), r = recvd[id].load();
        if (r > 1) dup++;
        if (s == 1 && r == 0) lost++;
        if (s == 0 && r > 0) phantom++;
        if (s == 0) unsent++;
      }
      CHECK_MESSAGE(dup == 0, "round " << round);
      CHECK_MESSAGE(lost == 0, "round " << round);
      CHECK_MESSAGE(phantom == 0, "round " << round);
      CHECK(out_of_range.load() == 0);
      if (!early_close) CHECK_MESSAGE(unsent == 0, "round " << round);
    }
  }
}

// Hand-offs between two tasks on one P switch straight from task to task (no trip
// through the scheduler), so the C++ exception state must travel on that path too: a
// task parked in a catch block keeps its caught exception, and one parked in a
// destructor during unwinding keeps std::uncaught_exceptions() == 1.
TEST_SUITE("rt.chan") {
  TEST_CASE("exception state survives direct task-to-task hand-offs") {
    corun::test::run([] {
      corun::Chan<int> a, b;
      corun::WaitGroup wg;
      std::atomic<int> ok{0};
      wg.add(2);
      corun::go([&] {
        try {
          throw std::runtime_error("left");
        } catch (const std::runtime_error& e) {
          int bad = 0;
          for (int i = 0; i < 1000; i++) {
            a.send(i);
            b.recv();
            // The thread's exception record must be this task's after every resume.
            bad += std::uncaught_exceptions() != 0;
            try {
              std::rethrow_exception(std::current_exception());
            } catch (const std::runtime_error& again) {
              bad += std::string(again.what()) != "left";
            } catch (...) {
              bad++;
            }
          }
          if (bad == 0 && std::string(e.what()) == "left") ok++;
        }
        wg.done();
      });
      corun::go([&] {
        struct Parker {
          corun::Chan<int>& a;
          corun::Chan<int>& b;
          std::atomic<int>& ok;
          ~Parker() {
            int bad = std::uncaught_exceptions() != 1;
            for (int i = 0; i < 1000; i++) {
              a.recv();
              b.send(i);
              bad += std::uncaught_exceptions() != 1;  // still unwinding, after every resume
            }
            if (bad == 0) ok++;
          }
        };
        try {
          Parker p{a, b, ok};
          throw std::logic_error("right");
        } catch (const std::logic_error& e) {
          if (std::string(e.what()) == "right" && std::uncaught_exceptions() == 0) ok++;
        }
        wg.done();
      });
      wg.wait();
      CHECK(ok.load() == 3);
    });
  }
}
