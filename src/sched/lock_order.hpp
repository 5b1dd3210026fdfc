// sched/lock_order.hpp — every lock of the runtime, in the one order they may nest.
//
// A thread holding lock N may take only locks listed after N. Locks not listed here do
// not exist; adding one means adding it here first.
//
//   0. context node locks         (context/context.cpp: a parent's before its child's;
//                                  cancel closes done channels and stops timers, so
//                                  levels 1, 5 and 6 nest inside)
//   1. sync WaitList::lock        (per WaitGroup/Mutex spin lock; held for a few
//      sync ChanCore::lock         instructions; released before any wake-up, and by
//                                  the scheduler's park commit once the task is off
//                                  its stack). A select holds several channel locks at
//                                  once, always taken in ascending address order
//                                  (select.cpp); no other lock of this level nests.
//   2. Runtime::lock              (sched.lock: idle P list, idle M list, all Ms)
//   3. GlobalQueue::mu            (the global run queue)
//   4. StackAllocator's mutex     (os/stack.cpp; slow path of task creation)
//   5. TimerRec::mu               (timer/timer.cpp: serialises stop/reset/arm of one
//                                  timer; never held while firing)
//   6. TimerBucket::lock          (timer/bucket.hpp: one timer heap; a sleeping task
//                                  holds its bucket's lock into park, and the commit
//                                  hook drops it; firing happens after it is dropped)
//   7. pool registry mutex        (pool/pool_trim.cpp: all pools; pool construction and
//                                  destruction, the trim task, the per-P trim hook)
//   8. PoolState::lock            (pool/pool_state.hpp: one pool's depot; O(1) under it)
//
// Lock-free, and so outside the order: each P's run queue (ring + runnext), the M park
// notes (futex words), the counters npidle/nmspinning, P status words, P::safepoint, and
// the pool's per-P shards (owned by their P; touched elsewhere only at its safe points).
//
// Rejected: one big scheduler lock for queues and idle lists (Go's sched.lock covers
// both); corun splits the global run queue off so a producer overflowing its ring never
// waits behind an M going idle.
#pragma once
