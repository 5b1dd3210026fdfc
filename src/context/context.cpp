// context/context.cpp — cancellation trees: context nodes, cancel propagation, deadline
// timers (API.md "Context"; semantics in include/corun/context.hpp).
//
// A node holds: a spin lock, its error state (an atomic, read lock-free by err()), an
// intrusive doubly linked list of children (O(1) unlink), a counted parent pointer, an
// immutable deadline, its done channel (made on the first done() call, as Go does) and
// its deadline Timer (detail::after_call, whose callback captures the node pointer only,
// so the std::function stores it in place and does not allocate).
//
// Lock order (base/lock.hpp, rank context): a parent's lock before its child's, so
// cancel walks down the tree holding the locks of the path from the canceled node to the
// node it is at (Go holds them the same way, by recursion). Removing a node from its
// parent takes the parent's lock without holding the node's. Under a node's lock, cancel
// closes the done channel (rank chan) and stops the timer (ranks timer_rec and
// timers); it never runs user code. A deadline timer's callback (deadline_fired: a cancel,
// spin locks and channel closes only) runs on the thread that fires the timer, with no
// lock held (after_call, timer/timer.hpp), not in a task of its own as after_func's fn:
// a task queued when run() ends is abandoned with the node reference it holds (ASan saw
// that leak in rt.chaos), and a task per expiry costs a spawn.
//
// Guarded by n->lock: n->first (children), n->timer, and n->done until n->done_set is
// true (from then on n->done is read-only and done() reads it without the lock and
// returns a reference to it, good while the node lives).
// Guarded by the parent's lock: n->prev, n->next, n->linked. Immutable after creation:
// n->parent, n->deadline, n->has_deadline. Owned by the one canceller that set n's
// error: n->unref_next.
// State: 0 (none), then err (pending: the canceller holds the lock and is closing done and
// walking the subtree), then err | kSettled (published just before the canceller drops
// the node's lock). err() returns a settled error lock-free; a pending one waits on the
// lock, so err() != none implies done() is closed and every descendant is canceled.
// Whoever holds the lock sees none or settled, never pending.
//
// Lifetime: refs count Context handles (the CancelFunc holds one), children (each holds
// its parent), and an armed deadline timer (its reference passes to whoever wins: the
// callback drops it after canceling, or the canceller whose stop() returned true drops it
// once every lock is released). The last reference unlinks the node from its parent
// under the parent's lock and frees it. A parent's walk touches a child only while it
// holds the parent's lock, and a dying child (refs 0) needs that lock to unlink itself
// before it is freed, so the walk never touches freed memory even for dying children.
//
// Rejected: recursion for the walk (a chain of thousands of contexts would overflow a
// 64 KiB task stack; the walk climbs back up through n->parent instead); dropping the
// locks before canceling children (a second cancel() would return before the subtree is
// canceled, and err() could say canceled while a child was not yet); a parent holding
// references to its children (never-canceled children would leak through the cycle);
// cancel storing the shared closed channel into every node without one (Go does; here
// it would be an atomic on one process-wide cache line per cancel, from every P): a node
// canceled before its first done() gets it from that done() call instead.
#include <corun/context.hpp>

#include <cstdint>
#include <new>

#include "base/check.hpp"
#include "base/lock.hpp"
#include "context/context_internal.hpp"
#include "timer/timer.hpp"

