"""``LancePartitionedResource``: asset code opens the namespace the IO manager writes by its
asset key (to scan, merge, delete), by the IO manager's own key-to-path rule; the checks, the
sensors, the maintenance job and the ``dg`` component take it and share it. Real Dagster runs,
real Lance tables in temporary directories."""

import datetime as dt
import json
import textwrap

import dagster as dg
import pyarrow as pa
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import NamespaceNotFoundError
from dagster_lance_partitioned.orchestration import (
    InvalidAssetKeyError,
    LancePartitionedIOManager,
    LancePartitionedResource,
    MaintenanceConfig,
    RetentionRule,
    StorageRootError,
    build_lance_external_change_sensor,
    build_lance_maintenance_job,
    build_lance_partitioned_checks,
)
from dagster_lance_partitioned.orchestration.component import LancePartitionedComponent

# Dagster's component loader uses its beta code-reference and owners APIs
pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
SCHEMA = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("v", pa.float64())])


def day_rows(day: str, values: list[float]) -> pa.Table:
    date = dt.date.fromisoformat(day)
    return pa.table(
        {"day": [date] * len(values), "id": list(range(len(values))), "v": values}, SCHEMA
    )


@dg.asset(partitions_def=DAILY, metadata={"partition_expr": "day"})
def events(context: dg.AssetExecutionContext) -> pa.Table:
    return day_rows(context.partition_key, [0.5, 7.0, 9.5])


def materialize(key: str, root: str, instance: dg.DagsterInstance) -> None:
    result = dg.materialize(
        [events],
        partition_key=key,
        instance=instance,
        resources={"io_manager": LancePartitionedIOManager(root=root)},
    )
    assert result.success


def test_asset_code_scans_merges_and_deletes_through_the_resource(tmp_path):
    root = str(tmp_path / "lake")
    instance = dg.DagsterInstance.ephemeral()
    for key in ["2024-01-02", "2024-01-03"]:
        materialize(key, root, instance)
    seen: dict[str, object] = {}

    @dg.asset(deps=[events])
    def curated(lance: LancePartitionedResource) -> None:
        ns = lance.namespace(events.key)  # no path built here
        seen["uri"] = ns.uri
        seen["big"] = sorted(ns.to_table(filter="v > 1", columns=["v"])["v"].to_pylist())
        merged = ns.merge_insert(day_rows("2024-01-02", [5.0]), on=["day", "id"])
        deleted = ns.delete("v > 9")
        seen["changes"] = (merged.rows_updated, deleted.rows_deleted)

    result = dg.materialize(
        [curated],
        instance=instance,
        resources={"lance": LancePartitionedResource(root=root)},
    )
    assert result.success
    io = LancePartitionedIOManager(root=root)
    assert seen["uri"] == io.uri_for(events.key)  # the namespace the IO manager writes
    assert seen["big"] == [7.0, 7.0, 9.5, 9.5]
    assert seen["changes"] == (1, 2)  # 01-02's id 0 updated; the two 9.5 rows deleted
    stored = PartitionedNamespace.open(io.uri_for(events.key)).to_table()
    assert sorted(zip(stored["day"].to_pylist(), stored["v"].to_pylist(), strict=True)) == [
        (dt.date(2024, 1, 2), 5.0),
        (dt.date(2024, 1, 2), 7.0),
        (dt.date(2024, 1, 3), 0.5),
        (dt.date(2024, 1, 3), 7.0),
    ]


def test_the_resource_maps_keys_to_paths_as_the_io_manager_does(tmp_path):
    io = LancePartitionedIOManager(root=str(tmp_path / "lake"), storage_options={"k": "v"})
    lance_ = LancePartitionedResource(root=str(tmp_path / "lake"))
    for key in [dg.AssetKey("events"), dg.AssetKey(["raw", "my-source_2", "events.v1.2"])]:
        assert lance_.uri(key) == io.uri_for(key)
    assert (
        lance_.uri(["raw", "events"]) == lance_.uri("raw/events") == f"{tmp_path}/lake/raw/events"
    )
    for part in ["..", ".", "a/b", "a:b", "é", ".hidden", ""]:
        with pytest.raises(InvalidAssetKeyError):
            lance_.uri(dg.AssetKey(["ok", part]))
        with pytest.raises(InvalidAssetKeyError):
            io.uri_for(dg.AssetKey(["ok", part]))
    # object store roots are used as they are, local ones made absolute
    remote = LancePartitionedResource(root="s3://bucket/lake/")
    assert remote.uri("a/b") == "s3://bucket/lake/a/b"
    assert LancePartitionedResource(root="rel").uri("x").endswith("/rel/x")
    # the IO manager's own resource: same root and storage options
    assert io.resource.root == io.root and io.resource.storage_options == {"k": "v"}
    assert io.resource.uri("events") == io.uri_for(dg.AssetKey("events"))


def test_namespace_opens_existing_ones_at_any_version(tmp_path):
    root = str(tmp_path / "lake")
    lance_ = LancePartitionedResource(root=root)
    assert not lance_.exists(events.key)
    with pytest.raises(NamespaceNotFoundError):
        lance_.namespace(events.key)
    instance = dg.DagsterInstance.ephemeral()
    materialize("2024-01-02", root, instance)
    first = lance_.namespace(events.key).version
    materialize("2024-01-03", root, instance)
    assert lance_.exists(events.key)
    assert lance_.namespace(events.key).count_rows() == 6
    assert lance_.namespace(events.key, version=first).count_rows() == 3


