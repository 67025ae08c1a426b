#!/usr/bin/env python3
"""Compares two builds' benchmarks side by side: `hami bench hook` and `hami bench region`.

usage: scripts/bench-compare.py --old OLD_BUILD_DIR --new NEW_BUILD_DIR [--rounds N]
                                [--limit PERCENT] [hook] [region]

Each round runs the old build's benchmark, then the new one's (the order alternates from
round to round, so a drift of the machine's speed falls on both), and the table gives, per
figure, the median over the rounds of each build and the ratio new / old. A figure whose
ratio exceeds 1 + PERCENT/100 (default 10) is marked; the exit status is 0 when none is,
1 when one is, 2 for bad arguments or a benchmark that failed to run.

Judged: per hook case, the wrapped call's time over the direct call's in the same run (the
machine's speed divides out; the raw times are shown), and the region's steady-state
figures (membership of a warm process, reserve and release). Only figures that both
builds report are compared. Figures that depend on how the kernel
schedules a burst of processes (the region's burst percentiles) are left out: they measure
the machine, not the library; `hami bench region` reports them on its own.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_hook(build):
    """One run of the hook benchmark: {case/side: CPU ns per call}, the lowest of the run's
    repetitions, as the benchmark's own table reports it."""
    exe = os.path.join(build, "bench", "hami_bench_hook")
    out = subprocess.run([exe, "--benchmark_format=json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{exe} exited {out.returncode}: {out.stderr[-2000:]}")
    doc = json.loads(out.stdout)
    figures = {}
    for b in doc["benchmarks"]:
        if b.get("aggregate_name") != "min":
            continue
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6}[b.get("time_unit", "ns")]
        figures["hook " + b["run_name"]] = b["cpu_time"] * scale
    # Per case, the wrapped call over the direct one of the same run: the machine's speed
    # divides out, so this is the figure judged.
    for name in list(figures):
        if name.endswith("/wrapped"):
            case = name[: -len("/wrapped")]
            if case + "/direct" in figures and figures[case + "/direct"] > 0:
                figures[case + " wrapped/direct"] = figures[name] / figures[case + "/direct"]
    return figures


def run_region(build):
    """One run of the region benchmark (quick): its steady-state figures in ns."""
    exe = os.path.join(build, "bench", "hami_bench_region")
    with tempfile.TemporaryDirectory(prefix="hami-bench-compare-") as d:
        path = os.path.join(d, "region.json")
        out = subprocess.run([exe, "--quick", "--json", path], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{exe} exited {out.returncode}: {out.stdout[-2000:]}")
        with open(path) as f:
            doc = json.load(f)
    figures = {}

    def walk(prefix, node):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(prefix + "." + k if prefix else k, v)
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            figures["region " + prefix] = float(node)

    walk("membership_warm", doc.get("membership_warm", {}))
    walk("reserve_release", doc.get("reserve_release", {}))
    # Counts and configuration are not figures.
    return {k: v for k, v in figures.items() if k.endswith("_ns") or k.endswith("_us")}


RUNNERS = {"hook": run_hook, "region": run_region}


def is_judged(name):
    """Whether a figure counts against the limit. A hook case's raw times move with the
    machine's speed (shown, not judged); its wrapped/direct ratio does not. The region's
    one-sample file creation is shown only."""
    if name.startswith("hook "):
        return name.endswith(" wrapped/direct")
    return not name.endswith("create_us")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="the baseline build directory")
    p.add_argument("--new", required=True, help="the build directory under test")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--limit", type=float, default=10.0, help="allowed slowdown in percent")
    p.add_argument("benchmarks", nargs="*", default=["hook", "region"])
    a = p.parse_args()
    for b in a.benchmarks:
        if b not in RUNNERS:
            p.error(f"unknown benchmark '{b}' (known: {', '.join(RUNNERS)})")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")

    samples = {"old": {}, "new": {}}
    try:
        for r in range(a.rounds):
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            for which in order:
                build = a.old if which == "old" else a.new
                for b in a.benchmarks:
                    for name, value in RUNNERS[b](build).items():
                        samples[which].setdefault(name, []).append(value)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        print(f"bench-compare: {e}", file=sys.stderr)
        return 2

    names = sorted(set(samples["old"]) & set(samples["new"]))
    worse = 0
    print(f"{'figure':<62} {'old':>10} {'new':>10} {'new/old':>8}")
    for name in names:
        old = statistics.median(samples["old"][name])
        new = statistics.median(samples["new"][name])
        judged = is_judged(name)
        ratio = new / old if old > 0 else float("inf") if new > 0 else 1.0
        mark = ""
        if judged and ratio > 1 + a.limit / 100:
            mark = f"  > +{a.limit:g}%"
            worse += 1
        shown = f"{name}{'' if judged else ' (shown)'}"
        print(f"{shown:<62} {old:>10.3f} {new:>10.3f} {ratio:>8.3f}{mark}")
    only = sorted(set(samples["old"]) ^ set(samples["new"]))
    if only:
        print("in one build only (not compared): " + ", ".join(only))
    print(f"{worse} figure(s) beyond +{a.limit:g}% over {a.rounds} rounds")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
