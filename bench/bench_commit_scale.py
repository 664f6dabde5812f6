"""How manifest commits and plans scale with the number of registered partitions.

Run by hand, with nothing else running::

    python bench/bench_commit_scale.py                      # 1k, 10k, 100k partitions
    python bench/bench_commit_scale.py --sizes 1000 10000   # smaller
    python bench/bench_commit_scale.py --concurrency        # + 8 writer processes (10k)
    python bench/bench_commit_scale.py --small-commits 10000

Namespaces of N partitions are built synthetically: a real namespace with a pool of real
partition tables, whose ``__manifest`` is then given N partition namespaces and tables (the
tables share the pool's directories, each pinned at a real version). Every measured operation
goes through the public API. Results are medians of ``--repeat`` runs; what matters is the
ratio of a size to the smallest size in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import write_fragments

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.manifest.layout import random_name

try:
    from dagster_lance_partitioned.core.manifest.edit import upkeep
except ImportError:  # before row-level commits (baseline runs of older commits)

    def upkeep(ds: lance.LanceDataset) -> lance.LanceDataset:
        return ds


SCHEMA = pa.schema([pa.field("key", pa.int64()), pa.field("value", pa.float64())])
POOL = 64  # real partition tables shared by the synthetic partitions


def build(root: str, n: int) -> PartitionedNamespace:
    """A namespace partitioned by ``key`` with partitions 0..n-1."""
    ns = PartitionedNamespace.create(root, SCHEMA, [PartitionField.identity("key")])
    pool = min(POOL, n)
    ns.write(pa.table({"key": list(range(pool)), "value": [1.0] * pool}, schema=SCHEMA))
    if n > pool:
        manifest = lance.dataset(os.path.join(root, "__manifest"))
        rows = manifest.to_table()
        tables = [r for r in rows.to_pylist() if r["object_type"] == "table"]
        extra = []
        for i in range(pool, n):
            t = tables[i % pool]
            ns_id = f"v1${random_name()}"
            base = {c: None for c in rows.column_names}
            extra.append(
                {
                    **base,
                    "object_id": ns_id,
                    "object_type": "namespace",
                    "metadata": "{}",
                    "partition_field_key": i,
                }
            )
            extra.append(
                {
                    **base,
                    "object_id": f"{ns_id}$dataset",
                    "object_type": "table",
                    "location": t["location"],
                    "metadata": "{}",
                    "read_version": t["read_version"],
                    "partition_field_key": i,
                }
            )
        table = pa.concat_tables([rows, pa.Table.from_pylist(extra, schema=rows.schema)])
        frags = write_fragments(table, manifest.uri, schema=table.schema, mode="overwrite")
        ds = lance.LanceDataset.commit(
            manifest.uri,
            LanceOperation.Overwrite(table.schema, frags),
            read_version=manifest.version,
        )
        upkeep(ds)
    return PartitionedNamespace.open(root)


def timed(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def one_row(key: int) -> pa.Table:
    return pa.table({"key": [key], "value": [2.0]}, schema=SCHEMA)


def measure_size(workdir: str, n: int, repeat: int) -> dict:
    root = os.path.join(workdir, f"ns{n}")
    t0 = time.perf_counter()
    ns = build(root, n)
    built = time.perf_counter() - t0
    fresh = iter(range(n + 1, n + 10_000))
    out = {
        "partitions": n,
        "build_s": round(built, 1),
        "append_existing_ms": 1000 * timed(lambda: ns.write(one_row(n // 2)), repeat),
        "append_new_ms": 1000 * timed(lambda: ns.write(one_row(next(fresh))), repeat),
    }
    ns = PartitionedNamespace.open(root)
    out["plan_eq_ms"] = 1000 * timed(lambda: ns.plan_scan(f"key = {n // 3}"), repeat)
    out["read_one_ms"] = 1000 * timed(lambda: ns.to_table(filter=f"key = {n // 3}"), repeat)
    return out


# -- concurrency --------------------------------------------------------------------------------
_WRITER = """
import json, sys, time
import pyarrow as pa
from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import CommitConflictError
root, me, count, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
start = float(sys.argv[5])
schema = pa.schema([pa.field("key", pa.int64()), pa.field("value", pa.float64())])
ns = PartitionedNamespace.open(root)
while time.time() < start:
    time.sleep(0.001)
