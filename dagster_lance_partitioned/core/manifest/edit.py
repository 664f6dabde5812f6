"""Manifest edits and the single Lance transaction that applies one: row-level (only the changed
rows are written) or, when the manifest's columns change, a full rewrite; and the upkeep that
keeps a manifest of many small commits fast to read (compaction, incremental indexes)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import lance
import lance.commit
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.dataset import Transaction
from lance.fragment import write_fragments

from ..errors import ManifestError
from ..tuning import tuning
from .retire import Use

log = logging.getLogger(__name__)

_OFFSET_MASK = (1 << 32) - 1  # a row address is (fragment id << 32) | row offset

# Fold new fragments into the manifest's indexes once this many are unindexed (the other upkeep
# thresholds are core.tuning's; see docs/explanation/benchmarks.md, commit scale).
INDEX_MAX_UNINDEXED_FRAGMENTS = 16


class NothingToCommit(Exception):
    """Raised by a manifest commit's plan when the latest manifest leaves it nothing to change
    (the caller reports that no commit was made)."""


@dataclass
class ManifestEdit:
    """Row changes to apply in one manifest commit.

    ``upserts`` maps object ids to the columns to set (other columns of an existing row, including
    ones this package does not know, keep their values); ``deletes`` removes rows."""

    upserts: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: set[str] = field(default_factory=set)
    new_columns: list[pa.Field] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    # table-metadata keys to set (schema, specs, flags; None removes a key); a commit changes
    # rows or metadata
    metadata: dict[str, str | None] = field(default_factory=dict)
    # the table versions the edit registers that were made before its planning (see retire)
    uses: list[Use] = field(default_factory=list)
    # whether the edit can be applied to the changed rows alone (False: apply() needs every row)
    row_level = True

    def apply(self, table: pa.Table) -> pa.Table:
        """The manifest rows after this edit."""
        schema = table.schema
        for f in self.new_columns:
            if f.name not in schema.names:
                schema = schema.append(f)
                table = table.append_column(f, pa.nulls(table.num_rows, f.type))
        touched = set(self.upserts) | self.deletes
        ids = table.column("object_id")
        if touched:
            mask = pc.is_in(ids, value_set=pa.array(sorted(touched), pa.utf8()))
            keep = table.filter(pc.invert(mask))
            changed = table.filter(mask).to_pylist()
        else:
            keep, changed = table, []
        new = pa.Table.from_pylist(self.changed_rows(changed, schema), schema=schema)
        return pa.concat_tables([keep.cast(schema), new])

    def changed_rows(
        self, existing: list[dict[str, Any]], schema: pa.Schema
    ) -> list[dict[str, Any]]:
        """The rows this edit writes, given the ``existing`` rows of the ids it touches."""
        by_id = {row["object_id"]: row for row in existing}
        rows = []
        for oid, cols in self.upserts.items():
            if oid in self.deletes:
                continue
            unknown = set(cols) - set(schema.names)
            if unknown:
                raise ManifestError(f"manifest has no column(s) {sorted(unknown)}")
            row = dict(by_id.get(oid) or dict.fromkeys(schema.names))
            row.update(cols)
            row["object_id"] = oid
            rows.append(row)
        return rows


class ManifestRows(Protocol):
    """What a transaction is built from: one manifest version and lookups of its rows (a
    :class:`~.snapshot.ManifestSnapshot`)."""

    dataset: lance.LanceDataset
    version: int

    @property
    def table(self) -> pa.Table: ...

    def sentinel_id(self) -> str | None: ...

    def forget_sentinel(self) -> None: ...

    def rows_by_id(self, object_ids: Iterable[str], with_address: bool = False) -> pa.Table: ...


def build_transaction(
    snap: ManifestRows,
    edit: ManifestEdit,
    storage_options: dict[str, str] | None,
    properties: dict[str, str],
) -> Transaction:
    """One Lance transaction on top of ``snap`` that applies ``edit``.

    Row-level when possible: the touched rows are deleted (deletion vectors on their fragments)
    and their new versions appended as one small fragment, in one ``Update``; the namespace's
    sentinel row (its first spec namespace) is always re-written too, so any two concurrent
    manifest commits touch a common row and Lance makes the later one re-plan (it would
    otherwise merge two commits that each register the same new partition). New columns, edits
    that need every row, and manifests without a sentinel are written whole (``Overwrite``)."""
    if edit.metadata:
        if edit.upserts or edit.deletes or edit.new_columns:
            raise ManifestError("a manifest commit changes either rows or table metadata")
        op: Any = LanceOperation.UpdateConfig(
            table_metadata_updates=LanceOperation.UpdateMap(dict(edit.metadata), replace=False)
        )
        return Transaction(
            read_version=snap.version, operation=op, transaction_properties=properties
        )
    ds = snap.dataset
    sentinel = snap.sentinel_id()
    missing_columns = [f for f in edit.new_columns if f.name not in ds.schema.names]
    current = None
    if sentinel is not None and not missing_columns and edit.row_level:
        touched = set(edit.upserts) | edit.deletes | {sentinel}
        current = snap.rows_by_id(touched, with_address=True)
        if sentinel not in current.column("object_id").to_pylist():
            snap.forget_sentinel()  # a cached sentinel this version lacks: rewrite whole
            current = None
    if current is None:
        new_table = edit.apply(snap.table)
        frags = write_fragments(
            new_table,
            snap.dataset,  # an open handle: nothing is read again
            schema=new_table.schema,
            mode="overwrite",
            storage_options=storage_options,
        )
        op = LanceOperation.Overwrite(new_table.schema, frags)
        return Transaction(
            read_version=snap.version, operation=op, transaction_properties=properties
        )
    addresses = current.column("_rowaddr").to_pylist()
    current = current.drop_columns(["_rowaddr"])
    existing = current.to_pylist()
    rows = edit.changed_rows(existing, ds.schema)
    if sentinel not in edit.upserts and sentinel not in edit.deletes:
        rows += [row for row in existing if row["object_id"] == sentinel][:1]
    # every row read is replaced: delete them by address (no scan of their fragments), and
    # write the deletion files and the new rows' fragment at the same time
    offsets: dict[int, list[int]] = {}
    for address in addresses:
        offsets.setdefault(address >> 32, []).append(address & _OFFSET_MASK)
    for fragment_id in offsets:
        if ds.get_fragment(fragment_id) is None:
            raise ManifestError(f"manifest version {snap.version} lacks fragment {fragment_id}")

    def delete(fragment_id: int) -> Any:
        fragment = ds.get_fragment(fragment_id)
        assert fragment is not None
        return fragment.delete_rows(sorted(offsets[fragment_id]))

    def append() -> list[Any]:
        if not rows:
            return []
        return list(
            write_fragments(
                pa.Table.from_pylist(rows, schema=ds.schema),
                ds,
                schema=ds.schema,
                mode="append",
                data_storage_version=ds.data_storage_version,
                storage_options=storage_options,
            )
        )

    fragment_ids = sorted(offsets)
    with ThreadPoolExecutor(max_workers=len(fragment_ids) + 1) as pool:
        written = pool.submit(append)
        deleted = list(pool.map(delete, fragment_ids))
        new_fragments = written.result()
    updated, removed = [], []
    for fragment_id, metadata in zip(fragment_ids, deleted, strict=True):
        if metadata is None:
            removed.append(fragment_id)
        else:
            updated.append(metadata)
    op = LanceOperation.Update(
        removed_fragment_ids=removed, updated_fragments=updated, new_fragments=new_fragments
    )
    return Transaction(read_version=snap.version, operation=op, transaction_properties=properties)


def upkeep(ds: lance.LanceDataset) -> lance.LanceDataset:
    """Keep a manifest fast to read after a commit (best effort; a concurrent commit wins and
    the next commit tries again): merge accumulated small fragments and materialise deletions,
    create the scalar indexes once the manifest is large, and fold new fragments into them."""
    with contextlib.suppress(lance.commit.CommitConflictError, OSError, ValueError, RuntimeError):
        if len(ds.get_fragments()) >= tuning().compact_min_fragments:
            ds.optimize.compact_files(
                materialize_deletions=True, materialize_deletions_threshold=0.1
            )
            ds = lance.dataset(ds.uri, storage_options=_options(ds))
        ds = _index(ds)
    return ds


def _options(ds: lance.LanceDataset) -> dict[str, str] | None:
    return getattr(ds, "_storage_options", None)


def _index(ds: lance.LanceDataset) -> lance.LanceDataset:
    """Scalar indexes on a large manifest: BTree on ``object_id`` and the partition columns,
    bitmap on ``object_type``; created once, then updated incrementally."""
    if ds.count_rows() < tuning().index_min_rows:
        return ds
    indices = ds.describe_indices()
    have = {name for index in indices for name in index.field_names}
    wanted = [("object_type", "BITMAP"), ("object_id", "BTREE")] + [
        (name, "BTREE") for name in ds.schema.names if name.startswith("partition_field_")
    ]
    created = False
    for column, kind in wanted:
        if column not in have:
            ds.create_scalar_index(column, kind)
            created = True
    if created or not indices:
        return ds
    stats = ds.stats.index_stats(indices[0].name)
    if int(stats.get("num_unindexed_fragments", 0)) >= INDEX_MAX_UNINDEXED_FRAGMENTS:
        ds.optimize.optimize_indices()
    return ds
