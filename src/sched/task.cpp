// sched/task.cpp — task records: carving, recycling, and switching in and out.
//
// Layout of a task's stack (high addresses first):
//   [reserved: the slot above's canary, kCanaryBytes, from stack.hi up: never touched here]
//   [Task record, 64-aligned][closure, its own alignment][Task* back-pointer][frames ...]
//   ... down to stack.lo; below it a guard page (PROT_NONE, or RW and unused), and below
//   that the slot under it, whose top holds this stack's canary if it is unguarded.
//   check_left_stack() runs at every switch out (park, yield, exit).
// The back-pointer lets spawn_commit/abort find the record from the closure address the
// public go() template holds.
//
// Recycling: a dead task keeps its stack and record in its P's free list (LIFO, so the
// next spawn reuses warm cache lines); past kMaxFree, half go back to the allocator; an
// empty list refills with up to kStackBatch warm stacks. Both move many stacks per lock
// of the allocator, which every P of a NUMA node shares.
// TSan builds also keep every live record in a set (g_live), so a run's end can destroy
// the fibers of the tasks it abandons (task_abandon_all); other builds keep nothing.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_set>

#include "base/check.hpp"
#include "os/thread.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

namespace {

// TSan counts every fiber (one per task record, kept while cached: creating one costs
// milliseconds under TSan) against its limit of 8128 threads, so TSan builds cache fewer.
constexpr std::uint32_t kMaxFree = CORUN_TSAN ? 32 : 256;
// Stacks moved between a P's cache and the allocator per lock (StackAllocator's
// allocate_some/release_some). 1 under TSan, where a record's fiber costs milliseconds
// to make and must not be made ahead of need. 16 x 40-byte Stacks on the M's stack.
constexpr std::size_t kStackBatch = CORUN_TSAN ? 1 : 16;
constexpr std::uint64_t kIdBatch = 1024;

[[noreturn]] void task_entry(void* arg) noexcept;

#if CORUN_TSAN
// Every live task record, TSan builds only: a run's end destroys the fibers of the tasks
// it abandons (task_abandon_all), which nothing else ends. Without it each abandoned task
// kept a TSan thread context for the life of the process, and a test of short runs that
// abandon timer-fired tasks died under load with "Thread limit (8128 threads) exceeded".
// A std::mutex, not base::Lock: TSan builds only, taken by any M and by the last M of a
// run, outside the lock ranks.
std::mutex g_live_mu;
std::unordered_set<Task*> g_live;  // guarded by g_live_mu
#endif

Task* init_record(os::StackAllocator* alloc, const os::Stack& s) {
  auto top = reinterpret_cast<std::uintptr_t>(s.hi);
  std::uintptr_t rec = (top - sizeof(Task)) & ~static_cast<std::uintptr_t>(63);
  Task* t = ::new (reinterpret_cast<void*>(rec)) Task();
  t->stack = s;
  t->origin = alloc;
  arch::san_init_task(t->san, s.lo, static_cast<std::size_t>(s.hi - s.lo));
#if CORUN_TSAN
  std::lock_guard<std::mutex> g(g_live_mu);
  g_live.insert(t);
#endif
  return t;
}

// Returns true if the allocator now holds more idle stacks than it keeps (sysmon trims).
// Ends record t; returns its stack, for its allocator (t->origin, read first).
os::Stack end_record(Task* t) noexcept {
  os::Stack s = t->stack;
#if CORUN_TSAN
  {
    std::lock_guard<std::mutex> g(g_live_mu);
    g_live.erase(t);
  }
#endif
  arch::san_destroy_task(t->san);
  t->~Task();
  return s;
}

bool release_record(Task* t) noexcept {
  os::StackAllocator* alloc = t->origin;
  return alloc->release(end_record(t));
}

// Gives the list `give` back, kStackBatch stacks of one allocator per lock. Returns true
// if some allocator now holds more idle stacks than it keeps.
bool release_records(Task* give) noexcept {
  bool surplus = false;
  while (give) {
    os::Stack batch[kStackBatch];
    os::StackAllocator* alloc = give->origin;
    std::size_t k = 0;
    while (give && k < kStackBatch && give->origin == alloc) {
      Task* nx = give->next;
      batch[k++] = end_record(give);
      give = nx;
    }
    surplus |= alloc->release_some(batch, k);
  }
  return surplus;
}

// Tells sysmon that idle stacks' memory can go back to the OS (it trims a period later).
void note_stack_surplus(Runtime* rt) noexcept {
  if (!rt->stack_surplus.exchange(true, std::memory_order_relaxed)) sysmon_kick(rt);
}

std::uint64_t next_id(Runtime* rt, P* p) noexcept {
  if (!p) return rt->id_gen.fetch_add(1, std::memory_order_relaxed);
  if (p->next_id == p->end_id) {
    p->next_id = rt->id_gen.fetch_add(kIdBatch, std::memory_order_relaxed);
    p->end_id = p->next_id + kIdBatch;
  }
  return p->next_id++;
}

}  // namespace

