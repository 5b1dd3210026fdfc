// sched/safepoint.cpp — running one hook for every P where no task runs on it (the
// contract: safepoint.hpp).
//
// The pool keeps a shard per P that only the P's owner touches, with plain loads and
// stores (no atomic on get/put). Its trimmer must still empty every shard now and then.
// Go does that in the GC's stop-the-world; corun asks each P to do it at a safe point:
//   - the requester's own P: at once (the requester is a task, not inside a pool call);
//   - an idle P: the requester takes it out of the idle list under Runtime::lock, runs
//     the hook while nobody else can acquire it, and puts it back;
//   - a running P (or one whose M is in blocking()): P::safepoint is set, and its owner
//     runs the hook at the top of find_runnable (every trip; direct task switches come
//     through it at least every 61st pick) or just before it idles the P.
// No request is lost to the race between "the requester sees the P running" and "the
// owner idles it": the requester stores the flag before it takes Runtime::lock to look
// at the status; the owner loads the flag under that lock right before pidleput and runs
// the hook itself if it is set. Whichever takes the lock second sees the other's step.
// The flag is taken with a CAS (asked -> running), so each request runs the hook at most
// once per P, and cleared only after the hook returned, so a requester that waits for
// "no P pending" (the pool's tests, a second trim) sees every P's hook done.
// Rejected: a lock per shard (an atomic RMW on every get and put: ~2x the fast path);
// membarrier-based asymmetric fences (a kernel feature test and ~µs IPIs to all CPUs
// per trim, for no gain over waiting for the next schedule); stopping the world.
// On 2 sockets × 64 cores: a trim request takes Runtime::lock once per idle P; at one
// request per CORUN_POOL_TRIM_MS that is noise.
#include "sched/fence.hpp"
#include "sched/sched.hpp"

namespace corun::sched {

namespace {
SafepointFn g_hook = nullptr;  // set before main, read after
}  // namespace

void register_safepoint_hook(SafepointFn fn) noexcept {
  g_hook = fn;
}

void run_safepoint_slow(P* p) noexcept {
  // acq_rel: the hook runs after the request (acquire) and at most once per request.
  std::uint8_t asked = kSafepointAsked;
  if (!p->safepoint.compare_exchange_strong(asked, kSafepointRunning, std::memory_order_acq_rel))
    return;
  if (g_hook) g_hook(p->id, p->run_id);
  // release: safepoint_pending's acquire load of "none" sees the hook's work. Fails only
  // if a new request came meanwhile: it stays asked, and runs again.
  std::uint8_t running = kSafepointRunning;
  p->safepoint.compare_exchange_strong(running, kSafepointNone, std::memory_order_release,
                                       std::memory_order_relaxed);
}

void request_safepoint(Runtime* rt) noexcept {
  if (!g_hook || !rt) return;
  for (P* p : rt->ps) p->safepoint.store(kSafepointAsked, std::memory_order_release);
  M* self = current_m();
  if (self && self->p && self->curg) run_safepoint_slow(self->p);
  for (P* p : rt->ps) {
    if (p->safepoint.load(std::memory_order_relaxed) != kSafepointAsked) continue;
    if (rt->stopping.load(std::memory_order_acquire)) return;
    P* held = nullptr;
    {
      base::Guard g(rt->lock);
      if (p->status.load(std::memory_order_relaxed) == PStatus::idle) held = pidleget(rt, p);
    }
    if (held != p) {  // not idle (its owner runs the hook), or not in the list after all
      if (held) {
        base::Guard g(rt->lock);
        pidleput(rt, held);
      }
      continue;
    }
    run_safepoint_slow(p);
    {
      base::Guard g(rt->lock);
      pidleput(rt, p);
    }
    // Work pushed to the global queue while we held p found one idle P fewer; look once
    // (the same check handoffp makes after its pidleput).
    full_fence();
    if (!rt->runq.empty_hint()) wakep(rt);
  }
}

bool safepoint_pending(Runtime* rt) noexcept {
  if (!rt) return false;
  for (P* p : rt->ps)
    if (p->safepoint.load(std::memory_order_acquire) != kSafepointNone) return true;
  return false;
}

}  // namespace corun::sched
