// sched/sysmon.cpp — the system monitor thread (Go's sysmon), holding no P.
//
// Jobs: retake Ps whose M has been inside one blocking() call for a whole sysmon tick
// (so a P never idles behind a thread stuck in read(2)); ask a P whose time slice has
// run 10 ms to end it (P::preempt, acted on at the next runnext pick, would-block
// channel operation or network call: corun cannot interrupt C++ code, Go preempts
// asynchronously; the P then looks at the global queue first, clear_preempt); print
// CORUN_DEBUG=schedtrace lines. It sleeps on a futex note with an absolute deadline:
// 20 µs ticks while some P is in blocking(), doubling up to 10 ms after 50 quiet ticks
// (Go's schedule); 10 ms while Ps only run tasks, and for the first second every P is
// idle; then no deadline at all — entering blocking() (sysmon_kick) or a P starting
// (acquirep) wakes it. An idle runtime therefore costs no wake-ups, a busy one 100 per
// second. It also runs overdue timers when Ps run and no M waits idle for them
// (sched/timers.hpp), so a P stuck in one long task holds its timers back 10 ms at most,
// and polls the network when nobody has for 10 ms (netpoll.hpp).
// Rejected: handing the P off at every blocking() entry (Go's entersyscallblock) — a
// futex wake and a thread switch per call, even for calls that return in a microsecond.
#include <cstdio>
#include <string>

#include <corun/runtime.hpp>
#include <corun/stats.hpp>

#include "os/thread.hpp"
#include "sched/fence.hpp"
#include "sched/sched.hpp"

namespace corun::detail {
PreemptHint preempt_hint;  // sysmon's: set_preempt_hint
}  // namespace corun::detail

