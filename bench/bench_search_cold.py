"""What an all-tenant vector query costs when its search session keeps nothing (cold), when it
keeps the answer's state (warm), and right after a one-row append to one small partition
table (the session kept the pool of the tables before the write), on the data of
``bench/bench_search.py`` (1,000,000 vectors, 150 tenants); and, with
``--every-table-indexed``, the same with every partition table given a vector index (none
pooled), with recall against brute force; and, with ``--floor``, the parts a cold query
cannot do without, each timed alone: opening (and checking for links) every partition table,
reading the bytes of the pooled tables' data files, and everything a warm query does.

The namespace is copied from ``bench_search.py``'s work directory first (the appends and the
indexes change the copy only). Run by hand, after ``bench_search.py --workdir DIR`` built the
data (results in docs/explanation/benchmarks.md, "Issue 33, third pass"):

    .venv/bin/python bench/bench_search_cold.py --workdir /tmp/bs_final
    .venv/bin/python bench/bench_search_cold.py --workdir /tmp/bs_final --every-table-indexed
    .venv/bin/python bench/bench_search_cold.py --workdir /tmp/bs_final --floor
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("LANCE_LOG", "error")

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_search as data

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.read.planning import plan_namespace
from dagster_lance_partitioned.core.search.session import SearchSession
from dagster_lance_partitioned.core.search.tables import Opener, SearchTable, for_each_task


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def after_writes(ns: PartitionedNamespace, qv: np.ndarray, writes: int) -> list[str]:
    """Cold, warm and right after a one-row append to a small tenant, interleaved."""
    session = SearchSession()
    cold, warm, after = [], [], []
    schema = ns.schema
    for i in range(writes):
        q = qv[i]
        session.clear()
        t = time.perf_counter()
        ns.search(q, k=10, columns=["id"], session=session)
        cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        ns.search(q, k=10, columns=["id"], session=session)
        warm.append(time.perf_counter() - t)
        row = {
            "id": pa.array([10_000_000 + i], pa.int64()),
            "tenant": [f"t{data.TENANTS - 1 - i % 100:03d}"],  # the 100 smallest, in turn
            "cat": pa.array([1], pa.int32()),
            "price": pa.array([1.0], pa.float32()),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(q), data.DIM),
        }
        table = pa.table(row)
        ns.write(table.cast(pa.schema([schema.field(n) for n in table.column_names])))
        t = time.perf_counter()
        got = ns.search(q, k=10, columns=["id"], session=session)
        after.append(time.perf_counter() - t)
        assert got["id"][0].as_py() == 10_000_000 + i, "the row appended is the nearest"
    w = ms(warm)
    return [
        "| all tenants, package defaults | p50 ms | / warm |",
        "|---|---:|---:|",
        f"| cold (session cleared) | {ms(cold):.1f} | {ms(cold) / w:.2f} |",
        f"| warm (the same query again) | {w:.1f} | 1.00 |",
        f"| first query after a one-row append to a small table | {ms(after):.1f} | "
        f"{ms(after) / w:.2f} |",
    ]


def every_table_indexed(
    ns: PartitionedNamespace, qv: np.ndarray, n: int, table: pa.Table, vectors: np.ndarray
) -> list[str]:
    """Every partition table given an IVF_PQ index (min_rows below the smallest tenant):
    cold and warm latency and recall against brute force (over ``table``'s rows, whose
    vectors are ``vectors``), defaults and tuned."""
    for decl in ns.indexes():
        if decl.column == "vec":
            ns.drop_index(decl.name)
    t = time.perf_counter()
    coverage = ns.create_index("vec", "IVF_PQ", min_rows=1000)
    built = time.perf_counter() - t
    norms = np.einsum("ij,ij->i", vectors, vectors)
    truth = data.exact_top(vectors, norms, None, qv[:n])
    ids = table.column("id").to_numpy()
    session = SearchSession()
    out = [
        f"Every table indexed: {coverage.partitions_indexed} indexed, "
        f"{coverage.partitions_flat} flat, built in {built:.1f} s.",
        "",
        "| params | recall@10 | cold p50 ms | warm p50 ms | cold / warm |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, params in (
        ("defaults", {}),
        ("probes=10, refine_factor=10", data.parse_params("probes=10,refine_factor=10")),
    ):
        cold, warm, recall = [], [], []
        for i in range(n):
            session.clear()
            t = time.perf_counter()
            ns.search(qv[i], k=10, columns=["id"], session=session, **params)
            cold.append(time.perf_counter() - t)
            t = time.perf_counter()
            got = ns.search(qv[i], k=10, columns=["id"], session=session, **params)
            warm.append(time.perf_counter() - t)
            want = set(ids[truth[i]].tolist())
            recall.append(len(set(got["id"].to_pylist()) & want) / 10)
        out.append(
            f"| {label} | {statistics.mean(recall):.3f} | {ms(cold):.1f} | {ms(warm):.1f} | "
            f"{ms(cold) / ms(warm):.2f} |"
        )
    return out


def _opened(table: SearchTable) -> SearchTable:
    _ = table.ds  # opened and checked for links
    return table


def floor(ns: PartitionedNamespace, qv: np.ndarray, n: int) -> list[str]:
    """A cold query against the sum of what it cannot skip, interleaved query by query:
    opening every partition table (and checking its files for links, as every query that
    reads a table does), reading the raw bytes of the pooled tables' data files (4 threads,
    from the page cache: less than any decoder does) and the warm query itself (its
    product over the pool, routed searches, merge and rows returned)."""
    state = ns.state
    plan = plan_namespace(state, None, check_links=False)
    schema = state.schema_with_ids

    def open_all() -> list[SearchTable]:
        opener = Opener(SearchSession(), schema, None, state.storage_options)
        return for_each_task(state, plan.tasks, lambda task: _opened(opener(task)))

    pooled = [t for t in open_all() if t.index_on("vec") is None]
    files = [
        os.path.join(t.ds.uri, "data", f.path)
        for t in pooled
        for fragment in t.ds.get_fragments()
        for f in fragment.data_files()
    ]
    size = sum(os.path.getsize(f) for f in files)

    def raw() -> int:
        def read(path: str) -> int:
            with open(path, "rb") as fh:
                return len(fh.read())

        with ThreadPoolExecutor(4) as ex:
            return sum(ex.map(read, files))

    def scans() -> int:
        with ThreadPoolExecutor(4) as ex:
            return sum(ex.map(lambda t: t.ds.to_table(columns=["vec"]).nbytes, pooled))

    session = SearchSession()
    parts: dict[str, list[float]] = {k: [] for k in ("cold", "warm", "open", "raw", "scan")}
    for i in range(n):
        session.clear()  # the first search below is cold
        for name, fn in (
            ("cold", lambda q=qv[i]: ns.search(q, k=10, columns=["id"], session=session)),
            ("warm", lambda q=qv[i]: ns.search(q, k=10, columns=["id"], session=session)),
            ("open", open_all),
            ("raw", raw),
            ("scan", scans),
        ):
            t = time.perf_counter()
            fn()
            parts[name].append(time.perf_counter() - t)
    m = {k: ms(v) for k, v in parts.items()}
    least = m["open"] + m["raw"] + m["warm"]
    return [
        f"{len(plan.tasks)} tables, {len(pooled)} pooled: {len(files)} data files, "
        f"{size / 1e6:.0f} MB; {n} queries, p50 ms.",
        "",
        "| part | p50 ms | / warm |",
        "|---|---:|---:|",
        *(
            f"| {label} | {m[k]:.1f} | {m[k] / m['warm']:.2f} |"
            for k, label in (
                ("cold", "cold query (session cleared)"),
                ("warm", "warm query (the same again)"),
                ("open", "opening and checking every table"),
                ("raw", "raw bytes of the pooled tables' data files, 4 threads"),
                ("scan", "Lance scans of the pooled vectors, 4 threads"),
            )
        ),
        f"| least a cold query can take: open + raw bytes + warm | {least:.1f} | "
        f"{least / m['warm']:.2f} |",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", required=True, help="bench_search.py's work directory")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--every-table-indexed", action="store_true")
    ap.add_argument("--floor", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(args.workdir))) as tmp:
        copy = os.path.join(tmp, "ns")
        shutil.copytree(os.path.join(args.workdir, "ns"), copy, symlinks=True)
        ns = PartitionedNamespace.open(copy)
        table, vectors, tenant, _ = data.vector_data(1_000_000)
        qv, _ = data.queries(vectors, tenant, args.queries)
        if args.every_table_indexed:  # recall needs the vectors, generated once
            lines = every_table_indexed(ns, qv[1], args.queries, table, vectors)
        else:
            del table, vectors  # not held while the timings run
            if args.floor:
                lines = floor(ns, qv[1], args.queries)
            else:
                lines = after_writes(ns, qv[1], args.queries)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
