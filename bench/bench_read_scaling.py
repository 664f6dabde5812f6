"""Reading one partition and reading all of them, as the number of partitions grows, against
plain Lance datasets in the same run (local disk).

For each N (1,000 / 10,000 / 100,000 partitions of 100 rows; identity(country) x identity(day)) it
builds the namespace once (kept in ``--workdir``), a standalone dataset holding the one partition
read, and one dataset holding every row, then reports medians of: open + plan + read one
partition, plan + read on an open namespace, open alone, the standalone dataset's read, a full
read and the single dataset's full read, with the ratios.

    python bench/bench_read_scaling.py --sizes 1000,10000,100000 --workdir /tmp/dlp_read

Results: docs/explanation/benchmarks.md ("Local disk: the read path")."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time
from collections.abc import Callable

import lance
import numpy as np
import pyarrow as pa

from dagster_lance_partitioned import PartitionedNamespace, PartitionField

SCHEMA = pa.schema(
    [("id", pa.int64()), ("country", pa.utf8()), ("day", pa.date32()), ("value", pa.float64())]
)
DAY0 = dt.date(2020, 1, 1)
FILTER = "country = 'c0004' AND day = DATE '2020-02-11'"


def build(n: int, base: str) -> None:
    """The namespace of ``n`` partitions and the two plain datasets (once per ``base``)."""
    root = os.path.join(base, f"ns{n}")
    if os.path.exists(root):
        return
    countries = np.array([f"c{i:04d}" for i in range(n // 100)])
    days = np.array([DAY0 + dt.timedelta(days=i) for i in range(100)], dtype="datetime64[D]")
    ci = np.repeat(np.arange(len(countries)), 100 * 100)
    di = np.tile(np.repeat(np.arange(100), 100), len(countries))
    table = pa.table(
        {
            "id": np.arange(100 * n),
            "country": countries[ci],
            "day": pa.array(days[di], pa.date32()),
            "value": np.random.default_rng(3).random(100 * n),
        }
    )
    fields = [PartitionField.identity("country"), PartitionField.identity("day")]
    ns = PartitionedNamespace.create(root, SCHEMA, fields)
    started = time.perf_counter()
    ns.write(table)
    print(f"built {n} partitions in {time.perf_counter() - started:.1f} s", flush=True)
    lance.write_dataset(ns.to_table(FILTER), os.path.join(base, f"alone{n}"))
    lance.write_dataset(table, os.path.join(base, f"single{n}"))


def median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(n: int, base: str, repeat: int) -> str:
    """One Markdown row for ``n`` partitions."""
    root = os.path.join(base, f"ns{n}")
    alone, single = os.path.join(base, f"alone{n}"), os.path.join(base, f"single{n}")
    one = median(lambda: PartitionedNamespace.open(root).to_table(FILTER), repeat)
    ns = PartitionedNamespace.open(root)
    planned = median(lambda: ns.to_table(FILTER), repeat)
    opened = median(lambda: PartitionedNamespace.open(root), repeat)
    base_one = median(lambda: lance.dataset(alone).to_table(), repeat)
    full = median(lambda: PartitionedNamespace.open(root).to_table(), max(3, repeat // 5))
    base_full = median(lambda: lance.dataset(single).to_table(), max(3, repeat // 5))
    ms = 1e3
    return (
        f"| {n:,} | {one * ms:.2f} | {planned * ms:.2f} | {opened * ms:.2f} | "
        f"{base_one * ms:.2f} | {one / base_one:.1f}x | {full * ms:.0f} | {base_full * ms:.0f} | "
        f"{full / base_full:.2f}x |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--workdir", default="/tmp/dlp_read")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    os.makedirs(args.workdir, exist_ok=True)
    for n in sizes:
        build(n, args.workdir)
    print(
        "| partitions | open + plan + read one, ms | plan + read one (open), ms | open, ms | "
        "one standalone dataset, ms | ratio | full read, ms | one dataset, ms | ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        print(measure(n, args.workdir, args.repeat), flush=True)


if __name__ == "__main__":
    main()
