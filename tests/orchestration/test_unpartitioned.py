"""Unpartitioned assets with the IO manager as every asset's default, no extra metadata: stored
as a namespace without partition fields (one table), each run replacing the whole asset in one
manifest commit, as dagster-deltalake's overwrite does; loaded downstream, listed by
``history`` with the run that wrote it, passing the asset checks; pyarrow and pandas (Spark in
``test_io_manager_spark.py``). ``lance/partition_by`` and ``lance/write_mode`` still choose
otherwise. Real Dagster runs (``dg.materialize``) on real namespaces."""

from __future__ import annotations

import json

import dagster as dg
import lance
import pandas as pd
import pyarrow as pa
import pytest
from helpers.cli import run_json

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager
from dagster_lance_partitioned.orchestration.checks import build_lance_partitioned_checks

FIRST = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]})
SECOND = pa.table({"id": [4, 5], "name": ["d", "e"]})


class Project:
    """A project whose only IO manager is the Lance one (the default for every asset)."""

    def __init__(self, root: str, assets: list[dg.AssetsDefinition]) -> None:
        self.io = LancePartitionedIOManager(root=root)
        self.assets = assets
        self.checks = build_lance_partitioned_checks(assets, self.io, integrity_sample=None)
        self.instance = dg.DagsterInstance.ephemeral()

    def materialize(self, *names: str) -> dg.ExecuteInProcessResult:
        result = dg.materialize(
            self.assets,
            selection=list(names) or None,
            instance=self.instance,
            resources={"io_manager": self.io},
        )
        assert result.success
        return result

    def check(self, name: str) -> dict[str, dg.AssetCheckEvaluation]:
        asset = next(a for a in self.assets if a.key == dg.AssetKey(name))
        result = dg.materialize(
            [*self.assets, *self.checks],
            selection=dg.AssetSelection.checks_for_assets(asset),
            instance=self.instance,
            resources={"io_manager": self.io},
        )
        return {e.check_name: e for e in result.get_asset_check_evaluations()}

    def ns(self, name: str) -> PartitionedNamespace:
        return PartitionedNamespace.open(self.io.uri_for(dg.AssetKey(name)))


def test_a_plain_asset_is_stored_replaced_whole_loaded_and_checked(tmp_path, capsys):
    state = {"rows": FIRST}
    seen: list[pa.Table] = []

    @dg.asset
    def plain() -> pa.Table:
        return state["rows"]

    @dg.asset
    def downstream(plain: pa.Table) -> pa.Table:
        seen.append(plain)
        return plain.append_column("n", pa.array([plain.num_rows] * plain.num_rows))

    project = Project(str(tmp_path), [plain, downstream])
    first = project.materialize()
    ns = project.ns("plain")
    assert ns.current_spec.fields == ()  # no partition fields: one table holds every row
    [table] = ns.inspect.partitions()
    assert table["object_id"] == "v1$dataset" and table["values"] == {}
    assert ns.to_table().sort_by("id").equals(FIRST)
    assert seen[-1].sort_by("id").equals(FIRST)
    [meta] = first.asset_materializations_for_node("plain")
    assert meta.metadata["dagster/row_count"].value == 3
    assert meta.metadata["lance/manifest_version"].value == ns.version

    state["rows"] = SECOND
    before = ns.version
    second = project.materialize()
    ns = project.ns("plain")
    assert ns.version == before + 1  # the whole asset replaced in one manifest commit
    assert ns.to_table().sort_by("id").equals(SECOND)
    assert len(ns.inspect.partitions()) == 1
    assert PartitionedNamespace.open(ns.uri, version=before).to_table().sort_by("id").equals(FIRST)
    assert seen[-1].sort_by("id").equals(SECOND)  # downstream loads the replacement
    assert project.ns("downstream").count_rows() == 2

    # history: each run's commit, by the IO manager, with the run's id
    doc = run_json(capsys, "history", ns.uri)
    runs = [v["dagster_run_id"] for v in doc["versions"] if v["operation"] == "write"]
    assert runs == [second.run_id, first.run_id]

    evaluations = project.check("plain")
    assert {name: e.passed for name, e in evaluations.items()} == {
        "lance_schema_consistency": True,
        "lance_read_version_consistency": True,
        "lance_partition_integrity": True,
        "lance_dagster_coverage": True,
    }


