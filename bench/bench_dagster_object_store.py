"""A Dagster single-run backfill of 365 daily partitions on object storage: this package's
``LancePartitionedIOManager`` against ``dagster-deltalake``'s ``DeltaLakePyarrowIOManager``,
both on an S3-compatible server behind the latency proxy of ``bench/bench_object_store.py``
(``tests/helpers/delay_proxy.py``: a fixed delay before every request, requests counted by
kind).

Run by hand (needs the ``bench`` extra: ``pip install -e '.[dev,bench]'``)::

    python bench/bench_dagster_object_store.py --days 365 --repeat 2 --latency-ms 20
    python bench/bench_dagster_object_store.py --days 30 --repeat 1              # quick check
    python bench/bench_dagster_object_store.py --server localbucket               # faster store

Options: ``--days`` (partition keys materialized in the one run, from 2024-01-01; 365),
``--rows-per-partition`` (1000), ``--repeat`` (best of; every run writes a fresh table),
``--latency-ms`` (20), ``--server`` (``moto``, ``moto-shared``, ``localbucket``; see
``delay_proxy.SERVERS``), ``--systems`` (``nothing,lance,delta``), ``--json FILE``.

**The asset.** ``events``: daily partitions (``DailyPartitionsDefinition`` from 2024-01-01, UTC)
with ``BackfillPolicy.single_run()``, returning a ``pyarrow.Table`` of ``--rows-per-partition``
rows per day of its partition time window (columns ``day date32, id int64, value float64,
name string``, the data of ``bench_object_store.py``), ``partition_expr`` ``day``. One run
materializes the whole key range (``dg.materialize`` with the run's partition-range tags, as a
backfill with a single-run policy launches it), on an ephemeral instance.

**Systems** (each run in a fresh bucket, created on the server directly, uncounted):

- ``nothing``: an IO manager that stores nothing (Dagster's own cost of the run).
- ``lance``: ``LancePartitionedIOManager(root="s3://<bucket>/lance", storage_options=...)``
  (Lance storage options of ``tests/helpers/s3.py``, the proxy as endpoint); the table is one
  partitioned namespace with an identity field on ``day`` (a daily window over a date column).
- ``delta``: ``DeltaLakePyarrowIOManager(root_uri="s3://<bucket>/delta", storage_options=
  S3Config(endpoint=..., keys, region), client_options={"allow_http": "true"})``, with the
  process environment ``AWS_CONDITIONAL_PUT=etag`` (put-if-absent commits, as in
  ``bench_object_store.py``); the table is partitioned by ``day``.

Measured per run: the seconds of ``dg.materialize``; ``output``: from the run's STEP_OUTPUT to
its HANDLED_OUTPUT event (the IO manager's ``handle_output`` plus Dagster storing the
materializations, the same span for every IO manager); the requests the proxy counted during
the run (by kind), and the rows stored (checked against the input, uncounted). Process caches
of this package are dropped before each run (a cold process). Compare seconds only within one
run of this script: the machine is shared.
"""

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
import uuid
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from helpers.delay_proxy import KINDS, SERVERS, S3ProxyProcess
from helpers.s3 import ACCESS_KEY, REGION, SECRET_KEY, storage_options
from helpers.versions import installed_versions

SYSTEMS = ("nothing", "lance", "delta")
START = dt.date(2024, 1, 1)
SCHEMA = pa.schema(
    [
        pa.field("day", pa.date32()),
        pa.field("id", pa.int64()),
        pa.field("value", pa.float64()),
        pa.field("name", pa.string()),
    ]
)
DAILY = dg.DailyPartitionsDefinition(start_date=START.isoformat())
ROWS_PER_DAY = int(os.environ.get("DLP_BENCH_ROWS_PER_DAY", "1000"))  # set by main()
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def rows_of(start: dt.date, end: dt.date, rows: int) -> pa.Table:
    """``rows`` rows for each day in [start, end), grouped by day."""
    days = (end - start).days
    total = days * rows
    rng = np.random.default_rng(7)
    offsets = np.repeat(np.arange(days), rows).astype("timedelta64[D]")
    ids = np.arange(total, dtype=np.int64)
    return pa.table(
        {
            "day": pa.array(np.datetime64(start.isoformat()) + offsets, pa.date32()),
            "id": pa.array(ids),
            "value": pa.array(rng.random(total)),
            "name": pa.array(np.char.add("name-", (ids % 1000).astype(str)).tolist(), pa.string()),
        },
        schema=SCHEMA,
    )


