#!/usr/bin/env python3
"""Markdown tables of criterion medians for docs/benchmarks.md.

Reads CARGO_TARGET_DIR/criterion/<group>/<allocator>/new/estimates.json (the median's point
estimate, in ns per criterion iteration) for the groups the `alloc` and `threads` benches
write, divides by the operations per iteration (1,000 for `batch/*`, 2 for the two-thread
`pairs` and `larson`, 1 otherwise) and prints one table per bench with each allocator's median
and its ratio to jemalloc's (below 1.00 is faster than jemalloc).

usage: criterion_table.py [--range] [CRITERION_DIR...]   (default: $CARGO_TARGET_DIR/criterion)

With several directories (copies of criterion's output from separate runs) each cell is the
median over the runs of the per-run medians; `--range` prints the smallest and largest
per-run median instead (how much the runs disagree).
"""
import json
import os
import statistics
import sys

ALLOCATORS = ["system", "jemalloc", "mimalloc", "hugealloc"]
SIZES = ["16B", "64B", "256B", "1KiB", "16KiB", "256KiB", "4MiB"]
THREADS = {"pairs": 2, "producer_consumer": 1, "larson": 2}


def median_ns(roots, group, alloc):
    runs = []
    for root in roots:
        path = os.path.join(root, group, alloc, "new", "estimates.json")
        try:
            with open(path) as f:
                runs.append(json.load(f)["median"]["point_estimate"])
        except OSError:
            pass
    if not runs:
        return None
    return (min(runs), max(runs)) if RANGE else statistics.median(runs)


def fmt(ns):
    if ns is None:
        return "–"
    if isinstance(ns, tuple):
        return f"{fmt(ns[0])}–{fmt(ns[1])}"
    return f"{ns:.1f}" if ns < 100 else f"{ns:.0f}"


def scale(ns, per):
    return (ns[0] / per, ns[1] / per) if isinstance(ns, tuple) else ns / per


def row(label, values):
    base = values.get("jemalloc")
    cells = [label]
    for a in ALLOCATORS:
        v = values.get(a)
        if v is None:
            cells.append("–")
        elif base and not RANGE:
            cells.append(f"{fmt(v)} ({v / base:.2f})")
        else:
            cells.append(fmt(v))
    return "| " + " | ".join(cells) + " |"


def table(title, first, rows):
    if RANGE:
        title = title.split(":")[0] + ": smallest–largest per-run median, ns per operation"
    print(f"\n{title}\n")
    print("| " + first + " | " + " | ".join(ALLOCATORS) + " |")
    print("|" + "---|" * (len(ALLOCATORS) + 1))
    for label, values in rows:
        print(row(label, values))


RANGE = "--range" in sys.argv


def main():
    roots = [a for a in sys.argv[1:] if a != "--range"] or [os.path.join(
        os.environ.get("CARGO_TARGET_DIR", "target"), "criterion")]
    for shape, per in [("pair", 1), ("batch", 1000)]:
        rows = []
        for s in SIZES:
            vals = {}
            for a in ALLOCATORS:
                ns = median_ns(roots, f"{shape}_{s}", a)
                if ns is not None:
                    vals[a] = scale(ns, per)
            rows.append((s, vals))
        table(f"`{shape}`: ns per malloc+free (median; ratio to jemalloc)", "size", rows)
    rows = []
    for name, per in THREADS.items():
        vals = {}
        for a in ALLOCATORS:
            ns = median_ns(roots, f"threads_{name}", a)
            if ns is not None:
                vals[a] = scale(ns, per)
        rows.append((name, vals))
    table("two threads: wall ns per operation (median; ratio to jemalloc; lower is better)",
          "workload", rows)


if __name__ == "__main__":
    main()
