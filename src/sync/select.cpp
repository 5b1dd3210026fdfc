// sync/select.cpp — select over any mix of send and recv cases (Go's selectgo).
//
// 1. Poll order: a random permutation of the non-nil cases (inside-out Fisher-Yates), so
//    that the first ready case found is uniform among the ready ones.
// 2. Lock order: the cases sorted by channel address; each channel is locked once even if
//    it appears in several cases. Every select and every plain op locks one channel or
//    several in this global order, so selects cannot deadlock each other.
// 3. Pass 1, in poll order: the first case that can proceed runs under the locks.
// 4. Nothing ready: with otherwise() return "none"; else queue one waiter per case (all
//    sharing a SelectState) and park; the commit hook drops the locks in reverse order
//    once the task is off its stack.
// 5. Woken: a peer claimed the select (CAS on SelectState::done), moved the value and
//    recorded the winning waiter. Re-lock everything and unlink the other waiters still
//    queued (a peer that met one of them first has unlinked it already), so no stale
//    waiter outlives the select — its nodes are on this stack.
// The commit hook reads the lock-order array on this stack while the task may already be
// running again on another M; that is safe because the task, to touch anything, must
// first re-lock every channel, and the hook releases the lowest-addressed lock — the one
// the task takes first — last, as its final access to this stack.
// Rejected: Go's heap-allocated sudogs (a free list per P); waiters on the stack cost
// nothing, and a select's lifetime bounds theirs.
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "base/probes.hpp"
#include "sched/park.hpp"
#include "sync/chan_core.hpp"
#include "sync/waiter.hpp"

