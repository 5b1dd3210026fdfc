// sched/netpoll.hpp — the network poller (Go's runtime/netpoll.go): the scheduler's narrow
// contract for the net layer (PollDesc), and the poller's half for the M loop (Netpoll).
//
// A descriptor is registered once, edge-triggered, for reading and writing (epoll:
// netpoll_epoll.cpp, one file per OS mechanism). Its PollDesc holds, per direction, a
// one-word semaphore (Go's rg/wg) and a deadline with its timer node. A task whose I/O
// would block parks on the semaphore; the poller (netpoll()), a deadline firing, or
// evict() (close) wakes it. Who polls (Go's findRunnable and sysmon):
//   1. a P that finds no local or global work, before it steals: netpoll(0), when some
//      task waits on I/O and no M is blocked in the poller;
//   2. the idle wait (idle.cpp): the one idle M blocks in netpoll(until) with until = the
//      earliest timer deadline (epoll_pwait2: a nanosecond timeout, no rounding), so an
//      idle server makes no wake-ups and a read deadline fires as precisely as sleep;
//   3. sysmon, when nobody has polled for 10 ms (every P busy in long tasks).
//
// Semaphore states (PollDesc::rg_/wg_; Go's pdNil/pdReady/pdWait/G):
//   kNil    nothing pending; kReady  an I/O notification not yet consumed;
//   kWait   a task is about to park (set before its park, replaced in the park commit);
//   Task*   a parked task, owned by the semaphore: whoever swaps it out readies it.
// All transitions are seq_cst CASes, and `info_` (closing, deadline expired) is seq_cst
// too: a waiter stores kWait then loads info_, a closer or expiring deadline stores info_
// then loads the semaphore — store-buffering, so one of them sees the other and a task
// never parks past its close or its deadline.
//
// PollDesc records are never freed: they come from a process-wide cache and go back to it
// on close (Go's pollCache). An epoll event harvested before a close, or a deadline timer
// firing after one, may still name the record once it is reused; both are harmless — a
// spurious kReady makes the next I/O attempt get EAGAIN and wait again, and a deadline
// fires only if the record's own deadline has passed by the firing clock reading.
// Rejected: reference-counting records against late events (a shared-line atomic on
// every poll event); a sequence number per record in the epoll data (Go's fdseq) — it
// only saves the spurious retry above, at the cost of a table or tagged pointers.
//
// On 2 sockets × 64 cores: one epoll instance per runtime, polled by whichever P runs out
// of work (one syscall at a time in practice: a non-blocking poll is skipped while the
// idle M blocks in it). A per-NUMA-node epoll, with a socket registered on the node of the
// P that accepted it and each node's Ps polling their own, would keep a connection's
// wake-ups on its node; it needs per-node idle waiters. Not measurable on this one-node
// machine; the per-runtime instance is kept until perf shows epoll_wait contention.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/lock.hpp"
#include "base/tsa.hpp"
#include "sched/timers.hpp"

