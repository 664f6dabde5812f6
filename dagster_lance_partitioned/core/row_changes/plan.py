"""Planning a row-level change on one manifest snapshot: which partition tables it reads, where
input rows go (routed by the current spec), and the per-table changes, new partitions and
deregistrations it collects (:class:`ChangePlan`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..manifest.snapshot import ManifestSnapshot, TableEntry
from ..partitioning.partition_spec import PartitionSpec
from ..partitioning.partitioner import SpecEvaluator
from ..read.planning import ScanTask, _task, plan_scan
from ..schema import arrow_json
from .change import TableEdit

Key = tuple[Any, ...]


@dataclass
class ChangePlan:
    """One planning round's changes, against one manifest snapshot."""

    snap: ManifestSnapshot
    root: str
    schema: pa.Schema  # the namespace schema with field ids
    spec: PartitionSpec  # the current spec
    changes: dict[str, tuple[ScanTask, TableEdit]] = field(default_factory=dict)
    creates: dict[Key, list[pa.Table]] = field(default_factory=dict)
    deregister: dict[str, ScanTask] = field(default_factory=dict)
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    moved: int = 0

    def change(self, task: ScanTask) -> TableEdit:
        """The change of ``task``'s table (created empty on first use)."""
        if task.object_id not in self.changes:
            self.changes[task.object_id] = (task, TableEdit())
        return self.changes[task.object_id][1]

    def tasks_of(self, entries: Iterable[TableEntry]) -> list[ScanTask]:
        """Scan tasks of registered tables."""
        return [_task(e, self.snap.specs[e.spec_id], self.root, self.schema) for e in entries]

    def tasks(self, sql: str | None) -> list[ScanTask]:
        """The partition tables ``plan_scan(sql)`` selects (every table when pruning cannot
        render its manifest query, e.g. for a spec version no write has used yet: the filter
        is applied inside each table anyway)."""
        try:
            return list(plan_scan(self.snap, self.schema, self.root, sql).tasks)
        except KeyError:
            return list(plan_scan(self.snap, self.schema, self.root, None).tasks)

    def route(self, rows: pa.Table) -> tuple[dict[Key, np.ndarray], dict[Key, ScanTask]]:
        """``rows`` (namespace columns) split by the current spec: partition key -> row
        numbers, and the registered tables of those keys."""
        routed = route(self.spec, self.schema, rows)
        entries = self.snap.find_tables(self.spec, routed)
        tasks = self.tasks_of(entries.values())
        return routed, dict(zip(entries, tasks, strict=True))

    def place(self, rows: pa.Table) -> None:
        """Append ``rows`` to their partitions of the current spec (new ones created)."""
        routed, tables = self.route(rows)
        for key, idx in routed.items():
            part = rows.take(pa.array(idx))
            task = tables.get(key)
            if task is not None:
                self.change(task).appends.append(part)
            else:
                self.creates.setdefault(key, []).append(part)


def route(spec: PartitionSpec, schema: pa.Schema, rows: pa.Table) -> dict[Key, np.ndarray]:
    """Partition key under ``spec`` -> the numbers of the rows of ``rows`` it holds."""
    groups: dict[Key, list[np.ndarray]] = {}
    evaluator = SpecEvaluator(spec, schema)
    for start, batch in batches_with_offsets(rows):
        for key, part in evaluator.split(batch):
            idx = np.arange(batch.num_rows) if part.indices is None else np.asarray(part.indices)
            groups.setdefault(key, []).append(idx + start)
    return {k: np.concatenate(v) for k, v in groups.items()}


def batches_with_offsets(rows: pa.Table) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The batches of ``rows`` with the row number each starts at."""
    start = 0
    for batch in rows.to_batches():
        yield start, batch
        start += batch.num_rows


def stays(spec: PartitionSpec, schema: pa.Schema, rows: pa.Table, task: ScanTask) -> np.ndarray:
    """Per row of ``rows``: whether its partition under ``spec`` is still ``task``'s."""
    evaluator = SpecEvaluator(spec, schema)
    here = np.ones(rows.num_rows, dtype=bool)
    for start, batch in batches_with_offsets(rows):
        for value, f in zip(evaluator.values(batch), spec.fields, strict=True):
            want = task.partition_values[f.field_id]
            if want is None:
                same = pc.is_null(value)
            else:
                same = pc.fill_null(pc.equal(value, pa.scalar(want, value.type)), False)
            here[start : start + batch.num_rows] &= same.to_numpy(zero_copy_only=False)
    return here


def source_names(spec: PartitionSpec, schema: pa.Schema) -> set[str] | None:
    """The columns ``spec``'s partition values are computed from (None: one is gone)."""
    names = {arrow_json.field_id(f): f.name for f in schema}
    out: set[str] = set()
    for f in spec.fields:
        for sid in f.source_ids:
            if sid not in names:
                return None
            out.add(names[sid])
    return out


def keys_cover_partitions(snap: ManifestSnapshot, schema: pa.Schema, on: Iterable[str]) -> bool:
    """Whether the key columns ``on`` include the partition source columns of every spec
    version that has partitions: then a stored key can only lie in the partition its values
    map to under its table's spec."""
    counts = snap.table_counts()
    keys = set(on)
    for s in snap.specs.values():
        if not counts.get(s.spec_id):
            continue
        names = source_names(s, schema)
        if names is None or not names <= keys:
            return False
    return True


def first_unknown(schema: pa.Schema, names: Iterable[str]) -> str | None:
    """The first of ``names`` that is not a column of ``schema`` (None: all are)."""
    return next((n for n in names if schema.get_field_index(n) < 0), None)
