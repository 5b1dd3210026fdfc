// sched/sched.cpp — the M loop: find a task, run it, handle what it asked for.
//
// find_runnable() order (Go's findRunnable):
//   0. the P's safe point if one was requested (safepoint.cpp), and the P's own due timers
//      (what they ready lands in runnext);
//   1. every 61st schedule, one task from the global queue (a P with a busy ring must
//      not starve the global queue), after every P's due timers;
//   2. runnext, then the local ring;
//   3. the global queue (a batch: its share of the queue, up to half a ring), then the
//      network poller, non-blocking, if a task waits on I/O and no M blocks in it;
//   4. stealing, if this M is spinning or fewer than half the busy Ps' Ms spin: four
//      passes over the victims nearest first, runnext only on the last pass;
//   5. due timers of any P, or a deadline closer than a sleep can honour, spun for;
//   6. give the P back, re-check (see the spinning invariant in sched.hpp), park the M —
//      in the idle wait if no other M waits there (idle.cpp), which blocks in the
//      poller until the earliest timer once the runtime has descriptors.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "arch/cpu.hpp"
#include "base/check.hpp"
#include "base/probes.hpp"
#include "os/thread.hpp"
#include "sched/eh_state.hpp"
#include "sched/fence.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

constinit thread_local M* tls_m asm("corun_tls_m")
    __attribute__((tls_model("initial-exec"))) = nullptr;
constinit thread_local ProcTls tls_proc __attribute__((tls_model("initial-exec")));
// <corun/proc_tls.hpp> this_proc_key's ordering operand: never written.
extern "C" {
constinit char corun_proc_order = 0;
}

// noinline + an asm memory clobber: the call is never merged with one made before a
// context switch, so a task that moved threads sees its new M.
__attribute__((noinline)) M* current_m_slow() noexcept {
  asm volatile("" ::: "memory");
  return tls_m;
}
__attribute__((noinline)) void set_current_m(M* m) noexcept {
  asm volatile("" ::: "memory");
  tls_m = m;
}

void pidleput(Runtime* rt, P* p) noexcept {
  p->m = nullptr;
  // release: the next holder (pidleget under the same lock) sees our owner-only writes;
  // the lock already orders them, the release is for lock-free readers of status.
  p->status.store(PStatus::idle, std::memory_order_release);
  p->link = rt->pidle;
  rt->pidle = p;
  rt->npidle.fetch_add(1, std::memory_order_seq_cst);  // seq_cst: spinning invariant
}

P* pidleget(Runtime* rt, P* pref) noexcept {
  P** at = &rt->pidle;
  if (pref && pref->status.load(std::memory_order_relaxed) == PStatus::idle) {
    // Walk to it: idle transitions only, and the list is short where it is long-lived
    // (a busy runtime has few idle Ps).
    for (P** q = &rt->pidle; *q; q = &(*q)->link)
      if (*q == pref) {
        at = q;
        break;
      }
  }
  P* p = *at;
  if (p) {
    *at = p->link;
    p->link = nullptr;
    rt->npidle.fetch_sub(1, std::memory_order_seq_cst);
  }
  return p;
}

namespace {
// An idle M for p: preferably one already pinned to p's CPU (a re-pin migrates the
// thread: ~50 µs of sched_setaffinity), else the most recently idled one.
// Removes it from the idle list; nullptr if the list is empty. Under rt->lock.
M* midleget(Runtime* rt, P* p) noexcept {
  M** at = &rt->midle;
  if (p && p->os_cpu >= 0)
    for (M** q = &rt->midle; *q; q = &(*q)->link)
      if ((*q)->pinned_cpu == p->os_cpu) {
        at = q;
        break;
      }
  M* m = *at;
  if (m) {
    *at = m->link;
    m->link = nullptr;
    m->in_midle = false;
  }
  return m;
}
}  // namespace

void acquirep(M* m, P* p) noexcept {
  Runtime* rt = m->rt;
  p->m = m;
  set_mp(m, p);
  m->lastp = p;
  p->status.store(PStatus::running, std::memory_order_release);
  sysmon_wake_idle(rt);  // a P runs again: time slices to watch
  if (rt->settings.pin && rt->plan.pinnable && p->os_cpu >= 0 && m->pinned_cpu != p->os_cpu) {
    int err = os::pin_current_thread(p->os_cpu);
    if (err != 0) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true, std::memory_order_relaxed))
        std::fprintf(stderr, "corun: cannot pin thread to cpu %d: %s; running unpinned\n",
                     p->os_cpu, std::strerror(err));
    }
    m->pinned_cpu = p->os_cpu;
  }
}

