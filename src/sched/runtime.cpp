// sched/runtime.cpp — booting and stopping a runtime; the public entry points
// (run, go's runtime side, yield, procs, proc_id, blocking).
//
// run() does not turn the caller's thread into an M: it boots the Ps and Ms, queues the
// main task, and sleeps on a futex until the main task returns. The caller's thread keeps
// its affinity, timer slack and signal stack. Costs one thread, saves restoring them.
//
// Shutdown (Go: main returns, the process exits): `stopping` is set; idle Ms are woken
// and leave; running Ms leave at their task's next switch; Ms inside blocking() cannot be
// interrupted, so they are detached: each holds a reference to the Runtime and the last
// one frees it. Tasks still alive are abandoned: never resumed, closures not destroyed.
//
// Publication and the foreign gate. The running runtime is published in g_runtime; its
// Ms (and tasks) reach it through M::rt, which lives as long as they do. Every other
// thread — a foreign thread calling go(), a timer or Pool operation, procs(); sysmon
// firing timers — reads it only inside the gate (proc.hpp foreign_enter/leave), an
// RCU-style read section:
//   enter:  inside[slot] += 1 (slot = epoch & 1); full fence; load g_runtime, and treat a
//           stopping runtime as none (the call then acts as outside run()).
//   leave:  inside[slot] -= 1 (release).
//   grace period (wait_foreign_gate): full fence; twice: epoch += 1, then wait until
//           inside[old slot] == 0 (acquire).
// Invariant: a section that entered before a grace period began has left when it ends;
// a section that entered after it began sees every store made before it began. (The
// fences pair: if the reader's fence comes first, the waiter's load sees its increment
// and waits for the release decrement; else the reader sees the waiter's stores.) Both
// counters are waited for, so the epoch a reader used does not matter for correctness;
// the epoch only steers new readers to the other counter, so a stream of foreign calls
// cannot starve the waiter: each wait is for stragglers already inside, which are short.
// Uses of it:
//   1. run()'s end: `stopping` is stored, then a grace period: every section that saw
//      the runtime running has left (a foreign go() that won has queued its task and
//      started any M it wanted, before shutdown counts the Ms), and later sections see
//      it stopping. A foreign go() that won is then run or abandoned like any task alive
//      at the end (README "Ending"); one that lost throws std::logic_error.
//   2. destroy_runtime: g_runtime no longer names it and its timer heaps are drained
//      (every TimerNode::owner into them is null), then a grace period: no section
//      holds the runtime, a heap of it, or anything reached from them when it is freed.
//      This also covers a runtime freed later by its last detached M.
// Ms never need to enter (their run cannot end under them; an M without a P that enters
// through ForeignPin is harmless): go() from a task costs what it did, a timer operation
// one TLS load. A section must not wait for anything a run's end waits for: the closure
// a foreign go() constructs in its task runs inside one (do not block in its copy).
// Rejected: a reference count on the Runtime taken by each foreign call (loading the
// pointer and incrementing a count inside the object it points to is the race itself,
// unless a global lock covers both: every foreign call through one lock); one global
// counter (a steady stream of foreign calls could keep it from ever reading 0); hazard
// pointers (a slot per foreign thread, unbounded in number, for the same guarantee).
#include <pthread.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include <corun/runtime.hpp>

#include "arch/spin.hpp"
#include "base/check.hpp"
#include "base/cpu_relax.hpp"
#include "base/probes.hpp"
#include "os/futex.hpp"
#include "os/numa.hpp"
#include "os/thread.hpp"
#include "sched/fence.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

