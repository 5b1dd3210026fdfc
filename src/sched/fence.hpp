// sched/fence.hpp — the store-load fence of the scheduler's "Dekker" handshakes.
//
// Where one side stores X then loads Y and the other stores Y then loads X (a producer
// injecting work vs an M going idle; a P entering blocking() vs sysmon going to sleep),
// each side needs a full fence between its store and its load, or both may miss the
// other's store (x86 reorders a store after a later load).
//
// ThreadSanitizer does not model standalone fences (GCC refuses to compile them with
// -fsanitize=thread). Under TSan both sides instead do a seq_cst read-modify-write of
// one shared word: the RMWs are totally ordered, the later one synchronises with the
// earlier, which gives the same guarantee in a form TSan understands. Normal builds use
// the real fence (an mfence or locked instruction; no shared cache line).
#pragma once

#include <atomic>

#include "arch/sanitizer.hpp"

namespace corun::sched {

#if CORUN_TSAN
inline std::atomic<unsigned> g_tsan_fence_word{0};
inline void full_fence() noexcept {
  g_tsan_fence_word.fetch_add(0, std::memory_order_seq_cst);
}
#else
inline void full_fence() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
#endif

}  // namespace corun::sched
