"""Vectors of indexed partition table versions read for exact search and kept in the search
session: the rows an index does not cover (appended since it was built), the rows recorded
as outliers of an index (see :mod:`.ivf`), the rows a filter keeps, and every row of a table
whose index finds fewer than k (tables without an index are read into pools:
:mod:`.pooled`). A table version never changes, so what was read of it stays true; a
filter's rows are kept per (table version, filter)."""

from __future__ import annotations

from typing import Any

import lance
import numpy as np

from .declaration import vector_dimension
from .distances import Vectors, matrix_of
from .session import SearchSession
from .tables import SearchTable, matching_ids, quoted, take_rows


def _read(ds: lance.LanceDataset, column: str, fragments: list[int] | None = None) -> Vectors:
    """The non-null vectors of ``column`` (of ``fragments`` only when given)."""
    dimension = vector_dimension(ds.schema.field(column).type) or 1
    scanner = ds.scanner(
        columns=[column],
        with_row_id=True,
        filter=f"{quoted(column)} IS NOT NULL",
        fragments=None if fragments is None else [ds.get_fragment(i) for i in fragments],  # type: ignore[misc]
    )
    table = scanner.to_table()
    return Vectors.of(matrix_of(table.column(column), dimension), table.column("_rowid").to_numpy())


def _source(table: SearchTable, column: str) -> str:
    source = table.sources.get(column)
    return source if source is not None else column


def all_vectors(session: SearchSession, table: SearchTable, column: str) -> Vectors:
    """Every non-null vector of ``column`` in the table."""
    name = _source(table, column)
    return session.keep(
        "vectors", (*table.version_key, name), lambda: _read(table.ds, name), _nbytes
    )


def unindexed_vectors(
    session: SearchSession, table: SearchTable, column: str, description: Any
) -> Vectors | None:
    """The vectors of the rows the index ``description`` does not cover (None: it covers
    every fragment)."""
    name = _source(table, column)

    def read() -> tuple[Vectors | None]:
        covered = {int(i) for s in description.segments for i in s.fragment_ids}
        rest = [f.fragment_id for f in table.ds.get_fragments() if f.fragment_id not in covered]
        return (_read(table.ds, name, rest) if rest else None,)

    def weight(found: tuple[Vectors | None]) -> int:
        return 0 if found[0] is None else found[0].nbytes

    key = (*table.version_key, name, description.name)
    return session.keep("unindexed", key, read, weight)[0]


def rows_vectors(
    session: SearchSession, table: SearchTable, column: str, row_ids: np.ndarray, kind: str
) -> Vectors:
    """The vectors of the rows ``row_ids`` (ascending) of the table, kept as ``kind``."""
    name = _source(table, column)
    key = (*table.version_key, name, row_ids.tobytes())
    return session.keep(kind, key, lambda: read_rows(table, column, row_ids), _nbytes)


def matching_vectors(table: SearchTable, column: str) -> Vectors:
    """The vectors of the rows the table's filter keeps (Lance evaluates it, with the table's
    scalar indexes), by row id, read now: one filtered scan (a take of the same rows by id
    took half as long again on a table of 180,000 rows)."""
    name = _source(table, column)
    dimension = vector_dimension(table.ds.schema.field(name).type) or 1
    found = table.ds.to_table(
        columns=[name],
        with_row_id=True,
        filter=f"({table.lance_sql}) AND {quoted(name)} IS NOT NULL",
    )
    row_ids = found.column("_rowid").to_numpy()
    order = np.argsort(row_ids, kind="stable")  # ties broken by row id, as merged results are
    return Vectors.of(matrix_of(found.column(name), dimension)[order], row_ids[order])


def read_rows(table: SearchTable, column: str, row_ids: np.ndarray) -> Vectors:
    """The vectors of the rows ``row_ids`` (ascending) of the table that have one, read now."""
    name = _source(table, column)
    dimension = vector_dimension(table.ds.schema.field(name).type) or 1
    if not len(row_ids):
        return Vectors.of(np.zeros((0, dimension), np.float32), row_ids)
    taken = take_rows(table.ds, row_ids.tolist(), [name])
    values = taken.column(name)
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    matrix = matrix_of(values.filter(values.is_valid()), dimension)
    return Vectors.of(matrix, row_ids[valid])


def filtered_vectors(
    session: SearchSession, table: SearchTable, column: str, of: Vectors, part: str
) -> Vectors:
    """The vectors among ``of`` (the table's ``part``: ``all``, ``unindexed``, ``outliers``)
    of the rows the table's filter keeps."""
    ids = matching_ids(session, table)

    def subset() -> Vectors:
        return of.subset(np.flatnonzero(np.isin(of.row_ids, ids)))

    key = (*table.version_key, _source(table, column), table.lance_sql, part)
    return session.keep("filtered", key, subset, _nbytes)


def _nbytes(v: Vectors) -> int:
    return v.nbytes
