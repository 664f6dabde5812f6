"""Scan planning: which partition tables, at which versions, a filter needs."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from . import storage
from .filters import FilterLike, parse, to_sql
from .manifest import ManifestSnapshot, TableEntry
from .partition_constants import identity_constants
from .predicates import FALSE, TRUE, NotRenderable, Pred, from_datafusion, holds
from .predicates import to_sql as pred_sql
from .pruning import (
    SpecProjector,
    SpecPruning,
    manifest_query,
    manifest_where,
    scan_manifest,
    select_tables,
)
from .spec import PartitionSpec


@dataclass(frozen=True)
class ScanTask:
    """One partition table to read, pinned to the version the manifest registered."""

    object_id: str
    location: str
    uri: str
    read_version: int | None
    read_branch: str | None
    read_tag: str | None
    spec_id: int
    partition_values: dict[str, Any]
    # identity partition columns -> their value (filled in when a table does not store them)
    constants: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScanPlan:
    """The tasks a scan reads, the filter applied inside each, and the manifest version used."""

    tasks: tuple[ScanTask, ...]
    residual_filter: str | None
    manifest_version: int
    manifest_query: str = ""
    source_predicate: str = "TRUE"
    predicates: tuple[tuple[int, str], ...] = ()  # (spec id, manifest predicate SQL)
    snapshot: ManifestSnapshot | None = field(default=None, repr=False, compare=False)

    @property
    def total_partitions(self) -> int:
        """Registered partition tables of the manifest version (counted when first asked)."""
        return sum(self._totals().values())

    @property
    def specs(self) -> tuple[SpecPruning, ...]:
        """Per spec version: the manifest predicate and the partitions it keeps / has."""
        totals = self._totals()
        return tuple(
            SpecPruning(
                sid, sql, sum(1 for t in self.tasks if t.spec_id == sid), totals.get(sid, 0)
            )
            for sid, sql in self.predicates
        )

    def _totals(self) -> dict[int, int]:
        if self.snapshot is None:
            counts: dict[int, int] = {}
            for t in self.tasks:
                counts[t.spec_id] = counts.get(t.spec_id, 0) + 1
            return counts
        return self.snapshot.table_counts()

    @property
    def pruned(self) -> int:
        """How many registered partition tables the plan skips."""
        return self.total_partitions - len(self.tasks)

    def explain(self) -> str:
        """A readable account of the plan: per spec version, the manifest predicate and how
        many partitions it keeps, then the filter applied inside each partition."""
        lines = [
            f"scan of manifest version {self.manifest_version}: "
            f"{len(self.tasks)} of {self.total_partitions} partition tables",
            f"  filter: {self.residual_filter or '(none)'}",
        ]
        for sp in self.specs:
            lines.append(
                f"  spec v{sp.spec_id}: keep {sp.kept} / {sp.total} partitions where {sp.predicate}"
            )
        lines.append(
            f"  residual filter in each partition scan: {self.residual_filter or '(none)'}"
        )
        lines.append(f"  manifest query: {self.manifest_query}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The plan's explanation as JSON-able data."""
        return {
            "manifest_version": self.manifest_version,
            "filter": self.residual_filter,
            "total_partitions": self.total_partitions,
            "kept_partitions": len(self.tasks),
            "specs": [
                {
                    "spec_id": s.spec_id,
                    "manifest_predicate": s.predicate,
                    "kept": s.kept,
                    "total": s.total,
                }
                for s in self.specs
            ],
            "residual_filter": self.residual_filter,
            "manifest_query": self.manifest_query,
            "tasks": [
                {
                    "object_id": t.object_id,
                    "location": t.location,
                    "read_version": t.read_version,
                    "spec_id": t.spec_id,
                }
                for t in self.tasks
            ],
        }

    def __str__(self) -> str:
        return self.explain()


def plan_scan(
    snapshot: ManifestSnapshot,
    schema: pa.Schema,
    root: str,
    filter: FilterLike = None,
) -> ScanPlan:
    """Tasks for the partition tables that may hold rows matching ``filter``: the filter is
    projected onto every spec version's partition columns and ``__manifest`` is queried once."""
    sql = to_sql(filter)
    source: Pred = from_datafusion(parse(sql, schema), schema) if sql else TRUE
    columns = set(snapshot.arrow_schema.names)
    predicates = {
        # a spec's manifest columns arrive with its first write: until then it has no tables
        spec_id: projector(spec, schema).project(source)
        if all(f.column in columns for f in spec.fields)
        else FALSE
        for spec_id, spec in snapshot.specs.items()
    }
    query = manifest_query(snapshot, predicates)
    tables = _selected_tables(snapshot, predicates, query)
    tasks = [_task(t, snapshot.specs[t.spec_id], root, schema) for t in tables]
    types = {f.name: f.type for f in snapshot.arrow_schema}
    return ScanPlan(
        tuple(tasks),
        sql,
        snapshot.version,
        query,
        pred_sql(source, {f.name: f.type for f in schema}),
        tuple((sid, pred_sql(pred, types)) for sid, pred in sorted(predicates.items())),
        snapshot,
    )


def _selected_tables(
    snapshot: ManifestSnapshot, predicates: dict[int, Pred], query: str
) -> list[TableEntry]:
    """The partition tables the manifest query selects: from the loaded manifest when it is
    in memory, else with Lance's scanner (indexed) when the predicate renders for Lance."""
    if all(p == TRUE for p in predicates.values()):
        return snapshot.tables()
    if snapshot.loaded or snapshot.is_small():
        # a small manifest is read once and the predicate evaluated on its rows in memory
        return [t for t in snapshot.tables() if _keeps(t, snapshot, predicates[t.spec_id])]
    try:
        where = manifest_where(snapshot, predicates, dialect="lance")
    except NotRenderable:
        selected = select_tables(snapshot, query)
        return [t for t in snapshot.tables() if t.object_id in selected]
    return scan_manifest(snapshot, where)


def _keeps(entry: TableEntry, snapshot: ManifestSnapshot, pred: Pred) -> bool:
    spec = snapshot.specs[entry.spec_id]
    row = {f.column: v for f, v in zip(spec.fields, entry.values, strict=True)}
    return holds(pred, row) is True


@functools.lru_cache(maxsize=64)
def projector(spec: PartitionSpec, schema: pa.Schema) -> SpecProjector:
    """The (cached) projector of one spec version over a namespace schema."""
    return SpecProjector(spec, schema)


def _task(entry: TableEntry, spec: PartitionSpec, root: str, schema: pa.Schema) -> ScanTask:
    values = entry.partition_values(spec)
    storage.check_table_refs(entry.object_id, entry.location, entry.read_branch, entry.read_tag)
    return ScanTask(
        entry.object_id,
        entry.location,
        storage.table_uri(root, entry.location, entry.object_id),
        None if entry.read_version is None else int(entry.read_version),
        entry.read_branch,
        entry.read_tag,
        entry.spec_id,
        values,
        identity_constants(spec, schema, values),
    )
