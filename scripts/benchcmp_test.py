#!/usr/bin/env python3
"""Tests of scripts/benchcmp, scripts/benchlib.py (shared with go-compare and bench-all)
and scripts/bench-all's driver (against a fake corun-bench), and scripts/bench-server's
run.sh patch and tables (no server runs), with hand-checked values.
Run: python3 scripts/benchcmp_test.py"""

import contextlib
import importlib.machinery
import importlib.util
import io
import math
import os
import statistics
import subprocess
import sys
import tempfile
import unittest

_DIR = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True


def _load(name):
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"),
                                                  os.path.join(_DIR, name))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name,
                                                                             loader))
    loader.exec_module(module)
    return module


bc = _load("benchcmp")
ba = _load("bench-all")
bs = _load("bench-server")
import benchlib as bl  # noqa: E402  (benchcmp put scripts/ on the path)


class MannWhitney(unittest.TestCase):
    def test_complete_separation_5_vs_5_is_exact_2_over_252(self):
        # One ordering of C(10,5) = 252 gives U = 0; two-sided doubles it.
        u, p = bc.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
        self.assertEqual(u, 0)
        self.assertAlmostEqual(p, 2 / 252)
        self.assertEqual("%.4f" % p, "0.0079")
        _, p2 = bc.mann_whitney([6, 7, 8, 9, 10], [1, 2, 3, 4, 5])  # symmetric
        self.assertAlmostEqual(p2, 2 / 252)

    def test_identical_samples_give_p_1(self):
        _, p = bc.mann_whitney([1, 2, 3, 4, 5], [1, 2, 3, 4, 5])  # ties: normal approx
        self.assertEqual(p, 1.0)
        _, p = bc.mann_whitney([7, 7, 7], [7, 7, 7])  # all tied: zero variance
        self.assertEqual(p, 1.0)

    def test_exact_3_vs_3(self):
        # xs=[1,2,4], ys=[3,5,6]: U = #(x > y) = 1 (4 > 3). [6 choose 3]_q has
        # coefficients 1,1,2,3,3,3,3,2,1,1: P(U <= 1) = 2/20, two-sided 0.2.
        self.assertEqual(bc.u_distribution(3, 3), [1, 1, 2, 3, 3, 3, 3, 2, 1, 1])
        u, p = bc.mann_whitney([1, 2, 4], [3, 5, 6])
        self.assertEqual(u, 1)
        self.assertAlmostEqual(p, 0.2)

    def test_u_distribution_counts_all_orderings(self):
        self.assertEqual(bc.u_distribution(2, 2), [1, 1, 2, 1, 1])
        for n1, n2 in [(1, 1), (4, 7), (10, 10), (50, 50)]:
            c = bc.u_distribution(n1, n2)
            self.assertEqual(len(c), n1 * n2 + 1)
            self.assertEqual(sum(c), math.comb(n1 + n2, n1))
            self.assertEqual(c, c[::-1])

    def test_ties_use_normal_approximation_with_tie_correction(self):
        # xs=[1,1,2], ys=[2,3,3]: ranks 1.5 1.5 3.5 | 3.5 5.5 5.5, R1 = 6.5, U = 0.5;
        # mu = 4.5; three tie groups of 2: sum(t^3-t) = 18, /(n(n-1)) = 18/30 = 0.6;
        # var = 9/12 * (7 - 0.6) = 4.8; z = (4 - 0.5)/sqrt(4.8) = 1.5975.
        u, p = bc.mann_whitney([1, 1, 2], [2, 3, 3])
        self.assertEqual(u, 0.5)
        z = 3.5 / math.sqrt(4.8)
        self.assertAlmostEqual(z, 1.5975, places=4)
        self.assertAlmostEqual(p, 2 * (1 - statistics.NormalDist().cdf(z)), places=12)
        self.assertAlmostEqual(p, 0.1101, places=4)

    def test_large_samples_use_normal_approximation(self):
        xs = list(range(60))
        ys = [x + 1000 for x in range(60)]
        _, p = bc.mann_whitney(xs, ys)
        self.assertLess(p, 1e-10)


