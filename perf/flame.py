#!/usr/bin/env python3
"""perf/flame.py: folded stacks and a flame graph SVG from `perf script`, for
perf/profile.sh flame (which records with frame pointers through task stacks).

usage: perf/flame.py fold [--keep-offsets] [--keep-threads] < PERF_SCRIPT_OUTPUT > OUT.folded
       perf/flame.py svg [--title T] [--min-width PCT] [--width PX] IN.folded > OUT.svg

fold: one line per distinct stack, "root;...;leaf COUNT" (Brendan Gregg's folded format,
so his flamegraph.pl or speedscope read it too); the root is the thread's name (comm)
with its number as * (corun-m*: the Ms run the same code), symbol offsets (+0x1f) are
dropped, an unresolved frame is "[dso]".
svg: a flame graph (root at the bottom, width = share of samples) as one self-contained
SVG: no script, no font or style sheet from the network; every frame's <title> holds its
full name, samples and share (the browser's tooltip). Frames are coloured by what they
are, with a legend: corun's context switch (corun_context_switch), the futex and kernel
path (futex*, syscalls, the kernel's scheduler), the run queue and scheduler loop (runq*,
runnext, find_runnable, steal*, ready, park), channels and select; the
rest in the usual warm flame colours, hashed from the name so a frame keeps its colour
from one graph to the next.

Invariants: a frame's width is exactly its samples / total samples of the graph's width;
children of a frame are sorted by name (Gregg's layout: the x order means nothing, the
width everything); frames narrower than --min-width percent of the total (default 0.1)
are left out with everything above them (the SVG stays small: ~150 bytes a frame).
Rejected: Brendan Gregg's flamegraph.pl (not packaged by Debian bookworm: `apt-cache search
flamegraph` finds nothing; a copy from GitHub needs the network); d3-flame-graph and
speedscope (a browser page that loads scripts, not a file that opens offline); perf's own
`perf script report flamegraph` (it downloads d3 from a CDN at view time); JavaScript
click-to-zoom (the tooltip answers "what is this frame"; zoom means re-running with a
narrower REGEX).
"""

import argparse
import hashlib
import html
import re
import sys
from collections import defaultdict

sys.dont_write_bytecode = True

# (legend label, colour, regex searched in the frame's name); the first match wins, so the
# kernel's schedule() is kernel, not corun's scheduler loop.
CATEGORIES = [
    ("context switch (task, thread)", "#b07cd8", re.compile(r"corun_context_switch|switch_to")),
    ("futex, kernel", "#f28e2b",
     re.compile(r"futex|syscall|SYSCALL|\[kernel|^schedule$|reschedule|"
                r"^(do_|__x64_|__schedule|schedule_|hrtimer|entry_|exit_to_user|"
                r"finish_task_switch|try_to_wake_up|ttwu|"
                r"native_|_raw_spin|pick_next|dequeue_|enqueue_)")),
    ("run queue, scheduler loop", "#5b9bd5",
     re.compile(r"runq|runnext|\bschedule\b|find_runnable|steal|global_queue|::ready\b|"
                r"\bready\(|::park\b|\bpark\(|gopark|yield")),
    ("channel, select", "#59a14f", re.compile(r"[Cc]han\b|[Cc]han[<:]|chan_|select|Select")),
]
OFFSET = re.compile(r"\+0x[0-9a-f]+$")


# ---- folding ---------------------------------------------------------------------------

def frame_name(line, keep_offsets=False):
    """'  7f12 sym+0x1f (/lib/x.so)' -> 'sym' ('[x.so]' when the symbol is unknown)."""
    parts = line.strip().split(None, 1)
    if len(parts) < 2:
        return None
    rest = parts[1]
    dso = ""
    m = re.search(r"\s+\(([^()]*)\)$", rest)
    if m:
        dso, rest = m.group(1), rest[:m.start()]
    sym = rest.strip()
    if not keep_offsets:
        sym = OFFSET.sub("", sym)
    if not sym or sym == "[unknown]":
        dso = dso.rsplit("/", 1)[-1] if dso else "unknown"
        sym = dso if dso.startswith("[") else "[%s]" % dso
    return sym.replace(";", ":")


def fold(lines, keep_offsets=False, keep_threads=False):
    """perf script's text -> {stack: samples}, stack = 'comm;root;...;leaf'; a comm's
    trailing number becomes * (one tower for all of corun's Ms) unless keep_threads."""
    counts = defaultdict(int)
    comm, frames = None, []

    def flush():
        if comm is not None:
            counts[";".join([comm] + frames[::-1])] += 1
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            comm, frames = None, []
        elif line[0] in " \t":
            if comm is not None:
                f = frame_name(line, keep_offsets)
                if f:
                    frames.append(f)
        elif not line.startswith("#"):
            flush()
            # 'corun-bench 1234 [000] 5.6: 250000 cpu-clock:': the comm may hold spaces;
            # it ends before the first run of spaces followed by digits (the pid/tid).
            m = re.match(r"^(.*?)\s+\d+(/\d+)?\s", line)
            comm = (m.group(1) if m else line.split()[0]).replace(";", ":")
            if not keep_threads:
                comm = re.sub(r"\d+$", "*", comm)  # corun-m0, corun-m1 -> corun-m*
            frames = []
    flush()
    return counts