Task* task_alloc(Runtime* rt, P* p, std::size_t size, std::size_t align, TaskFn invoke,
                 TaskFn destroy) {
  if (align == 0 || (align & (align - 1)) != 0 || align > 4096)
    throw std::invalid_argument("corun::go: closure alignment must be a power of two <= 4096");
  if (size > rt->stack_bytes / 4)
    throw std::length_error("corun::go: closure of " + std::to_string(size) +
                            " bytes does not fit in a quarter of the task stack (" +
                            std::to_string(rt->stack_bytes) + " bytes; raise CORUN_STACK_KB)");
  Task* t;
  if (p && p->free_tasks) {
    t = p->free_tasks;
    p->free_tasks = t->next;
    p->nfree--;
#if CORUN_ASAN
    // Clear the shadow left by frames that never returned (the task's entry frame).
    arch::san_init_task(t->san, t->stack.lo, static_cast<std::size_t>(t->stack.hi - t->stack.lo));
#endif
  } else if (p) {
    // The cache is empty: refill it with what the allocator has warm, under one lock.
    os::Stack got[kStackBatch];
    const std::size_t k = p->stacks->allocate_some(got, kStackBatch);
    for (std::size_t i = 1; i < k; i++) {
      Task* r = init_record(p->stacks, got[i]);
      r->next = p->free_tasks;
      p->free_tasks = r;
      p->nfree++;
    }
    t = init_record(p->stacks, got[0]);
  } else {
    os::StackAllocator* alloc = rt->stacks.front().get();
    t = init_record(alloc, alloc->allocate());
  }
  t->next = nullptr;
  auto rec = reinterpret_cast<std::uintptr_t>(t);
  std::uintptr_t c = (rec - size) & ~(static_cast<std::uintptr_t>(align) - 1);
  std::uintptr_t back = (c - sizeof(Task*)) & ~static_cast<std::uintptr_t>(sizeof(Task*) - 1);
  *reinterpret_cast<Task**>(back) = t;
  t->closure = reinterpret_cast<void*>(c);
  t->invoke = invoke;
  t->destroy = destroy;
  t->id = next_id(rt, p);
  t->eh = EhState{};
  std::uintptr_t sp_top = back & ~static_cast<std::uintptr_t>(15);
  arch::context_init(&t->ctx, t->stack.lo, reinterpret_cast<void*>(sp_top), task_entry, t);
  t->state.store(TaskState::idle, std::memory_order_relaxed);
  return t;
}

Task* task_from_closure(void* closure) noexcept {
  auto c = reinterpret_cast<std::uintptr_t>(closure);
  std::uintptr_t back = (c - sizeof(Task*)) & ~static_cast<std::uintptr_t>(sizeof(Task*) - 1);
  return *reinterpret_cast<Task**>(back);
}

void task_free(Runtime* rt, P* p, Task* t) noexcept {
  if (p && p->nfree < kMaxFree) {
    t->next = p->free_tasks;
    p->free_tasks = t;
    p->nfree++;
    return;
  }
  if (p) {
    // Keep the newest half warm, return the older half.
    Task* keep = p->free_tasks;
    for (std::uint32_t i = 1; i < kMaxFree / 2; i++) keep = keep->next;
    Task* give = keep->next;
    keep->next = nullptr;
    p->nfree = kMaxFree / 2;
    if (release_records(give)) note_stack_surplus(rt);
    t->next = p->free_tasks;
    p->free_tasks = t;
    p->nfree++;
    return;
  }
  if (release_record(t)) note_stack_surplus(rt);
}

void task_cache_drain(P* p) noexcept {
  release_records(p->free_tasks);
  p->free_tasks = nullptr;
  p->nfree = 0;
}

void task_abandon_all([[maybe_unused]] Runtime* rt) noexcept {
#if CORUN_TSAN
  std::lock_guard<std::mutex> g(g_live_mu);
  for (auto it = g_live.begin(); it != g_live.end();) {
    Task* t = *it;
    bool ours = false;
    for (const auto& a : rt->stacks) ours |= t->origin == a.get();
    if (!ours) {
      ++it;
      continue;
    }
    arch::san_destroy_task(t->san);  // no thread runs on it: every M of rt has left
    it = g_live.erase(it);
  }
#endif
}

