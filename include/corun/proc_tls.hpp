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
};

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

// The calling thread's P id and run id, as this_proc() gives them (same rules of use).
// On x86-64 the two loads address the record through the %fs segment directly, so the
// thread pointer itself is never read: one load and one add fewer on every Pool get/put,
// whose fast path is bound by its instruction count (perf/RESULTS.md). The id comes
// sign-extended to 64 bits, ready to index with.
struct ProcIds {
  long id;
  std::uint64_t run_id;
};
static_assert(__builtin_offsetof(ProcTls, id) == 0 && __builtin_offsetof(ProcTls, run_id) == 8,
              "the asm below addresses the record's fields by these offsets");
inline ProcIds this_proc_ids() noexcept {
#if defined(__x86_64__)
  long off;
  asm("movq corun_tls_proc@gottpoff(%%rip), %0" : "=r"(off));
  long id;
  std::uint64_t run_id;
  asm volatile("movq %%fs:8(%2), %1\n\tmovslq %%fs:(%2), %0"
               : "=r"(id), "=r"(run_id)
               : "r"(off)
               : "memory");
  return {id, run_id};
#else
  const ProcTls* me = this_proc();
  return me ? ProcIds{me->id, me->run_id} : ProcIds{-1, 0};
#endif
}

}  // namespace corun::detail
