// corun/pool.hpp — Pool<T>: a cache of reusable objects (Go's sync.Pool), scalable.
//
// get() returns a cached object if there is one (the caller owns it: never the same
// object to two callers), else make(), else nullptr; put() gives an object back. Each P
// keeps a small cache of its own (a private slot and a 28-slot array on its NUMA node's
// memory, allocated when the P first uses the pool); get and put on it are plain loads
// and stores, no atomic, no lock, and on the private slot no call (inline below). When the array
// fills, half of it moves as one batch to the P's own stack of up to 4 full batches, then to the
// pool's depot (O(1) under the depot's lock); when it empties, get takes a batch back from the P's
// stack, else the depot. Threads that are not Ps (foreign threads, blocking() calls) use the depot
// directly, under its lock.
//
// Trimming without a GC: every CORUN_POOL_TRIM_MS (default 5 s) a runtime timer moves
// everything cached — depot and per-P caches — to a victim generation and destroys the
// previous victims. get() still finds victims (a busy pool keeps its hot objects); an
// object nobody took for two periods is destroyed. Between runs nothing is trimmed;
// destroying the Pool destroys everything it holds.
//
// CORUN_POOL=global replaces the per-P caches with one lock-protected list (the design
// Go had before CL 46010043, with corun's spin-then-yield lock for Go's mutex), for
// comparison.
//
// Memory: sizeof(Pool<T>) is a std::function plus two pointers (48 bytes); the pool's
// state (128 bytes) is allocated with it; in a run with P Ps, the first use adds the
// shard table (24 + 8·P bytes rounded up to 64, once per run) and each P's first use a
// 256-byte shard, plus a 128-byte batch node per batch in flight. Measured figures:
// perf/RESULTS.md.
//
// A Pool must outlive every get/put on it; it may be a global and be used across runs.
// It is neither copyable nor movable (its per-P caches are keyed by its address).
// Rejected: templated per-T cores (code bloat, and one non-template fast path is what
// perf shows); Go 1.13's lock-free per-P deques (its point is letting other Ps steal
// without a lock; corun moves whole batches through the depot instead, as Go CL 46010043 did).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include <corun/proc_tls.hpp>

namespace corun {

namespace detail {
// A private slot: the object's address as an integer, 0 when empty. As an integer, a store
// to it cannot alias a pointer the caller keeps in memory (a pointer store could: g++
// then reloads the caller's pointers after every put). kPoolNoShard is the value of the
// one read-only slot that stands in the table for a P with no shard yet (pool.cpp
// kNoShardSlot): get finds it "empty", put "full", and both go out of line, so the fast
// path needs no null test of the shard.
using PoolSlot = std::uintptr_t;
inline constexpr PoolSlot kPoolNoShard = 1;

// The head of a run's shard table (src/pool/pool_state.hpp ShardTable derives from it;
// its array of shard pointers follows): what the inline fast path reads.
struct PoolTableHead {
  std::uint64_t run_key = 0;  // proc_run_key(the served run's Runtime::run_id): the only
                              // record of the run (proc_tls.hpp)
  std::uint32_t n = 0;        // that run's P count
  void* older = nullptr;      // retired tables, freed with the pool (depot lock)
};

// The type-erased pool (src/pool/pool.cpp). get/put are called from tasks on any P and
// from any thread; see pool_state.hpp for the ownership of each part.
// get/put inline: the private slot of the caller's shard, when the caller is a task on a
// P of the run the installed table serves (one compare of the caller's key with the
// table's run_key: pool.cpp's header).
// Anything else — the slot full on put or empty on get, the no-shard slot, not on a P —
// is one call into the library: with a slot found, to get_shard/put_shard (the shard's
// local array, or the full path for the no-shard slot); without, to the full path
// (get_outline/put_outline).
// Nothing here can park, so the P read by this_proc() stays the caller's throughout.
#if defined(__SANITIZE_THREAD__)
#define CORUN_DETAIL_POOL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CORUN_DETAIL_POOL_TSAN 1
#endif
#endif
class PoolCore {
  // How the fast path loads table_ (see there).
#ifdef CORUN_DETAIL_POOL_TSAN
  static constexpr std::memory_order kTableLoadOrder = std::memory_order_acquire;
#else
  static constexpr std::memory_order kTableLoadOrder = std::memory_order_relaxed;
#endif

