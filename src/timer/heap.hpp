// timer/heap.hpp — a 4-ary min-heap of timers keyed by deadline (Go's per-P timer heap).
//
// A plain data structure: it knows nothing of the scheduler, so a P (sched layer) can hold
// one by value and the timer layer can operate on it (DESIGN.md "Layers"). Each timer
// embeds a TimerNode that remembers its own index in the heap, so stop and reset are
// O(log n) — no search. Whoever owns the heap provides the locking: every member function
// requires the owner's lock (per-P timer lock, or the global one in CORUN_TIMERS=global).
//
// Invariants (checked by verify(), which MODE=debug and the tests run):
//   - v_[i]->when >= v_[parent(i)]->when for every i > 0 (4-ary: parent(i) = (i-1)/4);
//   - v_[i]->index == i for every i, and a node outside the heap has index == kNotInHeap.
// Ties keep no particular order (Go's neither): timers with one deadline fire in any order.
// Why 4-ary: half the depth of a binary heap for 400k timers per P (10 levels, not 19),
// and the four children of a node share one or two cache lines of the pointer array; Go
// switched to 4-ary for the same reasons (CL 34784's heap).
// Rejected: a timing wheel (O(1) arm/stop, but coarse slots or cascading; corun promises
// nanosecond deadlines); std::priority_queue (no removal from the middle).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace corun::timer {

struct TimerNode {
  static constexpr std::uint32_t kNotInHeap = std::numeric_limits<std::uint32_t>::max();
  std::int64_t when = 0;             // absolute deadline, CLOCK_MONOTONIC ns
  std::uint32_t index = kNotInHeap;  // position in its heap; owner's lock
  bool in_heap() const noexcept { return index != kNotInHeap; }
};

class TimerHeap {
 public:
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

  std::size_t size() const noexcept { return v_.size(); }
  bool empty() const noexcept { return v_.empty(); }
  // The earliest deadline, kNever when empty.
  std::int64_t earliest() const noexcept { return v_.empty() ? kNever : v_[0]->when; }
  TimerNode* top() const noexcept { return v_.empty() ? nullptr : v_[0]; }

  // Adds t (not in any heap) with its current `when`. May allocate (vector growth).
  void push(TimerNode* t) {
    t->index = static_cast<std::uint32_t>(v_.size());
    v_.push_back(t);
    sift_up(t->index);
  }

  // Removes t, which must be in this heap.
  void remove(TimerNode* t) noexcept {
    std::uint32_t i = t->index;
    TimerNode* last = v_.back();
    v_.pop_back();
    t->index = TimerNode::kNotInHeap;
    if (last == t) return;  // t was the last slot
    v_[i] = last;
    last->index = i;
    // The moved node may belong above or below slot i.
    if (i > 0 && last->when < v_[parent(i)]->when)
      sift_up(i);
    else
      sift_down(i);
  }

  // Removes and returns the earliest timer; nullptr when empty.
  TimerNode* pop() noexcept {
    if (v_.empty()) return nullptr;
    TimerNode* t = v_[0];
    remove(t);
    return t;
  }

  // Changes the deadline of t, which must be in this heap.
  void update(TimerNode* t, std::int64_t when) noexcept {
    std::int64_t old = t->when;
    t->when = when;
    if (when < old)
      sift_up(t->index);
    else if (when > old)
      sift_down(t->index);
  }

  // Walks the whole heap; true if both invariants hold. O(n): debug builds and tests.
  bool verify() const noexcept {
    for (std::size_t i = 0; i < v_.size(); i++) {
      if (v_[i]->index != i) return false;
      if (i > 0 && v_[i]->when < v_[parent(i)]->when) return false;
    }
    return true;
  }

 private:
  static constexpr std::size_t parent(std::size_t i) noexcept { return (i - 1) / 4; }

  void sift_up(std::size_t i) noexcept {
    TimerNode* t = v_[i];
    while (i > 0) {
      std::size_t p = parent(i);
      if (v_[p]->when <= t->when) break;
      v_[i] = v_[p];
      v_[i]->index = static_cast<std::uint32_t>(i);
      i = p;
    }
    v_[i] = t;
    t->index = static_cast<std::uint32_t>(i);
  }

  void sift_down(std::size_t i) noexcept {
    TimerNode* t = v_[i];
    const std::size_t n = v_.size();
    for (;;) {
      std::size_t c = 4 * i + 1;
      if (c >= n) break;
      // The smallest of up to four children.
      std::size_t best = c;
      std::size_t end = c + 4 < n ? c + 4 : n;
      for (std::size_t k = c + 1; k < end; k++)
        if (v_[k]->when < v_[best]->when) best = k;
      if (t->when <= v_[best]->when) break;
      v_[i] = v_[best];
      v_[i]->index = static_cast<std::uint32_t>(i);
      i = best;
    }
    v_[i] = t;
    t->index = static_cast<std::uint32_t>(i);
  }

  std::vector<TimerNode*> v_;  // the heap; owner's lock
};

}  // namespace corun::timer
