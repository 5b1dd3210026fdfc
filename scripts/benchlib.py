"""benchlib: what scripts/benchcmp, scripts/go-compare and scripts/bench-all share.

Reading Go's benchmark format (`BenchmarkName[-P]  N  value unit  [value unit ...]`),
the Mann-Whitney U test, the old/new/delta table of benchcmp, tables of medians, the
corun/go ratio table of go-compare, Go's name mapping, and building and running a Go
package's test binary, and the cache-line probe that tells the VM's modes apart.

Invariants:
- Samples are grouped by full name (with the -P suffix) and unit; rows keep the order
  in which names first appear; nothing here reorders or drops a sample.
- Every table function returns its lines (no trailing blank line) and, where the summary
  of scripts/bench-all needs them, the numbers behind them (Row), so the text and the
  summary cannot disagree.
- Python 3 stdlib only (Debian bookworm's 3.11); no Go module downloads.

Rejected: means and t-tests (benchmark times are skewed and outlier-prone); benchstat
(a Go module download); a copy of this code in each of benchcmp, go-compare and
bench-all (copies drift apart: number formats, name parsers).
Tests: python3 scripts/benchcmp_test.py
"""

import functools
import math
import os
import re
import shutil
import statistics
import subprocess
from dataclasses import dataclass

EXACT_MAX_N = 50  # exact U distribution up to this many samples per side (without ties)

# Units where a smaller value is better: the ones the summaries count as faster/slower.
# cpu% is not among them (spinning trades CPU for latency on purpose), nor counts such
# as New/op or trims/op.
LOWER_IS_BETTER = ("ns/op", "B/op", "allocs/op", "B/task", "p50-ns", "p99-ns", "p999-ns",
                   "max-ns")


# ---- parsing ---------------------------------------------------------------------------

def parse_result_line(line):
    """Parses one Go benchmark result line.

    Returns (name, [(value, unit), ...]) with the name including "Benchmark" and any -P
    suffix, or None if the line is not a result line.
    """
    fields = line.split()
    if len(fields) < 4 or not fields[0].startswith("Benchmark"):
        return None
    rest = fields[0][len("Benchmark"):]
    if rest and rest[0].islower():  # Go's rule: "Benchmarkfoo" is not a benchmark
        return None
    try:
        iters = int(fields[1])
    except ValueError:
        return None
    if iters <= 0 or (len(fields) - 2) % 2 != 0:
        return None
    metrics = []
    for i in range(2, len(fields), 2):
        try:
            value = float(fields[i])
        except ValueError:
            return None
        if not math.isfinite(value):
            return None
        metrics.append((value, fields[i + 1]))
    return fields[0], metrics


def parse_results(lines, rename=None):
    """Collects samples: returns (samples, names, units).

    samples maps (name, unit) -> [values] in file order; names and units list the
    distinct names (without "Benchmark") and units in order of first appearance.
    rename, if given, maps each name (with its -P suffix) to the name to file it under.
    """
    samples, names, units = {}, [], []
    for line in lines:
        parsed = parse_result_line(line)
        if parsed is None:
            continue
        full, metrics = parsed
        name = full[len("Benchmark"):]
        if rename is not None:
            name = rename(name)
        if name not in names:
            names.append(name)
        for value, unit in metrics:
            if unit not in units:
                units.append(unit)
            samples.setdefault((name, unit), []).append(value)
    return samples, names, units


def read_lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def read_results(path, rename=None):
    """parse_results of a file; a missing file reads as empty."""
    try:
        return parse_results(read_lines(path), rename)
    except FileNotFoundError:
        return {}, [], []


def split_procs(name):
    """"Name/sub-2" -> ("Name/sub", 2); "Name" -> ("Name", 1) (Go's -P suffix rule)."""
    m = re.match(r"^(.*?)(?:-(\d+))?$", name)
    return m.group(1), int(m.group(2) or 1)


# ---- Go's names to ours ----------------------------------------------------------------

def parse_map(text):
    """"GoName=OurName,..." -> dict; the first '=' splits (our name may hold '=')."""
    return dict(kv.split("=", 1) for kv in text.split(",")) if text else {}