namespace {

// Instrumented frames are several times larger under the sanitizers.
constexpr std::size_t kDefaultStackKb = (CORUN_ASAN || CORUN_TSAN) ? 256 : 64;

// The running runtime. Stored by run() only: release on publish (the booted runtime's
// fields), seq_cst on unpublish (the foreign gate's fences order it; seq_cst states that
// it is one side of that pair). Loaded with acquire (pairs with the publish).
std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_active{false};  // a run() is in progress

// ---- the foreign gate (protocol and invariant: the header) ---------------------------
struct alignas(64) ForeignGate {
  // Which counter new sections use (its low bit). Written only by the grace period's
  // holder of g_grace_lock; relaxed both ways: it steers readers for progress only.
  std::atomic<std::uint32_t> epoch{0};
  // Sections inside, by the counter they entered on. seq_cst increment (then a fence),
  // release decrement, acquire load by the waiter (sees the leaver's section).
  std::atomic<std::int64_t> inside[2] = {0, 0};
};
ForeignGate g_gate;
base::Lock<base::LockRank::foreign_gate> g_grace_lock;  // one grace period at a time

// The calling thread's gate section; this thread only.
struct PinTls {
  std::uint32_t depth = 0;  // nested enters
  std::uint32_t slot = 0;   // the counter the outermost enter incremented
  Runtime* rt = nullptr;    // the runtime it pinned (nullptr: none, or stopping)
};
constinit thread_local PinTls tls_pin;

// Returns once every gate section that began before the call has ended (the header).
// The caller must not be in one itself (it would wait for itself).
void wait_foreign_gate() noexcept {
  CORUN_CHECK(tls_pin.depth == 0, "a runtime ends inside a foreign gate section of its thread\n");
  base::Guard g(g_grace_lock);
  full_fence();  // the waiter's fence: our stores before it, the counters' loads after
  for (int round = 0; round < 2; round++) {
    std::uint32_t old = g_gate.epoch.load(std::memory_order_relaxed);  // only we write it
    g_gate.epoch.store(old + 1, std::memory_order_relaxed);
    std::atomic<std::int64_t>& c = g_gate.inside[old & 1];
    for (int spins = 0; c.load(std::memory_order_acquire) != 0; spins++) {
      if (spins < 128)
        base::cpu_relax();
      else if (spins < 1024)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));  // a preempted reader
    }
  }
}

// The last reference is gone: no M touches rt any more, so its guarded fields need no
// lock (beyond the analysis). Gate sections may still hold it: the grace period below.
void destroy_runtime(Runtime* rt) noexcept CORUN_NO_TSA {
  rt->timers.drain();   // timers still armed: abandoned (records freed) before the Ps go
  wait_foreign_gate();  // no section holds rt or one of its (now empty) heaps any more
  netpoll_destroy(rt);  // descriptors still open are rebound by a later run that uses them
  for (P* p : rt->ps) {
    task_cache_drain(p);
    p->~P();
    os::node_free(p, sizeof(P));
  }
  task_abandon_all(rt);  // their stacks go with the slabs below
  for (M* m : rt->allm) delete m;
  delete rt;                  // unmaps every stack slab, abandoned tasks' too
  os::release_free_memory();  // the allocator would keep the freed pages resident
}

