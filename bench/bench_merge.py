"""Merge benchmark: ``merge_insert`` of 1% of the rows (half updates, half inserts) into a
namespace of 240 partitions (8 countries x 30 days) against Lance's ``merge_insert`` on one
dataset holding the same rows, in the same run.

Run by hand:  .venv/bin/python bench/bench_merge.py [--rows 5000000] [--repeat 3]

Two namespace variants: ``on`` covering the partition source columns (id, country, day: only
the target partitions are read) and ``on`` = id alone (every partition is searched so moved
keys are found). Each repeat merges a different input (same inputs for every contender).
Prints a Markdown table."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import lance
import numpy as np
import pyarrow as pa

from dagster_lance_partitioned import PartitionedNamespace, PartitionField

COUNTRIES = ["US", "FR", "DE", "JP", "BR", "IN", "GB", "CA"]
DAY0 = np.datetime64("2025-11-01")


def make_rows(ids: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """id int64, country (8 values), day (30 values), value double, payload string."""
    n = len(ids)
    days = DAY0 + rng.integers(0, 30, n).astype("timedelta64[D]")
    return pa.table(
        {
            "id": pa.array(ids.astype(np.int64)),
            "country": pa.array(np.array(COUNTRIES)[rng.integers(0, 8, n)]),
            "day": pa.array(days.astype("datetime64[D]"), pa.date32()),
            "value": pa.array(rng.random(n)),
        }
    )


def merge_input(base: pa.Table, fraction: float, next_id: int, seed: int) -> pa.Table:
    """``fraction`` of ``base``'s row count: half existing rows with new values (same keys and
    partitions), half new rows."""
    rng = np.random.default_rng(seed)
    n = int(base.num_rows * fraction)
    picked = rng.choice(base.num_rows, n // 2, replace=False)
    updates = base.take(pa.array(np.sort(picked)))
    updates = updates.set_column(3, "value", pa.array(rng.random(updates.num_rows)))
    inserts = make_rows(np.arange(next_id, next_id + n - n // 2), rng)
    return pa.concat_tables([updates, inserts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dlp-bench-merge-")
    try:
        base = make_rows(np.arange(args.rows), np.random.default_rng(7))
        inputs = [
            merge_input(base, args.fraction, args.rows + i * args.rows, seed=100 + i)
            for i in range(args.repeat)
        ]
        fields = [PartitionField.identity("country"), PartitionField.identity("day")]
        results: dict[str, list[float]] = {}
        counts: dict[str, tuple[int, int]] = {}

        t0 = time.perf_counter()
        lance.write_dataset(base, os.path.join(work, "plain"))
        took = time.perf_counter() - t0
        print(f"plain Lance dataset of {args.rows:,} rows written in {took:.1f}s")
        for label, on in (
            ("namespace, on=[id, country, day]", ["id", "country", "day"]),
            ("namespace, on=[id]", ["id"]),
        ):
            t0 = time.perf_counter()
            ns = PartitionedNamespace.create(
                os.path.join(work, f"ns{len(results)}"), schema=base.schema, partition_fields=fields
            )
            ns.write(base)
            print(
                f"namespace ({len(ns.partitions())} partitions) written in "
                f"{time.perf_counter() - t0:.1f}s"
            )
            for data in inputs:
                t0 = time.perf_counter()
                r = ns.merge_insert(data, on=on)
                results.setdefault(label, []).append(time.perf_counter() - t0)
                counts[label] = (r.rows_updated, r.rows_inserted)
        label = "Lance merge_insert, one dataset, on=id"
        for data in inputs:
            ds = lance.dataset(os.path.join(work, "plain"))
            t0 = time.perf_counter()
            stats = (
                ds.merge_insert("id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(data)
            )
            results.setdefault(label, []).append(time.perf_counter() - t0)
            counts[label] = (stats["num_updated_rows"], stats["num_inserted_rows"])

        baseline = statistics.median(results[label])
        n = inputs[0].num_rows
        print()
        print(
            f"merge of {n:,} rows ({args.fraction:.0%} of {args.rows:,}), "
            f"median of {args.repeat}, {os.cpu_count()} CPUs"
        )
        print()
        print("| contender | median s | min s | vs Lance | updated / inserted (last) |")
        print("|---|---:|---:|---:|---|")
        for name, times in results.items():
            med = statistics.median(times)
            upd, ins = counts[name]
            print(
                f"| {name} | {med:.2f} | {min(times):.2f} | {med / baseline:.2f}x | "
                f"{upd:,} / {ins:,} |"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
