"""Pruning benchmark: planning over large manifests, against listing Hive-style directories.

Run by hand:  .venv/bin/python bench/bench_pruning.py [--sizes 1000,10000,100000]
Prints a Markdown table; results go to docs/explanation/benchmarks.md with the command that
made them.

Planning needs only ``__manifest``, so the large manifests register partitions whose tables are
not written (the read measurement uses a namespace with 10,000 real partition tables).
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

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.manifest import edit as manifest_ops
from dagster_lance_partitioned.core.manifest.edit import ManifestEdit, build_transaction
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestStore
from dagster_lance_partitioned.core.partitioning.partition_spec import specs_from_metadata
from dagster_lance_partitioned.core.tuning import tuned

SCHEMA = pa.schema(
    [("id", pa.int64()), ("country", pa.utf8()), ("day", pa.date32()), ("value", pa.float64())]
)
DAY0 = dt.date(2020, 1, 1)
EQ = "country = 'c0007' AND day = DATE '2020-02-01'"
RANGE = "day >= DATE '2020-03-01' AND day < DATE '2020-03-08'"


def median_time(fn, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def register(root: str, n: int) -> None:
    """A namespace (identity country x identity day) with ``n`` registered partitions."""
    ns = PartitionedNamespace.create(
        root, SCHEMA, [PartitionField.identity("country"), PartitionField.identity("day")]
    )
    countries = [f"c{i:04d}" for i in range(n // 100)]
    upserts: dict[str, dict] = {}
    for ci, c in enumerate(countries):
        c_ns = f"v1$c{ci:015d}"
        upserts[c_ns] = {"object_type": "namespace", "metadata": "{}", "partition_field_country": c}
        for d in range(100):
            day = DAY0 + dt.timedelta(days=d)
            d_ns = f"{c_ns}$d{d:015d}"
            vals = {"partition_field_country": c, "partition_field_day": day}
            upserts[d_ns] = {"object_type": "namespace", "metadata": "{}", **vals}
            upserts[f"{d_ns}$dataset"] = {
                "object_type": "table",
                "metadata": "{}",
                "location": f"00000000_{d_ns}$dataset",
                "read_version": 1,
                **vals,
            }
    # Committed below the store: the tables are never written (planning reads only
    # __manifest), which the store's commit-time version check would refuse, and the store's
    # upkeep would index the manifest before the no-index measurement.
    ds = ManifestStore(ns.uri).dataset()
    snap = ManifestSnapshot(ds, specs_from_metadata(dict(ds.metadata)))
    edit = ManifestEdit(upserts=upserts, properties={"overwritten": "[]"})
    tx = build_transaction(snap, edit, None, {})
    lance.LanceDataset.commit(ds.uri, tx)


def hive_tree(root: str, n: int) -> None:
    for i in range(n):
        day = DAY0 + dt.timedelta(days=i % 100)
        os.makedirs(os.path.join(root, f"country=c{i // 100:04d}", f"day={day}", "data.lance"))


def list_hive(root: str) -> int:
    return sum(len(files) + len(dirs) for _, dirs, files in os.walk(root))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dlp-bench-prune-")
    print(
        "| partitions | plan eq, no index (ms) | plan range, no index (ms) | "
        "plan eq, indexed (ms) | plan range, indexed (ms) | list Hive dirs (ms) | "
        "eq vs listing |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.sizes.split(",")]:
        root = os.path.join(work, f"ns{n}")
        register(root, n)  # without indexes first

        def plan(flt: str, root: str = root) -> None:
            ns = PartitionedNamespace.open(root)  # fresh: the manifest is not loaded
            assert ns.plan_scan(flt).tasks

        eq, rng = median_time(lambda: plan(EQ)), median_time(lambda: plan(RANGE))
        store = ManifestStore(root)
        with tuned(index_min_rows=0):
            manifest_ops.upkeep(store.dataset())
        eq_i, rng_i = median_time(lambda: plan(EQ)), median_time(lambda: plan(RANGE))
        hive = os.path.join(work, f"hive{n}")
        hive_tree(hive, n)
        listing = median_time(lambda hive=hive: list_hive(hive), 3)
        print(
            f"| {n:,} | {eq * 1000:.1f} | {rng * 1000:.1f} | {eq_i * 1000:.1f} | "
            f"{rng_i * 1000:.1f} | {listing * 1000:.1f} | {listing / eq:.0f}x faster |"
        )

    with tuned(index_min_rows=100_000):  # the 10,000-row manifest read unindexed
        # reading 1 partition of 10,000 real ones vs the same rows as a standalone dataset
        rng_ = np.random.default_rng(3)
        n_rows = 1_000_000
        countries = np.array([f"c{i:04d}" for i in range(100)])
        days = np.array([DAY0 + dt.timedelta(days=i) for i in range(100)], dtype="datetime64[D]")
        table = pa.table(
            {
                "id": np.arange(n_rows),
                "country": countries[rng_.integers(0, 100, n_rows)],
                "day": pa.array(days[rng_.integers(0, 100, n_rows)], pa.date32()),
                "value": rng_.random(n_rows),
            }
        )
        ns = PartitionedNamespace.create(
            os.path.join(work, "real"),
            SCHEMA,
            [PartitionField.identity("country"), PartitionField.identity("day")],
        )
        t0 = time.perf_counter()
        result = ns.write(table)
        t_write = time.perf_counter() - t0
        assert len(result.partitions) == 10_000
        flt = "country = 'c0042' AND day = DATE '2020-02-11'"
        expected = ns.to_table(flt)
        alone = os.path.join(work, "alone")
        lance.write_dataset(expected, alone)
        t_one = median_time(lambda: PartitionedNamespace.open(ns.uri).to_table(flt))
        opened = PartitionedNamespace.open(ns.uri)
        t_open = median_time(lambda: opened.to_table(flt))
        t_alone = median_time(lambda: lance.dataset(alone).to_table())
        print()
        print(f"write of {n_rows:,} rows into 10,000 partitions: {t_write:.1f} s")
        print("| read | ours (ms) | standalone dataset (ms) | ratio |")
        print("|---|---|---|---|")
        print(
            f"| 1 of 10,000 partitions ({expected.num_rows} rows), open + plan + read | "
            f"{t_one * 1000:.1f} | {t_alone * 1000:.1f} | {t_one / t_alone:.1f} |"
        )
        print(
            f"| 1 of 10,000 partitions, plan + read on an open namespace | "
            f"{t_open * 1000:.1f} | {t_alone * 1000:.1f} | {t_open / t_alone:.1f} |"
        )
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
