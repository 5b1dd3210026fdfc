// os/numa: placement of P-local runtime memory (run queues, timer heaps, pool shards, stack
// caches) on the NUMA node of the P that owns it.
//
// node_alloc(size, align, node) takes memory from a jemalloc arena dedicated to `node`
// (one per node, created lazily with mallctl("arenas.create")), bypassing the thread cache
// (MALLOCX_TCACHE_NONE: a tcache would hand a block freed on node 1 to a caller asking for
// node 0). Each node arena is created with extent hooks that wrap jemalloc's default ones
// and mbind(MPOL_PREFERRED, node) every new extent, so its pages land on `node` whoever
// first touches them. Invariant: memory of arena N is only ever requested for node N.
//
// What this means on the 2-socket server: a P's data must be on its socket, or every
// access from its own thread crosses the interconnect. Plain first touch (Linux default
// policy) would only be right if the pinned P thread touched the pages first; run() sets
// P state up from the main thread, which would pull every P's pages onto the main
// thread's node. The mbind in the extent hook removes that dependence; MPOL_PREFERRED
// (not BIND) falls back to another node instead of OOM-killing when the node is full.
// Still, the sched layer should allocate and initialise P-local data on the pinned P
// thread where it can: the cache lines then start in that P's caches. On a 1-node machine
// the hook binds to node 0, which is harmless and keeps the path tested.
//
// Rejected: libnuma's numa_alloc_onnode (an mmap per call: page granularity, a syscall
// per allocation, a VMA each); one global arena plus mbind per allocation (splits VMAs
// per call and hits vm.max_map_count; neighbouring blocks of other nodes share pages);
// MPOL_BIND (OOM instead of remote memory under pressure).
//
// Build variants: linking Debian's libjemalloc (unprefixed) replaces malloc for the whole
// program as well. With CORUN_NO_JEMALLOC (sanitizer builds) node_alloc is aligned_alloc
// and free, node ignored, so ASan/TSan see every block.
#pragma once

#include <cstddef>

namespace corun::os {

// One past the highest NUMA node number (libnuma numa_max_node() + 1): valid `node`
// arguments are 0..numa_node_count()-1. 1 when libnuma says NUMA is unavailable.
int numa_node_count() noexcept;

// NUMA node of the CPU the caller runs on (getcpu); 0 if unknown. Only stable when the
// thread is pinned.
int current_numa_node() noexcept;

// size bytes aligned to align (0: alignof(max_align_t); else a power of two), on node's
// memory; node < 0: no preference (the default arena, with the thread cache). size 0 gives
// a unique non-null block. Throws std::bad_alloc when memory runs out, std::invalid_argument
// for align not a power of two or node >= numa_node_count(). Thread-safe.
void* node_alloc(std::size_t size, std::size_t align, int node);

// Frees a node_alloc block (nullptr: no-op). size is the size passed to node_alloc
// (checked in debug builds). Any thread may free any block.
void node_free(void* p, std::size_t size) noexcept;

// Gives the pages of freed memory back to the kernel now: every jemalloc arena's unused
// dirty pages (mallctl "arena.<MALLCTL_ARENAS_ALL>.purge": the node arenas and the default
// one, where a run's plan and bookkeeping live); malloc_trim(0) without jemalloc; nothing
// under the sanitizers (their allocators keep their own quarantine). run() calls it when
// the runtime is freed, so a finished run does not keep its memory resident until jemalloc's
// decay (10 s by default) or the next run. Thread-safe; about 0.7 ms after a 4096-P run.
void release_free_memory() noexcept;

// True when node_alloc binds node arenas' pages with mbind (jemalloc build and libnuma
// available); false in CORUN_NO_JEMALLOC builds. For tests and CORUN_DEBUG output.
bool node_alloc_binds_pages() noexcept;

}  // namespace corun::os
