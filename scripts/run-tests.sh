#!/usr/bin/env bash
# Runs build/<variant>/corun-tests: the unit suites once, the runtime suites at every P count
# given, then the script tests. Usage: scripts/run-tests.sh BUILD_DIR "1 2 4"
#
# Which suites are which comes from the binary, by the doctest suite name:
#   TEST_SUITE("unit.…")  unit suites: no runtime, or one that boots its own P counts;
#                         run once.
#   TEST_SUITE("rt.…")    runtime suites: boot with CORUNTEST_PROCS Ps (tests/support.hpp);
#                         run once per P count.
# A test case in a suite matching neither (or in no suite) is listed and counted as a
# failure, as is a binary with no case of one of the classes, so a new suite is never
# skipped silently nor run once when it should run at every P count.
# Prints doctest's summary per run, then every failed check again with its test case and
# the run it came from (CI shows only a log's tail), and a final "tests: N passed, M failed".
#
# Environment (both empty by default; the Makefile sets them for ARCH=aarch64):
#   RUNNER        command prefix for the binary, split at spaces: an emulator such as
#                 qemu-aarch64-static. Also exported to the tests as CORUNTEST_EMULATOR, so a
#                 test that cannot work under emulation skips itself with a printed reason,
#                 and death tests re-execute the binary under the same emulator.
#   TEST_EXCLUDE  doctest --test-case-exclude patterns (comma-separated) left out of every
#                 run, printed first; the suite classification still counts them.
set -uo pipefail
b=${1:?build dir}
procs=${2:-"1 2 4"}
bin="$b/corun-tests"
runner=()
read -r -a runner <<<"${RUNNER:-}"
if [ ${#runner[@]} -gt 0 ]; then
  export CORUNTEST_EMULATOR="${runner[*]}"
  echo "== under emulation: ${runner[*]} $bin"
fi
exclude=()
if [ -n "${TEST_EXCLUDE:-}" ]; then
  exclude=(--test-case-exclude="$TEST_EXCLUDE")
  echo "== left out of every run (TEST_EXCLUDE): $TEST_EXCLUDE"
fi
unit_suites='unit.*'
rt_suites='rt.*'
pass=0      # test cases passed, summed over the runs (doctest's and unittest's counts)
fail=0      # test cases failed, plus 1 for any run that crashed or exited non-zero
log=$(mktemp)
failures=$(mktemp)  # what each failed run reported, reprinted at the end
trap 'rm -f "$log" "$failures"' EXIT
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
  if [ "$rc" -ne 0 ]; then
    fail=$((fail + 1))
    echo "FAILED (exit $rc): $*"
    {
      echo "-- FAILED (exit $rc): $*"
      # doctest's case header, each failed check with its values, sanitizer and death lines.
      awk '/^TEST SUITE:|^TEST CASE:/ { hdr = hdr $0 "\n"; next }
           /^==========/ { hdr = ""; shown = 0; next }
           /: (ERROR|FATAL ERROR): |^==[0-9]+==ERROR|^WARNING: ThreadSanitizer|^SUMMARY: |corun: / {
             if (!shown) { printf "%s", hdr; shown = 1 }
             print; ctx = 3; next }
           ctx > 0 { print; ctx-- }' "$log" | head -60
    } >>"$failures"
  fi
}
# How many test cases (skipped ones included) pass doctest filters "$@"; -1 on error.
count_cases() {
  local out
  out=$("${runner[@]}" "$bin" --count --no-skip --no-intro=true "$@" 2>&1) || { echo -1; return; }
  sed -nE 's/^\[doctest\] unskipped test cases passing the current filters: ([0-9]+)$/\1/p' \
    <<<"$out" | grep . || echo -1
}
# Lines of doctest's --list-test-cases / --list-test-suites output that are names.
names() { "${runner[@]}" "$bin" --no-skip --no-intro=true "$@" 2>&1 | grep -vE '^(\[doctest\]|=+$)'; }

# Sanitizer options: fail on the first report; TSan's fiber support needs no extras.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# Classify before running anything.
n_unit=$(count_cases --test-suite="$unit_suites")
n_rt=$(count_cases --test-suite="$rt_suites")
n_stray=$(count_cases --test-suite-exclude="$unit_suites,$rt_suites")
echo "== suites: $n_unit test cases in unit suites ($unit_suites), $n_rt in runtime suites" \
  "($rt_suites), $n_stray in neither"
if [ "$n_unit" -lt 0 ] || [ "$n_rt" -lt 0 ] || [ "$n_stray" -lt 0 ]; then
  echo "FAILED: cannot list the test cases of $bin"
  fail=$((fail + 1))
else
  if [ "$n_stray" -gt 0 ]; then
    echo "FAILED: $n_stray test case(s) in a suite named neither $unit_suites (run once) nor" \
      "$rt_suites (run at every P count); name the suite TEST_SUITE(\"unit.…\") or" \
      "TEST_SUITE(\"rt.…\"):"
    names --list-test-suites --test-suite-exclude="$unit_suites,$rt_suites" | sed 's/^/  suite: /'
    names --list-test-cases --test-suite-exclude="$unit_suites,$rt_suites" | sed 's/^/  case:  /'
    fail=$((fail + n_stray))
  fi
  if [ "$n_unit" -eq 0 ] || [ "$n_rt" -eq 0 ]; then
    echo "FAILED: no test case in the unit suites or in the runtime suites: a renamed class?"
    fail=$((fail + 1))
  fi
fi
run "${runner[@]}" "$bin" --test-suite="$unit_suites" "${exclude[@]}" --no-intro=true
for p in $procs; do
  run env CORUNTEST_PROCS="$p" "${runner[@]}" "$bin" --test-suite="$rt_suites" "${exclude[@]}" \
    --no-intro=true
done
run python3 scripts/benchcmp_test.py
run python3 scripts/benchplot_test.py
run python3 scripts/lineprobe_test.py
if [ -s "$failures" ]; then
  echo "== what failed (again, from each failed run above)"
  cat "$failures"
fi
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