class Parsing(unittest.TestCase):
    def test_go_line_with_extra_metrics(self):
        line = ("BenchmarkParkedTasks-2   \t  760000\t      2113 ns/op\t      8123 B/task"
                "\t        99.50 cpu%")
        name, metrics = bc.parse_result_line(line)
        self.assertEqual(name, "BenchmarkParkedTasks-2")
        self.assertEqual(metrics, [(2113.0, "ns/op"), (8123.0, "B/task"), (99.5, "cpu%")])

    def test_names_with_slash_and_fractional_ns(self):
        name, metrics = bc.parse_result_line(
            "BenchmarkWithTimeout/concurrency=40-2 \t 1000000\t         1.386 ns/op")
        self.assertEqual(name, "BenchmarkWithTimeout/concurrency=40-2")
        self.assertEqual(metrics, [(1.386, "ns/op")])

    def test_other_lines_are_ignored(self):
        for line in ["goos: linux", "goarch: amd64", "pkg: corun", "cpu: AMD EPYC", "PASS",
                     "FAIL", "ok  \truntime\t3.2s", "",
                     "BenchmarkThrows   \t--- FAIL: BenchmarkThrows",
                     "    boom at n=100", "Benchmarkfoo 10 2 ns/op",
                     "BenchmarkX 10 2 ns/op 3", "BenchmarkX abc 2 ns/op"]:
            self.assertIsNone(bc.parse_result_line(line), line)

    def test_parse_results_groups_by_name_with_procs_and_unit(self):
        lines = ["goos: linux",
                 "BenchmarkA     10  100 ns/op  5 B/task",
                 "BenchmarkA-2   10  60 ns/op",
                 "BenchmarkA     10  110 ns/op  6 B/task",
                 "PASS"]
        samples, names, units = bc.parse_results(lines)
        self.assertEqual(names, ["A", "A-2"])
        self.assertEqual(units, ["ns/op", "B/task"])
        self.assertEqual(samples[("A", "ns/op")], [100.0, 110.0])
        self.assertEqual(samples[("A-2", "ns/op")], [60.0])
        self.assertEqual(samples[("A", "B/task")], [5.0, 6.0])


class Report(unittest.TestCase):
    OLD = ["BenchmarkFast-2 100 %d ns/op 10 B/task" % v for v in (100, 101, 102, 103, 104)]
    OLD += ["BenchmarkSame-2 100 %d ns/op" % v for v in (50, 51, 52, 53, 54)]
    NEW = ["BenchmarkFast-2 100 %d ns/op 10 B/task" % v for v in (80, 81, 82, 83, 84)]
    NEW += ["BenchmarkSame-2 100 %d ns/op" % v for v in (50, 51, 52, 53, 54)]
    NEW += ["BenchmarkOnlyNew 100 7 ns/op"]

    def test_table_shape_delta_tilde_geomean(self):
        out = bc.compare(self.OLD, self.NEW, labels=("global", "per-p"))
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["name", "global", "ns/op", "per-p", "ns/op",
                                            "delta"])
        fast = next(l for l in lines if l.startswith("Fast-2"))
        # medians 102 -> 82: -19.61%, spread max |x - med| = 2 of 102 = 2%.
        self.assertIn("102.0 ± 2%", fast)
        self.assertIn("-19.61%", fast)
        self.assertIn("(p=0.008 n=5+5)", fast)
        same = next(l for l in lines if l.startswith("Same-2"))
        self.assertIn(" ~ ", same)
        self.assertIn("(p=1.000 n=5+5)", same)
        only = next(l for l in lines if l.startswith("OnlyNew"))
        self.assertIn("-", only.split()[1])
        geo = next(l for l in lines if l.startswith("[Geo mean]"))
        expect = (math.sqrt(82 * 52) / math.sqrt(102 * 52) - 1) * 100
        self.assertIn("%+.2f%%" % expect, geo)
        # a second table for B/task, separated by a blank line
        self.assertIn("", lines)
        self.assertTrue(any(l.split()[:3] == ["name", "global", "B/task"] for l in lines))

    def test_alpha_option(self):
        out = bc.compare(self.OLD, self.NEW, alpha=0.005)  # 0.0079 is not below 0.005
        fast = next(l for l in out.splitlines() if l.startswith("Fast-2"))
        self.assertNotIn("-19.61%", fast)
        self.assertIn(" ~ ", fast)

    def test_main_reads_files_and_rejects_bad_input(self):
        with tempfile.TemporaryDirectory() as d:
            old, new, empty = (os.path.join(d, n) for n in ("old", "new", "empty"))
            for path, lines in ((old, self.OLD), (new, self.NEW), (empty, ["PASS"])):
                with open(path, "w") as f:
                    f.write("\n".join(lines) + "\n")
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                self.assertEqual(bc.main([old, new, "--labels", "a,b"]), 0)
            self.assertIn("a ns/op", buf.getvalue())
            with contextlib.redirect_stderr(io.StringIO()) as err:
                self.assertEqual(bc.main([old, empty]), 2)
                self.assertEqual(bc.main([old, os.path.join(d, "missing")]), 2)
            self.assertIn("no benchmark result lines", err.getvalue())
            for bad in (["--alpha", "1.5"], ["--labels", "onlyone"]):
                with contextlib.redirect_stderr(io.StringIO()):
                    with self.assertRaises(SystemExit) as cm:
                        bc.main([old, new] + bad)
                self.assertEqual(cm.exception.code, 2)



