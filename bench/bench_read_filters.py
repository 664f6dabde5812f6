"""Reads that cost what they touch: filters on non-partition columns over many partitions,
against one Lance dataset holding the same rows and a Delta Lake table (deltalake's pyarrow
dataset) partitioned the same way, in the same run, on local disk.

1. ``price < 5`` over ``--rows`` rows in 150 and in 1,000 partitions (identity on ``tenant``):
   random prices, so table statistics cannot prune; warm (the namespace open and read before)
   and cold (every cache of the process cleared, the namespace / table opened again).
2. A column correlated with the partitions, under a daily partitioning (identity on ``day``):
   an increasing ``id`` and an event time ``ts`` within the day; a range of 5 % of the rows:
   how many tables planning prunes (by statistics) and the read against Delta's.
3. ``count_rows()`` of a namespace of 10,000 partitions, answered from the manifest, against
   Delta's ``count()``.

Systems take turns query by query; medians of ``--repeat``. Run by hand (Markdown on stdout):

    .venv/bin/python bench/bench_read_filters.py [--rows 300000] [--repeat 15]

Results: docs/explanation/benchmarks.md ("Reads that cost what they touch")."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.read.scan import clear_caches

DAY0 = dt.date(2024, 1, 1)


def by_tenant(rows: int, partitions: int) -> pa.Table:
    rng = np.random.default_rng(7)
    tenant = np.array([f"t{i:04d}" for i in range(partitions)])[rng.integers(0, partitions, rows)]
    return pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "tenant": tenant,
            "price": rng.random(rows) * 100,
            "qty": rng.integers(0, 1000, rows),
        }
    )


def by_day(rows: int, days: int) -> pa.Table:
    rng = np.random.default_rng(11)
    ids = np.arange(rows, dtype=np.int64)
    day = ids * days // rows  # increasing ids, in day order
    seconds = rng.integers(0, 86_400, rows)
    base = np.datetime64(DAY0.isoformat(), "s")
    ts = base + (day * 86_400 + seconds).astype("timedelta64[s]")
    return pa.table(
        {
            "id": ids,
            "day": pa.array(base.astype("datetime64[D]") + day.astype("timedelta64[D]")),
            "ts": pa.array(ts.astype("datetime64[us]")),
            "price": rng.random(rows) * 100,
        }
    )


def median(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


class Lake:
    """The same rows as a namespace, one Lance dataset and a Delta table."""

    def __init__(self, base: str, name: str, table: pa.Table, key: str) -> None:
        self.ns_uri = os.path.join(base, f"{name}-ns")
        self.single_uri = os.path.join(base, f"{name}-single")
        self.delta_uri = os.path.join(base, f"{name}-delta")
        ns = PartitionedNamespace.create(self.ns_uri, table.schema, [PartitionField.identity(key)])
        ns.write(table)
        lance.write_dataset(table, self.single_uri)
        write_deltalake(self.delta_uri, table, partition_by=[key])
        self.ns = PartitionedNamespace.open(self.ns_uri)
        self.single = lance.dataset(self.single_uri)
        self.delta = DeltaTable(self.delta_uri).to_pyarrow_dataset()

    def ours(self, flt: str) -> int:
        return self.ns.to_table(flt).num_rows

    def ours_cold(self, flt: str) -> int:
        clear_caches()
        return PartitionedNamespace.open(self.ns_uri).to_table(flt).num_rows

    def lance(self, flt: str) -> int:
        return self.single.to_table(filter=flt).num_rows

    def delta_read(self, expr: pc.Expression) -> int:
        return self.delta.to_table(filter=expr).num_rows

    def delta_cold(self, expr: pc.Expression) -> int:
        return DeltaTable(self.delta_uri).to_pyarrow_dataset().to_table(filter=expr).num_rows


def turns(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Medians of ``fns`` taking turns (``repeat`` rounds after one warm-up)."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    base = args.workdir or tempfile.mkdtemp(prefix="dlp-readf-")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    print(
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, rows {args.rows}, repeat {args.repeat}, "
        f"load {os.getloadavg()[0]:.2f}\n"
    )
    print("### A non-partition filter statistics cannot prune: `price < 5`\n")
    print(
        "| partitions | ours warm | ours cold | one Lance dataset | Delta warm | Delta cold "
        "| warm / Delta | warm / Lance | cold / Delta cold |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for partitions in (150, 1000):
        lake = Lake(base, f"t{partitions}", by_tenant(args.rows, partitions), "tenant")
        expr = pc.field("price") < 5
        # cold reads clear this process's caches: they take turns apart from the warm ones
        got = turns(
            {
                "ours": lambda lake=lake: lake.ours("price < 5"),
                "lance": lambda lake=lake: lake.lance("price < 5"),
                "delta": lambda lake=lake, expr=expr: lake.delta_read(expr),
            },
            args.repeat,
        )
        got |= turns(
            {
                "cold": lambda lake=lake: lake.ours_cold("price < 5"),
                "delta_cold": lambda lake=lake, expr=expr: lake.delta_cold(expr),
            },
            args.repeat,
        )
        assert lake.ours("price < 5") == lake.lance("price < 5") == lake.delta_read(expr)
        ms = {k: v * 1e3 for k, v in got.items()}
        print(
            f"| {partitions} | {ms['ours']:.1f} | {ms['cold']:.1f} | {ms['lance']:.1f} "
            f"| {ms['delta']:.1f} | {ms['delta_cold']:.1f} | {got['ours'] / got['delta']:.2f} "
            f"| {got['ours'] / got['lance']:.2f} | {got['cold'] / got['delta_cold']:.2f} |"
        )
    print("\n### A column correlated with a daily partitioning (365 days), 5 % of the rows\n")
    print(
        "| filter | tables read / total | ours warm | Delta warm | ours / Delta "
        "| one Lance dataset |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    lake = Lake(base, "days", by_day(args.rows, 365), "day")
    lo, hi = int(args.rows * 0.40), int(args.rows * 0.45)
    start = dt.datetime.combine(DAY0, dt.time()) + dt.timedelta(days=146)
    cases = [
        (f"id >= {lo} AND id < {hi}", (pc.field("id") >= lo) & (pc.field("id") < hi)),
        (
            f"ts >= TIMESTAMP '{start:%Y-%m-%d %H:%M:%S}' AND "
            f"ts < TIMESTAMP '{start + dt.timedelta(days=18):%Y-%m-%d %H:%M:%S}'",
            (pc.field("ts") >= pa.scalar(start, pa.timestamp("us")))
            & (pc.field("ts") < pa.scalar(start + dt.timedelta(days=18), pa.timestamp("us"))),
        ),
    ]
    for flt, expr in cases:
        plan = lake.ns.plan_scan(flt)
        got = turns(
            {
                "ours": lambda flt=flt: lake.ours(flt),
                "delta": lambda expr=expr: lake.delta_read(expr),
                "lance": lambda flt=flt: lake.lance(flt),
            },
            args.repeat,
        )
        assert lake.ours(flt) == lake.delta_read(expr) == lake.lance(flt)
        print(
            f"| `{flt}` | {len(plan.tasks)} / {plan.total_partitions} | {got['ours'] * 1e3:.1f} "
            f"| {got['delta'] * 1e3:.1f} | {got['ours'] / got['delta']:.2f} "
            f"| {got['lance'] * 1e3:.1f} |"
        )
    print("\n### `count_rows()` of 10,000 partitions\n")
    many = Lake(base, "many", by_tenant(200_000, 10_000), "tenant")
    got = turns(
        {
            "ours": lambda: many.ns.count_rows(),
            "delta": lambda: DeltaTable(many.delta_uri).to_pyarrow_dataset().count_rows(),
        },
        args.repeat,
    )
    got |= turns(
        {"cold": lambda: (clear_caches(), PartitionedNamespace.open(many.ns_uri).count_rows())},
        args.repeat,
    )
    print("| ours warm (ms) | ours cold (ms) | Delta (ms) |\n|---:|---:|---:|")
    print(f"| {got['ours'] * 1e3:.1f} | {got['cold'] * 1e3:.1f} | {got['delta'] * 1e3:.1f} |")
    print(f"\n(load at the end {os.getloadavg()[0]:.2f})")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