void runq_overflow(Runtime* rt, Task* batch, std::uint32_t n) noexcept {
  Task* last = batch;
  while (last->next) last = last->next;
  rt->runq.push_batch(batch, last, n);
}

Task* runq_get_preempted(P* p, Task* next) noexcept {
  LocalEnd local(p->runq);
  Task* head = local.pop_ring();
  new_slice(p);
  if (!head) return next;
  runqput(p->m->rt, p, next, false);  // the hand-off chain waits its turn
  return head;
}

void inject_global(Runtime* rt, Task* t) noexcept {
  t->state.store(TaskState::runnable, std::memory_order_relaxed);
  rt->runq.push(t);
  // Full fence: pairs with find_runnable's after an M idles its P. Work in the global
  // queue belongs to no running P, so without it every M could sleep on it.
  full_fence();
  wakep(rt);
}

void inject_list(Runtime* rt, Task* list) noexcept {
  if (!list) return;
  Task* last = list;
  std::uint32_t n = 1;
  list->state.store(TaskState::runnable, std::memory_order_relaxed);
  while (last->next) {
    last = last->next;
    last->state.store(TaskState::runnable, std::memory_order_relaxed);
    n++;
  }
  rt->runq.push_batch(list, last, n);
  full_fence();  // as inject_global
  for (std::uint32_t i = 0; i < n && rt->npidle.load(std::memory_order_relaxed) > 0; i++)
    startm(rt, nullptr, false);
}

namespace {
// Tasks from the poller, on p (its owner): the first to run now, the rest queued on p
// (overflowing to the global queue) with a wake-up for an idle P if there are any.
Task* take_polled(Runtime* rt, P* p, Task* list) noexcept {
  Task* t = list;
  Task* rest = list->next;
  t->next = nullptr;
  t->state.store(TaskState::runnable, std::memory_order_relaxed);
  if (!rest) return t;
  while (rest) {
    Task* nx = rest->next;
    rest->next = nullptr;
    runqput(rt, p, rest, false);
    rest = nx;
  }
  wakep(rt);
  return t;
}
}  // namespace

void ready(Task* t) noexcept {
  CORUN_CHECK(t->state.load(std::memory_order_relaxed) == TaskState::waiting,
              "task %llu made ready while not parked (state %u): readied twice?",
              static_cast<unsigned long long>(t->id),
              static_cast<unsigned>(t->state.load(std::memory_order_relaxed)));
  M* m = current_m();
  CORUN_PROBE2(ready, t->id, (m && m->p) ? m->p->id : -1);
  if (m && m->p) {
    runqput(m->rt, m->p, t, true);
    wakep_local(m->rt, m->p);
  } else if (m) {
    inject_global(m->rt, t);
  } else {
    // Not an M (a foreign thread's channel operation, sysmon firing a timer): inside the
    // foreign gate (runtime.cpp). With the run stopping or gone, t is abandoned with it.
    foreign_enter();
    if (Runtime* rt = foreign_runtime()) inject_global(rt, t);
    foreign_leave();
  }
}

void wakep_local(Runtime* rt, P* p) noexcept {
  if (p->defer_wake) {
    p->defer_wake++;
    return;
  }
  wakep(rt);
}

bool run_own_timers(Runtime* rt, P* p) noexcept {
  p->defer_wake = 1;
  bool ran = p->timers->check();
  // The first task they readied runs on this M next; only a second one needs another M.
  if (p->defer_wake > 2) wakep(rt);
  p->defer_wake = 0;
  return ran;
}

void wakep(Runtime* rt) noexcept {
  // No fence here (Go has none either): after a push to our own P's queue a stale read
  // may skip a wake-up, costing parallelism, never the task, which our own P runs next.
  // Pushes to the global queue fence first (inject_global).
  if (rt->npidle.load(std::memory_order_relaxed) == 0) return;
  if (rt->nmspinning.load(std::memory_order_relaxed) != 0) return;
  int expected = 0;
  if (!rt->nmspinning.compare_exchange_strong(expected, 1, std::memory_order_seq_cst)) return;
  startm(rt, nullptr, true);
}

