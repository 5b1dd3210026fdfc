// sync/chan_core.hpp — the type-erased channel (Go's hchan) and its waiters (Go's
// sudog), shared by chan.cpp (send, recv, close) and select.cpp.
//
// Invariants, all under ChanCore::lock:
//   - count <= cap; the ring holds count live T's at recvx, recvx+1, ... (mod cap).
//   - sendq non-empty  =>  the buffer is full (count == cap) and the channel is open;
//     recvq non-empty  =>  the buffer is empty (count == 0) and the channel is open.
//     (Waiters of a select may sit in both queues of one channel; a select waiter whose
//     select already finished is skipped and unlinked by whoever meets it first.)
//   - A waiter is linked in at most one queue; `queued` says whether it is.
// A waiter lives on its task's (or foreign thread's) stack. Whoever dequeues it moves the
// value, sets `success`, drops the lock, then wakes it; from the wake on, the node is the
// waiter's again and may vanish, so the waker reads what it needs first.
// Select waiters share a SelectState: a waker claims the whole select with one CAS on
// `done` (Go's selectDone); losing waiters are unlinked and skipped.
// The lock is a spin lock: it is held for a few dozen instructions, never across a park
// (the scheduler's commit hook drops it once the task is off its stack), and a task must
// not block its thread (std::mutex could put the M to sleep with its P).
// Rejected: a lock-free channel (Go's design discussions; the select protocol needs the
// per-channel lock, and the hand-off costs one uncontended lock, not a CAS race).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <corun/chan.hpp>

#include "base/lock.hpp"
#include "sched/park.hpp"
#include "sched/proc.hpp"
#include "sched/timers.hpp"

namespace corun::sched {
struct Task;
}

namespace corun::detail {

struct SelectState;

struct ChanWaiter {
  sched::Task* task = nullptr;          // the parked task; nullptr for a foreign thread
  std::atomic<std::uint32_t> woken{0};  // foreign thread's futex word (plain ops only)
  void* elem = nullptr;                 // send: T* source; recv: raw storage for a T
  ChanWaiter* next = nullptr;           // guarded by the channel's lock
  ChanWaiter* prev = nullptr;           // guarded by the channel's lock
  SelectState* sel = nullptr;           // nullptr for send/recv; set before queueing
  std::uint32_t index = 0;              // the select case this waiter stands for
  bool queued = false;                  // guarded by the channel's lock
  bool success = false;                 // written by the waker before the wake
};

struct SelectState {
  // 0 until a waker claims the select (CAS 0 -> 1, acq_rel: the claimer's transfer into
  // the case's element is published to the selecting task by the wake-up that follows,
  // and two claimers are ordered).
  std::atomic<std::uint32_t> done{0};
  ChanWaiter* winner = nullptr;         // written by the claimer before the wake
  std::atomic<std::uint32_t> woken{0};  // foreign thread's futex word
};

// WaitQueue (doubly linked FIFO of waiters) is declared in <corun/chan.hpp>, in the
// channel's first cache line, so the inline checks there can peek at its head.
inline ChanWaiter* WaitQueue::dequeue() noexcept {
  if (empty_hint()) return nullptr;
  return dequeue_slow();
}

struct alignas(64) ChanCore : ChanHeader {
  // ChanHeader (<corun/chan.hpp>), the first cache line: refs, cap, and count, closed,
  // recvq, sendq, which change only under lock (atomics so the lock-free checks can read
  // them without it).
  base::Lock<base::LockRank::chan> lock;         // see above
  std::size_t esize = 0;                         // immutable: ops->size
  bool trivial = false;                          // immutable: ops->trivial
  std::size_t recvx CORUN_GUARDED_BY(lock) = 0;  // ring index of the oldest value
  std::size_t sendx CORUN_GUARDED_BY(lock) = 0;  // ring index of the next free slot
  const ElemOps* ops = nullptr;
  unsigned char* buf = nullptr;  // cap slots of ops->size bytes, right after the core
  // The timer that sends on this channel (new_timer, after, Ticker; sync/chan_timer.hpp),
  // or nullptr. Set and cleared under lock by the timer layer: cleared by the timer's
  // destruction before its memory goes, so a receiver that reads it under lock may
  // try_hold() it (chan_recv's fire_due).
  sched::TimerNode* timer CORUN_GUARDED_BY(lock) = nullptr;

