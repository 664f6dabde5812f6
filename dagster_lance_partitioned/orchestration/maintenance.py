"""A Dagster job (and nightly schedule) keeping the namespaces of assets healthy: delete rows past
their retention (when configured), compact small fragments, bring the declared indexes up to date,
clean up table versions no retained manifest version pins, vacuum orphans."""

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg
import pyarrow as pa
from pydantic import Field

from ..core import PartitionedNamespace
from ..core.engine import (
    PROP_DAGSTER_ASSET_KEY,
    PROP_DAGSTER_RUN_ID,
    PROP_SOURCE,
    quote_ident,
    sql_literal,
)
from ..core.engine import declared_indexes as declared
from .errors import RetentionRuleError
from .indexes import coverage_metadata
from .metadata_keys import MAINTENANCE, MANIFEST_VERSION, ROWS_DELETED
from .watched import Lake, WatchedAsset, watched_assets

# commit property dlp.source of the job's retention deletes (the external change sensor
# ignores them: the job reports them itself, as observations)
MAINTENANCE_SOURCE = "dagster-lance-partitioned/maintenance"


class RetentionRule(dg.Config):
    """Which rows of an asset the maintenance job deletes: those matching ``filter`` (SQL, e.g.
    ``"status = 'expired'"``), or those whose date / timestamp ``column`` lies more than
    ``older_than_days`` days before the run (naive timestamps are read as UTC)."""

    filter: str | None = None
    column: str | None = None
    older_than_days: float | None = None

    def sql(self, asset: str, schema: pa.Schema, now: dt.datetime) -> str:
        """The rule as one filter on ``schema``'s columns; :class:`RetentionRuleError` when it
        is incomplete, ambiguous or names an unusable column."""
        by_age = self.column is not None or self.older_than_days is not None
        if (self.filter is not None) == by_age:
            raise RetentionRuleError(
                f"retention of asset {asset}: give either 'filter' or 'column' with "
                "'older_than_days'",
                asset,
            )
        if self.filter is not None:
            return self.filter
        if self.column is None or self.older_than_days is None or self.older_than_days < 0:
            raise RetentionRuleError(
                f"retention of asset {asset}: 'column' and a non-negative 'older_than_days' "
                "go together",
                asset,
            )
        index = schema.get_field_index(self.column)
        if index < 0:
            raise RetentionRuleError(
                f"retention of asset {asset}: column {self.column!r} is not in its namespace "
                f"(columns: {', '.join(schema.names)})",
                asset,
            )
        typ = schema.field(index).type
        cutoff = now.astimezone(dt.UTC) - dt.timedelta(days=self.older_than_days)
        if pa.types.is_date(typ):
            bound = sql_literal(cutoff.date())
        elif pa.types.is_timestamp(typ):
            bound = sql_literal(cutoff if typ.tz is not None else cutoff.replace(tzinfo=None))
        else:
            raise RetentionRuleError(
                f"retention of asset {asset}: column {self.column!r} is {typ}, not a date or "
                "timestamp; use 'filter'",
                asset,
            )
        return f"{quote_ident(self.column)} < {bound}"


class MaintenanceConfig(dg.Config):
    """What one maintenance run does (defaults from the factory). ``retention`` maps asset keys
    (``"a/b"``) to the rows to delete from them (nothing is deleted by default)."""

    retention: dict[str, RetentionRule] = Field(default_factory=dict)
    compact: bool = True
    optimize_indexes: bool = True
    cleanup_older_than_hours: float = 7 * 24
    keep_manifest_versions: int = 10
    vacuum_grace_hours: float = 7 * 24


