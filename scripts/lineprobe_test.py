#!/usr/bin/env python3
"""Tests of the cache-line probe that make bench (scripts/bench-all, LINE_PROBE) and
scripts/go-compare --one-mode run before 2-P runs: a fake corun-bench prints a scripted
sequence of Floor/line=pingpong times, and the runs made after a probe over 2x off the
median must be named (bench-all) or left out of the ratio (go-compare).

Invariants: no real benchmark runs and no Go is needed (go-compare's round loop is called
directly with fake commands); the fake reads its next probe time from a file, so the
order of probes is the test's. Rejected: judging modes against the fastest probe (one
14 ns probe, a third placement of the VM's vCPUs, then marks every usual run as slow).
Run: python3 scripts/lineprobe_test.py
"""

import importlib.machinery
import importlib.util
import os
import stat
import subprocess
import sys
import tempfile
import unittest

_DIR = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True

# A corun-bench stand-in: the probe prints the next time of $DIR/probes (one per line,
# consumed from the top); -list prints one name; any other run prints one result.
FAKE = r"""#!/bin/bash
dir=$(dirname "$0")
if [ "$1" = "-list" ]; then echo BenchmarkFake; exit 0; fi
if [ "$2" = '^Floor/line=pingpong$' ]; then
  ns=$(head -n1 "$dir/probes"); sed -i 1d "$dir/probes"
  echo "BenchmarkFloor/line=pingpong-2 1000000 $ns ns/op"
  exit 0
fi
echo "BenchmarkFake-2 100 $(cat "$dir/result" 2>/dev/null || echo 10) ns/op"
"""


def make_fake(d, probes):
    path = os.path.join(d, "corun-bench")
    with open(path, "w") as f:
        f.write(FAKE)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    with open(os.path.join(d, "probes"), "w") as f:
        f.write("\n".join(str(p) for p in probes) + "\n")
    return path


def load_go_compare():
    loader = importlib.machinery.SourceFileLoader("go_compare", os.path.join(_DIR, "go-compare"))
    spec = importlib.util.spec_from_loader("go_compare", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class BenchAllProbe(unittest.TestCase):
    def run_bench_all(self, probes, extra_env=None):
        with tempfile.TemporaryDirectory() as d:
            make_fake(d, probes)
            out = os.path.join(d, "out")
            env = dict(os.environ, COUNT="3", PLOT="0", **(extra_env or {}))
            p = subprocess.run([sys.executable, os.path.join(_DIR, "bench-all"), "--no-go",
                                "--section", "sched", "-o", out, d],
                               capture_output=True, text=True, env=env)
            tsv = None
            if os.path.exists(os.path.join(out, "line-probe.tsv")):
                with open(os.path.join(out, "line-probe.tsv")) as f:
                    tsv = f.read().splitlines()
            return p, tsv

    def test_names_the_run_after_a_probe_off_the_median(self):
        # sched: two settings x 3 counts, every run at -cpu 1,2: six probes, the 5th slow.
        p, tsv = self.run_bench_all([33, 34, 32, 35, 170, 33])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(tsv), 7, tsv)  # header + six probes
        self.assertEqual(tsv[5].split("\t")[-1], "170")
        out = " ".join(p.stdout.split())  # unwrapped
        self.assertIn("OTHER MODE", out)
        self.assertIn("before: usleep100 count 3 (170.0)", out)
        self.assertIn("1 in another mode", out)

    def test_one_fast_probe_does_not_mark_the_usual_runs(self):
        p, _ = self.run_bench_all([14, 33, 34, 32, 35, 33])
        out = " ".join(p.stdout.split())
        self.assertIn("before: usleep100 count 1 (14.00).", out)
        self.assertIn("1 in another mode", out)

    def test_steady_probes_say_one_mode(self):
        p, _ = self.run_bench_all([33, 34, 32, 35, 33, 34])
        out = " ".join(p.stdout.split())
        self.assertNotIn("OTHER MODE", out)
        self.assertIn("every run in one mode", out)

    def test_line_probe_0_runs_none(self):
        p, tsv = self.run_bench_all([], {"LINE_PROBE": "0"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(tsv, ["section\tsetting\tset\tcount\tns_per_handoff"])
        self.assertNotIn("line probe", p.stdout)

    def test_bad_knob_is_named(self):
        p, _ = self.run_bench_all([], {"LINE_PROBE": "yes"})
        self.assertEqual(p.returncode, 2)
        self.assertIn("LINE_PROBE=yes: accepted: 0 (no probe) or 1", p.stderr)


class GoCompareOneMode(unittest.TestCase):
    def test_keeps_rounds_of_one_mode_until_count(self):
        gc = load_go_compare()
        with tempfile.TemporaryDirectory() as d:
            # Three probes a round: the first round has a 170 ns probe (left out), the
            # next two are in the median's mode, then the count of 2 is reached.
            fake = make_fake(d, [33, 33, 170, 34, 33, 32, 33, 35, 34, 999])
            go_out, ours_out = os.path.join(d, "go.txt"), os.path.join(d, "ours.txt")
            for path in (go_out, ours_out):
                open(path, "w").close()
            env = dict(os.environ)
            devnull = open(os.devnull, "w")
            saved = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = devnull
            try:
                rc = gc.one_mode_rounds(2, [fake, "-bench", "x"], d, go_out,
                                        [fake, "-bench", "y"], ours_out, fake, env)
            finally:
                sys.stdout, sys.stderr = saved
                devnull.close()
            self.assertEqual(rc, 0)
            with open(go_out) as f:
                self.assertEqual(f.read().count("BenchmarkFake-2"), 2)
            with open(ours_out) as f:
                self.assertEqual(f.read().count("BenchmarkFake-2"), 2)
            with open(os.path.join(d, "go.other-mode.txt")) as f:
                self.assertEqual(f.read().count("BenchmarkFake-2"), 1)
            with open(os.path.join(d, "probes")) as f:
                self.assertEqual(f.read().split(), ["999"])  # stopped after 3 rounds


if __name__ == "__main__":
    unittest.main()
