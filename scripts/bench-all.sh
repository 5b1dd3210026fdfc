#!/usr/bin/env bash
# `make bench`: the main job. Runs corun's benchmarks under the old and the new setting
# in one run and prints old/new/delta/p-value tables like the seeds' (scripts/benchcmp),
# then, if Go is installed, corun beside Go 1.19's own benchmarks (scripts/go-compare).
# Sections: scheduler and channels under runnext backoff usleep:100 vs the default (Go CL
# 20835's tables), memory per parked task, request/response latency under each backoff
# mode, timers and contexts under CORUN_TIMERS=global vs per-p (Go CL 34784's table, the
# seed's deltas beside ours), timer lateness under each timer slack, the pool under
# CORUN_POOL=global vs sharded (Go CL 46010043's table, the seed's deltas beside ours) with
# its per-P scaling and the malloc floor, then corun vs Go (runtime, time, context, sync
# Pool and fmt Sprintf benchmarks, and scripts/gobench's twins).
#
# Usage: scripts/bench-all.sh BUILD_DIR
#   env: COUNT=5 CPUS=1,2 BENCHTIME=300ms (Go's -benchtime for the ramped benchmarks),
#        SIEVE_BENCHTIME=5000x POWSER_BENCHTIME=100x (fixed op counts for the slow ones:
#        a Sieve op takes ~30-60 us, a Powser op ~2-3 ms; no ramp, ~0.2 s per result),
#        TIMER_COUNT=5 TIMER_BENCHTIME=100ms (the time/context suite: an op is 1000 timer
#        operations, ~0.1-5 ms, and every run first arms 1<<15 timers per P),
#        TIMER_GO_COUNT=3 (their comparison with Go's time and context packages),
#        LATENESS_COUNT=3 LATENESS_BENCHTIME=100ms (TimerLateness, per slack setting),
#        POOL_COUNT=$COUNT POOL_BENCHTIME=100ms POOL_CPUS=1,2,8,16 (the pool A/B,
#        CORUN_POOL=global vs sharded, and its per-P scaling; 8 and 16 Ps oversubscribe a
#        small machine on purpose; the malloc floor runs beside it at -cpu $CPUS),
#        POOL_GO_COUNT=3 (pool and Sprintf vs Go), EXPENSIVE_BENCHTIME=1s (PoolExpensiveNew:
#        its first op makes 100 objects per P at 1 ms each, so a shorter goal stops at N=1)
# Results go to BUILD_DIR/bench/. The machine is shared and noisy: the tables give
# medians of COUNT runs and Mann-Whitney p-values; read ratios, not absolute times.
# Time: ~15-20 min on a 2-core machine with COUNT=5 (Go's runtime tests compile once, ~1 min);
# the timer sections take ~6 min of it (A/B ~1.7, lateness ~0.9, vs Go ~3.4); the pool
# sections ~2.5 min (A/B at 1,2,8,16 Ps with the malloc floor ~1.8, vs Go ~0.7 once Go's
# sync and fmt tests are compiled).
set -euo pipefail
b=${1:-build}
bench="$b/corun-bench"
out="$b/bench"
mkdir -p "$out"
COUNT=${COUNT:-5}
CPUS=${CPUS:-1,2}
BENCHTIME=${BENCHTIME:-300ms}
SIEVE_BENCHTIME=${SIEVE_BENCHTIME:-5000x}
POWSER_BENCHTIME=${POWSER_BENCHTIME:-100x}
sched='^(CreateTasks|CreateTasksParallel|Yield|WaitGroupHandoff|MutexHandoff)$'
# The channel suite (perf/bench_chan.cpp): Go's runtime names, then the seed's programs.
# Sieve and Powser run apart with a fixed op count (chan_bench below).
chan_go='ChanSync|ChanSyncWork|ChanProdCons(0|10|100)|ChanProdConsWork(0|10|100)|ChanContended|ChanUncontended|SelectUncontended|SelectSyncContended|SelectProdCons|PingPongHog'
chan="^($chan_go|Chain|ChainBuf|ChanRequestResponse)\$"
# The timer suite (perf/bench_time.cpp, Go's time package names) and the context one
# (perf/bench_context.cpp); the A/B runs Go CL 34784's table: the time names and
# WithTimeout/concurrency=N.
TIMER_COUNT=${TIMER_COUNT:-$COUNT}
TIMER_BENCHTIME=${TIMER_BENCHTIME:-100ms}
TIMER_GO_COUNT=${TIMER_GO_COUNT:-3}
LATENESS_COUNT=${LATENESS_COUNT:-3}
LATENESS_BENCHTIME=${LATENESS_BENCHTIME:-100ms}
time_go='AfterFunc|After|Stop|SimultaneousAfterFunc|StartStop|Reset|Sleep|Ticker|TickerReset|TickerResetNaive'
ctx_go='CommonParentCancel|WithTimeout|CancelTree|CheckCanceled|ContextCancelDone'
timers="^($time_go|WithTimeout/concurrency=[0-9]+)\$"
# The pool suite (perf/bench_pool.cpp): Go CL 46010043's table is Pool, PoolOverflow and
# the Sprintf family (the rows named as Go's use a pooled buffer; <name>/fresh formats into
# a fresh std::string and does not touch a Pool, so it runs once, beside the malloc floor).
POOL_COUNT=${POOL_COUNT:-$COUNT}
POOL_BENCHTIME=${POOL_BENCHTIME:-100ms}
POOL_CPUS=${POOL_CPUS:-1,2,8,16}
POOL_GO_COUNT=${POOL_GO_COUNT:-3}
EXPENSIVE_BENCHTIME=${EXPENSIVE_BENCHTIME:-1s}
sprintf_names='Sprintf(Empty|String|Int|IntInt|PrefixedInt|Float|ManyArgs)'
pool_ab="^(Pool|PoolOverflow|PoolStarvation|$sprintf_names)\$"