def test_an_env_var_root_is_read_where_the_factories_use_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DLP_TEST_LAKE", str(tmp_path / "lake"))
    lance_ = LancePartitionedResource(root=dg.EnvVar("DLP_TEST_LAKE"))
    assert lance_.uri("events") == f"{tmp_path}/lake/events"  # not "<cwd>/DLP_TEST_LAKE/..."
    instance = dg.DagsterInstance.ephemeral()
    materialize("2024-01-02", str(tmp_path / "lake"), instance)
    checks = build_lance_partitioned_checks([events], lance_, checks=["coverage"])
    result = dg.materialize(
        [events, *checks],
        selection=dg.AssetSelection.checks_for_assets(events),
        instance=instance,
        resources={"io_manager": LancePartitionedIOManager(root=str(tmp_path / "lake"))},
    )
    [coverage] = result.get_asset_check_evaluations()
    assert coverage.passed and coverage.metadata["registered_partitions"].value == 1

    monkeypatch.delenv("DLP_TEST_LAKE")
    with pytest.raises(StorageRootError, match="DLP_TEST_LAKE"):
        lance_.uri("events")


def test_checks_sensor_and_maintenance_take_the_resource(tmp_path):
    root = str(tmp_path / "lake")
    lance_ = LancePartitionedResource(root=root)
    instance = dg.DagsterInstance.ephemeral()
    materialize("2024-01-02", root, instance)

    checks = build_lance_partitioned_checks([events], lance_, integrity_sample=None)
    result = dg.materialize(
        [events, *checks],
        selection=dg.AssetSelection.checks_for_assets(events),
        instance=instance,
        resources={"io_manager": LancePartitionedIOManager(root=root)},
    )
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == 4 and all(e.passed for e in evaluations)
    assert {e.metadata["dagster/uri"].value for e in evaluations} == {lance_.uri(events.key)}

    sensor = build_lance_external_change_sensor([events], lance_)
    defs = dg.Definitions(assets=[events], sensors=[sensor])
    first = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
    lance_.namespace(events.key).write(day_rows("2024-01-09", [1.0]))  # outside Dagster
    second = sensor(
        dg.build_sensor_context(instance=instance, definitions=defs, cursor=first.cursor)
    )
    assert [e.partition for e in second.asset_events] == ["2024-01-09"]
    assert json.loads(second.cursor) == {"events": lance_.namespace(events.key).version}

    job = build_lance_maintenance_job(
        [events],
        lance_,
        defaults=MaintenanceConfig(retention={"events": RetentionRule(filter="v > 9")}),
    )
    assert job.execute_in_process(instance=instance).success
    assert sorted(lance_.namespace(events.key).to_table()["v"].to_pylist()) == [0.5, 1.0, 7.0]


ASSETS = """
import datetime as dt

import dagster as dg
import pyarrow as pa

from dagster_lance_partitioned.orchestration import LancePartitionedResource

daily = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")


@dg.asset(partitions_def=daily, metadata={"partition_expr": "day"})
def events(context: dg.AssetExecutionContext) -> pa.Table:
    day = dt.date.fromisoformat(context.partition_key)
    return pa.table({"day": [day] * 3, "n": [1, 2, 30]})


@dg.asset(deps=[events], metadata={"lance/partition_by": ["big"]})
def big_events(lake: LancePartitionedResource) -> pa.Table:
    rows = lake.namespace(events.key).to_table(filter="n > 2")
    return pa.table({"big": [True] * rows.num_rows, "n": rows["n"]})
"""


def test_the_component_declares_the_resource_that_asset_code_uses(tmp_path):
    root = tmp_path / "lake"
    with create_defs_folder_sandbox() as sandbox:
        src = sandbox.project_root / "src" / sandbox.project_name
        (src / "lake_assets.py").write_text(textwrap.dedent(ASSETS))
        path = sandbox.scaffold_component(component_cls=LancePartitionedComponent)
        scaffolded = yaml.safe_load((path / "defs.yaml").read_text())
        attributes = {
            **scaffolded["attributes"],
            "root": str(root),
            "assets_module": f"{sandbox.project_name}.lake_assets",
            "resource_key": "lake",
            "partitioned_checks": True,
        }
        (path / "defs.yaml").write_text(
            yaml.safe_dump({"type": scaffolded["type"], "attributes": attributes})
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (_component, defs):
            resources = defs.resources or {}
            lake = resources["lake"]
            assert isinstance(lake, LancePartitionedResource) and lake.root == str(root)
            io = resources["io_manager"]
            assert isinstance(io, LancePartitionedIOManager) and io.root == lake.root
            graph = defs.resolve_asset_graph()
            event_checks = {
                k.name for k in graph.asset_check_keys if k.asset_key.path == ["events"]
            }
            assert {
                "lance_schema_consistency_per_partition",
                "lance_read_version_consistency_per_partition",
                "lance_integrity_per_partition",
                "lance_dagster_coverage",
            } <= event_checks
            dg.Definitions.validate_loadable(defs)

            job = defs.resolve_implicit_global_asset_job_def()
            with dg.DagsterInstance.ephemeral() as instance:
                first = job.execute_in_process(
                    instance=instance,
                    partition_key="2024-01-05",
                    asset_selection=[dg.AssetKey("events")],
                )
                assert first.success
                per_partition = [e for e in first.get_asset_check_evaluations() if e.partition]
                assert {e.partition for e in per_partition} == {"2024-01-05"}
                assert len(per_partition) == 3 and all(e.passed for e in per_partition)
                second = job.execute_in_process(
                    instance=instance, asset_selection=[dg.AssetKey("big_events")]
                )
                assert second.success
    big = PartitionedNamespace.open(str(root / "big_events")).to_table()
    assert big["n"].to_pylist() == [30]
