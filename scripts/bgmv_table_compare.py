#!/usr/bin/env python3
"""Compares two `bench_bgmv` tables row by row (the second against the first).

    scripts/bgmv_table_compare.py BASE.log OTHER.log [--rows=PCT]

Rows are grouped by the plan kind of the base table (grouped by rank, per-route at T <= 8,
per-route above, specialized); each group prints its row count and the geomean and range of
OTHER / BASE. --rows=PCT also lists every row that moved by more than PCT %.
Lines that are not table rows (headers, the summary) are ignored, so whole bench logs work.
When both tables carry `bench_bgmv --digest` lines, the rows whose y or shrink-row digests differ
are counted and listed (equal digests: the two trees' plans gave the same bits).
"""
import math
import re
import sys

ROW = re.compile(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|(.*?)\|\s*([\d.]+)")
DIGEST = re.compile(r"digest((?:\s+\d+){6})\s+y=([0-9a-f]+)\s+rows=([0-9a-f]+)")


def load_digests(path):
    """{(H, R, T, k, L, E): (y digest, rows digest)} of a `bench_bgmv --digest` log."""
    digests = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = DIGEST.match(line)
            if m:
                digests[tuple(int(v) for v in m.group(1).split())] = (m.group(2), m.group(3))
    return digests


def load(path):
    """{(H, R, T, k, L, E): (plan label, µs)} of a bench_bgmv table."""
    rows = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line)
            if m:
                rows[tuple(int(v) for v in m.groups()[:6])] = (m.group(7).strip(), float(m.group(8)))
    return rows


def kind(shape, label):
    rank, tokens = shape[1], shape[2]
    if "grouped" in label:
        return f"grouped r{rank}"
    if "spec" in label:
        return "specialized"
    return "per-route T<=8" if tokens <= 8 else "per-route T>8"


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--rows=")]
    listed = [float(a.split("=", 1)[1]) for a in argv[1:] if a.startswith("--rows=")]
    if len(args) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    base, other = load(args[0]), load(args[1])
    groups = {}
    for shape, (label, us) in sorted(base.items()):
        if shape not in other or us <= 0:
            continue
        ratio = other[shape][1] / us
        groups.setdefault(kind(shape, label), []).append(ratio)
        if listed and abs(ratio - 1.0) * 100.0 > listed[0]:
            print(" ".join(map(str, shape)), label, us, "->", other[shape][1], f"{ratio:.3f}")
    for name, ratios in sorted(groups.items()):
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"{name:18s} {len(ratios):4d} rows  geomean {geomean:.3f}  "
              f"range {min(ratios):.3f}-{max(ratios):.3f}")
    base_digests, other_digests = load_digests(args[0]), load_digests(args[1])
    common = sorted(set(base_digests) & set(other_digests))
    if common:
        differ = [shape for shape in common if base_digests[shape] != other_digests[shape]]
        print(f"digests: {len(common) - len(differ)} of {len(common)} rows bitwise equal")
        for shape in differ:
            print("  differs:", " ".join(map(str, shape)), base.get(shape, ("?",))[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
