// sched/config.hpp — the CORUN_* tuning variables: parsed and validated once, at run().
//
// What it is: a pure function from the (name, value) pairs of every CORUN_* variable to a
// Settings value, plus the table of known variables that the README documents. run() calls
// settings_from_environment() before it starts any thread; nothing starts on an error.
// It belongs to the runtime's boot, not to os/ (no system contract in it); the layers
// above read the running runtime's Settings through sched/proc.hpp.
//
// Invariants:
//  - One table (config.cpp, kVars) is the single source of truth: every name parse_settings
//    accepts is in known_variables(), in the order of DESIGN.md's table, and the "accepted"
//    text of an entry is exactly what that variable's error message prints.
//  - Every error is std::invalid_argument naming the variable, its value (quoted, with
//    non-printable bytes escaped) and what is accepted:
//        CORUN_PROCS="abc": expected a whole number from 1 to 4096
//  - Errors are deterministic: unknown names are reported first (the alphabetically first
//    one), then the known variables in known_variables() order; within CORUN_DEBUG, the
//    first bad item. Only the first error is reported.
//  - An empty value means unset (shell idiom `CORUN_PROCS= prog`). An unknown CORUN_* name
//    is an error even with an empty value: a typo is never silently ignored.
//  - A name given twice (possible in a hand-built environ) is an error, not "first wins".
//  - A name in another case (corun_procs, Corun_Timers: its upper-case form starts with
//    CORUN_, the name itself does not) is not ours, but is almost surely meant for us: it is
//    ignored with one warning line on stderr per process and name, not an error (another
//    program may own such a name). A name that starts with CORUN_ exactly is ours, so
//    CORUN_procs stays an unknown-variable error (with its "did you mean").
//
// Rejected:
//  - Ignoring unknown names/keys (Go's GODEBUG does): a typo like CORUN_PROC=4 would run
//    a benchmark with the wrong setting and nobody would notice.
//  - strtoul/atoi: they skip leading spaces, accept signs ("-1" wraps to 2^64-1), base
//    prefixes and trailing junk. Numbers here are decimal digits only, overflow-checked.
//  - Unit suffixes ("64k", "3us") and case-insensitive words: the unit is in the name,
//    and one spelling per value keeps scripts, greps and docs agreeing.
//  - One getenv() per known variable: it cannot see typos; we scan environ instead.
//
// Thread safety: parse_settings/describe/format_backoff/known_variables/lookalike_warnings
// are pure and thread-safe. settings_from_environment() reads environ, which POSIX does not
// protect: call it while no other thread may run setenv/putenv (run() calls it before starting
// any).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace corun::sched {

enum class BackoffKind {
  spin,    // pause-instruction loop bounded by the cycle counter; amount in ns
  usleep,  // usleep(amount), amount in µs (Go's old 100 / new 3)
  yield,   // sched_yield(); amount unused (0 when parsed)
};

struct Backoff {
  BackoffKind kind = BackoffKind::spin;
  std::uint64_t amount = 3000;  // spin: ns; usleep: µs; yield: unused
  friend bool operator==(const Backoff&, const Backoff&) = default;
};

enum class TimerMode { per_p, global };
enum class PoolMode { sharded, global };

// The parsed configuration. Defaults here equal the documented defaults, so a
// value-initialised Settings is "nothing set".
struct Settings {
  int procs = 0;                        // CORUN_PROCS 1..4096; 0 = unset
  bool pin = true;                      // CORUN_PIN on|off
  bool numa = true;                     // CORUN_NUMA auto|off
  Backoff runnext_backoff;              // CORUN_RUNNEXT_BACKOFF spin:NS | usleep:US | yield
  TimerMode timers = TimerMode::per_p;  // CORUN_TIMERS per-p|global
  std::uint64_t timerslack_ns = 1000;   // CORUN_TIMERSLACK_NS 1..1000000000
  bool timer_spin_auto = true;          // CORUN_TIMER_SPIN auto|off
  std::uint64_t timer_spin_ns = 0;      // CORUN_TIMER_SPIN_NS 0..10000000 (0: auto or off)
  bool netpoll_timerfd = false;         // CORUN_NETPOLL_WAIT pwait2|timerfd
  PoolMode pool = PoolMode::sharded;    // CORUN_POOL sharded|global
  std::uint64_t pool_trim_ms = 5000;    // CORUN_POOL_TRIM_MS 1..3600000
  std::size_t stack_kb = 0;             // CORUN_STACK_KB 16..65536, multiple of 4; 0 = unset
                                        // (runtime default 64, larger under sanitizers)
  std::uint64_t schedtrace_ms = 0;      // CORUN_DEBUG=schedtrace=MS (1..3600000); 0 = off
  bool debug_stealorder = false;        // CORUN_DEBUG=stealorder=1: print the topology plan
  friend bool operator==(const Settings&, const Settings&) = default;
};

// One row of the README's table. All strings are static literals, never null.
struct VarDoc {
  const char* name;           // "CORUN_PROCS"
  const char* default_value;  // "on", "spin:3000", "hardware threads in the affinity mask"
  const char* accepted;       // what error messages print after "expected "
  const char* meaning;        // one line
};

// Every known variable, in the order of DESIGN.md's table (and the error-report order).
const std::vector<VarDoc>& known_variables();

// vars: (name, value) of every CORUN_* variable that is set. Throws std::invalid_argument
// (see the invariants above for the message and which error is reported).
Settings parse_settings(const std::vector<std::pair<std::string, std::string>>& vars);

// The warnings for environment names that look like CORUN_ names in another case (see the
// invariants): one line (no newline) per distinct such name in `names`, in input order:
//   corun: environment variable corun_procs ignored: names are case-sensitive; did you mean
//   CORUN_PROCS?
// Names starting with "CORUN_" exactly, and names not starting with it in any case, give
// none. Pure.
std::vector<std::string> lookalike_warnings(const std::vector<std::string>& names);

// Scans environ: names starting with "CORUN_" go to parse_settings; look-alikes in another
// case are warned about on stderr (lookalike_warnings), each name once per process, before
// parsing, and are otherwise ignored.
Settings settings_from_environment();

// "spin:3000", "usleep:100", "yield" — the CORUN_RUNNEXT_BACKOFF spelling.
std::string format_backoff(const Backoff& b);

// One line for CORUN_DEBUG output, e.g. "procs=2 pin=on numa=auto runnext_backoff=spin:3000
// timers=per-p timerslack_ns=1000 timer_spin=auto timer_spin_ns=0 netpoll_wait=pwait2 pool=sharded
// pool_trim_ms=5000 stack_kb=default schedtrace_ms=off stealorder=0" (unset procs/stack_kb print
// "default").
std::string describe(const Settings& s);

}  // namespace corun::sched
