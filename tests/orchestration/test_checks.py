"""Asset checks of ``build_lance_partitioned_checks`` run by real Dagster runs: each passes on a
healthy namespace and fails, naming the fault, on one broken on purpose with plain pylance."""

from __future__ import annotations

import datetime as dt
import os
import time

import dagster as dg
import lance
import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit, ManifestStore
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager
from dagster_lance_partitioned.orchestration.checks import build_lance_partitioned_checks

daily = dg.DailyPartitionsDefinition(start_date="2013-01-01", end_date="2013-02-01")
SCHEMA = pa.schema([("day", pa.date32()), ("v", pa.int64())])
KEYS = ["2013-01-02", "2013-01-03", "2013-01-04"]


def day_rows(day: str, n: int = 3) -> pa.Table:
    return pa.table({"day": [dt.date.fromisoformat(day)] * n, "v": list(range(n))}, schema=SCHEMA)


@dg.asset(partitions_def=daily, metadata={"partition_expr": "day"})
def events(context) -> pa.Table:
    return day_rows(context.partition_key)


class Lake:
    def __init__(self, root: str) -> None:
        self.io = LancePartitionedIOManager(root=root)
        self.instance = dg.DagsterInstance.ephemeral()
        self.checks = build_lance_partitioned_checks([events], self.io, integrity_sample=None)

    def materialize(self, key: str) -> None:
        assert dg.materialize(
            [events], instance=self.instance, partition_key=key, resources={"io_manager": self.io}
        ).success

    def run_checks(self) -> dict[str, dg.AssetCheckEvaluation]:
        result = dg.materialize(
            [events, *self.checks],
            selection=dg.AssetSelection.checks_for_assets(events),
            instance=self.instance,
            resources={"io_manager": self.io},
            raise_on_error=False,
        )
        return {e.check_name: e for e in result.get_asset_check_evaluations()}

    @property
    def ns(self) -> PartitionedNamespace:
        return PartitionedNamespace.open(self.io.uri_for(dg.AssetKey("events")))

    def table(self, key: str) -> dict:
        return next(
            p for p in self.ns.inspect.partitions() if p["values"]["day_day"].isoformat() == key
        )

    def table_uri(self, key: str) -> str:
        return os.path.join(self.ns.uri, self.table(key)["location"])

    def repin(self, key: str, version: int) -> None:
        """Point the manifest's read_version of ``key``'s table at ``version`` (as a foreign
        tool would)."""
        self._edit(lambda edit, oid: edit.upserts.__setitem__(oid, {"read_version": version}), key)

    def deregister(self, key: str) -> None:
        self._edit(lambda edit, oid: edit.deletes.add(oid), key)

    def _edit(self, change, key: str) -> None:
        ns = self.ns
        oid = self.table(key)["object_id"]
        store = ManifestStore(ns.uri)

        def plan(snap: ManifestSnapshot) -> ManifestEdit:
            edit = ManifestEdit()
            change(edit, oid)
            return edit

        store.commit(lambda ds: ManifestSnapshot(ds, ns.specs), plan)


@pytest.fixture
def lake(tmp_path) -> Lake:
    lake = Lake(str(tmp_path / "lake"))
    for key in KEYS:
        lake.materialize(key)
    return lake


def meta(evaluation: dg.AssetCheckEvaluation, key: str):
    return evaluation.metadata[key].value


def test_all_checks_pass_on_a_healthy_namespace(lake):
    got = lake.run_checks()
    assert sorted(got) == [
        "lance_dagster_coverage",
        "lance_partition_integrity",
        "lance_read_version_consistency",
        "lance_schema_consistency",
    ]
    assert all(e.passed for e in got.values()), {k: e.description for k, e in got.items()}
    assert meta(got["lance_dagster_coverage"], "registered_partitions") == 3
    assert meta(got["lance_partition_integrity"], "partitions_checked") == 3


def test_schema_check_names_the_partition_and_column_of_a_wrong_type(lake):
    uri = lake.table_uri("2013-01-03")
    bad = pa.table({"day": [dt.date(2013, 1, 3)], "v": ["not a number"]})
    version = lance.write_dataset(bad, uri, mode="overwrite").version
    lake.repin("2013-01-03", version)
    got = lake.run_checks()["lance_schema_consistency"]
    assert not got.passed
    offenders = meta(got, "offenders")
    assert [(o["partition"], o["column"]) for o in offenders] == [("2013-01-03", "v")]
    assert meta(got, "offending_columns") == ["v"]


def test_read_version_check_reports_a_cleaned_up_pin_and_an_uncommitted_write(lake):
    uri = lake.table_uri("2013-01-04")
    pinned = lake.table("2013-01-04")["read_version"]
    ds = lance.write_dataset(day_rows("2013-01-04", 1), uri, mode="append")  # never committed
    ds.cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    with pytest.raises((ValueError, OSError)):
        lance.dataset(uri, version=pinned)  # really gone
    got = lake.run_checks()["lance_read_version_consistency"]
    assert not got.passed
    unreadable = meta(got, "unreadable")
    assert [(u["partition"], u["problem"]) for u in unreadable] == [
        ("2013-01-04", "read_version cleaned up")
    ]
    assert [u["uncommitted_versions"] for u in meta(got, "uncommitted")] == [[ds.version]]