void release_runtime(Runtime* rt) noexcept {
  // acq_rel: the last releaser sees every other holder's writes before freeing.
  if (rt->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy_runtime(rt);
}

void bump_exit_seq(Runtime* rt) noexcept {
  rt->exit_seq.fetch_add(1, std::memory_order_release);
  os::futex_wake(&rt->exit_seq, INT_MAX);
}

void* m_thread_main(void* arg) {
  M* m = static_cast<M*>(arg);
  Runtime* rt = m->rt;
  mstart(m);
  bool last = false;
  {
    base::Guard g(rt->lock);
    m->exited = true;
    if (m->detached) last = rt->refs.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
  if (last) {
    destroy_runtime(rt);
  } else {
    bump_exit_seq(rt);
  }
  return nullptr;
}

Runtime* boot(const Config& cfg, const Settings& s) {
  auto rt = std::make_unique<Runtime>();
  rt->settings = s;
  static std::atomic<std::uint64_t> runs{0};  // relaxed: uniqueness only
  rt->run_id = runs.fetch_add(1, std::memory_order_relaxed) + 1;
  // ProcTls::key keeps it in 32 bits, and 0xffffffff is the pool's "no run" (pool.cpp
  // kNoTable): some 4 billion runs per process.
  if (rt->run_id >= 0xffffffffu)
    throw std::overflow_error("corun: run() called 2^32-1 times in this process");
  os::TopologyRequest req;
  req.procs = cfg.procs ? cfg.procs : s.procs;
  req.numa = s.numa;
  rt->plan = os::plan_topology(req);
  rt->nprocs = static_cast<int>(rt->plan.procs.size());
  if (s.debug_stealorder)
    std::fprintf(stderr, "corun: %s\ncorun: %s\n", describe(s).c_str(),
                 rt->plan.describe().c_str());
  rt->stack_bytes = (s.stack_kb ? s.stack_kb : kDefaultStackKb) * 1024;
  arch::calibrate();
  rt->backoff = make_backoff(s.runnext_backoff);

  // One stack allocator per NUMA node the Ps run on, indexed by the plan's logical node
  // number; memory is placed by the node's OS number (what mbind and libnuma take: the two
  // differ where node numbers are sparse). A synthetic or XML topology (not pinnable) has
  // nodes that are fiction on this machine: the per-node structure is kept, placement not.
  int nodes = (s.numa && rt->plan.numa_nodes > 1) ? rt->plan.numa_nodes : 1;
  std::vector<int> os_node(static_cast<std::size_t>(nodes), -1);
  if (nodes > 1 && rt->plan.pinnable)
    for (const os::ProcPlace& place : rt->plan.procs)
      if (place.numa_node >= 0 && place.numa_node < nodes)
        os_node[static_cast<std::size_t>(place.numa_node)] = place.numa_os_node;
  for (int i = 0; i < nodes; i++) {
    os::StackOptions o;
    o.stack_bytes = rt->stack_bytes;
    o.numa_node = os_node[static_cast<std::size_t>(i)];
    rt->stacks.push_back(std::make_unique<os::StackAllocator>(o));
  }
  for (int i = 0; i < rt->nprocs; i++) {
    const os::ProcPlace& place = rt->plan.procs[static_cast<std::size_t>(i)];
    int node = nodes > 1 && place.numa_node >= 0 ? place.numa_node : -1;  // logical
    int mem_node = node >= 0 ? os_node[static_cast<std::size_t>(node)] : -1;
    void* mem = os::node_alloc(sizeof(P), alignof(P), mem_node);
    P* p = ::new (mem) P();
    p->id = i;
    p->run_id = rt->run_id;
    p->os_cpu = place.os_cpu;
    p->numa_node = place.numa_node;
    p->mem_node = mem_node;
    p->victims = rt->plan.victim_groups(i);
    p->stacks = rt->stacks[node >= 0 ? static_cast<std::size_t>(node) : 0].get();
    p->rng = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(i + 1);
    p->own_timers.rt = rt.get();
    p->own_timers.proc = p;
    p->timers = s.timers == TimerMode::global ? &rt->global_timers : &p->own_timers;
    if (s.timers != TimerMode::global) rt->timers.add_heap(&p->own_timers);
    rt->ps.push_back(p);
  }
  rt->global_timers.rt = rt.get();
  if (s.timers == TimerMode::global) rt->timers.add_heap(&rt->global_timers);
  // P0 starts the main task; the others wait in the idle list, P1 on top. (No other
  // thread exists yet; the lock is for the rule, and costs nothing here.)
  {
    base::Guard g(rt->lock);
    for (int i = rt->nprocs - 1; i >= 1; i--)
      pidleput(rt.get(), rt->ps[static_cast<std::size_t>(i)]);
  }
  os::install_overflow_handler();
  rt->start_ns = os::monotonic_ns();
  return rt.release();
}

struct MainClosure {
  Runtime* rt;
  std::function<void()>* fn;
};

void main_invoke(void* c) {
  auto* mc = static_cast<MainClosure*>(c);
  try {
    (*mc->fn)();
  } catch (...) {
    mc->rt->main_error = std::current_exception();
  }
  // release: run() reads main_error after seeing main_done.
  mc->rt->main_done.store(1, std::memory_order_release);
  os::futex_wake(&mc->rt->main_done, 1);
}

void main_destroy(void*) {}

void shutdown(Runtime* rt) {
  // seq_cst: a side of the foreign gate's pair (a fence follows in the grace period).
  rt->stopping.store(true, std::memory_order_seq_cst);
  // Foreign calls that saw the runtime running finish (their tasks queued, any M they
  // start created) before the Ms are counted below; later ones see it stopping.
  wait_foreign_gate();
  {
    base::Guard g(rt->lock);
    for (M* m = rt->midle; m; m = m->link) {
      m->nextp = nullptr;
      m->in_midle = false;
      m->park.wakeup();
    }
    rt->midle = nullptr;
    idle_stop(rt);
  }
  sysmon_stop(rt);
  // Wait until every M has left or sits in a blocking() call.
  for (;;) {
    std::uint32_t seq = rt->exit_seq.load(std::memory_order_acquire);
    bool waiting = false;
    {
      base::Guard g(rt->lock);
      for (M* m : rt->allm)
        if (!m->exited && !m->in_blocking.load(std::memory_order_seq_cst)) waiting = true;
    }
    if (!waiting) break;
    os::futex_wait(&rt->exit_seq, seq);
  }
  std::vector<M*> join;
  {
    base::Guard g(rt->lock);
    for (M* m : rt->allm) {
      if (!m->exited) {
        m->detached = true;
        rt->refs.fetch_add(1, std::memory_order_relaxed);  // dropped by the M (under lock)
        pthread_detach(m->thread);
      } else {
        join.push_back(m);
      }
    }
  }
  for (M* m : join) pthread_join(m->thread, nullptr);
}

}  // namespace

Runtime* current_runtime() noexcept {
  return g_runtime.load(std::memory_order_acquire);
}

void foreign_enter() noexcept {
  PinTls& me = tls_pin;
  if (me.depth++ != 0) return;
  // relaxed: the slot only steers us away from a counter a waiter drains (progress).
  me.slot = g_gate.epoch.load(std::memory_order_relaxed) & 1;
  g_gate.inside[me.slot].fetch_add(1, std::memory_order_seq_cst);
  full_fence();  // the reader's fence: the increment before it, every load below after
  Runtime* rt = g_runtime.load(std::memory_order_acquire);
  // acquire: pairs with the stopping store's fence; a stopping runtime counts as none.
  if (rt && rt->stopping.load(std::memory_order_acquire)) rt = nullptr;
  me.rt = rt;
}

void foreign_leave() noexcept {
  PinTls& me = tls_pin;
  CORUN_CHECK(me.depth > 0, "foreign_leave without foreign_enter\n");
  if (--me.depth != 0) return;
  me.rt = nullptr;
  // release: everything the section did happens before a waiter's acquire load of 0.
  g_gate.inside[me.slot].fetch_sub(1, std::memory_order_release);
}

Runtime* foreign_runtime() noexcept {
  return tls_pin.rt;  // nullptr outside a section (reset by the outermost leave)
}

M* new_m(Runtime* rt, P* p, bool spinning) {
  M* m = new M();
  m->rt = rt;
  m->nextp = p;
  m->spinning = spinning;
  {
    base::Guard g(rt->lock);
    m->id = static_cast<int>(rt->allm.size());
    rt->allm.push_back(m);
  }
  int err = pthread_create(&m->thread, nullptr, m_thread_main, m);
  if (err != 0) {
    std::fprintf(stderr, "corun: cannot create thread for M%d: %s\n", m->id, std::strerror(err));
    std::abort();
  }
  return m;
}

}  // namespace corun::sched

