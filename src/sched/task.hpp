// sched/task.hpp — the task record (Go's g).
//
// A task record lives at the top of its own stack, with the closure right below it:
// creating a task is carving a cached stack, not a heap allocation. The record stays with
// its stack through the P free list; it is re-initialised only when the stack comes back
// from the StackAllocator.
//
// States say who owns the record (Go runtime2.go's _Grunnable comments):
//   idle      in a P's free list or in no list: owned by that P / the creator.
//   runnable  in a run queue (runnext, ring, global): owned by the queue; whoever
//             dequeues it owns it and must run it.
//   running   on an M: owned by that M; only it touches ctx.
//   waiting   parked: owned by the wait structure (channel, WaitList) that holds it; the
//             one that removes it from there calls ready().
//   dead      fn returned; the M that ran it recycles it from the scheduler stack.
// The state word is for assertions and debuggers; ownership moves by the queues' own
// synchronisation, so it is written with relaxed order.
#pragma once

#include <atomic>
#include <cstdint>

#include "arch/context.hpp"
#include "arch/sanitizer.hpp"
#include "os/stack.hpp"
#include "sched/eh_state.hpp"

namespace corun::sched {

enum class TaskState : std::uint32_t { idle, runnable, running, waiting, dead };

using TaskFn = void (*)(void*);

struct alignas(64) Task {
  arch::Context ctx;         // saved registers while not running; owned by the owning M
  arch::SanFiber san;        // sanitizer fiber state; touched only by the M switching
  os::Stack stack;           // the stack this record sits on; immutable while alive
  std::uint64_t id = 0;      // unique per runtime, for messages and traces
  Task* next = nullptr;      // intrusive link: global queue, P free list (owner of the list)
  TaskFn invoke = nullptr;   // runs the closure
  TaskFn destroy = nullptr;  // destroys the closure
  void* closure = nullptr;   // on this stack, below the record
  os::StackAllocator* origin = nullptr;  // where the stack goes back to
  EhState eh;  // exception-handling state while switched out (eh_state.hpp)
  std::atomic<TaskState> state{TaskState::idle};  // relaxed: see header comment
  // Queued by a yield (a busy loop's scheduling point, or a preemption): set by the M that
  // queues it (handle_action), cleared by the M that dequeues it (direct_next) or switches
  // to it; the run queue's hand-over orders the two, as for every other field.
  bool yielded = false;
};

}  // namespace corun::sched
