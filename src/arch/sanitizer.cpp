// corun arch: the out-of-line half of the fiber annotations (see sanitizer.hpp).
//
// What it is: setting up and tearing down a SanFiber -- rare operations (thread start, task
// creation and exit), so they live here rather than inline. The per-switch calls are inline in
// sanitizer.hpp because TSan needs them in the switching function's own frame.
//
// Invariants: compiles to nothing without ASan/TSan. The TSan fiber of a thread belongs to
// TSan and is never destroyed here.
//
// Rejected: taking the thread's stack bounds from __sanitizer_finish_switch_fiber's bottom_old
// on the first switch -- it works only after a switch has already happened, so the thread's
// SanFiber would be incomplete exactly when the first switch back needs it.
#include "arch/sanitizer.hpp"

#if CORUN_ASAN || CORUN_TSAN

#include <pthread.h>

#if CORUN_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace corun::arch {

void san_init_thread(SanFiber& f) {
  f = SanFiber{};
#if CORUN_ASAN
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    std::size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
      f.stack_bottom = addr;
      f.stack_size = size;
    }
    pthread_attr_destroy(&attr);
  }
#endif
#if CORUN_TSAN
  f.tsan_fiber = __tsan_get_current_fiber();
#endif
}

void san_init_task(SanFiber& f, void* lo, std::size_t size) {
  f = SanFiber{};
  f.stack_bottom = lo;
  f.stack_size = size;
#if CORUN_ASAN
  __asan_unpoison_memory_region(lo, size);
#endif
#if CORUN_TSAN
  f.tsan_fiber = __tsan_create_fiber(0);
#endif
}

void san_destroy_task(SanFiber& f) {
#if CORUN_TSAN
  if (f.tsan_fiber != nullptr) __tsan_destroy_fiber(f.tsan_fiber);
#endif
#if CORUN_ASAN
  if (f.stack_bottom != nullptr) __asan_unpoison_memory_region(f.stack_bottom, f.stack_size);
#endif
  f = SanFiber{};
}

}  // namespace corun::arch

#endif  // CORUN_ASAN || CORUN_TSAN
