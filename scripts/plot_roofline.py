#!/usr/bin/env python3
"""Roofline plot of benchmark results files: fraction of the floor (floor_us / us) against T,
one line per family, one panel per workload, as a PNG.

    python3 scripts/plot_roofline.py bench/results/<date>_<commit>_stepfun-sm90.json [-o out.png]
    python3 scripts/plot_roofline.py OLDER.json NEWER.json -o out.png   # a later file's line wins

The input is a JSON list of rows ``{"workload", "family", "T", "us", "floor_us", ...}`` (the
bench/results format of issue 27; ``cakemoe bench --json`` writes it). Rows without a floor
(``floor_us`` null, e.g. CPU engine timings) are skipped. Needs matplotlib.
"""

import argparse
import json
import math
import sys
from collections import defaultdict


def load_series(path):
    """{(workload, family): [(T, fraction), ...] sorted by T} from the rows that have a floor."""
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a JSON list of rows, got {type(rows).__name__}")
    series = defaultdict(list)
    for i, row in enumerate(rows):
        missing = [k for k in ("family", "T", "us", "floor_us") if k not in row]
        if missing:
            raise ValueError(f"{path}: row {i} has no {', '.join(missing)}")
        floor, us = row["floor_us"], row["us"]
        if floor is None:
            continue
        if not (isinstance(us, (int, float)) and us > 0 and math.isfinite(us)):
            raise ValueError(f"{path}: row {i}: us must be a positive number, not {us!r}")
        series[(row.get("workload", ""), row["family"])].append((int(row["T"]), floor / us))
    return {key: sorted(points) for key, points in series.items()}


def plot(series, title, out_path):
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    workloads = sorted({w for w, _ in series})
    families = sorted({f for _, f in series})
    colors = {f: plt.get_cmap("tab10")(i % 10) for i, f in enumerate(families)}
    top = max(1.05, max(frac for points in series.values() for _, frac in points) * 1.05)
    # One panel per workload, shared axes, one colour per family across panels.
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4.5), dpi=120,
                             sharey=True, squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        for (w, family), points in sorted(series.items()):
            if w != workload:
                continue
            ts, fractions = zip(*points)
            ax.plot(ts, fractions, marker="o", color=colors[family], label=family)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("tokens T")
        ax.set_ylim(0, top)
        ax.set_title(workload or title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="small")
    axes[0][0].set_ylabel("fraction of the floor (floor_us / us)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_path)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+",
                        help="bench/results JSON files (lists of rows); for a (workload, family) "
                             "in several files the last file's line is drawn")
    parser.add_argument("-o", "--output", help="PNG to write (default: the input with .png)")
    parser.add_argument("--title", help="plot title (default: the input's file name)")
    args = parser.parse_args(argv)
    series = {}
    try:
        for path in args.results:
            series.update(load_series(path))
    except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        print(f"plot_roofline: {e}", file=sys.stderr)
        return 1
    if not series:
        print(f"plot_roofline: {', '.join(args.results)} has no row with a floor_us",
              file=sys.stderr)
        return 1
    last = args.results[-1]
    out = args.output or (last[:-5] if last.endswith(".json") else last)
    out = out if out.endswith(".png") else out + ".png"
    title = args.title or " + ".join(path.rsplit("/", 1)[-1] for path in args.results)
    plot(series, title, out)
    print(f"plot_roofline: {sum(len(p) for p in series.values())} points, "
          f"{len(series)} lines -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
