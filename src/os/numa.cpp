// os/numa: per-node jemalloc arenas with mbind-ing extent hooks. See numa.hpp for the
// contract and the 2-socket reasoning.
//
// release_free_memory() purges every arena (not only ours): after a run, the freed P
// state, plan and bookkeeping sit in them as dirty pages (16 MiB at 4096 Ps) that jemalloc
// would keep resident for its decay time; the purge costs under a millisecond.
//
// Invariants: the arena table and the hook structs are created once and never freed
// (jemalloc keeps pointers to the hooks for the life of the process, and blocks may be freed
// during static destruction). An arena index is published in the table only after
// mallctl("arenas.create") returned it. The extent hook runs inside jemalloc, so it must
// not allocate: its node mask is computed when the arena is created.

#include "os/numa.hpp"

#include <numa.h>
#include <numaif.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <climits>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#ifndef CORUN_NO_JEMALLOC
#include <jemalloc/jemalloc.h>
#else
#include <malloc.h>  // malloc_trim
#endif

#include "arch/sanitizer.hpp"

#include "base/lock.hpp"

namespace corun::os {
namespace {

int compute_node_count() noexcept {
  if (numa_available() < 0) return 1;
  const int max = numa_max_node();
  return max >= 0 ? max + 1 : 1;
}

std::size_t check_args(std::size_t align, int node) {
  if (align == 0) align = alignof(std::max_align_t);
  if (!std::has_single_bit(align))
    throw std::invalid_argument("corun node_alloc: align " + std::to_string(align) +
                                " is not a power of two (accepted: 0 or 1, 2, 4, ...)");
  const int count = numa_node_count();
  if (node >= count)
    throw std::invalid_argument("corun node_alloc: node " + std::to_string(node) +
                                " out of range (accepted: -1 for no preference, 0.." +
                                std::to_string(count - 1) + ")");
  return align;
}

#ifndef CORUN_NO_JEMALLOC

constexpr int kMaxBindNodes = 1024;  // Linux MAX_NUMNODES upper bound (CONFIG_NODES_SHIFT 10)
constexpr unsigned kNoArena = UINT_MAX;

// Extent hooks of one node's arena. `hooks` must stay the first member: jemalloc passes
// &hooks back to every hook, and the hook recovers the NodeHooks from it. Written once before
// the arena exists, read-only afterwards (by jemalloc, from any thread).
struct NodeHooks {
  extent_hooks_t hooks;
  extent_hooks_t* dflt;  // jemalloc's default hooks, which do the real work
  int node;
  unsigned long mask[kMaxBindNodes / (8 * sizeof(unsigned long)) + 1];
};
static_assert(std::is_standard_layout_v<NodeHooks>);

// jemalloc's default alloc, then a preferred-node policy on the new range. Best effort: an
// mbind failure (EPERM under a seccomp profile, a node gone offline) leaves first touch.
void* node_extent_alloc(extent_hooks_t* self, void* new_addr, std::size_t size,
                        std::size_t alignment, bool* zero, bool* commit, unsigned arena_ind) {
  auto* h = reinterpret_cast<NodeHooks*>(self);
  void* p = h->dflt->alloc(h->dflt, new_addr, size, alignment, zero, commit, arena_ind);
  if (p != nullptr && h->node >= 0)
    (void)mbind(p, size, MPOL_PREFERRED, h->mask, kMaxBindNodes + 1, 0);
  return p;
}

struct State {
  int nodes = 1;
  bool bind = false;  // libnuma present: install the mbind hooks
  extent_hooks_t* dflt = nullptr;
  std::unique_ptr<std::atomic<unsigned>[]> arena;  // [nodes]; kNoArena until created.
  // arena[n]: written once under mu with store-release after arenas.create returned;
  // read lock-free with load-acquire so the index is only used once it is complete.
  base::Lock<base::LockRank::numa> mu;  // serialises arena creation
};

State& state() {
  // Leaked on purpose: see the invariants at the top.
  static State* const s = [] {
    auto* st = new State;
    st->nodes = numa_node_count();
    st->bind = numa_available() >= 0;
    st->arena.reset(new std::atomic<unsigned>[static_cast<std::size_t>(st->nodes)]);
    for (int i = 0; i < st->nodes; ++i) st->arena[i].store(kNoArena, std::memory_order_relaxed);
    std::size_t sz = sizeof(st->dflt);
    if (mallctl("arena.0.extent_hooks", &st->dflt, &sz, nullptr, 0) != 0) st->dflt = nullptr;
    if (st->dflt == nullptr) st->bind = false;
    return st;
  }();
  return *s;
}

unsigned create_arena(State& st, int node) {
  extent_hooks_t* hooks = nullptr;
  if (st.bind && node < kMaxBindNodes) {
    auto* h = new NodeHooks{};  // leaked on purpose: jemalloc keeps the pointer
    h->hooks = *st.dflt;
    h->hooks.alloc = node_extent_alloc;
    h->dflt = st.dflt;
    h->node = node;
    constexpr int kBits = 8 * sizeof(unsigned long);
    h->mask[node / kBits] |= 1ul << (node % kBits);
    hooks = &h->hooks;
  }
  unsigned ind = 0;
  std::size_t sz = sizeof(ind);
  const int rc = hooks ? mallctl("arenas.create", &ind, &sz, &hooks, sizeof(hooks))
                       : mallctl("arenas.create", &ind, &sz, nullptr, 0);
  if (rc != 0) throw std::bad_alloc();
  return ind;
}

unsigned arena_for(int node) {
  State& st = state();
  std::atomic<unsigned>& slot = st.arena[static_cast<std::size_t>(node)];
  // acquire: pairs with the release below; the arena is complete once its index is seen.
  unsigned a = slot.load(std::memory_order_acquire);
  if (a != kNoArena) return a;
  base::Guard lock(st.mu);
  a = slot.load(std::memory_order_relaxed);  // relaxed: mu orders writers among themselves
  if (a == kNoArena) {
    a = create_arena(st, node);
    slot.store(a, std::memory_order_release);  // release: publish the created arena
  }
  return a;
}

#endif  // CORUN_NO_JEMALLOC

}  // namespace

int numa_node_count() noexcept {
  static const int n = compute_node_count();
  return n;
}

int current_numa_node() noexcept {
  unsigned cpu = 0;
  unsigned node = 0;
  if (getcpu(&cpu, &node) != 0) return 0;
  return static_cast<int>(node);
}

void release_free_memory() noexcept {
#if !defined(CORUN_NO_JEMALLOC)
  // 4096 is MALLCTL_ARENAS_ALL (jemalloc 5): every arena. Best effort: a failure only
  // leaves the pages to jemalloc's decay.
#ifdef MALLCTL_ARENAS_ALL
  static_assert(MALLCTL_ARENAS_ALL == 4096, "the mallctl name below spells it");
#endif
  (void)mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
#elif !(CORUN_ASAN || CORUN_TSAN)
  (void)malloc_trim(0);
#endif
}

bool node_alloc_binds_pages() noexcept {
#ifndef CORUN_NO_JEMALLOC
  return state().bind;
#else
  return false;
#endif
}

void* node_alloc(std::size_t size, std::size_t align, int node) {
  align = check_args(align, node);
  size = std::max<std::size_t>(size, 1);  // mallocx(0) is undefined; aligned_alloc(0) may be null
#ifndef CORUN_NO_JEMALLOC
  int flags = MALLOCX_LG_ALIGN(std::countr_zero(align));
  if (node >= 0) flags |= MALLOCX_ARENA(arena_for(node)) | MALLOCX_TCACHE_NONE;
  void* p = mallocx(size, flags);
#else
  // aligned_alloc wants size a multiple of align (C11), and align at least sizeof(void*).
  align = std::max<std::size_t>(align, sizeof(void*));
  if (size > SIZE_MAX - align) throw std::bad_alloc();
  void* p = std::aligned_alloc(align, (size + align - 1) & ~(align - 1));
#endif
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void node_free(void* p, std::size_t size) noexcept {
  if (p == nullptr) return;
#ifndef CORUN_NO_JEMALLOC
  assert(sallocx(p, 0) >= size && "node_free: size larger than the block");
  (void)size;
  // No sdallocx: its size class depends on the alignment flags of the allocation, which we
  // do not know here. TCACHE_NONE keeps node blocks out of this thread's cache.
  dallocx(p, MALLOCX_TCACHE_NONE);
#else
  (void)size;
  std::free(p);
#endif
}

}  // namespace corun::os
