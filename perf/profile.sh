#!/usr/bin/env bash
# perf/profile.sh — run a corun benchmark (or any command) under perf.
#
#   perf/profile.sh stat   REGEX [-cpu N ...]   software counters (task-clock, context
#                                              switches, migrations, page faults); works
#                                              where the CPU exposes no hardware counters
#   perf/profile.sh record REGEX [-cpu N ...]   perf record -g (frame pointers: corun and
#                                              its tasks keep them) + the top of the report
#   perf/profile.sh probes REGEX [-cpu N ...]   counts of every USDT probe of corun
#                                              (the list: src/base/probes.hpp)
#   perf/profile.sh flame  REGEX [-cpu N ...]   perf record -e cpu-clock -g --call-graph fp
#                                              (software event: VMs without PMU counters;
#                                              frame pointers through task stacks), then
#                                              build/perf/flame-<REGEX>.folded (folded
#                                              stacks) and .svg (a flame graph that opens
#                                              offline: perf/flame.py renders it)
# Extra arguments go to build/corun-bench (e.g. -cpu 2 -benchtime 100000x). Set
# CMD="./app args" to profile another program instead. Output files go to build/perf/.
set -euo pipefail
mode=${1:?usage: perf/profile.sh stat|record|probes|flame REGEX [corun-bench flags]}
regex=${2:?usage: perf/profile.sh stat|record|probes|flame REGEX [corun-bench flags]}
shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/build/corun-bench"
out="$repo/build/perf"
mkdir -p "$out"
if [[ -n ${CMD:-} ]]; then read -r -a cmd <<<"$CMD"; else cmd=("$bin" -bench "$regex" "$@"); fi
case $mode in
  stat)
    perf stat -e task-clock,context-switches,cpu-migrations,page-faults -- "${cmd[@]}" ;;
  record)
    perf record -g --call-graph fp -o "$out/perf.data" -- "${cmd[@]}"
    perf report -i "$out/perf.data" --no-children --sort sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -30 ;;
  probes)
    exe=${cmd[0]}
    perf buildid-cache --add "$exe" >/dev/null 2>&1 || true
    events=()
    for p in spawn park ready steal spinning_idle chan_block select_block chan_close timer_fire \
      timer_watch netpoll pool_spill pool_refill pool_trim; do
      perf probe -q -x "$exe" "sdt_corun:$p" >/dev/null 2>&1 || true
      events+=(-e "sdt_corun:$p")
    done
    perf stat "${events[@]}" -- "${cmd[@]}"
    perf probe -q -d 'sdt_corun:*' >/dev/null 2>&1 || true ;;
  flame)
    # FLAME_MIN_WIDTH: frames under this percent of the samples are left out (SVG size).
    name=flame-$(tr -c 'A-Za-z0-9=._-' _ <<<"$regex" | sed 's/_*$//; s/^_*//')
    perf record -e cpu-clock -g --call-graph fp -o "$out/$name.data" -- "${cmd[@]}"
    perf script -i "$out/$name.data" 2>/dev/null | python3 "$repo/perf/flame.py" fold >"$out/$name.folded"
    python3 "$repo/perf/flame.py" svg --min-width "${FLAME_MIN_WIDTH:-0.1}" \
      --title "${CMD:-corun-bench -bench $regex $*} (perf record -e cpu-clock -g --call-graph fp)" \
      "$out/$name.folded" >"$out/$name.svg"
    echo "perf/profile.sh: $out/$name.folded, $out/$name.svg" >&2 ;;
  *) echo "perf/profile.sh: unknown mode '$mode': accepted: stat, record, probes, flame" >&2; exit 2 ;;
esac
