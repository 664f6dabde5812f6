"""The external-change sensor: commits made outside the IO manager (core writes, Spark jobs)
become runless materializations of exactly their partitions plus downstream run requests; the
cursor makes it exactly-once across ticks and restarts. Evaluated through Dagster's own APIs
(``build_sensor_context`` with real Definitions), with its results applied to a real instance."""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg
import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.ops.history import commits
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager
from dagster_lance_partitioned.orchestration.sensors import build_lance_external_change_sensor

daily = dg.DailyPartitionsDefinition(start_date="2013-01-01", end_date="2013-03-01")
by_origin = dg.MultiPartitionsDefinition(
    {"date": daily, "origin": dg.StaticPartitionsDefinition(["EWR", "JFK"])}
)
SCHEMA = pa.schema([("day", pa.date32()), ("origin", pa.utf8()), ("v", pa.int64())])


def rows(*pairs: tuple[str, str], v: int = 1) -> pa.Table:
    return pa.table(
        {
            "day": [dt.date.fromisoformat(d) for d, _ in pairs],
            "origin": [o for _, o in pairs],
            "v": [v] * len(pairs),
        },
        schema=SCHEMA,
    )


@dg.asset(
    partitions_def=by_origin, metadata={"partition_expr": {"date": "day", "origin": "origin"}}
)
def flights(context) -> pa.Table:
    k = context.partition_key.keys_by_dimension
    return rows((k["date"], k["origin"]))


@dg.asset(
    partitions_def=daily,
    metadata={"partition_expr": "day"},
    ins={
        # Dagster infers the mapping of a day to that day's keys of every origin from the two
        # partitions definitions (spelling out its beta MultiToSingleDimensionPartitionMapping
        # only added a BetaWarning at import)
        "flights": dg.AssetIn(
            # a day of the origins there are: external writers may fill only some of them
            metadata={"lance/allow_missing_partitions": True},
        )
    },
)
def per_day(flights: pa.Table) -> pa.Table:
    return flights


@dg.asset
def summary(flights: pa.Table) -> None:
    """Unpartitioned downstream (returns nothing, so it stores nothing)."""


class Harness:
    """Definitions with the sensor, a real instance, and ticks that carry the cursor."""

    def __init__(self, root: str, instance: dg.DagsterInstance) -> None:
        self.io = LancePartitionedIOManager(root=root)
        self.instance = instance
        self.cursor: str | None = None
        self.rebuild()

    def rebuild(self) -> None:
        """New sensor and Definitions objects, as after a code-location restart."""
        self.sensor = build_lance_external_change_sensor([flights], self.io)
        self.defs = dg.Definitions(
            assets=[flights, per_day, summary],
            sensors=[self.sensor],
            resources={"io_manager": self.io},
        )

    def tick(self) -> dg.SensorResult:
        ctx = dg.build_sensor_context(
            instance=self.instance, definitions=self.defs, cursor=self.cursor
        )
        result = self.sensor(ctx)
        self.cursor = result.cursor
        return result

    def materialize(self, key: str) -> None:
        assert dg.materialize(
            [flights], instance=self.instance, partition_key=key, resources={"io_manager": self.io}
        ).success

    @property
    def ns(self) -> PartitionedNamespace:
        return PartitionedNamespace.open(self.io.uri_for(dg.AssetKey("flights")))


@pytest.fixture
def h(tmp_path) -> Harness:
    return Harness(str(tmp_path / "lake"), dg.DagsterInstance.ephemeral())


def requested(result: dg.SensorResult) -> list[tuple[str, str | None]]:
    return sorted(
        (r.asset_selection[0].to_user_string(), r.partition_key) for r in result.run_requests or []
    )


def test_external_core_write_is_reported_once_with_downstream_runs(h):
    h.materialize("2013-01-02|EWR")
    first = h.tick()
    assert not first.asset_events and not first.run_requests  # starts watching from now
    assert json.loads(first.cursor) == {"flights": h.ns.version}

    h.ns.write(rows(("2013-01-05", "EWR"), ("2013-01-05", "JFK"), ("2013-01-07", "JFK")))
    second = h.tick()
    got = sorted(e.partition for e in second.asset_events)
    assert got == ["2013-01-05|EWR", "2013-01-05|JFK", "2013-01-07|JFK"]
    assert all(e.metadata["lance/external"].value for e in second.asset_events)
    # per_day maps both airports of a day to that day; summary is unpartitioned: one run
    assert requested(second) == [
        ("per_day", "2013-01-05"),
        ("per_day", "2013-01-07"),
        ("summary", None),
    ]
    assert len({r.run_key for r in second.run_requests}) == len(second.run_requests)

    third = h.tick()
    assert not third.asset_events and not third.run_requests


