// pool/pool.cpp — PoolCore: get/put through the caller's P shard, the depot, or (for
// threads that are not Ps, and in CORUN_POOL=global) the depot alone.
//
// Fast path (a task on a P, private slot free on put / full on get): inline in pool.hpp
// (PoolCore::get/put): the table (a relaxed load used as a consume: pool.hpp table_), the
// caller's key (<corun/proc_tls.hpp> this_proc_key(): run id and P id in one volatile load
// through %fs, never cached across a park), one xor and compare of it with the table's
// run_key, the slot pointer, the slot — no call, no atomic RMW, no lock; five loads (x86-64,
// g++ 12 -O2: 11 instructions for a put, 12 for a get, without the loop's own). A P that has
// no shard yet finds the read-only no-shard slot (kNoShardSlot) there, which put sees full
// and get empty, so the fast path has no null test. With a slot found, the local array is
// one call away (get_shard/put_shard: no second lookup); the no-shard slot goes on from
// there to the full path. Without one, get_outline/put_outline repeat the lookup out of
// line (current_shard) and go on to the slow paths. The one compare is the whole safety
// check: the table is never null (kNoTable, of no run, until the first install), a thread
// without a P has key 0, whose top half no run has, and a table of this run has a slot for
// every P id of it; so a foreign thread, an M in blocking(), a stale table of an earlier run
// and a pool not used yet all fail it and take the slow path.
// Why so few loads: the pair put+get is bound by them (two per cycle on this EPYC): 14 per
// pair at 2.07 ns, 11 at 1.91 ns (perf/RESULTS.md); a private slot is an integer so that
// storing to it does not make g++ reload the caller's pointers.
// It is safe without atomics because a task never parks inside get/put (it stays on its
// P) and every other party touching the shard does it at a safe point of that P
// (pool_state.hpp). Every slow path below is a tail call from get/put, so their fast
// paths push nothing (no callee-saved registers, no frame): with the install in line,
// every get/put would save four registers first.
// Slow paths, each O(1):
//   put, array full: the oldest kBatch objects move into a batch node (one of the shard's
//     spare nodes: no allocation in steady state), which goes on the shard's own stack of
//     full batches (no lock) or, when that holds kLocalBatches, to the depot (its lock);
//   get, array empty: a batch from the shard's own stack (no lock), else from the depot,
//     else from the victims (its lock), refills the array; its node becomes a spare;
//   no table for this run, or no shard for this P yet: install them (table sized for the
//     run's P count; shard on the P's NUMA node, os::node_alloc), move what a previous
//     run's shards held into the depot, and make sure the run's trim timer is armed.
// Threads without a P put into / take from the top batch of the depot one object at a
// time; in CORUN_POOL=global every get/put does that (one lock-protected list: Go before
// CL 46010043, with a spin lock where Go had a mutex — kinder to the old design).
// The depot needs no runtime: from a foreign thread a pool works the same during a run,
// between runs and while one ends. Only arming the run's trim timer reaches the runtime,
// and a foreign thread does that inside the foreign gate (ensure_trimmer_off_p).
// Rejected: the whole fast path (local array too) inline in pool.hpp (more code in every
// caller for the case the private slot already serves: a put then a get, or a get then a
// put); reading tls_proc as a C++ thread-local in the inline path (the compiler may keep
// the thread pointer across a park: a task that resumed on another M would use the old
// P's shard — proc_tls.hpp; the test "this_proc() and this_proc_key() read the library's record
// afresh" fails that way). Go's pin/unpin (corun cannot be preempted inside get/put: no need); a
// TLS per-thread cache for foreign threads (its objects would be pinned until thread exit, and
// foreign threads are the rare case); a lock-free depot (batch moves are rare).
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include <corun/runtime.hpp>
#include <corun/time.hpp>

#include "base/lock.hpp"
#include "base/probes.hpp"
#include "os/numa.hpp"
#include "pool/pool_state.hpp"
#include "pool/pool_trim.hpp"
#include "sched/proc.hpp"