namespace {

// Stack checks for a task that just left its CPU (park, yield, exit), run before anything
// else resumes on this M. The saved stack pointer, for every stack (no memory touched): a
// task parked below its stack's end overflowed, guard page or not (a frame can jump over
// a guard); an unguarded one also within 256 bytes of it (the old margin). The canary, for
// a stack with no guard page under it (the map budget ran out), at every switch: it sits in
// the top of the slot below, StackAllocator::allocate wrote it and trim() never returns
// that page while it may hold a live canary, so the check costs one line read (8 loads), no
// page fault (measured with the canary at the stack's own bottom, best of 6 on a 2-vCPU VM,
// every stack unguarded vs guarded: WaitGroupHandoff 121 vs 113 ns/op, Yield 108 vs 104
// ns/op, i.e. a few ns per switch); an overflow that reached the slot below and returned
// without faulting is caught at the task's next switch, before this M runs anything else
// (see os/stack.hpp for what is and is not guaranteed). Rejected: checking only at exit or when
// parked deep (the old rule, for a zero canary whose page was left unbacked): a task that
// overflowed into a neighbour and parked shallow went on, and the neighbour crashed or hung later.
void check_left_stack(M* m, Task* t) noexcept {
  auto lo = reinterpret_cast<std::uint64_t>(t->stack.lo);
  std::uint64_t sp = arch::context_sp(t->ctx);
  if (sp < lo + (t->stack.guarded ? 0 : 256))
    os::report_stack_overflow(t->id, m->rt->stack_bytes, "stack pointer below the stack's end");
  if (t->stack.canary != nullptr && !os::canary_intact(t->stack))
    os::report_stack_overflow(t->id, m->rt->stack_bytes,
                              "canary below the stack overwritten (overflow into the stack below)");
}

// Whether a direct switch must go through g0 first because a timer of this P is due:
// g0's find_runnable runs it and puts the task it wakes in runnext. One relaxed load when
// the P has no timer; else one clock read (~25 ns here, kvm-clock) at every yield, before
// running a task that last yielded, and every kTimerCheckEvery other switches. Without it
// a timer waits for the 61st switch, i.e. behind every runnable task.
// Why yields check every time: a task that yields every few µs (a busy loop's scheduling
// point, Go's Gosched) gives the P its only chances to see its timers, and every 8th of
// them was 20-40 µs (TimerLateness/*=50us/busy p50 13 µs against Go's 0.5-5 µs). Why
// before running a yielder: between two turns of a busy task the tasks woken by timers
// run and park, and a timer due meanwhile would wait a whole busy turn more. Parks and
// exits of short tasks (channel ping-pong) switch far more often and keep the count.
// Go checks at every schedule(); corun's direct switches are ~6 ns, so a clock read at
// every one would cost more than the switch.
constexpr std::uint32_t kTimerCheckEvery = 8;
bool timer_due_now(P* p) noexcept {
  std::int64_t e = p->timers->next();
  if (e == TimerHeap::kNever) return false;
  p->timer_countdown = kTimerCheckEvery;
  return static_cast<std::int64_t>(os::monotonic_ns()) >= e;
}
bool timer_due_check(P* p) noexcept {
  if (p->timers->next() == TimerHeap::kNever || --p->timer_countdown != 0) return false;
  return timer_due_now(p);
}

// The next task of this M's P for a direct switch, or nullptr when the scheduler proper
// must choose: nothing local, the global queue's turn (every 61st pick), shutdown, a due
// timer (see timer_due_now for when it looks). `yielding`: the caller yields.
Task* direct_next(M* m, bool yielding) noexcept {
  P* p = m->p;
  if (!p || p->global_countdown <= 1 || m->rt->stopping.load(std::memory_order_relaxed) ||
      (yielding ? timer_due_now(p) : timer_due_check(p)))
    return nullptr;
  Task* t = runq_get(p);
  if (t) {
    CORUN_DCHECK(t->state.load(std::memory_order_relaxed) == TaskState::runnable,
                 "task %llu dequeued in state %u", static_cast<unsigned long long>(t->id),
                 static_cast<unsigned>(t->state.load(std::memory_order_relaxed)));
    if (t->yielded) {
      t->yielded = false;
      // A yielder goes back behind what the due timers wake (it asked to let others run).
      if (!yielding && timer_due_now(p)) {
        runqput(m->rt, p, t, false);
        return nullptr;
      }
    }
    if (p->global_countdown > 1) p->global_countdown--;  // runq_get may have set it to 1
    bump(p->stats.runs);
  }
  return t;
}

// Runs `to` in place of `from` on this M without going through g0; `from` is finished
// (parked or freed) by finish_switch() on `to`'s side, once its stack is no longer in use.
void switch_direct(M* m, Task* from, Task* to, Action a) noexcept {
  m->prev = from;
  m->action = a;
  m->curg = to;
  to->state.store(TaskState::running, std::memory_order_relaxed);
  os::tls_running_stack = {to->stack.lo, static_cast<std::size_t>(to->stack.hi - to->stack.lo),
                           to->id};
  EhState::hand_over(from->eh, m->eh_globals, to->eh);
  arch::san_before_switch(from->san, to->san, a == Action::exit);
  arch::corun_context_switch(&from->ctx, &to->ctx);
  arch::san_after_switch(from->san);
  finish_switch(current_m());
}

}  // namespace