# medians_table LABEL,LABEL,... UNIT,UNIT,... FILE...: per unit (in that order) and
# benchmark, the median of each file's samples in a column per label ("-" where a file
# lacks it).
medians_table() {
  python3 - "$@" <<'PY'
import re, statistics, sys
labels = sys.argv[1].split(",")
wanted = sys.argv[2].split(",")
line_re = re.compile(r"^Benchmark(\S+)\s+\d+((?:\s+\S+\s+\S+)+)\s*$")
data, orders = [], []
for path in sys.argv[3:]:
    d, order = {}, []
    for line in open(path):
        m = line_re.match(line.rstrip("\n"))
        if not m:
            continue
        f = m.group(2).split()
        if m.group(1) not in order:
            order.append(m.group(1))
        for v, u in zip(f[0::2], f[1::2]):
            d.setdefault((m.group(1), u), []).append(float(v))
    data.append(d)
    orders.append(order)
# Row order: the file with the most benchmarks, then any the others add.
names = max(orders, key=len) if orders else []
names = names + [n for o in orders for n in o if n not in names]
rows = [["name", "unit"] + labels]
for u in wanted:
    for n in names:
        if any((n, u) in d for d in data):
            rows.append([n, u] + ["%.4g" % statistics.median(d[(n, u)]) if (n, u) in d else "-"
                                  for d in data])
w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for r in rows:
    print("  ".join([r[0].ljust(w[0]), r[1].ljust(w[1])] + [c.rjust(w[i]) for i, c in enumerate(r) if i > 1]))
PY
}

# chan_bench: the whole channel suite once, appended to $1 (environment as the caller's).
chan_bench() {
  {
    "$bench" -bench "$chan" -cpu "$CPUS" -benchtime "$BENCHTIME"
    "$bench" -bench '^Sieve$' -cpu "$CPUS" -benchtime "$SIEVE_BENCHTIME"
    "$bench" -bench '^Powser$' -cpu "$CPUS" -benchtime "$POWSER_BENCHTIME"
  } >> "$1"
}

# Old and new alternate per count (A B A B ...) so that drift in the machine's load hits
# both sides alike.
: > "$out/sched-old.txt"
: > "$out/sched-new.txt"
for ((i = 1; i <= COUNT; i++)); do
  CORUN_RUNNEXT_BACKOFF=usleep:100 "$bench" -bench "$sched" -cpu "$CPUS" -benchtime "$BENCHTIME" \
    >> "$out/sched-old.txt"
  "$bench" -bench "$sched" -cpu "$CPUS" -benchtime "$BENCHTIME" >> "$out/sched-new.txt"
