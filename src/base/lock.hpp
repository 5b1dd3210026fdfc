// base/lock.hpp — the runtime's one lock type, its one scoped guard, and the lock order.
//
// Every lock of the runtime is a `Lock<rank>` and is taken through `Guard` (or lock() and
// unlock() where a park commit drops it, sched/park.hpp). The rank is the lock's place in
// the one order in which locks may nest (LockRank below, Go's runtime/lockrank.go): a
// thread holding a lock of rank r may take only locks of a higher rank, or of rank r
// itself where that rank says how its locks nest (channels by ascending address, context
// nodes parent before child). Locks not listed here do not exist; adding one means adding
// its rank here first.
//
// How a lock waits is part of its rank (kRanks[rank].wait), so a lock cannot be declared
// with the wrong one:
//   spin   a test-and-test-and-set word: exponential PAUSE backoff, then sched_yield (a
//          holder preempted by the kernel gets the CPU instead of us burning our slice).
//          For the locks tasks take on hot paths and hold for a few dozen instructions,
//          never across a syscall: a task must never put its M's thread to sleep while it
//          holds a P, and the hold is shorter than a futex round trip. Unlock is a plain
//          store-release, no read-modify-write.
//   sleep  std::mutex (a futex after a short spin): for locks held across syscalls or O(n)
//          walks (the stack allocator's mmap, the idle lists, the pool registry) by code
//          that may as well sleep. Unlock is an RMW, which the spin locks' hot paths avoid.
//
// Checks (CORUN_LOCK_RANKS, on where CORUN_DEBUG_CHECKS is: MODE=debug and the ASan
// build): every acquire is checked against the locks the thread already holds, and an
// inversion, a lock taken twice, or a release of a lock not held prints both locks' names
// and aborts — before the acquire, so a would-be deadlock is reported, not hung. Held
// locks are tracked per thread, not per task: a lock a task holds into park is dropped by
// the park commit on the same thread before anything else runs there (sched/task.cpp), and
// tasks move between threads only with no lock held. Release builds compile the checks
// out: Lock<R> is then exactly one word (spin) or one std::mutex (sleep).
// Clang's thread-safety analysis (base/tsa.hpp) sees Lock<R> as a capability and Guard as
// a scoped one, so fields marked CORUN_GUARDED_BY(lock) are checked at compile time.
//
// Rejected: a futex lock for everything (Go's lock_futex: one wait policy, but its unlock
// is an atomic exchange, an RMW on every channel hand-off); a rank stored in each lock
// object (a byte per channel and heap; the rank is known at compile time); a partial
// order with explicit edges like Go's lockrank table (our order is total and short, and a
// total order is a number compare).
// On 2 sockets × 64 cores a spin lock hammered from every P makes its line bounce between
// sockets like any lock would; the cure is fewer shared locks (per-P timers, pool shards),
// not a fancier lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "base/check.hpp"
#include "base/cpu_relax.hpp"
#include "base/tsa.hpp"

#ifndef CORUN_LOCK_RANKS
#define CORUN_LOCK_RANKS CORUN_DEBUG_CHECKS
#endif

