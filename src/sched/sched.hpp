// sched/sched.hpp — G/M/P: the scheduler's state and its internal operations.
//
// Go's model (runtime/proc.go "Goroutine scheduler"): a P is a logical processor with a
// local run queue, the right to run tasks, and caches (free tasks, task ids); an M is an
// OS thread, which runs tasks only while it holds a P; there are `procs` Ps. An M with
// nothing to run steals from other Ps (nearest first by topology, see os/topology), then
// gives its P back to the idle list and parks on its futex note. Making a task runnable
// wakes an idle P (through an idle M) only when no M is already spinning for work, so a
// burst of wake-ups costs one futex wake, not one per task.
//
// Spinning invariant (Go's "delicate dance"): an M that stops spinning decrements
// nmspinning, fences, and re-checks every run queue; a producer pushes work and then
// checks nmspinning/npidle. Work pushed to a running P's own queue cannot be stranded
// (that P runs it next), so that producer does not fence: a stale read costs at most a
// missed wake-up, i.e. parallelism (Go makes the same trade). Work pushed to the global
// queue belongs to no P: that producer fences (full_fence, fence.hpp), pairing with the
// idling M's fence, so one of them sees the other and work never sleeps with every M.
//
// A task that parks or exits while its P has a local task ready switches straight to
// that task (task.cpp switch_direct): one context switch per channel hand-off instead of
// two through the M's scheduler context (g0, the thread's own stack). The leaving task
// is finished by the task that resumes — finish_switch(), the first thing every resume
// site runs — once nothing runs on its stack any more: only then is the park published
// (the commit hook releases the wait list's lock) or the stack recycled, so no task is
// resumed while still on its way out. Everything else (nothing local, the global queue's
// turn, yield, blocking(), shutdown) goes through g0, which runs find_runnable().
// Rejected: always through g0 (simpler: one resume site, but it doubles the switches of
// every hand-off); a post-switch hook in every waker (boost's ontop_fcontext) — two
// resume sites suffice.
//
// What changes on 2 sockets × 64 cores: the idle lists and the global queue are single
// cache lines shared by 128 threads; they are touched only on idle/wake transitions and
// ring overflow, never per task. Per-node idle lists would be the next step if perf
// shows sched.lock contention at 128 Ps.
#pragma once

#include <pthread.h>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include <corun/runtime.hpp>

#include "arch/context.hpp"
#include "arch/sanitizer.hpp"
#include "base/lock.hpp"
#include "os/stack.hpp"
#include "os/topology.hpp"
#include "sched/config.hpp"
#include "sched/global_queue.hpp"
#include "sched/idle.hpp"
#include "sched/netpoll.hpp"
#include "sched/note.hpp"
#include "sched/proc.hpp"
#include "sched/runq.hpp"
#include "sched/safepoint.hpp"
#include "sched/task.hpp"
#include "sched/timers.hpp"

namespace corun::sched {

struct M;
struct Runtime;

// A P's counters (corun::stats(), CORUN_DEBUG=schedtrace). Written only by the P's owner —
// bump(): a relaxed load and store, no locked instruction, since there is one writer —
// and read relaxed by anyone (counters order nothing). On cache lines of their own, so
// the owner's writes do not invalidate the P fields other threads read (status, runq's
// head, slicetick) and a reader does not pull the P's hot line.
struct alignas(64) PStats {
  std::atomic<std::uint64_t> runs{0};     // switches to a task on this P
  std::atomic<std::uint64_t> spawned{0};  // go() calls made on this P
  std::atomic<std::uint64_t> steals{0};   // tasks this P stole
  std::atomic<std::uint64_t> parks{0};    // tasks that blocked on this P
  std::atomic<std::uint64_t> pool_misses{0};
  std::atomic<std::uint64_t> pool_transfers{0};
};
inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// P states (Go's _Pidle/_Prunning/_Psyscall):
//   idle     in the idle list (Runtime::pidle): owned by Runtime::lock.
//   running  held by an M (p->m): only that M touches the owner-only fields.
//   syscall  its M is in blocking(); the P is still the M's unless someone CASes the
//            status to idle (sysmon's retake), which transfers it to the CASer.
enum class PStatus : std::uint32_t { idle, running, syscall };

struct alignas(64) P {
  // Immutable after boot.
  int id = 0;
  std::uint64_t run_id = 0;  // Runtime::run_id; beside id: the pool's fast path reads both
  int os_cpu = -1;           // CPU to pin to, -1 for none
  int numa_node = -1;        // the plan's logical node (steal order, stack allocator index)
  int mem_node = -1;         // OS node this P's memory goes on (node_alloc), -1: none
  // Other P ids, nearest first, as distance groups pointing into Runtime::plan (which
  // outlives the Ps): walk each from its start, wrapping, skipping this P (os/topology.hpp).
  std::vector<os::VictimGroup> victims;
  os::StackAllocator* stacks = nullptr;  // this P's NUMA node's allocator

