"""The per-partition Lance checks (``partitioned_checks=True``): partitioned asset checks that a
run evaluates for each of its partition keys on only that key's partition tables, so the
instance (and the UI) holds a check state per partition, next to the whole-namespace checks.
Real Dagster runs with an instance, real Lance tables broken on purpose with plain pylance;
check states are read back through the instance's event log storage."""

import datetime as dt
import os
import shutil
import warnings

import dagster as dg
import lance
import pyarrow as pa
import pytest
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)
from helpers.dagster_runs import range_tags

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit, ManifestStore
from dagster_lance_partitioned.orchestration import (
    LancePartitionedIOManager,
    LancePartitionedResource,
    build_lance_partitioned_checks,
)

# backfill policies are beta in Dagster 1.13
pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

DAILY = dg.DailyPartitionsDefinition(start_date="2013-01-01", end_date="2013-02-01")
ORIGINS = dg.StaticPartitionsDefinition(["EWR", "JFK", "LGA"])
BOX = dg.MultiPartitionsDefinition({"date": DAILY, "origin": ORIGINS})
SCHEMA = pa.schema([("day", pa.date32()), ("origin", pa.utf8()), ("v", pa.int64())])
SCHEMA_CHECK = "lance_schema_consistency_per_partition"
VERSION_CHECK = "lance_read_version_consistency_per_partition"
INTEGRITY_CHECK = "lance_integrity_per_partition"
PER_PARTITION = {SCHEMA_CHECK, VERSION_CHECK, INTEGRITY_CHECK}
WHOLE = {
    "lance_schema_consistency",
    "lance_read_version_consistency",
    "lance_partition_integrity",
    "lance_dagster_coverage",
}


def day_rows(day: str, n: int = 3, origin: str = "EWR") -> pa.Table:
    date = dt.date.fromisoformat(day)
    return pa.table({"day": [date] * n, "origin": [origin] * n, "v": list(range(n))}, SCHEMA)


