"""The ``dg`` component: a project declares in ``defs.yaml`` that some assets are stored as Lance
partitioned namespaces; loading the project (Dagster's component tree, as ``dg`` and
``dagster dev`` load it) yields the assets with kinds, the IO manager, the checks in one step
per asset, the sensors and the maintenance schedule; materializing through it lands in Lance."""

from __future__ import annotations

import textwrap

import dagster as dg
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.orchestration.component import LancePartitionedComponent

# Dagster's component loader itself uses its beta code-reference and owners APIs
pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

ASSETS = """
import datetime as dt

import dagster as dg
import pyarrow as pa

daily = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")


@dg.asset(partitions_def=daily, metadata={"partition_expr": "day"})
def events(context: dg.AssetExecutionContext) -> pa.Table:
    return pa.table({"day": [dt.date.fromisoformat(context.partition_key)] * 3, "n": [1, 2, 3]})


@dg.asset(metadata={"lance/partition_by": ["kind"]}, kinds={"python"})
def kinds() -> pa.Table:
    return pa.table({"kind": ["a", "b"], "n": [1, 2]})
"""


def test_component_scaffolds_loads_and_materializes(tmp_path):
    root = tmp_path / "lake"
    with create_defs_folder_sandbox() as sandbox:
        src = sandbox.project_root / "src" / sandbox.project_name
        (src / "lake_assets.py").write_text(textwrap.dedent(ASSETS))
        path = sandbox.scaffold_component(component_cls=LancePartitionedComponent)
        scaffolded = yaml.safe_load((path / "defs.yaml").read_text())
        assert scaffolded["type"].endswith("LancePartitionedComponent")
        assert scaffolded["attributes"]["blocking_checks"] == ["schema", "integrity"]
        attributes = {
            **scaffolded["attributes"],
            "root": str(root),
            "assets_module": f"{sandbox.project_name}.lake_assets",
        }
        (path / "defs.yaml").write_text(
            yaml.safe_dump({"type": scaffolded["type"], "attributes": attributes})
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert isinstance(component, LancePartitionedComponent)
            graph = defs.resolve_asset_graph()
            events, kinds = dg.AssetKey("events"), dg.AssetKey("kinds")
            assert set(graph.get(events).kinds) == {"lance"}
            assert set(graph.get(kinds).kinds) == {"lance", "python"}
            checks = {k.name for k in graph.asset_check_keys if k.asset_key == events}
            assert checks == {
                "lance_schema_consistency",
                "lance_read_version_consistency",
                "lance_partition_integrity",
                "lance_dagster_coverage",
            }
            assert len(list(defs.asset_checks or [])) == 2  # one step per asset
            sensors = {s.name for s in defs.sensors or []}
            assert sensors == {"lance_external_changes", "lance_schema_evolution"}
            schedule = defs.resolve_schedule_def("lance_maintenance_nightly")
            assert schedule.cron_schedule == "0 3 * * *"
            dg.Definitions.validate_loadable(defs)

            with dg.DagsterInstance.ephemeral() as instance:
                job = defs.resolve_implicit_global_asset_job_def()
                result = job.execute_in_process(
                    instance=instance, partition_key="2024-01-05", asset_selection=[events]
                )
                assert result.success
                evaluations = result.get_asset_check_evaluations()
                assert len(evaluations) == 4 and all(e.passed for e in evaluations)
    ns = PartitionedNamespace.open(root / "events")
    assert ns.count_rows() == 3 and len(ns.inspect.partitions()) == 1