  // Written by the holder on transitions, CASed by sysmon (syscall -> idle);
  // acq_rel so the P's owner-only state moves with the ownership.
  std::atomic<PStatus> status{PStatus::idle};

  RunQueue runq;  // see runq.hpp for who touches what

  // Owner-only (the M holding the P).
  M* m = nullptr;
  // The global queue's turn: at 1 the next pick takes from it first, and 61 follow.
  // Never 0: clear_preempt may set it to 1 in the middle of a pick (runq_get starting a
  // new slice), so direct_next decrements only above 1 and schedule() takes a turn at 1
  // or less (a 0 decremented skipped the global queue for 2^32 picks: a two-task yield
  // loop at 1 P starved a foreign thread's wake-up, caught by rt.timer's stop race).
  std::uint32_t global_countdown = 61;
  Task* free_tasks = nullptr;  // dead tasks with their stacks, LIFO (warm caches)
  std::uint32_t nfree = 0;
  std::uint64_t next_id = 0, end_id = 0;  // task-id cache, refilled in batches
  std::uint64_t rng = 0;                  // for victim tie-breaking
  // Owner-only: non-zero while run_own_timers runs this P's timers; counts the
  // wake-ups it deferred, plus one.
  std::uint32_t defer_wake = 0;
  std::uint32_t timer_countdown = 1;  // owner-only: direct switches to the next timer look

  // Incremented by the owner at each blocking() entry; read by sysmon to tell a long
  // blocking call from a new one (relaxed: a stale read only delays a retake one tick).
  std::atomic<std::uint32_t> syscalltick{0};
  std::uint32_t sysmon_tick = 0;  // sysmon only
  std::uint64_t sysmon_when = 0;  // sysmon only

  // Time slices (Go's inheritTime): a task taken from runnext — readied by the task that
  // just blocked, usually — inherits the slice; any other pick starts a new one and bumps
  // slicetick (owner writes, relaxed; sysmon reads). Sysmon sets preempt when slicetick
  // has not moved for kSliceNs (relaxed both ways: a hint acted on at the next pick or
  // would-block point, a late read costs one more slice). Without it two tasks handing a
  // value back and forth through runnext would own a P forever (Go's TestPingPongHog).
  std::atomic<std::uint32_t> slicetick{0};
  std::atomic<bool> preempt{false};
  std::uint32_t sysmon_slicetick = 0;  // sysmon only
  std::uint64_t sysmon_slicewhen = 0;  // sysmon only

  // Counters for corun::stats() and schedtrace (stats.cpp).
  PStats stats;

  // Timers armed by this P's tasks (CORUN_TIMERS=per-p), on the P's NUMA node with it.
  // Its own lock guards it (sched/timers.hpp).
  Timers own_timers;
  // Where this P's tasks arm timers: &own_timers, or &Runtime::global_timers in
  // CORUN_TIMERS=global. Immutable after boot.
  Timers* timers = nullptr;

  // Safe-point request (safepoint.cpp): kSafepointNone, kSafepointAsked (stored with
  // release by request_safepoint), kSafepointRunning (CAS from asked, acq_rel, by whoever
  // runs the hook for this P: its owner in find_runnable or before it idles the P, or the
  // requester while the P is out of the idle list), back to none (CAS, release) once the
  // hook has returned — so "not pending" means the hook's work is done and visible.
  std::atomic<std::uint8_t> safepoint{0};