namespace corun::sched {

struct Runtime;
struct Task;
class Note;
class PollDesc;

enum class PollResult : int {
  ready,    // I/O may be attempted (or retried)
  timeout,  // the direction's deadline has passed
  closing,  // evict() was called: the descriptor is being closed
};

// One deadline timer of a PollDesc (read or write). Fires into its PollDesc.
class PollDeadline final : public TimerNode {
 public:
  void fire(std::int64_t now) noexcept override;
  PollDesc* pd = nullptr;
  bool write = false;
};

class alignas(64) PollDesc {
 public:
  // ---- the net layer's half --------------------------------------------------------------
  // Registers fd (non-blocking) with the caller's runtime poller, initialising the poller
  // on first use. Throws std::logic_error outside a task, std::system_error if epoll
  // refuses it.
  static PollDesc* open(int fd);
  // Takes fd out of the poller (before the caller closes it) and recycles the record.
  // The caller has evicted it and no call uses it any more.
  void close() noexcept;
  // Go's pollUnblock: the descriptor is closing. Wakes every task waiting on it; every
  // later prepare()/wait() returns closing.
  void evict() noexcept;
  // Before an I/O attempt (Go's pollReset): closing or past the direction's deadline
  // stop it; otherwise drops a stale readiness notification and returns ready.
  PollResult prepare(bool write) noexcept;
  // After EAGAIN (Go's pollWait): parks the calling task until the descriptor is ready in
  // that direction, the deadline passes, or evict(). From a thread that cannot park
  // (inside blocking()), waits with poll(2) instead.
  PollResult wait(bool write) noexcept;
  // A read after one that drained the socket (0 < n < asked; net/conn.cpp): wait() for
  // new readiness, since any byte arriving after a drain raises a new edge — unless the
  // poller has seen a hang-up or error on the descriptor (EOF, reset), which a read
  // reports after the data without a new edge: then as prepare(), so the caller reads.
  PollResult wait_after_drain() noexcept;
  // Sets the read and/or write deadline: absolute CLOCK_MONOTONIC ns, 0 clears it. One at
  // or before now expires at once. Applies to a task blocked in wait() now. Throws
  // std::bad_alloc if the timer heap cannot grow.
  void set_deadline(std::int64_t when, bool read, bool write);
  int fd() const noexcept { return fd_; }

 private:
  friend class PollDeadline;
  friend Task* netpoll(Runtime* rt, std::int64_t until, const Note* stop);
  friend class PollCache;
  static constexpr std::uintptr_t kNil = 0, kReady = 1, kWait = 2;
  static constexpr std::uint32_t kClosing = 1, kReadExpired = 2, kWriteExpired = 4;
  struct Blocker;  // wait()'s park record

  PollResult check(bool write) const noexcept;
  bool block(bool write) noexcept;
  static void block_commit(void* arg) noexcept;
  void deadline_fired(bool write, std::int64_t now) noexcept;
  void rebind(Runtime* rt);  // registered in an earlier run: register with rt's poller
  PollResult wait_thread(bool write) noexcept;
  void store_info() noexcept CORUN_REQUIRES(lock_);
  void forget_stale_run() noexcept CORUN_REQUIRES(lock_);

 public:
  // Go's netpollunblock: takes the task parked on the semaphore, if any. ioready: an I/O
  // notification (kReady is left for a task not yet parked); otherwise only a parked or
  // parking task is woken. The caller readies the returned task. (The poller's half.)
  Task* unblock(bool write, bool ioready) noexcept;