done
echo
echo "== scheduler: runnext backoff usleep:100 (Go before CL 20835) vs spin:3000 (corun), -cpu $CPUS, n=$COUNT"
python3 scripts/benchcmp --labels usleep100,spin3000 "$out/sched-old.txt" "$out/sched-new.txt"

# The seed's own table (ChanSync, ChanSyncWork, Chain, ChainBuf, Powser, Sieve) and the
# rest of the channel suite, old and new alternating per count as above.
: > "$out/chan-old.txt"
: > "$out/chan-new.txt"
for ((i = 1; i <= COUNT; i++)); do
  CORUN_RUNNEXT_BACKOFF=usleep:100 chan_bench "$out/chan-old.txt"
  chan_bench "$out/chan-new.txt"
done
echo
echo "== channels: runnext backoff usleep:100 (Go before CL 20835) vs spin:3000 (corun), -cpu $CPUS, n=$COUNT"
python3 scripts/benchcmp --labels usleep100,spin3000 "$out/chan-old.txt" "$out/chan-new.txt"

echo
echo "== memory per parked task (one run of up to 1M tasks; each first touch is a page fault)"
"$bench" -bench '^ParkedTasks$' -cpu 2 | grep -E '^Benchmark' | tee "$out/parked.txt"

# Request/response round trips under each backoff mode: Go before CL 20835 (usleep:100),
# Go after it (usleep:3, which the kernel's timer slack stretches), corun's spin default.
# Modes alternate per count.
modes=(usleep:100 usleep:3 spin)
for m in "${modes[@]}"; do : > "$out/rr-${m/:/}.txt"; done
for ((i = 1; i <= COUNT; i++)); do
  for m in "${modes[@]}"; do
    if [[ $m == spin ]]; then
      "$bench" -bench '^ChanRequestResponse$' -cpu "$CPUS" -benchtime "$BENCHTIME" >> "$out/rr-spin.txt"
    else
      CORUN_RUNNEXT_BACKOFF=$m "$bench" -bench '^ChanRequestResponse$' -cpu "$CPUS" \
        -benchtime "$BENCHTIME" >> "$out/rr-${m/:/}.txt"
    fi
  done
done
echo
echo "== request/response round trip by runnext backoff (medians of $COUNT; spin = default spin:3000)"
python3 - "$out/rr-usleep100.txt" "$out/rr-usleep3.txt" "$out/rr-spin.txt" <<'PY'
import re, statistics, sys
labels = ["usleep:100", "usleep:3", "spin"]
line_re = re.compile(r"^Benchmark(\S+)\s+\d+((?:\s+\S+\s+\S+)+)\s*$")
data, names, units = [], [], []
for path in sys.argv[1:]:
    d = {}
    for line in open(path):
        m = line_re.match(line.rstrip("\n"))
        if not m:
            continue
        f = m.group(2).split()
        if m.group(1) not in names:
            names.append(m.group(1))
        for v, u in zip(f[0::2], f[1::2]):
            if u not in units:
                units.append(u)
            d.setdefault((m.group(1), u), []).append(float(v))
    data.append(d)
rows = [["name", "unit"] + labels]
for n in names:
    for u in units:
        rows.append([n, u] + ["%.4g" % statistics.median(d[(n, u)]) if (n, u) in d else "-"
                              for d in data])
w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for r in rows:
    print("  ".join([r[0].ljust(w[0]), r[1].ljust(w[1])] + [c.rjust(w[i]) for i, c in enumerate(r) if i > 1]))
PY
echo
echo "p-values, Go's usleep:3 vs corun's spin:"
python3 scripts/benchcmp --labels usleep3,spin3000 "$out/rr-usleep3.txt" "$out/rr-spin.txt"

# Timers and contexts: one global heap under one lock (CORUN_TIMERS=global, the seed's
# "old") vs per-P heaps (the default), alternating per count. Every op is 1000 timer
# operations (10 contexts for WithTimeout) on every P with 1<<15 garbage timers per P.
: > "$out/timers-old.txt"
: > "$out/timers-new.txt"
for ((i = 1; i <= TIMER_COUNT; i++)); do
  CORUN_TIMERS=global "$bench" -bench "$timers" -cpu "$CPUS" -benchtime "$TIMER_BENCHTIME" \
    >> "$out/timers-old.txt"
  "$bench" -bench "$timers" -cpu "$CPUS" -benchtime "$TIMER_BENCHTIME" >> "$out/timers-new.txt"