namespace corun {

using namespace corun::sched;

int run(std::function<void()> main_task) {
  return run(Config{}, std::move(main_task));
}

int run(const Config& cfg, std::function<void()> main_task) {
  if (cfg.procs < 0 || cfg.procs > 4096)
    throw std::invalid_argument("corun::Config::procs = " + std::to_string(cfg.procs) +
                                ": expected 0 (take CORUN_PROCS or the default) or 1 to 4096");
  if (!main_task) throw std::invalid_argument("corun::run: main_task is empty");
  Settings settings = settings_from_environment();  // throws on a bad CORUN_*
  if (current_m()) throw std::logic_error("corun::run called from a task: run is not re-entrant");
  if (g_active.exchange(true, std::memory_order_acq_rel))
    throw std::logic_error("corun::run: a runtime is already running (run is not re-entrant)");
  struct Active {
    ~Active() { g_active.store(false, std::memory_order_release); }
  } active;

  Runtime* rt = boot(cfg, settings);
  g_runtime.store(rt, std::memory_order_release);

  MainClosure mc{rt, &main_task};
  Task* t =
      task_alloc(rt, nullptr, sizeof(MainClosure), alignof(MainClosure), main_invoke, main_destroy);
  ::new (t->closure) MainClosure(mc);
  t->state.store(TaskState::runnable, std::memory_order_relaxed);
  rt->runq.push(t);
  sysmon_start(rt);
  startm(rt, rt->ps[0], false);

  while (rt->main_done.load(std::memory_order_acquire) == 0) os::futex_wait(&rt->main_done, 0);
  shutdown(rt);
  // seq_cst: the gate's pair (destroy_runtime's grace period fences after it).
  g_runtime.store(nullptr, std::memory_order_seq_cst);
  std::exception_ptr err = rt->main_error;
  release_runtime(rt);
  if (err) std::rethrow_exception(err);
  return 0;
}

void yield() {
  M* m = current_m();
  if (!m || !m->curg || !m->p) {  // not a task, or inside blocking(): yield the thread
    std::this_thread::yield();
    return;
  }
  yield_task(m);
}

namespace sched {
void yield_if_preempted() noexcept {
  M* m = current_m();
  if (!m || !m->curg || !m->p) return;
  P* p = m->p;
  if (!p->preempt.load(std::memory_order_relaxed)) return;
  clear_preempt(p);
  switch_to_g0(m->curg, Action::yield);
}
}  // namespace sched

namespace detail {
void poll_yield() noexcept {
  sched::yield_if_preempted();
}
}  // namespace detail

namespace sched {
Runtime* caller_runtime() noexcept {
  M* m = current_m();
  return m ? m->rt : foreign_runtime();
}
std::uint64_t running_run_id() noexcept {
  foreign_enter();
  // The published one even if stopping (foreign_runtime() would hide it).
  Runtime* rt = g_runtime.load(std::memory_order_acquire);
  std::uint64_t id = rt ? rt->run_id : 0;
  foreign_leave();
  return id;
}
std::uint64_t run_id(const Runtime* rt) noexcept {
  return rt->run_id;
}
int run_procs(const Runtime* rt) noexcept {
  return rt->nprocs;
}
const Settings& run_settings(const Runtime* rt) noexcept {
  return rt->settings;
}
bool run_stopping(const Runtime* rt) noexcept {
  return rt->stopping.load(std::memory_order_acquire);
}
bool in_task() noexcept {
  M* m = current_m();
  return m && m->curg;
}
int caller_node() noexcept {
  M* m = current_m();
  return (m && m->p) ? m->p->mem_node : -1;
}
}  // namespace sched

int procs() {
  if (M* m = current_m()) return m->rt->nprocs;
  foreign_enter();
  Runtime* rt = foreign_runtime();
  int n = rt ? rt->nprocs : 0;
  foreign_leave();
  return n;
}

int proc_id() {
  M* m = current_m();
  return (m && m->curg && m->p) ? m->p->id : -1;
}

namespace detail {

namespace {
[[noreturn]] void throw_outside_run() {
  throw std::logic_error("corun::go called outside corun::run: no runtime is running");
}

// go() from a thread that is not an M: the gate section opened here stays open until
// spawn_commit or spawn_abort (the closure is built in the task's stack, which the
// runtime frees), so the closure's construction runs inside it.
__attribute__((noinline)) void* spawn_begin_foreign(std::size_t size, std::size_t align,
                                                    TaskFn invoke, TaskFn destroy) {
  foreign_enter();
  Runtime* rt = foreign_runtime();
  if (!rt) {
    foreign_leave();
    throw_outside_run();
  }
  try {
    return task_alloc(rt, nullptr, size, align, invoke, destroy)->closure;
  } catch (...) {
    foreign_leave();
    throw;
  }
}
}  // namespace

void* spawn_begin(std::size_t size, std::size_t align, TaskFn invoke, TaskFn destroy) {
  M* m = current_m();
  if (!m) [[unlikely]]
    return spawn_begin_foreign(size, align, invoke, destroy);
  // An M's runtime lives as long as the M. A task still on a CPU after the main task
  // returned spawns into the ending run: the new task is abandoned with it (API.md), not
  // an exception that would abort the process.
  Runtime* rt = m->rt;
  Task* t = task_alloc(rt, m->p, size, align, invoke, destroy);
  return t->closure;
}

void spawn_commit(void* closure) noexcept {
  Task* t = task_from_closure(closure);
  M* m = current_m();
  CORUN_PROBE2(spawn, t->id, (m && m->p) ? m->p->id : -1);
  if (m && m->p) {
    P* p = m->p;
    bump(p->stats.spawned);
    runqput(m->rt, p, t, true);
    wakep_local(m->rt, p);
  } else if (m) {
    inject_global(m->rt, t);
  } else {
    inject_global(foreign_runtime(), t);  // the runtime spawn_begin pinned
    foreign_leave();
  }
}

void spawn_abort(void* closure) noexcept {
  Task* t = task_from_closure(closure);
  M* m = current_m();
  if (m) {
    task_free(m->rt, m->p, t);
  } else {
    task_free(foreign_runtime(), nullptr, t);
    foreign_leave();
  }
}

// blocking(): Go's entersyscall/exitsyscall. Entering only marks the P; sysmon hands it
// to another M if the call lasts (sysmon.cpp), so a short call costs two atomics.
BlockingScope::BlockingScope() : token_(nullptr) {
  M* m = current_m();
  if (!m || !m->curg || !m->p) return;  // not a task, or nested blocking()
  Runtime* rt = m->rt;
  P* p = m->p;
  m->oldp = p;
  p->syscalltick.fetch_add(1, std::memory_order_relaxed);
  set_mp(m, nullptr);
  m->in_blocking.store(true, std::memory_order_seq_cst);
  // seq_cst: pairs with sysmon's "anything to watch?" check before it sleeps.
  p->status.store(PStatus::syscall, std::memory_order_seq_cst);
  sysmon_kick(rt);
  if (rt->stopping.load(std::memory_order_seq_cst)) bump_exit_seq(rt);
  token_ = m;
}

BlockingScope::~BlockingScope() {
  if (!token_) return;
  M* m = static_cast<M*>(token_);  // a task never changes thread inside blocking()
  Runtime* rt = m->rt;
  P* p = m->oldp;
  m->oldp = nullptr;
  m->in_blocking.store(false, std::memory_order_seq_cst);
  if (rt->stopping.load(std::memory_order_seq_cst)) {
    switch_to_g0(m->curg, Action::syscall_exit);  // abandoned: never resumes
    return;
  }
  PStatus expected = PStatus::syscall;
  // acquire: if sysmon did not take the P, we get back the owner-only state we left.
  if (p->status.compare_exchange_strong(expected, PStatus::running, std::memory_order_acq_rel)) {
    set_mp(m, p);
    return;
  }
  P* np = nullptr;
  {
    base::Guard g(rt->lock);
    np = pidleget(rt);
  }
  if (np) {
    acquirep(m, np);
    return;
  }
  switch_to_g0(m->curg, Action::syscall_exit);  // queued globally; resumes on some M
}

}  // namespace detail
}  // namespace corun