 public:
  using Destroy = void (*)(void*) noexcept;
  explicit PoolCore(Destroy destroy);
  ~PoolCore();
  PoolCore(const PoolCore&) = delete;
  PoolCore& operator=(const PoolCore&) = delete;

  // a cached object, or nullptr
  void* get() noexcept {
    long id;
    void* const* shards = my_shards(id);
    if (!shards) [[unlikely]]
      return get_outline();
    PoolSlot* slot = static_cast<PoolSlot*>(shards[id]);
    if (const PoolSlot x = *slot; x > kPoolNoShard) [[likely]] {
      *slot = 0;
      return reinterpret_cast<void*>(x);
    }
    return get_shard(slot);
  }
  // obj != nullptr
  void put(void* obj) noexcept {
    long id;
    void* const* shards = my_shards(id);
    if (!shards) [[unlikely]]
      return put_outline(obj);
    PoolSlot* slot = static_cast<PoolSlot*>(shards[id]);
    if (!*slot) [[likely]] {
      *slot = reinterpret_cast<PoolSlot>(obj);
      return;
    }
    put_shard(slot, obj);
  }
  // Out of line: the whole get/put (no shard found), and the rest of them on the shard
  // whose private slot is `slot` (found empty by get, full by put: the local array next).
  void* get_outline() noexcept;
  void put_outline(void* obj) noexcept;
  // `slot` may be the no-shard slot: they go on to the full path then.
  void* get_shard(PoolSlot* slot) noexcept;
  void put_shard(PoolSlot* slot, void* obj) noexcept;

 private:
  friend struct PoolAccess;  // pool.cpp
  // The installed table's slot pointers, with the caller's P id in `id`, when the table
  // serves the caller's run (see above); else nullptr. Slot i is the private slot of P i's
  // shard (a shard begins with it: pool.cpp asserts it), or the no-shard slot, never null.
  // The entries are Shard* (pool_state.hpp); they are read as void*, which may alias any
  // object pointer, and only then converted.
  void* const* my_shards(long& id) const noexcept {
    if constexpr (!kInlineProcTls) return nullptr;
    const auto* t = static_cast<const PoolTableHead*>(table_.load(kTableLoadOrder));
    // The top halves cancel exactly when the caller is on a P of the table's run; then
    // what is left is the P id (0 <= id < n).
    id = proc_in_run(this_proc_key(), t->run_key);
    if (id < 0) [[unlikely]]
      return nullptr;
    return reinterpret_cast<void* const*>(t + 1);
  }

  // The current run's shard table (pool_state.hpp ShardTable): published with release by the
  // depot lock's holder. Read-mostly. Never null once constructed: until the first install,
  // a static table of no run (pool.cpp kNoTable).
  // The fast path loads it relaxed, as a consume: everything it reads of the table
  // (run_key, the slot pointer) is addressed through the loaded pointer, and every CPU
  // corun runs on orders a load after the load its address depends on (Linux's
  // rcu_dereference rests on the same rule). An acquire load costs no instruction on x86,
  // but g++ then keeps every later load of the caller below it, so a put then get reloads
  // what the caller keeps in memory (Pool-1 8% slower, perf/RESULTS.md); compilers implement
  // consume as acquire. Under TSan, which does not model dependencies, it is acquire. The
  // library's slow paths load it with acquire.
  std::atomic<void*> table_{nullptr};
  void* state_ = nullptr;  // pool_state.hpp PoolState: depot, victims, registry link
};
}  // namespace detail

template <class T>
class Pool {
 public:
  explicit Pool(std::function<std::unique_ptr<T>()> make = {})
      : make_(std::move(make)), core_(&destroy) {}
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // A cached object, else make(), else nullptr. An exception from make() propagates.
  std::unique_ptr<T> get() {
    if (void* p = core_.get()) return std::unique_ptr<T>(static_cast<T*>(p));
    if (make_) return make_();
    return nullptr;
  }

  // Gives obj to the pool (nullptr is ignored). Never blocks.
  void put(std::unique_ptr<T> obj) noexcept {
    if (obj) core_.put(obj.release());
  }

 private:
  static void destroy(void* p) noexcept { delete static_cast<T*>(p); }

  std::function<std::unique_ptr<T>()> make_;
  detail::PoolCore core_;
};

}  // namespace corun
