// corun arch: telling ASan and TSan about stack switches (fiber annotations).
//
// What it is: a SanFiber is the sanitizers' view of one stack -- a thread's native stack or a
// task stack. Around every corun_context_switch the scheduler calls
//     san_before_switch(from, to, from_exiting);  corun_context_switch(&fromctx, &toctx);
//     san_after_switch(from);   // runs later, when `from` is resumed
// and a fresh context's entry calls san_after_switch(self) first thing. Without this, ASan
// reports false stack-buffer-overflows / crashes in its fake stack, and TSan mixes the shadow
// call stacks and vector clocks of different tasks.
//
// Invariants:
//  - Without ASan/TSan every function here is an empty inline function: zero cost, no
//    sanitizer headers included. UBSan needs nothing.
//  - san_before_switch / san_after_switch are always_inline. TSan keeps a shadow call stack
//    per fiber and __tsan_switch_to_fiber balances its own entry/exit; a wrapper function
//    would push its entry on the old fiber's shadow stack and pop it from the new one's.
//    Inlined, the caller's entry/exit stay on its own fiber. For the same reason, nothing
//    instrumented may run between san_before_switch and corun_context_switch.
//  - ASan: from.asan_fake_stack is written by san_before_switch and consumed by the next
//    san_after_switch(from); from_exiting passes nullptr, which frees that fiber's fake stack.
//  - TSan: switches synchronise (flag 0): a switch is a happens-before edge, as a handoff
//    through the scheduler's queues would be anyway.
//  - A SanFiber is owned by its task (or thread); only the thread currently running the switch
//    touches the two SanFibers involved.
//
// Rejected: annotating inside corun_context_switch (assembly cannot call the sanitizer runtime
// cheaply, and the runtime needs the fake-stack slot per fiber); __tsan_switch_to_fiber_no_sync
// -- fewer edges, more false reports when a task is resumed on another thread.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define CORUN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CORUN_ASAN 1
#endif
#endif
#ifndef CORUN_ASAN
#define CORUN_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define CORUN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CORUN_TSAN 1
#endif
#endif
#ifndef CORUN_TSAN
#define CORUN_TSAN 0
#endif

#if CORUN_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if CORUN_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace corun::arch {

inline constexpr bool kAsan = CORUN_ASAN != 0;
inline constexpr bool kTsan = CORUN_TSAN != 0;

// The sanitizers' view of one stack. Owned by its task or thread; see the invariants above.
struct SanFiber {
  void* tsan_fiber = nullptr;          // TSan fiber context (created, or the thread's own)
  const void* stack_bottom = nullptr;  // lowest address of the stack (ASan)
  std::size_t stack_size = 0;          // bytes (ASan)
  void* asan_fake_stack = nullptr;     // ASan fake stack saved while switched out
};

#if CORUN_ASAN || CORUN_TSAN
// The calling thread's native stack: bounds from pthread_getattr_np (ASan), the thread's own
// fiber from __tsan_get_current_fiber (TSan). Never pass it to san_destroy_task.
void san_init_thread(SanFiber& f);
// A task stack [lo, lo+size): records the bounds, unpoisons the range (a reused stack may
// carry redzones of frames that never returned), creates a TSan fiber.
void san_init_task(SanFiber& f, void* lo, std::size_t size);
// Frees the TSan fiber and unpoisons the stack. Call from another fiber after the task's last
// switch away (made with from_exiting = true).
void san_destroy_task(SanFiber& f);
#else
inline void san_init_thread(SanFiber&) {}
inline void san_init_task(SanFiber&, void*, std::size_t) {}
inline void san_destroy_task(SanFiber&) {}
#endif

// Right before corun_context_switch from `from` to `to`. from_exiting: `from` never resumes.
[[gnu::always_inline]] inline void san_before_switch(SanFiber& from, SanFiber& to,
                                                     bool from_exiting) {
#if CORUN_ASAN
  __sanitizer_start_switch_fiber(from_exiting ? nullptr : &from.asan_fake_stack, to.stack_bottom,
                                 to.stack_size);
#endif
#if CORUN_TSAN
  __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
  (void)from;
  (void)to;
  (void)from_exiting;
}

// First thing after arriving in a context: after corun_context_switch returns, and at the top
// of a fresh context's entry function.
[[gnu::always_inline]] inline void san_after_switch(SanFiber& self) {
#if CORUN_ASAN
  __sanitizer_finish_switch_fiber(self.asan_fake_stack, nullptr, nullptr);
  self.asan_fake_stack = nullptr;
#endif
  (void)self;
}

}  // namespace corun::arch
