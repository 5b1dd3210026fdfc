#!/usr/bin/env bash
# `make bench`: the main job. Runs corun's benchmarks under the old and the new setting
# in one run and prints old/new/delta/p-value tables like the seeds' (scripts/benchcmp),
# then, if Go is installed, corun beside Go 1.19's own benchmarks (scripts/go-compare).
# Sections: scheduler and channels under runnext backoff usleep:100 vs the default (Go CL
# 20835's tables), memory per parked task, request/response latency under each backoff
# mode, then corun vs Go (runtime package benchmarks, and scripts/gobench's twins).
#
# Usage: scripts/bench-all.sh BUILD_DIR
#   env: COUNT=5 CPUS=1,2 BENCHTIME=300ms (Go's -benchtime for the ramped benchmarks),
#        SIEVE_BENCHTIME=5000x POWSER_BENCHTIME=100x (fixed op counts for the slow ones:
#        a Sieve op takes ~30-60 us, a Powser op ~2-3 ms; no ramp, ~0.2 s per result)
# Results go to BUILD_DIR/bench/. The machine is shared and noisy: the tables give
# medians of COUNT runs and Mann-Whitney p-values; read ratios, not absolute times.
# Time: ~10-15 min on a 2-core machine with COUNT=5 (Go's runtime tests compile once, ~1 min).
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
else
  echo
  echo "(Go not installed: apt-get install golang-go, then make bench prints corun vs Go too)"
fi
