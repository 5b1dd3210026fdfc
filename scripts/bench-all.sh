#!/usr/bin/env bash
# `make bench`: the main job. Runs corun's benchmarks under the old and the new setting
# in one run and prints old/new/delta/p-value tables like the seeds' (scripts/benchcmp),
# then, if Go is installed, corun beside Go 1.19's own benchmarks (scripts/go-compare).
#
# Usage: scripts/bench-all.sh BUILD_DIR     (env: COUNT=5 CPUS=1,2 BENCHTIME=300ms)
# Results go to BUILD_DIR/bench/. The machine is shared and noisy: the tables give
# medians of COUNT runs and Mann-Whitney p-values; read ratios, not absolute times.
set -euo pipefail
b=${1:-build}
bench="$b/corun-bench"
out="$b/bench"
mkdir -p "$out"
COUNT=${COUNT:-5}
CPUS=${CPUS:-1,2}
BENCHTIME=${BENCHTIME:-300ms}
sched='^(CreateTasks|CreateTasksParallel|Yield|WaitGroupHandoff|MutexHandoff)$'

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

echo
echo "== memory per parked task (one run of up to 1M tasks; each first touch is a page fault)"
"$bench" -bench '^ParkedTasks$' -cpu 2 | grep -E '^Benchmark' | tee "$out/parked.txt"

if command -v go >/dev/null 2>&1; then
  echo
  echo "== corun vs Go $(go env GOVERSION) on this machine (medians of $COUNT; corun/go < 1 means corun is faster)"
  scripts/go-compare -o "$out" -count "$COUNT" -cpu "$CPUS" -benchtime "$BENCHTIME" \
    '^BenchmarkCreateGoroutines(Parallel)?$' runtime \
    --ours '^(CreateTasks|CreateTasksParallel)$' \
    --map CreateGoroutines=CreateTasks,CreateGoroutinesParallel=CreateTasksParallel
else
  echo
  echo "(Go not installed: apt-get install golang-go, then make bench prints corun vs Go too)"
fi
