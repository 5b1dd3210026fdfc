// sched/proc.hpp — "which P am I, which run, which node": the scheduler's narrow contract
// for the layers above that keep per-P or per-run state (the pool), beside park.hpp,
// timers.hpp and safepoint.hpp. Nothing above src/sched/ includes sched.hpp.
//
// The Runtime stays opaque here: callers hold a Runtime* only to pass it back (as a key
// for "the same run", or to safepoint.hpp). Every answer is a snapshot that holds until
// the caller's next park or yield: a task may resume on another P of the same run.
// Rejected: exposing P and M (a pool reading m->curg, rt->settings and p->numa_node
// directly would be reached by every change to the scheduler's records).
#pragma once

#include <atomic>
#include <cstdint>

#include <corun/proc_tls.hpp>

#include "sched/config.hpp"

namespace corun::sched {

struct Runtime;

// The calling thread's P, mirrored in thread-local storage for the pool's fast path (two
// TLS loads instead of a call chain). Written only by the M's own thread whenever it
// takes or drops a P (sched.hpp set_mp), so it always matches the M's P. Read it only
// where no context switch can happen between the read and the last use, and only in
// functions the caller cannot inline across one (a compiler may reuse a thread-local
// address computed before a switch: sched.hpp current_m()). Public headers read it
// through <corun/proc_tls.hpp> this_proc(), which is why the record's type lives there
// and the variable has a fixed assembler name.
// run_id is 0 exactly when id is -1: run ids count from 1, so "run_id equals this run's"
// alone says "on a P of this run" (the pool tests only that).
// initial-exec: one %fs-relative load even if the library is built position-independent
// (general-dynamic would call __tls_get_addr); it is a static library linked into the
// executable, whose static TLS block always has room for it.
using ProcTls = corun::detail::ProcTls;
extern constinit thread_local ProcTls tls_proc asm("corun_tls_proc")
    __attribute__((tls_model("initial-exec")));

// True if the caller's P was asked to end its time slice (then call park.hpp's
// yield_if_preempted). Two TLS loads and one of the flag: for poll paths that found
// nothing (a select with a default, try_recv), which may run in a loop that never parks.
inline bool preempt_requested() noexcept {
  const std::atomic<bool>* f = tls_proc.preempt;
  return f && f->load(std::memory_order_relaxed);
}

// ---- foreign threads: the gate (runtime.cpp) ----------------------------------------
// A thread that is not one of a runtime's Ms (a foreign thread; also sysmon) reaches the
// running runtime only inside the gate: foreign_enter() counts it in and pins the runtime
// published then, foreign_leave() counts it out, and no runtime is freed while a thread
// that could have seen it is inside (the protocol: runtime.cpp's header). Entries nest
// (per thread); the outermost one decides the pinned runtime. A section is short and never
// waits for a run to end (no parking, no blocking I/O): run()'s end waits for it.
void foreign_enter() noexcept;
void foreign_leave() noexcept;
// The runtime pinned by the calling thread's outermost foreign_enter(): the one published
// then if it was not stopping, else nullptr (the call is "outside run"). nullptr outside
// the gate.
Runtime* foreign_runtime() noexcept;

// The gate as a scope, for the layers above: entered only by a thread holding no P (on a
// P the caller is inside its run, which cannot end under it), so a task pays one TLS load.
// An M without a P (a task in blocking()) enters too, harmlessly: it uses its own M::rt.
class ForeignPin {
 public:
  ForeignPin() noexcept : in_(tls_proc.id < 0) {
    if (in_) foreign_enter();
  }
  ~ForeignPin() {
    if (in_) foreign_leave();
  }
  ForeignPin(const ForeignPin&) = delete;
  ForeignPin& operator=(const ForeignPin&) = delete;

 private:
  bool in_;
};

// The runtime the caller belongs to: its M's, or for any other thread the runtime its
// gate section pinned (foreign_runtime(): nullptr outside a section, or when none runs
// or it is stopping).
Runtime* caller_runtime() noexcept;
// run_id() of the runtime published now, whoever asks (an M left in a blocking() call by
// an earlier run gets the new run's); 0 when none is. Reads it inside the gate.
std::uint64_t running_run_id() noexcept;
// Unique for every run() of the process (never reused, unlike a Runtime's address).
std::uint64_t run_id(const Runtime* rt) noexcept;
int run_procs(const Runtime* rt) noexcept;                 // its number of Ps
const Settings& run_settings(const Runtime* rt) noexcept;  // its CORUN_* settings
bool run_stopping(const Runtime* rt) noexcept;             // shutdown has begun (acquire)

// corun::stats()'s pool counters, on the caller's P (nothing without one): a get that
// found no object and made one; a batch moved between a P's caches and a depot. For the
// pool's slow paths only (an out-of-line call each).
void count_pool_miss() noexcept;
void count_pool_transfer() noexcept;

// True in a task (on a P, or inside blocking()); false on other threads.
bool in_task() noexcept;
// The OS NUMA node the caller's P places its memory on (node_alloc's argument); -1 without
// a P or placement (one node, CORUN_NUMA=off, a synthetic or XML topology).
int caller_node() noexcept;

}  // namespace corun::sched