  void* slot(std::size_t i) const noexcept { return buf + i * esize; }
};

inline ChanCore* core(ChanHeader* h) noexcept {
  return static_cast<ChanCore*>(h);
}

void chan_wake(ChanWaiter* w) noexcept;  // call without the lock

// Moving values: memcpy of a known size for trivial types (no indirect call, no jump
// table: the common sizes are tested in turn), else T's move constructor.
[[gnu::always_inline]] inline void elem_move(const ChanCore* c, void* dst, void* src) noexcept {
  if (c->trivial) {
    if (c->esize == 8)
      std::memcpy(dst, src, 8);
    else if (c->esize == 4)
      std::memcpy(dst, src, 4);
    else
      std::memcpy(dst, src, c->esize);
    return;
  }
  c->ops->construct(dst, src);
}
[[gnu::always_inline]] inline void elem_destroy(const ChanCore* c, void* p) noexcept {
  if (!c->trivial) c->ops->destroy(p);
}

// Operations with the lock held, shared by chan.cpp and select.cpp.
// Send to waiter r (dequeued from recvq): move *src into r's storage.
[[gnu::always_inline]] inline void chan_send_to_waiter(ChanCore* c, ChanWaiter* r,
                                                       void* src) noexcept {
  elem_move(c, r->elem, src);
  r->success = true;
}
// Receive from waiter s (dequeued from sendq; the buffer is full, or cap == 0).
[[gnu::always_inline]] inline void chan_recv_from_waiter(ChanCore* c, ChanWaiter* s,
                                                         void* dst) noexcept
    CORUN_REQUIRES(c->lock) {
  if (c->cap == 0) {
    elem_move(c, dst, s->elem);
  } else {
    // Full buffer: take the oldest value; the sender's value takes its slot, which is
    // now the newest (recvx == sendx when full).
    void* sl = c->slot(c->recvx);
    elem_move(c, dst, sl);
    elem_destroy(c, sl);
    elem_move(c, sl, s->elem);
    if (++c->recvx == c->cap) c->recvx = 0;
    c->sendx = c->recvx;
  }
  s->success = true;
}
[[gnu::always_inline]] inline void chan_buffer_put(ChanCore* c, void* src) noexcept
    CORUN_REQUIRES(c->lock) {  // count < cap
  elem_move(c, c->slot(c->sendx), src);
  if (++c->sendx == c->cap) c->sendx = 0;
  c->count.store(c->count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
[[gnu::always_inline]] inline void chan_buffer_take(ChanCore* c, void* dst) noexcept
    CORUN_REQUIRES(c->lock) {  // count > 0
  void* sl = c->slot(c->recvx);
  elem_move(c, dst, sl);
  elem_destroy(c, sl);
  if (++c->recvx == c->cap) c->recvx = 0;
  c->count.store(c->count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

// One operation on one channel, with its lock held: the single step that send, recv,
// the try_ forms (chan.cpp) and select's first pass (select.cpp) all take. `done`: the
// value moved (to or from a waiter, or through the buffer); `closed`: a send must throw,
// a receive found the channel closed and drained; `blocked`: nothing moved. *wake is a
// waiter to wake once the lock is dropped, or nullptr.
enum class Step : std::uint8_t { blocked, done, closed };

// Lock-free "would block" hints (chan.cpp's header comment says why they are sound): no
// receiver waits / the buffer is full; no sender waits / the buffer is empty.
inline bool full_hint(const ChanCore* c) noexcept {
  return c->cap == 0 ? c->recvq.empty_hint() : c->count.load(std::memory_order_acquire) == c->cap;
}
inline bool empty_hint(const ChanCore* c) noexcept {
  return c->cap == 0 ? c->sendq.empty_hint() : c->count.load(std::memory_order_acquire) == 0;
}

[[gnu::always_inline]] inline Step send_step(ChanCore* c, void* src, ChanWaiter** wake) noexcept
    CORUN_REQUIRES(c->lock) {
  *wake = nullptr;
  if (c->closed.load(std::memory_order_relaxed)) return Step::closed;
  if ((*wake = c->recvq.dequeue())) {
    chan_send_to_waiter(c, *wake, src);
    return Step::done;
  }
  if (c->count.load(std::memory_order_relaxed) < c->cap) {
    chan_buffer_put(c, src);
    return Step::done;
  }
  return Step::blocked;
}

[[gnu::always_inline]] inline Step recv_step(ChanCore* c, void* dst, ChanWaiter** wake) noexcept
    CORUN_REQUIRES(c->lock) {
  *wake = nullptr;
  if ((*wake = c->sendq.dequeue())) {
    chan_recv_from_waiter(c, *wake, dst);
    return Step::done;
  }
  if (c->count.load(std::memory_order_relaxed) > 0) {
    chan_buffer_take(c, dst);
    return Step::done;
  }
  if (c->closed.load(std::memory_order_relaxed)) return Step::closed;
  return Step::blocked;
}

[[noreturn]] void throw_send_closed();

// A nil channel, or a select that can never proceed: waits forever using no CPU.
[[noreturn]] void block_forever() noexcept;

// A non-blocking operation found nothing to do. A polling loop must not hold its P past
// its time slice: yields if sysmon asked this P to end it. Inline: the check is two TLS
// loads and the flag's (ContextCancelDone's `select(on_recv(done), otherwise)` is little
// more than this).
inline void polled_nothing() noexcept {
  if (sched::preempt_requested()) [[unlikely]]
    sched::yield_if_preempted();
}

// Per-thread random number for select's poll order (xorshift64; not for crypto). A task
// that migrates simply continues another thread's sequence, which is as good.
inline thread_local std::uint64_t tls_chan_rand = 0;
std::uint64_t chan_rand_seed() noexcept;
// 64 random bits (xorshift64*: the multiply mixes the state's linear low bits upwards, so
// the high bits are the good ones; select_impl takes three 16-bit draws from the top).
inline std::uint64_t chan_rand() noexcept {
  std::uint64_t s = tls_chan_rand;
  if (s == 0) [[unlikely]]
    s = chan_rand_seed();
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  tls_chan_rand = s;
  return s * 0x2545F4914F6CDD1Dull;
}

}  // namespace corun::detail
