#!/usr/bin/env python3
"""Tests of scripts/benchcmp with hand-checked values. Run: python3 scripts/benchcmp_test.py"""

import contextlib
import importlib.machinery
import importlib.util
import io
import math
import os
import statistics
import tempfile
import unittest

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchcmp")
_loader = importlib.machinery.SourceFileLoader("benchcmp", _PATH)
_spec = importlib.util.spec_from_loader("benchcmp", _loader)
bc = importlib.util.module_from_spec(_spec)
_loader.exec_module(bc)


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


if __name__ == "__main__":
    unittest.main()