out = []
for i in range(count):
    key = 7 if mode == "overwrite_partitions" else 1_000_000 + me * 1000 + i % 5
    t0 = time.perf_counter()
    try:
        rows = {"key": [key] * 3, "value": [float(me * 1000 + i)] * 3}
        ns.write(pa.table(rows, schema=schema), mode=mode)
        out.append(["ok", time.perf_counter() - t0])
    except CommitConflictError:
        out.append(["conflict", time.perf_counter() - t0])
print(json.dumps(out))
"""


def run_writers(root: str, writers: int, count: int, mode: str) -> tuple[list, float]:
    start = time.time() + 3
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, root, str(i), str(count), mode, str(start)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    return results, time.time() - start


def concurrency(workdir: str, n: int, writers: int, count: int) -> dict:
    root = os.path.join(workdir, f"conc{n}")
    build(root, n)
    _single, single_wall = run_writers(root, 1, count, "append")
    many, wall = run_writers(root, writers, count, "append")
    latencies = sorted(t for r in many for _, t in r)
    ok = sum(1 for r in many for s, _ in r if s == "ok")
    ns = PartitionedNamespace.open(root)
    landed = ns.count_rows("key >= 1000000")
    expected = 3 * (count + ok)
    over_root = os.path.join(workdir, f"over{n}")
    build(over_root, 1000)
    over, _ = run_writers(over_root, writers, count, "overwrite_partitions")
    over_ok = sum(1 for r in over for s, _ in r if s == "ok")
    final = PartitionedNamespace.open(over_root).to_table(filter="key = 7")
    return {
        "partitions": n,
        "writers": writers,
        "appends_each": count,
        "landed_appends": ok,
        "rows_lost": expected - landed,
        "single_writer_commits_per_s": round(count / single_wall, 1),
        "aggregate_commits_per_s": round(ok / wall, 1),
        "p50_s": round(latencies[len(latencies) // 2], 3),
        "p99_s": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 3),
        "overwrite_landed": over_ok,
        "overwrite_conflicts": writers * count - over_ok,
        "overwrite_final_rows": final.num_rows,
        "overwrite_final_single_write": len(set(final.column("value").to_pylist())) == 1,
    }


def small_commits(workdir: str, commits: int, repeat: int) -> dict:
    root = os.path.join(workdir, "small")
    ns = build(root, 1000)
    t0 = time.perf_counter()
    for i in range(commits):
        ns.write(one_row(i % 1000))
    spent = time.perf_counter() - t0
    ns = PartitionedNamespace.open(root)
    manifest = lance.dataset(os.path.join(root, "__manifest"))
    fragments = len(manifest.get_fragments())
    aged = 1000 * timed(lambda: ns.plan_scan("key = 333"), repeat)
    manifest.optimize.compact_files(materialize_deletions=True, materialize_deletions_threshold=0.0)
    ns = PartitionedNamespace.open(root)
    compacted = 1000 * timed(lambda: ns.plan_scan("key = 333"), repeat)
    return {
        "commits": commits,
        "commit_ms_mean": round(1000 * spent / commits, 1),
        "manifest_fragments": fragments,
        "plan_after_commits_ms": round(aged, 2),
        "plan_compacted_ms": round(compacted, 2),
        "ratio": round(aged / compacted, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--concurrency", action="store_true")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--appends", type=int, default=25)
    parser.add_argument("--small-commits", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlp-commit-scale-") as workdir:
        results: dict = {"sizes": [measure_size(workdir, n, args.repeat) for n in args.sizes]}
        if args.concurrency:
            results["concurrency"] = concurrency(workdir, 10_000, args.writers, args.appends)
        if args.small_commits:
            results["small_commits"] = small_commits(workdir, args.small_commits, args.repeat)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    base = results["sizes"][0]
    print("| partitions | append existing ms | append new ms | plan eq ms | read one ms |")
    print("|---:|---:|---:|---:|---:|")
    for r in results["sizes"]:

        def cell(k: str, r: dict = r) -> str:
            return f"{r[k]:.1f} ({r[k] / base[k]:.2f}x)"

        print(
            f"| {r['partitions']:,} | {cell('append_existing_ms')} | {cell('append_new_ms')} "
            f"| {cell('plan_eq_ms')} | {cell('read_one_ms')} |"
        )
    for key in ("concurrency", "small_commits"):
        if key in results:
            print(f"\n{key}: {json.dumps(results[key])}")


if __name__ == "__main__":
    main()