class ExtraColumn(unittest.TestCase):
    DELTAS = staticmethod(bl.published_deltas("""
        Pool 1:-55.65 4:-98.53
        Sleep 1:~ 2:-5.21
    """))

    def test_published_deltas_by_name_and_p(self):
        self.assertEqual(self.DELTAS("Pool", "ns/op"), "-55.65%")
        self.assertEqual(self.DELTAS("Pool-4", "ns/op"), "-98.53%")
        self.assertEqual(self.DELTAS("Pool-2", "ns/op"), "-98.53% at 4P")  # next larger P
        self.assertIsNone(self.DELTAS("Pool-8", "ns/op"))  # none larger
        self.assertEqual(self.DELTAS("Sleep", "ns/op"), "~")
        self.assertIsNone(self.DELTAS("Pool", "allocs/op"))  # time/op deltas only
        self.assertIsNone(self.DELTAS("Other", "ns/op"))

    def test_table_gains_the_column_only_where_it_has_values(self):
        old = ["BenchmarkPool 1 %d ns/op 1 allocs/op" % v for v in (10, 11, 12)]
        new = ["BenchmarkPool 1 %d ns/op 1 allocs/op" % v for v in (5, 6, 7)]
        out = bl.compare(old, new, ("global", "sharded"), extra=("Go CL X", self.DELTAS))
        ns, allocs = out.split("\n\n")
        self.assertTrue(ns.splitlines()[0].endswith("Go CL X"))
        self.assertTrue(ns.splitlines()[1].endswith("-55.65%"))
        self.assertNotIn("Go CL X", allocs)
        # without extra the text is benchcmp's, byte for byte
        self.assertEqual(bl.compare(old, new), bc.compare(old, new))


class Ratios(unittest.TestCase):
    def test_renamer(self):
        r = bl.renamer(bl.parse_map("CreateGoroutines=CreateTasks,PoolExpensiveNew="
                                    "PoolExpensiveNew/trim=8MiB,WithTimeout=Deadline"))
        self.assertEqual(r("CreateGoroutines-2"), "CreateTasks-2")
        self.assertEqual(r("PoolExpensiveNew"), "PoolExpensiveNew/trim=8MiB")
        self.assertEqual(r("WithTimeout/concurrency=40-2"), "Deadline/concurrency=40-2")
        self.assertEqual(r("Other-4"), "Other-4")
        self.assertEqual(bl.rename_lines(["goos: linux", "BenchmarkCreateGoroutines-2 10 5 ns/op"],
                                         r), ["BenchmarkCreateTasks-2 10 5 ns/op"])

    def test_ratio_tables(self):
        go = bl.parse_results(["BenchmarkA 1 %d ns/op" % v for v in (100, 110, 120)]
                              + ["BenchmarkGoOnly 1 5 ns/op"])
        ours = bl.parse_results(["BenchmarkA 1 %d ns/op" % v for v in (40, 50, 60)])
        rows = []
        lines, unmatched = bl.ratio_tables(go, ours, rows_out=rows)
        self.assertEqual(lines[0].split(), ["name", "go", "ns/op", "corun", "ns/op", "corun/go"])
        self.assertEqual(lines[1].split(), ["A", "110.0", "50.00", "0.45x", "(p=0.100", "n=3+3)"])
        self.assertEqual(unmatched, ["GoOnly"])
        self.assertEqual((rows[0].old, rows[0].new, rows[0].n_old), (110, 50, 3))
        self.assertAlmostEqual(rows[0].p, 0.1)
        self.assertEqual(bl.fmt_ratio(0.000213), "0.00021x")

    def test_medians_table_by_unit_and_by_name(self):
        a = bl.parse_results(["BenchmarkX 1 10 ns/op 3 cpu%", "BenchmarkX 1 30 ns/op 5 cpu%",
                              "BenchmarkY 1 7 ns/op"])
        b = bl.parse_results(["BenchmarkX 1 20 ns/op 4 cpu%"])
        by_unit = [l.split() for l in bl.medians_table(["a", "b"], [a, b])]
        self.assertEqual(by_unit, [["name", "unit", "a", "b"], ["X", "ns/op", "20.00", "20.00"],
                                   ["Y", "ns/op", "7.000", "-"], ["X", "cpu%", "4.000", "4.000"]])
        by_name = [l.split()[:2] for l in bl.medians_table(["a", "b"], [a, b], by="name")]
        self.assertEqual(by_name[1:], [["X", "ns/op"], ["X", "cpu%"], ["Y", "ns/op"]])
        self.assertEqual(bl.medians_table(["a"], [a], units=["cpu%"])[1].split(),
                         ["X", "cpu%", "4.000"])


