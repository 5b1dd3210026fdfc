// sched/netpoll.cpp — poll records, their semaphores and deadlines, and the
// mechanism-independent half of the poller (contract and invariants: netpoll.hpp).
//
// A wait (Go's netpollblock): CAS the direction's semaphore kReady -> kNil (a
// notification arrived: done) or kNil -> kWait; check closing/expired; park; the park
// commit CASes kWait -> the task, or, if a waker got there first (kWait -> kNil/kReady),
// readies the task at once. After resuming, the semaphore is swapped back to kNil: kReady
// means I/O, anything else a deadline, a close, or a spurious wake, which the caller
// tells apart with check(). Deadlines are TimerNodes in the setting task's P heap; the
// fire takes the record's lock, expires the deadline only if it has really passed by the
// firing clock (a moved or reused record's stale fire does nothing), and wakes the waiter.
// Rejected: a mutex-and-condition wait per direction (two locks per readiness event on
// the hot path where one CAS does).
#include "sched/netpoll.hpp"

#include <poll.h>
#include <sched.h>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <new>
#include <stdexcept>
#include <system_error>

#include "base/check.hpp"
#include "base/probes.hpp"
#include "os/thread.hpp"
#include "sched/fence.hpp"
#include "sched/park.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

// ---- the record cache (Go's pollCache) ----------------------------------------------------

class PollCache {
 public:
  PollDesc* alloc() {
    base::Guard g(lock_);
    if (!free_) {
      constexpr int kChunk = 64;  // records per allocation; never freed (netpoll.hpp)
      auto* chunk = new PollDesc[kChunk];
      for (int i = 0; i < kChunk; i++) {
        // Set once for the record's life: a stale deadline fire may read them while the
        // record is reopened for another descriptor.
        chunk[i].rtimer_.pd = chunk[i].wtimer_.pd = &chunk[i];
        chunk[i].rtimer_.write = false;
        chunk[i].wtimer_.write = true;
        chunk[i].link_ = free_;
        free_ = &chunk[i];
      }
    }
    PollDesc* pd = free_;
    free_ = pd->link_;
    pd->link_ = nullptr;
    return pd;
  }
  void free(PollDesc* pd) noexcept {
    base::Guard g(lock_);
    pd->link_ = free_;
    free_ = pd;
  }

 private:
  base::Lock<base::LockRank::poll_cache> lock_;
  PollDesc* free_ CORUN_GUARDED_BY(lock_) = nullptr;
};

namespace {
PollCache& cache() {
  static PollCache* c = new PollCache;  // never destroyed: records outlive every run
  return *c;
}

void netpoll_ready_list(Task** list, Task* t) noexcept {
  t->next = *list;
  *list = t;
}
}  // namespace

// ---- the poller ---------------------------------------------------------------------------

void netpoll_init(Runtime* rt) {
  Netpoll& np = rt->netpoll;
  if (np.inited.load(std::memory_order_acquire)) return;
  static std::mutex init_mu;  // rare: the first open of a run
  std::lock_guard<std::mutex> g(init_mu);
  if (np.inited.load(std::memory_order_acquire)) return;
  np.timerfd = rt->settings.netpoll_timerfd;
  sys::init(np);
  {
    // Under sched.lock: the idle waiter checked `inited` before its futex sleep, after
    // its own lock section; it either sees inited now or is woken here (idle.cpp).
    base::Guard l(rt->lock);
    np.inited.store(true, std::memory_order_release);
    if (M* w = rt->idle.waiter.load(std::memory_order_relaxed)) w->park.wakeup();
  }
}

void netpoll_destroy(Runtime* rt) noexcept {
  if (rt->netpoll.inited.load(std::memory_order_acquire)) sys::destroy(rt->netpoll);
}

void netpoll_break(Runtime* rt) noexcept {
  Netpoll& np = rt->netpoll;
  if (!np.inited.load(std::memory_order_acquire)) return;
  std::uint32_t expect = 0;
  // seq_cst, after the waker's note store: if this fails because the last poller has not
  // cleared wake_sig yet, the next poller, which claims Netpoll::blocking after that clear
  // (seq_cst), sees the note and does not block (netpoll's `stop`).
  full_fence();
  if (np.wake_sig.compare_exchange_strong(expect, 1, std::memory_order_seq_cst)) sys::wakeup(np);
}

