"""Retention in the maintenance job: rows older than N days (by a date or timestamp column) or
matching a filter are deleted from real namespaces by the real job on a real Dagster instance,
in one manifest commit per namespace; the count deleted is recorded per asset (observation and
the op's output metadata); the commits are the job's own (the external change sensor ignores
them); a bad rule deletes nothing."""

import datetime as dt
import json
import os
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.ops.history import commits
from dagster_lance_partitioned.orchestration import (
    LancePartitionedIOManager,
    MaintenanceConfig,
    RetentionRule,
    build_lance_external_change_sensor,
    build_lance_maintenance_job,
)
from dagster_lance_partitioned.orchestration.maintenance import MAINTENANCE_SOURCE

TODAY = dt.datetime.now(dt.UTC).date()
DAYS_AGO = (12, 9, 5, 1)  # the days materialized, before today
DAILY = dg.DailyPartitionsDefinition(start_date=(TODAY - dt.timedelta(days=30)).isoformat())
NOW = dt.datetime.now(dt.UTC)


def day(ago: int) -> dt.date:
    return TODAY - dt.timedelta(days=ago)


@dg.asset(partitions_def=DAILY, metadata={"partition_expr": "day"})
def events(context: dg.AssetExecutionContext) -> pa.Table:
    d = dt.date.fromisoformat(context.partition_key)
    return pa.table(
        {"id": [d.toordinal() * 10 + i for i in range(3)], "day": [d] * 3, "v": [1.0, 2.0, 3.0]}
    )


@dg.asset(metadata={"lance/partition_by": ["level"]})
def logs() -> pa.Table:
    at = [NOW - dt.timedelta(days=d) for d in (40, 20, 2, 1)]
    return pa.table(
        {
            "at": pa.array(at, pa.timestamp("us", tz="UTC")),
            "level": ["info", "debug", "debug", "info"],
            "msg": ["a", "b", "c", "d"],
        }
    )


@pytest.fixture
def lake(tmp_path) -> tuple[LancePartitionedIOManager, dg.DagsterInstance]:
    io = LancePartitionedIOManager(root=str(tmp_path / "lake"))
    instance = dg.DagsterInstance.ephemeral()
    for ago in DAYS_AGO:
        assert dg.materialize(
            [events], instance=instance, partition_key=day(ago).isoformat(),
            resources={"io_manager": io},
        ).success  # fmt: skip
    assert dg.materialize([logs], instance=instance, resources={"io_manager": io}).success
    return io, instance


def ns_of(io: LancePartitionedIOManager, name: str) -> PartitionedNamespace:
    return PartitionedNamespace.open(io.uri_for(dg.AssetKey(name)))


def observations(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    out = {}
    for e in result.all_events:
        if e.event_type_value == "ASSET_OBSERVATION":
            obs = e.event_specific_data.asset_observation
            out[obs.asset_key.to_user_string()] = {k: v.value for k, v in obs.metadata.items()}
    return out


def output_metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    [out] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in out.event_specific_data.metadata.items()}