def test_a_pandas_asset_round_trips_and_is_replaced(tmp_path):
    state = {"frame": pd.DataFrame({"id": [1, 2, 3], "city": ["x", "y", "z"]})}
    loaded: list[pd.DataFrame] = []

    @dg.asset
    def cities() -> pd.DataFrame:
        return state["frame"]

    @dg.asset
    def city_count(cities: pd.DataFrame) -> pd.DataFrame:
        loaded.append(cities)
        return pd.DataFrame({"n": [len(cities)]})

    project = Project(str(tmp_path), [cities, city_count])
    project.materialize()
    state["frame"] = pd.DataFrame({"id": [9], "city": ["w"]})
    project.materialize()
    assert [len(f) for f in loaded] == [3, 1]
    assert loaded[-1]["city"].tolist() == ["w"]
    assert project.ns("cities").to_table().to_pylist() == [{"id": 9, "city": "w"}]
    assert project.ns("city_count").to_table().to_pylist() == [{"n": 1}]


def test_an_asset_dropping_partition_by_is_replaced_whole_under_a_new_spec(tmp_path):
    """An asset stored with ``lance/partition_by`` and then without: the next run adds a spec
    version without fields and its commit deregisters the old partitions."""
    rows = pa.table({"id": [1, 2, 3], "country": ["US", "FR", "US"]})

    @dg.asset(name="events", metadata={"lance/partition_by": ["country"]})
    def by_country() -> pa.Table:
        return rows

    @dg.asset(name="events")
    def as_it_is() -> pa.Table:
        return rows.slice(0, 2)

    root = str(tmp_path)
    Project(root, [by_country]).materialize()
    project = Project(root, [as_it_is])
    assert len(project.ns("events").inspect.partitions()) == 2
    result = project.materialize()
    ns = project.ns("events")
    assert [s.fields == () for s in ns.specs] == [False, True]
    [table] = ns.inspect.partitions()
    assert table["spec_id"] == 2
    assert sorted(ns.to_table()["id"].to_pylist()) == [1, 2]
    [meta] = result.asset_materializations_for_node("events")
    assert meta.metadata["lance/spec_updated"].value is True


@pytest.mark.parametrize(("mode", "expected"), [("append", [1, 2, 3, 4, 5]), ("overwrite", [4, 5])])
def test_write_mode_metadata_still_chooses(tmp_path, mode, expected):
    state = {"rows": FIRST}

    @dg.asset(metadata={"lance/write_mode": mode})
    def log() -> pa.Table:
        return state["rows"]

    project = Project(str(tmp_path), [log])
    project.materialize()
    state["rows"] = SECOND
    project.materialize()
    assert sorted(project.ns("log").to_table()["id"].to_pylist()) == expected


def test_partition_by_still_partitions_an_unpartitioned_asset(tmp_path):
    @dg.asset(metadata={"lance/partition_by": ["name"]})
    def by_name() -> pa.Table:
        return FIRST

    project = Project(str(tmp_path), [by_name])
    project.materialize()
    ns = project.ns("by_name")
    assert [f.field_id for f in ns.current_spec.fields] == ["name"]
    assert len(ns.inspect.partitions()) == 3


def test_the_stored_table_is_a_plain_lance_table_other_tools_read(tmp_path):
    @dg.asset
    def plain() -> pa.Table:
        return FIRST

    project = Project(str(tmp_path), [plain])
    project.materialize()
    ns = project.ns("plain")
    [task] = ns.plan_scan().tasks
    assert lance.dataset(task.uri, version=task.read_version).to_table().equals(FIRST)
    spec = json.loads(ns.metadata["partition_spec_v1"])
    assert spec == {"id": 1, "fields": []}
