"""Object-storage benchmark: this package against Delta Lake (``deltalake``) and Iceberg
(``pyiceberg``) doing the same work on an S3-compatible store with a fixed latency per request.

Run by hand (needs the ``bench`` extra: ``pip install -e '.[dev,bench]'``)::

    python bench/bench_object_store.py --partitions 30,365 --repeat 3 --latency-ms 20
    python bench/bench_object_store.py --partitions 30 --repeat 1               # quick check
    python bench/bench_object_store.py --systems ours --ops write,open,read_one  # ours only
    python bench/bench_object_store.py --partitions 365 --json results.json      # + JSON

Options: ``--partitions`` (comma-separated table sizes N, in daily partitions), ``--repeat``
(best of; every timed run of ``write`` gets a fresh table), ``--latency-ms`` (added before each
request), ``--rows-per-partition`` (1000), ``--systems`` (``ours,delta,iceberg``), ``--ops``
(``create,write,open,read_one,read_all,append,replace,floor``), ``--floor-threads`` (8),
``--warm`` (see below), ``--server`` (``moto``, ``moto-shared``, ``localbucket``), ``--json
FILE``.

**Store.** An S3-compatible server on 127.0.0.1 (``--server``: moto's, the default, or
LocalBucket's; see ``tests/helpers/delay_proxy.py:SERVERS``) behind
``tests/helpers/delay_proxy.py:DelayProxy``, each in a process of its own (their Python work
does not compete for the measured client's GIL; ``moto-shared`` runs moto in the proxy's
process, as before 2026-11-27). The proxy sleeps ``--latency-ms`` before forwarding each
request (one simulated round trip; connection set-up and TLS cost nothing here) and counts
requests by kind: GET, LIST (a GET with ``list-type=`` or ``prefix=`` in the query), HEAD, PUT,
POST, DELETE. All three systems talk to the proxy only; buckets are created on the server
directly (uncounted), one bucket per table so that listings do not grow with the run. Both
servers are single Python processes: moto answers a few hundred requests a second at most, its
listings fewer (``bench/bench_s3_throughput.py``), so past that more requests in flight only
queue; LocalBucket answers three to five times as many (it has no multi-object delete: the
put-if-absent probe of this package cannot remove its scratch object there and warns).
Compare request counts as well as seconds.

**Data.** N days of ``--rows-per-partition`` rows each, columns ``day date32, id int64,
value float64, name string``, rows grouped by day; every system partitions by ``day``
(identity). Every operation is timed for each system in turn, best of ``--repeat``, and reports
the request counts of that best run. Table handles used by ``read_*``, ``append`` and
``replace`` are opened before the timer (a fresh handle per timed run). Before each timed run
the process-wide caches that would spare requests are dropped (ours: the LRU of partition
tables opened at pinned versions, which makes a repeated read of up to 256 partitions skip
their metadata requests; pyiceberg: its cache of manifest-list entries, for symmetry: it
spares no request); ``--warm`` keeps them, so a repeated
read shows what a long-lived process reading the same table sees.

**Systems**

- ``ours``: ``PartitionedNamespace`` with ``[PartitionField.identity("day")]``, Lance storage
  options of ``tests/helpers/s3.py:storage_options`` (``aws_endpoint`` = the proxy).
- ``delta``: ``deltalake`` (delta-rs) with storage options ``AWS_ENDPOINT_URL`` = the proxy,
  ``AWS_ALLOW_HTTP``, keys, ``AWS_REGION`` and ``conditional_put: etag``: commits are
  put-if-absent (``If-None-Match: *``, which moto honours), the same safety against concurrent
  writers as ours; no locking provider and no ``AWS_S3_ALLOW_UNSAFE_RENAME`` needed (both
  were tried on moto and work the same, with the same requests).
- ``iceberg``: ``pyiceberg`` with a ``SqlCatalog`` on a local sqlite file (its commits cost no
  store requests: a REST or Glue catalog would add round trips), tables on the proxy through
  ``PyArrowFileIO`` (``s3.endpoint`` = the proxy, keys, ``s3.region``), schema with field ids
  1-4 (all optional) and an identity partition spec on ``day``.

**Operations** (``N`` = the table's partitions)

- ``create``: create the empty table. ours ``PartitionedNamespace.create``; delta
  ``DeltaTable.create(partition_by=["day"])``; iceberg ``catalog.create_table``.
- ``write``: one call writing N new partitions (N*rows rows) into that empty table. ours
  ``ns.write(data, mode="append")``; delta ``write_deltalake(dt, data, mode="append")``;
  iceberg ``table.append(data)``.
- ``open``: open the table at its latest version. ours ``PartitionedNamespace.open``; delta
  ``DeltaTable(uri)``; iceberg ``catalog.load_table``.
- ``read_one``: read one day to an Arrow table. ours ``ns.to_table("day = DATE '...'")``; delta
  ``dt.to_pyarrow_table(filters=[("day", "=", date)])`` (pruned by partition values); iceberg
  ``table.scan(row_filter=EqualTo("day", "...")).to_arrow()``.
- ``read_all``: read the whole table to Arrow (``ns.to_table()``, ``dt.to_pyarrow_table()``,
  ``table.scan().to_arrow()``).
- ``append``: append one row to one existing day. ours ``ns.write(row, mode="append")``; delta
  ``write_deltalake(dt, row, mode="append")``; iceberg ``table.append(row)``.
- ``replace``: replace one day with ``--rows-per-partition`` new rows. ours
  ``ns.write(day_rows, mode="overwrite_partitions")``; delta ``write_deltalake(dt, day_rows,
  mode="overwrite", predicate="day = '...'")``; iceberg
  ``table.dynamic_partition_overwrite(day_rows)``.
- ``floor``: what the store allows: N plain ``lance.write_dataset`` calls of the pre-split
  days (one Lance table each), sequential and on ``--floor-threads`` threads.

The operations run in the order above on the table the last ``write`` made (reads before the
table is changed); at the end every table is checked to hold the expected rows (uncounted).
Figures quoted in docs/explanation/benchmarks.md should come with the command line that made them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import functools
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import lance
import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from helpers.delay_proxy import KINDS, SERVERS, S3ProxyProcess
from helpers.s3 import ACCESS_KEY, REGION, SECRET_KEY, storage_options
from helpers.versions import installed_versions

from dagster_lance_partitioned import PartitionedNamespace, PartitionField

SYSTEMS = ("ours", "delta", "iceberg")
OPS = ("create", "write", "open", "read_one", "read_all", "append", "replace", "floor")
SCHEMA = pa.schema(
    [
        pa.field("day", pa.date32()),
        pa.field("id", pa.int64()),
        pa.field("value", pa.float64()),
        pa.field("name", pa.string()),
    ]
)
START = dt.date(2024, 1, 1)


# -- data ------------------------------------------------------------------------------------------
def make_data(days: int, rows: int, seed: int = 7) -> pa.Table:
    """``days`` days from :data:`START` of ``rows`` rows each, grouped by day."""
    rng = np.random.default_rng(seed)
    total = days * rows
    offsets = np.repeat(np.arange(days), rows).astype("timedelta64[D]")
    ids = np.arange(total, dtype=np.int64)
    return pa.table(
        {
            "day": pa.array(np.datetime64(START.isoformat()) + offsets, pa.date32()),
            "id": pa.array(ids),
            "value": pa.array(rng.random(total)),
            "name": pa.array(np.char.add("name-", (ids % 1000).astype(str)).tolist(), pa.string()),
        },
        schema=SCHEMA,
    )


def day_rows(day: dt.date, rows: int, first_id: int, seed: int) -> pa.Table:
    """``rows`` new rows of ``day`` with ids from ``first_id``."""
    rng = np.random.default_rng(seed)
    ids = np.arange(first_id, first_id + rows, dtype=np.int64)
    return pa.table(
        {
            "day": pa.array([day] * rows, pa.date32()),
            "id": pa.array(ids),
            "value": pa.array(rng.random(rows)),
            "name": pa.array([f"new-{i}" for i in ids], pa.string()),
        },
        schema=SCHEMA,
    )


# -- the systems -----------------------------------------------------------------------------------
class System:
    """One table format: create, write, open, read and change a table at ``uri``."""

    name = ""

    def create(self, uri: str) -> Any:
        raise NotImplementedError

    def write(self, handle: Any, data: pa.Table) -> None:
        raise NotImplementedError

    def open(self, uri: str) -> Any:
        raise NotImplementedError

    def read_one(self, handle: Any, day: dt.date) -> pa.Table:
        raise NotImplementedError

    def read_all(self, handle: Any) -> pa.Table:
        raise NotImplementedError

    def append(self, handle: Any, rows: pa.Table) -> None:
        raise NotImplementedError

    def replace(self, handle: Any, rows: pa.Table, day: dt.date) -> None:
        raise NotImplementedError

    def clear_caches(self) -> None:
        """Drop process-wide caches that would spare requests in a later timed run."""


class Ours(System):
    name = "ours"

    def __init__(self, endpoint: str) -> None:
        self.options = storage_options(endpoint)

    def create(self, uri: str) -> PartitionedNamespace:
        return PartitionedNamespace.create(
            uri, SCHEMA, [PartitionField.identity("day")], storage_options=self.options
        )

    def write(self, handle: PartitionedNamespace, data: pa.Table) -> None:
        handle.write(data, mode="append")

    def open(self, uri: str) -> PartitionedNamespace:
        return PartitionedNamespace.open(uri, self.options)

    def read_one(self, handle: PartitionedNamespace, day: dt.date) -> pa.Table:
        return handle.to_table(f"day = DATE '{day.isoformat()}'")

    def read_all(self, handle: PartitionedNamespace) -> pa.Table:
        return handle.to_table()

    def append(self, handle: PartitionedNamespace, rows: pa.Table) -> None:
        handle.write(rows, mode="append")

    def replace(self, handle: PartitionedNamespace, rows: pa.Table, day: dt.date) -> None:
        handle.write(rows, mode="overwrite_partitions")

    def clear_caches(self) -> None:
        # what the process keeps of what it read (tables at pinned versions, manifest versions)
        from dagster_lance_partitioned.core import storage
        from dagster_lance_partitioned.core.read import scan

        scan.clear_caches()
        storage.clear_lance_session()  # and the manifests the write session kept


class Delta(System):
    name = "delta"

    def __init__(self, endpoint: str) -> None:
        import deltalake

        self.dl = deltalake
        self.options = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "conditional_put": "etag",  # commits with If-None-Match: * (moto honours it)
        }

    def create(self, uri: str) -> Any:
        return self.dl.DeltaTable.create(
            uri, SCHEMA, partition_by=["day"], storage_options=self.options
        )

    def write(self, handle: Any, data: pa.Table) -> None:
        self.dl.write_deltalake(handle, data, mode="append")

    def open(self, uri: str) -> Any:
        return self.dl.DeltaTable(uri, storage_options=self.options)

    def read_one(self, handle: Any, day: dt.date) -> pa.Table:
        return handle.to_pyarrow_table(filters=[("day", "=", day)])

    def read_all(self, handle: Any) -> pa.Table:
        return handle.to_pyarrow_table()

    def append(self, handle: Any, rows: pa.Table) -> None:
        self.dl.write_deltalake(handle, rows, mode="append")

    def replace(self, handle: Any, rows: pa.Table, day: dt.date) -> None:
        self.dl.write_deltalake(
            handle, rows, mode="overwrite", predicate=f"day = '{day.isoformat()}'"
        )


class Iceberg(System):
    name = "iceberg"
    NAMESPACE = "bench"

    def __init__(self, endpoint: str, work_dir: str, warehouse_bucket: str) -> None:
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.expressions import EqualTo
        from pyiceberg.partitioning import PartitionField as IcebergField
        from pyiceberg.partitioning import PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType

        self.equal_to = EqualTo
        self.catalog = SqlCatalog(
            "bench",
            uri=f"sqlite:///{os.path.join(work_dir, 'iceberg-catalog.db')}",
            warehouse=f"s3://{warehouse_bucket}/warehouse",
            **{
                "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
                "s3.endpoint": endpoint,
                "s3.access-key-id": ACCESS_KEY,
                "s3.secret-access-key": SECRET_KEY,
                "s3.region": REGION,
            },
        )
        self.catalog.create_namespace_if_not_exists(self.NAMESPACE)
        self.schema = Schema(
            NestedField(1, "day", DateType(), required=False),
            NestedField(2, "id", LongType(), required=False),
            NestedField(3, "value", DoubleType(), required=False),
            NestedField(4, "name", StringType(), required=False),
        )
        self.spec = PartitionSpec(
            IcebergField(source_id=1, field_id=1000, transform=IdentityTransform(), name="day")
        )
        self.names: dict[str, tuple[str, str]] = {}  # uri -> identifier

    def _identifier(self, uri: str) -> tuple[str, str]:
        if uri not in self.names:
            self.names[uri] = (self.NAMESPACE, f"t{len(self.names)}")
        return self.names[uri]

    def create(self, uri: str) -> Any:
        return self.catalog.create_table(
            self._identifier(uri), self.schema, partition_spec=self.spec, location=uri
        )

    def write(self, handle: Any, data: pa.Table) -> None:
        handle.append(data)

    def open(self, uri: str) -> Any:
        return self.catalog.load_table(self._identifier(uri))

    def read_one(self, handle: Any, day: dt.date) -> pa.Table:
        return handle.scan(row_filter=self.equal_to("day", day.isoformat())).to_arrow()

    def read_all(self, handle: Any) -> pa.Table:
        return handle.scan().to_arrow()

    def append(self, handle: Any, rows: pa.Table) -> None:
        handle.append(rows)

    def replace(self, handle: Any, rows: pa.Table, day: dt.date) -> None:
        handle.dynamic_partition_overwrite(rows)

    def clear_caches(self) -> None:
        import pyiceberg.manifest

        clear = getattr(pyiceberg.manifest, "clear_manifest_cache", None)  # pyiceberg 0.10+
        if clear is not None:
            clear()


# -- measuring -------------------------------------------------------------------------------------
@dataclass
class Result:
    op: str
    n: int
    system: str
    seconds: float  # best of the runs
    requests: dict[str, int]  # of the best run
    runs: list[float] = field(default_factory=list)  # seconds of every run
    run_requests: list[int] = field(default_factory=list)  # total requests of every run


class Bench:
    def __init__(self, s3: S3ProxyProcess, args: argparse.Namespace, work_dir: str) -> None:
        import boto3

        self.s3 = s3
        self.args = args
        self.work_dir = work_dir
        self.results: list[Result] = []
        self.floor: list[dict[str, Any]] = []
        self._buckets = itertools.count()
        self._client = boto3.client(
            "s3",
            endpoint_url=s3.server_endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def bucket(self, what: str) -> str:
        """A new bucket, created on moto directly (not counted)."""
        name = f"bench-{what}-{next(self._buckets)}"
        self._client.create_bucket(Bucket=name)
        return name

    def location(self, system: str, n: int) -> str:
        return f"s3://{self.bucket(system)}/table-{n}"

    def timed(
        self, fn: Callable[[], Any], system: System | None = None
    ) -> tuple[float, dict[str, int], Any]:
        """Run ``fn`` once (after ``system``'s caches are dropped, unless ``--warm``): seconds,
        requests, its result."""
        if system is not None and not self.args.warm:
            system.clear_caches()
        self.s3.reset()
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
        return seconds, self.s3.counts(), out

    def record(self, op: str, n: int, system: str, runs: list[tuple[float, dict]]) -> Result:
        seconds, requests = min(runs, key=lambda r: r[0])
        result = Result(
            op,
            n,
            system,
            seconds,
            requests,
            [round(s, 4) for s, _ in runs],
            [c["total"] for _, c in runs],
        )
        self.results.append(result)
        if any(c.get("errors_5xx") for _, c in runs):
            print(f"  WARNING: {op} N={n} {system}: 5xx answers from the store", flush=True)
        print(
            f"  {op:<9} N={n:<4} {system:<8} {seconds:8.3f} s  {fmt_requests(requests)}",
            flush=True,
        )
        return result


def fmt_requests(counts: dict[str, int]) -> str:
    parts = ", ".join(f"{k} {counts[k]}" for k in KINDS if counts.get(k))
    return f"{counts.get('total', 0)} ({parts})" if parts else "0"


def run(bench: Bench, systems: list[System], ops: set[str]) -> None:
    args = bench.args
    rows = args.rows_per_partition
    repeat = args.repeat
    for n in args.partitions:
        print(f"N = {n} partitions of {rows} rows", flush=True)
        data = make_data(n, rows)
        day = START + dt.timedelta(days=n // 2)  # the day read, appended to and replaced
        table_ops = ops - {"floor"}
        uris: dict[str, str] = {}
        # create + write: a fresh table every run; the last one is kept for the other ops
        if table_ops:
            for system in systems:
                create_runs, write_runs = [], []
                reps = repeat if ops & {"create", "write"} else 1
                for _ in range(reps):
                    uri = bench.location(system.name, n)
                    s, c, handle = bench.timed(functools.partial(system.create, uri), system)
                    create_runs.append((s, c))
                    s, c, _ = bench.timed(functools.partial(system.write, handle, data), system)
                    write_runs.append((s, c))
                    uris[system.name] = uri
                if "create" in ops:
                    bench.record("create", n, system.name, create_runs)
                if "write" in ops:
                    bench.record("write", n, system.name, write_runs)
        appended = 0
        for op in ("open", "read_one", "read_all", "append", "replace"):
            if op not in ops:
                continue
            for system in systems:
                runs = []
                for i in range(repeat):
                    uri = uris[system.name]
                    if op == "open":
                        s, c, _ = bench.timed(functools.partial(system.open, uri), system)
                        runs.append((s, c))
                        continue
                    handle = system.open(uri)  # a fresh handle, opened before the timer
                    fn: Callable[[], Any]
                    if op == "read_one":
                        fn = functools.partial(system.read_one, handle, day)
                        expected = rows + appended
                    elif op == "read_all":
                        fn = functools.partial(system.read_all, handle)
                        expected = n * rows + appended
                    elif op == "append":
                        row = day_rows(day, 1, 20_000_000 + i, seed=i)
                        fn = functools.partial(system.append, handle, row)
                    else:
                        new = day_rows(day, rows, 10_000_000 + i * rows, seed=100 + i)
                        fn = functools.partial(system.replace, handle, new, day)
                    s, c, out = bench.timed(fn, system)
                    runs.append((s, c))
                    if op in ("read_one", "read_all") and out.num_rows != expected:
                        raise AssertionError(
                            f"{system.name} {op} N={n}: {out.num_rows} rows, expected {expected}"
                        )
                bench.record(op, n, system.name, runs)
            if op == "append":
                appended = repeat
            elif op == "replace":
                appended = 0
        if table_ops:
            verify(systems, uris, n, rows, day, appended)
        if "floor" in ops:
            run_floor(bench, data, n)


def verify(
    systems: list[System], uris: dict[str, str], n: int, rows: int, day: dt.date, appended: int
) -> None:
    """Every table holds the expected rows (uncounted)."""
    for system in systems:
        handle = system.open(uris[system.name])
        got_day = system.read_one(handle, day).num_rows
        got_all = system.read_all(handle).num_rows
        if (got_day, got_all) != (rows + appended, n * rows + appended):
            raise AssertionError(
                f"{system.name} N={n}: day {got_day}, total {got_all} rows; expected "
                f"{rows + appended}, {n * rows + appended}"
            )


def run_floor(bench: Bench, data: pa.Table, n: int) -> None:
    """N plain ``lance.write_dataset`` calls of the pre-split days, sequential and threaded."""
    rows = bench.args.rows_per_partition
    parts = [data.slice(i * rows, rows) for i in range(n)]
    options = storage_options(bench.s3.endpoint)
    threads = bench.args.floor_threads
    entry: dict[str, Any] = {"n": n}
    for label, workers in (("sequential", 1), (f"{threads}_threads", threads)):
        runs = []
        for _ in range(bench.args.repeat):
            root = f"s3://{bench.bucket('floor')}/floor-{n}"

            def write_one(i: int, root: str = root) -> None:
                lance.write_dataset(parts[i], f"{root}/p{i:05d}.lance", storage_options=options)

            def write_all(workers: int = workers, write_one: Callable = write_one) -> None:
                if workers == 1:
                    for i in range(n):
                        write_one(i)
                else:
                    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                        list(pool.map(write_one, range(n)))

            s, c, _ = bench.timed(write_all)
            runs.append((s, c))
        seconds, requests = min(runs, key=lambda r: r[0])
        entry[label] = {"seconds": seconds, "requests": requests, "runs": [s for s, _ in runs]}
        print(f"  floor     N={n:<4} {label:<10} {seconds:8.3f} s  {fmt_requests(requests)}")
    bench.floor.append(entry)


def warm_up(bench: Bench, systems: list[System]) -> None:
    """One small untimed round of every operation per system (imports, runtimes, clients)."""
    data = make_data(2, 10)
    for system in systems:
        uri = bench.location(system.name, 0)
        system.write(system.create(uri), data)
        handle = system.open(uri)
        system.read_one(handle, START)
        system.read_all(handle)
        system.append(handle, day_rows(START, 1, 1000, seed=1))
        system.replace(handle, day_rows(START, 10, 2000, seed=2), START)
    options = storage_options(bench.s3.endpoint)
    lance.write_dataset(data, f"s3://{bench.bucket('floor')}/warm.lance", storage_options=options)


# -- output ----------------------------------------------------------------------------------------
def markdown(bench: Bench, systems: list[str]) -> str:
    by_key = {(r.op, r.n, r.system): r for r in bench.results}
    header = ["operation", "N"]
    for s in systems:
        header += [f"{s} s", f"{s} requests"]
    ratios = [o for o in ("delta", "iceberg") if "ours" in systems and o in systems]
    header += [f"ours/{o}" for o in ratios]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for op in OPS:
        for n in bench.args.partitions:
            cells = [op, str(n)]
            found = False
            for s in systems:
                r = by_key.get((op, n, s))
                found = found or r is not None
                cells += [f"{r.seconds:.3f}", fmt_requests(r.requests)] if r else ["", ""]
            for o in ratios:
                a, b = by_key.get((op, n, "ours")), by_key.get((op, n, o))
                cells.append(f"{a.seconds / b.seconds:.2f}" if a and b and b.seconds else "")
            if found:
                lines.append("| " + " | ".join(cells) + " |")
    if bench.floor:
        threads = bench.args.floor_threads
        lines += [
            "",
            f"Floor: N plain `lance.write_dataset` calls of the pre-split days "
            f"(sequential, and on {threads} threads)",
            "",
            "| N | sequential s | requests | " + f"{threads} threads s | requests |",
            "|---|---|---|---|---|",
        ]
        for e in bench.floor:
            seq, par = e["sequential"], e[f"{threads}_threads"]
            lines.append(
                f"| {e['n']} | {seq['seconds']:.3f} | {fmt_requests(seq['requests'])} | "
                f"{par['seconds']:.3f} | {fmt_requests(par['requests'])} |"
            )
    return "\n".join(lines)


def versions() -> dict[str, str]:
    return installed_versions(
        (
            "dagster-lance-partitioned",
            "pylance",
            "deltalake",
            "pyiceberg",
            "pyarrow",
            "moto",
            "localbucket",
        )
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])

    def csv(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
        def parse(text: str) -> list[str]:
            items = [t.strip() for t in text.split(",") if t.strip()]
            bad = [t for t in items if t not in choices]
            if bad or not items:
                raise argparse.ArgumentTypeError(f"choose from {','.join(choices)}; got {text!r}")
            return items

        return parse

    ap.add_argument(
        "--partitions",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[30, 365],
        help="table sizes N in daily partitions (30,365)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs (3)")
    ap.add_argument(
        "--latency-ms", type=float, default=20.0, help="delay added before each request (20)"
    )
    ap.add_argument("--rows-per-partition", type=int, default=1000)
    ap.add_argument("--systems", type=csv(SYSTEMS), default=list(SYSTEMS))
    ap.add_argument("--ops", type=csv(OPS), default=list(OPS))
    ap.add_argument("--floor-threads", type=int, default=8)
    ap.add_argument(
        "--server",
        choices=SERVERS,
        default="moto",
        help="the S3-compatible server behind the proxy (moto: moto's server in a process of "
        "its own; moto-shared: in the proxy's process; localbucket: LocalBucket)",
    )
    ap.add_argument(
        "--warm",
        action="store_true",
        help="keep process-wide caches between timed runs (default: dropped before each run)",
    )
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args(argv)
    if args.repeat < 1 or any(n < 1 for n in args.partitions):
        ap.error("--repeat and --partitions must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    work_dir = tempfile.mkdtemp(prefix="dlp-bench-os-")
    command = "python bench/bench_object_store.py " + " ".join(sys.argv[1:])
    s3 = S3ProxyProcess(args.latency_ms / 1000, server=args.server)
    try:
        bench = Bench(s3, args, work_dir)
        systems: list[System] = []
        for name in args.systems:
            if name == "ours":
                systems.append(Ours(s3.endpoint))
            elif name == "delta":
                systems.append(Delta(s3.endpoint))
            else:
                systems.append(Iceberg(s3.endpoint, work_dir, bench.bucket("iceberg-wh")))
        warm_up(bench, systems)
        run(bench, systems, set(args.ops))
    finally:
        s3.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    info = versions()
    print()
    print(
        f"`{command}`: {args.server} behind the proxy, latency {args.latency_ms:g} ms per request, "
        f"{args.rows_per_partition} rows per partition, best of {args.repeat}, "
        f"{'warm caches' if args.warm else 'caches dropped before each run'}; "
        + ", ".join(f"{k} {v}" for k, v in info.items())
    )
    print()
    print(markdown(bench, list(args.systems)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "command": command,
                    "config": {k: v for k, v in vars(args).items() if k != "json"},
                    "versions": info,
                    "results": [asdict(r) for r in bench.results],
                    "floor": bench.floor,
                },
                fh,
                indent=1,
            )
        print(f"\nJSON: {args.json}")


if __name__ == "__main__":
    main()