namespace corun::detail {

namespace {

struct LockSet {
  SelectCase* cases;
  const std::uint16_t* order;  // case indexes sorted by channel address
  std::size_t m;               // number of entries in order
};

// A run-time set of locks: beyond the analysis, which sees each step assert its lock.
[[gnu::always_inline]] inline void lock_all(const LockSet& ls) noexcept CORUN_NO_TSA {
  ChanHeader* prev = nullptr;
  for (std::size_t k = 0; k < ls.m; k++) {
    ChanHeader* c = ls.cases[ls.order[k]].c;
    if (c != prev) core(c)->lock.lock();
    prev = c;
  }
}

// Unlocks in reverse lock order. Each channel is unlocked at its lowest position in the
// order, and the next entry is read before that unlock: the final unlock (of the lowest
// channel, which a resumed task locks first) is the last access to ls's arrays.
[[gnu::always_inline]] inline void unlock_all(const LockSet& ls) noexcept CORUN_NO_TSA {
  ChanHeader* c = ls.cases[ls.order[ls.m - 1]].c;
  for (std::size_t k = ls.m; k-- > 0;) {
    ChanHeader* below = k > 0 ? ls.cases[ls.order[k - 1]].c : nullptr;
    if (below != c) core(c)->lock.unlock();
    c = below;
  }
}

void unlock_all_commit(void* arg) {
  // Copy first: the struct lives on the parked task's stack (see the header comment).
  LockSet ls = *static_cast<const LockSet*>(arg);
  unlock_all(ls);
}

}  // namespace

std::size_t select_impl(SelectCase* cs, std::size_t n, bool block, bool* received) {
  if (n > 0xffff) throw std::length_error("corun::select: more than 65535 cases");
  constexpr std::size_t kInline = 8;
  std::uint16_t poll_inline[kInline], lock_inline[kInline];
  std::unique_ptr<std::uint16_t[]> heap_orders;
  std::uint16_t* poll = poll_inline;
  std::uint16_t* lockorder = lock_inline;
  if (n > kInline) {
    heap_orders = std::make_unique<std::uint16_t[]>(2 * n);
    poll = heap_orders.get();
    lockorder = poll + n;
  }

  // 1. Poll order over the non-nil cases. Each step draws j uniform in [0, m] by
  // multiply-shift from 16 random bits (bias (m+1)/65536, none that a fair select could
  // show), three steps per 64-bit draw kept in a register: a draw per case, through the
  // thread-local state, was ~15% of select_impl's samples in SelectSyncContended-1.
  std::size_t m = 0;
  std::uint64_t bits = 0;
  unsigned draws = 0;  // 16-bit draws left in `bits`, from the top
  for (std::size_t i = 0; i < n; i++) {
    if (!cs[i].c) continue;
    std::size_t j = 0;
    if (m > 0) {
      if (draws == 0) {
        bits = chan_rand();
        draws = 3;
      }
      j = static_cast<std::size_t>(((bits >> 48) * static_cast<std::uint64_t>(m + 1)) >> 16);
      bits <<= 16;
      draws--;
    }
    poll[m] = poll[j];
    poll[j] = static_cast<std::uint16_t>(i);
    m++;
  }
  if (m == 0) {
    if (!block) {
      polled_nothing();
      return n;
    }
    block_forever();  // Go: select {} or only nil channels
  }

  // 2. One lock when one will do: the first case in poll order that looks ready by the
  // lock-free hints runs under its own channel's lock alone. Pass 1 below would pick the
  // same case if the hints hold; if the case turns out blocked (a race), the full path
  // decides. Go locks every case's channel first: a producer's select on a buffered
  // channel with room, beside a timer and a close channel shared by all, took three
  // locks, one of them contended by every task, for one send.
  for (std::size_t k = 0; k < m; k++) {
    std::size_t i = poll[k];
    ChanCore* c = core(cs[i].c);
    if (!c->closed.load(std::memory_order_acquire) && (cs[i].send ? full_hint(c) : empty_hint(c)))
      continue;
    c->lock.lock();
    ChanWaiter* wake;
    Step st = cs[i].send ? send_step(c, cs[i].elem, &wake) : recv_step(c, cs[i].elem, &wake);
    c->lock.unlock();
    if (st == Step::blocked) break;
    if (wake) chan_wake(wake);
    if (cs[i].send && st == Step::closed) throw_send_closed();
    *received = st == Step::done;
    return i;
  }

  // 3. Lock order (insertion sort: a select has a handful of cases).
  for (std::size_t k = 0; k < m; k++) {
    std::uint16_t v = poll[k];
    std::size_t j = k;
    while (j > 0 && std::less<ChanHeader*>()(cs[v].c, cs[lockorder[j - 1]].c)) {
      lockorder[j] = lockorder[j - 1];
      j--;
    }
    lockorder[j] = v;
  }
  LockSet ls{cs, lockorder, m};
  lock_all(ls);

  // 4. Pass 1: the first ready case in poll order.
  for (std::size_t k = 0; k < m; k++) {
    std::size_t i = poll[k];
    ChanCore* c = core(cs[i].c);
    c->lock.assert_held();  // lock_all took it
    ChanWaiter* wake;
    Step st = cs[i].send ? send_step(c, cs[i].elem, &wake) : recv_step(c, cs[i].elem, &wake);
    if (st == Step::blocked) continue;
    unlock_all(ls);
    if (wake) chan_wake(wake);
    if (cs[i].send && st == Step::closed) throw_send_closed();
    *received = st == Step::done;
    return i;
  }
  if (!block) {
    unlock_all(ls);
    polled_nothing();
    return n;
  }

  // 5. Queue a waiter on every case's channel, in lock order, and wait. Only the m
  // waiters of non-nil cases are constructed (indexed by case): value-initialising all
  // eight inline slots was a 512-byte `rep stos` per blocking select (3.4% of Powser-1).
  // ChanWaiter is trivially destructible, so the slots need no destruction.
  static_assert(std::is_trivially_destructible_v<ChanWaiter>);
  alignas(ChanWaiter) unsigned char w_inline[kInline * sizeof(ChanWaiter)];
  std::unique_ptr<unsigned char[]> w_heap;
  auto* ws = reinterpret_cast<ChanWaiter*>(w_inline);
  if (n > kInline) {
    static_assert(alignof(ChanWaiter) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    w_heap = std::make_unique_for_overwrite<unsigned char[]>(n * sizeof(ChanWaiter));
    ws = reinterpret_cast<ChanWaiter*>(w_heap.get());
  }
  CORUN_PROBE1(select_block, m);
  SelectState st;
  sched::Task* self = sched::current_task();
  for (std::size_t k = 0; k < m; k++) {
    std::size_t i = lockorder[k];
    ChanWaiter& w = *::new (&ws[i]) ChanWaiter();
    w.task = self;
    w.elem = cs[i].elem;
    w.sel = &st;
    w.index = static_cast<std::uint32_t>(i);
    ChanCore* c = core(cs[i].c);
    (cs[i].send ? c->sendq : c->recvq).push(&w);
  }
  if (self) {
    sched::park(unlock_all_commit, &ls);
  } else {
    unlock_all(ls);
    sleep_until_woken(&st.woken);  // sees the value, success and winner
  }

  // 6. Woken by the winner's peer: remove the other waiters.
  lock_all(ls);
  ChanWaiter* win = st.winner;
  for (std::size_t k = 0; k < m; k++) {
    std::size_t i = lockorder[k];
    ChanWaiter* w = std::launder(&ws[i]);  // the object constructed in its slot above
    if (w->queued) {
      ChanCore* c = core(cs[i].c);
      (cs[i].send ? c->sendq : c->recvq).unlink(w);
    }
  }
  unlock_all(ls);
  std::size_t i = win->index;
  if (cs[i].send) {
    if (!win->success) throw_send_closed();  // woken by close
  } else {
    *received = win->success;
  }
  return i;
}

}  // namespace corun::detail
