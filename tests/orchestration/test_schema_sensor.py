"""The schema-evolution sensor (evaluated with ``build_sensor_context`` on real Definitions,
across ticks) and the maintenance job (a real Dagster run): schema changes are recorded with the
new column schema, drifted partition tables are adopted or reported, maintenance keeps the data."""

from __future__ import annotations

import datetime as dt
import os

import dagster as dg
import lance
import pyarrow as pa
import pytest
from helpers.data import sorted_rows

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit, ManifestStore
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager
from dagster_lance_partitioned.orchestration.maintenance import (
    build_lance_maintenance_job,
    build_lance_maintenance_schedule,
)
from dagster_lance_partitioned.orchestration.sensors import (
    build_lance_schema_sensor,
    schema_changes,
)

daily = dg.DailyPartitionsDefinition(start_date="2013-01-01", end_date="2013-02-01")
SCHEMA = pa.schema([("day", pa.date32()), ("v", pa.int32())])


def day_rows(day: str, n: int = 2) -> pa.Table:
    return pa.table({"day": [dt.date.fromisoformat(day)] * n, "v": list(range(n))}, schema=SCHEMA)


@dg.asset(partitions_def=daily, metadata={"partition_expr": "day"})
def events(context) -> pa.Table:
    return day_rows(context.partition_key)


class Lake:
    def __init__(self, root: str, **sensor_kw) -> None:
        self.io = LancePartitionedIOManager(root=root)
        self.instance = dg.DagsterInstance.ephemeral()
        self.sensor = build_lance_schema_sensor([events], self.io, **sensor_kw)
        self.defs = dg.Definitions(
            assets=[events], sensors=[self.sensor], resources={"io_manager": self.io}
        )
        self.cursor: str | None = None

    def materialize(self, key: str) -> None:
        assert dg.materialize(
            [events], instance=self.instance, partition_key=key, resources={"io_manager": self.io}
        ).success

    def tick(self) -> dg.SensorResult:
        ctx = dg.build_sensor_context(
            instance=self.instance, definitions=self.defs, cursor=self.cursor
        )
        result = self.sensor(ctx)
        self.cursor = result.cursor
        return result

    @property
    def ns(self) -> PartitionedNamespace:
        return PartitionedNamespace.open(self.io.uri_for(dg.AssetKey("events")))

    def drift(self, key: str, table: pa.Table) -> None:
        """Give ``key``'s partition table a new version with ``table`` (as a foreign tool
        would) and pin the manifest to it."""
        ns = self.ns
        entry = next(
            p for p in ns.inspect.partitions() if p["values"]["day_day"].isoformat() == key
        )
        version = lance.write_dataset(
            table, os.path.join(ns.uri, entry["location"]), mode="overwrite"
        ).version

        def plan(snap: ManifestSnapshot) -> ManifestEdit:
            return ManifestEdit(upserts={entry["object_id"]: {"read_version": version}})

        ManifestStore(ns.uri).commit(lambda ds: ManifestSnapshot(ds, ns.specs), plan)


@pytest.fixture
def lake(tmp_path) -> Lake:
    lake = Lake(str(tmp_path / "lake"))
    lake.materialize("2013-01-02")
    lake.materialize("2013-01-03")
    return lake


def columns_of(observation: dg.AssetObservation) -> list[str]:
    return [c.name for c in observation.metadata["dagster/column_schema"].value.columns]


def test_schema_change_is_recorded_once_with_the_new_column_schema(lake):
    assert not lake.tick().asset_events  # first sight: nothing to compare with
    ns = lake.ns
    ns.add_columns(pa.field("gate", pa.utf8()))
    ns.rename_column("v", "value")
    ns.promote_column("value", pa.int64())
    result = lake.tick()
    [obs] = result.asset_events
    assert isinstance(obs, dg.AssetObservation) and obs.asset_key == dg.AssetKey("events")
    assert columns_of(obs) == ["day", "value", "gate"]
    changes = obs.metadata["lance/schema_changes"].value
    assert "added column 'gate' (string)" in changes
    assert "renamed column 'v' to 'value'" in changes
    assert "widened column 'value' from int32 to int64" in changes
    assert not lake.tick().asset_events  # exactly once
    # a data commit without a schema change
    lake.ns.write(
        pa.table({"day": [dt.date(2013, 1, 4)], "value": pa.array([1], pa.int64()), "gate": ["A"]})
    )
    assert not lake.tick().asset_events