def renamer(mapping):
    """Returns a function renaming a Go result name (with -P) to ours: a key matches the
    name without -P, or its part before the first '/' (then the rest is kept)."""
    def rename(full):
        m = re.match(r"^(.*?)(-\d+)?$", full)
        base, procs = m.group(1), m.group(2) or ""
        if base in mapping:
            base = mapping[base]
        else:
            head, sep, rest = base.partition("/")
            if sep and head in mapping:
                base = mapping[head] + sep + rest
        return base + procs
    return rename


def rename_lines(lines, rename):
    """Go's result lines under our names (other lines dropped), for benchcmp by hand."""
    out = []
    for line in lines:
        parsed = parse_result_line(line)
        if parsed is None:
            continue
        fields = line.split()
        name = rename(fields[0][len("Benchmark"):])
        out.append(" ".join(["Benchmark" + name] + fields[1:]))
    return out


# ---- statistics ------------------------------------------------------------------------

def ranks(values):
    """1-based ranks, ties get the average rank. Returns (ranks, tie group sizes)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    ties = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            r[order[k]] = avg
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return r, ties


def u_distribution(n1, n2):
    """Number of orderings of n1+n2 distinct values giving each U = 0..n1*n2.

    These are the coefficients of the Gaussian binomial [n1+n2 choose n1]_q =
    prod_{i=1..n1} (1 - q^(n2+i)) / (1 - q^i); every step only moves mass to higher
    powers, so truncating at degree n1*n2 is exact.
    """
    deg = n1 * n2
    c = [0] * (deg + 1)
    c[0] = 1
    for i in range(1, n1 + 1):
        k = n2 + i
        for j in range(deg, k - 1, -1):  # multiply by (1 - q^k)
            c[j] -= c[j - k]
        for j in range(i, deg + 1):  # divide by (1 - q^i)
            c[j] += c[j - i]
    return c


def mann_whitney(xs, ys):
    """Two-sided Mann-Whitney U test. Returns (U of xs, p-value)."""
    n1, n2 = len(xs), len(ys)
    if n1 == 0 or n2 == 0:
        return 0.0, 1.0
    r, ties = ranks(list(xs) + list(ys))
    u = sum(r[:n1]) - n1 * (n1 + 1) / 2.0
    if not ties and n1 <= EXACT_MAX_N and n2 <= EXACT_MAX_N:
        dist = u_distribution(n1, n2)
        total = math.comb(n1 + n2, n1)
        ui = int(round(u))
        low = sum(dist[: ui + 1]) / total
        high = sum(dist[ui:]) / total
        return u, min(1.0, 2.0 * min(low, high))
    n = n1 + n2
    mu = n1 * n2 / 2.0
    tie_term = sum(t ** 3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if var <= 0:
        return u, 1.0  # every value tied: no evidence of any difference
    z = max(0.0, abs(u - mu) - 0.5) / math.sqrt(var)
    return u, min(1.0, math.erfc(z / math.sqrt(2.0)))


def spread_pct(values, med):
    """Largest deviation from the median, in % of the median."""
    dev = max(abs(v - med) for v in values)
    if dev == 0:
        return 0.0
    if med == 0:
        return math.inf
    return dev / abs(med) * 100.0


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


# ---- formatting ------------------------------------------------------------------------

def fmt_num(v):
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e15 or a < 1e-3:
        return "%.4g" % v
    if a >= 1000:
        return "%.0f" % v
    if a >= 100:
        return "%.1f" % v
    if a >= 10:
        return "%.2f" % v
    if a >= 1:
        return "%.3f" % v
    return "%.4f" % v


def fmt_ratio(r):
    """A ratio as 0.42x; two significant digits below 0.01 (0.0021x, not 0.00x)."""
    return "%.2fx" % r if r >= 0.01 else "%.2gx" % r


def fmt_spread(pct):
    return "∞%" if math.isinf(pct) else "%.0f%%" % pct


def align(rows, left=1):
    """Lines of rows of cells, columns two spaces apart: left-aligned the first `left`
    columns (an int) or those whose indexes are in `left` (a set), the others
    right-aligned; trailing blanks stripped."""
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lefts = set(range(left)) if isinstance(left, int) else set(left)
    return ["  ".join(c.ljust(w[i]) if i in lefts else c.rjust(w[i])
                      for i, c in enumerate(r)).rstrip() for r in rows]


@dataclass
class Row:
    """One compared name and unit: medians, sample counts and the Mann-Whitney p."""
    name: str
    unit: str
    old: float  # median of the old (or Go) side
    new: float  # median of the new (or corun) side
    n_old: int
    n_new: int
    p: float

    def worse(self):
        """new is the worse side (a unit of LOWER_IS_BETTER only)."""
        return self.new > self.old

    def note(self):
        return "(p=%.3f n=%d+%d)" % (self.p, self.n_old, self.n_new)


# ---- benchcmp's table ------------------------------------------------------------------

def table(samples, names, unit, labels, alpha, extra=None, rows_out=None):
    """Returns the lines of one unit's old/new/delta table (old and new are dicts like
    parse_results'). extra = (header, fn(name, unit) -> str or None): a last column,
    shown when fn gives any row a value. rows_out, a list, receives a Row per name
    measured on both sides."""
    old_s, new_s = samples
    rows = []  # [name, old_med, old_spread, new_med, new_spread, delta, note]
    pairs = []  # (old median, new median) for the geomean
    for name in names:
        o = old_s.get((name, unit))
        nw = new_s.get((name, unit))
        if o is None and nw is None:
            continue
        row = [name, "", "", "", "", "", ""]
        om = statistics.median(o) if o else None
        nm = statistics.median(nw) if nw else None
        if o:
            row[1], row[2] = fmt_num(om), fmt_spread(spread_pct(o, om))
        else:
            row[1] = "-"
        if nw:
            row[3], row[4] = fmt_num(nm), fmt_spread(spread_pct(nw, nm))
        else:
            row[3] = "-"
        if o and nw:
            _, p = mann_whitney(o, nw)
            if p < alpha and om != 0:
                row[5] = "%+.2f%%" % ((nm - om) / abs(om) * 100.0)
            elif p < alpha:
                row[5] = "?"  # old median 0: a ratio means nothing
            else:
                row[5] = "~"
            row[6] = "(p=%.3f n=%d+%d)" % (p, len(o), len(nw))
            if om > 0 and nm > 0:
                pairs.append((om, nm))
            if rows_out is not None:
                rows_out.append(Row(name, unit, om, nm, len(o), len(nw), p))
        rows.append(row)
    if not rows:
        return []
    if pairs:
        go = geomean([a for a, _ in pairs])
        gn = geomean([b for _, b in pairs])
        rows.append(["[Geo mean]", fmt_num(go), "", fmt_num(gn), "",
                     "%+.2f%%" % ((gn - go) / go * 100.0), ""])
    extras = [extra[1](r[0], unit) or "" if r[0] != "[Geo mean]" else "" for r in rows] \
        if extra else []
    if not any(extras):
        extras = []

    def cell(med, spr, wm, ws):
        if not ws:
            return med.rjust(wm)
        return med.rjust(wm) + (" ± " + spr.rjust(ws) if spr else " " * (ws + 3))

    wname = max(len("name"), *(len(r[0]) for r in rows))
    wom = max(len(r[1]) for r in rows)
    wos = max(len(r[2]) for r in rows)
    wnm = max(len(r[3]) for r in rows)
    wns = max(len(r[4]) for r in rows)
    old_cells = [cell(r[1], r[2], wom, wos) for r in rows]
    new_cells = [cell(r[3], r[4], wnm, wns) for r in rows]
    h_old, h_new = "%s %s" % (labels[0], unit), "%s %s" % (labels[1], unit)
    wo = max(len(h_old), *(len(c) for c in old_cells))
    wn = max(len(h_new), *(len(c) for c in new_cells))
    wd = max(len("delta"), *(len(r[5]) for r in rows))
    header = "%s  %s  %s  %s" % ("name".ljust(wname), h_old.ljust(wo), h_new.ljust(wn),
                                 "delta")
    if extras:
        wnote = max(len(r[6]) for r in rows)
        header = "%s  %s  %s" % (header.ljust(wname + wo + wn + 6 + wd), " " * wnote,
                                 extra[0])
    out = [header.rstrip()]
    for i, (r, oc, nc) in enumerate(zip(rows, old_cells, new_cells)):
        line = "%s  %s  %s  %s  %s" % (r[0].ljust(wname), oc.ljust(wo), nc.ljust(wn),
                                       r[5].rjust(wd), r[6])
        if extras:
            line = "%s  %s" % (line.ljust(wname + wo + wn + wd + wnote + 8), extras[i])
        out.append(line.rstrip())
    return out


def compare(old_lines, new_lines, labels=("old", "new"), alpha=0.05, extra=None,
            rows_out=None):
    """Returns the report text for two result files' lines (see table())."""
    return compare_results(parse_results(old_lines), parse_results(new_lines), labels,
                           alpha, extra, rows_out)