namespace corun::base {

// The lock order: a lock may be taken only while every lock the thread holds comes
// earlier in this list (or is of the same rank, where the rank's `nest` allows it).
enum class LockRank : std::uint8_t {
  foreign_gate,   // sched/runtime.cpp: one grace period of the foreign gate at a time (the
                  // end of a run, a runtime's destruction); taken with no other lock held.
  timer_send,     // timer/timer.cpp TimerRec::send_mu: one chan timer's sends, in order;
                  // taken by a firer holding no lock, the channel's nests inside.
  context,        // context/context.cpp node locks. Cancel holds the path from the canceled
                  // node down (parent before child) and closes done channels and stops
                  // timers under it, so chan, timer_rec and timers nest inside.
  chan,           // sync/chan_core.hpp ChanCore::lock. A select holds several at once,
                  // taken in ascending address order (select.cpp).
  waitlist,       // sync/waiter.hpp WaitList (WaitGroup, Mutex); its word lives in the
                  // public sync.hpp (lock_word/unlock_word below).
  poll_desc,      // sched/netpoll.hpp PollDesc::lock_: one descriptor's deadlines. Held
                  // while arming their timers (timers nests inside).
  timer_rec,      // timer/timer.cpp TimerRec::mu: serialises arm/stop/reset of one timer.
  timers,         // sched/timers.hpp Timers::lock: one P's timer heap. A sleeping task
                  // holds it into park; the park commit drops it.
  sched,          // sched/sched.hpp Runtime::lock (Go's sched.lock): idle Ps, idle Ms, all
                  // Ms. Taken by wake-ups (startm), so every lock above may be held then
                  // only if it is dropped before any ready(): the ones above never are.
  global_runq,    // sched/global_queue.hpp: the global run queue.
  stacks,         // os/stack.hpp StackAllocator: slab maps, the idle stack cache.
  pool_registry,  // pool/pool_trim.cpp: the list of all pools; the trim walks it.
  pool_depot,     // pool/pool_state.hpp PoolState::lock: one pool's depot; O(1) under it.
  poll_cache,     // sched/netpoll.cpp: the free list of poll records.
  numa,           // os/numa.cpp: creation of a node's jemalloc arena.
  topology,       // os/topology.cpp: the cached real topology.
  config,         // sched/config.cpp: environment names already warned about (a leaf).
  count_
};

enum class LockWait : std::uint8_t { spin, sleep };
// How locks of one rank may nest with each other.
enum class LockNest : std::uint8_t {
  never,    // a thread holds at most one lock of the rank
  address,  // in ascending address order (checked)
  tree,     // parent before child (not checkable from addresses: allowed)
};

struct RankInfo {
  const char* name;
  LockWait wait;
  LockNest nest;
};

inline constexpr RankInfo kRanks[] = {
    {"foreign gate", LockWait::sleep, LockNest::never},
    {"timer send", LockWait::spin, LockNest::never},
    {"context node", LockWait::spin, LockNest::tree},
    {"channel", LockWait::spin, LockNest::address},
    {"wait list", LockWait::spin, LockNest::never},
    {"poll descriptor", LockWait::spin, LockNest::never},
    {"timer record", LockWait::spin, LockNest::never},
    {"timer heap", LockWait::spin, LockNest::never},
    {"sched.lock", LockWait::sleep, LockNest::never},
    {"global run queue", LockWait::sleep, LockNest::never},
    {"stack allocator", LockWait::sleep, LockNest::never},
    {"pool registry", LockWait::sleep, LockNest::never},
    {"pool depot", LockWait::spin, LockNest::never},
    {"poll cache", LockWait::spin, LockNest::never},
    {"numa arenas", LockWait::sleep, LockNest::never},
    {"topology cache", LockWait::sleep, LockNest::never},
    {"config warnings", LockWait::sleep, LockNest::never},
};
static_assert(sizeof(kRanks) / sizeof(kRanks[0]) == static_cast<std::size_t>(LockRank::count_),
              "one kRanks row per LockRank, in order");

constexpr const RankInfo& rank_info(LockRank r) noexcept {
  return kRanks[static_cast<std::size_t>(r)];
}

// ---- the rank check (base/lock.cpp); no-ops unless CORUN_LOCK_RANKS -------------------
#if CORUN_LOCK_RANKS
// Before acquiring `lock` of rank r: aborts if the calling thread holds it already, or a
// lock it holds forbids r (order, nesting). Then records it.
void rank_acquire(LockRank r, const void* lock) noexcept;
void rank_try_acquired(LockRank r, const void* lock) noexcept;  // records only
void rank_release(LockRank r, const void* lock) noexcept;       // aborts if not held
// How many locks the calling thread holds (for tests and assertions).
int ranks_held() noexcept;
#else
inline void rank_acquire(LockRank, const void*) noexcept {}
inline void rank_try_acquired(LockRank, const void*) noexcept {}
inline void rank_release(LockRank, const void*) noexcept {}
inline int ranks_held() noexcept {
  return 0;
}
#endif

// ---- the spin word ---------------------------------------------------------------------
// 0 free, 1 held. acquire on taking it: the critical section sees the previous holder's
// writes; release on dropping it: publishes the critical section.
// The contended path (lock.cpp) is out of line and cold: inlined, its loop would make
// every function that takes a lock save five callee-saved registers on its fast path too.
void spin_acquire_contended(std::atomic<std::uint32_t>& l) noexcept;
inline void spin_acquire(std::atomic<std::uint32_t>& l) noexcept {
  if (l.exchange(1, std::memory_order_acquire) == 0) [[likely]]
    return;
  spin_acquire_contended(l);
}

inline bool spin_try_acquire(std::atomic<std::uint32_t>& l) noexcept {
  return l.load(std::memory_order_relaxed) == 0 && l.exchange(1, std::memory_order_acquire) == 0;
}

inline void spin_release(std::atomic<std::uint32_t>& l) noexcept {
  l.store(0, std::memory_order_release);
}

// A spin lock on a bare word: what Lock<R> does for a spin rank, and what a lock whose word
// must live in a public header uses (detail::WaitList in sync.hpp: include/corun/ cannot
// see src/base). The analysis cannot see such a word as a capability, so its users say
// what it guards in comments.
template <LockRank R>
inline void lock_word(std::atomic<std::uint32_t>& w) noexcept {
  static_assert(rank_info(R).wait == LockWait::spin, "a lock word is a spin lock");
  rank_acquire(R, &w);
  spin_acquire(w);
}
template <LockRank R>
inline void unlock_word(std::atomic<std::uint32_t>& w) noexcept {
  spin_release(w);
  rank_release(R, &w);
}

// ---- the lock ----------------------------------------------------------------------------
template <LockRank R>
class CORUN_CAPABILITY("lock") Lock {
  static constexpr bool kSpin = rank_info(R).wait == LockWait::spin;

