"""Spark benchmark: distributed write and pruned read of a partitioned namespace against Spark's
own partitioned Parquet, and against collecting to the driver + a core write.

Run by hand:  .venv/bin/python bench/bench_spark.py [--rows 5000000] [--repeat 3] [--slices 8]
Prints a Markdown table; results go to docs/benchmarks.md with the command that made them.

Writes (240 partitions = 8 countries x 30 days, from a cached DataFrame of ``--slices`` Spark
partitions):
  (a) ours: ``df.write.format("lance_partitioned")`` (tasks stage fragments, one manifest commit),
      and ``write_dataframe`` (rows first hash-partitioned by country and day);
  (b) Spark's native ``df.write.partitionBy("country", "day").parquet(...)``;
  (c) ``df.toArrow()`` on the driver + ``PartitionedNamespace.write``.
Reads (``sum(value)`` and ``count(*)``, so every row is read):
  one partition through the pushed-down filter (pruned) vs the full scan vs Spark reading the
  Parquet tree with the same filter (partition pruning by directory).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_core import make_table
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.spark import FORMAT, register, write_dataframe

FILTER = "country = 'US' AND day = DATE '2025-11-15'"


def timed(fn: Callable[[], Any], repeat: int, reset: Callable[[], None] | None = None):
    """Median seconds of ``repeat`` runs after one untimed warm-up run (Python workers
    started, JIT warm), and the last result."""
    times, out = [], None
    for i in range(repeat + 1):
        if reset is not None:
            reset()
        t0 = time.perf_counter()
        out = fn()
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def session(cores: str, memory: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("dlp-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "65536")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--slices", type=int, default=8, help="Spark partitions of the input")
    ap.add_argument("--cores", default="*")
    ap.add_argument("--memory", default="6g")
    args = ap.parse_args()

    table = make_table(args.rows)
    spark = session(args.cores, args.memory)
    # Spark reads a naive Arrow timestamp as TIMESTAMP (an instant): back to wall-clock time,
    # as the namespace stores it (session zone UTC, so the values are unchanged)
    df = (
        spark.createDataFrame(table)
        .withColumn("ts", F.col("ts").cast("timestamp_ntz"))
        .repartition(args.slices)
        .cache()
    )
    assert df.count() == args.rows
    work = tempfile.mkdtemp(prefix="dlp-bench-spark-")
    fields = [PartitionField.identity("country"), PartitionField.identity("day")]

    def path(name: str) -> str:
        return os.path.join(work, name)

    def clear(name: str) -> Callable[[], None]:
        def reset() -> None:
            shutil.rmtree(path(name), ignore_errors=True)
            if name != "parquet":
                PartitionedNamespace.create(path(name), table.schema, fields)

        return reset

    rows: list[tuple[str, float]] = []

    def ours_raw() -> None:
        df.write.format(FORMAT).mode("append").save(path("ours"))

    t, _ = timed(ours_raw, args.repeat, clear("ours"))
    ns = PartitionedNamespace.open(path("ours"))
    assert len(ns.partitions()) == 240 and ns.count_rows() == args.rows
    rows.append(("(a) write: `df.write.format('lance_partitioned')`", t))

    def ours_clustered() -> None:
        result = write_dataframe(df, path("clustered"))
        assert result is not None and result.rows_written == args.rows

    t, _ = timed(ours_clustered, args.repeat, clear("clustered"))
    rows.append(("(a) write: `write_dataframe` (hash-partitioned first)", t))

    def native() -> None:
        df.write.mode("overwrite").partitionBy("country", "day").parquet(path("parquet"))

    t, _ = timed(native, args.repeat, clear("parquet"))
    rows.append(("(b) write: Spark `partitionBy('country', 'day').parquet`", t))

    def driver() -> None:
        PartitionedNamespace.open(path("driver")).write(df.toArrow())

    t, _ = timed(driver, args.repeat, clear("driver"))
    rows.append(("(c) write: `df.toArrow()` + core write on the driver", t))

    fragments = sum(
        len(os.listdir(os.path.join(path("ours"), p["location"], "data"))) for p in ns.partitions()
    )
    clustered = PartitionedNamespace.open(path("clustered"))
    fragments_clustered = sum(
        len(os.listdir(os.path.join(clustered.uri, p["location"], "data")))
        for p in clustered.partitions()
    )

    def agg(frame) -> tuple[int, float]:
        row = frame.agg(F.count(F.lit(1)).alias("n"), F.sum("value").alias("s")).collect()[0]
        return row.n, row.s

    ours = spark.read.format(FORMAT)
    one = len(ns.plan_scan(FILTER).tasks)
    t_one, (n_one, _) = timed(lambda: agg(ours.load(path("ours")).where(FILTER)), args.repeat)
    t_full, (n_full, _) = timed(lambda: agg(ours.load(path("ours"))), args.repeat)
    t_pq, (n_pq, _) = timed(
        lambda: agg(spark.read.parquet(path("parquet")).where(FILTER)), args.repeat
    )
    t_pq_full, _ = timed(lambda: agg(spark.read.parquet(path("parquet"))), args.repeat)
    assert n_one == n_pq and n_full == args.rows, (n_one, n_pq, n_full)
    rows.append((f"read: ours, `where` on 1 partition ({n_one:,} rows, {one} table)", t_one))
    rows.append(("read: ours, full scan", t_full))
    rows.append(("read: Spark Parquet, same `where` (directory pruning)", t_pq))
    rows.append(("read: Spark Parquet, full scan", t_pq_full))

    print(f"\n{args.rows:,} rows, 240 partitions, {args.slices} slices, median of {args.repeat}")
    print(f"fragments written: raw {fragments}, clustered {fragments_clustered}\n")
    print("| measurement | seconds |")
    print("|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} |")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
