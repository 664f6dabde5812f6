"""A Dagster component (``dg``): declare in a project's ``defs.yaml`` that a set of assets is
stored as Lance partitioned namespaces, with the resource locating them (key ``lance``), the IO
manager, asset checks, sensors and the maintenance job and schedule built for them.

.. code-block:: yaml

    type: dagster_lance_partitioned.orchestration.component.LancePartitionedComponent
    attributes:
      root: "{{ env.DLP_ROOT }}"
      assets_module: my_project.lake_assets
      blocking_checks: [schema, integrity]
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Literal, get_args

import dagster as dg
from dagster.components import (
    Component,
    ComponentLoadContext,
    Model,
    Resolvable,
    Scaffolder,
    ScaffoldRequest,
    scaffold_component,
    scaffold_with,
)
from pydantic import Field

from .._roles import ROLE, replace_roles
from .checks import CHECKS, build_lance_partitioned_checks
from .io_manager import LancePartitionedIOManager
from .maintenance import build_lance_maintenance_job, build_lance_maintenance_schedule
from .resource import LancePartitionedResource
from .sensors import build_lance_external_change_sensor, build_lance_schema_sensor

CheckName = Literal["schema", "read_versions", "integrity", "coverage", "indexes"]


class LancePartitionedScaffolder(Scaffolder):
    """Writes a ``defs.yaml`` for the component with the usual settings."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        """Scaffold the component's ``defs.yaml``."""
        scaffold_component(
            request,
            {
                "root": "{{ env.DLP_ROOT }}",
                "assets_module": "my_project.lake_assets",
                "checks": list(CHECKS),
                "blocking_checks": ["schema", "integrity"],
                "external_change_sensor": True,
                "schema_sensor": True,
                "maintenance_cron": "0 3 * * *",
            },
        )


