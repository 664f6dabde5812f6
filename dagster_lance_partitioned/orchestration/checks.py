"""Asset checks over the partitioned namespaces of assets stored by the IO manager: schema
consistency, read-version consistency, partition integrity and Dagster coverage. Each result
names what a person should look at (partitions, columns, versions)."""

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import dagster as dg

from ..core import health
from ..core.namespace import PartitionedNamespace
from .io_manager import LancePartitionedIOManager
from .watched import WatchedAsset, watched_assets

CHECKS = ("schema", "read_versions", "integrity", "coverage")
CHECK_NAMES = {
    "schema": "lance_schema_consistency",
    "read_versions": "lance_read_version_consistency",
    "integrity": "lance_partition_integrity",
    "coverage": "lance_dagster_coverage",
}
_SHOWN = 20  # offenders listed in metadata (all are counted)


def build_lance_partitioned_checks(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec],
    io_manager: LancePartitionedIOManager,
    *,
    checks: Iterable[str] = CHECKS,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
    blocking: bool | Iterable[str] = False,
    integrity_sample: int | None = 20,
    history: int | None = 50,
) -> list[dg.AssetChecksDefinition]:
    """Asset checks for every asset: ``schema`` (partition tables agree with the namespace
    schema), ``read_versions`` (every pinned version is readable, no uncommitted versions,
    no orphan table older than vacuum's grace; younger ones are reported), ``integrity``
    (rows of ``integrity_sample`` partitions, or all with None, lie in the partition the
    manifest says) and ``coverage`` (materialized Dagster keys and registered partitions
    agree).

    An asset's checks run together in one step (one definition per asset, named
    ``<asset>_lance_checks``), reading its namespace once; any subset of them can be run.
    ``blocking`` (True, or the names of the blocking checks) makes checks stop downstream
    assets of a run that failed them."""
    checks = list(dict.fromkeys(checks))
    unknown = sorted(set(checks) - set(CHECKS))
    blocking_checks = set(CHECKS if blocking is True else [] if blocking is False else blocking)
    unknown += sorted(blocking_checks - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown checks {unknown}; choose from {list(CHECKS)}")
    runners: dict[str, Callable[..., Outcome]] = {
        "schema": lambda w, ns, ctx: _schema(w, ns),
        "read_versions": lambda w, ns, ctx: _read_versions(w, ns, history),
        "integrity": lambda w, ns, ctx: _integrity(w, ns, integrity_sample),
        "coverage": _coverage,
    }
    return [
        _checks_of(w, {c: runners[c] for c in checks}, blocking_checks, severity)
        for w in watched_assets(assets, io_manager)
        if checks
    ]


Outcome = tuple[bool, str, dict[str, Any]]  # passed, description, metadata


def _checks_of(
    w: WatchedAsset,
    runners: dict[str, Callable[..., Outcome]],
    blocking: set[str],
    severity: dg.AssetCheckSeverity,
) -> dg.AssetChecksDefinition:
    specs = [
        dg.AssetCheckSpec(
            CHECK_NAMES[c],
            asset=w.key,
            blocking=c in blocking,
            description=f"{CHECK_NAMES[c].replace('_', ' ')} of the Lance partitioned "
            f"namespace {w.uri}",
        )
        for c in runners
    ]
    by_name = {CHECK_NAMES[c]: runner for c, runner in runners.items()}

    @dg.multi_asset_check(
        specs=specs,
        name=f"{'__'.join(w.key.path)}_lance_checks",
        can_subset=True,
        description=f"Lance partitioned namespace checks of {w.key.to_user_string()}",
    )
    def _run(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        selected = [k.name for k in context.selected_asset_check_keys if k.name in by_name]
        ns = w.open()  # one namespace snapshot for every check of this step
        for name in [n for n in by_name if n in selected]:
            if ns is None:
                yield dg.AssetCheckResult(
                    asset_key=w.key,
                    check_name=name,
                    passed=True,
                    description="nothing stored yet",
                    metadata={"dagster/uri": dg.MetadataValue.path(w.uri)},
                )
                continue
            passed, description, metadata = by_name[name](w, ns, context)
            yield dg.AssetCheckResult(
                asset_key=w.key,
                check_name=name,
                passed=passed,
                severity=severity,
                description=description,
                metadata={
                    **metadata,
                    "lance/manifest_version": ns.version,
                    "dagster/uri": dg.MetadataValue.path(w.uri),
                },
            )

    return _run


def _where(w: WatchedAsset, ns: PartitionedNamespace, spec_id: int, values: dict[str, Any]) -> str:
    """A partition as a person knows it: its Dagster key, else its values."""
    key = w.key_of(ns, spec_id, values)
    return key if key is not None else json.dumps(values, default=str, sort_keys=True)


def _spec_of(ns: PartitionedNamespace) -> dict[str, int]:
    return {p["object_id"]: p["spec_id"] for p in ns.partitions()}


def _result(passed: bool, description: str, **metadata: Any) -> Outcome:
    return passed, description, {k: _meta(v) for k, v in metadata.items()}


def _shown(items: list[Any]) -> list[Any]:
    """At most ``_SHOWN`` entries; a cut list ends with a note of how many were left out."""
    if len(items) <= _SHOWN:
        return items
    return [*items[:_SHOWN], f"... and {len(items) - _SHOWN} more (not shown)"]


def _meta(value: Any) -> Any:
    if isinstance(value, list | dict):
        return dg.MetadataValue.json(json.loads(json.dumps(value, default=str)))
    return value


def _schema(w: WatchedAsset, ns: PartitionedNamespace) -> Outcome:
    issues = health.check_schemas(ns)
    specs = _spec_of(ns)
    offenders = [
        {
            "partition": _where(w, ns, specs.get(i.object_id, 0), i.values),
            "table": i.location,
            "column": i.column,
            "problem": i.problem,
        }
        for i in issues
    ]
    columns = sorted({i.column for i in issues})
    return _result(
        not issues,
        "every partition table agrees with the namespace schema"
        if not issues
        else f"{len(issues)} schema problem(s) in column(s) {', '.join(columns)}",
        partitions_checked=len(specs),
        offending_partitions=len({i.object_id for i in issues}),
        offending_columns=columns,
        offenders=_shown(offenders),
    )


def _read_versions(w: WatchedAsset, ns: PartitionedNamespace, history: int | None) -> Outcome:
    issues, uncommitted = health.check_read_versions(ns, history=history)
    orphans = health.find_orphans(ns)
    specs = _spec_of(ns)
    broken = [
        {
            "partition": _where(w, ns, specs.get(i.object_id, 0), i.values),
            "table": i.location,
            "problem": i.problem,
            "detail": i.detail,
        }
        for i in issues
    ]
    pending = [
        {"table": u.location, "read_version": u.read_version, "uncommitted_versions": u.versions}
        for u in uncommitted
    ]
    parts = []
    if issues:
        parts.append(f"{len(issues)} registered table(s) cannot be read at their pinned version")
    if uncommitted:
        parts.append(f"{len(uncommitted)} table(s) hold versions no manifest commit references")
    stale = [o for o in orphans if o.stale()]
    if orphans:
        oldest = max(o.age_seconds for o in orphans) / 3600
        parts.append(
            f"{len(orphans)} orphan table(s), the oldest {oldest:.1f} h old "
            f"({len(stale)} older than vacuum's grace of "
            f"{health.ORPHAN_GRACE.total_seconds() / 3600:g} h)"
        )
    return _result(
        not issues and not uncommitted and not stale,
        "; ".join(parts) or "every pinned version is readable; no uncommitted writes or orphans",
        tables_checked=len(specs),
        unreadable=_shown(broken),
        uncommitted=_shown(pending),
        orphan_tables=len(orphans),
        stale_orphan_tables=len(stale),
        orphan_bytes=sum(o.bytes for o in orphans),
        oldest_orphan_hours=round(max((o.age_seconds for o in orphans), default=0) / 3600, 2),
        orphans=_shown(
            [{"location": o.location, "age_hours": round(o.age_seconds / 3600, 2)} for o in orphans]
        ),
    )


def _integrity(w: WatchedAsset, ns: PartitionedNamespace, sample: int | None) -> Outcome:
    issues = health.check_integrity(ns, sample=sample)
    specs = _spec_of(ns)
    offenders = [
        {
            "partition": _where(w, ns, specs.get(i.object_id, 0), i.values),
            "rows_in_wrong_partition": i.rows_wrong,
            "sample_row": i.sample,
        }
        for i in issues
    ]
    checked = len(specs) if sample is None else min(sample, len(specs))
    return _result(
        not issues,
        f"rows of {checked} partition(s) lie in their partitions"
        if not issues
        else f"{len(issues)} partition(s) hold rows of other partitions",
        partitions_checked=checked,
        offenders=_shown(offenders),
    )


def _coverage(
    w: WatchedAsset, ns: PartitionedNamespace, context: dg.AssetCheckExecutionContext
) -> Outcome:
    if w.layout is None:
        return _result(True, "unpartitioned asset: nothing to compare")
    registered = {
        key for p in ns.partitions() if (key := w.key_of(ns, p["spec_id"], p["values"])) is not None
    }
    materialized = set(context.instance.get_materialized_partitions(w.key))
    if w.partitions_def is not None:  # keys of an older partitioning are not compared
        valid = set(w.partitions_def.get_partition_keys(dynamic_partitions_store=context.instance))
        materialized &= valid
    missing_in_lance = sorted(materialized - registered)
    missing_in_dagster = sorted(registered - materialized)
    parts = []
    if missing_in_lance:
        parts.append(f"{len(missing_in_lance)} materialized key(s) have no Lance partition")
    if missing_in_dagster:
        parts.append(f"{len(missing_in_dagster)} Lance partition(s) were never materialized")
    return _result(
        not parts,
        "; ".join(parts) or f"all {len(registered)} partition(s) agree",
        materialized_keys=len(materialized),
        registered_partitions=len(registered),
        missing_in_lance_count=len(missing_in_lance),
        missing_in_dagster_count=len(missing_in_dagster),
        missing_in_lance=_shown(missing_in_lance),
        missing_in_dagster=_shown(missing_in_dagster),
    )