def test_nullable_column_added_to_partition_tables_is_adopted(lake):
    lake.tick()
    drifted = day_rows("2013-01-03").append_column("gate", pa.array(["A1", "B2"]))
    lake.drift("2013-01-03", drifted)
    result = lake.tick()
    [obs] = [e for e in result.asset_events if isinstance(e, dg.AssetObservation)]
    assert "gate" in columns_of(obs)
    assert "gate" in lake.ns.schema.names
    got = lake.ns.to_table(columns=["day", "gate"])
    assert sorted(got["gate"].to_pylist(), key=str) == ["A1", "B2", None, None]
    assert not [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
    assert not lake.tick().asset_events


def test_disallowed_drift_fails_the_check_and_requests_the_repair_job(tmp_path):
    lake = Lake(str(tmp_path / "lake"), adopt_added_columns=False, repair_job="repair")
    lake.materialize("2013-01-02")
    lake.tick()
    bad = pa.table({"day": [dt.date(2013, 1, 2)], "v": ["seven"]})  # v is not a number
    lake.drift("2013-01-02", bad)
    result = lake.tick()
    [check] = [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
    assert check.check_name == "lance_schema_consistency" and not check.passed
    offenders = check.metadata["offenders"].value
    assert [o["column"] for o in offenders] == ["v"]
    assert [r.job_name for r in result.run_requests] == ["repair"]
    assert lake.tick().run_requests == []  # not again for the same manifest version


def test_sensor_results_applied_to_the_instance_show_schema_and_failed_check(tmp_path):
    """What the sensor daemon does with a SensorResult: the observation becomes the asset's
    latest column schema, the evaluation the asset's latest (failed) check result."""
    lake = Lake(str(tmp_path / "lake"), adopt_added_columns=False)
    lake.materialize("2013-01-02")
    lake.tick()
    lake.ns.add_columns(pa.field("gate", pa.utf8()))
    lake.drift("2013-01-02", pa.table({"day": [dt.date(2013, 1, 2)], "v": ["x"]}))
    for event in lake.tick().asset_events:
        lake.instance.report_runless_asset_event(event)
    key = dg.AssetKey("events")
    record = lake.instance.fetch_observations(key, limit=1).records[0]
    obs = record.asset_observation
    assert obs is not None and "gate" in columns_of(obs)
    check_key = dg.AssetCheckKey(key, "lance_schema_consistency")
    [latest] = lake.instance.event_log_storage.get_asset_check_execution_history(check_key, 1)
    evaluation = latest.event.dagster_event.event_specific_data
    assert evaluation.passed is False
    assert [o["column"] for o in evaluation.metadata["offenders"].value] == ["v"]


def test_schema_changes_match_columns_by_field_id():
    def with_id(name: str, t: pa.DataType, fid: int) -> pa.Field:
        return pa.field(name, t, metadata={"lance:field_id": str(fid)})

    before = pa.schema([with_id("a", pa.int32(), 0), with_id("b", pa.utf8(), 1)])
    after = pa.schema([with_id("a2", pa.int64(), 0), with_id("c", pa.utf8(), 2)])
    assert schema_changes(before, after) == [
        "renamed column 'a' to 'a2'",
        "widened column 'a2' from int32 to int64",
        "added column 'c' (string)",
        "dropped column 'b'",
    ]


def test_maintenance_job_compacts_cleans_and_keeps_every_row(lake):
    for _ in range(3):  # several appends: several fragments in one table
        lake.ns.write(day_rows("2013-01-02"))
    before = sorted_rows(lake.ns.to_table(), key="v")
    old_version = lake.ns.version
    job = build_lance_maintenance_job([events], lake.io)
    schedule = build_lance_maintenance_schedule(job)
    defs = dg.Definitions(jobs=[job], schedules=[schedule])
    result = defs.get_job_def(job.name).execute_in_process(instance=lake.instance)
    assert result.success
    [obs] = [
        e.event_specific_data.asset_observation
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    done = obs.metadata["lance/maintenance"].value
    assert set(done) == {"compact", "cleanup", "vacuum"}
    assert sorted_rows(lake.ns.to_table(), key="v") == before
    assert lake.ns.version > old_version  # compaction was one more manifest commit
    frags = {
        p["object_id"]: len(
            lance.dataset(
                os.path.join(lake.ns.uri, p["location"]), version=p["read_version"]
            ).get_fragments()
        )
        for p in lake.ns.inspect.partitions()
    }
    assert max(frags.values()) == 1
    assert schedule.cron_schedule == "0 3 * * *"
    # time travel to before the compaction still reads (inside the retention)
    assert PartitionedNamespace.open(lake.ns.uri, version=old_version).count_rows() == len(before)
