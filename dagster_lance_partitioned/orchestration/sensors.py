"""Sensors over partitioned namespaces: commits made outside the IO manager (Spark jobs, other
pipelines, people) become runless materializations of exactly the partitions they changed, and
runs of the downstream assets of those partitions; schema changes and partition tables that
drifted from the namespace schema are recorded, adopted or reported."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import dagster as dg
import pyarrow as pa

from ..core import Commit, Operation
from ..core.engine import commit_history as commits
from ..core.engine import field_id
from .maintenance import MAINTENANCE_SOURCE
from .metadata import column_schema
from .metadata_keys import EXTERNAL, MANIFEST_VERSION, OPERATION, SCHEMA_CHANGES, WRITER
from .output import COMMIT_SOURCE
from .watched import Lake, WatchedAsset, watched_assets

# commits of these operations change how data is stored (or indexed), not the data
MAINTENANCE_OPERATIONS = frozenset(
    {
        Operation.COMPACT,
        Operation.RETIRE,
        Operation.CREATE_INDEX,
        Operation.OPTIMIZE_INDEXES,
        Operation.DROP_INDEX,
        Operation.STATISTICS,
    }
)
# commits Dagster made itself: the IO manager's, and the maintenance job's retention deletes
# (which that job reports as observations)
OWN_SOURCES = frozenset({COMMIT_SOURCE, MAINTENANCE_SOURCE})


def build_lance_external_change_sensor(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec],
    lance: Lake,
    *,
    name: str = "lance_external_changes",
    request_downstream: bool = True,
    minimum_interval_seconds: int = 60,
    max_versions_per_tick: int = 200,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor reporting each partition changed by a commit not made by the IO manager as a
    runless materialization, and (``request_downstream``) requesting runs of the downstream
    assets for exactly the mapped partitions. Its cursor (the last manifest version seen per
    asset) makes it exactly-once across ticks and restarts; on its first tick it starts watching
    from the current versions. ``lance``: the :class:`~.resource.LancePartitionedResource` (or
    the IO manager) the assets are stored with."""
    watched = watched_assets(assets, lance)
    # the runs it may request: the watched assets' direct downstream (Dagster refuses a run
    # request of a sensor without a target when the daemon evaluates it)
    targets = (
        dg.AssetSelection.assets(*[w.key for w in watched]).downstream(depth=1)
        if request_downstream
        else None
    )

    @dg.sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Reports commits to Lance partitioned namespaces made outside Dagster.",
        asset_selection=targets,
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        cursor: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
        graph = context.repository_def.asset_graph if context.repository_def else None
        events: list[dg.AssetMaterialization] = []
        requests: list[dg.RunRequest] = []
        new_dynamic: list[dg.AddDynamicPartitionsRequest] = []
        for w in watched:
            ns = w.open()
            name_ = w.key.to_user_string()
            if ns is None:
                continue
            last = cursor.get(name_)
            if last is None:  # start watching from now
                cursor[name_] = ns.version
                continue
            until = min(ns.version, last + max_versions_per_tick)
            for commit in commits(w.uri, last, until, w.storage_options) if until > last else []:
                if commit.source in OWN_SOURCES or commit.operation in MAINTENANCE_OPERATIONS:
                    continue
                keys = _changed_keys(w, ns, commit, context)
                events += [_materialization(w, key, commit) for key in keys]
                new_dynamic += _dynamic_requests(w, keys, context)
                if request_downstream and graph is not None:
                    requests += _downstream(graph, w, keys, commit.version)
            cursor[name_] = until
        return dg.SensorResult(
            run_requests=requests,
            asset_events=events,
            dynamic_partitions_requests=new_dynamic or None,
            cursor=json.dumps(cursor, sort_keys=True),
        )

    return _sensor


def _changed_keys(
    w: WatchedAsset, ns: Any, commit: Commit, context: dg.SensorEvaluationContext
) -> list[str | None]:
    """The Dagster keys of the partitions a commit registered or moved (None: unpartitioned)."""
    changed = [c for c in commit.changes if c.kind != "removed"]
    if not changed:
        return []
    if w.layout is None:
        return [None]
    keys: dict[str, None] = {}
    for c in changed:
        key = w.key_of(ns, c.spec_id, c.values)
        if key is None:
            context.log.info(
                f"{w.key.to_user_string()}: {c.object_id} (spec v{c.spec_id}) changed in manifest "
                f"v{commit.version}, but is not a partition of the current partitioning"
            )
            continue
        keys[key] = None
    return list(keys)


