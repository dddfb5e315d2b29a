#!/usr/bin/env python3
"""Markdown tables of the workload results scripts/run_workloads.sh collected.

Each input line is `config=NAME sub=WORKLOAD key=value ...`; for every (workload,
configuration) this prints the median of each figure over the repeats, with the number of
repeats, and for time columns the speed-up over a baseline configuration (`system` for bigbuf and
scipp, as issue 4's targets are stated against glibc; `jemalloc` for the mixed workload).

usage: summarise.py RESULTS
"""
import re
import statistics
import sys
from collections import OrderedDict, defaultdict

CONFIGS = ["hugealloc", "hugealloc-thp-always", "hugealloc-thp-never", "system",
           "jemalloc", "jemalloc-thp-always", "mimalloc",
           # scripts/bench-hugetlb.sh (issue 14)
           "hugealloc-hugetlb-2M", "hugealloc-hugetlb-1G", "glibc-hugetlb-2", "mimalloc-reserve-1G"]
# scripts/bench-hugetlb.sh has no `system` run: its time columns compare with glibc's hugetlb
# run instead.
BASELINE_FALLBACK = {"system": "glibc-hugetlb-2"}

# workload -> (baseline, [(column title, key, is_time)])
TABLES = OrderedDict([
    ("workload", ("jemalloc", [
        ("wall ms", "wall_ms", True),
        ("wall ms min–max", "wall_ms:range", False),
        ("minor faults", "minflt", False),
        ("peak RSS MiB", "peak_rss_mib", False),
    ])),
    ("bigbuf", ("system", [
        ("median round ms", "median_ms", True),
        ("best round ms", "best_ms", True),
        ("first round ms", "first_ms", True),
        ("first round minor faults", "first_minflt", False),
        ("minor faults / round", "minflt_per_round", False),
        ("THP faults (all rounds)", "thp_faults", False),
    ])),
    ("scipp", ("system", [
        ("element-wise best ms", "elementwise_best_ms", True),
        ("min–max", "elementwise_best_ms:range", False),
        ("its minor faults", "elementwise_minflt", False),
        ("chase ns/step", "chase_ns_per_step", True),
        ("chase fill ms", "chase_fill_best_ms", True),
    ])),
    ("frag", (None, [
        ("fill heap RSS", "fill_heap_rss_mib", False),
        ("fill AnonHuge", "fill_anon_huge_mib", False),
        ("thin heap RSS", "thin_heap_rss_mib", False),
        ("thin AnonHuge", "thin_anon_huge_mib", False),
        ("refill heap RSS", "refill_heap_rss_mib", False),
        ("waited heap RSS", "waited_heap_rss_mib", False),
        ("waited AnonHuge", "waited_anon_huge_mib", False),
        ("freed heap RSS", "freed_heap_rss_mib", False),
    ])),
])


def parse(path):
    """(label, config) -> key -> values; label -> workload (`sub`); label -> parameters.

    The label is the line's `workload=` (scripts/bench-hugetlb.sh names its runs, e.g.
    `bigbuf-512`, `chase-1024`) or else its `sub`. A `/usr/bin/time` line of that script
    (`config=C workload=L time: 1.2 s, 345 minor faults`) adds `wall_s` and `proc_minflt`.
    """
    data = defaultdict(lambda: defaultdict(list))
    subs = OrderedDict()
    params = defaultdict(set)
    with open(path) as f:
        for line in f:
            kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
            if "config" not in kv:
                continue
            if "sub" not in kv:
                m = re.search(r"time: ([0-9.]+) s, ([0-9]+) minor faults", line)
                if m and "workload" in kv:
                    d = data[(kv["workload"], kv["config"])]
                    d["wall_s"].append(float(m.group(1)))
                    d["proc_minflt"].append(float(m.group(2)))
                continue
            label = kv.get("workload", kv["sub"])
            subs.setdefault(label, kv["sub"])
            key = (label, kv["config"])
            for k, v in kv.items():
                try:
                    data[key][k].append(float(v))
                except ValueError:
                    pass
            for k in ("mib", "iters", "entries", "rounds", "keep", "type", "chase_mib"):
                if k in kv:
                    params[label].add(f"{k}={kv[k]}")
    return data, subs, params


def fmt(v):
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def main():
    data, subs, params = parse(sys.argv[1])
    for label, sub in subs.items():
        if sub not in TABLES:
            continue
        baseline, cols = TABLES[sub]
        if baseline and not any(k == (label, baseline) for k in data):
            baseline = BASELINE_FALLBACK.get(baseline, baseline)
        if any("wall_s" in data[(label, c)] for c in CONFIGS if (label, c) in data):
            cols = cols + [("process wall s", "wall_s", True),
                           ("process minor faults", "proc_minflt", False)]
        rows = [c for c in CONFIGS if (label, c) in data]
        if not rows:
            continue
        print(f"\n`{label}` ({', '.join(sorted(params[label]))}); medians"
              + (f"; in brackets the speed-up over {baseline} ({baseline}'s time / this time)"
               if baseline else "; MiB") + "\n")
        print("| configuration | n | " + " | ".join(t for t, _, _ in cols) + " |")
        print("|---|---|" + "---|" * len(cols))
        for c in rows:
            d = data[(label, c)]
            n = len(d.get(cols[0][1].split(":")[0], [])) or max(
                (len(v) for v in d.values()), default=0)
            cells = []
            for _, key, is_time in cols:
                if key.endswith(":range"):
                    v = d.get(key[:-6], [])
                    cells.append(f"{fmt(min(v))}–{fmt(max(v))}" if v else "–")
                    continue
                if key not in d:
                    cells.append("–")
                    continue
                m = statistics.median(d[key])
                cell = fmt(m)
                if is_time and baseline and (label, baseline) in data \
                        and key in data[(label, baseline)]:
                    b = statistics.median(data[(label, baseline)][key])
                    if m > 0 and b > 0:
                        cell += f" ({b / m:.2f}x)"
                cells.append(cell)
            print(f"| {c} | {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
