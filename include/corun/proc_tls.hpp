// corun/proc_tls.hpp — internal, not part of the API: the calling thread's P, as the
// inline fast paths of public headers read it (Pool<T>::get/put). Include a public header
// that needs it, not this one.
//
// The runtime mirrors every M's P in one initial-exec thread-local record (written only by
// that thread, whenever it takes or drops a P: src/sched/sched.hpp set_mp). A fast path in
// the user's own function must not reach it the ordinary way: a task may park inside that
// function and resume on another thread, and a compiler may keep the thread pointer (or an
// address computed from it) in a register across the call that parked — on aarch64 GCC
// and clang both treat tpidr_el0 as constant within a function. So this_proc() reads the
// thread pointer with a volatile asm that also clobbers memory (never merged with an
// earlier read, never moved across a call), and adds the record's offset in the static TLS
// block (the same for every thread; read from the GOT as the initial-exec model does, so
// the asm may be cached). Every use must finish with the record before anything that can
// park: read it, use it, drop it.
// Elsewhere (other architectures) there is no inline path: this_proc() returns nullptr
// and callers take their out-of-line path, which reads the record in the library.
// Rejected: a thread-local declared here and read as a C++ variable (the caching above);
// an out-of-line call per read (what the inline path exists to avoid: Pool's put+get pair
// measured 2.3 ns of call overhead on a 3.2 ns op, perf/RESULTS.md).
#pragma once

#include <atomic>
#include <cstdint>

namespace corun::detail {

// The record. Its layout is shared with the library (src/sched/proc.hpp uses this type).
struct ProcTls {
  int id = -1;               // the P's id, -1 when the thread holds no P
  std::uint64_t run_id = 0;  // run id of the P's runtime (counts from 1), 0 without a P
  // The P's "end your time slice" flag (sysmon sets it, relaxed), so that a would-block
  // poll checks it inline instead of through a call chain.
  const std::atomic<bool>* preempt = nullptr;
  // run_id << 32 | id, 0 without a P: both in one load for the Pool's fast path (see
  // this_proc_key). Run ids stay below 0xffffffff (runtime.cpp checks).
  std::uint64_t key = 0;
};

// ProcTls::key's encoding, written once: the top half of every key on a P of run
// `run_id` (what a Pool table records of the run it serves), ...
constexpr std::uint64_t proc_run_key(std::uint64_t run_id) noexcept {
  return run_id << 32;
}
// ... the key of P `id` of that run, ...
constexpr std::uint64_t proc_key(std::uint64_t run_id, int id) noexcept {
  return proc_run_key(run_id) | static_cast<std::uint32_t>(id);
}
// ... and the test: the P id if `key` is a P's of the run with top half `run_key`, else -1
// (one xor; a thread without a P has key 0, which no run's top half is).
constexpr long proc_in_run(std::uint64_t key, std::uint64_t run_key) noexcept {
  const std::uint64_t d = key ^ run_key;
  return d > 0xffffffffu ? -1 : static_cast<long>(d);
}

#if defined(__x86_64__) || defined(__aarch64__)
inline constexpr bool kInlineProcTls = true;
// The calling thread's record; see the header for when it may be used.
inline const ProcTls* this_proc() noexcept {
  const char* tp;
  long off;
#if defined(__x86_64__)
  asm volatile("movq %%fs:0, %0" : "=r"(tp) : : "memory");  // the TCB's self pointer
  asm("movq corun_tls_proc@gottpoff(%%rip), %0" : "=r"(off));
#else
  asm volatile("mrs %0, tpidr_el0" : "=r"(tp) : : "memory");
  asm("adrp %0, :gottprel:corun_tls_proc\n\t"
      "ldr %0, [%0, #:gottprel_lo12:corun_tls_proc]"
      : "=r"(off));
#endif
  return reinterpret_cast<const ProcTls*>(tp + off);
}
#else
inline constexpr bool kInlineProcTls = false;
inline const ProcTls* this_proc() noexcept {
  return nullptr;
}
#endif

// The calling thread's ProcTls::key (run_id << 32 | P id, 0 without a P), as this_proc()
// would read it, in one load: the Pool's fast path compares it with a table's run in one
// xor and takes the P id from the same result. On x86-64 the load addresses the record
// through the %fs segment directly, so the thread pointer itself is never read. That path
// is bound by its loads (two per cycle here; perf/RESULTS.md), so it saves what it can:
// one load for both ids, and no "memory" clobber — which would make the compiler reload
// every pointer the caller keeps in memory after each call. Instead the asm reads a global
// the library owns (corun_proc_order, never written): a call that may park may also write
// it, so the asm is never moved above such a call; volatile keeps each read separate.
extern "C" char corun_proc_order;
static_assert(__builtin_offsetof(ProcTls, key) == 24, "the asm below addresses the key by it");
inline std::uint64_t this_proc_key() noexcept {
#if defined(__x86_64__)
  long off;
  asm("movq corun_tls_proc@gottpoff(%%rip), %0" : "=r"(off));
  std::uint64_t key;
  asm volatile("movq %%fs:24(%1), %0" : "=r"(key) : "r"(off), "m"(corun_proc_order));
  return key;
#else
  const ProcTls* me = this_proc();
  return me ? me->key : 0;
#endif
}

}  // namespace corun::detail