def _materialization(w: WatchedAsset, key: str | None, commit: Commit) -> dg.AssetMaterialization:
    summary = commit.summary
    writer = summary.writer if summary is not None else None
    operation = summary.operation if summary is not None else None
    return dg.AssetMaterialization(
        w.key,
        partition=key,
        description="changed outside Dagster",
        metadata={
            MANIFEST_VERSION: commit.version,
            EXTERNAL: True,
            WRITER: "unknown (not this package)" if writer is None else writer,
            OPERATION: "unknown" if operation is None else str(operation),
            "dagster/uri": dg.MetadataValue.path(w.uri),
        },
    )


def _dynamic_requests(
    w: WatchedAsset, keys: Sequence[str | None], context: dg.SensorEvaluationContext
) -> list[dg.AddDynamicPartitionsRequest]:
    """Keys of a dynamic partitions definition that a writer created outside Dagster."""
    pdef = w.partitions_def
    if not isinstance(pdef, dg.DynamicPartitionsDefinition) or pdef.name is None:
        return []
    known = set(context.instance.get_dynamic_partitions(pdef.name))
    new = sorted({k for k in keys if k is not None and k not in known})
    return [dg.AddDynamicPartitionsRequest(pdef.name, new)] if new else []


def _downstream(
    graph: Any, w: WatchedAsset, keys: Sequence[str | None], version: int
) -> list[dg.RunRequest]:
    """One run per downstream asset partition mapped from the changed partitions."""
    requests = []
    parent = w.key.to_user_string()
    for child in sorted(graph.get(w.key).child_keys, key=lambda k: k.to_user_string()):
        child_name = child.to_user_string()
        if graph.get(child).partitions_def is None:
            requests.append(
                dg.RunRequest(run_key=f"{parent}@v{version}->{child_name}", asset_selection=[child])
            )
            continue
        child_keys: dict[str, None] = {}
        for key in keys:
            if key is None:
                continue  # an unpartitioned parent does not say which child partitions changed
            for ck in graph.get_child_partition_keys_of_parent(key, w.key, child):
                child_keys[ck] = None
        requests += [
            dg.RunRequest(
                run_key=f"{parent}@v{version}->{child_name}:{ck}",
                asset_selection=[child],
                partition_key=ck,
            )
            for ck in child_keys
        ]
    return requests