@dg.asset(
    partitions_def=DAILY,
    backfill_policy=dg.BackfillPolicy.single_run(),
    metadata={"partition_expr": "day"},
)
def events(context: dg.AssetExecutionContext) -> pa.Table:
    """The rows of every day in the run's partition time window."""
    window = context.partition_time_window
    return rows_of(window.start.date(), window.end.date(), ROWS_PER_DAY)


class NothingIOManager(dg.ConfigurableIOManager):
    """Stores nothing: the run's cost without storage."""

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        return None

    def load_input(self, context: dg.InputContext) -> Any:
        raise NotImplementedError


def output_seconds(instance: dg.DagsterInstance, run_id: str) -> float:
    """STEP_OUTPUT -> HANDLED_OUTPUT of the run: the IO manager's ``handle_output`` plus Dagster
    storing the materializations (the same span for every IO manager)."""
    stamps: dict[str, float] = {}
    for entry in instance.all_logs(run_id):
        if entry.dagster_event is not None:
            stamps.setdefault(entry.dagster_event.event_type_value, entry.timestamp)
    return stamps["HANDLED_OUTPUT"] - stamps["STEP_OUTPUT"]


def io_manager(system: str, root: str, endpoint: str) -> Any:
    """The IO manager of ``system`` storing under ``root`` through ``endpoint``."""
    if system == "nothing":
        return NothingIOManager()
    if system == "lance":
        from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

        return LancePartitionedIOManager(root=root, storage_options=storage_options(endpoint))
    from dagster_deltalake import DeltaLakePyarrowIOManager, S3Config

    return DeltaLakePyarrowIOManager(
        root_uri=root,
        storage_options=S3Config(
            endpoint=endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            region=REGION,
        ),
        client_options={"allow_http": "true"},
    )


def stored_rows(system: str, root: str, endpoint: str) -> int:
    """Rows the run stored (uncounted: read after the proxy's counts were taken)."""
    if system == "nothing":
        return -1
    if system == "lance":
        from dagster_lance_partitioned import PartitionedNamespace

        ns = PartitionedNamespace.open(f"{root}/events", storage_options(endpoint))
        return int(ns.count_rows())
    import deltalake

    options = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
    }
    # dagster-deltalake stores an asset at <root_uri>/<schema, "public" by default>/<name>
    return int(deltalake.DeltaTable(f"{root}/public/events", storage_options=options).count())


def clear_caches() -> None:
    """Drop this package's process caches (tables and manifest versions read, the Lance
    session of writes): every run starts cold."""
    from dagster_lance_partitioned.core import storage
    from dagster_lance_partitioned.core.read import scan

    scan.clear_caches()
    storage.clear_lance_session()


def one_run(s3: S3ProxyProcess, system: str, days: int) -> dict[str, Any]:
    """One single-run backfill of ``days`` keys with ``system``, in a fresh bucket."""
    bucket = s3.create_bucket(f"dagster-{system}-{uuid.uuid4().hex[:8]}")
    root = f"s3://{bucket}/{system}"
    io = io_manager(system, root, s3.endpoint)
    last = (START + dt.timedelta(days=days - 1)).isoformat()
    tags = {ASSET_PARTITION_RANGE_START_TAG: START.isoformat(), ASSET_PARTITION_RANGE_END_TAG: last}
    clear_caches()
    with dg.DagsterInstance.ephemeral() as instance:
        s3.reset()
        t0 = time.perf_counter()
        result = dg.materialize(
            [events], instance=instance, resources={"io_manager": io}, tags=tags, run_config=QUIET
        )
        seconds = time.perf_counter() - t0
        counts = s3.counts()
        assert result.success
        materialized = len(result.asset_materializations_for_node("events"))
        output = output_seconds(instance, result.run_id)
    rows = stored_rows(system, root, s3.server_endpoint)
    if system != "nothing" and rows != days * ROWS_PER_DAY:
        raise AssertionError(f"{system}: {rows} rows stored, expected {days * ROWS_PER_DAY}")
    return {
        "seconds": seconds,
        "output": output,
        "requests": counts,
        "materializations": materialized,
        "rows": rows,
    }