 private:
  base::Lock<base::LockRank::poll_desc> lock_;  // deadlines, arming their timers
  int fd_ = -1;                                 // immutable while open
  // The runtime whose poller holds fd_, and its run id (a later run rebinds). Written at
  // open/rebind under lock_; read by the registering task's calls.
  Runtime* rt_ = nullptr;
  std::uint64_t run_id_ = 0;
  std::atomic<std::uintptr_t> rg_{kNil}, wg_{kNil};  // the semaphores (see the header)
  std::atomic<std::uint32_t> info_{0};  // kClosing | k*Expired; stored under lock_, seq_cst
  // The poller saw EPOLLRDHUP/HUP/ERR: sticky until the record is reopened. seq_cst, as
  // are the poller's load of rg_ after storing it and prepare()'s exchange of rg_: if that
  // exchange dropped a notification the poller had seen (its own kReady, or one already
  // there), the store precedes the exchange in the single order, so wait_after_drain()'s
  // seq_cst load after it sees true.
  std::atomic<bool> hup_{false};
  // Deadlines: 0 none, > 0 armed (absolute ns), -1 expired.
  std::int64_t rd_ CORUN_GUARDED_BY(lock_) = 0;
  std::int64_t wd_ CORUN_GUARDED_BY(lock_) = 0;
  PollDeadline rtimer_, wtimer_;  // armed in the setting task's P heap
  PollDesc* link_ = nullptr;      // the cache's free list (its lock)
};

// ---- the M loop's half -------------------------------------------------------------------
// One per runtime (Runtime::netpoll). Initialised on the first PollDesc::open, so a
// runtime without I/O keeps the futex idle wait and pays nothing.
struct Netpoll {
  std::atomic<bool> inited{false};  // release after epfd/evfd are set; acquire to use them
  int epfd = -1;                    // immutable once inited
  int evfd = -1;                    // eventfd for netpoll_break; immutable once inited
  bool timerfd = false;             // CORUN_NETPOLL_WAIT=timerfd; immutable once inited
  int tfd = -1;  // timerfd fallback (no epoll_pwait2): made and armed by the blocking poller
  // A break is pending (Go's netpollWakeSig): set by netpoll_break, cleared by the blocking
  // poller after it drained the eventfd; saves redundant eventfd writes. acq_rel.
  std::atomic<std::uint32_t> wake_sig{0};
  // Held by the one M in a blocking poll, from before it blocks until after it stored
  // wake_sig = 0 (Go: sched.lastpoll swapped to 0). Only its holder drains the eventfd, so
  // while a poller blocks, wake_sig == 1 implies an undrained eventfd: a break skipped
  // because wake_sig was set can never be lost. Without it, an M leaving the poller
  // (handed a P) could drain the eventfd after the next waiter blocked and store 0 after a
  // break was skipped — that waiter slept through shutdown. acquire/release.
  std::atomic<bool> blocking{false};
  // Monotonic ns of the last poll; 0 while an M blocks in the poller (then non-blocking
  // polls are pointless: events go to it). relaxed: a hint.
  std::atomic<std::int64_t> lastpoll{1};
  // Tasks parked on I/O (relaxed: a hint for "is polling worth a syscall?").
  std::atomic<std::int32_t> waiters{0};
  // corun::stats(): polls made and tasks they readied, by whoever polls (relaxed adds:
  // counters; one shared line, but each add sits beside an epoll syscall).
  std::atomic<std::uint64_t> polls{0};
  std::atomic<std::uint64_t> readied{0};
};

// Polls: until == 0 returns at once; TimerHeap::kNever blocks; otherwise blocks at most
// until that absolute monotonic time (or netpoll_break). A blocking poll returns at once,
// polling nothing, if `stop` (the caller's note, which its wakers set before they break
// the poller) is set once it holds the poller. Returns the tasks made ready, linked
// through Task::next, still in state waiting: the caller queues them.
Task* netpoll(Runtime* rt, std::int64_t until, const Note* stop = nullptr);
// Wakes an M blocked in netpoll (no-op if none, or a break is already pending).
void netpoll_break(Runtime* rt) noexcept;
// Whether a non-blocking poll is worth it now: the poller is up, a task waits on I/O and
// no M blocks in the poller.
bool netpoll_worth(const Runtime* rt) noexcept;
void netpoll_init(Runtime* rt);              // under nothing; idempotent. Throws system_error
void netpoll_destroy(Runtime* rt) noexcept;  // at runtime destruction

// The mechanism (netpoll_epoll.cpp): one implementation per OS facility.
namespace sys {
struct Event {
  PollDesc* pd;
  bool read, write;  // which directions it reports ready (errors and hang-ups: both)
  bool hup;          // a hang-up or error (the peer's FIN, a reset)
};
void init(Netpoll& np);                                // throws std::system_error
int open(Netpoll& np, int fd, PollDesc* pd) noexcept;  // 0 or errno
void close(Netpoll& np, int fd) noexcept;
// Waits as netpoll() says and returns the descriptors' events (at most max); a break
// (wakeup) is consumed here and reported as nothing.
int poll(Netpoll& np, std::int64_t until, Event* out, int max) noexcept;
void wakeup(Netpoll& np) noexcept;  // makes a blocked poll return
void destroy(Netpoll& np) noexcept;
}  // namespace sys

}  // namespace corun::sched