def compare_results(old, new, labels=("old", "new"), alpha=0.05, extra=None,
                    rows_out=None):
    """compare() of two parse_results() values."""
    old_s, old_names, old_units = old
    new_s, new_names, new_units = new
    names = old_names + [n for n in new_names if n not in old_names]
    units = old_units + [u for u in new_units if u not in old_units]
    blocks = []
    for unit in units:
        lines = table((old_s, new_s), names, unit, labels, alpha, extra, rows_out)
        if lines:
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def published_deltas(text):
    """Parses a CL's published time/op deltas, one name a line: `Name P:delta ...`
    (delta in %, or ~ for no significant change). Returns an extra column function
    for table(): the delta for the row's name and P, else the one at the next larger P
    it measured, marked "at NP"; ns/op rows only."""
    deltas = {}
    for line in text.strip().splitlines():
        name, *cells = line.split()
        deltas[name] = {int(p): (v if v == "~" else v + "%")
                        for p, v in (c.split(":") for c in cells)}

    def column(name, unit):
        if unit != "ns/op":
            return None
        base, procs = split_procs(name)
        d = deltas.get(base)
        if not d:
            return None
        if procs in d:
            return d[procs]
        larger = [p for p in d if p > procs]
        return "%s at %dP" % (d[min(larger)], min(larger)) if larger else None
    return column


