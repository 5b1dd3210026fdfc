// tests/base/lock_test.cpp — the one lock type, its guard, and the lock-rank check.
//
// The rank check is compiled in where CORUN_LOCK_RANKS is on (MODE=debug, SAN=address);
// there the death tests take locks against base/lock.hpp's order in a child process and
// expect an abort naming both locks. Elsewhere they check that nothing is tracked.
#include <doctest/doctest.h>

#include <csignal>
#include <string>
#include <thread>

#include "base/lock.hpp"
#include "support.hpp"

namespace t = corun::test;
using corun::base::Guard;
using corun::base::Lock;
using corun::base::LockRank;

CORUN_TEST_CHILD(lock_inversion) {
  Lock<LockRank::timers> heap;  // rank timers comes after chan
  Lock<LockRank::chan> chan;
  heap.lock();
  chan.lock();  // inversion: aborts here with the rank check on
  chan.unlock();
  heap.unlock();
  return 0;
}

CORUN_TEST_CHILD(lock_twice) {
  Lock<LockRank::pool_depot> depot;
  depot.lock();
  depot.lock();  // self-deadlock: reported instead of spinning forever
  return 0;
}

CORUN_TEST_CHILD(lock_channels_descending) {
  Lock<LockRank::chan> chans[2];
  chans[1].lock();
  chans[0].lock();  // select's rule: ascending addresses only
  return 0;
}

CORUN_TEST_CHILD(lock_release_unheld) {
  Lock<LockRank::chan> chan;
  chan.unlock();
  return 0;
}

TEST_SUITE("unit.base") {
  TEST_CASE("a guard holds its lock for its scope and can drop and retake it") {
    Lock<LockRank::chan> l;
    {
      Guard g(l);
      CHECK(l.held_hint());
      CHECK_FALSE(l.try_lock());
      g.unlock();
      CHECK_FALSE(l.held_hint());
      g.lock();
      CHECK(l.held_hint());
    }
    CHECK_FALSE(l.held_hint());
    REQUIRE(l.try_lock());
    l.unlock();
  }

  TEST_CASE("a sleeping lock excludes like a spinning one") {
    Lock<LockRank::sched> l;
    long counter = 0;
    auto work = [&] {
      for (int i = 0; i < 100000; i++) {
        Guard g(l);
        counter++;
      }
    };
    std::thread a(work), b(work);
    a.join();
    b.join();
    CHECK(counter == 200000);
  }

  TEST_CASE("locks taken in rank order, ascending channels and out-of-order releases pass") {
    Lock<LockRank::context> parent, child;
    Lock<LockRank::chan> chans[3];
    Lock<LockRank::timers> heap;
    int before = corun::base::ranks_held();
    parent.lock();
    child.lock();  // context nodes nest (tree order)
    for (auto& c : chans) c.lock();
    heap.lock();
    if (CORUN_LOCK_RANKS) CHECK(corun::base::ranks_held() == before + 6);
    chans[1].unlock();  // select and park commits drop locks out of order
    parent.unlock();
    heap.unlock();
    chans[0].unlock();
    chans[2].unlock();
    child.unlock();
    CHECK(corun::base::ranks_held() == before);
  }

#if CORUN_LOCK_RANKS
  TEST_CASE("an inversion aborts naming both locks") {
    auto r = t::child_run("lock_inversion");
    CHECK(r.signaled(SIGABRT));
    CHECK(r.output.find("lock order violation") != std::string::npos);
    CHECK(r.output.find("channel lock") != std::string::npos);
    CHECK(r.output.find("while holding timer heap lock") != std::string::npos);
  }

  TEST_CASE("taking a held lock again aborts instead of deadlocking") {
    auto r = t::child_run("lock_twice");
    CHECK(r.signaled(SIGABRT));
    CHECK(r.output.find("acquiring again pool depot lock") != std::string::npos);
  }

  TEST_CASE("channel locks out of address order abort") {
    auto r = t::child_run("lock_channels_descending");
    CHECK(r.signaled(SIGABRT));
    CHECK(r.output.find("below the address") != std::string::npos);
  }

  TEST_CASE("releasing a lock not held aborts") {
    auto r = t::child_run("lock_release_unheld");
    CHECK(r.signaled(SIGABRT));
    CHECK(r.output.find("releasing (not held) channel lock") != std::string::npos);
  }
#else
  TEST_CASE("release builds track nothing") {
    Lock<LockRank::timers> heap;
    Lock<LockRank::chan> chan;
    heap.lock();
    chan.lock();  // out of order, but unchecked here: no abort, nothing recorded
    CHECK(corun::base::ranks_held() == 0);
    chan.unlock();
    heap.unlock();
  }
#endif
}