void startm(Runtime* rt, P* p, bool spinning) {
  M* m = nullptr;
  bool took_waiter = false;
  {
    base::Guard g(rt->lock);
    if (!p) {
      p = pidleget(rt);
      if (!p) {
        if (spinning) rt->nmspinning.fetch_sub(1, std::memory_order_seq_cst);
        return;
      }
    }
    if (rt->stopping.load(std::memory_order_acquire)) {
      pidleput(rt, p);
      if (spinning) rt->nmspinning.fetch_sub(1, std::memory_order_seq_cst);
      return;
    }
    m = midleget(rt, p);
    // The idle waiter only when no other M idles, so the wait rarely changes hands; with
    // none idle there is nobody to hand it to (Ps are all running or starting).
    if (!m) {
      m = idle_take(rt);
      took_waiter = m != nullptr;
    }
    if (m) {
      // Under the lock: the waiter, awake on its own, tells "handed a P" from "timer
      // due" by reading idle.waiter/nextp under this lock (idle_wait).
      m->nextp = p;
      m->spinning = spinning;
    }
  }
  if (!m) {
    new_m(rt, p, spinning);
  } else {
    m->park.wakeup();                    // release: publishes nextp/spinning
    if (took_waiter) netpoll_break(rt);  // it may be blocked in the poller
  }
}

void handoffp(Runtime* rt, P* p) {
  // Work, or timers that no idle M waits for (the M stuck in blocking() was the only one
  // looking at them): give the P an M, which runs them or idles and becomes the waiter.
  if (!p->runq.empty_hint() || !rt->runq.empty_hint() ||
      ((p->timers->next() != TimerHeap::kNever ||
        rt->netpoll.waiters.load(std::memory_order_relaxed) > 0) &&
       !idle_has_waiter(rt))) {
    startm(rt, p, false);
    return;
  }
  int expected = 0;
  if (rt->nmspinning.load(std::memory_order_relaxed) + rt->npidle.load(std::memory_order_relaxed) ==
          0 &&
      rt->nmspinning.compare_exchange_strong(expected, 1, std::memory_order_seq_cst)) {
    startm(rt, p, true);
    return;
  }
  for (;;) {
    base::Guard g(rt->lock);
    if (p->safepoint.load(std::memory_order_relaxed) == kSafepointAsked) {  // we hold p
      g.unlock();
      run_safepoint_slow(p);
      continue;
    }
    pidleput(rt, p);
    break;
  }
  // Work may have arrived between the check and pidleput.
  full_fence();
  if (!rt->runq.empty_hint()) wakep(rt);
}

void handle_action(M* m, Task* t) noexcept {
  Runtime* rt = m->rt;
  Action a = m->action;
  m->action = Action::none;
  switch (a) {
    case Action::park: {
      t->state.store(TaskState::waiting, std::memory_order_relaxed);
      void (*commit)(void*) = m->commit;
      void* arg = m->commit_arg;
      m->commit = nullptr;
      CORUN_PROBE2(park, t->id, m->p ? m->p->id : -1);
      commit(arg);  // after this, another thread may ready and run t
      break;
    }
    case Action::yield:
      t->yielded = true;  // direct_next looks at the P's timers before running it again
      runqput(rt, m->p, t, false);
      break;
    case Action::exit:
      t->state.store(TaskState::dead, std::memory_order_relaxed);
      task_free(rt, m->p, t);
      break;
    case Action::syscall_exit:
      // Back from blocking() with no P free: the task waits in the global queue.
      inject_global(rt, t);
      break;
    case Action::none:
      std::fprintf(stderr,
                   "corun: internal error: task %llu switched to the scheduler "
                   "without saying why\n",
                   static_cast<unsigned long long>(t->id));
      std::abort();
  }
}