def test_retention_deletes_old_rows_and_records_the_count(lake):
    io, instance = lake
    job = build_lance_maintenance_job(
        [events, logs],
        io,
        defaults=MaintenanceConfig(
            retention={
                "events": RetentionRule(column="day", older_than_days=7),
                "logs": RetentionRule(filter="level = 'debug'"),
            }
        ),
    )
    versions = {name: ns_of(io, name).version for name in ("events", "logs")}
    result = job.execute_in_process(instance=instance)
    assert result.success

    # events: the days 12 and 9 days ago are gone (whole partitions, deregistered)
    kept = ns_of(io, "events").to_table()
    assert sorted(set(kept["day"].to_pylist())) == [day(5), day(1)]
    assert kept.num_rows == 6
    registered = sorted(
        v for p in ns_of(io, "events").inspect.partitions() for v in p["values"].values()
    )
    assert registered == [day(5), day(1)]
    assert sorted(ns_of(io, "logs").to_table()["msg"].to_pylist()) == ["a", "d"]
    seen = observations(result)
    assert seen["events"]["lance/rows_deleted"] == 6
    assert seen["logs"]["lance/rows_deleted"] == 2
    done = seen["events"]["lance/maintenance"]["retention"]
    assert done["rows_deleted"] == 6 and done["committed"] is True
    assert done["partitions_removed"] == sorted([day(12).isoformat(), day(9).isoformat()])
    assert done["filter"] == f"`day` < DATE '{day(7).isoformat()}'"
    assert seen["logs"]["lance/maintenance"]["retention"]["partitions_removed"] == ["level=debug"]
    assert output_metadata(result)["lance/rows_deleted"] == {"events": 6, "logs": 2}

    # one retention commit per namespace, made by the maintenance job (not "external")
    for name, before in versions.items():
        found = [
            c for c in commits(io.uri_for(dg.AssetKey(name)), before) if c.operation == "delete"
        ]
        assert len(found) == 1 and found[0].source == MAINTENANCE_SOURCE
    sensor = build_lance_external_change_sensor([events, logs], io)
    defs = dg.Definitions(assets=[events, logs], sensors=[sensor])
    cursor = dict(versions)
    with dg.build_sensor_context(
        instance=instance, cursor=json.dumps(cursor), definitions=defs
    ) as context:
        tick = sensor(context)
    assert not tick.asset_events and not tick.run_requests

    # run config as the launchpad gives it: a shorter retention deletes one more day
    again = job.execute_in_process(
        instance=instance,
        run_config={
            "ops": {
                "lance_maintenance_op": {
                    "config": {"retention": {"events": {"column": "day", "older_than_days": 3}}}
                }
            }
        },
    )
    assert again.success
    assert observations(again)["events"]["lance/rows_deleted"] == 3
    assert "lance/rows_deleted" not in observations(again)["logs"]
    assert sorted(set(ns_of(io, "events").to_table()["day"].to_pylist())) == [day(1)]


def test_retention_by_timestamp_age(lake):
    io, instance = lake
    rule = RetentionRule(column="at", older_than_days=10)
    job = build_lance_maintenance_job(
        [logs], io, defaults=MaintenanceConfig(retention={"logs": rule})
    )
    result = job.execute_in_process(instance=instance)
    assert result.success
    assert observations(result)["logs"]["lance/rows_deleted"] == 2
    assert sorted(ns_of(io, "logs").to_table()["msg"].to_pylist()) == ["c", "d"]


@pytest.mark.parametrize(
    ("rule", "named"),
    [
        (RetentionRule(column="v", older_than_days=3), "'v' is double"),
        (RetentionRule(column="nope", older_than_days=3), "'nope'"),
        (RetentionRule(filter="v > 1", column="day", older_than_days=3), "either"),
        (RetentionRule(), "either"),
    ],
)
def test_a_bad_retention_rule_deletes_nothing(lake, rule, named):
    io, instance = lake
    before = sorted(ns_of(io, "events").to_table()["id"].to_pylist())
    job = build_lance_maintenance_job(
        [events], io, defaults=MaintenanceConfig(retention={"events": rule})
    )
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    err = result.get_step_failure_events()[0].step_failure_data.error
    found = []
    while err is not None:
        found.append((err.cls_name, err.message))
        err = err.cause
    [message] = [m for cls, m in found if cls == "RetentionRuleError"]
    assert named in message and "events" in message
    assert sorted(ns_of(io, "events").to_table()["id"].to_pylist()) == before


def test_retention_of_an_asset_the_job_does_not_maintain_is_refused(lake):
    io, instance = lake
    job = build_lance_maintenance_job(
        [events], io, defaults=MaintenanceConfig(retention={"evnts": RetentionRule(filter="TRUE")})
    )
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    assert os.path.isdir(io.uri_for(dg.AssetKey("events")))
    assert ns_of(io, "events").count_rows() == 3 * len(DAYS_AGO)