done
echo
echo "== timers and contexts: CORUN_TIMERS=global (Go before CL 34784) vs per-p (corun), -cpu $CPUS, n=$TIMER_COUNT"
echo "   (last column: the seed's delta, Go CL 34784 on linux/amd64, for the same name and P)"
python3 scripts/benchcmp --labels global,per-p "$out/timers-old.txt" "$out/timers-new.txt" |
  python3 -c '
import sys
# Go CL 34784 (old time/op -> new time/op, linux/amd64): its deltas by name and P.
seed = """WithTimeout/concurrency=40 +5.07 -24.90 -26.13
WithTimeout/concurrency=4000 +7.63 -18.26 -20.36
WithTimeout/concurrency=400000 +5.02 -16.30 -13.27
AfterFunc ~ +3.91 -53.20
After ~ +5.14 -56.89
Stop -1.26 -40.49 -60.20
SimultaneousAfterFunc ~ -20.33 -50.67
StartStop +2.64 -40.95 -61.02
Reset +3.38 -73.09 -85.42
Sleep ~ -5.21 -32.53
Ticker ~ -2.06 -6.80"""
deltas = {}
for line in seed.splitlines():
    name, *d = line.split()
    for p, v in zip(("", "-2", "-4"), d):
        deltas[name + p] = v if v == "~" else v + "%"
first_table = True
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line:
        first_table = False
    f = line.split()
    if first_table and f and f[0] in deltas:
        line += "  seed: " + deltas[f[0]]
    print(line)
'

# Timer lateness (perf/bench_time.cpp TimerLateness) under each timer slack of the
# runtime's threads (CORUN_TIMERSLACK_NS: the kernel's default 50 us, corun's 1 us,
# 1 ns) and with 20 us of spinning before each deadline; settings alternate per count.
# The Floor rows do not depend on the setting (their thread sets its own 1 ns slack):
# they run once per count, in the default setting's column (slack1us).
lateness_labels=slack50us,slack1us,slack1ns,spin20us
lateness_env=("CORUN_TIMERSLACK_NS=50000" "CORUN_TIMERSLACK_NS=1000" "CORUN_TIMERSLACK_NS=1"
  "CORUN_TIMER_SPIN_NS=20000")
lateness_regex=('^TimerLateness/(Sleep|Sleep1|AfterFunc)=' '^TimerLateness/'
  '^TimerLateness/(Sleep|Sleep1|AfterFunc)=' '^TimerLateness/(Sleep|Sleep1|AfterFunc)=')
