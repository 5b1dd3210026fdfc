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
#include <pthread.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include <corun/runtime.hpp>

#include "arch/spin.hpp"
#include "base/probes.hpp"
#include "os/futex.hpp"
#include "os/numa.hpp"
#include "os/thread.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

namespace {

// Instrumented frames are several times larger under the sanitizers.
constexpr std::size_t kDefaultStackKb = (CORUN_ASAN || CORUN_TSAN) ? 256 : 64;

std::atomic<Runtime*> g_runtime{nullptr};  // release on publish, acquire on read
std::atomic<bool> g_active{false};         // a run() is in progress

// The last reference is gone: no thread touches rt any more, so its guarded fields need
// no lock (beyond the analysis).
void destroy_runtime(Runtime* rt) noexcept CORUN_NO_TSA {
  rt->timers.drain();   // timers still armed: abandoned (records freed) before the Ps go
  netpoll_destroy(rt);  // descriptors still open are rebound by a later run that uses them
  for (P* p : rt->ps) {
    task_cache_drain(p);
    p->~P();
    os::node_free(p, sizeof(P));
  }
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

  int nodes = (s.numa && rt->plan.numa_nodes > 1) ? rt->plan.numa_nodes : 1;
  for (int i = 0; i < nodes; i++) {
    os::StackOptions o;
    o.stack_bytes = rt->stack_bytes;
    o.numa_node = nodes > 1 ? i : -1;
    rt->stacks.push_back(std::make_unique<os::StackAllocator>(o));
  }
  for (int i = 0; i < rt->nprocs; i++) {
    const os::ProcPlace& place = rt->plan.procs[static_cast<std::size_t>(i)];
    int node = nodes > 1 && place.numa_node >= 0 ? place.numa_node : -1;
    void* mem = os::node_alloc(sizeof(P), alignof(P), node);
    P* p = ::new (mem) P();
    p->id = i;
    p->run_id = rt->run_id;
    p->os_cpu = place.os_cpu;
    p->numa_node = place.numa_node;
    p->victims = rt->plan.victim_groups(i);
    p->stacks = rt->stacks[node >= 0 ? static_cast<std::size_t>(node) : 0].get();
    p->rng = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(i + 1);
    p->own_timers.rt = rt.get();
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
  rt->stopping.store(true, std::memory_order_seq_cst);
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
  g_runtime.store(nullptr, std::memory_order_release);
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
  switch_to_g0(m->curg, Action::yield);
}

namespace sched {
void yield_if_preempted() noexcept {
  M* m = current_m();
  if (!m || !m->curg || !m->p) return;
  P* p = m->p;
  if (!p->preempt.load(std::memory_order_relaxed)) return;
  p->preempt.store(false, std::memory_order_relaxed);
  switch_to_g0(m->curg, Action::yield);
}
}  // namespace sched

namespace sched {
Runtime* caller_runtime() noexcept {
  M* m = current_m();
  return m ? m->rt : current_runtime();
}
Runtime* running_runtime() noexcept {
  return current_runtime();
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
  return (m && m->p) ? m->p->numa_node : -1;
}
}  // namespace sched

int procs() {
  Runtime* rt = caller_runtime();
  return rt ? rt->nprocs : 0;
}

int proc_id() {
  M* m = current_m();
  return (m && m->curg && m->p) ? m->p->id : -1;
}

namespace detail {

void* spawn_begin(std::size_t size, std::size_t align, TaskFn invoke, TaskFn destroy) {
  M* m = current_m();
  Runtime* rt = m ? m->rt : current_runtime();
  if (!rt || rt->stopping.load(std::memory_order_acquire))
    throw std::logic_error("corun::go called outside corun::run: no runtime is running");
  Task* t = task_alloc(rt, m ? m->p : nullptr, size, align, invoke, destroy);
  return t->closure;
}

void spawn_commit(void* closure) noexcept {
  Task* t = task_from_closure(closure);
  M* m = current_m();
  CORUN_PROBE2(spawn, t->id, (m && m->p) ? m->p->id : -1);
  if (m && m->p) {
    P* p = m->p;
    p->stat_spawned.store(p->stat_spawned.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
    runqput(m->rt, p, t, true);
    wakep_local(m->rt, p);
  } else {
    inject_global(m ? m->rt : current_runtime(), t);
  }
}

void spawn_abort(void* closure) noexcept {
  Task* t = task_from_closure(closure);
  M* m = current_m();
  Runtime* rt = m ? m->rt : current_runtime();
  task_free(rt, m ? m->p : nullptr, t);
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