def test_io_manager_commits_are_not_reported(h):
    h.materialize("2013-01-02|EWR")
    h.tick()
    h.materialize("2013-01-03|JFK")
    h.materialize("2013-01-02|EWR")  # a re-materialization too
    result = h.tick()
    assert not result.asset_events and not result.run_requests
    assert json.loads(result.cursor) == {"flights": h.ns.version}


def test_restart_resumes_from_the_cursor_exactly_once(h):
    h.materialize("2013-01-02|EWR")
    h.tick()
    h.ns.write(rows(("2013-01-09", "EWR")))
    h.rebuild()  # a new code location process: only the cursor survives
    assert [e.partition for e in h.tick().asset_events] == ["2013-01-09|EWR"]
    h.rebuild()
    assert not h.tick().asset_events
    h.ns.write(rows(("2013-01-09", "EWR")), mode="overwrite_partitions")  # a replacement
    assert [e.partition for e in h.tick().asset_events] == ["2013-01-09|EWR"]


def test_results_applied_to_a_real_instance_materialize_exactly_the_changed_partitions(h):
    h.materialize("2013-01-02|EWR")
    h.tick()
    h.ns.write(rows(("2013-01-20", "JFK"), ("2013-01-21", "EWR")))
    result = h.tick()
    for event in result.asset_events:  # what the sensor daemon does with a SensorResult
        h.instance.report_runless_asset_event(event)
    for request in result.run_requests:
        if request.partition_key is None:
            continue
        assert dg.materialize(
            [flights, per_day],
            selection=request.asset_selection,
            partition_key=request.partition_key,
            instance=h.instance,
            resources={"io_manager": h.io},
        ).success
    materialized = h.instance.get_materialized_partitions(dg.AssetKey("flights"))
    assert materialized == {"2013-01-02|EWR", "2013-01-20|JFK", "2013-01-21|EWR"}
    assert h.instance.get_materialized_partitions(dg.AssetKey("per_day")) == {
        "2013-01-20",
        "2013-01-21",
    }
    out = PartitionedNamespace.open(h.io.uri_for(dg.AssetKey("per_day"))).to_table()
    assert sorted(out["day"].to_pylist()) == [dt.date(2013, 1, 20), dt.date(2013, 1, 21)]
    assert not h.tick().asset_events


def test_external_spark_write_is_reported(h, spark):
    from dagster_lance_partitioned.spark import write_dataframe

    h.materialize("2013-01-02|EWR")
    h.tick()
    df = spark.createDataFrame(rows(("2013-02-01", "JFK"), ("2013-02-02", "JFK")))
    write_dataframe(df, h.ns.uri, mode="append")
    result = h.tick()
    assert sorted(e.partition for e in result.asset_events) == ["2013-02-01|JFK", "2013-02-02|JFK"]
    assert requested(result)[:2] == [("per_day", "2013-02-01"), ("per_day", "2013-02-02")]


def test_history_lists_what_each_commit_changed(h):
    h.materialize("2013-01-02|EWR")
    start = h.ns.version
    h.ns.write(rows(("2013-01-05", "EWR")))
    h.ns.write(rows(("2013-01-05", "EWR"), ("2013-01-06", "JFK")), mode="overwrite_partitions")
    got = list(commits(h.ns.uri, start))
    assert [c.version for c in got] == [start + 1, start + 2]
    assert [(c.kind, c.values["origin"]) for c in got[0].changes] == [("added", "EWR")]
    kinds = sorted((c.kind, c.values["day_day"].isoformat()) for c in got[1].changes)
    assert kinds == [("added", "2013-01-06"), ("updated", "2013-01-05")]
    assert got[1].operation == "write" and got[1].source is None
