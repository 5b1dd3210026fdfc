// sched/timer_heap.hpp — a 4-ary min-heap of timers keyed by deadline (Go's per-P timer heap).
//
// A plain data structure under the P's timers (sched/timers.hpp, which owns it and its
// lock): it knows nothing of locks, Ps or firing. Each timer embeds a HeapNode that
// remembers its own index in the heap, so stop and reset are O(log n) — no search. Every
// member function requires the owner's lock (Timers::lock_).
//
// The array holds (when, node) pairs: a sift compares the four children's deadlines in
// one 64-byte line instead of chasing four node pointers (with 400k timers per P the
// nodes are cache misses; Go 1.23 moved `when` into its heap slice for the same reason).
// Invariants (checked by verify(), which MODE=debug and the tests run):
//   - v_[i].when >= v_[parent(i)].when for every i > 0 (4-ary: parent(i) = (i-1)/4);
//   - v_[i].when <= v_[i].t->when (equal unless update_lazy pushed the deadline back)
//     and v_[i].t->index == i for every i; a node outside the heap has index ==
//     kNotInHeap.
// A node's `when` is atomic because its owner may push it later without the heap's lock
// (Timers::push_back, sched/timers.hpp): such a store only raises it, so the key stays a
// lower bound. The heap itself reads and writes it relaxed, under the owner's lock; it
// never writes it on its own paths except update()/update_lazy(), whose callers say what
// races with them. rekey() moves an entry without touching `when`.
// Ties keep no particular order (Go's neither): timers with one deadline fire in any order.
// Why 4-ary: half the depth of a binary heap for 400k timers per P (10 levels, not 19),
// and the four children of a node share one or two cache lines of the pointer array; Go
// switched to 4-ary for the same reasons (CL 34784's heap).
// Rejected: a timing wheel (O(1) arm/stop, but coarse slots or cascading; corun promises
// nanosecond deadlines); std::priority_queue (no removal from the middle).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace corun::sched {

struct HeapNode {
  static constexpr std::uint32_t kNotInHeap = std::numeric_limits<std::uint32_t>::max();
  // Absolute deadline, CLOCK_MONOTONIC ns. Relaxed in the heap; Timers says the orders.
  std::atomic<std::int64_t> when{0};
  std::uint32_t index = kNotInHeap;  // position in its heap; owner's lock
  bool in_heap() const noexcept { return index != kNotInHeap; }
  std::int64_t deadline() const noexcept { return when.load(std::memory_order_relaxed); }
};

class TimerHeap {
 public:
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

  std::size_t size() const noexcept { return v_.size(); }
  bool empty() const noexcept { return v_.empty(); }
  // The earliest key, kNever when empty: the earliest deadline, or below it after an
  // update_lazy (see there).
  std::int64_t earliest() const noexcept { return v_.empty() ? kNever : v_[0].when; }
  HeapNode* top() const noexcept { return v_.empty() ? nullptr : v_[0].t; }

  // Adds t (not in any heap) with its current `when`. May allocate (vector growth).
  void push(HeapNode* t) {
    v_.push_back(Entry{t->deadline(), t});
    sift_up(v_.size() - 1, v_.back());
  }

  // Removes t, which must be in this heap.
  void remove(HeapNode* t) noexcept {
    std::size_t i = t->index;
    Entry last = v_.back();  // (its key may be below last.t->when: kept as it is)
    v_.pop_back();
    t->index = HeapNode::kNotInHeap;
    if (last.t == t) return;  // t was the last slot
    // The moved entry may belong above or below slot i.
    if (i > 0 && last.when < v_[parent(i)].when)
      sift_up(i, last);
    else
      sift_down(i, last);
  }

  // Removes and returns the earliest timer; nullptr when empty.
  HeapNode* pop() noexcept {
    if (v_.empty()) return nullptr;
    HeapNode* t = v_[0].t;
    remove(t);
    return t;
  }

  // Changes the deadline of t, which must be in this heap.
  void update(HeapNode* t, std::int64_t when,
              std::memory_order order = std::memory_order_relaxed) noexcept {
    t->when.store(when, order);
    rekey(t, when);
  }

  // Moves t (in this heap) to key `key`, which must be <= t->when; t->when is left as it
  // is (its writer may be racing this call: see Timers::run).
  void rekey(HeapNode* t, std::int64_t key) noexcept {
    Entry e{key, t};
    if (key < v_[t->index].when)
      sift_up(t->index, e);
    else
      sift_down(t->index, e);
  }

  // As update, but a later deadline only changes t->when and leaves t's place (and key)
  // alone: O(1) (Go's timerModifiedLater). The key is then a lower bound, earliest() may
  // be early, and whoever runs the heap must call settle_top() when the top's key is due
  // but its deadline is not. Timers pushed back again and again (a connection's deadline
  // at every read) cost no sift until they reach the top.
  void update_lazy(HeapNode* t, std::int64_t when,
                   std::memory_order order = std::memory_order_relaxed) noexcept {
    if (when >= v_[t->index].when) {
      t->when.store(when, order);
      return;
    }
    update(t, when, order);
  }

  // If the top's key is below its deadline (update_lazy), re-keys it and sinks it;
  // true if it did (look at the new top).
  bool settle_top() noexcept {
    if (v_.empty()) return false;
    const std::int64_t w = v_[0].t->deadline();
    if (v_[0].when == w) return false;
    sift_down(0, Entry{w, v_[0].t});
    return true;
  }

  // Walks the whole heap; true if the invariants hold. O(n): debug builds and tests.
  bool verify() const noexcept {
    for (std::size_t i = 0; i < v_.size(); i++) {
      if (v_[i].t->index != i || v_[i].t->deadline() < v_[i].when) return false;
      if (i > 0 && v_[i].when < v_[parent(i)].when) return false;
    }
    return true;
  }

 private:
  struct Entry {
    std::int64_t when;  // the key: t->when, or below it after update_lazy
    HeapNode* t;
  };

  static constexpr std::size_t parent(std::size_t i) noexcept { return (i - 1) / 4; }

  void place(std::size_t i, Entry e) noexcept {
    v_[i] = e;
    e.t->index = static_cast<std::uint32_t>(i);
  }

  // Puts e at slot i or above (slot i is free to overwrite).
  void sift_up(std::size_t i, Entry e) noexcept {
    while (i > 0) {
      std::size_t p = parent(i);
      if (v_[p].when <= e.when) break;
      place(i, v_[p]);
      i = p;
    }
    place(i, e);
  }

  // Puts e at slot i or below (slot i is free to overwrite).
  void sift_down(std::size_t i, Entry e) noexcept {
    const std::size_t n = v_.size();
    for (;;) {
      std::size_t c = 4 * i + 1;
      if (c >= n) break;
      // The smallest of up to four children (adjacent entries: one or two lines).
      std::size_t best = c;
      std::size_t end = c + 4 < n ? c + 4 : n;
      for (std::size_t k = c + 1; k < end; k++)
        if (v_[k].when < v_[best].when) best = k;
      if (e.when <= v_[best].when) break;
      place(i, v_[best]);
      i = best;
    }
    place(i, e);
  }

  std::vector<Entry> v_;  // the heap; owner's lock
};

}  // namespace corun::sched