namespace {

void reset_spinning(M* m) noexcept {
  m->spinning = false;
  int left = m->rt->nmspinning.fetch_sub(1, std::memory_order_seq_cst) - 1;
  // We were the last spinner and found work: there may be more, keep someone looking.
  if (left == 0) wakep(m->rt);
}

Task* globrunqget(Runtime* rt, P* p, std::uint32_t max) noexcept {
  if (rt->runq.empty_hint()) return nullptr;
  std::uint32_t n = rt->runq.size_hint() / static_cast<std::uint32_t>(rt->nprocs) + 1;
  if (max && n > max) n = max;
  if (n > RunQueue::kSize / 2) n = RunQueue::kSize / 2;
  Task* rest = nullptr;
  std::uint32_t nrest = 0;
  Task* t = rt->runq.pop_batch(n, &rest, &nrest);
  while (rest) {
    Task* nx = rest->next;
    runqput(rt, p, rest, false);
    rest = nx;
  }
  return t;
}

Task* steal_work(Runtime* rt, P* p) noexcept {
  LocalEnd local(p->runq);
  constexpr int kPasses = 4;
  for (int pass = 0; pass < kPasses; pass++) {
    bool last = pass == kPasses - 1;
    for (const os::VictimGroup& g : p->victims) {
      // The group from its start, wrapping around: the rotation (os/topology.hpp).
      for (int k = 0, i = g.start; k < g.n; ++k, i = i + 1 == g.n ? 0 : i + 1) {
        const int v = g.ids[i];
        if (v == p->id) continue;  // the same-PU group under oversubscription holds us
        if (rt->stopping.load(std::memory_order_relaxed)) return nullptr;
        P* vp = rt->ps[static_cast<std::size_t>(v)];
        if (!last && vp->runq.empty_hint()) continue;
        bool running = vp->status.load(std::memory_order_relaxed) == PStatus::running;
        std::uint32_t n = StealEnd(vp->runq).steal_into(local, last, running, *rt->backoff);
        if (n == 0) continue;
        Task* t = local.publish_stolen(n);
        CORUN_PROBE3(steal, p->id, vp->id, n);
        bump(p->stats.steals, n);
        return t;
      }
    }
  }
  return nullptr;
}

bool any_work(Runtime* rt) noexcept {
  if (!rt->runq.empty_hint()) return true;
  for (P* p : rt->ps)
    if (!p->runq.empty_hint()) return true;
  return false;
}

// Parks this M until startm hands it a P (m->p set on return) or the runtime stops.
// With nobody in the idle wait, this M becomes the waiter (idle.cpp). An M leaves the idle
// list only when someone removes it under rt->lock (startm, shutdown); any other wake-up
// — a stale idle_wake() aimed at a former waiter — is spurious and it sleeps again.
void stopm(M* m) {
  Runtime* rt = m->rt;
  base::Guard g(rt->lock);
  for (;;) {
    if (rt->stopping.load(std::memory_order_acquire)) return;
    if (m->nextp) break;  // handed a P
    if (idle_try_become(rt, m)) {
      g.unlock();
      idle_wait(m);  // returns once it no longer waits: with a P, or stopping
      g.lock();
      continue;
    }
    if (!m->in_midle) {
      m->link = rt->midle;
      rt->midle = m;
      m->in_midle = true;
    }
    m->park.clear();
    g.unlock();
    m->park.sleep();
    g.lock();
  }
  P* p = m->nextp;
  m->nextp = nullptr;
  g.unlock();
  acquirep(m, p);
}

// When heap h (of P vp) is another thread's to run: at its earliest deadline e, or
// kOwnerLagNs after it while vp runs. seq_cst status load: pairs with the seq_cst fence
// after pidleput in find_runnable (a P idling with timers wakes the waiter, idle_wake).
std::int64_t takeable_at(const P* vp, const Timers* h, std::int64_t e) noexcept {
  if (e == TimerHeap::kNever || h != &vp->own_timers) return e;  // global mode: anyone's
  if (vp->status.load(std::memory_order_seq_cst) != PStatus::running) return e;
  return e > TimerHeap::kNever - kOwnerLagNs ? TimerHeap::kNever : e + kOwnerLagNs;
}
}  // namespace

std::int64_t timers_idle_next(const Runtime* rt) noexcept {
  std::int64_t w = TimerHeap::kNever;
  for (const P* vp : rt->ps) {
    const Timers* h = vp->timers;
    w = std::min(w, takeable_at(vp, h, h->next(std::memory_order_seq_cst)));
    if (h != &vp->own_timers) break;  // global mode: one heap
  }
  return w;
}

std::int64_t timers_spin_next(const Runtime* rt, const P* p) noexcept {
  std::int64_t w = TimerHeap::kNever;
  for (const P* vp : rt->ps) {
    const Timers* h = vp->timers;
    const std::int64_t e = h->next(std::memory_order_seq_cst);
    w = std::min(w, vp == p ? e : takeable_at(vp, h, e));
    if (h != &vp->own_timers) break;  // global mode: one heap
  }
  return w;
}

