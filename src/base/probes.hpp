// base/probes.hpp — USDT probes (sys/sdt.h): static tracepoints for perf and bpftrace.
//
// Each probe is one nop in the code and a note in the ELF (.note.stapsdt); it costs
// nothing until a tracer enables it. Provider "corun":
//   spawn(task_id, p)            a task was created on P p (-1: a thread without a P)
//   park(task_id, p)             a task parked (fired once it is off its stack)
//   ready(task_id, p)            a parked task was made runnable by P p (-1: no P)
//   steal(thief_p, victim_p, n)  P thief took n tasks from P victim
//   spinning_idle(p)             an M found nothing, gave P p back, and goes to sleep
//   chan_block(chan, is_send)    a send (1) or receive (0) on channel address chan waits
//   select_block(ncases)         a select with ncases non-nil cases waits on all of them
//   chan_close(chan, woken)      channel chan was closed, waking `woken` waiters
//   timer_fire(n, late_ns)       a timer heap fired n timers; the first was late_ns late
//   timer_watch(until_ns)        the idle wait sleeps until until_ns (-1: no timer)
//   pool_spill(pool, n)          a P's full cache sent a batch of n objects to the depot
//   pool_refill(pool, n)         a P's empty cache took a batch of n objects from it
//   pool_trim(freed, nodes)      a trim destroyed `freed` idle objects, `nodes` batch nodes
// Use: perf buildid-cache --add ./app; perf list 'sdt_corun:*';
//      perf probe sdt_corun:steal; perf record -e sdt_corun:steal -a -- ./app
// Rejected: LTTng-UST or our own ring buffer — USDT needs no runtime library, no
// registration, and perf/bpftrace already read it.
#pragma once

#if __has_include(<sys/sdt.h>)
#include <sys/sdt.h>
#define CORUN_PROBE1(name, a) DTRACE_PROBE1(corun, name, a)
#define CORUN_PROBE2(name, a, b) DTRACE_PROBE2(corun, name, a, b)
#define CORUN_PROBE3(name, a, b, c) DTRACE_PROBE3(corun, name, a, b, c)
#else
// Without sys/sdt.h the arguments are still evaluated, as the probes evaluate them, so a
// variable kept only for a probe is not "set but not used" (-Werror).
#define CORUN_PROBE1(name, a) ((void)(a))
#define CORUN_PROBE2(name, a, b) ((void)(a), (void)(b))
#define CORUN_PROBE3(name, a, b, c) ((void)(a), (void)(b), (void)(c))
#endif