bool netpoll_worth(const Runtime* rt) noexcept {
  const Netpoll& np = rt->netpoll;
  return np.waiters.load(std::memory_order_relaxed) > 0 &&
         np.lastpoll.load(std::memory_order_relaxed) != 0 &&
         np.inited.load(std::memory_order_acquire);
}

Task* netpoll(Runtime* rt, std::int64_t until, const Note* stop) {
  Netpoll& np = rt->netpoll;
  if (!np.inited.load(std::memory_order_acquire)) return nullptr;
  constexpr int kMax = 128;
  sys::Event evs[kMax];
  const bool blocks = until != 0;
  if (blocks) {
    // One blocking poller at a time (Netpoll::blocking). A previous waiter still on its
    // way out of the poller was broken out of it: it leaves within microseconds.
    while (np.blocking.exchange(true, std::memory_order_seq_cst)) sched_yield();
    // Woken while we waited for the poller: a break skipped because the previous holder
    // had not yet cleared wake_sig was meant for us (the waker set our note first).
    if (stop && stop->is_set()) {
      np.blocking.store(false, std::memory_order_release);
      return nullptr;
    }
    np.lastpoll.store(0, std::memory_order_relaxed);
  }
  int n = sys::poll(np, until, evs, kMax);
  np.lastpoll.store(static_cast<std::int64_t>(os::monotonic_ns()), std::memory_order_relaxed);
  if (blocks) np.blocking.store(false, std::memory_order_seq_cst);
  CORUN_PROBE2(netpoll, n, blocks ? 1 : 0);
  np.polls.fetch_add(1, std::memory_order_relaxed);
  Task* list = nullptr;
  std::uint64_t readied = 0;
  for (int i = 0; i < n; i++) {
    PollDesc* pd = evs[i].pd;
    // seq_cst, before unblock()'s seq_cst load of rg_ (PollDesc::hup_ says why). The
    // acquire load first pairs with open()'s release stores: the record reached us through
    // epoll, which TSan cannot see, so without it the store would look like a race with
    // the record's construction.
    if (evs[i].hup) {
      (void)pd->rg_.load(std::memory_order_acquire);
      pd->hup_.store(true, std::memory_order_seq_cst);
    }
    if (evs[i].read)
      if (Task* t = pd->unblock(false, true)) {
        netpoll_ready_list(&list, t);
        readied++;
      }
    if (evs[i].write)
      if (Task* t = pd->unblock(true, true)) {
        netpoll_ready_list(&list, t);
        readied++;
      }
  }
  if (readied) np.readied.fetch_add(readied, std::memory_order_relaxed);
  return list;
}

// ---- the record ---------------------------------------------------------------------------

PollDesc* PollDesc::open(int fd) {
  Runtime* rt = current_runtime();
  M* m = current_m();
  if (!m || !rt || m->rt != rt)
    throw std::logic_error("corun::net: called outside a task of the running runtime");
  netpoll_init(rt);
  PollDesc* pd = cache().alloc();
  {
    base::Guard g(pd->lock_);
    pd->fd_ = fd;
    pd->rt_ = rt;
    pd->run_id_ = rt->run_id;
    pd->rd_ = pd->wd_ = 0;
    pd->info_.store(0, std::memory_order_seq_cst);
  }
  pd->hup_.store(false, std::memory_order_relaxed);  // published by the release stores below
  // release: the poller learns of the record through epoll (a syscall TSan cannot see
  // through); its seq_cst load of a semaphore then synchronises with these stores, so the
  // record's initialisation happens before any use the poller makes of it.
  pd->rg_.store(kNil, std::memory_order_release);
  pd->wg_.store(kNil, std::memory_order_release);
  if (int err = sys::open(rt->netpoll, fd, pd)) {
    pd->fd_ = -1;
    cache().free(pd);
    throw std::system_error(err, std::generic_category(), "corun::net: epoll_ctl(ADD)");
  }
  return pd;
}

void PollDesc::rebind(Runtime* rt) {
  netpoll_init(rt);
  base::Guard g(lock_);
  if (run_id_ == rt->run_id) return;
  // The old run's poller is closed (its registration went with it) and its waiters
  // abandoned with their run.
  rt_ = rt;
  run_id_ = rt->run_id;
  rg_.store(kNil, std::memory_order_seq_cst);
  wg_.store(kNil, std::memory_order_seq_cst);
  if (int err = sys::open(rt->netpoll, fd_, this); err != 0 && err != EEXIST)
    throw std::system_error(err, std::generic_category(), "corun::net: epoll_ctl(ADD)");
  // Deadlines still pending re-arm here (the old heaps abandoned their nodes).
  Timers* heap = Timers::of_caller();
  if (rd_ > 0 && !Timers::active(&rtimer_)) heap->add(&rtimer_, rd_);
  if (wd_ > 0 && !Timers::active(&wtimer_)) heap->add(&wtimer_, wd_);
}