 public:
  static constexpr LockRank kRank = R;

  Lock() noexcept = default;
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  void lock() noexcept CORUN_ACQUIRE() {
    if constexpr (kSpin) {
      lock_word<R>(impl_);
    } else {
      rank_acquire(R, this);
      impl_.lock();
    }
  }

  bool try_lock() noexcept CORUN_TRY_ACQUIRE(true) {
    bool got;
    if constexpr (kSpin)
      got = spin_try_acquire(impl_);
    else
      got = impl_.try_lock();
    if (got) rank_try_acquired(R, this);  // (&impl_ == this: the word is the first member)
    return got;
  }

  void unlock() noexcept CORUN_RELEASE() {
    if constexpr (kSpin) {
      unlock_word<R>(impl_);
    } else {
      impl_.unlock();
      rank_release(R, this);
    }
  }

  // Tells the analysis the caller holds this lock, where it was taken in a way the
  // analysis cannot follow (a function returning a locked object). Checks the word in
  // CORUN_DEBUG_CHECKS builds (spin locks).
  void assert_held() const noexcept CORUN_ASSERT_CAPABILITY(this) {
    CORUN_DCHECK(held_hint(), "lock %p (%s) assumed held but free", static_cast<const void*>(this),
                 rank_info(R).name);
  }

  // For CORUN_CHECK/DCHECK only: a snapshot, true if some thread holds it (spin locks; a
  // sleep lock answers true, as it cannot tell).
  bool held_hint() const noexcept {
    if constexpr (kSpin)
      return impl_.load(std::memory_order_relaxed) != 0;
    else
      return true;
  }

 private:
  std::conditional_t<kSpin, std::atomic<std::uint32_t>, std::mutex> impl_{};
};

// The one scoped guard. unlock()/lock() let a guarded scope drop the lock for a call and
// take it again (the scheduler's idle paths do).
template <class L>
class CORUN_SCOPED_CAPABILITY Guard {
 public:
  explicit Guard(L& l) noexcept CORUN_ACQUIRE(l) : l_(l) { l_.lock(); }
  ~Guard() CORUN_RELEASE() {
    if (held_) l_.unlock();
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  void unlock() noexcept CORUN_RELEASE() {
    l_.unlock();
    held_ = false;
  }
  void lock() noexcept CORUN_ACQUIRE() {
    l_.lock();
    held_ = true;
  }

 private:
  L& l_;
  bool held_ = true;
};

}  // namespace corun::base
