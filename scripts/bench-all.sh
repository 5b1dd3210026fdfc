#!/usr/bin/env bash
# `make bench`: the main job. Runs corun's benchmarks under the old and the new setting
# in one run and prints old/new/delta/p-value tables like the seeds' (scripts/benchcmp),
# then, if Go is installed, corun beside Go 1.19's own benchmarks (scripts/go-compare).
# Sections: scheduler and channels under runnext backoff usleep:100 vs the default (Go CL
# 20835's tables), memory per parked task, request/response latency under each backoff
# mode, timers and contexts under CORUN_TIMERS=global vs per-p (Go CL 34784's table, the
# seed's deltas beside ours), timer lateness under each timer slack, then corun vs Go
# (runtime, time and context package benchmarks, and scripts/gobench's twins).
#
# Usage: scripts/bench-all.sh BUILD_DIR
#   env: COUNT=5 CPUS=1,2 BENCHTIME=300ms (Go's -benchtime for the ramped benchmarks),
#        SIEVE_BENCHTIME=5000x POWSER_BENCHTIME=100x (fixed op counts for the slow ones:
#        a Sieve op takes ~30-60 us, a Powser op ~2-3 ms; no ramp, ~0.2 s per result),
#        TIMER_COUNT=5 TIMER_BENCHTIME=100ms (the time/context suite: an op is 1000 timer
#        operations, ~0.1-5 ms, and every run first arms 1<<15 timers per P),
#        TIMER_GO_COUNT=3 (their comparison with Go's time and context packages),
#        LATENESS_COUNT=3 LATENESS_BENCHTIME=100ms (TimerLateness, per slack setting)
# Results go to BUILD_DIR/bench/. The machine is shared and noisy: the tables give
# medians of COUNT runs and Mann-Whitney p-values; read ratios, not absolute times.
# Time: ~15-20 min on a 2-core machine with COUNT=5 (Go's runtime tests compile once, ~1 min);
# the timer sections take ~6 min of it (A/B ~1.7, lateness ~0.9, vs Go ~3.4).
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
else
  echo
  echo "(Go not installed: apt-get install golang-go, then make bench prints corun vs Go too)"
fi