std::int64_t timers_waiter_next(const Runtime* rt, std::int64_t lag, bool* precise) noexcept {
  std::int64_t w = TimerHeap::kNever, fallback = TimerHeap::kNever;
  for (const P* vp : rt->ps) {
    const Timers* h = vp->timers;
    const std::int64_t e = h->next(std::memory_order_seq_cst);  // as timers_idle_next
    // seq_cst status load, as takeable_at's: a P that idles after we read "running" wakes
    // us (idle_wake after its fence in find_runnable), and we plan again, precisely.
    if (e == TimerHeap::kNever) {
    } else if (h == &vp->own_timers &&
               vp->status.load(std::memory_order_seq_cst) == PStatus::running) {
      fallback = std::min(fallback, e > TimerHeap::kNever - lag ? TimerHeap::kNever : e + lag);
    } else {
      w = std::min(w, e);
    }
    if (h != &vp->own_timers) break;  // global mode: one heap
  }
  *precise = w <= fallback;
  return std::min(w, fallback);
}

bool run_due_timers(Runtime* rt, P* p, std::int64_t now) noexcept {
  if (now == 0) {
    std::int64_t e = rt->timers.next();
    if (e == TimerHeap::kNever) return false;
    now = static_cast<std::int64_t>(os::monotonic_ns());
    if (e > now) return false;
  }
  bool any = false;
  for (P* vp : rt->ps) {
    Timers* h = vp->timers;
    const std::int64_t e = h->next();
    if (e <= now && (vp == p || takeable_at(vp, h, e) <= now) && h->check(now)) any = true;
    if (h != &vp->own_timers) break;  // global mode: one heap
  }
  return any;
}