namespace corun::sched {

namespace {

constexpr std::uint64_t kTickNs = 20'000;
constexpr std::uint64_t kMaxTickNs = 10'000'000;
constexpr std::uint64_t kForceRetakeNs = 10'000'000;
constexpr std::uint64_t kSliceNs = 10'000'000;    // Go's forcePreemptNS
constexpr std::uint64_t kPollNs = 10'000'000;     // poll when nobody has for this long
constexpr std::uint64_t kTrimNs = 1'000'000'000;  // idle task stacks go back after 1-2 s
constexpr int kIdleRounds = 100;  // one second of 10 ms looks before sleeping for good

// Returns idle task stacks' memory to the OS (os/stack.hpp trim()); true if some
// allocator still holds more than it keeps, so another trim is due.
bool trim_stacks(Runtime* rt) {
  bool surplus = false;
  for (auto& a : rt->stacks) {
    a->trim();
    surplus |= a->has_surplus();
  }
  return surplus;
}

// Asks a running P to end its time slice if it has not started a new one (slicetick,
// see sched.hpp) for kSliceNs.
void check_slice(P* p, std::uint64_t now) {
  std::uint32_t t = p->slicetick.load(std::memory_order_relaxed);
  if (t != p->sysmon_slicetick) {
    p->sysmon_slicetick = t;
    p->sysmon_slicewhen = now;
  } else if (now - p->sysmon_slicewhen >= kSliceNs) {
    p->preempt.store(true, std::memory_order_relaxed);
    p->sysmon_slicewhen = now;
  }
}

// Returns how many Ps it retook; *watching says whether any P is in blocking(),
// *running whether any P runs tasks, *preempt whether a running P has been asked to end
// its slice and has not yet (detail::preempt_hint).
int retake(Runtime* rt, std::uint64_t now, bool* watching, bool* running, bool* preempt) {
  int n = 0;
  for (P* p : rt->ps) {
    PStatus st = p->status.load(std::memory_order_acquire);
    if (st == PStatus::running) {
      *running = true;
      check_slice(p, now);
      *preempt |= p->preempt.load(std::memory_order_relaxed);
      continue;
    }
    if (st != PStatus::syscall) continue;
    *watching = true;
    std::uint32_t tick = p->syscalltick.load(std::memory_order_relaxed);
    if (p->sysmon_tick != tick) {  // a new blocking call since we last looked
      p->sysmon_tick = tick;
      p->sysmon_when = now;
      continue;
    }
    // Same call for a whole tick. Leave the P alone only if it has nothing queued and
    // others are idle or spinning to take new work — and not for more than 10 ms.
    if (p->runq.empty_hint() && rt->runq.empty_hint() &&
        rt->nmspinning.load(std::memory_order_relaxed) +
                rt->npidle.load(std::memory_order_relaxed) >
            0 &&
        now - p->sysmon_when < kForceRetakeNs)
      continue;
    PStatus expected = PStatus::syscall;
    // acq_rel: we take ownership of the P's owner-only state (released by entersyscall).
    if (p->status.compare_exchange_strong(expected, PStatus::idle, std::memory_order_acq_rel)) {
      handoffp(rt, p);
      n++;
    }
  }
  return n;
}

// detail::preempt_hint (<corun/runtime.hpp>), stored only when it changes: every poll of
// every P reads its line.
void set_preempt_hint(bool any) noexcept {
  if (detail::preempt_hint.any.load(std::memory_order_relaxed) != any)
    detail::preempt_hint.any.store(any, std::memory_order_relaxed);
}

void print_schedtrace(Runtime* rt, std::uint64_t now) {
  int idlethreads = 0, threads = 0, inblocking = 0;
  {
    base::Guard g(rt->lock);
    threads = static_cast<int>(rt->allm.size());
    for (M* m = rt->midle; m; m = m->link) idlethreads++;
    for (M* m : rt->allm) inblocking += m->in_blocking.load(std::memory_order_relaxed) ? 1 : 0;
  }
  // The per-P counters of corun::stats() (stats.cpp), so the two always agree.
  const corun::Stats st = corun::stats();
  std::string queues, runs, steals, spawned, parks, timers;
  auto add = [](std::string& s, std::uint64_t v) {
    s += (s.empty() ? "" : " ") + std::to_string(v);
  };
  for (P* p : rt->ps) add(queues, p->runq.size_hint());
  for (const corun::ProcStats& p : st.procs) {
    add(runs, p.tasks_run);
    add(steals, p.steals);
    add(spawned, p.tasks_spawned);
    add(parks, p.parks);
    add(timers, p.timers_fired);
  }
  std::fprintf(
      stderr,
      "corun: SCHED %llums: procs=%d idleprocs=%d threads=%d spinningthreads=%d "
      "idlethreads=%d blockingthreads=%d runqueue=%u [%s] runs=[%s] steals=[%s] "
      "spawned=[%s] parks=[%s] timers=[%s] netpolls=%llu timerspin=%lldns timerwindow=%lldns\n",
      static_cast<unsigned long long>((now - rt->start_ns) / 1000000), rt->nprocs,
      rt->npidle.load(std::memory_order_relaxed), threads,
      rt->nmspinning.load(std::memory_order_relaxed), idlethreads, inblocking, rt->runq.size_hint(),
      queues.c_str(), runs.c_str(), steals.c_str(), spawned.c_str(), parks.c_str(), timers.c_str(),
      static_cast<unsigned long long>(st.netpolls), static_cast<long long>(idle_early_ns(rt)),
      static_cast<long long>(idle_spin_window_ns(rt)));
}

void* sysmon_main(void* arg) {
  Runtime* rt = static_cast<Runtime*>(arg);
  os::set_thread_name("corun-sysmon");
  os::set_timer_slack_ns(rt->settings.timerslack_ns);
  // ~7 x 20-70 µs of sleeping, off every P's path: the first timers are spun for as
  // late as this machine's kernel wakes (idle.hpp, TimerSpin).
  if (rt->settings.timer_spin_auto && rt->settings.timer_spin_ns == 0) idle_calibrate(rt);
  const std::uint64_t trace_ns = rt->settings.schedtrace_ms * 1000000;
  std::uint64_t next_trace = trace_ns ? rt->start_ns + trace_ns : 0;
  std::uint64_t tick = kTickNs;
  std::uint64_t next_trim = 0;  // 0: no trim due (nothing surplus when we last looked)
  int quiet = 0;
  int idle_rounds = 0;  // consecutive looks with every P idle
  while (!rt->stopping.load(std::memory_order_acquire)) {
    std::uint64_t now = os::monotonic_ns();
    bool watching = false, running = false, preempt = false;
    int retook = retake(rt, now, &watching, &running, &preempt);
    set_preempt_hint(preempt);
    if (next_trim == 0) {
      // relaxed: a hint from the exit path (no lock on this 20 us tick); trim() decides.
      if (rt->stack_surplus.exchange(false, std::memory_order_relaxed))
        next_trim = now + kTrimNs;  // give them a period to be reused first
    } else if (now >= next_trim) {
      next_trim = trim_stacks(rt) ? now + kTrimNs : 0;
    }
    if (trace_ns && now >= next_trace) {
      print_schedtrace(rt, now);
      next_trace += trace_ns;
      if (next_trace < now) next_trace = now + trace_ns;
    }
    if (retook) {
      quiet = 0;
      tick = kTickNs;
    } else if (++quiet > 50 && tick < kMaxTickNs) {
      tick *= 2;
    }
    // Timers of Ps stuck in long tasks, or in blocking(), when no M waits idle for them.
    if (!idle_has_waiter(rt)) rt->timers.run_due(static_cast<std::int64_t>(now));
    // I/O nobody has polled for 10 ms (every P busy in long tasks): Go's sysmon does this.
    if (netpoll_worth(rt) &&
        static_cast<std::int64_t>(now) - rt->netpoll.lastpoll.load(std::memory_order_relaxed) >
            static_cast<std::int64_t>(kPollNs))
      inject_list(rt, netpoll(rt, 0));
    idle_rounds = running ? 0 : idle_rounds + 1;
    if (!watching) {
      // No blocking() call to watch. With Ps running, look again in one time slice;
      // likewise for the first second all are idle (a P that idles between sleeps
      // and wakes every few µs must not pay a futex wake of sysmon each time); after
      // that, sleep until a kick: a P entering blocking() (sysmon_kick), a P started
      // (acquirep, sysmon_wake_idle), the next trace or trim, or shutdown.
      const bool deep = !running && idle_rounds > kIdleRounds;
      const std::uint32_t mode = deep ? kSysmonIdle : kSysmonSlices;
      rt->sysmon_note.clear();
      rt->sysmon_mode.store(mode, std::memory_order_seq_cst);
      full_fence();
      bool any = false;
      for (P* p : rt->ps) {
        PStatus st = p->status.load(std::memory_order_relaxed);
        any |= deep ? st != PStatus::idle : st == PStatus::syscall;
      }
      if (!any && !rt->stopping.load(std::memory_order_acquire)) {
        std::uint64_t until = deep ? UINT64_MAX : now + kSliceNs;
        if (trace_ns && next_trace < until) until = next_trace;
        if (next_trim && next_trim < until) until = next_trim;
        if (until == UINT64_MAX)
          rt->sysmon_note.sleep();
        else
          rt->sysmon_note.sleep_until(until);
      }
      rt->sysmon_mode.store(kSysmonWatching, std::memory_order_relaxed);
      quiet = 0;
      tick = kTickNs;
      continue;  // (a kick for surplus stacks lands here and sets next_trim above)
    }
    std::uint64_t deadline = now + tick;
    if (trace_ns && next_trace < deadline) deadline = next_trace;
    rt->sysmon_note.clear();
    rt->sysmon_note.sleep_until(deadline);
  }
  return nullptr;
}

}  // namespace

void sysmon_start(Runtime* rt) {
  int err = pthread_create(&rt->sysmon_thread, nullptr, sysmon_main, rt);
  if (err != 0) {
    std::fprintf(stderr, "corun: cannot create the sysmon thread: error %d\n", err);
    std::abort();
  }
  rt->sysmon_started = true;
}

void sysmon_stop(Runtime* rt) {
  if (!rt->sysmon_started) return;
  rt->sysmon_note.wakeup();
  pthread_join(rt->sysmon_thread, nullptr);
  rt->sysmon_started = false;
  set_preempt_hint(false);  // the next run starts with none
}

void sysmon_kick(Runtime* rt) noexcept {
  // seq_cst fence: our P status store (before the call) vs sysmon's idle flag store,
  // store-buffering pattern; one of us sees the other.
  full_fence();
  if (rt->sysmon_mode.load(std::memory_order_relaxed) != kSysmonWatching) rt->sysmon_note.wakeup();
}

void sysmon_wake_idle(Runtime* rt) noexcept {
  // Called by acquirep after it marked a P running. The fence orders that status store
  // before our load of sysmon's mode (store-buffering against sysmon's mode store and
  // status scan, as in sysmon_kick). Only on an idle -> running transition of a P, which
  // already cost a futex wake or a thread start.
  full_fence();
  if (rt->sysmon_mode.load(std::memory_order_relaxed) == kSysmonIdle) rt->sysmon_note.wakeup();
}

}  // namespace corun::sched