  P* link = nullptr;  // idle list, guarded by Runtime::lock
};

// The owner acts on p's preempt request: clears it, and the runtime-wide hint the inline
// polls read (<corun/runtime.hpp> preempt_hint), which sysmon set with it. Another P's
// pending request loses the hint until sysmon's next tick sets it again (one more slice
// at worst); keeping it would send every poll of every P into the library until that
// tick. Both stores only when set (rare: a slice overran): the lines stay shared.
// The next pick then looks at the global queue first, as Go puts a preempted goroutine
// behind the tasks there: that is where sysmon's network poll puts the tasks it readied
// while this P was busy (and foreign threads theirs). Without it a task whose every read
// found data (never a switch) kept its P through 61 slices, 0.6 s, before they ran.
inline void clear_preempt(P* p) noexcept {
  p->global_countdown = 1;  // may be mid-pick: see global_countdown
  p->preempt.store(false, std::memory_order_relaxed);
  if (corun::detail::preempt_hint.any.load(std::memory_order_relaxed))
    corun::detail::preempt_hint.any.store(false, std::memory_order_relaxed);
}

struct Runtime {
  Settings settings;
  // Unique for every run() of the process (never reused, unlike the Runtime's address):
  // lets layers above tell state from an earlier run from this one's. Immutable.
  std::uint64_t run_id = 0;
  os::TopologyPlan plan;  // immutable after boot; every P::victims points into it
  int nprocs = 0;
  std::size_t stack_bytes = 0;
  std::vector<P*> ps;
  std::vector<std::unique_ptr<os::StackAllocator>> stacks;  // one per NUMA node in use

  base::Lock<base::LockRank::sched> lock;     // Go's sched.lock
  P* pidle CORUN_GUARDED_BY(lock) = nullptr;  // idle Ps, linked by P::link
  M* midle CORUN_GUARDED_BY(lock) = nullptr;  // idle Ms, linked by M::link
  std::vector<M*> allm CORUN_GUARDED_BY(lock);

  // Updated under lock, read lock-free (seq_cst: see the spinning invariant above).
  std::atomic<int> npidle{0};
  std::atomic<int> nmspinning{0};

  GlobalQueue runq;
  std::atomic<std::uint64_t> id_gen{1};  // relaxed: uniqueness only

  // Set once at shutdown: seq_cst store (one side of the foreign gate's pair,
  // runtime.cpp), acquire loads.
  std::atomic<bool> stopping{false};
  std::atomic<int> refs{1};                // run() + detached Ms; the last one deletes
  std::atomic<std::uint32_t> exit_seq{0};  // bumped when an M exits or blocks at shutdown

  // sysmon
  pthread_t sysmon_thread{};
  bool sysmon_started = false;
  Note sysmon_note;
  // What sysmon is doing while asleep: kSysmonWatching (ticking on blocking() calls),
  // kSysmonSlices (only running Ps: one look per time slice), kSysmonIdle (no deadline).
  // seq_cst store by sysmon, relaxed loads after a fence by kickers (sysmon_kick).
  std::atomic<std::uint32_t> sysmon_mode{0};
  // Set (relaxed) by a thread whose stack release left an allocator over keep_hot;
  // cleared by sysmon when it schedules a trim. A hint: sysmon re-checks under the lock.
  std::atomic<bool> stack_surplus{false};

  // main task completion
  std::atomic<std::uint32_t> main_done{0};  // futex word run() sleeps on
  std::exception_ptr main_error;            // written by the main task before main_done

  std::unique_ptr<RunnextBackoff> backoff;
  std::uint64_t start_ns = 0;

  // Timers (sched/timers.hpp): every heap of the run (each P's, or in CORUN_TIMERS=global
  // the one below), for the M loop. Immutable after boot.
  TimerSet timers;
  Timers global_timers;  // CORUN_TIMERS=global: the one heap every P arms in
  // The idle wait (sched/idle.hpp): who waits for the earliest deadline, and until when.
  IdleWait idle;
  // The network poller (sched/netpoll.hpp), set up on the first descriptor opened.
  Netpoll netpoll;
};

// What a task asks its M to do once it is off the task's stack.
enum class Action : std::uint8_t { none, park, yield, exit, syscall_exit };

struct M {
  int id = 0;
  Runtime* rt = nullptr;
  pthread_t thread{};
  arch::Context g0;  // scheduler context on the thread's own stack
  arch::SanFiber g0san;
  void* eh_globals = nullptr;  // this thread's C++ exception record (eh_state.hpp)
  Note park;                   // idle Ms sleep here

