"""Asset checks over the partitioned namespaces of assets stored by the IO manager: schema
consistency, read-version consistency, partition integrity and Dagster coverage of the whole
namespace, index coverage for assets declaring ``lance/indexes``, and (optionally) the first
three per Dagster partition, on only the partition tables of the keys a run materialized. Each
result names what a person should look at (partitions, columns, versions, indexes)."""

import json
import warnings
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any

import dagster as dg

from ..core import (
    IntegrityIssue,
    NamespaceState,
    Orphan,
    PartitionedNamespace,
    SchemaIssue,
    UncommittedVersion,
    VersionIssue,
)
from ..core.engine import (
    ORPHAN_GRACE,
    ManifestSnapshot,
    TableEntry,
    check_integrity,
    check_read_versions,
    check_schemas,
    find_orphans,
)
from .dagster_private import target_materialization
from .indexes import COVERAGE_COLUMNS, UnindexedBound
from .metadata_keys import INDEXES, MANIFEST_VERSION
from .watched import Lake, WatchedAsset, watched_assets

CHECKS = ("schema", "read_versions", "integrity", "coverage", "indexes")
CHECK_NAMES = {
    "schema": "lance_schema_consistency",
    "read_versions": "lance_read_version_consistency",
    "integrity": "lance_partition_integrity",
    "coverage": "lance_dagster_coverage",
    "indexes": "lance_index_coverage",
}
# checks built only for the assets they apply to: "indexes" for those declaring lance/indexes
_APPLIES: dict[str, Callable[[WatchedAsset], bool]] = {"indexes": lambda w: bool(w.indexes)}
# the checks that also run per Dagster partition (partitioned_checks=True), and their names
PARTITION_CHECKS = ("schema", "read_versions", "integrity")
PARTITION_CHECK_NAMES = {
    "schema": "lance_schema_consistency_per_partition",
    "read_versions": "lance_read_version_consistency_per_partition",
    "integrity": "lance_integrity_per_partition",
}
_SHOWN = 20  # offenders listed in metadata (all are counted)


def build_lance_partitioned_checks(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec],
    lance: Lake,
    *,
    checks: Iterable[str] = CHECKS,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
    blocking: bool | Iterable[str] = False,
    integrity_sample: int | None = 20,
    history: int | None = 50,
    partitioned_checks: bool = False,
    index_unindexed_fraction: float | None = 0.1,
    index_unindexed_rows: int | None = None,
) -> list[dg.AssetChecksDefinition]:
    """Asset checks for every asset: ``schema`` (partition tables agree with the namespace
    schema), ``read_versions`` (every pinned version is readable, no uncommitted versions,
    no orphan table older than vacuum's grace; younger ones are reported), ``integrity``
    (rows of ``integrity_sample`` partitions, or all with None, lie in the partition the
    manifest says) and ``coverage`` (materialized Dagster keys and registered partitions
    agree); and, for the assets whose metadata declares ``lance/indexes`` (only those),
    ``indexes``: ``lance_index_coverage`` passes when the namespace declares every index of
    ``lance/indexes``, every partition table whose size calls for a declared index has it,
    and each index's unindexed rows (appended since it was built, searched exhaustively until
    ``optimize_indexes``) are at most ``index_unindexed_fraction`` of its indexed rows and at
    most ``index_unindexed_rows`` (None: that bound is off); it covers every index the
    namespace declares, also those declared by hand.

    An asset's checks run together in one step (one definition per asset, named
    ``<asset>_lance_checks``), reading its namespace once; any subset of them can be run.
    ``blocking`` (True, or the names of the blocking checks) makes checks stop downstream
    assets of a run that failed them. ``lance`` is the :class:`~.resource.LancePartitionedResource`
    (or the IO manager) the assets are stored with.

    ``partitioned_checks`` adds, for every partitioned asset, the ``schema``, ``read_versions``
    and ``integrity`` checks (those chosen) per Dagster partition, as partitioned asset checks
    named ``lance_schema_consistency_per_partition``, ``lance_read_version_consistency_per_
    partition`` and ``lance_integrity_per_partition`` (one more step per asset,
    ``<asset>_lance_partition_checks``): a run evaluates them for each of its partition keys on
    only the partition tables a read of that key uses (every row of them), so the UI shows a
    check state per partition. Partitioned asset checks are a preview feature of Dagster 1.13,
    hence off by default."""
    checks = list(dict.fromkeys(checks))
    unknown = sorted(set(checks) - set(CHECKS))
    blocking_checks = set(CHECKS if blocking is True else [] if blocking is False else blocking)
    unknown += sorted(blocking_checks - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown checks {unknown}; choose from {list(CHECKS)}")
    bound = UnindexedBound(index_unindexed_fraction, index_unindexed_rows)
    runners: dict[str, Callable[..., Outcome]] = {
        "schema": lambda w, ns, ctx: _schema(w, ns),
        "read_versions": lambda w, ns, ctx: _read_versions(w, ns, history),
        "integrity": lambda w, ns, ctx: _integrity(w, ns, integrity_sample),
        "coverage": _coverage,
        "indexes": lambda w, ns, ctx: _index_coverage(w, ns, bound),
    }
    watched = watched_assets(assets, lance)
    out = []
    for w in watched:
        mine = {c: runners[c] for c in checks if _applies(c, w)}
        if mine:
            out.append(_checks_of(w, mine, blocking_checks, severity))
    per_partition = [c for c in checks if c in PARTITION_CHECKS]
    if partitioned_checks and per_partition:
        out += [
            _partition_checks_of(w, per_partition, blocking_checks, severity, history)
            for w in watched
            if w.layout is not None
        ]
    return out


Outcome = tuple[bool, str, dict[str, Any]]  # passed, description, metadata


def _applies(check: str, w: WatchedAsset) -> bool:
    """Whether ``check`` is built for ``w`` (``indexes`` only when it declares some)."""
    applies = _APPLIES.get(check)
    return applies is None or applies(w)


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
                    MANIFEST_VERSION: ns.version,
                    "dagster/uri": dg.MetadataValue.path(w.uri),
                },
            )

    return _run


