"""Sensors over partitioned namespaces: commits made outside the IO manager (Spark jobs, other
pipelines, people) become runless materializations of exactly the partitions they changed, and
runs of the downstream assets of those partitions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import dagster as dg

from ..core.history import Commit, commits
from .io_manager import COMMIT_SOURCE, LancePartitionedIOManager
from .watched import WatchedAsset, watched_assets

# commits of these operations change how data is stored, not the data
MAINTENANCE_OPERATIONS = frozenset({"compact"})


def build_lance_external_change_sensor(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec],
    io_manager: LancePartitionedIOManager,
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
    from the current versions."""
    watched = watched_assets(assets, io_manager)

    @dg.sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Reports commits to Lance partitioned namespaces made outside Dagster.",
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
                if commit.source == COMMIT_SOURCE or commit.operation in MAINTENANCE_OPERATIONS:
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
    props = commit.properties or {}
    return dg.AssetMaterialization(
        w.key,
        partition=key,
        description="changed outside Dagster",
        metadata={
            "lance/manifest_version": commit.version,
            "lance/external": True,
            "lance/writer": props.get("writer", "unknown (not this package)"),
            "lance/operation": props.get("operation", "unknown"),
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