Task* switch_to_task(M* m, Task* t) noexcept {
  m->curg = t;
  t->yielded = false;
  t->state.store(TaskState::running, std::memory_order_relaxed);
  os::tls_running_stack = {t->stack.lo, static_cast<std::size_t>(t->stack.hi - t->stack.lo), t->id};
  t->eh.swap_with(m->eh_globals);
  arch::san_before_switch(m->g0san, t->san, false);
  arch::corun_context_switch(&m->g0, &t->ctx);
  arch::san_after_switch(m->g0san);
  Task* back = m->curg;  // t may have switched directly to other tasks meanwhile
  back->eh.swap_with(m->eh_globals);
  os::tls_running_stack = {};
  m->curg = nullptr;
  check_left_stack(m, back);
  return back;
}

void switch_to_g0(Task* t, Action a) noexcept {
  M* m = current_m();
  m->action = a;
  arch::san_before_switch(t->san, m->g0san, a == Action::exit);
  arch::corun_context_switch(&t->ctx, &m->g0);
  arch::san_after_switch(t->san);
  finish_switch(current_m());
}

void finish_switch(M* m) noexcept {
  Task* prev = m->prev;
  if (!prev) return;  // resumed by g0, which did the work itself
  m->prev = nullptr;
  check_left_stack(m, prev);
  handle_action(m, prev);
}

void park(void (*commit)(void*), void* arg) noexcept {
  M* m = current_m();
  if (!m->p) {
    std::fprintf(stderr,
                 "corun: task %llu waited on a corun primitive inside blocking(); "
                 "blocking() is for calls that block the thread, not the task\n",
                 static_cast<unsigned long long>(m->curg->id));
    std::abort();
  }
  m->commit = commit;
  m->commit_arg = arg;
  bump(m->p->stats.parks);
  Task* self = m->curg;
  if (Task* next = direct_next(m, false)) {
    switch_direct(m, self, next, Action::park);
    return;
  }
  switch_to_g0(self, Action::park);
}

void yield_task(M* m) noexcept {
  // One switch instead of two through g0 (a 2-task yield loop at 1 P: 105 -> ~60 ns per
  // round). direct_next keeps g0's turns: the global queue every 61st pick, due timers,
  // shutdown; with nothing local, g0's find_runnable also polls the network and steals.
  Task* self = m->curg;
  if (Task* next = direct_next(m, true)) {
    switch_direct(m, self, next, Action::yield);
    return;
  }
  switch_to_g0(self, Action::yield);
}

Task* current_task() noexcept {
  M* m = current_m();
  return m ? m->curg : nullptr;
}

bool can_park() noexcept {
  M* m = current_m();
  return m && m->curg && m->p;
}

namespace {

[[noreturn]] void task_entry(void* arg) noexcept {
  Task* t = static_cast<Task*>(arg);
  arch::san_after_switch(t->san);
  finish_switch(current_m());  // a task that switched here directly
  try {
    t->invoke(t->closure);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "corun: task %llu terminated by exception: %s\n",
                 static_cast<unsigned long long>(t->id), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "corun: task %llu terminated by exception: (not a std::exception)\n",
                 static_cast<unsigned long long>(t->id));
    std::abort();
  }
  t->destroy(t->closure);
  M* m = current_m();
  if (Task* next = direct_next(m, false))
    switch_direct(m, t, next, Action::exit);
  else
    switch_to_g0(t, Action::exit);
  std::abort();  // a dead task is never resumed
}

}  // namespace

}  // namespace corun::sched
