// tests/context/context_test.cpp — Context: the properties of Go's context_test.go
// (TestBackground, TestWithCancel, TestParentFinishesChild, TestChildFinishesFirst,
// TestDeadline, TestTimeout, TestCanceledTimeout, TestCancelRemoves,
// TestWithCancelCanceledParent, TestSimultaneousCancels, TestInterlockedCancels,
// TestLayersCancel, TestLayersTimeout), ported as properties, plus what corun adds:
// children unlinked when their handles drop, timers stopped on cancel, foreign threads,
// the behaviour outside run(), and err()/done() agreeing while a cancel races.
//
// Invariants the tests keep:
//  - Runtime tests run inside corun::test::run at the P count of CORUNTEST_PROCS.
//  - No tight timing asserts: deadlines are short (kShort) and waits for them are bounded
//    by kGenerous only to turn a hang into a failure. The one timing property checked is
//    a lower bound that holds by contract: done() never closes before deadline().
//  - Tasks other than main record failures in atomics; the main task CHECKs them (an
//    exception escaping a task aborts). Every spawned task is waited for.
//  - Every deadline context is canceled before run() returns (an armed timer would keep
//    its node alive past the runtime and show up as a leak under ASan).
//  - Children counts and armed timers are read through src/context/context_internal.hpp;
//    live-node counts only in builds that count them (CORUN_DEBUG_CHECKS: ASan, debug).
// Rejected: Go's quiescent()/time.Sleep-based "should not be done yet" checks under load
// (flaky on a shared 2-core machine): "not done yet" is asserted only for contexts whose
// deadline is hours away, or after checking the clock is still before the deadline.
#include <doctest/doctest.h>

#include <corun/context.hpp>
#include <corun/corun.hpp>
#include <corun/time.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "context/context_internal.hpp"
#include "support.hpp"

namespace t = corun::test;
using corun::CancelFunc;
using corun::Chan;
using corun::Clock;
using corun::Context;
using corun::ContextError;
using namespace std::chrono_literals;