FAKE_BENCH = r"""#!/usr/bin/env python3
# A fake corun-bench: -list prints names; -bench prints one result per name and P, whose
# ns/op depends on CORUN_RUNNEXT_BACKOFF; every run is logged (env, flags) to $FAKE_LOG.
import os, re, sys
a = sys.argv[1:]
names = ["CreateTasks", "Yield", "WaitGroupHandoff", "MutexHandoff", "CreateTasksParallel"]
if a[0] == "-list":
    print("\n".join("Benchmark" + n for n in names if re.search(a[1], n)))
    sys.exit(0)
opt = dict(zip(a[0::2], a[1::2]))
backoff = os.environ.get("CORUN_RUNNEXT_BACKOFF", "default")
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write("%s %s\n" % (backoff, " ".join(a)))
with open(os.environ["FAKE_LOG"] + ".n", "a+") as f:
    f.seek(0)
    k = len(f.read())
    f.write("x")
print("goos: linux\npkg: corun")
for n in names:
    if re.search(opt["-bench"], n):
        for p in opt.get("-cpu", "1").split(","):
            base = 200 if backoff == "usleep:100" else 100
            if n == "Yield":
                base = 300 - base  # the new side is slower: a regression
            print("Benchmark%s%s 1000 %d ns/op" % (n, "" if p == "1" else "-" + p, base + k))
print("PASS")
"""