def build_lance_maintenance_job(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec],
    lance: Lake,
    *,
    name: str = "lance_maintenance",
    defaults: MaintenanceConfig | None = None,
) -> dg.JobDefinition:
    """A job that, for each asset's namespace, deletes the rows its ``retention`` rule names
    (one manifest commit; partitions left empty are deregistered), compacts fragments (one
    manifest commit), optimizes the declared indexes (one manifest commit: builds those a
    table lacks and folds appended rows into the others), removes old versions outside the
    retention (time travel stays valid within it) and deletes orphans older than the grace
    period; reports what it did as an observation of each asset (with the indexes' coverage
    afterwards when it declares any), and the rows deleted per asset on the op's output.
    ``lance``: the :class:`~.resource.LancePartitionedResource` (or the IO manager) the
    assets are stored with."""
    watched = watched_assets(assets, lance)
    base = defaults or MaintenanceConfig()

    @dg.op(
        name=f"{name}_op",
        description="delete expired rows, compact, optimize indexes, clean up and vacuum Lance "
        "namespaces",
    )
    def maintain(
        context: dg.OpExecutionContext, config: MaintenanceConfig
    ) -> Iterator[dg.AssetObservation | dg.Output[None]]:
        by_name = {w.key.to_user_string(): w for w in watched}
        unknown = sorted(set(config.retention) - set(by_name))
        if unknown:
            raise RetentionRuleError(
                f"retention names asset(s) {unknown} this job does not maintain "
                f"({', '.join(sorted(by_name))})",
                unknown[0],
            )
        deleted: dict[str, int] = {}
        now = dt.datetime.now(dt.UTC)
        for w in watched:
            ns = w.open()
            if ns is None:
                continue
            asset = w.key.to_user_string()
            done: dict[str, Any] = {}
            metadata: dict[str, Any] = {}
            rule = config.retention.get(asset)
            if rule is not None:
                done["retention"] = _retention(context, w, ns, rule, now)
                deleted[asset] = done["retention"]["rows_deleted"]
                metadata[ROWS_DELETED] = dg.MetadataValue.int(deleted[asset])
            if config.compact:
                done["compact"] = _plain(ns.maintenance.compact())
            if config.optimize_indexes and declared(ns.refresh()):
                # after compaction, which builds the indexes of the tables it rewrites over all
                # their rows: optimizing first would rebuild (retrain) those twice. Recorded
                # only for namespaces declaring indexes.
                done["optimize_indexes"] = _optimized(ns)
            done["cleanup"] = _plain(
                ns.maintenance.cleanup(
                    older_than=dt.timedelta(hours=config.cleanup_older_than_hours),
                    keep_manifest_versions=config.keep_manifest_versions,
                )
            )
            done["vacuum"] = _plain(
                ns.maintenance.vacuum(grace=dt.timedelta(hours=config.vacuum_grace_hours))
            )
            coverages = ns.refresh().indexes()  # whole namespace; nothing opened without indexes
            if coverages:
                metadata.update(coverage_metadata(coverages))
            context.log.info(f"{asset} ({w.uri}): {json.dumps(done)}")
            yield dg.AssetObservation(
                w.key,
                metadata={
                    MAINTENANCE: dg.MetadataValue.json(done),
                    **metadata,
                    MANIFEST_VERSION: ns.version,
                },
            )
        yield dg.Output(
            None,
            metadata={ROWS_DELETED: dg.MetadataValue.json(deleted)} if deleted else {},
        )

    @dg.job(
        name=name,
        config={"ops": {f"{name}_op": {"config": base.model_dump()}}},
        tags={MAINTENANCE: "true"},
    )
    def _job() -> None:
        maintain()

    return _job


def _retention(
    context: dg.OpExecutionContext,
    w: WatchedAsset,
    ns: PartitionedNamespace,
    rule: RetentionRule,
    now: dt.datetime,
) -> dict[str, Any]:
    """Delete the rows ``rule`` names from ``ns`` in one manifest commit; what was done."""
    asset = w.key.to_user_string()
    sql = rule.sql(asset, ns.schema, now)
    # a removed partition as a person knows it: its Dagster key, else column=value
    removed_keys = {
        p["object_id"]: w.key_of(ns, p["spec_id"], p["values"])
        or "/".join(f"{c}={v}" for c, v in p["values"].items())
        for p in ns.inspect.partitions()
    }
    result = ns.delete(
        sql,
        commit_properties={
            PROP_SOURCE: MAINTENANCE_SOURCE,
            PROP_DAGSTER_RUN_ID: context.run_id,
            PROP_DAGSTER_ASSET_KEY: asset,
            "retention": sql,
        },
    )
    removed = [removed_keys.get(o) or o for o in result.partitions_removed]
    return {
        "filter": sql,
        "rows_deleted": result.rows_deleted,
        "partitions_changed": len(result.partitions),
        "partitions_removed": sorted(removed),
        "committed": result.committed,
        "manifest_version": result.manifest_version,
    }


def _optimized(ns: PartitionedNamespace) -> dict[str, Any]:
    """Optimize ``ns``'s declared indexes (nothing without any); what was done."""
    result = ns.maintenance.optimize_indexes()
    return {
        "manifest_version": result.manifest_version,
        "partitions_reindexed": len(result.partitions),
        "partitions_skipped": len(result.skipped),
    }


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