namespace {

constexpr auto kShort = 20ms;    // a deadline that passes during the test
constexpr auto kLong = 1000h;    // a deadline that never passes during the test
constexpr auto kGenerous = 20s;  // a bound that only catches hangs

// True if c.done() is closed now (never blocks).
bool is_done(const Context& c) {
  return corun::select(corun::on_recv(c.done(), [] {}), corun::otherwise([] {})) == 0;
}

// Waits up to `limit` for c.done() to close; true if it did. Inside run() only.
bool wait_done(const Context& c, corun::Duration limit = kGenerous) {
  corun::Timer tm = corun::new_timer(limit);
  bool ok =
      corun::select(corun::on_recv(c.done(), [] {}), corun::on_recv(tm.channel(), [] {})) == 0;
  tm.stop();
  return ok;
}

const char* name(ContextError e) {
  switch (e) {
    case ContextError::none:
      return "none";
    case ContextError::canceled:
      return "canceled";
    case ContextError::deadline_exceeded:
      return "deadline_exceeded";
  }
  return "?";
}

// A context's whole observable state agrees with `want`. (Messages go through
// CHECK_MESSAGE, never INFO: doctest keeps INFO scopes in a thread_local stack, and a task
// that parks or yields inside one may resume on another thread and corrupt both stacks.)
void check_state(const Context& c, ContextError want, const std::string& what) {
  std::string got = name(c.err());
  bool done = is_done(c);
  CHECK_MESSAGE(got == name(want), what);
  CHECK_MESSAGE(done == (want != ContextError::none), what);
}

long live_nodes() {
  return corun::detail::context_live_nodes();
}

// live_nodes() once it reaches `want`, or after a generous bound. A task's closure (and
// the handles it captured) is destroyed after its function returned, so a task that
// signalled a WaitGroup may still hold nodes for a moment after wait() returned.
long live_nodes_settled(long want) {
  auto t0 = std::chrono::steady_clock::now();
  while (live_nodes() != want && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    corun::yield();
  return live_nodes();
}

}  // namespace

TEST_SUITE("rt.context") {
  TEST_CASE("background: never done, no error, no deadline; works outside run") {
    auto check = [] {
      Context bg = Context::background();
      CHECK(!bg.done());  // a nil channel: never ready
      CHECK(!is_done(bg));
      CHECK(bg.err() == ContextError::none);
      CHECK(!bg.deadline());
      CHECK(Context() == bg);
      CHECK(corun::detail::context_children(bg) == 0);
    };
    check();
    t::run(check);
  }

  TEST_CASE("with_cancel: cancel closes done, sets canceled, is idempotent; works outside run") {
    auto body = [] {
      auto [c, cancel] = corun::with_cancel(Context::background());
      CHECK(!c.deadline());
      auto d1 = c.done();
      CHECK(c.done() == d1);  // the same channel on every call
      check_state(c, ContextError::none, "before cancel");
      cancel();
      check_state(c, ContextError::canceled, "after cancel");
      CHECK(c.done() == d1);
      CHECK(!d1.try_recv());  // closed, not a value
      cancel();               // idempotent
      CancelFunc copy = cancel;
      copy();
      check_state(c, ContextError::canceled, "after more cancels");
      // done() first asked after the cancel: an already-closed channel.
      auto [c2, cancel2] = corun::with_cancel(Context::background());
      cancel2();
      check_state(c2, ContextError::canceled, "done() after cancel");
    };
    body();
    t::run(body);
  }

  // API.md: done() returns a reference to the handle the node keeps; a copy outlives it.
  static_assert(std::is_same_v<decltype(std::declval<const Context&>().done()),
                               const corun::Chan<std::monostate>&>);

  TEST_CASE("done() is a reference to one channel per node; background's is a static nil") {
    auto body = [] {
      const Chan<std::monostate>* nil = &Context::background().done();
      CHECK(&Context().done() == nil);  // every background shares it
      CHECK(!*nil);
      auto [c, cancel] = corun::with_cancel(Context::background());
      const Chan<std::monostate>* d = &c.done();
      CHECK(d != nil);
      CHECK(&c.done() == d);  // the same object on every call
      Context c2 = c;
      CHECK(&c2.done() == d);  // and from every handle of the node
      auto [child, cancel_child] = corun::with_cancel(c);
      CHECK(&child.done() != d);
      cancel();
      CHECK(&c.done() == d);  // canceling closes it in place
      CHECK(&child.done() == &child.done());
      CHECK(is_done(child));
      cancel_child();
    };
    body();
    t::run(body);
  }

  TEST_CASE("a copy of done() keeps working after every handle of its context is gone") {
    auto body = [] {
      long live0 = live_nodes();
      Chan<std::monostate> live_copy(nullptr), canceled_copy(nullptr);
      {
        auto [c, cancel] = corun::with_cancel(Context::background());
        live_copy = c.done();
        auto [c2, cancel2] = corun::with_cancel(Context::background());
        canceled_copy = c2.done();
        cancel2();
        cancel();  // closes live_copy's channel: API.md's "copy the handle" sentence
      }            // both nodes freed: every Context and CancelFunc is gone
      if (live0 >= 0) CHECK(live_nodes_settled(live0) == live0);
      CHECK_FALSE(live_copy.recv().has_value());  // closed: does not block
      CHECK_FALSE(canceled_copy.try_recv().has_value());
      CHECK(corun::select(corun::on_recv(live_copy, [] {}), corun::otherwise([] {})) == 0);
      // A copy taken before the context is canceled, the context dropped uncanceled.
      Chan<std::monostate> open_copy(nullptr);
      {
        auto [c, cancel] = corun::with_cancel(Context::background());
        open_copy = c.done();
      }
      if (live0 >= 0) CHECK(live_nodes_settled(live0) == live0);
      CHECK(corun::select(corun::on_recv(open_copy, [] {}), corun::otherwise([] {})) == 1);
    };
    body();
    t::run(body);
  }

  TEST_CASE("select(on_recv(ctx.done()), ...) copies no channel handle") {
    // The channel's reference count, seen from inside the handlers (while the select and
    // its cases are alive) and after it: a case holding a handle would show one more.
    auto body = [] {
      auto [c, cancel] = corun::with_cancel(Context::background());
      auto refs = [&] { return corun::detail::header_of(c.done())->refs.load(); };
      const std::size_t before = refs();
      std::size_t seen = 0;
      // Live: the one-case + otherwise() fast path runs otherwise().
      CHECK(corun::select(corun::on_recv(c.done(), [&] { seen = 0; }),
                          corun::otherwise([&] { seen = refs(); })) == 1);
      CHECK(seen == before);
      // The general path (select_impl), two channel cases and otherwise().
      corun::Timer tm = corun::new_timer(kLong);
      const std::size_t tm_before = corun::detail::header_of(tm.channel())->refs.load();
      std::size_t tm_seen = 0;
      CHECK(corun::select(corun::on_recv(c.done(), [&] { seen = 0; }),
                          corun::on_recv(tm.channel(), [&] { seen = 0; }), corun::otherwise([&] {
                            seen = refs();
                            tm_seen = corun::detail::header_of(tm.channel())->refs.load();
                          })) == 2);
      CHECK(seen == before);
      CHECK(tm_seen == tm_before);
      tm.stop();
      cancel();
      // Canceled: the receive case runs, on both paths.
      seen = 0;
      CHECK(corun::select(corun::on_recv(c.done(), [&] { seen = refs(); }),
                          corun::otherwise([&] { seen = 0; })) == 0);
      CHECK(seen == before);
      seen = 0;
      CHECK(corun::select(corun::on_recv(c.done(), [&] { seen = refs(); }),
                          corun::on_recv(tm.channel(), [&] { seen = 0; })) == 0);
      CHECK(seen == before);
      CHECK(refs() == before);
    };
    t::run(body);
  }

  TEST_CASE("child finishes first: the parent keeps running, its child list shrinks") {
    t::run([] {
      auto [cancelable, stop] = corun::with_cancel(Context::background());
      for (const Context& parent : {Context::background(), cancelable}) {
        auto [child, cancel] = corun::with_cancel(parent);
        CHECK(!is_done(parent));
        CHECK(!is_done(child));
        if (parent != Context::background()) CHECK(corun::detail::context_children(parent) == 1);
        cancel();
        CHECK(corun::detail::context_children(parent) == 0);
        check_state(child, ContextError::canceled, "child");
        check_state(parent, ContextError::none, "parent");
      }
      stop();
    });
  }

  TEST_CASE("parent finishes child: cancel reaches every descendant; born-canceled child") {
    t::run([] {
      auto [parent, cancel] = corun::with_cancel(Context::background());
      auto [cancel_child, stop1] = corun::with_cancel(parent);
      auto [timer_child, stop2] = corun::with_timeout(parent, kLong);
      auto [grandchild, stop3] = corun::with_cancel(timer_child);
      CHECK(corun::detail::context_children(parent) == 2);
      CHECK(corun::detail::context_timer_armed(timer_child));
      CHECK(!is_done(parent));
      cancel();
      CHECK(corun::detail::context_children(parent) == 0);
      CHECK(corun::detail::context_children(timer_child) == 0);
      check_state(parent, ContextError::canceled, "parent");
      check_state(cancel_child, ContextError::canceled, "cancel_child");
      check_state(timer_child, ContextError::canceled, "timer_child");
      check_state(grandchild, ContextError::canceled, "grandchild");
      CHECK(!corun::detail::context_timer_armed(timer_child));  // stopped by the cancel

      // A child of a canceled parent is born canceled, with no timer and no link.
      auto [pre, stop4] = corun::with_cancel(parent);
      check_state(pre, ContextError::canceled, "precanceled with_cancel");
      auto [pre_t, stop5] = corun::with_timeout(parent, kLong);
      check_state(pre_t, ContextError::canceled, "precanceled with_timeout");
      CHECK(!corun::detail::context_timer_armed(pre_t));
      CHECK(corun::detail::context_children(parent) == 0);
      for (auto* f : {&stop1, &stop2, &stop3, &stop4, &stop5}) (*f)();
    });
  }

  TEST_CASE("cancel tree: a subtree's cancel leaves its parent and siblings alone") {
    t::run([] {
      struct N {
        Context c;
        CancelFunc cancel;
        int parent;
      };
      std::vector<N> tree;
      auto [root, root_cancel] = corun::with_cancel(Context::background());
      tree.push_back({root, root_cancel, -1});
      // 1 + 3 + 9 + 27 nodes, every third one a with_timeout(kLong).
      for (std::size_t i = 0; tree.size() < 40; i++) {
        for (int k = 0; k < 3 && tree.size() < 40; k++) {
          auto [c, f] = tree.size() % 3 == 0 ? corun::with_timeout(tree[i].c, kLong)
                                             : corun::with_cancel(tree[i].c);
          tree.push_back({c, f, static_cast<int>(i)});
        }
      }
      auto in_subtree = [&](std::size_t j, std::size_t of) {
        for (int x = static_cast<int>(j); x >= 0; x = tree[static_cast<std::size_t>(x)].parent)
          if (static_cast<std::size_t>(x) == of) return true;
        return false;
      };
      const std::size_t victim = 2;  // a child of the root with a subtree of 13
      tree[victim].cancel();
      for (std::size_t j = 0; j < tree.size(); j++) {
        check_state(tree[j].c, in_subtree(j, victim) ? ContextError::canceled : ContextError::none,
                    "after subtree cancel, node " + std::to_string(j));
      }
      CHECK(corun::detail::context_children(root) == 2);
      CHECK(corun::detail::context_children(tree[1].c) == 3);
      tree[0].cancel();
      for (std::size_t j = 0; j < tree.size(); j++) {
        check_state(tree[j].c, ContextError::canceled,
                    "after root cancel, node " + std::to_string(j));
        CHECK(corun::detail::context_children(tree[j].c) == 0);
        CHECK(!corun::detail::context_timer_armed(tree[j].c));
      }
    });
  }

  TEST_CASE("children are unlinked: by cancel, by their timer, and when their handles drop") {
    t::run([] {
      long live0 = live_nodes();
      {
        auto [parent, stop] = corun::with_cancel(Context::background());
        CHECK(corun::detail::context_children(parent) == 0);
        {
          auto [c, cancel] = corun::with_cancel(parent);
          CHECK(corun::detail::context_children(parent) == 1);
          cancel();
          CHECK(corun::detail::context_children(parent) == 0);
        }
        {
          auto [c, cancel] = corun::with_timeout(parent, 60min);
          CHECK(corun::detail::context_children(parent) == 1);
          cancel();
          CHECK(corun::detail::context_children(parent) == 0);
        }
        {
          // Never canceled, handles dropped: unlinked and freed (Go keeps it until the
          // parent is canceled).
          auto [c, cancel] = corun::with_cancel(parent);
          auto [g, gcancel] = corun::with_cancel(c);
          CHECK(corun::detail::context_children(parent) == 1);
        }
        CHECK(corun::detail::context_children(parent) == 0);
        {
          // Its deadline passes: its timer cancels it and unlinks it (the unlink follows
          // the close of done(), so poll for it, with a generous bound).
          auto [c, cancel] = corun::with_timeout(parent, kShort);
          CHECK(corun::detail::context_children(parent) == 1);
          bool expired = wait_done(c);
          CHECK(expired);
          auto t0 = Clock::now();
          while (corun::detail::context_children(parent) != 0 && Clock::now() - t0 < kGenerous)
            corun::yield();
          CHECK(corun::detail::context_children(parent) == 0);
          check_state(c, ContextError::deadline_exceeded, "timed out");
        }
        stop();
      }
      if (live0 >= 0) CHECK(live_nodes() == live0);
    });
  }

  TEST_CASE("deadline: with_deadline and with_timeout expire with deadline_exceeded, never early") {
    t::run([] {
      auto expect_expiry = [](const Context& c, const char* what) {
        CHECK_MESSAGE(c.deadline().has_value(), what);
        if (!c.deadline()) return;
        bool done = wait_done(c);
        bool early = Clock::now() < *c.deadline();  // done() never closes before deadline()
        CHECK_MESSAGE(done, what);
        CHECK_MESSAGE(!early, what);
        check_state(c, ContextError::deadline_exceeded, what);
      };
      auto bg = Context::background();
      {
        auto t = Clock::now() + kShort;
        auto [c, cancel] = corun::with_deadline(bg, t);
        CHECK(*c.deadline() == t);
        expect_expiry(c, "with_deadline");
        cancel();
        check_state(c, ContextError::deadline_exceeded, "cancel after expiry keeps the error");
      }
      {
        auto [c, cancel] = corun::with_timeout(bg, kShort);
        expect_expiry(c, "with_timeout");
        cancel();
      }
      {
        // Parent with a short deadline, child with a long one: the parent's wins.
        auto [p, pcancel] = corun::with_timeout(bg, kShort);
        auto [c, cancel] = corun::with_deadline(p, Clock::now() + kLong);
        CHECK(*c.deadline() == *p.deadline());
        CHECK(!corun::detail::context_timer_armed(c));  // canceled through the parent
        expect_expiry(c, "parent's deadline first");
        check_state(p, ContextError::deadline_exceeded, "parent");
        cancel();
        pcancel();
      }
      {
        // Child of a with_cancel under a deadline: inherits the deadline.
        auto [p, pcancel] = corun::with_timeout(bg, kShort);
        auto [m, mcancel] = corun::with_cancel(p);
        auto [c, cancel] = corun::with_timeout(m, kLong);
        CHECK(*m.deadline() == *p.deadline());
        CHECK(*c.deadline() == *p.deadline());
        expect_expiry(c, "deadline through a with_cancel");
        cancel();
        mcancel();
        pcancel();
      }
      {
        auto [c, cancel] = corun::with_deadline(bg, Clock::now() - kShort);
        check_state(c, ContextError::deadline_exceeded, "in the past: born expired");
        CHECK(!corun::detail::context_timer_armed(c));
        cancel();
        auto [c2, cancel2] = corun::with_deadline(bg, Clock::now());
        check_state(c2, ContextError::deadline_exceeded, "now: born expired");
        cancel2();
        auto [c3, cancel3] = corun::with_timeout(bg, -1s);
        check_state(c3, ContextError::deadline_exceeded, "negative timeout");
        cancel3();
        // A child of an expired context: born with deadline_exceeded.
        auto [c4, cancel4] = corun::with_cancel(c);
        check_state(c4, ContextError::deadline_exceeded, "child of an expired parent");
        cancel4();
      }
      {
        // Many watchers on contexts with staggered short deadlines: none wakes early.
        const int kN = 20;
        std::atomic<int> early{0}, late{0};
        corun::WaitGroup wg;
        for (int i = 0; i < kN; i++) {
          wg.add(1);
          corun::go([&, i] {
            auto [c, cancel] = corun::with_timeout(Context::background(), i * 1ms);
            if (!wait_done(c)) late++;
            if (Clock::now() < *c.deadline() || c.err() != ContextError::deadline_exceeded) early++;
            cancel();
            wg.done();
          });
        }
        wg.wait();
        CHECK(early.load() == 0);
        CHECK(late.load() == 0);
      }
    });
  }

  TEST_CASE("a deadline cancels its context even while every P is busy in one task") {
    // The deadline's cancel runs on the thread that fires the timer (sysmon here, at 1 P),
    // not in a task of its own that the busy Ps would never run. The task spins without
    // a schedule point until it sees the error, bounded so a failure is not a hang.
    bool expired = false;
    t::run([&] {
      auto [ctx, cancel] = corun::with_timeout(Context::background(), 1ms);
      std::atomic<bool> stop{false};
      corun::WaitGroup wg;
      for (int i = 1; i < corun::procs(); i++) {  // the other Ps, busy too
        wg.add(1);
        corun::go([&] {
          while (!stop.load()) {
          }
          wg.done();
        });
      }
      auto t0 = corun::Clock::now();
      while (ctx.err() == ContextError::none && corun::Clock::now() - t0 < kGenerous) {
      }
      expired = ctx.err() == ContextError::deadline_exceeded;
      stop = true;
      wg.wait();
      cancel();
    });
    CHECK(expired);
  }

  TEST_CASE("deadline() is the earlier of the own and the parent's; huge timeouts saturate") {
    t::run([] {
      auto bg = Context::background();
      auto t1 = Clock::now() + 10h;
      auto [p, pcancel] = corun::with_deadline(bg, t1);
      CHECK(*p.deadline() == t1);
      auto [earlier, c1] = corun::with_deadline(p, t1 - 1h);
      CHECK(*earlier.deadline() == t1 - 1h);
      CHECK(corun::detail::context_timer_armed(earlier));
      auto [later, c2] = corun::with_deadline(p, t1 + 1h);
      CHECK(*later.deadline() == t1);
      CHECK(!corun::detail::context_timer_armed(later));
      auto [same, c3] = corun::with_cancel(p);
      CHECK(*same.deadline() == t1);
      auto [never, c4] = corun::with_timeout(bg, corun::Duration::max());
      CHECK(*never.deadline() == Clock::time_point::max());
      CHECK(never.err() == ContextError::none);
      auto [never2, c5] = corun::with_deadline(bg, Clock::time_point::max());
      CHECK(!is_done(never2));
      for (auto* f : {&c1, &c2, &c3, &c4, &c5, &pcancel}) (*f)();
      CHECK(!corun::detail::context_timer_armed(p));
      CHECK(!corun::detail::context_timer_armed(earlier));
    });
  }

  TEST_CASE("canceled before the deadline gives canceled, and stops the timer") {
    t::run([] {
      auto [p, pcancel] = corun::with_timeout(Context::background(), 1s);
      auto [c, cancel] = corun::with_timeout(p, 2s);
      CHECK(corun::detail::context_timer_armed(p));
      cancel();
      check_state(c, ContextError::canceled, "child");
      check_state(p, ContextError::none, "parent");
      pcancel();
      check_state(p, ContextError::canceled, "parent after its cancel");
      CHECK(!corun::detail::context_timer_armed(p));
      // Many timers stopped: nothing stays armed, no node stays alive.
      long live0 = live_nodes();
      {
        std::vector<std::pair<Context, CancelFunc>> v;
        for (int i = 0; i < 1000 / t::kScale; i++)
          v.push_back(corun::with_timeout(Context::background(), kLong));
        for (auto& [ctx, f] : v) CHECK(corun::detail::context_timer_armed(ctx));
        for (auto& [ctx, f] : v) f();
        for (auto& [ctx, f] : v) {
          CHECK(!corun::detail::context_timer_armed(ctx));
          CHECK(ctx.err() == ContextError::canceled);
        }
      }
      if (live0 >= 0) CHECK(live_nodes() == live0);
    });
  }

  TEST_CASE("a deep chain is canceled and freed without recursion") {
    t::run([] {
      const int kDepth = 20000 / t::kScale;
      auto [root, cancel] = corun::with_cancel(Context::background());
      std::vector<CancelFunc> cancels;
      Context c = root, mid;
      for (int i = 0; i < kDepth; i++) {
        auto [child, f] = i % 2 ? corun::with_timeout(c, kLong) : corun::with_cancel(c);
        cancels.push_back(std::move(f));
        c = child;
        if (i == kDepth / 2) mid = c;
      }
      cancel();
      check_state(c, ContextError::canceled, "deepest");
      check_state(mid, ContextError::canceled, "middle");
      CHECK(!corun::detail::context_timer_armed(c));
      // Dropping a long chain of handles frees it iteratively too.
      cancels.clear();
      c = Context();
      mid = Context();
      auto [root2, cancel2] = corun::with_cancel(Context::background());
      {
        Context x = root2;
        for (int i = 0; i < kDepth; i++) x = corun::with_cancel(x).first;
        CHECK(corun::detail::context_children(root2) == 1);
      }
      CHECK(corun::detail::context_children(root2) == 0);
      cancel2();
    });
  }

  TEST_CASE("simultaneous cancels: a tree canceled in random order by many tasks") {
    t::run([] {
      const int kRounds = 10 / (t::kScale > 1 ? 2 : 1);
      std::mt19937 rng(12345);
      for (int round = 0; round < kRounds; round++) {
        std::vector<std::pair<Context, CancelFunc>> m;
        m.push_back(corun::with_cancel(Context::background()));
        for (std::size_t q = 0; m.size() < 100; q++) {
          for (int i = 0; i < 4; i++) {
            Context parent = m[q].first;
            m.push_back(i == 3 ? corun::with_timeout(parent, kLong) : corun::with_cancel(parent));
          }
        }
        std::vector<std::size_t> order(m.size());
        for (std::size_t i = 0; i < order.size(); i++) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        std::atomic<int> wrong_after_cancel{0};
        corun::WaitGroup wg;
        for (std::size_t i : order) {
          wg.add(1);
          corun::go([&, i] {
            m[i].second();
            // When a CancelFunc returns, its context is canceled, whoever did it.
            if (m[i].first.err() != ContextError::canceled || !is_done(m[i].first))
              wrong_after_cancel++;
            wg.done();
          });
        }
        std::shuffle(order.begin(), order.end(), rng);
        int not_done = 0;
        for (std::size_t i : order)
          if (!wait_done(m[i].first)) not_done++;
        wg.wait();
        CHECK(not_done == 0);
        CHECK(wrong_after_cancel.load() == 0);
        for (auto& [c, f] : m) {
          CHECK(c.err() == ContextError::canceled);
          CHECK(corun::detail::context_children(c) == 0);
          CHECK(!corun::detail::context_timer_armed(c));
        }
      }
    });
  }

  TEST_CASE("simultaneous cancels: many tasks call the same cancel; all see the subtree done") {
    t::run([] {
      // The subtree is big enough (a walk of tens of microseconds) that the callers,
      // released together by a gate, overlap with the first one's walk.
      const int kTasks = 16, kRounds = 40 / t::kScale, kKids = 400 / t::kScale;
      std::atomic<int> wrong{0};
      for (int round = 0; round < kRounds; round++) {
        auto [root, cancel] = corun::with_cancel(Context::background());
        std::vector<std::pair<Context, CancelFunc>> kids;
        for (int i = 0; i < kKids; i++) {
          Context parent = i < 4 ? root : kids[static_cast<std::size_t>(i / 4 - 1)].first;
          kids.push_back(i % 2 ? corun::with_timeout(parent, kLong) : corun::with_cancel(parent));
        }
        Chan<int> gate;
        corun::WaitGroup wg;
        for (int k = 0; k < kTasks; k++) {
          wg.add(1);
          corun::go([&, gate]() mutable {
            gate.recv();
            cancel();
            // Leaves first: the last ones the walk reaches.
            for (auto it = kids.rbegin(); it != kids.rend(); ++it)
              if (it->first.err() != ContextError::canceled || !is_done(it->first)) wrong++;
            wg.done();
          });
        }
        corun::yield();
        gate.close();
        wg.wait();
        for (auto& [c, f] : kids) f();
      }
      CHECK(wrong.load() == 0);
    });
  }

  TEST_CASE("interlocked cancels: a child canceled when its parent's done closes") {
    t::run([] {
      auto [parent, cancel_parent] = corun::with_cancel(Context::background());
      auto [child, cancel_child] = corun::with_cancel(parent);
      corun::WaitGroup wg;
      wg.add(1);
      corun::go([&, p = parent, cc = cancel_child] {
        p.done().recv();
        cc();
        wg.done();
      });
      cancel_parent();
      bool child_done = wait_done(child);
      CHECK(child_done);
      wg.wait();
      check_state(child, ContextError::canceled, "child");
    });
  }

  TEST_CASE("interlocked cancels: parent, child and grandchild cancels race across Ps") {
    t::run([] {
      const int kRounds = 2000 / t::kScale;
      long live0 = live_nodes();
      auto [root, root_cancel] = corun::with_cancel(Context::background());
      std::atomic<int> wrong{0};
      for (int round = 0; round < kRounds; round++) {
        auto [p, pc] = corun::with_cancel(root);
        auto [c, cc] = round % 2 ? corun::with_timeout(p, kLong) : corun::with_cancel(p);
        auto [g, gc] = corun::with_cancel(c);
        corun::WaitGroup wg;
        wg.add(3);
        corun::go([&, pc = pc] {
          pc();
          wg.done();
        });
        corun::go([&, cc = cc, c = c] {
          cc();
          if (c.err() != ContextError::canceled) wrong++;
          wg.done();
        });
        corun::go([&, gc = gc] {
          // A grandchild whose handles are dropped while its ancestors are canceled.
          if (round % 3 == 0) gc();
          wg.done();
        });
        gc = nullptr;
        g = Context();
        wg.wait();
        if (c.err() != ContextError::canceled || p.err() != ContextError::canceled) wrong++;
        if (corun::detail::context_children(p) != 0 || corun::detail::context_children(c) != 0)
          wrong++;
      }
      CHECK(wrong.load() == 0);
      CHECK(corun::detail::context_children(root) == 0);
      root_cancel();
      if (live0 >= 0) CHECK(live_nodes_settled(live0 + 1) == live0 + 1);  // root, still held
    });
  }

  TEST_CASE("err() and done() agree while a cancel races with observers") {
    t::run([] {
      // p -> c -> a chain of kDepth below c. Observers of c: once c.err() is set (or c's
      // done() closed and then c.err() read), c's whole subtree is canceled and done.
      const int kRounds = 200 / t::kScale, kDepth = 300 / t::kScale;
      std::atomic<int> err_without_done{0}, done_without_err{0}, subtree_late{0};
      for (int round = 0; round < kRounds; round++) {
        auto [p, pc] = corun::with_cancel(Context::background());
        auto [c, cc] = corun::with_cancel(p);
        std::vector<CancelFunc> chain;
        Context leaf = c;
        for (int i = 0; i < kDepth; i++) {
          auto [x, f] = i % 3 ? corun::with_cancel(leaf) : corun::with_timeout(leaf, kLong);
          leaf = x;
          chain.push_back(f);
        }
        Chan<std::monostate> cd = c.done();
        corun::WaitGroup wg;
        wg.add(2);
        corun::go([&, c = c, leaf]() {
          for (;;) {  // polls err(); once it is set, done() is closed, the subtree too
            if (c.err() != ContextError::none) {
              // The leaf first: done() takes the node's lock, which would wait out a
              // cancel in progress and hide an err() that returned early.
              if (leaf.err() != ContextError::canceled || !is_done(leaf)) subtree_late++;
              if (!is_done(c)) err_without_done++;
              break;
            }
            corun::yield();
          }
          wg.done();
        });
        corun::go([&, cd, c = c, leaf]() mutable {
          cd.recv();  // closed
          if (c.err() == ContextError::none) done_without_err++;
          if (leaf.err() != ContextError::canceled) subtree_late++;
          wg.done();
        });
        corun::yield();
        pc();
        wg.wait();
        cc();
        for (auto& f : chain) f();
      }
      CHECK(err_without_done.load() == 0);
      CHECK(done_without_err.load() == 0);
      CHECK(subtree_late.load() == 0);
    });
  }

  TEST_CASE("layers: 30 random with_cancel/with_timeout layers, one canceled") {
    t::run([] {
      for (unsigned seed = 1; seed <= 40; seed++) {
        const std::string at = "seed " + std::to_string(seed) + ", layer ";
        std::mt19937 rng(seed);
        std::vector<Context> layers;
        std::vector<std::size_t> cancel_layer;  // the layer each cancel belongs to
        std::vector<CancelFunc> cancels;
        std::optional<std::size_t> first_timer;
        Context ctx;
        for (std::size_t i = 0; i < 30 || !first_timer || cancels.size() < 2; i++) {
          auto [c, f] = rng() % 2 ? corun::with_cancel(ctx) : corun::with_timeout(ctx, kLong);
          if (c.deadline() && !first_timer) first_timer = i;
          ctx = c;
          layers.push_back(c);
          cancels.push_back(f);
          cancel_layer.push_back(i);
        }
        for (std::size_t i = 0; i < layers.size(); i++) {
          std::string where = at + std::to_string(i);
          check_state(layers[i], ContextError::none, "before cancel, " + where);
          CHECK_MESSAGE(layers[i].deadline().has_value() == (i >= *first_timer), where);
          if (i >= *first_timer)
            CHECK_MESSAGE(*layers[i].deadline() == *layers[*first_timer].deadline(), where);
        }
        std::size_t k = rng() % cancels.size();
        cancels[k]();
        for (std::size_t i = 0; i < layers.size(); i++) {
          check_state(layers[i], i >= cancel_layer[k] ? ContextError::canceled : ContextError::none,
                      "after cancel of layer " + std::to_string(cancel_layer[k]) + ", " + at +
                          std::to_string(i));
        }
        for (auto& f : cancels) f();
      }
    });
  }

  TEST_CASE("layers: 30 random with_cancel/with_timeout layers, the first timeout expires") {
    t::run([] {
      for (unsigned seed = 1; seed <= 8; seed++) {
        const std::string at = "seed " + std::to_string(seed) + ", layer ";
        std::mt19937 rng(seed);
        std::vector<Context> layers;
        std::vector<CancelFunc> cancels;
        std::optional<std::size_t> first_timer;
        Context ctx;
        auto created = Clock::now();
        for (std::size_t i = 0; i < 30 || !first_timer; i++) {
          auto [c, f] = rng() % 2 ? corun::with_cancel(ctx) : corun::with_timeout(ctx, kShort);
          if (c.deadline() && !first_timer) first_timer = i;
          ctx = c;
          layers.push_back(c);
          cancels.push_back(f);
        }
        auto dl = *layers[*first_timer].deadline();
        CHECK(dl >= created + kShort);
        for (std::size_t i = 0; i < layers.size(); i++) {
          std::string where = at + std::to_string(i);
          CHECK_MESSAGE(layers[i].deadline().has_value() == (i >= *first_timer), where);
          if (i >= *first_timer) CHECK_MESSAGE(*layers[i].deadline() == dl, where);
          // Only the first timeout layer arms a timer; the rest are canceled through it.
          bool armed = corun::detail::context_timer_armed(layers[i]);
          CHECK_MESSAGE((armed == (i == *first_timer) || Clock::now() >= dl), where);
        }
        if (Clock::now() < dl) CHECK(!is_done(ctx));  // only if the clock says it is early
        bool expired = wait_done(ctx);
        CHECK(expired);
        CHECK(Clock::now() >= dl);
        for (std::size_t i = 0; i < layers.size(); i++) {
          check_state(layers[i],
                      i >= *first_timer ? ContextError::deadline_exceeded : ContextError::none,
                      "after timeout, " + at + std::to_string(i));
        }
        for (auto& f : cancels) f();
        for (std::size_t i = 0; i < layers.size(); i++) {
          CHECK_MESSAGE(layers[i].err() == (i >= *first_timer ? ContextError::deadline_exceeded
                                                              : ContextError::canceled),
                        (at + std::to_string(i)));
        }
      }
    });
  }

  TEST_CASE("foreign threads: cancel from a std::thread; contexts made on one") {
    t::run([] {
      auto [p, cancel] = corun::with_cancel(Context::background());
      auto [c, ccancel] = corun::with_timeout(p, kLong);
      std::thread th([cancel = cancel] {
        std::this_thread::sleep_for(1ms);
        cancel();
      });
      bool woken = wait_done(c);  // the task parks on done(); the foreign cancel wakes it
      CHECK(woken);
      check_state(c, ContextError::canceled, "canceled by a foreign thread");
      CHECK(!corun::detail::context_timer_armed(c));
      th.join();
      ccancel();

      // A foreign thread makes a deadline context while run() runs and blocks on its
      // done() (a futex wait), while a task cancels a sibling tree.
      std::atomic<int> state{-1};
      std::atomic<bool> early{false};
      std::thread th2([&] {
        auto [x, xcancel] = corun::with_timeout(Context::background(), kShort);
        x.done().recv();
        early = Clock::now() < *x.deadline();
        state = static_cast<int>(x.err());
        xcancel();
      });
      auto [y, ycancel] = corun::with_cancel(Context::background());
      auto [z, zcancel] = corun::with_timeout(y, kLong);
      ycancel();
      check_state(z, ContextError::canceled, "task-side tree");
      // The thread needs the runtime (its timer's callback runs as a task): wait for it
      // without holding the P, or at 1 P the timer's task could never run.
      corun::blocking([&] { th2.join(); });
      CHECK(state.load() == static_cast<int>(ContextError::deadline_exceeded));
      CHECK(!early.load());
      zcancel();
    });
  }

  TEST_CASE("outside run: with_cancel works; a needed timer throws std::logic_error") {
    long live0 = live_nodes();
    {
      auto bg = Context::background();
      auto [p, pcancel] = corun::with_cancel(bg);
      CHECK_THROWS_AS(corun::with_timeout(p, 1s), std::logic_error);
      CHECK_THROWS_AS(corun::with_deadline(p, Clock::now() + 1s), std::logic_error);
      CHECK(corun::detail::context_children(p) == 0);  // the failed child is unlinked
      check_state(p, ContextError::none, "parent of the failed child");
      // No timer needed: an expired deadline, or a never-coming one.
      auto [e, ecancel] = corun::with_deadline(p, Clock::now() - 1s);
      check_state(e, ContextError::deadline_exceeded, "expired");
      auto [e2, e2cancel] = corun::with_timeout(e, 1h);  // parent's deadline is earlier
      check_state(e2, ContextError::deadline_exceeded, "child of expired");
      auto [n, ncancel] = corun::with_deadline(p, Clock::time_point::max());
      CHECK(corun::detail::context_children(p) == 1);
      // A foreign thread cancels.
      std::thread th([pcancel = pcancel] { pcancel(); });
      th.join();
      check_state(n, ContextError::canceled, "canceled by another thread");
      ecancel();
      e2cancel();
      ncancel();
    }
    if (live0 >= 0) CHECK(live_nodes() == live0);
  }
}