@dg.asset(
    partitions_def=DAILY,
    metadata={"partition_expr": "day"},
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def events(context: dg.AssetExecutionContext) -> pa.Table:
    return pa.concat_tables([day_rows(k) for k in context.partition_keys])


@dg.asset(
    partitions_def=BOX,
    metadata={"partition_expr": {"date": "day", "origin": "origin"}},
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def flights(context: dg.AssetExecutionContext) -> pa.Table:
    parts = [k.keys_by_dimension for k in context.partition_keys]
    return pa.concat_tables([day_rows(p["date"], 2, p["origin"]) for p in parts])


@dg.asset(metadata={"lance/partition_by": ["origin"]})
def airports() -> pa.Table:
    return day_rows("2013-01-01")


class Lake:
    """An instance, the storage of one test, and runs of ``events`` with its checks."""

    def __init__(self, root: str, **options) -> None:
        self.lance = LancePartitionedResource(root=root)
        self.io = LancePartitionedIOManager(root=root)
        self.instance = dg.DagsterInstance.ephemeral()
        options.setdefault("integrity_sample", None)
        self.checks = build_lance_partitioned_checks(
            [events], self.lance, partitioned_checks=True, **options
        )

    def run(
        self,
        key: str | None = None,
        range_: tuple[str, str] | None = None,
        selection: dg.AssetSelection | None = None,
        assets: list | None = None,
    ) -> dg.ExecuteInProcessResult:
        tags = range_tags(range_)
        if tags is None and key is not None and selection is not None:
            # a run of checks: the key as a tag
            tags, key = {PARTITION_NAME_TAG: key}, None
        return dg.materialize(
            [*(assets or [events]), *self.checks],
            selection=selection,
            instance=self.instance,
            partition_key=key,
            tags=tags,
            resources={"io_manager": self.io},
            raise_on_error=False,
        )

    def check_only(self, names: set[str], **kwargs) -> dg.ExecuteInProcessResult:
        keys = [dg.AssetCheckKey(events.key, n) for n in sorted(names)]
        return self.run(selection=dg.AssetSelection.checks(*keys), **kwargs)

    @property
    def ns(self) -> PartitionedNamespace:
        return self.lance.namespace(events.key)

    def table(self, key: str) -> dict:
        return next(
            p for p in self.ns.inspect.partitions() if p["values"]["day_day"].isoformat() == key
        )

    def table_uri(self, key: str) -> str:
        return os.path.join(self.ns.uri, self.table(key)["location"])

    def repin(self, key: str, version: int) -> None:
        """Point the manifest's read_version of ``key``'s table at ``version`` (as a foreign
        tool would)."""
        ns = self.ns
        oid = self.table(key)["object_id"]

        def plan(snap: ManifestSnapshot) -> ManifestEdit:
            edit = ManifestEdit()
            edit.upserts[oid] = {"read_version": version}
            return edit

        ManifestStore(ns.uri).commit(lambda ds: ManifestSnapshot(ds, ns.specs), plan)


def per_key(result: dg.ExecuteInProcessResult) -> dict[tuple[str, str], dg.AssetCheckEvaluation]:
    """The run's per-partition evaluations by (check name, partition key)."""
    out = {}
    for e in result.get_asset_check_evaluations():
        if e.check_name in PER_PARTITION:
            assert e.partition is not None
            assert (e.check_name, e.partition) not in out
            out[(e.check_name, e.partition)] = e
    return out


def states(
    instance: dg.DagsterInstance,
    name: str,
    asset: dg.AssetKey = events.key,
    pdef: dg.PartitionsDefinition = DAILY,
) -> dict[str, str]:
    """Partition key -> the check's state as the instance resolves it (what the UI shows)."""
    key = dg.AssetCheckKey(asset, name)
    state = instance.event_log_storage.get_asset_check_state([(key, pdef)])[key]
    return {
        str(k): status.value
        for status, subset in state.subsets.items()
        for k in subset.subset_value.get_partition_keys()
    }


def current_targets(instance: dg.DagsterInstance, name: str) -> dict[str, bool]:
    """Partition key -> whether its latest check execution targets its latest materialization."""
    infos = instance.event_log_storage.get_asset_check_partition_info(
        [dg.AssetCheckKey(events.key, name)]
    )
    return {
        str(i.partition_key): i.is_current
        and i.latest_target_materialization_storage_id is not None
        for i in infos
    }


def value(evaluation: dg.AssetCheckEvaluation, key: str):
    return evaluation.metadata[key].value


def test_per_partition_checks_are_an_option_and_build_without_warnings(tmp_path):
    lance_ = LancePartitionedResource(root=str(tmp_path))
    plain = build_lance_partitioned_checks([events, airports], lance_)
    assert {s.name for c in plain for s in c.check_specs} == WHOLE
    assert all(s.partitions_def is None for c in plain for s in c.check_specs)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        both = build_lance_partitioned_checks([events, airports], lance_, partitioned_checks=True)
    # Dagster 1.13 warns about partitioned check specs (a preview feature); opted in, the
    # factory keeps that warning out of every load of the definitions
    assert [str(w.message) for w in caught] == []
    assert len(both) == 3  # events' two steps, airports' one (it has no partitions)
    partitioned = [s for c in both for s in c.check_specs if s.partitions_def is not None]
    assert {s.name for s in partitioned} == PER_PARTITION
    assert {s.asset_key for s in partitioned} == {events.key}
    assert all(s.partitions_def == DAILY for s in partitioned)

    only = build_lance_partitioned_checks(
        [events], lance_, checks=["schema", "coverage"], partitioned_checks=True
    )
    names = {s.name for c in only for s in c.check_specs}
    assert names == {"lance_schema_consistency", "lance_dagster_coverage", SCHEMA_CHECK}


def test_each_materialized_key_gets_a_check_state_of_its_own(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    for key in ["2013-01-02", "2013-01-05", "2013-01-09"]:
        result = lake.run(key=key)
        assert result.success
        got = per_key(result)
        assert set(got) == {(n, key) for n in PER_PARTITION}  # only the run's key
        assert all(e.passed for e in got.values()), {k: e.description for k, e in got.items()}
        assert {e.check_name for e in result.get_asset_check_evaluations()} >= WHOLE
        assert value(got[(SCHEMA_CHECK, key)], "partitions_checked") == 1
        assert value(got[(VERSION_CHECK, key)], "tables_checked") == 1
        assert value(got[(INTEGRITY_CHECK, key)], "partitions_checked") == 1

    for name in PER_PARTITION:
        assert states(lake.instance, name) == {
            "2013-01-02": "SUCCEEDED",
            "2013-01-05": "SUCCEEDED",
            "2013-01-09": "SUCCEEDED",
        }
        assert current_targets(lake.instance, name) == {
            "2013-01-02": True,
            "2013-01-05": True,
            "2013-01-09": True,
        }


def test_a_range_run_evaluates_every_key_of_the_run(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    result = lake.run(range_=("2013-01-10", "2013-01-14"))
    assert result.success
    keys = [f"2013-01-{d}" for d in range(10, 15)]
    got = per_key(result)
    assert set(got) == {(n, k) for n in PER_PARTITION for k in keys}
    assert all(e.passed for e in got.values())
    for key in keys:
        # the evaluation targets that key's materialization (of this run)
        [record] = lake.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=events.key, asset_partitions=[key]), limit=1
        ).records
        target = got[(SCHEMA_CHECK, key)].target_materialization_data
        assert target is not None and target.storage_id == record.storage_id
        assert target.run_id == result.run_id
    for name in PER_PARTITION:
        assert states(lake.instance, name) == dict.fromkeys(keys, "SUCCEEDED")
        assert all(current_targets(lake.instance, name).values())


def test_a_wrong_column_type_fails_only_that_keys_schema_check(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    assert lake.run(range_=("2013-01-02", "2013-01-04")).success
    bad = pa.table({"day": [dt.date(2013, 1, 3)], "origin": ["EWR"], "v": ["not a number"]})
    lake.repin(
        "2013-01-03",
        lance.write_dataset(bad, lake.table_uri("2013-01-03"), mode="overwrite").version,
    )

    result = lake.check_only(PER_PARTITION, range_=("2013-01-02", "2013-01-04"))
    got = per_key(result)
    assert not got[(SCHEMA_CHECK, "2013-01-03")].passed
    offenders = value(got[(SCHEMA_CHECK, "2013-01-03")], "offenders")
    assert [(o["partition"], o["column"]) for o in offenders] == [("2013-01-03", "v")]
    assert got[(SCHEMA_CHECK, "2013-01-02")].passed and got[(SCHEMA_CHECK, "2013-01-04")].passed
    assert states(lake.instance, SCHEMA_CHECK) == {
        "2013-01-02": "SUCCEEDED",
        "2013-01-03": "FAILED",
        "2013-01-04": "SUCCEEDED",
    }


def test_a_key_is_checked_on_its_own_tables_only(tmp_path):
    """A table of another key that is gone fails the whole-namespace check and that key's
    per-partition check, never the checked key's."""
    lake = Lake(str(tmp_path / "lake"))
    assert lake.run(range_=("2013-01-02", "2013-01-03")).success
    shutil.rmtree(lake.table_uri("2013-01-02"))

    result = lake.run(key="2013-01-03", selection=dg.AssetSelection.checks_for_assets(events))
    whole = {e.check_name: e for e in result.get_asset_check_evaluations() if e.partition is None}
    assert not whole["lance_read_version_consistency"].passed  # sees every table
    got = per_key(result)
    assert set(got) == {(n, "2013-01-03") for n in PER_PARTITION}
    assert all(e.passed for e in got.values()), {k: e.description for k, e in got.items()}

    result = lake.check_only({VERSION_CHECK}, key="2013-01-02")
    [failed] = per_key(result).values()
    assert not failed.passed and failed.partition == "2013-01-02"
    assert [(u["partition"], u["problem"]) for u in value(failed, "unreadable")] == [
        ("2013-01-02", "missing table")
    ]
    assert states(lake.instance, VERSION_CHECK) == {
        "2013-01-02": "FAILED",
        "2013-01-03": "SUCCEEDED",
    }


def test_an_uncommitted_write_and_a_stray_row_fail_that_keys_checks(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    assert lake.run(range_=("2013-01-02", "2013-01-04")).success
    # 01-02: a version appended to its table that no manifest commit references
    pending = lance.write_dataset(
        day_rows("2013-01-02", 1), lake.table_uri("2013-01-02"), mode="append"
    )
    # 01-04: a row of 01-20 in its table, pinned
    stray = lance.write_dataset(
        day_rows("2013-01-20", 1), lake.table_uri("2013-01-04"), mode="append"
    )
    lake.repin("2013-01-04", stray.version)

    got = per_key(lake.check_only(PER_PARTITION, range_=("2013-01-02", "2013-01-04")))
    versions = {k: got[(VERSION_CHECK, k)] for k in ["2013-01-02", "2013-01-03", "2013-01-04"]}
    assert [k for k, e in versions.items() if not e.passed] == ["2013-01-02"]
    assert [u["uncommitted_versions"] for u in value(versions["2013-01-02"], "uncommitted")] == [
        [pending.version]
    ]
    integrity = {k: got[(INTEGRITY_CHECK, k)] for k in ["2013-01-02", "2013-01-03", "2013-01-04"]}
    assert [k for k, e in integrity.items() if not e.passed] == ["2013-01-04"]
    offenders = value(integrity["2013-01-04"], "offenders")
    assert [(o["partition"], o["rows_in_wrong_partition"]) for o in offenders] == [
        ("2013-01-04", 1)
    ]
    assert states(lake.instance, INTEGRITY_CHECK) == {
        "2013-01-02": "SUCCEEDED",
        "2013-01-03": "SUCCEEDED",
        "2013-01-04": "FAILED",
    }


def test_a_blocking_per_partition_check_stops_downstream_in_the_same_run(tmp_path):
    lake = Lake(str(tmp_path / "lake"), checks=["read_versions"], blocking=True)
    assert lake.run(key="2013-01-03").success
    lance.write_dataset(day_rows("2013-01-03", 1), lake.table_uri("2013-01-03"), mode="append")

    @dg.asset(partitions_def=DAILY, metadata={"partition_expr": "day"})
    def downstream(events: pa.Table) -> pa.Table:
        return events

    checks = dg.AssetSelection.checks(dg.AssetCheckKey(events.key, VERSION_CHECK))
    result = lake.run(
        key="2013-01-03",
        selection=checks | dg.AssetSelection.assets(downstream),
        assets=[events, downstream],
    )
    assert not result.success
    [failed] = per_key(result).values()
    assert not failed.passed and failed.blocking and failed.partition == "2013-01-03"
    assert result.get_asset_materialization_events() == []  # downstream never ran
    assert states(lake.instance, VERSION_CHECK) == {"2013-01-03": "FAILED"}

    # the same run of a healthy key lets downstream through (the whole-namespace check would
    # not: it sees 01-03's table)
    healthy = dg.AssetSelection.assets(events).without_checks()
    assert lake.run(key="2013-01-05", selection=healthy).success
    result = lake.run(
        key="2013-01-05",
        selection=checks | dg.AssetSelection.assets(downstream),
        assets=[events, downstream],
    )
    assert result.success
    assert [e.asset_key for e in result.get_asset_materialization_events()] == [downstream.key]


def test_multi_partition_keys_each_get_a_state(tmp_path):
    root = str(tmp_path / "lake")
    checks = build_lance_partitioned_checks(
        [flights], LancePartitionedResource(root=root), checks=["schema"], partitioned_checks=True
    )
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [flights, *checks],
        instance=instance,
        tags={
            ASSET_PARTITION_RANGE_START_TAG: "2013-01-02|EWR",
            ASSET_PARTITION_RANGE_END_TAG: "2013-01-03|LGA",
        },
        resources={"io_manager": LancePartitionedIOManager(root=root)},
    )
    assert result.success
    keys = [f"2013-01-0{d}|{o}" for d in (2, 3) for o in ("EWR", "JFK", "LGA")]
    got = {
        e.partition: e for e in result.get_asset_check_evaluations() if e.check_name == SCHEMA_CHECK
    }
    assert sorted(got) == keys and all(e.passed for e in got.values())
    assert all(value(e, "partitions_checked") == 1 for e in got.values())
    assert states(instance, SCHEMA_CHECK, flights.key, BOX) == dict.fromkeys(keys, "SUCCEEDED")


def test_a_key_never_written_passes_as_nothing_stored(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    result = lake.check_only(PER_PARTITION, key="2013-01-07")
    got = per_key(result)
    assert set(got) == {(n, "2013-01-07") for n in PER_PARTITION}
    assert all(e.passed and e.description == "nothing stored yet" for e in got.values())
    # a stored namespace, but no table for this key: nothing to check there, and said so
    assert lake.run(key="2013-01-02").success
    got = per_key(lake.check_only(PER_PARTITION, key="2013-01-07"))
    assert all(e.passed for e in got.values())
    assert {e.description for e in got.values()} == {"no partition table holds rows of this key"}
    assert value(got[(SCHEMA_CHECK, "2013-01-07")], "partitions_checked") == 0
    record = lake.instance.get_latest_asset_check_evaluation_record(
        dg.AssetCheckKey(events.key, SCHEMA_CHECK)
    )
    assert record is not None and record.status == AssetCheckExecutionRecordStatus.SUCCEEDED