def _where(w: WatchedAsset, ns: PartitionedNamespace, spec_id: int, values: dict[str, Any]) -> str:
    """A partition as a person knows it: its Dagster key, else its values."""
    key = w.key_of(ns, spec_id, values)
    return key if key is not None else json.dumps(values, default=str, sort_keys=True)


def _spec_of(ns: PartitionedNamespace) -> dict[str, int]:
    return {p["object_id"]: p["spec_id"] for p in ns.inspect.partitions()}


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
    return _schema_outcome(w, ns, check_schemas(ns), _spec_of(ns))


def _schema_outcome(
    w: WatchedAsset,
    ns: PartitionedNamespace,
    issues: Sequence[SchemaIssue],
    specs: dict[str, int],
) -> Outcome:
    """The schema check's result on the tables ``specs`` (object id -> spec id) lists."""
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
    issues, uncommitted = check_read_versions(ns, history=history)
    orphans = find_orphans(ns)
    return _read_versions_outcome(w, ns, issues, uncommitted, _spec_of(ns), orphans)


def _read_versions_outcome(
    w: WatchedAsset,
    ns: PartitionedNamespace,
    issues: Sequence[VersionIssue],
    uncommitted: Sequence[UncommittedVersion],
    specs: dict[str, int],
    orphans: Sequence[Orphan] | None,
) -> Outcome:
    """The read-version check's result on the tables ``specs`` lists (and the namespace's
    orphan tables, unless ``orphans`` is None: not looked for)."""
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
    if orphans is None:
        return _result(
            not issues and not uncommitted,
            "; ".join(parts) or "every pinned version is readable; no uncommitted writes",
            tables_checked=len(specs),
            unreadable=_shown(broken),
            uncommitted=_shown(pending),
        )
    stale = [o for o in orphans if o.stale()]
    if orphans:
        oldest = max(o.age_seconds for o in orphans) / 3600
        parts.append(
            f"{len(orphans)} orphan table(s), the oldest {oldest:.1f} h old "
            f"({len(stale)} older than vacuum's grace of "
            f"{ORPHAN_GRACE.total_seconds() / 3600:g} h)"
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
    specs = _spec_of(ns)
    checked = len(specs) if sample is None else min(sample, len(specs))
    return _integrity_outcome(w, ns, check_integrity(ns, sample=sample), specs, checked)


def _integrity_outcome(
    w: WatchedAsset,
    ns: PartitionedNamespace,
    issues: Sequence[IntegrityIssue],
    specs: dict[str, int],
    checked: int,
) -> Outcome:
    """The integrity check's result: ``checked`` of the tables ``specs`` lists were read."""
    offenders = [
        {
            "partition": _where(w, ns, specs.get(i.object_id, 0), i.values),
            "rows_in_wrong_partition": i.rows_wrong,
            "sample_row": i.sample,
        }
        for i in issues
    ]
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
        key
        for p in ns.inspect.partitions()
        if (key := w.key_of(ns, p["spec_id"], p["values"])) is not None
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


def _index_coverage(w: WatchedAsset, ns: PartitionedNamespace, bound: UnindexedBound) -> Outcome:
    """``lance_index_coverage`` over the whole namespace: every index of ``lance/indexes`` is
    declared, no partition table lacks a declared index its size calls for, and each index's
    unindexed rows are within ``bound``."""
    coverages = ns.indexes()
    declared = {c.name for c in coverages}
    undeclared = [r.name for r in w.indexes if r.name not in declared]
    where: dict[str, str] = {}
    if any(c.needing for c in coverages):
        where = {
            p["object_id"]: _where(w, ns, p["spec_id"], p["values"])
            for p in ns.inspect.partitions()
        }
    rows = []
    over = []
    needing: list[dict[str, str]] = []
    for c in coverages:
        allowed = bound.allowed(c.indexed_rows)
        appended = c.unindexed_rows - c.pending_rows  # the pending ones are reported as such
        if allowed is not None and appended > allowed:
            over.append(f"{c.name}: {appended} unindexed row(s), more than {allowed}")
        needing += [{"index": c.name, "partition": where.get(o, o)} for o in c.needing]
        rows.append(
            {
                **{k: getattr(c, k) for k in COVERAGE_COLUMNS},
                "status": c.status,
                "unindexed_rows_allowed": allowed,
                "params": c.params,
            }
        )
    parts = []
    if undeclared:
        parts.append(
            f"{len(undeclared)} index(es) of {INDEXES} not declared on the namespace yet "
            f"({', '.join(undeclared)}): the next materialization declares them"
        )
    if needing:
        lacking = sorted({n["partition"] for n in needing})
        parts.append(
            f"{len(lacking)} partition(s) lack an index their size calls for, not built yet "
            f"({', '.join(lacking[:5])}{' ...' if len(lacking) > 5 else ''}): searched "
            "exhaustively meanwhile (results stay exact); the maintenance job "
            "(ns.maintenance.optimize_indexes()), or a run writing them, builds them"
        )
    if over:
        parts.append(
            f"unindexed rows over the bound ({bound.describe()}): {'; '.join(over)}; the "
            "maintenance job (ns.maintenance.optimize_indexes()) folds them in"
        )
    total_unindexed = sum(c.unindexed_rows for c in coverages)
    return _result(
        not parts,
        "; ".join(parts)
        or f"{len(coverages)} index(es) cover every partition that needs one; "
        f"{total_unindexed} unindexed row(s), {bound.describe()} per index",
        indexes=rows,
        indexes_declared=len(coverages),
        undeclared=undeclared,
        partitions_needing=len({n["partition"] for n in needing}),
        needing=_shown(needing),
        unindexed_rows=total_unindexed,
        indexed_rows=sum(c.indexed_rows for c in coverages),
        unindexed_fraction_max=bound.fraction,
        unindexed_rows_max=bound.rows,
    )


# -- per Dagster partition --------------------------------------------------------------------
def _partition_checks_of(
    w: WatchedAsset,
    chosen: Sequence[str],
    blocking: set[str],
    severity: dg.AssetCheckSeverity,
    history: int | None,
) -> dg.AssetChecksDefinition:
    """The per-partition checks ``chosen`` of one partitioned asset, as partitioned asset
    checks evaluated for each partition key of the run."""
    assert w.partitions_def is not None
    with warnings.catch_warnings():  # a partitions_def on a check spec is preview in 1.13
        warnings.simplefilter("ignore", category=dg.PreviewWarning)
        specs = [
            dg.AssetCheckSpec(
                PARTITION_CHECK_NAMES[c],
                asset=w.key,
                blocking=c in blocking,
                partitions_def=w.partitions_def,
                description=f"{CHECK_NAMES[c].replace('_', ' ')} of the partition tables of "
                f"each partition key, in the Lance partitioned namespace {w.uri}",
            )
            for c in chosen
        ]
    check_of = {PARTITION_CHECK_NAMES[c]: c for c in chosen}
    outputs = {spec.name: spec.get_python_identifier() for spec in specs}
    blocking_names = {spec.name for spec in specs if spec.blocking}

    @dg.multi_asset_check(
        specs=specs,
        name=f"{'__'.join(w.key.path)}_lance_partition_checks",
        can_subset=True,
        description=f"Lance checks of {w.key.to_user_string()} per partition key",
    )
    def _run(
        context: dg.AssetCheckExecutionContext,
    ) -> Iterator[dg.Output[None] | dg.AssetCheckEvaluation]:
        selected = [
            n for n in outputs if dg.AssetCheckKey(w.key, n) in context.selected_asset_check_keys
        ]
        if not (context.has_partition_key or context.has_partition_key_range):
            context.log.info(
                f"{w.key.to_user_string()}: the per-partition Lance checks run for the partition "
                "keys of a partitioned run; this run has none"
            )
            return
        keys = [str(k) for k in context.partition_keys]
        for name in selected:  # the check ran; its results are the per-key evaluations below
            yield dg.Output(None, output_name=outputs[name])
        ns = w.open()  # one namespace snapshot for every key and check of this step
        outcomes = _per_key(w, ns, keys, [check_of[n] for n in selected], history)
        targets = _target_materializations(context.instance, w.key, keys)
        for key in keys:
            for name in selected:
                passed, description, metadata = outcomes[key][check_of[name]]
                yield dg.AssetCheckEvaluation(
                    asset_key=w.key,
                    check_name=name,
                    passed=passed,
                    metadata={
                        **metadata,
                        **({MANIFEST_VERSION: ns.version} if ns is not None else {}),
                        "dagster/uri": dg.MetadataValue.path(w.uri),
                    },
                    target_materialization_data=targets.get(key),
                    severity=severity,
                    description=description,
                    blocking=name in blocking_names,
                    partition=key,
                )

    return _run


class _Narrowed(ManifestSnapshot):
    """One manifest version seen through some of its partition tables only (those of the
    checked partition keys), so that the namespace health checks inspect only those."""

    def __init__(self, snapshot: ManifestSnapshot, tables: list[TableEntry]) -> None:
        super().__init__(snapshot.dataset, list(snapshot.specs.values()))
        self._only = tables

    def tables(self) -> list[TableEntry]:
        """The partition tables of the checked keys."""
        return list(self._only)

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """Not shared with whole snapshots of the version: results here cover some tables."""
        return compute()


def _per_key(
    w: WatchedAsset,
    ns: PartitionedNamespace | None,
    keys: Sequence[str],
    chosen: Sequence[str],
    history: int | None,
) -> dict[str, dict[str, Outcome]]:
    """Each key's outcome of each chosen check, on the partition tables a read of that key
    uses (those of older partition specs too), every table inspected once."""
    if ns is None:
        nothing = _result(True, "nothing stored yet")
        return {k: dict.fromkeys(chosen, nothing) for k in keys}
    assert w.layout is not None
    schema = ns.schema
    tables = {
        k: [
            t.object_id
            for t in ns.plan_scan(w.layout.row_filter([k], schema), by_stats=False).tasks
        ]
        for k in keys
    }
    wanted = sorted({o for ids in tables.values() for o in ids})
    snapshot = ns.state.snapshot
    entries = snapshot.entries(snapshot.rows_by_id(wanted)) if wanted else []
    state = NamespaceState(ns.state.store, _Narrowed(snapshot, entries), pinned=True)
    spec_ids = {e.object_id: e.spec_id for e in entries}
    schema_issues = check_schemas(state) if "schema" in chosen else []
    version_issues, uncommitted = (
        check_read_versions(state, history=history) if "read_versions" in chosen else ([], [])
    )
    integrity_issues = check_integrity(state, sample=None) if "integrity" in chosen else []
    out: dict[str, dict[str, Outcome]] = {}
    for key in keys:
        mine = set(tables[key])
        specs = {o: spec_ids[o] for o in tables[key] if o in spec_ids}
        found: dict[str, Outcome] = {}
        if "schema" in chosen:
            schema_found = [i for i in schema_issues if i.object_id in mine]
            found["schema"] = _schema_outcome(w, ns, schema_found, specs)
        if "read_versions" in chosen:
            found["read_versions"] = _read_versions_outcome(
                w,
                ns,
                [i for i in version_issues if i.object_id in mine],
                [u for u in uncommitted if u.object_id in mine],
                specs,
                None,
            )
        if "integrity" in chosen:
            rows_found = [i for i in integrity_issues if i.object_id in mine]
            found["integrity"] = _integrity_outcome(w, ns, rows_found, specs, len(specs))
        if not mine:  # a key without rows (or never written): nothing to check, said so
            found = {
                c: (True, "no partition table holds rows of this key", m)
                for c, (_, _, m) in found.items()
            }
        out[key] = found
    return out


def _target_materializations(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, keys: Sequence[str]
) -> dict[str, Any]:
    """The latest materialization of each partition key (the one its evaluations check)."""

    def fetch(wanted: Sequence[str], limit: int) -> list[Any]:
        records_filter = dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=list(wanted))
        return list(instance.fetch_materializations(records_filter, limit=limit).records)

    out: dict[str, Any] = {}

    def add(records: Sequence[Any]) -> None:
        for r in records:  # newest first
            partition = r.partition_key
            if partition is not None and partition not in out:
                out[partition] = target_materialization(r)

    add(fetch(keys, len(keys)))  # usually one per key: the run's own materializations
    for key in [k for k in keys if k not in out]:
        add(fetch([key], 1))
    return out
