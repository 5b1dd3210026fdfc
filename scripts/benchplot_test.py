#!/usr/bin/env python3
"""Tests of scripts/bench-plot's plumbing (not of how the pictures look): a tiny fixture
folder in bench-all's layout goes in, the plot files must come out, a picture without
results is skipped with a line, a missing matplotlib is one "skipped" line and exit 0,
and bench-all's PLOT=0 draws nothing.

Invariants: nothing here installs a package (make test runs it: the tests that need
matplotlib skip when no python3 here can import it; the missing-matplotlib case hides it
behind a fake package on PYTHONPATH, which the re-run under /usr/bin/python3 sees too).
Rejected: comparing images with stored ones (font and matplotlib versions change the
pixels, not the plumbing); calling bench-all with PLOT=1 (it may install the package).
Run: python3 scripts/benchplot_test.py
"""

import os
import subprocess
import sys
import tempfile
import unittest

_DIR = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
PLOT = os.path.join(_DIR, "bench-plot")


def have_matplotlib():
    for py in (sys.executable, "/usr/bin/python3"):
        try:
            if subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode == 0:
                return True
        except OSError:
            pass
    return False


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def fixture(d):
    """A bench folder with the sched A/B, one corun-vs-Go section, the lateness rows and a
    server run: two counts each, P = 1 and 2."""
    for setting, base in (("usleep100", 200), ("spin3000", 100)):
        write(os.path.join(d, "sched-%s.txt" % setting), "".join(
            "BenchmarkYield%s 1000 %d ns/op\nBenchmarkMutexHandoff%s 1000 %d ns/op\n"
            % (sfx, base + k, sfx, 2 * base + k) for k in range(2) for sfx in ("", "-2")))
    write(os.path.join(d, "go-create-go.txt"), "".join(
        "BenchmarkCreateGoroutines%s 1000 %d ns/op\n" % (sfx, 400 + k)
        for k in range(2) for sfx in ("", "-2")))
    write(os.path.join(d, "go-create-corun.txt"), "".join(
        "BenchmarkCreateTasks%s 1000 %d ns/op\n" % (sfx, 150 + k)
        for k in range(2) for sfx in ("", "-2")))
    rows = {"lateness-slack1us.txt": ("Sleep", "Sleep1", "Floor"),
            "go-lateness-go.txt": ("Sleep", "Sleep1")}
    for name, kinds in rows.items():
        write(os.path.join(d, name), "".join(
            "BenchmarkTimerLateness/%s=50us/%s%s 100 60000 ns/op %d p50-ns %d p99-ns %d max-ns "
            "12 cpu%%\n" % (kind, load, sfx, 3000 + k, 40000, 90000)
            for k in range(2) for kind in kinds for load in ("idle", "busy")
            for sfx in ("", "-2")))
    write(os.path.join(d, "server", "latest-server", "rows.tsv"), "".join(
        "%d\t1\t%s\t1\t1\t%d\t1.0\t%d.0\t0\t90\t90\t0\n" % (c, s, rps, p99)
        for c in (100, 1000) for s, rps, p99 in (("corun-P1", 50000, 3), ("go-raw-P1", 30000, 9))))


class Plot(unittest.TestCase):
    def test_fixture_gives_the_pictures_and_skips_what_has_no_results(self):
        if not have_matplotlib():
            self.skipTest("no matplotlib here (scripts/deps.sh plot installs it)")
        with tempfile.TemporaryDirectory() as d:
            fixture(d)
            p = subprocess.run([sys.executable, PLOT, d], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout, "")
            for name in ("plot-ab-sched", "plot-go", "plot-lateness", "plot-server"):
                for ext in ("svg", "png"):
                    path = os.path.join(d, "%s.%s" % (name, ext))
                    self.assertTrue(os.path.getsize(path) > 1000, path)
            with open(os.path.join(d, "plot-ab-sched.svg")) as f:
                svg = f.read()
            for text in ("MutexHandoff", "P=2", "usleep100", "spin3000", "time/op"):
                self.assertTrue(text in svg, text)
            with open(os.path.join(d, "plot-go.svg")) as f:
                self.assertIn("CreateTasks", f.read())  # Go's name mapped to ours
            with open(os.path.join(d, "plot-go.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            # no results: a line each, no file
            self.assertIn("plot-ab-timers skipped: no ns/op results", p.stderr)
            self.assertIn("plot-server-seeds skipped: no ", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "plot-ab-timers.svg")))
            self.assertNotIn("error:", p.stderr)

    def test_missing_matplotlib_is_one_skipped_line_and_exit_0(self):
        with tempfile.TemporaryDirectory() as d:
            fixture(os.path.join(d, "bench"))
            fake = os.path.join(d, "fake", "matplotlib")
            write(os.path.join(fake, "__init__.py"), "raise ImportError('hidden by the test')\n")
            env = dict(os.environ, PYTHONPATH=os.path.dirname(fake))
            env.pop("BENCH_PLOT_REEXEC", None)
            p = subprocess.run([sys.executable, PLOT, os.path.join(d, "bench")], env=env,
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stderr.strip().splitlines(), [
                "bench-plot: plots skipped: python3-matplotlib missing (scripts/deps.sh plot "
                "installs it)"])
            self.assertFalse([f for f in os.listdir(os.path.join(d, "bench"))
                              if f.startswith("plot-")])

    def test_missing_folder_is_bad_usage(self):
        p = subprocess.run([sys.executable, PLOT, "/nonexistent/bench"], capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no folder /nonexistent/bench", p.stderr)

    def test_bench_all_plot_0_draws_nothing_and_says_so(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "corun-bench")
            write(fake, "#!/bin/sh\n[ \"$1\" = -list ] && echo BenchmarkYield && exit 0\n"
                        "echo 'BenchmarkYield 1000 100 ns/op'\n")
            os.chmod(fake, 0o755)
            env = dict(os.environ, PLOT="0", COUNT="1", CPUS="1")
            p = subprocess.run([sys.executable, os.path.join(_DIR, "bench-all"), "--section",
                                "sched", d], env=env, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("bench-all: plots skipped (PLOT=0)", p.stderr)
            self.assertFalse([f for f in os.listdir(os.path.join(d, "bench"))
                              if f.startswith("plot-")])
            p = subprocess.run([sys.executable, os.path.join(_DIR, "bench-all"), "--dry-run",
                                "--section", "sched", d], env=dict(env, PLOT="1"),
                               capture_output=True, text=True)
            self.assertIn("# plots: ", p.stdout)
            self.assertIn("bench-plot %s" % os.path.join(d, "bench"), p.stdout)
            p = subprocess.run([sys.executable, os.path.join(_DIR, "bench-all"), "--list", d],
                               env=dict(env, PLOT="2"), capture_output=True, text=True)
            self.assertEqual(p.returncode, 2)
            self.assertIn("PLOT=2: accepted: 0", p.stderr)


if __name__ == "__main__":
    unittest.main()
