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

#include <cstdint>

#include "sched/config.hpp"

namespace corun::sched {

struct Runtime;

// The calling thread's P, mirrored in thread-local storage for the pool's fast path (two
// TLS loads instead of a call chain). Written only by the M's own thread whenever it
// takes or drops a P (sched.hpp set_mp), so it always matches the M's P. Read it only
// where no context switch can happen between the read and the last use.
struct ProcTls {
  int id = -1;               // the P's id, -1 when the thread holds no P
  std::uint64_t run_id = 0;  // run_id() of the P's runtime
};
extern constinit thread_local ProcTls tls_proc;

// The runtime the caller belongs to: its M's, or for a thread that is not the runtime's,
// the running one. nullptr when no runtime runs.
Runtime* caller_runtime() noexcept;
// The runtime now running in the process, whoever asks (an M left in a blocking() call
// by an earlier run gets the new run's, or nullptr). nullptr when none runs.
Runtime* running_runtime() noexcept;
// Unique for every run() of the process (never reused, unlike a Runtime's address).
std::uint64_t run_id(const Runtime* rt) noexcept;
int run_procs(const Runtime* rt) noexcept;                 // its number of Ps
const Settings& run_settings(const Runtime* rt) noexcept;  // its CORUN_* settings
bool run_stopping(const Runtime* rt) noexcept;             // shutdown has begun (acquire)

// True in a task (on a P, or inside blocking()); false on other threads.
bool in_task() noexcept;
// The NUMA node of the caller's P (for placing per-P memory); -1 without a P or a node.
int caller_node() noexcept;

}  // namespace corun::sched