# ---- rendering -------------------------------------------------------------------------

class Node:
    __slots__ = ("name", "count", "children")

    def __init__(self, name):
        self.name, self.count, self.children = name, 0, {}


def tree(folded):
    root = Node("all")
    for stack, n in folded:
        root.count += n
        node = root
        for f in stack.split(";"):
            node = node.children.setdefault(f, Node(f))
            node.count += n
    return root


def read_folded(lines):
    out = []
    for line in lines:
        line = line.rstrip("\n")
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            out.append((stack, int(n)))
    return out


def short_name(name):
    """A frame's label (its tooltip keeps the full name): C++ noise dropped."""
    name = name.replace("(anonymous namespace)::", "").replace("corun::", "")
    return re.sub(r"^(detail|sched|sync|bench)::", "", name)


def colour(name):
    for _, c, rx in CATEGORIES:
        if rx.search(name):
            return c
    h = hashlib.md5(name.encode()).digest()
    return "rgb(%d,%d,%d)" % (205 + h[0] % 50, 90 + h[1] % 110, 40 + h[2] % 40)


def svg(folded, title, width=1200, min_pct=0.1, frame_h=16):
    root = tree(folded)
    total = root.count or 1
    scale = (width - 20) / total
    min_samples = total * min_pct / 100.0
    rects = []  # (x, depth, w, node)
    depth_max = 0

    def walk(node, x, depth):
        nonlocal depth_max
        rects.append((x, depth, node.count * scale, node))
        depth_max = max(depth_max, depth)
        for name in sorted(node.children):
            c = node.children[name]
            if c.count >= min_samples:
                walk(c, x, depth + 1)
            x += c.count * scale
    walk(root, 10.0, 0)
    legend_h, top = 22, 44
    height = top + legend_h + (depth_max + 1) * frame_h + 30
    base = height - 30  # y of the bottom of the root frame
    out = ['<?xml version="1.0" standalone="no"?>',
           '<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="Verdana, DejaVu Sans, sans-serif">'
           % (width, height, width, height),
           '<rect width="100%" height="100%" fill="#f8f8f8"/>',
           '<text x="%d" y="22" font-size="15" text-anchor="middle">%s</text>'
           % (width // 2, html.escape(title)),
           '<text x="%d" y="38" font-size="11" text-anchor="middle" fill="#555">%d samples; '
           'width = share of samples; frames under %g%% left out; hover a frame for its '
           'name and share</text>' % (width // 2, total, min_pct)]
    x = 10
    for label, c, _ in CATEGORIES + [("other (warm: hashed by name)", colour("x"), None)]:
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
                   '<text x="%d" y="%d" font-size="11">%s</text>'
                   % (x, top + 2, c, x + 16, top + 12, html.escape(label)))
        x += 30 + 7 * len(label)
    out.append('<g font-size="11">')
    for x, depth, w, node in rects:
        y = base - (depth + 1) * frame_h
        tip = "%s (%d samples, %.2f%%)" % (node.name, node.count, 100.0 * node.count / total)
        fill = "#cccccc" if depth <= 1 else colour(node.name)  # all, the thread
        text = ""
        chars = int((w - 6) / 6.6)
        short = short_name(node.name)
        if chars >= 3:
            label = short if len(short) <= chars else short[:chars - 2] + ".."
            text = '<text x="%.1f" y="%.1f">%s</text>' % (x + 3, y + frame_h - 4,
                                                          html.escape(label))
        out.append('<g><title>%s</title><rect x="%.1f" y="%.1f" width="%.1f" height="%d" '
                   'fill="%s" stroke="#f8f8f8" stroke-width="0.5"/>%s</g>'
                   % (html.escape(tip), x, y, w, frame_h - 1, fill, text))
    out.append("</g>")
    out.append('<text x="10" y="%d" font-size="11" fill="#555">bottom: the thread '
               '(comm), then callers above callees; x order is alphabetical, not time'
               '</text>' % (height - 10))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(prog="perf/flame.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fold", help="perf script text on stdin -> folded stacks on stdout")
    f.add_argument("--keep-offsets", action="store_true")
    f.add_argument("--keep-threads", action="store_true",
                   help="a root per thread (corun-m0, corun-m1) instead of corun-m*")
    s = sub.add_parser("svg", help="folded stacks -> flame graph SVG on stdout")
    s.add_argument("folded")
    s.add_argument("--title", default="flame graph")
    s.add_argument("--min-width", type=float, default=0.1, metavar="PCT")
    s.add_argument("--width", type=int, default=1200)
    args = ap.parse_args(argv)
    if args.cmd == "fold":
        counts = fold(sys.stdin, args.keep_offsets, args.keep_threads)
        for stack in sorted(counts):
            sys.stdout.write("%s %d\n" % (stack, counts[stack]))
        return 0 if counts else 1
    with open(args.folded, encoding="utf-8", errors="replace") as fh:
        folded = read_folded(fh)
    if not folded:
        print("perf/flame.py: no stacks in %s" % args.folded, file=sys.stderr)
        return 1
    sys.stdout.write(svg(folded, args.title, args.width, args.min_width))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