void PollDesc::close() noexcept {
  Runtime* rt = current_runtime();
  {
    base::Guard g(lock_);
    // Only a live poller still holds the descriptor (a closed epoll instance dropped it).
    if (rt && rt->run_id == run_id_ && rt->netpoll.inited.load(std::memory_order_acquire))
      sys::close(rt->netpoll, fd_);
    fd_ = -1;
    rt_ = nullptr;
    run_id_ = 0;
  }
  cache().free(this);
}

void PollDesc::forget_stale_run() noexcept {
  // A record registered by an earlier run: its parked tasks were abandoned with that run
  // and its runtime is gone; never ready them or touch it.
  Runtime* rt = current_runtime();
  if (rt_ && (!rt || rt->run_id != run_id_)) {
    rt_ = nullptr;
    rg_.store(kNil, std::memory_order_seq_cst);
    wg_.store(kNil, std::memory_order_seq_cst);
  }
}

void PollDesc::store_info() noexcept {
  std::uint32_t i = info_.load(std::memory_order_relaxed) & kClosing;
  if (rd_ < 0) i |= kReadExpired;
  if (wd_ < 0) i |= kWriteExpired;
  info_.store(i, std::memory_order_seq_cst);
}

void PollDesc::evict() noexcept {
  Task* r = nullptr;
  Task* w = nullptr;
  {
    base::Guard g(lock_);
    forget_stale_run();
    info_.store(info_.load(std::memory_order_relaxed) | kClosing, std::memory_order_seq_cst);
    Timers::remove(&rtimer_);
    Timers::remove(&wtimer_);
    r = unblock(false, false);
    w = unblock(true, false);
  }
  if (r) ready(r);
  if (w) ready(w);
}

PollResult PollDesc::check(bool write) const noexcept {
  std::uint32_t i = info_.load(std::memory_order_seq_cst);
  if (i & kClosing) return PollResult::closing;
  if (i & (write ? kWriteExpired : kReadExpired)) return PollResult::timeout;
  return PollResult::ready;
}

PollResult PollDesc::prepare(bool write) noexcept {
  PollResult r = check(write);
  if (r != PollResult::ready) return r;
  // Go's pollReset. A seq_cst exchange, not a relaxed store: a notification this drops may
  // carry a hang-up that wait_after_drain() must see (PollDesc::hup_). On x86 the same
  // locked instruction either way; it runs once per I/O call, beside a syscall.
  (write ? wg_ : rg_).exchange(kNil, std::memory_order_seq_cst);
  return PollResult::ready;
}

PollResult PollDesc::wait_after_drain() noexcept {
  // seq_cst: a hang-up whose notification the last prepare() dropped is seen here
  // (PollDesc::hup_); one the poller handled since left kReady in rg_, which wait()
  // consumes.
  if (hup_.load(std::memory_order_seq_cst)) return prepare(false);
  return wait(false);
}

Task* PollDesc::unblock(bool write, bool ioready) noexcept {
  std::atomic<std::uintptr_t>& gp = write ? wg_ : rg_;
  std::uintptr_t old = gp.load(std::memory_order_seq_cst);
  for (;;) {
    if (old == kReady) return nullptr;
    if (old == kNil && !ioready) return nullptr;  // only wake a waiter
    std::uintptr_t nw = ioready ? kReady : kNil;
    if (gp.compare_exchange_weak(old, nw, std::memory_order_seq_cst)) {
      if (old == kNil || old == kWait) return nullptr;  // the parker sees it and resumes
      // The waker runs in the parked task's run (stale runs' tasks are forgotten first).
      if (Runtime* rt = current_runtime())
        rt->netpoll.waiters.fetch_sub(1, std::memory_order_relaxed);
      return reinterpret_cast<Task*>(old);
    }
  }
}

struct PollDesc::Blocker {
  std::atomic<std::uintptr_t>* gp;
  Task* task;
  Runtime* rt;
};

