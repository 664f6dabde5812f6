"""Indexing one partition table: a detached version of a table version that carries the
declared indexes its size calls for, built without publishing anything (Lance's uncommitted
index segments, committed as one ``CreateIndex`` on exactly the version given).

Every producer of partition-table versions (writes, row changes, compaction) passes its new
versions through :func:`index_version` before the manifest commit that registers them, so a
registered version carries every declared index it needs; rows appended to an indexed table
stay unindexed (Lance searches them exhaustively) until :func:`index_version` folds them in
with ``fold=True`` (``ns.maintenance.optimize_indexes``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.dataset import Index

from .. import table_version as tv
from ..errors import IndexBuildError, clean_message
from ..schema.conform import column_sources
from .declaration import IndexDeclaration, vector_dimension
from .distances import matrix_of
from .ivf import OUTLIERS_KEY, find_outliers, read_centroids


@dataclass(frozen=True)
class TableIndexState:
    """What a partition table version holds of one declared index."""

    name: str
    rows: int  # rows of the table version
    present: bool  # the table carries an index of that name
    needed: bool  # its size calls for one (rows >= min_rows and the column is stored)
    indexed_rows: int  # rows the index covers
    column: str | None  # the table's column holding the declared column (None: not stored)

    @property
    def unindexed_rows(self) -> int:
        """Rows searched without the index (appended since it was built)."""
        return max(0, self.rows - self.indexed_rows) if self.present else 0


@dataclass(frozen=True)
class IndexedVersion:
    """A table version after indexing: ``version`` (the input one when nothing was built) and
    the indexes built, extended or dropped on it."""

    version: int
    built: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


def describe(ds: lance.LanceDataset) -> tuple[int, dict[str, Any]]:
    """(rows, index name -> Lance's description) of a table version."""
    return ds.count_rows(), {d.name: d for d in ds.describe_indices()}


def table_state(
    ds: lance.LanceDataset, decl: IndexDeclaration, schema: pa.Schema
) -> TableIndexState:
    """What ``ds`` holds of ``decl`` (``schema``: the namespace schema with field ids)."""
    rows, indexes = describe(ds)
    column = column_sources(ds.schema, schema).get(decl.column)
    found = indexes.get(decl.name)
    indexed = int(found.num_rows_indexed) if found is not None else 0
    needed = column is not None and rows > 0 and rows >= max(decl.min_rows, decl.trainable_rows)
    return TableIndexState(decl.name, rows, found is not None, needed, indexed, column)


def index_version(
    uri: str,
    version: int,
    declared: Sequence[IndexDeclaration],
    schema: pa.Schema,
    storage_options: dict[str, str] | None,
    *,
    object_id: str = "",
    fold: bool = False,
    drop: Sequence[str] = (),
    dataset: lance.LanceDataset | None = None,
) -> IndexedVersion:
    """A detached version of the table at ``uri`` / ``version`` that carries every index of
    ``declared`` its size calls for (missing ones built over all its rows), with ``fold``
    also the rows appended since an index was built (a new segment of a scalar or full-text
    index; a vector index is retrained over all rows), and without the indexes named in
    ``drop``. Nothing is published: the result is reachable only through its version number.
    ``dataset``: the table already open at ``version``."""
    if not declared and not drop:
        return IndexedVersion(version)
    ds = dataset if dataset is not None else tv.open_version(uri, version, storage_options)
    _, indexes = describe(ds)
    new: list[Index] = []
    removed: list[Index] = []
    built: list[str] = []
    fragments = [f.fragment_id for f in ds.get_fragments()]
    for decl in declared:
        state = table_state(ds, decl, schema)
        if not state.needed or state.column is None:
            continue
        if not state.present:
            new.append(_build(ds, decl, state, fragments, object_id))
            built.append(decl.name)
        elif fold:
            stale = _stale_statistics(ds, decl, state)
            if not stale and state.unindexed_rows == 0:
                continue
            current = indexes[decl.name]
            if decl.kind == "vector" or stale:
                # trained again / statistics recounted: the whole index anew
                new.append(_build(ds, decl, state, fragments, object_id, replace=True))
                removed.extend(_segments(current))
            else:
                covered = {int(i) for s in current.segments for i in s.fragment_ids}
                rest = [i for i in fragments if i not in covered]
                if not rest:
                    continue
                new.append(_build(ds, decl, state, rest, object_id, replace=True))
            built.append(decl.name)
    dropped = [name for name in drop if name in indexes]
    for name in dropped:
        removed.extend(_segments(indexes[name]))
    if not new and not removed:
        return IndexedVersion(version)
    try:
        committed = tv.commit(
            ds, LanceOperation.CreateIndex(new, removed), ds.version, storage_options
        )
        vectors = [d for d in declared if d.kind == "vector" and d.name in built]
        if vectors or removed:
            committed = _record_outliers(committed, vectors, storage_options)
    except (OSError, ValueError, RuntimeError) as e:
        raise IndexBuildError(
            f"partition {object_id or uri}: cannot commit its indexes: {clean_message(e)}"
        ) from None
    return IndexedVersion(int(committed.version), tuple(built), tuple(dropped))


def _record_outliers(
    ds: lance.LanceDataset,
    decls: Sequence[IndexDeclaration],
    storage_options: dict[str, str] | None,
) -> lance.LanceDataset:
    """``ds`` with the rows far from their centroid in each new vector index of ``decls``
    recorded in its config (see :mod:`.ivf`), and the records of segments it no longer
    holds removed: a version of its own on top of ``ds`` (``ds`` when nothing changes)."""
    segments = {str(s.uuid) for d in ds.describe_indices() for s in d.segments}
    config = ds.config()
    updates: dict[str, str | None] = {
        key: None
        for key in config
        if key.startswith(OUTLIERS_KEY) and key[len(OUTLIERS_KEY) :] not in segments
    }
    _, indexes = describe(ds)
    for decl in decls:
        found = indexes.get(decl.name)
        if found is None or len(found.segments) != 1:
            continue
        centroids = read_centroids(ds, decl.name)
        if centroids is None:
            continue
        column = next(iter(found.field_names))
        table = ds.to_table(columns=[column], with_row_id=True, filter=f"`{column}` IS NOT NULL")
        matrix = matrix_of(table.column(column), centroids.shape[1])
        ids = table.column("_rowid").to_numpy()
        outliers = find_outliers(matrix, ids, centroids, decl.metric)
        updates[OUTLIERS_KEY + str(found.segments[0].uuid)] = json.dumps(outliers)
    if not updates:
        return ds
    op = LanceOperation.UpdateConfig(config_updates=LanceOperation.UpdateMap(updates))
    return tv.commit(ds, op, ds.version, storage_options)


def _stale_statistics(
    ds: lance.LanceDataset, decl: IndexDeclaration, state: TableIndexState
) -> bool:
    """Whether a full-text index scores with document statistics of rows deleted since it was
    built (Lance keeps them until the index is rebuilt)."""
    if decl.kind != "text":
        return False
    try:
        stats = ds.stats.index_stats(decl.name)
    except (OSError, ValueError, RuntimeError):
        return False
    docs = sum(int(s.get("num_docs", 0)) for s in stats.get("segments") or stats.get("indices", []))
    return docs > state.rows


def _build(
    ds: lance.LanceDataset,
    decl: IndexDeclaration,
    state: TableIndexState,
    fragments: list[int],
    object_id: str,
    replace: bool = False,
) -> Index:
    """One uncommitted index segment of ``decl`` over ``fragments`` of ``ds``."""
    assert state.column is not None
    dimension = vector_dimension(ds.schema.field(state.column).type)
    params = decl.build_params(state.rows, dimension)
    try:
        segment = ds.create_index_uncommitted(
            state.column,
            decl.index_type,
            name=decl.name,
            fragment_ids=fragments,
            replace=replace,
            **params,
        )
        if decl.kind != "vector":
            # scalar and full-text segments are published in their merged form
            segment = ds.merge_existing_index_segments([segment])
    except (OSError, ValueError, RuntimeError, TypeError, ArithmeticError) as e:
        raise IndexBuildError(
            f"partition {object_id or ds.uri}: cannot build index {decl.name!r} "
            f"({decl.index_type} on {decl.column!r}, {state.rows} rows): {clean_message(e)}"
        ) from None
    return segment


def _segments(description: Any) -> list[Index]:
    """The published segments of an index, as a ``CreateIndex`` removes them."""
    return [
        Index(
            uuid=str(s.uuid),
            name=description.name,
            fields=list(description.fields),
            dataset_version=int(s.dataset_version_at_last_update),
            fragment_ids=s.fragment_ids,
            index_version=int(s.index_version),
        )
        for s in description.segments
    ]