namespace {

Task* find_runnable(M* m) {
  Runtime* rt = m->rt;
  for (;;) {
    if (rt->stopping.load(std::memory_order_acquire)) return nullptr;
    P* p = m->p;
    if (!p) {
      stopm(m);
      continue;
    }
    Task* t = nullptr;
    if (m->polled) {  // from the idle wait's poll, which got us this P
      t = take_polled(rt, p, m->polled);
      m->polled = nullptr;
      new_slice(p);
      return t;
    }
    run_safepoint(p);
    run_own_timers(rt, p);  // what they ready lands in runnext
    // Every 61st schedule, the global queue first (Go's fairness rule; a countdown, not a
    // division, on this path).
    if (p->global_countdown <= 1) {  // never 0 by design; <= keeps a slip from wrapping
      p->global_countdown = 61;
      // Likewise every P's overdue timers, so a P stuck in one long task does not hold
      // its timers back until sysmon looks (10 ms) while this one keeps scheduling.
      if (rt->timers.size() > 1) run_due_timers(rt, p, 0);
      if ((t = globrunqget(rt, p, 1))) {
        new_slice(p);
        return t;
      }
    } else {
      p->global_countdown--;
    }
    if ((t = runq_get(p))) return t;
    if ((t = globrunqget(rt, p, 0))) {
      new_slice(p);
      return t;
    }
    // The poller, before stealing (Go's order): the tasks I/O readied run here.
    if (netpoll_worth(rt)) {
      if (Task* list = netpoll(rt, 0)) {
        new_slice(p);
        return take_polled(rt, p, list);
      }
    }

    int busy = rt->nprocs - rt->npidle.load(std::memory_order_relaxed);
    if (m->spinning || 2 * rt->nmspinning.load(std::memory_order_relaxed) < busy) {
      if (!m->spinning) {
        m->spinning = true;
        rt->nmspinning.fetch_add(1, std::memory_order_seq_cst);
      }
      if ((t = steal_work(rt, p))) {
        new_slice(p);
        return t;
      }
    }

    // Before idling: timers due on any P (one stuck in a long task, or idle), or due
    // sooner than a sleep could honour. No clock read when no P has a timer.
    if (rt->timers.next() != TimerHeap::kNever) {
      std::int64_t now = static_cast<std::int64_t>(os::monotonic_ns());
      if (run_due_timers(rt, p, now)) continue;
      // Spinning for a timer is not looking for work: stop counting as a spinning M first,
      // so a task readied elsewhere meanwhile still wakes an M (wakep), and what our timer
      // readies runs here without reset_spinning waking another M for it. Go's rule for
      // the last spinner to stop: look at every queue again after the fence.
      if (m->spinning) {
        m->spinning = false;
        rt->nmspinning.fetch_sub(1, std::memory_order_seq_cst);
        full_fence();  // as before idling below: pairs with inject_global's
        if (any_work(rt)) continue;
      }
      if (idle_spin_short(rt, p, now)) continue;
    }

    // Nothing anywhere: give the P back. A safe point requested before we took the lock
    // is ours to run (the requester saw the P running); one after it finds the P idle.
    {
      base::Guard g(rt->lock);
      if (p->safepoint.load(std::memory_order_relaxed) == kSafepointAsked) {
        g.unlock();
        run_safepoint_slow(p);
        continue;
      }
      pidleput(rt, p);
      set_mp(m, nullptr);
    }
    bool was_spinning = m->spinning;
    if (was_spinning) {
      m->spinning = false;
      rt->nmspinning.fetch_sub(1, std::memory_order_seq_cst);
    }
    // Full fence: pairs with inject_global's; after it we see any work pushed to the
    // global queue before its producer looked at npidle/nmspinning. It also orders our
    // P's status (idle) before the load of the waiter's deadline below.
    full_fence();
    // Our timers are anyone's now: a waiter that scanned while we ran (its backstop lag
    // added to them, timers_waiter_next) and sleeps past them must look again. Pairs with
    // timers_idle_next's seq_cst status load after the waiter's seq_cst store of its deadline.
    if (p->timers == &p->own_timers)
      if (std::int64_t e = p->timers->next(); e != TimerHeap::kNever) idle_wake(rt, e, false);
    bool work = was_spinning ? any_work(rt) : !rt->runq.empty_hint();
    if (work) {
      P* np = nullptr;
      {
        base::Guard g(rt->lock);
        np = pidleget(rt, m->lastp);
      }
      if (np) {
        acquirep(m, np);
        if (was_spinning) {
          m->spinning = true;
          rt->nmspinning.fetch_add(1, std::memory_order_seq_cst);
        }
        continue;
      }
    }
    CORUN_PROBE1(spinning_idle, p->id);
    stopm(m);
  }
}

void schedule_loop(M* m) {
  for (;;) {
    Task* t = find_runnable(m);
    if (!t) return;
    CORUN_DCHECK(t->state.load(std::memory_order_relaxed) == TaskState::runnable,
                 "task %llu dequeued in state %u", static_cast<unsigned long long>(t->id),
                 static_cast<unsigned>(t->state.load(std::memory_order_relaxed)));
    CORUN_DCHECK(m->p != nullptr, "M%d about to run a task without a P", m->id);
    if (m->spinning) reset_spinning(m);
    if (m->p) bump(m->p->stats.runs);
    Task* back = switch_to_task(m, t);  // t, or a task t switched to directly
    // A yielder (or a preempted task) queues behind what its P's due timers ready: Go's
    // Gosched puts it on the global queue, behind every local task. Queued first, it ran
    // before all but the last of a batch of timer-woken tasks (each ready pushes the
    // previous runnext to the tail), and a busy loop's yields held them back a turn.
    // Not once the run is stopping: find_runnable runs no timer then either, and foreign
    // threads treat a stopping runtime's timers as no longer fired by any M.
    if (m->action == Action::yield && m->p && !m->rt->stopping.load(std::memory_order_acquire))
      run_own_timers(m->rt, m->p);
    handle_action(m, back);
  }
}

}  // namespace

void mstart(M* m) {
  Runtime* rt = m->rt;
  set_current_m(m);
  char name[16];
  std::snprintf(name, sizeof name, "corun-m%d", m->id);
  os::set_thread_name(name);
  os::set_timer_slack_ns(rt->settings.timerslack_ns);
  os::thread_altstack_setup();
  arch::san_init_thread(m->g0san);
  m->eh_globals = EhState::thread_record();
  if (m->nextp) {
    P* p = m->nextp;
    m->nextp = nullptr;
    acquirep(m, p);
  }
  schedule_loop(m);
  if (m->p) {
    base::Guard g(rt->lock);
    pidleput(rt, m->p);
    set_mp(m, nullptr);
  }
  os::thread_altstack_teardown();
  set_current_m(nullptr);
}

}  // namespace corun::sched
