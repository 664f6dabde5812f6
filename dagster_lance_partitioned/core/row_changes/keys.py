"""Matching rows by key columns with Arrow compute (no per-row Python): membership, semi / anti
joins and the (stored row, input row) pairs of a merge."""

from __future__ import annotations

from typing import cast

import datafusion as dfn
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_LEFT, _RIGHT = "__dlp_left", "__dlp_right"


def concat(tables: list[pa.Table]) -> pa.Table | None:
    """The tables (with the same column names and types) one after the other, in the first's
    schema made nullable when they differ in nullability or metadata (None: no tables)."""
    if not tables:
        return None
    if len(tables) == 1:
        return tables[0]
    first = tables[0].schema
    if all(t.schema.equals(first, check_metadata=True) for t in tables[1:]):
        return pa.concat_tables(tables)
    schema = pa.schema([f.with_nullable(True) for f in first])
    return pa.concat_tables([t.cast(schema) for t in tables])


def where(rows: pa.Table, predicate: str) -> pa.Table:
    """The rows of ``rows`` for which the DataFusion SQL ``predicate`` holds."""
    if rows.num_rows == 0:
        return rows
    ctx = dfn.SessionContext()
    ctx.register_record_batches("t", [rows.to_batches()])
    out = ctx.sql(f"SELECT * FROM t WHERE {predicate}").to_arrow_table()
    return out.cast(rows.schema) if out.num_rows else rows.slice(0, 0)


def distinct(keys: pa.Table, on: list[str]) -> pa.Table:
    """The distinct ``on`` keys of ``keys``."""
    return keys.select(on).group_by(on).aggregate([])


def semi(rows: pa.Table, keys: pa.Table, on: list[str]) -> pa.Table:
    """The rows of ``rows`` whose ``on`` key is among ``keys`` (order kept)."""
    if rows.num_rows == 0 or keys.num_rows == 0:
        return rows.slice(0, 0)
    return rows.filter(pa.array(member(rows, keys, on)))


def anti(rows: pa.Table, keys: pa.Table, on: list[str]) -> pa.Table:
    """The rows of ``rows`` whose ``on`` key is not among ``keys`` (order kept)."""
    if rows.num_rows == 0 or keys.num_rows == 0:
        return rows
    return rows.filter(pa.array(~member(rows, keys, on)))


def member(rows: pa.Table, keys: pa.Table, on: list[str]) -> np.ndarray:
    """Per row of ``rows``: whether its ``on`` key is among ``keys`` (NULL keys never are)."""
    if rows.num_rows == 0:
        return np.zeros(0, dtype=bool)
    if keys.num_rows == 0:
        return np.zeros(rows.num_rows, dtype=bool)
    if len(on) == 1:
        col = rows.column(on[0])
        found = pc.is_in(col, value_set=keys.column(on[0]).cast(col.type), skip_nulls=True)
        return cast(np.ndarray, found.fill_null(False).to_numpy(zero_copy_only=False))
    hit = _join(rows.select(on), distinct(keys.select(on).cast(rows.select(on).schema), on), on)[0]
    out = np.zeros(rows.num_rows, dtype=bool)
    out[hit] = True
    return out


def pairs(stored: pa.Table, src: pa.Table, on: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The matches of ``src`` rows (whose ``on`` keys are unique) among ``stored`` rows: row
    numbers in ``stored`` and, for each, the ``src`` row with its key (NULL keys never
    match). Stored rows come in ascending order."""
    empty = np.zeros(0, dtype=np.int64)
    if stored.num_rows == 0 or src.num_rows == 0:
        return empty, empty
    if len(on) == 1:
        col = stored.column(on[0])
        idx = pc.index_in(col, value_set=src.column(on[0]).cast(col.type), skip_nulls=True)
        hit = pc.is_valid(idx)
        rows = np.flatnonzero(hit.to_numpy(zero_copy_only=False))
        return rows, cast(np.ndarray, idx.filter(hit).to_numpy(zero_copy_only=False))
    left = stored.select(on)
    left_rows, right_rows = _join(left, src.select(on).cast(left.schema), on)
    order = np.argsort(left_rows, kind="stable")
    return left_rows[order], right_rows[order]


def _join(left: pa.Table, right: pa.Table, on: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Row numbers of the (left, right) pairs with equal non-NULL ``on`` keys."""
    left = left.append_column(_LEFT, pa.array(np.arange(left.num_rows, dtype=np.int64)))
    right = right.append_column(_RIGHT, pa.array(np.arange(right.num_rows, dtype=np.int64)))
    joined = left.join(right, keys=on, join_type="inner")
    return (
        cast(np.ndarray, joined.column(_LEFT).to_numpy()),
        cast(np.ndarray, joined.column(_RIGHT).to_numpy()),
    )