# ---- medians and ratios ----------------------------------------------------------------

def medians_table(labels, results, units=None, by="unit"):
    """One column of medians per labelled parse_results() value ("-" where one lacks
    the row). units: which units, in that order (default: all, in order of appearance).
    by="unit": all names of one unit, then the next unit; by="name": all units of one
    name, then the next name. Name order: the result with the most names, then any
    names the others add."""
    orders = [r[1] for r in results]
    names = list(max(orders, key=len)) if orders else []
    names += [n for o in orders for n in o if n not in names]
    if units is None:
        units = []
        for r in results:
            units += [u for u in r[2] if u not in units]
    keys = ([(n, u) for u in units for n in names] if by == "unit"
            else [(n, u) for n in names for u in units])
    rows = [["name", "unit"] + list(labels)]
    for n, u in keys:
        if any((n, u) in r[0] for r in results):
            rows.append([n, u] + [fmt_num(statistics.median(r[0][(n, u)]))
                                  if (n, u) in r[0] else "-" for r in results])
    return align(rows, left=2) if len(rows) > 1 else []


def ratio_tables(go, ours, labels=("go", "corun"), rows_out=None):
    """go-compare's tables: per unit, rows paired by name (Go's renamed to ours) with
    the medians, ours/go and the Mann-Whitney p; a [Geo mean] row of the ratios.
    go and ours are parse_results() values. Returns the lines, blank lines between
    units, and the Go names without a counterpart."""
    go_s, go_names, go_units = go
    our_s, _, our_units = ours
    units = go_units + [u for u in our_units if u not in go_units]
    blocks = []
    for unit in units:
        rows, ratios = [], []
        for name in go_names:
            g, o = go_s.get((name, unit)), our_s.get((name, unit))
            if not g or not o:
                continue
            gm, om = statistics.median(g), statistics.median(o)
            _, p = mann_whitney(g, o)
            ratio = "-"
            if gm > 0 and om > 0:
                ratio = fmt_ratio(om / gm)
                ratios.append(om / gm)
            rows.append([name, fmt_num(gm), fmt_num(om), ratio,
                         "(p=%.3f n=%d+%d)" % (p, len(g), len(o))])
            if rows_out is not None:
                rows_out.append(Row(name, unit, gm, om, len(g), len(o), p))
        if not rows:
            continue
        if len(ratios) > 1:
            rows.append(["[Geo mean]", "", "", fmt_ratio(geomean(ratios)), ""])
        hdr = ["name", "%s %s" % (labels[0], unit), "%s %s" % (labels[1], unit),
               "%s/%s" % (labels[1], labels[0]), ""]
        blocks.append(align([hdr] + rows, left=1))
    unmatched = [n for n in go_names
                 if not any((n, u) in our_s for u in units)]
    lines = []
    for b in blocks:
        if lines:
            lines.append("")
        lines += b
    return lines, unmatched


