"""Merge benchmark: ``merge_insert`` of 1% of the rows (half updates, half inserts) into a
namespace of 240 partitions (8 countries x 30 days) against Lance's ``merge_insert`` on one
dataset holding the same rows, in the same run.

Run by hand:  .venv/bin/python bench/bench_merge.py [--rows 5000000] [--repeat 3]
                  [--threads 8] [--spark local[2]]

Two namespace variants: ``on`` covering the partition source columns (id, country, day: only
the target partitions are read) and ``on`` = id alone (every partition's keys are read so moved
keys are found). Each repeat merges a different input (same inputs for every contender); the
contenders take turns within each repeat, so a slow moment of the machine hits all of them.
Each merge is timed from the call to the return: the namespace's (or dataset's) latest version
is opened inside the timing. Prints a Markdown table, with the process CPU seconds of the
median run.

``--spark MASTER`` also merges through Spark, into copies of the namespace: the distributed
``merge_dataframe`` (tasks merge per partition table, the driver commits once) against the
collect-to-driver path (``df.toArrow()`` + ``ns.merge_insert``), same inputs, the DataFrame
read from Parquet files."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.concurrency import CONCURRENCY_ENV

COUNTRIES = ["US", "FR", "DE", "JP", "BR", "IN", "GB", "CA"]
DAY0 = np.datetime64("2025-11-01")
FIELDS = [PartitionField.identity("country"), PartitionField.identity("day")]


def make_rows(ids: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """id int64, country (8 values), day (30 values), value double."""
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


def merge_input(
    base: pa.Table, fraction: float, next_id: int, seed: int, touch: int = 240
) -> pa.Table:
    """``fraction`` of ``base``'s row count: half existing rows with new values (same keys and
    partitions), half new rows; all in the first ``touch`` of the 240 partitions (country,
    day), so the same number of rows is spread over fewer partitions."""
    rng = np.random.default_rng(seed)
    n = int(base.num_rows * fraction)
    candidates = np.arange(base.num_rows)
    if touch < 240:
        country = np.array(COUNTRIES)
        codes = pc.index_in(base.column("country"), pa.array(country)).to_numpy()
        days = (base.column("day").to_numpy() - DAY0).astype(int)
        candidates = np.flatnonzero(codes * 30 + days < touch)
    picked = rng.choice(candidates, n // 2, replace=False)
    updates = base.take(pa.array(np.sort(picked)))
    updates = updates.set_column(3, "value", pa.array(rng.random(updates.num_rows)))
    inserts = make_rows(np.arange(next_id, next_id + n - n // 2), rng)
    if touch < 240:
        slot = rng.integers(0, touch, inserts.num_rows)
        inserts = inserts.set_column(1, "country", pa.array(np.array(COUNTRIES)[slot // 30]))
        day = (DAY0 + (slot % 30).astype("timedelta64[D]")).astype("datetime64[D]")
        inserts = inserts.set_column(2, "day", pa.array(day, pa.date32()))
    return pa.concat_tables([updates, inserts])


Merge = Callable[[pa.Table, int], tuple[int, int]]  # (input, repeat) -> (updated, inserted)


def timed(contenders: dict[str, Merge], inputs: list[pa.Table]) -> dict[str, list[tuple]]:
    """Each repeat, each contender in turn: (seconds, CPU seconds, updated, inserted)."""
    out: dict[str, list[tuple]] = {name: [] for name in contenders}
    for i, data in enumerate(inputs):
        for name, merge in contenders.items():
            t0, c0 = time.perf_counter(), time.process_time()
            updated, inserted = merge(data, i)
            out[name].append(
                (time.perf_counter() - t0, time.process_time() - c0, updated, inserted)
            )
    return out


def report(results: dict[str, list[tuple]], baseline: str | None) -> None:
    base = statistics.median(t for t, *_ in results[baseline]) if baseline else None
    print(
        "| contender | median s | min s | CPU s (median run) | vs baseline | "
        "updated / inserted (last) |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for name, runs in results.items():
        times = sorted(runs, key=lambda r: r[0])
        med = statistics.median(r[0] for r in runs)
        cpu = times[len(times) // 2][1]
        _, _, upd, ins = runs[-1]
        ratio = f"{med / base:.2f}x" if base else ""
        print(
            f"| {name} | {med:.2f} | {times[0][0]:.2f} | {cpu:.2f} | {ratio} | {upd:,} / {ins:,} |"
        )


def core_contenders(work: str, base: pa.Table) -> dict[str, Merge]:
    contenders: dict[str, Merge] = {}
    for label, on in (
        ("namespace, on=[id, country, day]", ["id", "country", "day"]),
        ("namespace, on=[id]", ["id"]),
    ):
        t0 = time.perf_counter()
        root = os.path.join(work, f"ns{len(contenders)}")
        ns = PartitionedNamespace.create(root, schema=base.schema, partition_fields=FIELDS)
        ns.write(base)
        print(
            f"namespace ({len(ns.inspect.partitions())} partitions) written in "
            f"{time.perf_counter() - t0:.1f}s"
        )

        def merge(data: pa.Table, _i: int, root: str = root, on: list[str] = on) -> tuple:
            r = PartitionedNamespace.open(root).merge_insert(data, on=on)
            return r.rows_updated, r.rows_inserted

        contenders[label] = merge
    t0 = time.perf_counter()
    plain = os.path.join(work, "plain")
    lance.write_dataset(base, plain)
    print(f"plain Lance dataset written in {time.perf_counter() - t0:.1f}s")

    def lance_merge(data: pa.Table, _i: int) -> tuple:
        ds = lance.dataset(plain)
        stats = (
            ds.merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(data)
        )
        return stats["num_updated_rows"], stats["num_inserted_rows"]

    contenders["Lance merge_insert, one dataset, on=id"] = lance_merge
    return contenders


def spark_contenders(
    work: str, base: pa.Table, master: str, warm: pa.Table, inputs: list[pa.Table]
) -> dict[str, Merge]:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from pyspark.sql import SparkSession

    from dagster_lance_partitioned.spark import register
    from dagster_lance_partitioned.spark.merge import merge_dataframe

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "8")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    files = []
    for i, data in enumerate([*inputs, warm]):
        path = os.path.join(work, f"input{i}.parquet")
        pq.write_table(data, path)
        files.append(path)
    contenders: dict[str, Merge] = {}
    for on in (["id", "country", "day"], ["id"]):
        for how in ("distributed", "collect"):
            root = os.path.join(work, f"spark-{how}-{len(on)}")
            ns = PartitionedNamespace.create(root, schema=base.schema, partition_fields=FIELDS)
            ns.write(base)

            def merge(_data: pa.Table, i: int, root: str = root, on: list = on, how: str = how):
                df = spark.read.parquet(files[i])
                if how == "distributed":
                    r = merge_dataframe(df, root, on)
                else:
                    r = PartitionedNamespace.open(root).merge_insert(df.toArrow(), on=on)
                return r.rows_updated, r.rows_inserted

            merge(warm, -1)  # warm-up (the last file): Python workers started, classes loaded
            name = (
                "merge_dataframe, distributed"
                if how == "distributed"
                else ("toArrow() + ns.merge_insert on the driver")
            )
            contenders[f"Spark {master}: {name}, on=[{', '.join(on)}]"] = merge
    return contenders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=None, help=f"tables at once (sets {CONCURRENCY_ENV})"
    )
    parser.add_argument("--spark", metavar="MASTER", default=None)
    parser.add_argument("--touch", type=int, default=240, help="partitions the inputs touch")
    args = parser.parse_args()
    if args.threads is not None:
        os.environ[CONCURRENCY_ENV] = str(args.threads)
    work = tempfile.mkdtemp(prefix="dlp-bench-merge-")
    try:
        base = make_rows(np.arange(args.rows), np.random.default_rng(7))
        inputs = [
            merge_input(base, args.fraction, args.rows + i * args.rows, 100 + i, args.touch)
            for i in range(args.repeat)
        ]
        n = inputs[0].num_rows
        header = (
            f"merge of {n:,} rows ({args.fraction:.0%} of {args.rows:,}) into {args.touch} of "
            "240 partitions, "
            f"median of {args.repeat}, {os.cpu_count()} CPUs, {args.threads} table threads"
        )
        if args.spark:
            spark_inputs = [
                merge_input(base, args.fraction, args.rows * 100 + i * args.rows, seed=900 + i)
                for i in range(args.repeat + 1)
            ]
            contenders = spark_contenders(work, base, args.spark, spark_inputs[0], spark_inputs[1:])
            results = timed(contenders, spark_inputs[1:])
            print()
            print(header)
            print()
            report(results, None)
            return
        results = timed(core_contenders(work, base), inputs)
        print()
        print(header)
        print()
        report(results, "Lance merge_insert, one dataset, on=id")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
