// sched/eh_state.hpp — C++ exception-handling state that must travel with a task.
//
// The C++ runtime keeps, per thread, the stack of exceptions currently caught and the
// count of exceptions in flight (__cxa_eh_globals). A task that parks inside a catch
// block, or while a destructor runs during unwinding, may resume on another thread; if
// that thread's record were used, __cxa_end_catch would pop the wrong exception and
// std::uncaught_exceptions() would lie. So every switch into a task installs the task's
// record in the thread, and every switch out saves it back.
//
// The layout mirrors libsupc++'s and libc++abi's __cxa_eh_globals on Linux: a pointer and
// an unsigned count (32-bit ARM EHABI adds a third word; not a corun target). We copy
// exactly that many bytes: the record sits among other thread-locals.
#pragma once

#include <cstring>

namespace __cxxabiv1 {
struct __cxa_eh_globals;
extern "C" __cxa_eh_globals* __cxa_get_globals() noexcept;
}  // namespace __cxxabiv1

namespace corun::sched {

struct EhState {
  void* caught = nullptr;     // __cxa_eh_globals::caughtExceptions
  unsigned int uncaught = 0;  // __cxa_eh_globals::uncaughtExceptions

  // The calling thread's live record. Constant for the thread's life: each M looks it
  // up once (the lookup is a __tls_get_addr call into libstdc++) and keeps it.
  static void* thread_record() noexcept { return __cxxabiv1::__cxa_get_globals(); }

  // Swap this saved record with the thread's live one (from thread_record()).
  void swap_with(void* live) noexcept {
    EhState tmp;
    std::memcpy(&tmp.caught, live, sizeof(void*));
    std::memcpy(&tmp.uncaught, static_cast<char*>(live) + sizeof(void*), sizeof(unsigned int));
    std::memcpy(live, &caught, sizeof(void*));
    std::memcpy(static_cast<char*>(live) + sizeof(void*), &uncaught, sizeof(unsigned int));
    caught = tmp.caught;
    uncaught = tmp.uncaught;
  }

  // A direct task-to-task switch: `from` leaves the thread, `to` enters. Same result as
  // from.swap_with(live) then to.swap_with(live) — from keeps its live record, the thread
  // gets to's, and to holds the outer record from had been holding — with half the
  // memory traffic (this runs on every channel hand-off).
  // Field by field through scalars: copied as a struct, `outer` went through a 16-byte
  // stack slot whose upper half was read back 4 bytes wide (a store-forwarding hazard, and
  // a stack frame for switch_direct). ChanSync-1 -1.7% (n=8, p=0.003).
  static void hand_over(EhState& from, void* live, EhState& to) noexcept {
    void* const outer_caught = from.caught;
    const unsigned int outer_uncaught = from.uncaught;
    std::memcpy(&from.caught, live, sizeof(void*));
    std::memcpy(&from.uncaught, static_cast<char*>(live) + sizeof(void*), sizeof(unsigned int));
    std::memcpy(live, &to.caught, sizeof(void*));
    std::memcpy(static_cast<char*>(live) + sizeof(void*), &to.uncaught, sizeof(unsigned int));
    to.caught = outer_caught;
    to.uncaught = outer_uncaught;
  }
};

}  // namespace corun::sched
