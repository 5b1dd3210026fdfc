// base/lock.cpp — the spin lock's contended path, and the lock-rank check (base/lock.hpp),
// compiled where CORUN_LOCK_RANKS is on.
//
// Each thread keeps the locks it holds in a small array, in acquisition order. An acquire
// compares the new lock's rank with every held one (a thread rarely holds more than
// three, so the walk is a few compares); a release removes its entry wherever it is
// (park commits and select drop locks out of order). A select on more channels than the
// array holds stops recording the excess (counted, so their releases still balance) but
// keeps checking the new ones against what is recorded.
// Rejected: checking only against the most recently taken lock (Go does, with its
// partial-order table): with a total order, comparing against all held ranks costs the
// same and also catches an inversion hidden under a same-rank pair.
#include "base/lock.hpp"

#include <sched.h>

namespace corun::base {

// Exponential backoff between looks at the word: a contender polling every PAUSE keeps
// pulling the line (which holds the channel's hot fields too) away from the holder
// mid-critical-section; Go's lock polls every 30 PAUSEs. The backoff doubles up to 256
// PAUSEs a round (~6 µs here, where a PAUSE is ~25 ns): two Ps hammering one channel then
// mostly take turns of many operations each, with the line staying put, instead of
// trading it every few (cap 32 → 256, 2 Ps, n=8: ChanContended -20%, ChanProdCons0/10/100
// -14/-21/-17%, SelectSyncContended -12%; ChanRequestResponse's p50/p99/p999 no change; 4 Ps
// on 2 cores: ChanContended -44%; 256 beat 128 by 5%: RESULTS, 2026-12-07). A PAUSE lasts
// 10-140 cycles by CPU, so the cap is tuned here, not universal. After 16 rounds,
// sched_yield: a holder preempted by the kernel (more Ps than cores) gets the CPU.
__attribute__((noinline, cold)) void spin_acquire_contended(
    std::atomic<std::uint32_t>& l) noexcept {
  for (int pauses = 1, spins = 0;;) {
    for (int k = 0; k < pauses; k++) cpu_relax();
    if (pauses < 256) pauses *= 2;
    if (l.load(std::memory_order_relaxed) == 0 && l.exchange(1, std::memory_order_acquire) == 0)
      return;
    if (++spins >= 16) {
      sched_yield();
      spins = 0;
    }
  }
}

}  // namespace corun::base

#if CORUN_LOCK_RANKS

#include <cstdio>
#include <cstdlib>

namespace corun::base {

namespace {

struct Held {
  const void* lock;
  LockRank rank;
};

constexpr int kMaxHeld = 64;

struct HeldLocks {
  int n = 0;
  int unrecorded = 0;  // acquires past kMaxHeld, not in `held`
  Held held[kMaxHeld]{};
};

constinit thread_local HeldLocks tl_held;

[[noreturn]] void violation(const char* what, LockRank taking, const void* lock, const Held* h) {
  const RankInfo& t = rank_info(taking);
  if (h) {
    const RankInfo& o = rank_info(h->rank);
    std::fprintf(stderr,
                 "corun: lock order violation: %s %s lock %p (rank %u) while holding %s lock %p "
                 "(rank %u); the order is base/lock.hpp's LockRank\n",
                 what, t.name, lock, static_cast<unsigned>(taking), o.name, h->lock,
                 static_cast<unsigned>(h->rank));
  } else {
    std::fprintf(stderr, "corun: lock order violation: %s %s lock %p (rank %u)\n", what, t.name,
                 lock, static_cast<unsigned>(taking));
  }
  std::abort();
}

void record(HeldLocks& hl, LockRank r, const void* lock) noexcept {
  if (hl.n == kMaxHeld) {
    hl.unrecorded++;
    return;
  }
  hl.held[hl.n++] = Held{lock, r};
}

}  // namespace

__attribute__((noinline)) void rank_acquire(LockRank r, const void* lock) noexcept {
  HeldLocks& hl = tl_held;
  const LockNest nest = rank_info(r).nest;
  for (int i = 0; i < hl.n; i++) {
    const Held& h = hl.held[i];
    if (h.lock == lock) violation("acquiring again", r, lock, &h);
    if (h.rank < r) continue;
    if (h.rank > r) violation("acquiring", r, lock, &h);
    // Same rank.
    if (nest == LockNest::never) violation("acquiring a second", r, lock, &h);
    if (nest == LockNest::address && lock < h.lock)
      violation("acquiring (below the address of a held lock of its rank)", r, lock, &h);
  }
  record(hl, r, lock);
}

__attribute__((noinline)) void rank_try_acquired(LockRank r, const void* lock) noexcept {
  record(tl_held, r, lock);
}

__attribute__((noinline)) void rank_release(LockRank r, const void* lock) noexcept {
  HeldLocks& hl = tl_held;
  for (int i = hl.n - 1; i >= 0; i--) {
    if (hl.held[i].lock != lock) continue;
    for (int k = i; k + 1 < hl.n; k++) hl.held[k] = hl.held[k + 1];
    hl.n--;
    return;
  }
  if (hl.unrecorded > 0) {
    hl.unrecorded--;
    return;
  }
  violation("releasing (not held)", r, lock, nullptr);
}

int ranks_held() noexcept {
  return tl_held.n + tl_held.unrecorded;
}

}  // namespace corun::base

#endif  // CORUN_LOCK_RANKS