void PollDesc::block_commit(void* arg) noexcept {
  auto* b = static_cast<Blocker*>(arg);
  std::uintptr_t expect = kWait;
  Runtime* rt = b->rt;
  Task* t = b->task;
  // Counted before the task is published: a waker may decrement right after the CAS.
  rt->netpoll.waiters.fetch_add(1, std::memory_order_relaxed);
  if (b->gp->compare_exchange_strong(expect, reinterpret_cast<std::uintptr_t>(t),
                                     std::memory_order_seq_cst))
    return;  // parked: from here the semaphore owns the task
  rt->netpoll.waiters.fetch_sub(1, std::memory_order_relaxed);
  ready(t);  // a notification, deadline or close came first: resume at once
}

bool PollDesc::block(bool write) noexcept {
  std::atomic<std::uintptr_t>& gp = write ? wg_ : rg_;
  for (;;) {
    std::uintptr_t old = kReady;
    if (gp.compare_exchange_strong(old, kNil, std::memory_order_seq_cst)) return true;
    old = kNil;
    if (gp.compare_exchange_strong(old, kWait, std::memory_order_seq_cst)) break;
    CORUN_CHECK(old == kReady || old == kNil,
                "corun::net: two tasks wait on descriptor %d in one direction", fd_);
  }
  if (check(write) == PollResult::ready) {
    Blocker b{&gp, current_task(), rt_};
    park(&PollDesc::block_commit, &b);
  }
  std::uintptr_t old = gp.exchange(kNil, std::memory_order_seq_cst);
  CORUN_CHECK(old <= kWait, "corun::net: semaphore of descriptor %d corrupted", fd_);
  return old == kReady;
}

PollResult PollDesc::wait_thread(bool write) noexcept {
  // Inside blocking(): no park; poll(2) in slices of 10 ms so a close or a deadline is
  // seen (the thread is not the runtime's to hold anyway).
  for (;;) {
    PollResult r = check(write);
    if (r != PollResult::ready) return r;
    pollfd p{fd_, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    int n = ::poll(&p, 1, 10);
    if (n > 0) return PollResult::ready;
    std::int64_t d;
    {
      base::Guard g(lock_);
      d = write ? wd_ : rd_;
      if (d > 0 && d <= static_cast<std::int64_t>(os::monotonic_ns())) {
        (write ? wd_ : rd_) = -1;
        store_info();
      }
    }
  }
}

PollResult PollDesc::wait(bool write) noexcept {
  PollResult r = check(write);
  if (r != PollResult::ready) return r;
  if (!can_park()) return wait_thread(write);
  M* m = current_m();
  if (run_id_ != m->rt->run_id) {
    try {
      rebind(m->rt);
    } catch (...) {
      return PollResult::closing;  // cannot register with this run: unusable
    }
  }
  if (block(write)) return PollResult::ready;
  // Woken without I/O: a deadline or a close (check() says), or a deadline that fired and
  // was moved before we ran again (Go's "pretend it has not happened"): the caller
  // retries its I/O and waits again on EAGAIN.
  return check(write);
}

void PollDesc::set_deadline(std::int64_t when, bool read, bool write) {
  Task* r = nullptr;
  Task* w = nullptr;
  if (when > 0 && when <= static_cast<std::int64_t>(os::monotonic_ns())) when = -1;
  {
    base::Guard g(lock_);
    if (info_.load(std::memory_order_relaxed) & kClosing) return;
    forget_stale_run();
    auto arm = [&](std::int64_t& d, PollDeadline& node) {
      d = when;
      if (when > 0) {
        if (!Timers::modify(&node, when, 0))
          if (Timers* heap = Timers::of_caller()) heap->add(&node, when);
      } else {
        Timers::remove(&node);
      }
    };
    if (read) arm(rd_, rtimer_);
    if (write) arm(wd_, wtimer_);
    store_info();
    if (when < 0) {
      if (read) r = unblock(false, false);
      if (write) w = unblock(true, false);
    }
  }
  if (r) ready(r);
  if (w) ready(w);
}

void PollDesc::deadline_fired(bool write, std::int64_t now) noexcept {
  Task* t = nullptr;
  {
    base::Guard g(lock_);
    std::int64_t& d = write ? wd_ : rd_;
    if (d <= 0 || d > now) return;  // cleared, expired already, or moved later: stale
    d = -1;
    store_info();
    t = unblock(write, false);
  }
  if (t) ready(t);
}

void PollDeadline::fire(std::int64_t now) noexcept {
  pd->deadline_fired(write, now);
}

}  // namespace corun::sched