# ---- Go ------------------------------------------------------------------------------

def is_local_pkg(pkg):
    return pkg.startswith(("./", "../", "/"))


def go_pkg_dir(go, pkg, repo):
    """The directory a package's test binary runs in: GOROOT/src/PKG, or a local
    package's directory (PKG starting with ./, ../ or /, relative to repo)."""
    if is_local_pkg(pkg):
        return os.path.normpath(os.path.join(repo, pkg))
    return os.path.join(go_env(go, "GOROOT"), "src", pkg)


def go_pkg_tag(pkg):
    """A file-name-safe name of a package: a local directory's name, or the import path
    with '/' as '_'."""
    if is_local_pkg(pkg):
        return os.path.basename(os.path.normpath(pkg))
    return pkg.replace("/", "_")


@functools.lru_cache(maxsize=None)
def go_env(go, var):
    return subprocess.run([go, "env", var], check=True, capture_output=True,
                          text=True).stdout.strip()


def have_go(go):
    return shutil.which(go) is not None


def go_build_test_cmd(go, pkg, out_path, repo):
    """(argv, cwd) compiling a package's test binary to out_path once, so that runs
    alternate with ours without relinking: Go's own packages from GOROOT/src (time with
    -tags timetzdata, as its benchmarks need no system zoneinfo), a local one in its
    directory."""
    tags = ["-tags", "timetzdata"] if pkg == "time" else []
    if is_local_pkg(pkg):
        return [go, "test", "-c", "-o", out_path] + tags + ["."], go_pkg_dir(go, pkg, repo)
    return ([go, "test", "-c", "-o", out_path] + tags + [pkg],
            os.path.join(go_env(go, "GOROOT"), "src"))


def go_bench_args(regex, cpus=None, benchtime=None, count=1):
    """A test binary's flags for `go test -run NONE -bench REGEX -count N ...`."""
    args = ["-test.run", "NONE", "-test.bench", regex, "-test.count", str(count)]
    if cpus:
        args += ["-test.cpu", cpus]
    if benchtime:
        args += ["-test.benchtime", benchtime]
    return args


def corun_bench_args(regex, cpus=None, benchtime=None, count=1):
    args = ["-bench", regex, "-count", str(count)]
    if cpus:
        args += ["-cpu", cpus]
    if benchtime:
        args += ["-benchtime", benchtime]
    return args


def child_env(base, strip=(), extra=None):
    """The environment of a corun-bench run: base without the variables in strip, plus
    extra. CORUN_BENCH is always dropped: the runtime rejects unknown CORUN_* variables."""
    env = {k: v for k, v in base.items() if k not in strip and k != "CORUN_BENCH"}
    env.update(extra or {})
    return env


# The cache-line probe (bench-all's LINE_PROBE, go-compare --one-mode): one 20 ms
# Floor/line=pingpong of corun-bench at 2 Ps, the VM's current handoff time. A probe this
# many times off the run's median either way was made in another placement of the vCPUs.
LINE_PROBE_ARGS = ["-bench", "^Floor/line=pingpong$", "-cpu", "2", "-count", "1",
                   "-benchtime", "20ms"]
LINE_OFF = 2.0


def line_probe(bench_bin, env):
    """One probe: ns per handoff, or None if it did not run."""
    try:
        p = subprocess.run([bench_bin] + LINE_PROBE_ARGS, capture_output=True, text=True,
                           errors="replace", env=env, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    vals = parse_results(p.stdout.splitlines())[0].get(("Floor/line=pingpong-2", "ns/op"))
    return vals[0] if p.returncode == 0 and vals else None


def line_in_mode(ns, ref):
    """Whether a probe of ns is in the mode of the median probe ref."""
    return ref / LINE_OFF <= ns <= ref * LINE_OFF