@scaffold_with(LancePartitionedScaffolder)
class LancePartitionedComponent(Component, Resolvable, Model):
    """The assets of ``assets_module`` stored as Lance partitioned namespaces under ``root``,
    with their asset checks (one step per asset; ``lance_index_coverage`` only on assets whose
    metadata declares ``lance/indexes``; with ``partitioned_checks`` one more step for the
    checks per partition), the external-change and schema sensors and the maintenance job with
    its nightly schedule, all locating the namespaces through one
    ``LancePartitionedResource``, which asset code gets under ``resource_key``. Assets get
    the kind ``lance`` (and ``spark`` when they return a Spark DataFrame); Sphinx roles in
    their descriptions are shown as code."""

    root: str = Field(description="Storage root: a local path or an object store URI.")
    assets_module: str = Field(
        description="Importable module whose AssetsDefinitions this component loads and stores."
    )
    assets: list[str] | None = Field(
        default=None,
        description="Only these asset keys of the module ('a/b' for multi-part keys); "
        "default: all of them.",
    )
    storage_options: dict[str, str] | None = Field(
        default=None, description="Object store options (credentials, endpoint, region)."
    )
    io_manager_key: str = Field(default="io_manager", description="The IO manager's key.")
    resource_key: str = Field(
        default="lance",
        description="The key of the LancePartitionedResource asset code opens namespaces with.",
    )
    checks: list[CheckName] = Field(
        default_factory=lambda: list(get_args(CheckName)), description="Which asset checks to add."
    )
    blocking_checks: list[CheckName] = Field(
        default_factory=list, description="Checks that stop downstream assets when they fail."
    )
    index_unindexed_fraction: float | None = Field(
        default=0.1,
        description="lance_index_coverage (assets declaring lance/indexes) fails when an index "
        "has more unindexed rows than this fraction of its indexed rows (null: no such bound).",
    )
    index_unindexed_rows: int | None = Field(
        default=None,
        description="lance_index_coverage fails when an index has more unindexed rows than "
        "this (null: no such bound).",
    )
    partitioned_checks: bool = Field(
        default=False,
        description="Also run the schema, read_versions and integrity checks per partition key "
        "of each run, as partitioned asset checks (a preview feature of Dagster 1.13).",
    )
    external_change_sensor: bool = Field(
        default=True, description="Add the sensor reporting commits made outside Dagster."
    )
    schema_sensor: bool = Field(default=True, description="Add the schema-change sensor.")
    maintenance_cron: str | None = Field(
        default="0 3 * * *",
        description="Cron of the (stopped by default) maintenance schedule; null: no job.",
    )
    maintenance_timezone: str = Field(default="UTC", description="The schedule's time zone.")
    name_prefix: str = Field(
        default="lance", description="Prefix of the sensor, job and schedule names."
    )

    def build_defs(self, context: ComponentLoadContext) -> dg.Definitions:
        """The assets (with kinds and the IO manager key), checks, sensors, job and schedule,
        and the resource and IO manager."""
        lake = LancePartitionedResource(root=self.root, storage_options=self.storage_options)
        io_manager = LancePartitionedIOManager(root=lake.root, storage_options=lake.storage_options)
        assets = [_as_stored(a) for a in self._load_assets()]
        checks = build_lance_partitioned_checks(
            assets,
            lake,
            checks=self.checks,
            blocking=self.blocking_checks,
            partitioned_checks=self.partitioned_checks,
            index_unindexed_fraction=self.index_unindexed_fraction,
            index_unindexed_rows=self.index_unindexed_rows,
        )
        sensors: list[dg.SensorDefinition] = []
        if self.external_change_sensor:
            sensors.append(
                build_lance_external_change_sensor(
                    assets, lake, name=f"{self.name_prefix}_external_changes"
                )
            )
        if self.schema_sensor:
            sensors.append(
                build_lance_schema_sensor(assets, lake, name=f"{self.name_prefix}_schema_evolution")
            )
        jobs: list[dg.JobDefinition] = []
        schedules: list[dg.ScheduleDefinition] = []
        if self.maintenance_cron is not None:
            job = build_lance_maintenance_job(assets, lake, name=f"{self.name_prefix}_maintenance")
            jobs.append(job)
            schedules.append(
                build_lance_maintenance_schedule(
                    job, self.maintenance_cron, execution_timezone=self.maintenance_timezone
                )
            )
        return dg.Definitions(
            assets=assets,
            asset_checks=checks,
            sensors=sensors,
            jobs=jobs,
            schedules=schedules,
            resources={self.io_manager_key: io_manager, self.resource_key: lake},
        )

    def _load_assets(self) -> list[dg.AssetsDefinition]:
        module = importlib.import_module(self.assets_module)
        found = [v for v in vars(module).values() if isinstance(v, dg.AssetsDefinition)]
        if self.assets is None:
            return found
        wanted = {dg.AssetKey.from_user_string(k) for k in self.assets}
        chosen = [a for a in found if set(a.keys) & wanted]
        missing = wanted - {k for a in chosen for k in a.keys}
        if missing:
            names = sorted(k.to_user_string() for k in missing)
            raise ValueError(f"{self.assets_module} defines no asset {names}")
        return chosen


def _as_stored(assets_def: dg.AssetsDefinition) -> dg.AssetsDefinition:
    """``lance`` (and ``spark`` for Spark DataFrame outputs) added to every asset's kinds, and
    its description's Sphinx roles (``:data:`FEATURES```, from a docstring) shown as the UI
    shows Markdown: ``FEATURES`` in code."""
    spark = _returns_spark(assets_def)

    def stored(spec: dg.AssetSpec) -> dg.AssetSpec:
        extra = {"lance", "spark"} if spark else {"lance"}
        if spec.description and ROLE.search(spec.description):
            spec = spec.replace_attributes(description=replace_roles(spec.description))
        return spec.merge_attributes(kinds=extra - set(spec.kinds))

    return assets_def.map_asset_specs(stored)


def _returns_spark(assets_def: dg.AssetsDefinition) -> bool:
    outs: Sequence[Any] = []
    try:
        outs = list(assets_def.op.output_defs)
    except Exception:  # not an op-backed asset
        return False
    for out in outs:
        typ = getattr(out.dagster_type, "typing_type", None)
        if getattr(typ, "__module__", "").startswith("pyspark."):
            return True
    return False