class Driver(unittest.TestCase):
    def test_sections_are_consistent(self):
        names = [s.name for s in ba.SECTIONS]
        self.assertEqual(len(names), len(set(names)))
        for sec in ba.SECTIONS:
            settings = [s.name for s in sec.settings]
            self.assertEqual(len(settings), len(set(settings)), sec.name)
            for knob in (sec.count, sec.cpus, sec.benchtime):
                self.assertTrue(knob in ba.KNOBS or not knob.isupper(), (sec.name, knob))
            for t in sec.tables:
                for attr in ("old", "new", "floor"):
                    if hasattr(t, attr):
                        self.assertIn(getattr(t, attr), settings, (sec.name, attr))
                for s in getattr(t, "settings", None) or []:
                    self.assertIn(s, settings, sec.name)
            for s in sec.settings:
                for b in (s.benches or sec.benches):
                    self.assertTrue(b.go if s.go else b.ours, (sec.name, s.name))
            self.assertNotIn("the seed", sec.title)

    def test_knobs_and_durations(self):
        k = ba.Knobs({"COUNT": "7"})
        self.assertEqual(k.get("TIMER_COUNT"), "7")  # defaults to $COUNT
        self.assertEqual(k.get("POOL_CPUS"), "1,2,8,16")
        self.assertEqual(k.get("2"), "2")  # a literal
        self.assertEqual(ba.Knobs({"COUNT": "0", "CPUS": "1,x"}).check()[0][:7], "COUNT=0")
        self.assertEqual(len(ba.Knobs({"BENCHTIME": "3 s"}).check()), 1)
        self.assertEqual(ba.parse_duration("1m30s"), 90)
        self.assertAlmostEqual(ba.parse_duration("300ms"), 0.3)
        self.assertIsNone(ba.parse_duration("300"))

    def test_a_section_alternates_writes_raw_files_and_summarises(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "corun-bench")
            with open(fake, "w") as f:
                f.write(FAKE_BENCH)
            os.chmod(fake, 0o755)
            log = os.path.join(d, "log")
            # LINE_PROBE=0: the probes are scripts/lineprobe_test.py's; here every call
            # of the fake is a run.
            env = dict(os.environ, FAKE_LOG=log, COUNT="5", CPUS="1,2", PLOT="0",
                       LINE_PROBE="0",
                       CORUN_RUNNEXT_BACKOFF="usleep:3")  # must not reach the runs
            p = subprocess.run([sys.executable, os.path.join(_DIR, "bench-all"), "--section",
                                "sched", d], env=env, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(log) as f:
                order = [line.split()[0] for line in f]
            self.assertEqual(order, ["usleep:100", "default"] * 5)  # A B A B ...
            out = p.stdout
            self.assertIn("== scheduler: runnext backoff usleep:100 (Go before CL 20835)", out)
            self.assertIn("raw: ", out)
            self.assertNotIn("goos:", out)  # raw lines stay in the files
            raw = os.path.join(d, "bench", "sched-spin3000.txt")
            self.assertEqual(len(bl.read_results(raw)[0][("Yield-2", "ns/op")]), 5)
            self.assertIn("CreateTasks-2", bc.compare(bl.read_lines(raw), bl.read_lines(raw)))
            self.assertRegex(next(l for l in out.splitlines() if l.startswith("CreateTasks ")),
                             r" -4\d\.\d\d%  \(p=0\.008 n=5\+5\)")
            # Yield got slower on the new side: the summary names it
            summary = out[out.index("== summary"):]
            self.assertRegex(summary, r"sched\s+usleep100 -> spin3000\s+ns/op\s+8 better, "
                                      r"2 worse, 0 ~ \(of 10\)")
            self.assertRegex(summary, r"sched\s+Yield\s+ns/op\s+10\d\.\d -> 20\d\.\d  \+9\d\.\d\d%")
            self.assertIn("failed runs: none", summary)
            self.assertIn("not passed to the runs", p.stderr)
            self.assertIn("[10/10 sched]", p.stderr)  # progress: a line per step off a tty
            # --report prints the same tables again from the raw files, running nothing
            os.remove(log)
            r = subprocess.run([sys.executable, os.path.join(_DIR, "bench-all"), "--section",
                                "sched", "--report", d], env=env, capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse(os.path.exists(log))
            self.assertEqual(r.stdout[:r.stdout.index("== summary")],
                             out[:out.index("== summary")])

    def test_pairs_put_two_groups_of_rows_side_by_side(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "corun-bench")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\nexit 0\n")
            os.chmod(fake, 0o755)
            os.makedirs(os.path.join(d, "bench"))
            with open(os.path.join(d, "bench", "net-per-p.txt"), "w") as f:
                for k in range(3):
                    f.write("BenchmarkNetEcho/nodeadline-2 1000 %d ns/op 99 cpu%%\n" % (100 + k))
                    f.write("BenchmarkNetEcho/deadline-2 1000 %d ns/op 99 cpu%%\n" % (120 + k))
                    f.write("BenchmarkTimerLateness/Sleep1=50us/idle 100 1 ns/op 10 p50-ns "
                            "%d p99-ns 99 max-ns\n" % (20 + k))
                    f.write("BenchmarkTimerLateness/ReadDeadline=50us/idle 100 1 ns/op 10 p50-ns "
                            "%d p99-ns 99 max-ns\n" % (30 + k))
            p = subprocess.run([sys.executable, os.path.join(_DIR, "bench-all"), "--section",
                                "net", "--report", "--no-go", d], capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertRegex(p.stdout, r"\nNetEcho-2 +101\.0 +121\.0 +1\.20x  \(p=0\.100 n=3\+3\)")
            self.assertRegex(p.stdout, r"\nTimerLateness/\*=50us/idle +21\.00 +31\.00 +1\.48x")
            self.assertIn("ReadDeadline p99-ns", p.stdout)
            self.assertNotIn("ReadDeadline ns/op", p.stdout)  # units=p50/p99/max only


class Server(unittest.TestCase):
    RUNSH = ("for b in bin/go-nethttp bin/go-raw bin/asio-raw bin/beast-http; do\n  :\ndone\n"
             "command -v nginx >/dev/null || { exit 1; }\n"
             "  case $name in\n    go-raw-P?) CMD=(x) ;;\n    nginx-w?)\n      CMD=(y) ;;\n"
             "  esac\n")

    def test_run_sh_patch_adds_corun_and_fails_loudly(self):
        t = bs.patch_runsh(self.RUNSH)
        self.assertIn('corun-P?)        CMD=(env CORUN_PROCS=$n "$HTTPD_BIN" 127.0.0.1:$port)',
                      t)
        self.assertIn("corun-usleep-P?) CMD=(env CORUN_PROCS=$n "
                      "CORUN_RUNNEXT_BACKOFF=usleep:100", t)
        self.assertIn("corun-global-P?) CMD=(env CORUN_PROCS=$n CORUN_TIMERS=global", t)
        self.assertLess(t.index("corun-global-P?)"), t.index("nginx-w?)"))
        self.assertIn("${NEED_BINS-bin/go-nethttp", t)
        with self.assertRaisesRegex(ValueError, "does not apply"):
            bs.patch_runsh(self.RUNSH.replace("    nginx-w?)\n", ""))
        self.assertEqual(bs.corun_env("corun-global-P2"), {"CORUN_TIMERS": "global"})
        self.assertEqual(bs.corun_env("corun-nopin-P2"), {"CORUN_PIN": "off"})
        self.assertEqual(bs.corun_env("corun-P1"), {})
        self.assertIsNone(bs.corun_env("go-raw-P1"))
        self.assertEqual(bs.peer_binary("go-raw-nodl-P1"), ("bin/go-raw", "go"))
        self.assertEqual(bs.peer_binary("nginx-w2"), (None, "nginx"))

    def test_knobs(self):
        self.assertEqual(bs.knobs("seeds", {})[1:], ("10000", "3", "8s"))
        self.assertEqual(bs.knobs("server", {"CONNS": " 100  1000", "ROUNDS": "1",
                                             "DURATION": "2s", "SERVERS": "nginx-w1"}),
                         (["nginx-w1"], "100 1000", "1", "2s"))
        for bad in ({"DURATION": "2"}, {"CONNS": "x"}, {"ROUNDS": "0"}):
            with self.assertRaises(ValueError):
                bs.knobs("server", bad)

    def test_tables_from_rows(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rows.tsv")
            with open(path, "w") as f:
                for r, (a, b) in enumerate([(1000, 1200), (1100, 1000)], 1):
                    f.write("10000\t%d\tcorun-usleep-P2\t2\t1\t%d\t1.0\t%d.0\t0\t90\t90\t0\n"
                            % (r, a, 40 + r))
                    f.write("10000\t%d\tcorun-P2\t2\t1\t%d\t1.0\t%d.0\t0\t90\t90\t0\n"
                            % (r, b, 20 + r))
                    f.write("10000\t%d\tgo-raw-P2\t2\t1\t500\t1.0\t10.0\t0\t9\t9\t0\n" % r)
                f.write("10000\t1\tnginx-w2\t2\t1\t-\t-\t-\tNOT-UP\t-\t-\t-\n")
            rows = bs.parse_rows(path)
        med = bs.medians(rows)
        self.assertEqual(med[("corun-P2", 10000)][:2], (1100, 21.5))
        claims = bs.claims_table(med, [10000])
        self.assertEqual(len(claims), 2)  # header + the one claim whose servers both ran
        self.assertRegex(claims[1], r"CL 20835 .* 41\.50 +21\.50 +0\.52x +1050 +1100 +1\.05x$")
        peers = bs.peers_table(med, ["corun-P2", "go-raw-P2", "nginx-w2"], [10000])
        self.assertRegex(peers[1],
                         r"corun-P2 +go-raw-P2 +1100 +500 +2\.20x +21\.50 +10\.00 +2\.15x$")
        self.assertRegex(peers[2], r"nginx-w2 +1100 +- +- +21\.50 +- +-$")

    def test_bench_all_plans_the_script_sections(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "corun-bench")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\nexit 0\n")
            os.chmod(fake, 0o755)
            p = subprocess.run([sys.executable, os.path.join(_DIR, "bench-all"), "--dry-run",
                                "--section", "server*", d], capture_output=True, text=True,
                               env=dict(os.environ, SEED_ROUNDS="1", SERVERS="a-P1 b-P1",
                                        CONNS="100", ROUNDS="1"))
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("scripts/bench-server %s > %s"
                          % (d, os.path.join(d, "bench", "server.txt")), p.stdout)
            self.assertIn("scripts/bench-server --seeds %s >" % d, p.stdout)
            # bench-server's estimates: 20 s + runs x (8 s + 1.5 s): 2 runs + 5 runs
            self.assertIn("# estimate: 1:47", p.stdout)


if __name__ == "__main__":
    unittest.main()