  // Owned by this M's thread, except nextp/spinning which the waker writes before
  // park.wakeup() (release) and this thread reads after park.sleep() (acquire).
  Task* curg = nullptr;
  P* p = nullptr;
  P* nextp = nullptr;
  P* oldp = nullptr;   // the P it held when it entered blocking()
  P* lastp = nullptr;  // the P it held last (its thread is pinned to that P's CPU)
  bool spinning = false;
  int pinned_cpu = -2;
  // Tasks the idle wait got from the poller, for the P it was handed (linked by
  // Task::next, still waiting): find_runnable queues them first. This M's thread only.
  Task* polled = nullptr;  // -2 never pinned; -1 unpinned

  Action action = Action::none;     // set by the task right before switching away
  void (*commit)(void*) = nullptr;  // Action::park: run once off the task's stack
  void* commit_arg = nullptr;
  // A task that switched straight to another task (park or exit without a trip through
  // g0) leaves itself here; the next code to run on this M — the resumed task, in
  // finish_switch() — completes its action. nullptr when g0 handles it.
  Task* prev = nullptr;

  // In blocking(): written by this M (seq_cst), read by shutdown to decide whom to detach.
  std::atomic<bool> in_blocking{false};
  // Guarded by rt->lock (not annotated: the analysis cannot tell that the rt->lock a
  // caller holds is this M's, m->rt->lock).
  bool exited = false;    // the thread left its loop
  bool detached = false;  // left in a blocking call at shutdown
  M* link = nullptr;      // idle list
  bool in_midle = false;  // in the idle list
};

// ---- the current thread -------------------------------------------------------------
// The M of the calling thread, nullptr on foreign threads. Never cached across a
// context switch: a task may resume on another thread, and the compiler would happily
// reuse a thread-local address computed before the switch. So current_m() never lets the
// compiler see a thread-local access: on x86-64 it is one %fs-relative load in a volatile
// asm (each call reads anew) with corun_proc_order as an input (<corun/proc_tls.hpp>
// this_proc_key: any call that may switch may write it, so the load is never moved above
// one); elsewhere an opaque call (current_m_slow). The offset (initial-exec, as tls_proc)
// is the same on every thread, so the compiler may share it. Inline, it saves a call on
// each side of a switch (1 P, n=8: ChanSync -4.9%, PingPongHog -5.2%, Yield -1.2%).
// Written only by set_current_m, by the thread itself; read it only through current_m().
extern constinit thread_local M* tls_m asm("corun_tls_m")
    __attribute__((tls_model("initial-exec")));
M* current_m_slow() noexcept;
inline M* current_m() noexcept {
#if defined(__x86_64__)
  long off;
  asm("movq corun_tls_m@gottpoff(%%rip), %0" : "=r"(off));
  M* m;
  asm volatile("movq %%fs:(%1), %0" : "=r"(m) : "r"(off), "m"(corun::detail::corun_proc_order));
  return m;
#else
  return current_m_slow();
#endif
}
void set_current_m(M* m) noexcept;
// m->p, and its mirror for the layers above (proc.hpp tls_proc): the only way m->p changes.
inline void set_mp(M* m, P* p) noexcept {
  m->p = p;
  tls_proc.id = p ? p->id : -1;
  tls_proc.run_id = p ? p->run_id : 0;
  tls_proc.preempt = p ? &p->preempt : nullptr;
  tls_proc.key = p ? corun::detail::proc_key(p->run_id, p->id) : 0;
}
// The published runtime, or nullptr. Safe to use only on the runtime's own threads (it
// cannot be freed under them); every other thread goes through the foreign gate
// (proc.hpp foreign_enter/foreign_runtime).
Runtime* current_runtime() noexcept;

// ---- scheduler operations (sched.cpp) ----------------------------------------------
void mstart(M* m);  // thread body of every M
M* new_m(Runtime* rt, P* p, bool spinning);
void wakep(Runtime* rt) noexcept;  // start a spinning M if useful
// wakep after the owner of p queued a task on p, unless p is running its own timers on
// its way to pick a task (run_own_timers): then the first readied task needs no other M.
void wakep_local(Runtime* rt, P* p) noexcept;
void startm(Runtime* rt, P* p, bool spinning);
void handoffp(Runtime* rt, P* p);  // find an M for p, or idle it
// An idle P, `pref` if it is idle; nullptr if none is.
P* pidleget(Runtime* rt, P* pref = nullptr) noexcept CORUN_REQUIRES(rt->lock);
void pidleput(Runtime* rt, P* p) noexcept CORUN_REQUIRES(rt->lock);
void acquirep(M* m, P* p) noexcept;
// Puts t in p's runnext (next) or at the ring's tail; a full ring sends half of itself
// to the global queue. Owner of p only. Inline with runq_get and new_slice: they run on
// every switch, and their slow paths (runq_overflow, runq_get_preempted) stay out of line.
void runq_overflow(Runtime* rt, Task* batch, std::uint32_t n) noexcept;
inline void runqput(Runtime* rt, P* p, Task* t, bool next) noexcept {
  t->state.store(TaskState::runnable, std::memory_order_relaxed);
  LocalEnd local(p->runq);
  if (next) {
    t = local.put_next(t);
    if (!t) return;
  }
  Task* batch = nullptr;
  if (std::uint32_t n = local.push_back(t, &batch)) [[unlikely]]
    runq_overflow(rt, batch, n);
}
void ready(Task* t) noexcept;                       // make a waiting task runnable (any thread)
void inject_global(Runtime* rt, Task* t) noexcept;  // from a thread without a P
// The poller's tasks (a Task::next list, state waiting) made runnable from a thread
// without a P: into the global queue, and an M started per task while Ps idle (Go's
// injectglist).
void inject_list(Runtime* rt, Task* list) noexcept;

// ---- tasks (task.cpp) ----------------------------------------------------------------
Task* task_alloc(Runtime* rt, P* p, std::size_t closure_size, std::size_t closure_align,
                 TaskFn invoke, TaskFn destroy);      // p may be nullptr (foreign thread)
void task_free(Runtime* rt, P* p, Task* t) noexcept;  // dead task back to a cache
// From g0: runs t; returns the task that switched back to g0 (t, or a task t switched to
// directly), whose m->action says why.
Task* switch_to_task(M* m, Task* t) noexcept;
void switch_to_g0(Task* t, Action a) noexcept;  // from a task
// corun::yield from a task holding m's P: straight to the P's next local task when there
// is one (the yielder goes to the ring's tail once off its stack), else through g0.
void yield_task(M* m) noexcept;
void finish_switch(M* m) noexcept;  // first thing after a task is resumed
// Completes what task t asked for when it left its M (m->action: park, yield, exit,
// syscall_exit), once nothing runs on t's stack: on g0 after a switch to it, or in
// finish_switch after a direct switch. sched.cpp.
void handle_action(M* m, Task* t) noexcept;
// A new time slice starts on p (owner only): see P::slicetick.
inline void new_slice(P* p) noexcept {
  p->slicetick.store(p->slicetick.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (p->preempt.load(std::memory_order_relaxed)) clear_preempt(p);
}
// This P's next local task (runnext, then the ring), with the time-slice rule: a task
// from runnext inherits the slice unless sysmon asked for preemption, in which case it
// goes to the ring's tail and the ring's head runs. nullptr if both are empty.
Task* runq_get_preempted(P* p, Task* next) noexcept;  // the preempted case
inline Task* runq_get(P* p) noexcept {
  LocalEnd local(p->runq);
  if (Task* next = local.take_next()) {
    if (!p->preempt.load(std::memory_order_relaxed)) [[likely]]
      return next;  // inherits the slice
    return runq_get_preempted(p, next);
  }
  Task* t = local.pop_ring();
  if (t) new_slice(p);
  return t;
}
void park(void (*commit)(void*), void* arg) noexcept;  // from a task
Task* task_from_closure(void* closure) noexcept;
void task_cache_drain(P* p) noexcept;  // at shutdown
// At a run's end, after every cache is drained: ends what the records of the tasks it
// abandons hold outside their stacks (TSan fibers; nothing in other builds).
void task_abandon_all(Runtime* rt) noexcept;
Task* current_task() noexcept;  // nullptr outside a task

std::unique_ptr<RunnextBackoff> make_backoff(const Backoff& b);  // backoff.cpp

// ---- the P's own timers, from the M loop (sched.cpp) ---------------------------------
// Runs p's due timers (one clock read if it has any), deferring the wake-ups of the tasks
// they ready: the first one runs on this M next. True if it ran any. p's owner only.
bool run_own_timers(Runtime* rt, P* p) noexcept;
// Other Ps' timers, for a P about to idle, a P at its 61st schedule and the idle wait.
// A running P runs its own heap at its next schedule: firing its timers elsewhere fights
// it for the heap's lock and the timers' channels, and moves the tasks they ready off it
// (ready() queues on the readier's P). So another thread takes a running P's due timers
// only once they are kOwnerLagNs overdue (that P is stuck in one long task; sysmon's
// backstop is 10 ms); an idle or blocked P's are anyone's when due. In
// CORUN_TIMERS=global the one heap is anyone's.
inline constexpr std::int64_t kOwnerLagNs = 20'000;
static_assert(IdleWait::kMinLagNs == kOwnerLagNs, "the waiter's backstop starts at the owner lag");
// The earliest moment some heap's timers are the idle wait's to run: min over heaps of
// the earliest deadline, + kOwnerLagNs if its P runs. TimerHeap::kNever if no timers.
// seq_cst loads: the idle wait's half of the store-buffering pairs (idle.hpp).
std::int64_t timers_idle_next(const Runtime* rt) noexcept;
// The earliest moment the M about to idle P p could run some heap's timer: p's own heap's
// earliest deadline, and timers_idle_next's for the others (a running P's, its own
// spinning included, kOwnerLagNs late). What the one spinner spins for
// (idle_spin_short). TimerHeap::kNever if no timers.
std::int64_t timers_spin_next(const Runtime* rt, const P* p) noexcept;
// The idle wait's plan, given its backstop lag (IdleWait::lag_ns): the earliest deadline of
// the heaps of idle Ps (and the one global heap), which it must be precise for (woken
// early and spun for: *precise = true); or, if earlier, a running P's earliest + lag, as a
// plain sleep (*precise = false): a running P runs its own timers (at every trip through
// its scheduler, and it spins for them when it idles), so this is only the backstop for a
// P stuck in one long task. TimerHeap::kNever if no timers.
std::int64_t timers_waiter_next(const Runtime* rt, std::int64_t lag, bool* precise) noexcept;
// Runs what is due at `now` (0: read the clock, only if a heap has timers) in p's own heap
// (p may be nullptr) and in the heaps timers_idle_next deems another thread's. True if it
// ran any.
bool run_due_timers(Runtime* rt, P* p, std::int64_t now) noexcept;

// ---- per-P safe points (safepoint.cpp; the contract for the layers above: safepoint.hpp)
// The owner of p (or whoever holds p outside the idle list): runs the hook if requested.
inline void run_safepoint(P* p) noexcept;
// ---- sysmon (sysmon.cpp) -------------------------------------------------------------
void sysmon_start(Runtime* rt);
void sysmon_stop(Runtime* rt);
inline constexpr std::uint32_t kSysmonWatching = 0, kSysmonSlices = 1, kSysmonIdle = 2;
void sysmon_kick(Runtime* rt) noexcept;       // a P entered blocking(): make sure sysmon watches
void sysmon_wake_idle(Runtime* rt) noexcept;  // a P started running: wake a sysmon asleep for good

inline constexpr std::uint8_t kSafepointNone = 0, kSafepointAsked = 1, kSafepointRunning = 2;
void run_safepoint_slow(P* p) noexcept;
inline void run_safepoint(P* p) noexcept {
  // relaxed: a hint; the CAS in run_safepoint_slow orders the hook's work.
  if (p->safepoint.load(std::memory_order_relaxed) == kSafepointAsked) run_safepoint_slow(p);
}

}  // namespace corun::sched