namespace corun::detail {

namespace {

constexpr std::uint8_t kSettled = 4;  // state bit: the cancel (subtree included) finished

#if CORUN_DEBUG_CHECKS
std::atomic<long> g_live_nodes{0};
#endif

struct ContextNode : ContextHeader {
  base::Lock<base::LockRank::context> lock;
  std::atomic<std::uint8_t> state{0};  // ContextError, | kSettled; see the header comment
  bool has_deadline = false;           // immutable
  bool linked = false;                 // in parent->first's list; parent->lock
  Clock::time_point deadline{};        // immutable; min(own, parent's)
  ContextNode* parent = nullptr;       // immutable; set (counted) iff linked at creation
  ContextNode* first CORUN_GUARDED_BY(lock) = nullptr;  // children
  ContextNode* prev = nullptr;                          // siblings; parent->lock
  ContextNode* next = nullptr;
  ContextNode* unref_next = nullptr;   // canceller's list of timer references to drop
  Timer timer CORUN_GUARDED_BY(lock);  // own deadline timer, if any

#if CORUN_DEBUG_CHECKS
  ContextNode() noexcept {
    g_live_nodes.fetch_add(1, std::memory_order_relaxed);
  }
  ~ContextNode() {
    g_live_nodes.fetch_sub(1, std::memory_order_relaxed);
  }
#endif
};

ContextNode* node_of(const Context& c) noexcept {
  return static_cast<ContextNode*>(c.header());
}

void link_locked(ContextNode* p, ContextNode* c) noexcept CORUN_REQUIRES(p->lock) {
  c->prev = nullptr;
  c->next = p->first;
  if (p->first) p->first->prev = c;
  p->first = c;
  c->linked = true;
}

// c in p's list.
void unlink_locked(ContextNode* p, ContextNode* c) noexcept CORUN_REQUIRES(p->lock) {
  if (c->prev)
    c->prev->next = c->next;
  else
    p->first = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = nullptr;
  c->linked = false;
}

void unref(ContextNode* n) noexcept {
  if (n->release()) context_destroy(n);
}

const Chan<std::monostate>& closed_chan() {
  static const Chan<std::monostate> c = [] {
    Chan<std::monostate> ch(0);
    ch.close();
    return ch;
  }();
  return c;
}

// n's state none: n becomes canceled (pending) with err.
void cancel_locked(ContextNode* n, ContextError err, ContextNode** unrefs) noexcept
    CORUN_REQUIRES(n->lock) {
  // release: a receiver woken by the close (ordered after it by the channel's lock) sees
  // the error.
  n->state.store(static_cast<std::uint8_t>(err), std::memory_order_release);
  // Only this canceller closes it (never the shared closed channel: that one is stored
  // only in nodes already canceled), so it cannot throw.
  if (n->done) n->done.close();
  if (n->timer.stop()) {
    // The timer's reference is ours now; drop it once no lock is held (it may be the
    // last, and destroying n takes its parent's lock, which we may hold).
    n->unref_next = *unrefs;
    *unrefs = n;
  }
}

// Cancels n and its subtree with err (unless n already has an error) and, if `remove`,
// unlinks n from its parent. The caller holds a reference to n. The walk locks hand over
// hand down the tree and back up: beyond the analysis (CORUN_NO_TSA); the rank check
// (base/lock.hpp, LockNest::tree) still sees every acquire.
void cancel(ContextNode* n, ContextError err, bool remove) noexcept CORUN_NO_TSA {
  ContextNode* unrefs = nullptr;
  const auto settled = static_cast<std::uint8_t>(static_cast<std::uint8_t>(err) | kSettled);
  n->lock.lock();
  if (n->state.load(std::memory_order_relaxed) != 0) {
    // Already canceled, and settled: its canceller released the lock we now hold only
    // after the whole subtree was done. Its removal from the parent is that canceller's.
    n->lock.unlock();
    return;
  }
  cancel_locked(n, err, &unrefs);
  // Depth-first walk, holding the locks of the path n .. cur. Each child is unlinked
  // before we descend into it, so cur->first is always the next child to visit.
  ContextNode* cur = n;
  for (;;) {
    if (ContextNode* c = cur->first) {
      unlink_locked(cur, c);
      c->lock.lock();
      if (c->state.load(std::memory_order_relaxed) == 0) {
        cancel_locked(c, err, &unrefs);
        cur = c;  // c->parent == cur
      } else {
        // Canceled on its own (its canceller is past the walk and will find it unlinked).
        c->lock.unlock();
      }
      continue;
    }
    // cur's subtree is done. cur stays valid after its unlock until we drop its parent's
    // lock (a dying cur needs that lock to free itself).
    ContextNode* up = cur->parent;
    cur->state.store(settled, std::memory_order_release);
    cur->lock.unlock();
    if (cur == n) break;
    cur = up;
  }
  if (remove) {
    if (ContextNode* p = n->parent) {
      base::Guard g(p->lock);
      if (n->linked) unlink_locked(p, n);
    }
  }
  while (unrefs) {
    ContextNode* next = unrefs->unref_next;
    unref(unrefs);
    unrefs = next;
  }
}

void deadline_fired(ContextNode* n) noexcept {
  cancel(n, ContextError::deadline_exceeded, true);
  unref(n);  // the timer's reference
}

// A new node under parent p (nullptr: background). Links it to p unless p is canceled
// (born with p's error) or `expired` (born with deadline_exceeded). The node has two
// references, for the Context and the CancelFunc that finish() makes of it: counted here,
// before n is shared, rather than by a locked increment there.
ContextNode* make_node(ContextNode* p, bool has_deadline, Clock::time_point deadline,
                       bool expired) {
  auto* n = new ContextNode();
  n->refs.store(2, std::memory_order_relaxed);  // not shared yet: linking publishes it
  n->has_deadline = has_deadline;
  n->deadline = deadline;
  std::uint8_t born = expired ? static_cast<std::uint8_t>(ContextError::deadline_exceeded) : 0;
  if (p) {
    base::Guard g(p->lock);
    if (std::uint8_t s = p->state.load(std::memory_order_relaxed)) {
      born = static_cast<std::uint8_t>(s & ~kSettled);  // the parent's error wins (Go)
    } else if (!born) {
      p->refs.fetch_add(1, std::memory_order_relaxed);
      n->parent = p;
      link_locked(p, n);
    }
  }
  // relaxed: n is not shared yet; publishing the handle orders it.
  if (born) n->state.store(static_cast<std::uint8_t>(born | kSettled), std::memory_order_relaxed);
  return n;
}

std::pair<Context, CancelFunc> finish(ContextNode* n) {
  Context ctx(n);  // takes one of make_node's two references, and the lambda the other
  CancelFunc f = [c = Context(n)]() noexcept { cancel(node_of(c), ContextError::canceled, true); };
  return {std::move(ctx), std::move(f)};
}

// Arms n's own deadline timer to fire d from now (the timer reads the clock again, later,
// so it never fires before n->deadline = an earlier now + d); n is linked and usually not
// canceled. Throws what after_call throws (std::logic_error outside run()), leaving n
// canceled and unlinked.
void arm_deadline(ContextNode* n, Duration d) {
  n->refs.fetch_add(1, std::memory_order_relaxed);  // the timer's
  Timer timer;
  try {
    timer = after_call(d, [n] { deadline_fired(n); });
  } catch (...) {
    n->refs.fetch_sub(1, std::memory_order_relaxed);  // the caller holds another
    cancel(n, ContextError::canceled, true);
    throw;
  }
  {
    base::Guard g(n->lock);
    if (n->state.load(std::memory_order_relaxed) == 0) {
      n->timer = std::move(timer);
      return;
    }
  }
  // Canceled meanwhile (by the parent, or the timer already fired): the callback drops
  // the reference unless we stop it first.
  if (timer.stop()) unref(n);
}

}  // namespace

// n is unreachable (no reference left): its own fields need no lock, which the analysis
// cannot know (CORUN_NO_TSA); its parent's list is edited under the parent's lock.
void context_destroy(ContextHeader* h) noexcept CORUN_NO_TSA {
  auto* n = static_cast<ContextNode*>(h);
  while (n) {
    ContextNode* p = n->parent;
    if (p) {
      base::Guard g(p->lock);
      if (n->linked) unlink_locked(p, n);
    }
    CORUN_DCHECK(n->first == nullptr, "context node freed with children");
    delete n;  // releases the done channel and the (stopped or fired) timer's handle
    n = p && p->release() ? p : nullptr;
  }
}

std::size_t context_children(const Context& c) noexcept {
  ContextNode* n = node_of(c);
  if (!n) return 0;
  base::Guard g(n->lock);
  std::size_t k = 0;
  for (ContextNode* x = n->first; x; x = x->next) k++;
  return k;
}

bool context_timer_armed(const Context& c) noexcept {
  ContextNode* n = node_of(c);
  if (!n) return false;
  base::Guard g(n->lock);
  return n->timer.active();
}

long context_live_nodes() noexcept {
#if CORUN_DEBUG_CHECKS
  return g_live_nodes.load(std::memory_order_relaxed);
#else
  return -1;
#endif
}

}  // namespace corun::detail

