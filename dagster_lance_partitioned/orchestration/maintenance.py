"""A Dagster job (and nightly schedule) keeping the namespaces of assets healthy: compact small
fragments, clean up table versions no retained manifest version pins, vacuum orphans."""

import dataclasses
import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import dagster as dg

from .io_manager import LancePartitionedIOManager
from .watched import watched_assets


class MaintenanceConfig(dg.Config):
    """What one maintenance run does (defaults from the factory)."""

    compact: bool = True
    cleanup_older_than_hours: float = 7 * 24
    keep_manifest_versions: int = 10
    vacuum_grace_hours: float = 7 * 24


def build_lance_maintenance_job(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec],
    io_manager: LancePartitionedIOManager,
    *,
    name: str = "lance_maintenance",
    defaults: MaintenanceConfig | None = None,
) -> dg.JobDefinition:
    """A job that, for each asset's namespace, compacts fragments (one manifest commit), removes
    old versions outside the retention (time travel stays valid within it) and deletes orphans
    older than the grace period; reports what it did as an observation of each asset."""
    watched = watched_assets(assets, io_manager)
    base = defaults or MaintenanceConfig()

    @dg.op(name=f"{name}_op", description="compact, clean up and vacuum Lance namespaces")
    def maintain(context: dg.OpExecutionContext, config: MaintenanceConfig):
        for w in watched:
            ns = w.open()
            if ns is None:
                continue
            done: dict[str, Any] = {}
            if config.compact:
                done["compact"] = _plain(ns.compact())
            done["cleanup"] = _plain(
                ns.cleanup(
                    older_than=dt.timedelta(hours=config.cleanup_older_than_hours),
                    keep_manifest_versions=config.keep_manifest_versions,
                )
            )
            done["vacuum"] = _plain(ns.vacuum(grace=dt.timedelta(hours=config.vacuum_grace_hours)))
            context.log.info(f"{w.key.to_user_string()} ({w.uri}): {json.dumps(done)}")
            yield dg.AssetObservation(
                w.key,
                metadata={
                    "lance/maintenance": dg.MetadataValue.json(done),
                    "lance/manifest_version": ns.refresh().version,
                },
            )
        yield dg.Output(None)

    @dg.job(
        name=name,
        config={"ops": {f"{name}_op": {"config": base.model_dump()}}},
        tags={"lance/maintenance": "true"},
    )
    def _job() -> None:
        maintain()

    return _job


def build_lance_maintenance_schedule(
    job: dg.JobDefinition,
    cron_schedule: str = "0 3 * * *",
    execution_timezone: str = "UTC",
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
) -> dg.ScheduleDefinition:
    """A nightly schedule of the maintenance job."""
    return dg.ScheduleDefinition(
        name=f"{job.name}_nightly",
        job=job,
        cron_schedule=cron_schedule,
        execution_timezone=execution_timezone,
        default_status=default_status,
    )


def _plain(result: Any) -> Any:
    """A maintenance result as JSON-able data."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    return json.loads(json.dumps(result, default=str))