lateness_files=()
for l in ${lateness_labels//,/ }; do
  : > "$out/lateness-$l.txt"
  lateness_files+=("$out/lateness-$l.txt")
done
for ((i = 1; i <= LATENESS_COUNT; i++)); do
  for k in "${!lateness_env[@]}"; do
    env "${lateness_env[$k]}" "$bench" -bench "${lateness_regex[$k]}" -cpu "$CPUS" \
      -benchtime "$LATENESS_BENCHTIME" >> "${lateness_files[$k]}"
  done
done
echo
echo "== timer lateness (ns past the deadline; 100 tasks; busy = every P spinning 5 us per yield),"
echo "   medians of $LATENESS_COUNT by timer slack; spin20us = slack 1us + CORUN_TIMER_SPIN_NS=20000"
medians_table "$lateness_labels" p50-ns,p99-ns,max-ns,cpu% "${lateness_files[@]}"

# The pool: one lock-protected list (CORUN_POOL=global, Go's Pool before CL 46010043,
# the seed's "old") vs per-P caches with a batch depot (sharded, the default), alternating
# per count, at POOL_CPUS (8 and 16 Ps on a 2-core machine are oversubscribed: Ps share
# CPUs and a lock holder can be preempted, which is where the global list collapses).
# The seed ran -cpu 1,4,8,16,32 (Pool only 1,4,16,32; PoolOverflow 1,4,8,16): a row whose
# P the seed lacks gets the seed's delta at the next larger P, labelled so.
# The floor (what a pool must beat) runs in the same loop, so that the machine's load
# drifts alike on both: MallocFree = new+delete of the pool's Item (8 bytes),
# MallocFree/memory_buffer = of the Sprintf buffer; the release build's malloc is jemalloc
# (its per-thread cache), so these are jemalloc's fast path. Sprintf*/fresh: fmt::format
# into a fresh std::string (fmt's stack buffer; short results stay in the string's SSO).
pool_floor="^(MallocFree(/memory_buffer)?|$sprintf_names/fresh)\$"
: > "$out/pool-old.txt"
: > "$out/pool-new.txt"
: > "$out/pool-floor.txt"
for ((i = 1; i <= POOL_COUNT; i++)); do
  CORUN_POOL=global "$bench" -bench "$pool_ab" -cpu "$POOL_CPUS" -benchtime "$POOL_BENCHTIME" \
    >> "$out/pool-old.txt"
  CORUN_POOL=sharded "$bench" -bench "$pool_ab" -cpu "$POOL_CPUS" -benchtime "$POOL_BENCHTIME" \
    >> "$out/pool-new.txt"
  "$bench" -bench "$pool_floor" -cpu "$CPUS" -benchtime "$POOL_BENCHTIME" >> "$out/pool-floor.txt"
done
echo
echo "== pool: CORUN_POOL=global (Go before CL 46010043) vs sharded (corun), -cpu $POOL_CPUS, n=$POOL_COUNT"
echo "   (last column: the seed's delta, Go CL 46010043, for the same name and P; Sprintf*"
echo "   rows format with {fmt} into a pooled fmt::memory_buffer; allocs/op: Items allocated"
echo "   because a get found nothing)"
python3 scripts/benchcmp --labels global,sharded "$out/pool-old.txt" "$out/pool-new.txt" |
  python3 -c '
import re, sys
# Go CL 46010043 (old time/op -> new time/op): "name P:delta ...". The seed spells
# PoolOverflow "PoolOverlflow"; its ManyArgs is our SprintfManyArgs.
seed = """Pool 1:-55.65 4:-98.53 16:-99.60 32:-99.58
PoolOverflow 1:-30.32 4:-77.64 8:-75.73 16:-66.93
SprintfEmpty 1:-25.68 2:-91.13 4:-95.25 8:-97.77 16:-98.87 32:-99.04
SprintfString 1:-11.58 2:-74.91 4:-88.05 8:-94.48 16:-95.96 32:-96.28
SprintfInt 1:-11.74 2:-69.20 4:-91.63 8:-95.43 16:-97.46 32:-97.70
SprintfIntInt 1:-9.32 2:-56.46 4:-82.87 8:-94.90 16:-97.00 32:-97.17
SprintfPrefixedInt 1:-12.94 2:-31.43 4:-83.36 8:-91.23 16:-93.49 32:-93.83
SprintfFloat 1:-4.78 2:-31.19 4:-78.12 8:-93.13 16:-96.24 32:-96.62
SprintfManyArgs 1:-2.55 2:-19.57 4:-59.72 8:-82.14 16:-90.76 32:-92.03"""
deltas = {}
for line in seed.splitlines():
    name, *d = line.split()
    deltas[name] = {int(p): v + "%" for p, v in (x.split(":") for x in d)}
first_table = True
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line:
        first_table = False
    f = line.split()
    m = re.match(r"^(.*?)(?:-(\d+))?$", f[0]) if f else None
    if first_table and m and m.group(1) in deltas:
        procs = int(m.group(2) or 1)
        d = deltas[m.group(1)]
        if procs in d:
            line += "  seed: " + d[procs]
        elif any(p > procs for p in d):
            p = min(p for p in d if p > procs)
            line += "  seed at %dP: %s" % (p, d[p])
    print(line)
'

# Per-P scaling, from the A/B's files: ns/op is wall time per op over all Ps (Go's
# RunParallel), so perfect scaling halves it from 1 to 2 Ps and stays flat beyond the cores.
echo
echo "== pool scaling: ns/op by P (medians of $POOL_COUNT from the A/B; $(nproc) CPUs, more Ps are oversubscribed)"
python3 - "$POOL_CPUS" "$out/pool-old.txt" "$out/pool-new.txt" <<'PY'
import re, statistics, sys
cpus = [int(c) for c in sys.argv[1].split(",")]
line_re = re.compile(r"^Benchmark(\S+?)(?:-(\d+))?\s+\d+\s+(\S+) ns/op")
rows = [["name", "mode"] + ["P=%d" % p for p in cpus] + ["P=%d/P=1" % cpus[-1]]]
for name in ("Pool", "PoolOverflow", "SprintfInt"):
    for mode, path in (("global", sys.argv[2]), ("sharded", sys.argv[3])):
        d = {}
        for line in open(path):
            m = line_re.match(line)
            if m and m.group(1) == name:
                d.setdefault(int(m.group(2) or 1), []).append(float(m.group(3)))
        med = {p: statistics.median(v) for p, v in d.items()}
        ratio = "%.2fx" % (med[cpus[-1]] / med[cpus[0]]) if cpus[0] in med and cpus[-1] in med else "-"
        rows.append([name, mode] + ["%.4g" % med[p] if p in med else "-" for p in cpus] + [ratio])
w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for r in rows:
    print("  ".join([r[0].ljust(w[0]), r[1].ljust(w[1])] + [c.rjust(w[i]) for i, c in enumerate(r) if i > 1]))
PY

echo
echo "== pool vs the malloc floor (ns/op, -cpu $CPUS, medians of $POOL_COUNT run beside the A/B above; jemalloc's"
echo "   malloc; /fresh = fmt::format into a new std::string, no pool)"
python3 - "$out/pool-old.txt" "$out/pool-new.txt" "$out/pool-floor.txt" <<'PY'
import re, statistics, sys
line_re = re.compile(r"^Benchmark(\S+?)(-\d+)?\s+\d+\s+(\S+) ns/op")
def read(path):
    d = {}
    for line in open(path):
        m = line_re.match(line)
        if m:
            d.setdefault((m.group(1), m.group(2) or ""), []).append(float(m.group(3)))
    return {k: statistics.median(v) for k, v in d.items()}
old, new, floor = (read(p) for p in sys.argv[1:4])
procs = sorted({p for (_, p) in floor}, key=lambda p: int(p[1:] or 1))  # the floor's -cpu
def f(d, k):
    return "%.4g" % d[k] if k in d else "-"
def ratio(a, b):
    return "%.2fx" % (a / b) if a is not None and b else "-"
rows = [["op", "floor", "floor ns/op", "sharded", "global", "sharded/floor"]]
for p in procs:
    k = ("Pool", p)
    rows.append(["Pool" + p + " (put+get)", "MallocFree" + p, f(floor, ("MallocFree", p)),
                 f(new, k), f(old, k), ratio(new.get(k), floor.get(("MallocFree", p)))])
for name in ("SprintfEmpty", "SprintfString", "SprintfInt", "SprintfIntInt",
             "SprintfPrefixedInt", "SprintfFloat", "SprintfManyArgs"):
    for p in procs:
        k, fk = (name, p), (name + "/fresh", p)
        rows.append([name + p, name + "/fresh" + p, f(floor, fk), f(new, k), f(old, k),
                     ratio(new.get(k), floor.get(fk))])
for p in procs:
    k = ("MallocFree/memory_buffer", p)
    rows.append(["(new+delete of the buffer)", "MallocFree/memory_buffer" + p, f(floor, k), "-", "-", "-"])
w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for r in rows:
    print("  ".join([r[0].ljust(w[0]), r[1].ljust(w[1])] + [c.rjust(w[i]) for i, c in enumerate(r) if i > 1]))
PY

if command -v go >/dev/null 2>&1; then
  echo
  echo "== corun vs Go $(go env GOVERSION) on this machine (medians of $COUNT; corun/go < 1 means corun is faster)"
  scripts/go-compare -o "$out" -count "$COUNT" -cpu "$CPUS" -benchtime "$BENCHTIME" \
    '^BenchmarkCreateGoroutines(Parallel)?$' runtime \
    --ours '^(CreateTasks|CreateTasksParallel)$' \
    --map CreateGoroutines=CreateTasks,CreateGoroutinesParallel=CreateTasksParallel
  echo
  echo "== channels: corun vs Go's runtime/chan_test.go and PingPongHog (Go runs PingPongHog at"
  echo "   GOMAXPROCS=1 whatever -cpu says, corun at -cpu: only its -cpu 1 row is like for like)"
  scripts/go-compare -o "$out" -count "$COUNT" -cpu "$CPUS" -benchtime "$BENCHTIME" \
    "^Benchmark($chan_go)\$" runtime --ours "^($chan_go)\$"
  echo
  echo "== channels: corun vs the Go twins in scripts/gobench (same shapes, chan_test.go)"
  scripts/go-compare -o "$out" -count "$COUNT" -cpu "$CPUS" -benchtime "$BENCHTIME" \
    '^Benchmark(Chain|ChainBuf|ChanRequestResponse)$' ./scripts/gobench \
    --ours '^(Chain|ChainBuf|ChanRequestResponse)$'
  scripts/go-compare -o "$out" -count "$COUNT" -cpu "$CPUS" -benchtime "$SIEVE_BENCHTIME" \
    '^BenchmarkSieve$' ./scripts/gobench --ours '^Sieve$'
  scripts/go-compare -o "$out" -count "$COUNT" -cpu "$CPUS" -benchtime "$POWSER_BENCHTIME" \
    '^BenchmarkPowser$' ./scripts/gobench --ours '^Powser$'
  echo
  echo "== timers: corun vs Go's time package (sleep_test.go, tick_test.go: op = 1000 timer"
  echo "   operations on every P, 1<<15 garbage timers per P)"
  scripts/go-compare -o "$out" -count "$TIMER_GO_COUNT" -cpu "$CPUS" -benchtime "$TIMER_BENCHTIME" \
    "^Benchmark($time_go)\$" time --ours "^($time_go)\$"
  echo
  echo "== contexts: corun vs Go's context package (CommonParentCancel: Go also looks up a value)"
  scripts/go-compare -o "$out" -count "$TIMER_GO_COUNT" -cpu "$CPUS" -benchtime "$TIMER_BENCHTIME" \
    "^Benchmark($ctx_go)\$" context --ours "^($ctx_go)(/|\$)"
  echo
  echo "== timer lateness: corun (default slack 1 us) vs the Go twin in scripts/gobench/time_test.go"
  scripts/go-compare -o "$out" -count "$LATENESS_COUNT" -cpu "$CPUS" -benchtime "$LATENESS_BENCHTIME" \
    '^BenchmarkTimerLateness$' ./scripts/gobench --ours '^TimerLateness/(Sleep|Sleep1|AfterFunc)='
  echo
  echo "== pool: corun vs Go's sync package (pool_test.go; Go's PoolSTW, a GC pause, has no"
  echo "   counterpart). Go puts an int, corun an 8-byte Item; allocs/op: corun only"
  scripts/go-compare -o "$out" -count "$POOL_GO_COUNT" -cpu "$CPUS" -benchtime "$POOL_BENCHTIME" \
    '^BenchmarkPool(Overflow|Starvation)?$' sync --ours '^Pool(Overflow|Starvation)?$'
  echo
  echo "== PoolExpensiveNew: corun (a trim per 8 MiB of work, as often as Go's GC runs here)"
  echo "   vs Go; New/op = factory calls per op (Go also reports GCs/op, corun trims/op)"
  scripts/go-compare -o "$out" -count 1 -cpu "$CPUS" -benchtime "$EXPENSIVE_BENCHTIME" \
    '^BenchmarkPoolExpensiveNew$' sync --ours '^PoolExpensiveNew(/trim=8MiB)?$' \
    --map PoolExpensiveNew=PoolExpensiveNew/trim=8MiB
  echo
  echo "== Sprintf: corun ({fmt} into a pooled fmt::memory_buffer, consumed in place) vs Go's"
  echo "   fmt (Sprintf also copies the result into a new string; ManyArgs = Fprintf to a reused"
  echo "   bytes.Buffer, as corun's SprintfManyArgs)"
  scripts/go-compare -o "$out" -count "$POOL_GO_COUNT" -cpu "$CPUS" -benchtime "$POOL_BENCHTIME" \
    '^Benchmark(Sprintf(Empty|String|Int|IntInt|PrefixedInt|Float)|ManyArgs)$' fmt \
    --ours "^$sprintf_names\$" --map ManyArgs=SprintfManyArgs
else
  echo
  echo "(Go not installed: apt-get install golang-go, then make bench prints corun vs Go too)"
fi