def fmt_requests(counts: dict[str, int]) -> str:
    parts = ", ".join(f"{k} {counts[k]}" for k in KINDS if counts.get(k))
    return f"{counts.get('total', 0):,} ({parts})" if parts else "0"


def markdown(best: dict[str, dict[str, Any]], runs: dict[str, list[float]], days: int) -> str:
    lines = [
        "| IO manager | run s | output s | requests | runs (s) | run / Delta's |",
        "|---|---:|---:|---|---|---:|",
    ]
    delta = best.get("delta")
    for system, r in best.items():
        ratio = f"{r['seconds'] / delta['seconds']:.2f}" if delta and system != "nothing" else ""
        lines.append(
            f"| {system} | {r['seconds']:.2f} | {r['output']:.2f} | "
            f"{fmt_requests(r['requests'])} | {', '.join(f'{s:.2f}' for s in runs[system])} | "
            f"{ratio} |"
        )
    return "\n".join(lines)


def versions() -> dict[str, str]:
    return installed_versions(
        (
            "dagster-lance-partitioned",
            "pylance",
            "dagster",
            "dagster-deltalake",
            "deltalake",
            "moto",
            "localbucket",
        )
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--rows-per-partition", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--server", choices=SERVERS, default="moto")
    ap.add_argument("--systems", type=lambda t: t.split(","), default=list(SYSTEMS))
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    bad = [s for s in args.systems if s not in SYSTEMS]
    if bad or args.days < 1 or args.repeat < 1:
        ap.error(f"--systems from {','.join(SYSTEMS)}; --days, --repeat positive (got {bad})")
    return args


def main(argv: list[str] | None = None) -> None:
    global ROWS_PER_DAY
    args = parse_args(argv)
    ROWS_PER_DAY = args.rows_per_partition
    os.environ.setdefault("DAGSTER_HOME", tempfile.mkdtemp(prefix="dlp-bench-dagster-"))
    # deltalake: commits put-if-absent (If-None-Match: *), as in bench_object_store.py
    os.environ.setdefault("AWS_CONDITIONAL_PUT", "etag")
    command = "python bench/bench_dagster_object_store.py " + " ".join(sys.argv[1:])
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in args.systems}
    with S3ProxyProcess(args.latency_ms / 1000, server=args.server) as s3:
        for system in args.systems:  # warm-up: imports, clients, Dagster's first run
            one_run(s3, system, 2)
        for _ in range(args.repeat):  # interleaved, so drift hits every system alike
            for system in args.systems:
                r = one_run(s3, system, args.days)
                results[system].append(r)
                print(
                    f"  {system:<8} {r['seconds']:7.2f} s  output "
                    f"{r['output']:6.2f} s  {fmt_requests(r['requests'])}",
                    flush=True,
                )
    best = {s: min(rs, key=lambda r: r["seconds"]) for s, rs in results.items()}
    runs = {s: [r["seconds"] for r in rs] for s, rs in results.items()}
    info = versions()
    print()
    print(
        f"`{command}`: {args.server} behind the proxy, {args.latency_ms:g} ms per request, "
        f"{args.days} daily keys of {args.rows_per_partition} rows in one run, best of "
        f"{args.repeat}; " + ", ".join(f"{k} {v}" for k, v in info.items())
    )
    print()
    print(markdown(best, runs, args.days))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"command": command, "versions": info, "results": results}, fh, indent=1)


if __name__ == "__main__":
    main()
