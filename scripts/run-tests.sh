#!/usr/bin/env bash
# Runs build/<variant>/corun-tests: the unit suites (arch, os.*, sched.runq, timer.heap)
# once, the runtime suites (sched, sched.death, sync, chan, timer, context, pool) at every P
# count given, then the script tests. Usage: scripts/run-tests.sh BUILD_DIR "1 2 4"
# Prints doctest's summary per run and a final "N passed, N failed" line.
set -uo pipefail
b=${1:?build dir}
procs=${2:-"1 2 4"}
bin="$b/corun-tests"
runtime_suites='sched,sched.death,sync,chan,timer,context,pool'
pass=0      # test cases passed, summed over the runs (doctest's and unittest's counts)
fail=0      # test cases failed, plus 1 for any run that crashed or exited non-zero
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  echo "== $*"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local counts
  counts=$(grep -E '^\[doctest\] test cases:' "$log" | tail -1)
  if [ -n "$counts" ]; then
    pass=$((pass + $(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<<"$counts")))
    fail=$((fail + $(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<<"$counts")))
  elif grep -qE '^Ran [0-9]+ test' "$log"; then
    local n
    n=$(grep -E '^Ran [0-9]+ test' "$log" | sed -E 's/Ran ([0-9]+).*/\1/')
    if [ "$rc" -eq 0 ]; then pass=$((pass + n)); fi
  fi
  if [ "$rc" -ne 0 ]; then fail=$((fail + 1)); echo "FAILED (exit $rc): $*"; fi
}
# Sanitizer options: fail on the first report; TSan's fiber support needs no extras.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
run "$bin" --test-suite-exclude="$runtime_suites" --no-intro=true
for p in $procs; do
  run env CORUNTEST_PROCS="$p" "$bin" --test-suite="$runtime_suites" --no-intro=true
done
run python3 scripts/benchcmp_test.py
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