def test_read_version_check_reports_a_missing_table_and_counts_orphans(lake):
    import shutil

    shutil.rmtree(lake.table_uri("2013-01-02"))
    orphan = os.path.join(lake.ns.uri, "0badc0de_v1$orphanorphanorph$dataset")
    lance.write_dataset(day_rows("2013-01-09"), orphan)
    got = lake.run_checks()["lance_read_version_consistency"]
    assert not got.passed
    assert [(u["partition"], u["problem"]) for u in meta(got, "unreadable")] == [
        ("2013-01-02", "missing table")
    ]
    assert meta(got, "orphan_tables") == 1
    assert meta(got, "orphans")[0]["location"].startswith("0badc0de_")


def test_read_version_check_fails_only_on_orphans_older_than_the_grace(lake):
    """Young orphans are writes in flight: reported, not a failure (as `lance-partitioned
    check` counts them); one older than vacuum's grace fails the check."""
    orphan = os.path.join(lake.ns.uri, "0badc0de_v1$orphanorphanorph$dataset")
    lance.write_dataset(day_rows("2013-01-09"), orphan)
    got = lake.run_checks()["lance_read_version_consistency"]
    assert got.passed
    assert meta(got, "orphan_tables") == 1 and meta(got, "stale_orphan_tables") == 0
    old = time.time() - 8 * 24 * 3600
    for dirpath, _dirs, names in os.walk(orphan):
        for name in [*names, "."]:
            os.utime(os.path.join(dirpath, name), (old, old))
    got = lake.run_checks()["lance_read_version_consistency"]
    assert not got.passed
    assert meta(got, "stale_orphan_tables") == 1


def test_integrity_check_finds_a_row_in_the_wrong_partition(lake):
    uri = lake.table_uri("2013-01-03")
    ds = lance.write_dataset(day_rows("2013-01-20", 1), uri, mode="append")
    lake.repin("2013-01-03", ds.version)
    got = lake.run_checks()["lance_partition_integrity"]
    assert not got.passed
    offenders = meta(got, "offenders")
    assert [(o["partition"], o["rows_in_wrong_partition"]) for o in offenders] == [
        ("2013-01-03", 1)
    ]
    assert offenders[0]["sample_row"]["day"].startswith("2013-01-20")


def test_coverage_check_lists_keys_missing_on_either_side(lake):
    lake.deregister("2013-01-02")
    lake.ns.write(day_rows("2013-01-15"))  # written outside Dagster
    got = lake.run_checks()["lance_dagster_coverage"]
    assert not got.passed
    assert meta(got, "missing_in_lance") == ["2013-01-02"]
    assert meta(got, "missing_in_dagster") == ["2013-01-15"]


def test_blocking_check_stops_downstream_in_the_same_run(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    lake.materialize("2013-01-03")
    lance.write_dataset(day_rows("2013-01-03", 1), lake.table_uri("2013-01-03"), mode="append")

    @dg.asset(partitions_def=daily, metadata={"partition_expr": "day"})
    def downstream(events: pa.Table) -> pa.Table:
        return events

    checks = build_lance_partitioned_checks(
        [events], lake.io, checks=["read_versions"], blocking=True
    )
    result = dg.materialize(
        [events, downstream, *checks],
        instance=lake.instance,
        partition_key="2013-01-02",
        resources={"io_manager": lake.io},
        raise_on_error=False,
    )
    assert not result.success
    assert [(e.check_name, e.passed) for e in result.get_asset_check_evaluations()] == [
        ("lance_read_version_consistency", False)
    ]
    written = {e.asset_key for e in result.get_asset_materialization_events()}
    assert written == {dg.AssetKey("events")}  # downstream never ran


def test_unknown_check_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown checks"):
        build_lance_partitioned_checks(
            [events], LancePartitionedIOManager(root=str(tmp_path)), checks=["speling"]
        )


def test_an_assets_checks_run_in_one_step_and_cut_lists_say_how_much_was_cut(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    lake.materialize("2013-01-02")
    for day in range(3, 28):  # 25 partitions written outside Dagster
        lake.ns.write(day_rows(f"2013-01-{day:02d}"))
    result = dg.materialize(
        [events, *lake.checks],
        selection=dg.AssetSelection.checks_for_assets(events),
        instance=lake.instance,
        resources={"io_manager": lake.io},
        raise_on_error=False,
    )
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == 4
    steps = {
        e.step_key for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert len(steps) == 1  # one step (one process) for all four checks
    assert len(lake.checks) == 1
    got = {e.check_name: e for e in evaluations}["lance_dagster_coverage"]
    missing = meta(got, "missing_in_dagster")
    assert len(missing) == 21 and missing[-1] == "... and 5 more (not shown)"
    assert meta(got, "missing_in_dagster_count") == 25


def test_blocking_may_name_some_checks(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    [checks] = build_lance_partitioned_checks([events], lake.io, blocking=["schema", "integrity"])
    blocking = {s.name: s.blocking for s in checks.check_specs}
    assert blocking == {
        "lance_schema_consistency": True,
        "lance_read_version_consistency": False,
        "lance_partition_integrity": True,
        "lance_dagster_coverage": False,
    }
