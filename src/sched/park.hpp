// sched/park.hpp — the scheduler's narrow contract for the layers above (sync, timers,
// channels, net): park the running task, and make a parked task runnable again.
//
// Protocol: the waiter publishes itself in some wait structure while holding that
// structure's lock, then calls park(commit, arg); commit(arg) runs on the scheduler's
// stack once the task is fully switched out, and must release that lock. From then on
// the structure owns the task; whoever removes it calls ready(t) exactly once.
// A task must not park inside blocking() (the runtime aborts with a message).
#pragma once

namespace corun::sched {

struct Task;

Task* current_task() noexcept;  // nullptr outside a task
// True in a task holding a P, where park() may be called; false on a thread that is not
// the runtime's and inside blocking() (those wait by blocking their thread instead).
bool can_park() noexcept;
void park(void (*commit)(void*), void* arg) noexcept;  // from a task only
void ready(Task* t) noexcept;                          // from any thread
// A cooperative preemption point for loops that poll without blocking (try_recv,
// select with otherwise): yields if sysmon asked this P to end the current time slice.
// A relaxed load of the P's flag when nothing is asked; no-op outside a task.
void yield_if_preempted() noexcept;

}  // namespace corun::sched
