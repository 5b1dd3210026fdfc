// corun/runtime.hpp — booting the runtime and spawning tasks (API.md "Runtime").
//
// A task is a function running on its own small stack, multiplexed by the runtime's Ps
// (logical processors, one per hardware thread by default) and Ms (OS threads). Tasks are
// cooperative: they switch only when they block (channel, mutex, timer, I/O), yield, or
// finish. A task that computes forever without yielding keeps its P.
//
// go() is a template so that the closure is constructed once, in place, at the top of the
// new task's stack: spawning allocates nothing beyond the (cached) stack. The detail::
// functions below are the runtime's side of that protocol; they are not for users.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace corun {

struct Config {   // every field 0/empty = take it from the environment, then the default
  int procs = 0;  // number of Ps; default: one per hardware thread in the affinity mask
};

// Boots the runtime, runs main_task as a task, returns 0 when it returns. Tasks still
// alive then are abandoned and never run again. Throws std::invalid_argument on a
// malformed CORUN_* variable or Config, std::logic_error if a runtime is already running.
int run(std::function<void()> main_task);
int run(const Config& cfg, std::function<void()> main_task);

void yield();   // let other runnable tasks run; outside a task: std::this_thread::yield()
int procs();    // number of Ps of the running runtime (0 when none runs)
int proc_id();  // index of the P running the caller, -1 outside a task

namespace detail {
using TaskFn = void (*)(void* closure);
// Reserves a new task with `size` bytes of closure storage aligned to `align` (at the top
// of its stack) and returns that storage. Throws std::logic_error when no runtime runs,
// std::length_error if the closure does not fit in a quarter of the stack.
void* spawn_begin(std::size_t size, std::size_t align, TaskFn invoke, TaskFn destroy);
void spawn_commit(void* closure) noexcept;  // closure constructed: make the task runnable
void spawn_abort(void* closure) noexcept;   // closure constructor threw: free the task

// True while some P of the running runtime may have been asked to end its time slice
// (sysmon asks a P that has run 10 ms without a new slice). The would-block paths inline
// in chan.hpp (select(case, otherwise()), try_recv, try_send) read it and only then call
// poll_yield(), which checks the caller's own P: the header cannot read a thread-local
// safely, since a compiler may keep a thread-local's address across a call in which the
// task moved to another thread. Set by sysmon with a P's request (it sets it again on
// each tick while a running P's request is pending), cleared by the P that acts on its
// request and by sysmon when none is pending; stored only when it changes, and relaxed (a
// hint: a stale true costs a call, a stale false one more slice), so on a busy runtime
// its line, which it has alone, stays shared in every core's cache.
// Rejected: a count of the Ps whose request is pending (an RMW on this line per
// request; exact, but a count left by a run's M after shutdown would outlive the run).
struct alignas(64) PreemptHint {
  std::atomic<bool> any{false};
};
extern PreemptHint preempt_hint;
// A non-blocking channel operation found nothing to do: yields if the caller's P was
// asked to end its time slice (a polling loop must not keep its P past it).
void poll_yield() noexcept;

// RAII scope of a blocking() call: the P is released for other tasks while it lives.
class BlockingScope {
 public:
  BlockingScope();
  ~BlockingScope();
  BlockingScope(const BlockingScope&) = delete;
  BlockingScope& operator=(const BlockingScope&) = delete;

 private:
  void* token_;  // the runtime's record of the call; nullptr outside a task
};
}  // namespace detail

// Spawns a task running fn(). Callable from any task, and from any other thread while a
// runtime runs (the task then goes to the global run queue). With no runtime running, or
// one shutting down, it throws std::logic_error.
template <class F>
void go(F&& fn) {
  using Fn = std::decay_t<F>;
  static_assert(std::is_invocable_v<Fn&>, "corun::go needs a callable taking no arguments");
  void* mem = detail::spawn_begin(
      sizeof(Fn), alignof(Fn), [](void* p) { (*static_cast<Fn*>(p))(); },
      [](void* p) { static_cast<Fn*>(p)->~Fn(); });
  try {
    ::new (mem) Fn(std::forward<F>(fn));
  } catch (...) {
    detail::spawn_abort(mem);
    throw;
  }
  detail::spawn_commit(mem);
}

// Runs fn() — a call that may block its thread (read(2) on a file, a C library that
// waits) — without holding the P: if it takes long, the P runs other tasks meanwhile.
// Exceptions from fn propagate. Outside a task it just calls fn.
template <class F>
auto blocking(F&& fn) -> decltype(fn()) {
  detail::BlockingScope scope;
  return std::forward<F>(fn)();
}

}  // namespace corun