namespace corun {

using detail::ContextNode;
using detail::kSettled;
using detail::node_of;

namespace detail {
const Chan<std::monostate>& context_done_slow(ContextHeader* h) {
  ContextNode* n = static_cast<ContextNode*>(h);
  base::Guard g(n->lock);
  if (!n->done) {
    // Already canceled (and settled: we hold the lock): Go's shared closedchan.
    n->done = n->state.load(std::memory_order_relaxed) != 0 ? detail::closed_chan()
                                                            : Chan<std::monostate>(0);
    // release: the handle above is stored before; Context::done's acquire pairs.
    n->done_set.store(true, std::memory_order_release);
  }
  return n->done;
}
}  // namespace detail

ContextError Context::err() const noexcept {
  ContextNode* n = node_of(*this);
  if (!n) return ContextError::none;
  // acquire: pairs with the canceller's release stores.
  std::uint8_t s = n->state.load(std::memory_order_acquire);
  if (s != 0 && !(s & kSettled)) {
    // A cancel in progress: wait for it (it holds the lock until it settles).
    { base::Guard g(n->lock); }
    s = n->state.load(std::memory_order_acquire);
  }
  return static_cast<ContextError>(s & ~kSettled);
}

std::optional<Clock::time_point> Context::deadline() const noexcept {
  ContextNode* n = node_of(*this);
  if (!n || !n->has_deadline) return std::nullopt;
  return n->deadline;
}

std::pair<Context, CancelFunc> with_cancel(const Context& parent) {
  ContextNode* p = node_of(parent);
  bool has = p && p->has_deadline;
  return detail::finish(detail::make_node(p, has, has ? p->deadline : Clock::time_point{}, false));
}

namespace {
// with_deadline(parent, t) given the clock's reading `now` (one read per call: the clock
// is a third of a with_timeout's cost on a VM).
std::pair<Context, CancelFunc> deadline_child(const Context& parent, Clock::time_point t,
                                              Clock::time_point now) {
  ContextNode* p = node_of(parent);
  if (p && p->has_deadline && p->deadline <= t) {
    // The parent's timer cancels it first: no timer of its own (Go).
    return with_cancel(parent);
  }
  ContextNode* n = detail::make_node(p, true, t, t <= now);
  auto r = detail::finish(n);  // owns n from here on, so a throw below frees it
  // Clock::time_point::max() never comes: no timer.
  if (n->state.load(std::memory_order_relaxed) == 0 && t != Clock::time_point::max())
    detail::arm_deadline(n, t - now);
  return r;
}
}  // namespace

std::pair<Context, CancelFunc> with_deadline(const Context& parent, Clock::time_point t) {
  return deadline_child(parent, t, Clock::now());
}

std::pair<Context, CancelFunc> with_timeout(const Context& parent, Duration d) {
  Clock::time_point now = Clock::now();
  Clock::time_point t = d > Clock::time_point::max() - now ? Clock::time_point::max() : now + d;
  return deadline_child(parent, t, now);
}

}  // namespace corun
