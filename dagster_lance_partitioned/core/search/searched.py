"""One partition table as a search sees it (:class:`Searched`): opened under the plan's
residual filter, searched concurrently with the others, its rows taken by row id. Shared by
vector search (:mod:`.query`) and full-text search (:mod:`.text`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import lance
import numpy as np
import pyarrow as pa

from ..concurrency import parallel_map, serial_while_fast
from ..lru import Lru
from ..manifest.state import NamespaceState
from ..read.planning import ScanTask
from ..read.scan import _filtered, _guarded, _layout, lance_filter, open_table, scan_concurrency
from ..schema.arrow_json import strip_field_ids
from ..schema.conform import conform_for_read
from ..spec.partition_constants import fill_constants
from .rows import take_rows

DISTANCE = "_distance"  # vector search: the result column of distances (ascending)
SCORE = "_score"  # full-text search: the result column of BM25 scores (descending)
T = TypeVar("T")


@dataclass(frozen=True)
class Searched:
    """One partition table opened for a search: where its columns are, and the filter that
    applies inside it (None: none; ``lance_sql`` None while ``sql`` is set: DataFusion
    applies it after reading)."""

    task: ScanTask
    ds: lance.LanceDataset
    sources: dict[str, str | None]
    native: bool  # the table holds every namespace column under the same name and type
    sql: str | None
    lance_sql: str | None

    @property
    def pushable(self) -> bool:
        """Lance can search this table with the filter inside it."""
        return self.native and (self.sql is None or self.lance_sql is not None)


# (pinned table version, filter, options, id(schema)) -> (that schema, the table opened)
_searched: Lru[tuple[pa.Schema, Searched]] = Lru(4096)


def open_searched(
    task: ScanTask, schema: pa.Schema, residual: str | None, opts: dict[str, str] | None
) -> Searched:
    """``task``'s table opened for a search under the plan's ``residual`` filter (kept per
    process for pinned versions: a version never changes)."""
    if task.read_version is None:
        return _open_searched(task, schema, residual, opts)
    key = (
        task.object_id,
        task.uri,
        task.read_version,
        task.read_branch,
        task.filter_implied,
        tuple(sorted(task.constants.items(), key=str)),
        residual,
        tuple(sorted((opts or {}).items())),
        id(schema),
    )
    hit = _searched.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    searched = _open_searched(task, schema, residual, opts)
    _searched.put(key, (schema, searched))
    return searched


def _open_searched(
    task: ScanTask, schema: pa.Schema, residual: str | None, opts: dict[str, str] | None
) -> Searched:
    ds = open_table(task, opts)
    sources, native = _layout(ds.schema, schema)
    sql = None if task.filter_implied else residual
    plain = strip_field_ids(schema)
    return Searched(task, ds, dict(sources), native, sql, lance_filter(sql, plain))


def for_each_partition(
    state: NamespaceState,
    tasks: Sequence[ScanTask],
    fn: Callable[[ScanTask], T],
    *,
    quick: bool = False,
) -> list[T]:
    """``fn`` on every task, concurrently (as many at once as a scan reads; ``quick``: in
    this thread until a call is slow), raw storage failures raised as
    :class:`PartitionReadError` naming the partition."""
    threads = scan_concurrency(state.uri)
    run = serial_while_fast if quick else parallel_map
    return run(lambda t: _guarded(t, lambda: fn(t)), list(tasks), threads)


def for_each_searched(
    state: NamespaceState, items: Sequence[Searched], fn: Callable[[Searched], T]
) -> list[T]:
    """:func:`for_each_partition` over tables already opened."""
    threads = scan_concurrency(state.uri)
    return parallel_map(lambda s: _guarded(s.task, lambda: fn(s)), list(items), threads)


@dataclass(frozen=True)
class Candidates:
    """The best rows of one table by row id, with their exact distances (ascending)."""

    searched: Searched
    row_ids: np.ndarray
    distances: np.ndarray


def nearest_of(distances: Sequence[np.ndarray], n: int) -> dict[int, np.ndarray]:
    """Of several sets of distances, the ``n`` smallest over all of them (ties: earlier
    first): set index -> positions in that set, for the sets holding some, in ascending order
    of distance within each set."""
    if not distances:
        return {}
    owner = np.concatenate([np.full(len(d), i) for i, d in enumerate(distances)])
    starts = np.cumsum([0, *(len(d) for d in distances)])
    best = np.argsort(np.concatenate(distances), kind="stable")[:n]
    return {i: best[owner[best] == i] - starts[i] for i in sorted(set(owner[best].tolist()))}


def fetch_best(
    found: Sequence[Candidates], k: int, schema: pa.Schema, target: pa.Schema, threads: int = 1
) -> list[pa.Table]:
    """The rows of the ``k`` nearest of all ``found`` candidates in ``target``'s columns, with
    their distances (one read per table holding some of them, ``threads`` at a time)."""
    found = [c for c in found if len(c.row_ids)]
    picked = [
        (found[i].searched, found[i].row_ids[mine], found[i].distances[mine])
        for i, mine in nearest_of([c.distances for c in found], k).items()
    ]
    return fetch_scored(picked, DISTANCE, schema, target, threads)


def fetch_scored(
    picked: Sequence[tuple[Searched, np.ndarray, np.ndarray]],
    column: str,
    schema: pa.Schema,
    target: pa.Schema,
    threads: int = 1,
) -> list[pa.Table]:
    """For each (table, row ids, values): those rows in ``target``'s columns (the ones the
    search filter keeps) with their values as float32 column ``column``; the tables are read
    in this thread while that is quick (rows kept in memory), else ``threads`` at a time."""

    def one(item: tuple[Searched, np.ndarray, np.ndarray]) -> pa.Table:
        searched, ids, values = item
        rows = rows_by_id(searched, ids.tolist(), schema, target)
        by_id = dict(zip(ids.tolist(), values.tolist(), strict=True))
        got = rows.column("_rowid").to_pylist()
        return rows.drop_columns(["_rowid"]).append_column(
            column, pa.array([by_id[r] for r in got], pa.float32())
        )

    return serial_while_fast(
        lambda item: _guarded(item[0].task, lambda: one(item)), picked, threads
    )


def rows_by_id(
    searched: Searched,
    row_ids: Sequence[int],
    schema: pa.Schema,
    wanted: pa.Schema,
    keep: bool = True,
) -> pa.Table:
    """The rows ``row_ids`` of a searched table in the namespace's ``wanted`` columns (in the
    order given), then those the search filter keeps (``_rowid`` kept as a column; ``keep``:
    see :func:`.rows.take_rows`)."""
    plain = strip_field_ids(schema)
    need = plain if searched.sql else wanted
    present = [src for f in need if (src := searched.sources.get(f.name)) is not None]
    ids = [int(i) for i in row_ids]
    if present:
        raw = take_rows(searched.ds, ids, present, keep)
    else:
        raw = pa.table({"__rows": pa.nulls(len(ids), pa.null())})
    table = conform_for_read(raw, need, searched.task.object_id, searched.sources)
    table = fill_constants(table, searched.task.constants, need)
    table = table.append_column("_rowid", pa.array(ids, pa.uint64()))
    if searched.sql:
        table = _filtered(table, searched.sql, table.schema)
    return table.select([*wanted.names, "_rowid"])