namespace corun::detail {

namespace {
// What PoolCore::table_ holds until a P installs the first table: a table of no run. Its
// run_key's top half is 0xffffffff, which no run has (run ids count from 1 and stay below
// it: runtime.cpp), and a thread without a P has key 0 (proc.hpp): so the fast path's one
// key compare also covers "no table yet" and "not on a P", with no null test. Never
// written, never freed; PoolAccess::table() hides it from every slow path (nullptr).
constinit ShardTable kNoTable{{~std::uint64_t{0}, 0, nullptr}};
}  // namespace

// In .rodata: a put that wrote to it would fault rather than corrupt anything.
alignas(64) constinit const PoolSlot kNoShardSlot = kPoolNoShard;

namespace {
void* obj_of(PoolSlot x) noexcept {
  return reinterpret_cast<void*>(x);
}
PoolSlot slot_of(void* x) noexcept {
  return reinterpret_cast<PoolSlot>(x);
}
}  // namespace

struct PoolAccess {
  static PoolState* state(const PoolCore& c) noexcept { return static_cast<PoolState*>(c.state_); }
  // The installed table, or kNoTable. acquire: the table's fields (publish's release); a
  // plain mov on x86.
  static ShardTable* table_or_none(const PoolCore& c) noexcept {
    return static_cast<ShardTable*>(c.table_.load(std::memory_order_acquire));
  }
  // The installed table, or nullptr.
  static ShardTable* table(const PoolCore& c) noexcept {
    ShardTable* t = table_or_none(c);
    return t == &kNoTable ? nullptr : t;
  }
  static void none(PoolCore& c) noexcept {
    c.table_.store(&kNoTable, std::memory_order_relaxed);  // relaxed: in the constructor
  }
  static void publish(PoolCore& c, ShardTable* t) noexcept {
    c.table_.store(t, std::memory_order_release);  // release: the table's fields
  }
};

namespace {

void refresh_hint(PoolState* st) noexcept CORUN_REQUIRES(st->lock) {
  st->has_items.store(st->full || st->victim, std::memory_order_relaxed);
}
Batch* pop(Batch*& list) noexcept {
  Batch* b = list;
  if (b) list = b->next;
  return b;
}
void push(Batch*& list, Batch* b) noexcept {
  b->next = list;
  list = b;
}

// A thread without a P (or any thread in global mode): one object into the top batch.
// Off a P (blocking(), foreign threads) the run's trim timer may not be armed yet: a
// pool used only there must be trimmed too. On a P, install() has armed it. A foreign
// thread asks inside a foreign gate section (sched/proc.hpp), so the runtime it arms the
// timer in is not freed meanwhile; with no run, or one stopping, it arms nothing and the
// depot serves as it does outside any run.
void ensure_trimmer_off_p() noexcept {
  sched::ForeignPin pin;
  if (sched::Runtime* rt = sched::caller_runtime()) pool_trimmer_ensure(rt);
}

__attribute__((noinline)) void depot_put(PoolState* st, void* x) noexcept {
  if (sched::tls_proc.id < 0) ensure_trimmer_off_p();
  Batch* fresh = nullptr;
  for (;;) {
    {
      base::Guard g(st->lock);
      Batch* b = st->full;
      if (!b || b->n == kBatch) {
        b = pop(st->empty);
        if (!b && fresh) {
          b = fresh;
          fresh = nullptr;
          st->nodes++;
        }
        if (b) {
          b->n = 0;
          push(st->full, b);
        }
      }
      if (b) {
        b->items[b->n++] = x;
        refresh_hint(st);
        if (fresh) {  // another thread made room meanwhile: keep ours as a spare
          push(st->empty, fresh);
          st->nodes++;
        }
        return;
      }
    }
    // Outside the lock; rare (no spare node anywhere). Out of memory: the object is
    // freed instead of cached, as a trim would (put cannot fail).
    if (!(fresh = new (std::nothrow) Batch())) return st->destroy(x);
  }
}

__attribute__((noinline)) void* depot_get(PoolState* st) noexcept {
  if (!st->has_items.load(std::memory_order_relaxed)) return nullptr;
  base::Guard g(st->lock);
  Batch*& list = st->full ? st->full : st->victim;
  Batch* b = list;
  if (!b) return nullptr;
  void* x = b->items[--b->n];
  if (b->n == 0) push(st->empty, pop(list));
  refresh_hint(st);
  return x;
}

void count_shard_nodes(PoolState* st, int delta) noexcept {
  // relaxed: a statistic for pool_footprint (pool_state.hpp)
  st->shard_nodes.fetch_add(static_cast<std::uint32_t>(delta), std::memory_order_relaxed);
}

// Hands the depot a node the shard no longer needs (more spares than it can use).
void give_spare(PoolState* st, Shard* s) noexcept {
  Batch* b = pop(s->spare);
  s->nspare--;
  count_shard_nodes(st, -1);
  base::Guard g(st->lock);
  push(st->empty, b);
  st->nodes++;
}

// Array full: its oldest kBatch objects go into a batch (on this P's stack, or to the
// depot when the stack is full), then x goes in.
__attribute__((noinline)) void spill(PoolState* st, Shard* s, void* x) noexcept {
  Batch* b = pop(s->spare);
  if (b) {
    s->nspare--;
  } else {
    {
      base::Guard g(st->lock);
      if ((b = pop(st->empty))) st->nodes--;
    }
    if (!b && !(b = new (std::nothrow) Batch())) return st->destroy(x);  // as depot_put
    count_shard_nodes(st, 1);
  }
  b->n = kBatch;
  // The halves do not overlap (kLocalCap == 2 * kBatch): two fixed-size copies the
  // compiler inlines, where a memmove would be a call into libc.
  static_assert(kLocalCap == 2 * kBatch);
  std::memcpy(b->items, s->local, sizeof(void*) * kBatch);
  std::memcpy(s->local, s->local + kBatch, sizeof(void*) * (kLocalCap - kBatch));
  s->n = kLocalCap - kBatch;
  s->local[s->n++] = x;
  if (s->nfull < kLocalBatches) {
    push(s->full, b);
    s->nfull++;
    return;
  }
  count_shard_nodes(st, -1);
  {
    base::Guard g(st->lock);
    push(st->full, b);
    st->nodes++;
    refresh_hint(st);
  }
  CORUN_PROBE2(pool_spill, st, kBatch);
  sched::count_pool_transfer();
}

// Array empty: a batch from this P's stack, else the depot, else the victims, refills it.
__attribute__((noinline)) void* refill(PoolState* st, Shard* s) noexcept {
  Batch* b = pop(s->full);
  if (b) {
    s->nfull--;
  } else {
    if (!st->has_items.load(std::memory_order_relaxed)) {
      sched::count_pool_miss();
      return nullptr;
    }
    {
      base::Guard g(st->lock);
      b = pop(st->full);
      if (!b) b = pop(st->victim);
      if (!b) {
        g.unlock();
        sched::count_pool_miss();
        return nullptr;
      }
      st->nodes--;
      refresh_hint(st);
    }
    count_shard_nodes(st, 1);
    CORUN_PROBE2(pool_refill, st, b->n);
    sched::count_pool_transfer();
  }
  std::uint32_t n = b->n;
  std::memcpy(s->local, b->items, sizeof(void*) * (n - 1));
  s->n = n - 1;
  void* x = b->items[n - 1];
  b->n = 0;
  push(s->spare, b);
  if (++s->nspare > kLocalBatches + 1) give_spare(st, s);
  return x;
}

// Moves a stale table's shards' objects into the depot and frees the shards. Called by
// the installer, under no lock, once the new table is published: nothing reads a stale
// table's shards (the fast path compares run ids; safe points use the current table).
void retire_shards(PoolState* st, ShardTable* t) noexcept {
  for (std::uint32_t i = 0; i < t->n; i++) {
    Shard* s = t->shard(i);
    if (!s) continue;
    if (s->priv) depot_put(st, obj_of(s->priv));
    for (std::uint32_t k = 0; k < s->n; k++) depot_put(st, s->local[k]);
    count_shard_nodes(st, -(s->nfull + s->nspare));
    {
      base::Guard g(st->lock);
      for (Batch* b; (b = pop(s->full)); st->nodes++) push(st->full, b);
      for (Batch* b; (b = pop(s->spare)); st->nodes++) push(st->empty, b);
      refresh_hint(st);
    }
    s->~Shard();
    os::node_free(s, sizeof(Shard));
    t->shards[i] = no_shard();
  }
}

// Whether table t serves run `run_id` (its run_key is the only record of the run).
bool serves(const ShardTable* t, std::uint64_t run_id) noexcept {
  return t->run_key == proc_run_key(run_id);
}

ShardTable* new_table(std::uint64_t run_id, std::uint32_t n) {
  std::size_t bytes = sizeof(ShardTable) + sizeof(Shard*) * n;
  bytes = (bytes + 63) & ~std::size_t{63};  // own lines: read by every P, rarely written
  void* mem = ::operator new (bytes, std::align_val_t{64});
  std::memset(mem, 0, bytes);
  auto* t = ::new (mem) ShardTable();
  t->run_key = proc_run_key(run_id);
  t->n = n;
  for (std::uint32_t i = 0; i < n; i++) t->shards[i] = no_shard();
  return t;
}

void free_table(ShardTable* t) noexcept {
  ::operator delete (t, std::align_val_t{64});
}

std::size_t table_bytes(const ShardTable* t) noexcept {
  return (sizeof(ShardTable) + sizeof(Shard*) * t->n + 63) & ~std::size_t{63};
}

// The caller's P has no usable shard: install the run's table and P's shard. nullptr
// when the P cannot have one (global mode, or out of memory: the depot serves instead).
__attribute__((noinline)) Shard* install(PoolCore& c) noexcept {
  const sched::ProcTls me = sched::tls_proc;  // a copy: nothing in install() parks
  if (me.id < 0) return nullptr;
  sched::Runtime* rt = sched::caller_runtime();
  PoolState* st = PoolAccess::state(c);
  if (sched::run_settings(rt).pool == sched::PoolMode::global) {
    st->global_run.store(me.run_id, std::memory_order_relaxed);
    pool_trimmer_ensure(rt);
    return nullptr;
  }
  ShardTable* t = PoolAccess::table(c);
  ShardTable* stale = nullptr;
  if (!t || !serves(t, me.run_id)) {
    ShardTable* fresh = nullptr;
    try {
      fresh = new_table(me.run_id, static_cast<std::uint32_t>(sched::run_procs(rt)));
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
    {
      base::Guard g(st->lock);
      t = PoolAccess::table(c);
      if (!t || !serves(t, me.run_id)) {  // we install (another P may have meanwhile)
        stale = t;
        if (stale) {
          stale->older = st->retired;
          st->retired = stale;
        }
        PoolAccess::publish(c, fresh);
        t = fresh;
        fresh = nullptr;
      }
    }
    if (fresh) free_table(fresh);
    if (stale) retire_shards(st, stale);
    pool_trimmer_ensure(rt);
  }
  Shard* s = nullptr;
  try {
    s = ::new (os::node_alloc(sizeof(Shard), alignof(Shard), sched::caller_node())) Shard();
  } catch (...) {
    return nullptr;
  }
  t->shards[me.id] = s;  // only that P's owner writes its slot
  return s;
}

}  // namespace

PoolCore::PoolCore(Destroy destroy) {
  PoolAccess::none(*this);
  auto* st = new PoolState();
  st->core = this;
  st->destroy = destroy;
  state_ = st;
  pool_register(st);
}

PoolCore::~PoolCore() {
  auto* st = static_cast<PoolState*>(state_);
  pool_unregister(st);  // no new trim or safe point reaches it after this
  // Help a trim that is destroying our victims (take what it has not), then wait for it
  // to finish the one object it holds — unless it is a task of a run that has ended
  // (abandoned: it never resumes, and never touches the state again).
  while (void* x = pool_take_dying(st)) st->destroy(x);
  while (st->trimmers.load(std::memory_order_acquire) != 0) {
    std::uint64_t run = st->trim_run.load(std::memory_order_relaxed);
    if (run != 0 && sched::running_run_id() != run) break;
    if (sched::in_task())
      corun::yield();
    else
      std::this_thread::yield();
  }
  ShardTable* t = PoolAccess::table(*this);
  std::vector<void*> objs;
  auto take_shards = [&](ShardTable* tab) {
    for (std::uint32_t i = 0; i < tab->n; i++) {
      Shard* s = tab->shard(i);
      if (!s) continue;
      if (s->priv) objs.push_back(obj_of(s->priv));
      for (std::uint32_t k = 0; k < s->n; k++) objs.push_back(s->local[k]);
      for (Batch** list : {&s->full, &s->spare})
        while (Batch* b = pop(*list)) {
          for (std::uint32_t k = 0; k < b->n; k++) objs.push_back(b->items[k]);
          delete b;
        }
      s->~Shard();
      os::node_free(s, sizeof(Shard));
    }
  };
  if (t) {
    take_shards(t);
    free_table(t);
  }
  for (ShardTable* r = st->retired; r;) {
    auto* nx = static_cast<ShardTable*>(r->older);
    take_shards(r);  // retired tables have no shards left; kept for symmetry
    free_table(r);
    r = nx;
  }
  for (Batch** list : {&st->full, &st->victim, &st->empty, &st->dying})
    while (Batch* b = pop(*list)) {
      for (std::uint32_t k = 0; k < b->n; k++) objs.push_back(b->items[k]);
      delete b;
    }
  Destroy destroy = st->destroy;
  delete st;
  for (void* o : objs) destroy(o);
}

namespace {

// The caller's shard of this pool for the running run, or nullptr: not on a P, no table
// for this run yet, or none for this P yet. Inlined into get/put, whose fast paths then
// need no callee-saved registers: every slow path is a tail call.
// The inline path's test (pool.hpp my_shards, proc_tls.hpp proc_in_run) on the library's
// own TLS. The table is never null (kNoTable's top half is no run's).
inline Shard* current_shard(const PoolCore& c) noexcept {
  ShardTable* t = PoolAccess::table_or_none(c);
  const long id = proc_in_run(sched::tls_proc.key, t->run_key);
  if (id < 0) [[unlikely]]
    return nullptr;
  return t->shard(static_cast<std::uint32_t>(id));  // a P of the table's run: id < t->n
}

// On a P without a shard: install one (unless this run is in global mode), else the depot.
// get_slow and put_slow test global_run themselves rather than leave it to install():
// one more call per op would slow down CORUN_POOL=global, the A/B's baseline.
__attribute__((noinline)) void* get_slow(PoolCore& c) noexcept {
  PoolState* st = PoolAccess::state(c);
  const sched::ProcTls& me = sched::tls_proc;
  if (me.id >= 0 && st->global_run.load(std::memory_order_relaxed) != me.run_id)
    if (Shard* s = install(c)) return refill(st, s);
  void* x = depot_get(st);
  if (!x) sched::count_pool_miss();  // counted only on a P (stats are per P)
  return x;
}

__attribute__((noinline)) void put_slow(PoolCore& c, void* x) noexcept {
  PoolState* st = PoolAccess::state(c);
  const sched::ProcTls& me = sched::tls_proc;
  if (me.id >= 0 && st->global_run.load(std::memory_order_relaxed) != me.run_id)
    if (Shard* s = install(c)) {
      s->priv = slot_of(x);  // install() made a fresh shard: its private slot is empty
      return;
    }
  depot_put(st, x);
}

}  // namespace

void* PoolCore::get_outline() noexcept {
  Shard* s = current_shard(*this);
  if (!s) [[unlikely]]
    return get_slow(*this);
  if (const PoolSlot x = s->priv) {
    s->priv = 0;
    return obj_of(x);
  }
  return get_shard(&s->priv);
}

void PoolCore::put_outline(void* x) noexcept {
  Shard* s = current_shard(*this);
  if (!s) [[unlikely]]
    return put_slow(*this, x);
  if (!s->priv) {
    s->priv = slot_of(x);
    return;
  }
  put_shard(&s->priv, x);
}

// `slot` is the private slot of the caller's shard, its first member (pool_state.hpp), or
// the no-shard slot (then the full path, which installs the shard).
void* PoolCore::get_shard(PoolSlot* slot) noexcept {
  if (slot == &kNoShardSlot) [[unlikely]]
    return get_slow(*this);
  Shard* s = reinterpret_cast<Shard*>(slot);
  if (s->n) return s->local[--s->n];
  return refill(PoolAccess::state(*this), s);
}

void PoolCore::put_shard(PoolSlot* slot, void* x) noexcept {
  if (slot == &kNoShardSlot) [[unlikely]]
    return put_slow(*this, x);
  Shard* s = reinterpret_cast<Shard*>(slot);
  if (s->n < kLocalCap) {
    s->local[s->n++] = x;
    return;
  }
  spill(PoolAccess::state(*this), s, x);
}

// ---- trimming and accounting (called by pool_trim.cpp and tests) ----------------------

bool pool_rotate_depot(PoolState* st, std::vector<Batch*>& nodes) {
  base::Guard g(st->lock);
  while (Batch* b = pop(st->victim)) push(st->dying, b);
  // Spare nodes beyond a few are memory the pool no longer needs.
  std::uint32_t keep = 4;
  Batch* kept = nullptr;
  while (Batch* b = pop(st->empty)) {
    if (keep) {
      keep--;
      push(kept, b);
    } else {
      nodes.push_back(b);
      st->nodes--;
    }
  }
  st->empty = kept;
  st->victim = st->full;
  st->full = nullptr;
  refresh_hint(st);
  return st->dying != nullptr;
}

void* pool_take_dying(PoolState* st) noexcept {
  Batch* done = nullptr;
  void* x = nullptr;
  {
    base::Guard g(st->lock);
    Batch* b = st->dying;
    if (!b) return nullptr;
    x = b->items[--b->n];
    if (b->n == 0) {
      done = pop(st->dying);  // a node of a trimmed generation: freed, not kept
      st->nodes--;
    }
  }
  delete done;
  return x;
}

void pool_trim_shard(PoolState* st, int proc, std::uint64_t run_id, bool to_victims) noexcept {
  ShardTable* t = PoolAccess::table(*st->core);
  if (!t || !serves(t, run_id) || static_cast<std::uint32_t>(proc) >= t->n) return;
  Shard* s = t->shard(static_cast<std::uint32_t>(proc));
  if (!s) return;
  // The private slot and the array go into nodes like the P's own full batches: spares
  // first, then the depot's, then new ones (outside the lock).
  void* items[kLocalCap + 1];
  std::uint32_t n = 0;
  if (s->priv) items[n++] = obj_of(s->priv);
  for (std::uint32_t k = 0; k < s->n; k++) items[n++] = s->local[k];
  s->priv = 0;
  s->n = 0;
  std::uint32_t need = (n + kBatch - 1) / kBatch;
  while (need > s->nspare) {
    Batch* b = nullptr;
    {
      base::Guard g(st->lock);
      if ((b = pop(st->empty))) st->nodes--;
    }
    if (!b && !(b = new (std::nothrow) Batch())) break;  // out of memory: see below
    count_shard_nodes(st, 1);
    push(s->spare, b);
    s->nspare++;
  }
  std::uint32_t i = 0;
  while (i < n && s->spare) {
    Batch* b = pop(s->spare);
    s->nspare--;
    b->n = 0;
    while (i < n && b->n < kBatch) b->items[b->n++] = items[i++];
    push(s->full, b);
    s->nfull++;
  }
  // Out of memory: what found no node stays cached here (n <= 1 + kLocalCap fits).
  if (i < n) s->priv = slot_of(items[i++]);
  for (; i < n; i++) s->local[s->n++] = items[i];
  // Every full batch of the P to the victims (or the depot); one spare stays.
  std::uint32_t moved = 0;
  {
    base::Guard g(st->lock);
    for (Batch* b; (b = pop(s->full)); moved++) push(to_victims ? st->victim : st->full, b);
    s->nfull = 0;
    for (; s->nspare > 1; s->nspare--, moved++) push(st->empty, pop(s->spare));
    st->nodes += moved;
    refresh_hint(st);
  }
  count_shard_nodes(st, -static_cast<int>(moved));
}

std::size_t pool_footprint(const PoolCore& c) noexcept {
  PoolState* st = PoolAccess::state(c);
  std::size_t bytes = sizeof(PoolState);
  base::Guard g(st->lock);
  bytes += std::size_t{st->nodes + st->shard_nodes.load(std::memory_order_relaxed)} * sizeof(Batch);
  if (ShardTable* t = PoolAccess::table(c)) {
    bytes += table_bytes(t);
    for (std::uint32_t i = 0; i < t->n; i++)
      if (t->shard(i)) bytes += sizeof(Shard);
  }
  for (auto* r = st->retired; r; r = static_cast<ShardTable*>(r->older)) bytes += table_bytes(r);
  return bytes;
}

std::size_t pool_cached(const PoolCore& c) noexcept {
  PoolState* st = PoolAccess::state(c);
  std::size_t n = 0;
  if (ShardTable* t = PoolAccess::table(c))
    for (std::uint32_t i = 0; i < t->n; i++)
      if (Shard* s = t->shard(i)) {
        n += (s->priv ? 1 : 0) + s->n;
        for (Batch* b = s->full; b; b = b->next) n += b->n;
      }
  base::Guard g(st->lock);
  for (Batch* list : {st->full, st->victim})
    for (Batch* b = list; b; b = b->next) n += b->n;
  return n;
}

}  // namespace corun::detail
