// corun/context.hpp — cancellation trees and deadlines (API.md "Context"), Go's context
// package without values.
//
// Context is a shared handle (an intrusive reference count, like Chan) to a node in the
// library (src/context/context.cpp). background() is the null handle: never done (its
// done() is a nil channel, never ready), err() none, no deadline. with_cancel /
// with_deadline / with_timeout make a child node; canceling a node (its CancelFunc, its
// deadline timer, or an ancestor's cancel) closes its done() channel, cancels every
// descendant with the same error, and removes the node from its parent. A child of a
// canceled parent is born canceled with the parent's error; a child whose deadline has
// already passed is born with deadline_exceeded. err() is set once and never changes: the
// first cause wins (cancel() before the deadline gives canceled).
//
// done() returns a reference to the channel the node keeps (API.md), not a handle.
// Invariants: err() != none exactly when done() is closed (as observed by any thread: a
// cancel in progress makes err() wait for it); deadline() is immutable and is the
// earlier of the context's own deadline and its parent's; done() never closes before
// deadline() by Clock; when a CancelFunc returns, the context and all its descendants
// are canceled, whoever canceled them.
// Lifetime: a node lives while a Context handle, a CancelFunc, a child, or its armed
// deadline timer refers to it. A parent does not own its children: dropping every handle
// of a child that was never canceled frees it and unlinks it from its parent (Go would
// keep it in the parent until the parent is canceled).
//
// Beyond API.md: a default-constructed Context is background(); operator== compares
// identity. with_deadline / with_timeout need a running runtime for their timer (like
// after_func, they throw std::logic_error outside corun::run) unless no timer is needed:
// the deadline has already passed, or the parent's deadline is earlier. with_cancel
// works anywhere. Every function may be called from tasks on any P and from threads
// that are not the runtime's. A deadline context whose timer is still armed when run()
// returns is not freed (the timer's reference is abandoned with the runtime's timers,
// as tasks are): cancel contexts when done with them, as in Go.
// Rejected: std::shared_ptr for the handle (a control block, and the timer callback
// could not hold a reference without allocating); a parent owning references to its
// children (a parent <-> child cycle that leaks every never-canceled child).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <utility>
#include <variant>

#include <corun/chan.hpp>
#include <corun/time.hpp>

namespace corun {

enum class ContextError { none, canceled, deadline_exceeded };

namespace detail {
// The part of a context node that handles touch inline: its reference count, and the
// done channel once it is made (so that select(on_recv(ctx.done(), ...), otherwise(...)),
// the check a request handler makes in its loop, costs no call for done()).
struct ContextHeader {
  // relaxed on copy (a handle already holds a reference); acq_rel on drop, so the last
  // owner sees every other owner's writes before the node is destroyed.
  std::atomic<std::size_t> refs{1};
  // Drops one reference; true if it was the last (the caller destroys the node). A sole
  // owner (refs 1) skips the locked decrement: nobody else holds a reference with which
  // to take another, and the acquire load sees every earlier owner's writes, as the
  // acq_rel decrement would (each owner's drop was a release). The last drop of a
  // context (its handle's or its CancelFunc's, whichever goes second) is then a load.
  bool release() noexcept {
    return refs.load(std::memory_order_acquire) == 1 ||
           refs.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
  // true once `done` is made; then it never changes. Stored (release) by the library
  // under the node's lock after `done`; loaded (acquire) here, so a reader that sees
  // true sees the handle.
  std::atomic<bool> done_set{false};
  // Made by the first done() (under the node's lock), then read-only.
  Chan<std::monostate> done{nullptr};
};
void context_destroy(ContextHeader* n) noexcept;                  // refs reached zero
const Chan<std::monostate>& context_done_slow(ContextHeader* n);  // n's done, made if need be
}  // namespace detail

class Context {
 public:
  Context() noexcept = default;  // background()
  static Context background() noexcept { return Context(); }

  Context(const Context& o) noexcept : n_(o.n_) {
    if (n_) n_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  Context(Context&& o) noexcept : n_(std::exchange(o.n_, nullptr)) {}
  Context& operator=(const Context& o) noexcept {
    Context(o).swap(*this);
    return *this;
  }
  Context& operator=(Context&& o) noexcept {
    Context(std::move(o)).swap(*this);
    return *this;
  }
  ~Context() {
    if (n_ && n_->release()) detail::context_destroy(n_);
  }
  void swap(Context& o) noexcept { std::swap(n_, o.n_); }

  // Closed when the context is canceled or its deadline passed; the same object on every
  // call, good while the node lives (at least as long as this handle): copy it
  // (Chan<std::monostate> c = ctx.done();) to keep it longer. Returning a reference lets
  // select(on_recv(ctx.done(), ...)) run without touching a reference count, which every
  // P would otherwise write. background(): a static nil channel (never ready).
  const Chan<std::monostate>& done() const {
    if (!n_) return detail::nil_chan<std::monostate>;  // background: never done
    if (n_->done_set.load(std::memory_order_acquire)) [[likely]]
      return n_->done;
    return detail::context_done_slow(n_);
  }
  ContextError err() const noexcept;
  std::optional<Clock::time_point> deadline() const noexcept;

  friend bool operator==(const Context& a, const Context& b) noexcept { return a.n_ == b.n_; }

  explicit Context(detail::ContextHeader* n) noexcept : n_(n) {}  // the library's
  detail::ContextHeader* header() const noexcept { return n_; }   // the library's

 private:
  detail::ContextHeader* n_ = nullptr;  // nullptr: background
};

// Idempotent and thread-safe: cancels the context and its descendants (error canceled,
// unless they already had an error), stops its deadline timer, and removes it from its
// parent. When it returns, the context and all its descendants are canceled.
using CancelFunc = std::function<void()>;

std::pair<Context, CancelFunc> with_cancel(const Context& parent);
// deadline() = min(t, parent.deadline()). Throws std::logic_error outside corun::run
// when a timer is needed (see the header comment).
std::pair<Context, CancelFunc> with_deadline(const Context& parent, Clock::time_point t);
// with_deadline(parent, Clock::now() + d), saturating: Duration::max() never expires.
std::pair<Context, CancelFunc> with_timeout(const Context& parent, Duration d);

}  // namespace corun
