"""Core benchmark: partitioned write and single-partition read against plain Lance baselines.

Run by hand:  .venv/bin/python bench/bench_core.py [--rows 5000000] [--repeat 3]
Prints a Markdown table; results go to docs/explanation/benchmarks.md with the command that
made them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import tempfile
import time

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_lance_partitioned import PartitionedNamespace, PartitionField

COUNTRIES = ["US", "FR", "DE", "JP", "BR", "IN", "GB", "CA"]


def make_table(rows: int, seed: int = 7) -> pa.Table:
    """id int64, ts timestamp, country (8 values), day (30 values), value double."""
    rng = np.random.default_rng(seed)
    day0 = np.datetime64("2025-11-01")
    days = day0 + rng.integers(0, 30, rows).astype("timedelta64[D]")
    ts = days.astype("datetime64[us]") + rng.integers(0, 86_400_000_000, rows).astype(
        "timedelta64[us]"
    )
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "ts": pa.array(ts, pa.timestamp("us")),
            "country": pa.array(np.array(COUNTRIES)[rng.integers(0, 8, rows)]),
            "day": pa.array(days.astype("datetime64[D]"), pa.date32()),
            "value": pa.array(rng.random(rows)),
        }
    )


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    table = make_table(args.rows)
    work = tempfile.mkdtemp(prefix="dlp-bench-")
    counter = iter(range(10_000))

    def fresh(name: str) -> str:
        path = os.path.join(work, f"{name}-{next(counter)}")
        return path

    def lance_single() -> str:
        path = fresh("single")
        lance.write_dataset(table, path)
        return path

    def partitioned() -> PartitionedNamespace:
        ns = PartitionedNamespace.create(
            fresh("ns"),
            table.schema,
            [PartitionField.identity("country"), PartitionField.identity("day")],
        )
        result = ns.write(table)
        assert len(result.partitions) == 240, len(result.partitions)
        return ns

    # interleaved pairs, so machine noise hits both sides alike; report the median pair ratio
    singles, parts, ratios = [], [], []
    ns = None
    for _ in range(args.repeat):
        t_s, _ = timed(lance_single, 1)
        t_p, ns = timed(partitioned, 1)
        singles.append(t_s)
        parts.append(t_p)
        ratios.append(t_p / t_s)
    t_single, t_part = statistics.median(singles), statistics.median(parts)
    assert ns is not None

    # one partition of 240 vs the same rows as a standalone dataset
    day = dt.date(2025, 11, 15)
    flt = f"country = 'FR' AND day = DATE '{day.isoformat()}'"
    mask = pc.and_(pc.equal(table["country"], "FR"), pc.equal(table["day"], pa.scalar(day)))
    rows = table.filter(mask)
    standalone = fresh("standalone")
    lance.write_dataset(rows, standalone)
    read_repeat = max(args.repeat, 5)
    t_one, got = timed(lambda: ns.to_table(filter=flt), read_repeat)
    t_alone, _ = timed(lambda: lance.dataset(standalone).to_table(), read_repeat)
    assert got.num_rows == rows.num_rows
    t_plan, plan = timed(lambda: ns.plan_scan(flt), read_repeat)
    assert len(plan.tasks) == 1
    t_full, full = timed(lambda: ns.to_table(), args.repeat)
    single_path = lance_single()
    t_full_single, _ = timed(lambda: lance.dataset(single_path).to_table(), args.repeat)
    assert full.num_rows == args.rows

    print(f"rows={args.rows:,} partitions=240 repeat={args.repeat} (median seconds)\n")
    print("| measurement | ours (s) | baseline (s) | ratio |")
    print("|---|---|---|---|")
    print(
        f"| write 240 partitions vs `lance.write_dataset` (1 dataset) | {t_part:.3f} | "
        f"{t_single:.3f} | {statistics.median(ratios):.2f} "
        f"(pairs {min(ratios):.2f}-{max(ratios):.2f}) |"
    )
    print(
        f"| `to_table` 1 of 240 partitions ({rows.num_rows:,} rows) vs standalone dataset | "
        f"{t_one:.4f} | {t_alone:.4f} | {t_one / t_alone:.2f} |"
    )
    print(f"| `plan_scan` of that filter (manifest of 240) | {t_plan:.4f} | | |")
    print(
        f"| full `to_table` vs single dataset  | {t_full:.3f} | {t_full_single:.3f} "
        f"| {t_full / t_full_single:.2f} |"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