def build_lance_schema_sensor(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec],
    lance: Lake,
    *,
    name: str = "lance_schema_evolution",
    adopt_added_columns: bool = True,
    repair_job: str | None = None,
    minimum_interval_seconds: int = 300,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor watching each namespace's schema: a change (column added, renamed, dropped,
    widened) is recorded as an observation with the new ``dagster/column_schema``; a partition
    table that drifted from it either has its new nullable columns adopted into the namespace
    schema (``adopt_added_columns``) or fails the ``lance_schema_consistency`` check (and
    requests a run of ``repair_job``, when given). ``lance``: the
    :class:`~.resource.LancePartitionedResource` (or the IO manager) the assets are stored
    with."""
    watched = watched_assets(assets, lance)

    @dg.sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Watches the schemas of Lance partitioned namespaces and their tables.",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        cursor: dict[str, dict[str, Any]] = json.loads(context.cursor) if context.cursor else {}
        events: list[Any] = []
        requests: list[dg.RunRequest] = []
        for w in watched:
            ns = w.open()
            name_ = w.key.to_user_string()
            if ns is None:
                continue
            seen = cursor.get(name_)
            if seen is not None and seen["version"] == ns.version:
                continue
            fingerprint = _schema_fingerprint(ns)
            if seen is not None and seen["schema"] != fingerprint:
                before = w.open(seen["version"])
                if before is not None:  # else the namespace was re-created since
                    changes = schema_changes(before.schema_with_ids, ns.schema_with_ids)
                    events.append(_schema_observation(w, ns, changes))
            drift = _drift(ns)
            if drift.adoptable and adopt_added_columns:
                ns.add_columns(list(drift.adoptable.values()))
                changes = [
                    f"adopted column {f.name!r} ({f.type}) found in partition tables"
                    for f in drift.adoptable.values()
                ]
                events.append(_schema_observation(w, ns, changes))
                fingerprint = _schema_fingerprint(ns)
                drift = _drift(ns)
            if drift.issues:
                events.append(_drift_failure(w, ns, drift.issues))
                if repair_job is not None:
                    requests.append(
                        dg.RunRequest(run_key=f"{name_}@v{ns.version}:repair", job_name=repair_job)
                    )
            cursor[name_] = {"version": ns.version, "schema": fingerprint}
        return dg.SensorResult(
            run_requests=requests, asset_events=events, cursor=json.dumps(cursor, sort_keys=True)
        )

    return _sensor


def _schema_fingerprint(ns: Any) -> str:
    return hashlib.sha1(ns.metadata.get("schema", "").encode()).hexdigest()


def _field_ids(schema: pa.Schema) -> dict[int, pa.Field]:
    return {i: f for f in schema if (i := field_id(f)) is not None}


def schema_changes(before: pa.Schema, after: pa.Schema) -> list[str]:
    """How a namespace schema changed, column by column (matched by field id)."""
    old, new = _field_ids(before), _field_ids(after)
    out = []
    for fid, f in new.items():
        if fid not in old:
            out.append(f"added column {f.name!r} ({f.type})")
            continue
        was = old[fid]
        if was.name != f.name:
            out.append(f"renamed column {was.name!r} to {f.name!r}")
        if was.type != f.type:
            out.append(f"widened column {f.name!r} from {was.type} to {f.type}")
    out += [f"dropped column {f.name!r}" for fid, f in old.items() if fid not in new]
    return out


def _schema_observation(w: WatchedAsset, ns: Any, changes: list[str]) -> dg.AssetObservation:
    return dg.AssetObservation(
        w.key,
        description="; ".join(changes) or "schema metadata changed",
        metadata={
            "dagster/column_schema": column_schema(ns.schema),
            SCHEMA_CHANGES: dg.MetadataValue.json(changes),
            MANIFEST_VERSION: ns.version,
        },
    )


@dataclasses.dataclass
class _Drift:
    issues: list[Any]
    adoptable: dict[str, pa.Field]


def _drift(ns: Any) -> _Drift:
    """Partition tables disagreeing with the namespace schema; columns only the tables have
    (nullable, one type everywhere) can be adopted into the namespace schema."""
    import lance

    from ..core.engine import check_schemas, table_uri

    issues = check_schemas(ns)
    known = set(ns.schema.names)
    pins = {p["object_id"]: p for p in ns.inspect.partitions()}
    found: dict[str, set[pa.DataType]] = {}
    for issue in issues:
        if issue.column in known or issue.object_id not in pins:
            continue
        pin = pins[issue.object_id]
        table = lance.dataset(
            table_uri(ns.uri, pin["location"], issue.object_id),
            version=pin["read_version"],
            storage_options=ns.storage_options,
        )
        if issue.column in table.schema.names:
            found.setdefault(issue.column, set()).add(table.schema.field(issue.column).type)
    adoptable = {
        name: pa.field(name, next(iter(types)), nullable=True)
        for name, types in found.items()
        if len(types) == 1
    }
    rest = [i for i in issues if i.column not in adoptable]
    return _Drift(rest, adoptable)


def _drift_failure(w: WatchedAsset, ns: Any, issues: list[Any]) -> dg.AssetCheckEvaluation:
    offenders = [
        {"table": i.location, "values": i.values, "column": i.column, "problem": i.problem}
        for i in issues[:20]
    ]
    return dg.AssetCheckEvaluation(
        asset_key=w.key,
        check_name="lance_schema_consistency",
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"{len(issues)} partition table schema problem(s) the sensor may not repair",
        metadata={
            "offenders": dg.MetadataValue.json(json.loads(json.dumps(offenders, default=str))),
            MANIFEST_VERSION: ns.version,
        },
    )
