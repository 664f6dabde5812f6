"""A partition table as a search sees it (:class:`SearchTable`): opened at its pinned version
under the plan's residual filter, what it holds (rows, Lance's index descriptions), searched
concurrently with the others, and its rows read back by row id in the namespace's columns.
Shared by vector search (:mod:`.nearest`) and full-text search (:mod:`.text`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import lance
import numpy as np
import pyarrow as pa

from ..concurrency import parallel_map, serial_while_fast
from ..manifest.state import NamespaceState
from ..partitioning.partition_constants import fill_constants
from ..read.planning import ScanTask
from ..read.scan import _filtered, _guarded, _layout, lance_filter, open_table, scan_concurrency
from ..schema.arrow_json import strip_field_ids
from ..schema.conform import conform_for_read
from .session import SearchSession

DISTANCE = "_distance"  # vector search: the result column of distances (ascending)
SCORE = "_score"  # full-text search: the result column of BM25 scores (descending)
T = TypeVar("T")


class TableHandle:
    """A partition table's Lance handle for one query, opened when the query first reads
    the table, and its directory and the files of its version checked for links then (see
    :func:`~..read.scan.open_table`): a table a query answers from what its session keeps
    is neither opened nor checked, one whose files it reads is checked once."""

    def __init__(self, task: ScanTask, opts: dict[str, str] | None) -> None:
        self.task = task
        self.opts = opts
        self._ds: lance.LanceDataset | None = None
        self._lock = threading.Lock()

    @property
    def ds(self) -> lance.LanceDataset:
        with self._lock:
            if self._ds is None:
                self._ds = open_table(self.task, self.opts, planned=False)
            return self._ds


class Handles:
    """The table handles of one query, one per table and pinned version, however many
    openers (filters) open the table."""

    def __init__(self) -> None:
        self._handles: dict[tuple[str, int | None, str | None, str | None], TableHandle] = {}
        self._lock = threading.Lock()

    def of(self, task: ScanTask, opts: dict[str, str] | None) -> TableHandle:
        """The handle of ``task``'s table version, made on first ask."""
        with self._lock:
            key = (task.uri, task.read_version, task.read_branch, task.read_tag)
            found = self._handles.get(key)
            if found is None:
                found = self._handles[key] = TableHandle(task, opts)
            return found


@dataclass(frozen=True)
class SearchTable:
    """One partition table as a query searches it: its Lance handle (opened and checked for
    links when first read, :class:`TableHandle`), where its columns are, the filter that
    applies inside it (None: none; ``lance_sql`` None while ``sql`` is set: DataFusion
    applies it after reading), its rows and Lance's descriptions of its indexes."""

    task: ScanTask
    handle: TableHandle
    sources: dict[str, str | None]
    native: bool  # the table holds every namespace column under the same name and type
    sql: str | None
    lance_sql: str | None
    rows: int
    indexes: dict[str, Any] = field(default_factory=dict)
    version_key: tuple[str, int] = ("", 0)  # what names this table version in a session
    # index_on's answers for this query (asked once per column and kinds)
    found_indexes: dict[tuple[str, tuple[str, ...]], tuple[str, Any] | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def ds(self) -> lance.LanceDataset:
        """The table at its pinned version (opened, and checked for links, on first use)."""
        return self.handle.ds

    @property
    def pushable(self) -> bool:
        """Lance can search this table with the filter inside it."""
        return self.native and (self.sql is None or self.lance_sql is not None)

    def index_on(self, column: str, kinds: tuple[str, ...] = ()) -> tuple[str, Any] | None:
        """The one index on the table's ``column`` (name, description; of an index type
        starting with one of ``kinds`` when given), None when there is none or several."""
        key = (column, kinds)
        if key in self.found_indexes:
            return self.found_indexes[key]
        on = [
            (name, d)
            for name, d in self.indexes.items()
            if column in (d.field_names or ())
            and (not kinds or str(getattr(d, "index_type", "")).upper().startswith(kinds))
        ]
        found = on[0] if len(on) == 1 else None
        self.found_indexes[key] = found
        return found


def describe(ds: lance.LanceDataset) -> tuple[int, dict[str, Any]]:
    """(rows, index name -> Lance's description) of a table version."""
    return ds.count_rows(), {d.name: d for d in ds.describe_indices()}


@dataclass(frozen=True)
class _Facts:
    """What a search learns of a table version on opening it, for one namespace schema."""

    sources: dict[str, str | None]
    native: bool
    rows: int
    indexes: dict[str, Any]


class Opener:
    """Opens the tables of one query under the plan's ``residual`` filter (what is learnt of
    a pinned version kept in ``session``, per namespace schema); what depends only on the
    query is worked out once, not once per table."""

    def __init__(
        self,
        session: SearchSession,
        schema: pa.Schema,
        residual: str | None,
        opts: dict[str, str] | None,
        handles: Handles | None = None,
    ) -> None:
        self.session = session
        self.schema = schema
        self.residual = residual
        self.opts = opts
        self.handles = Handles() if handles is None else handles  # shared by :meth:`under`
        plain = strip_field_ids(schema)
        self.lance_residual = lance_filter(residual, plain)
        # the schema as text, field ids included: a table version's layout is judged per schema
        self.token = schema.to_string(show_field_metadata=True, show_schema_metadata=False)

    def under(self, residual: str | None) -> Opener:
        """An opener of the same query's tables under another ``residual`` filter, with this
        one's handles: a table both open is opened, and checked for links, once."""
        return Opener(self.session, self.schema, residual, self.opts, self.handles)

    def __call__(self, task: ScanTask) -> SearchTable:
        """``task``'s table, opened for the search."""
        handle = self.handles.of(task, self.opts)
        version = task.read_version if task.read_version is not None else int(handle.ds.version)
        key = (task.uri, int(version))

        def learn() -> _Facts:
            sources, native = _layout(handle.ds.schema, self.schema)
            rows, indexes = describe(handle.ds)
            return _Facts(dict(sources), native, rows, indexes)

        if task.read_version is None:
            facts = learn()
        else:
            facts = self.session.keep(
                "table", (*key, self.token), learn, lambda f: 512 * (1 + len(f.indexes))
            )
        sql = None if task.filter_implied else self.residual
        lance_sql = None if sql is None else self.lance_residual
        return SearchTable(
            task,
            handle,
            facts.sources,
            facts.native,
            sql,
            lance_sql,
            facts.rows,
            facts.indexes,
            key,
        )


def for_each_task(
    state: NamespaceState,
    tasks: Sequence[ScanTask],
    fn: Callable[[ScanTask], T],
) -> list[T]:
    """``fn`` on every task, in this thread while calls are quick, then concurrently (as
    many at once as a scan reads), raw storage failures raised as
    :class:`PartitionReadError` naming the partition."""
    threads = scan_concurrency(state.uri)
    return serial_while_fast(lambda t: _guarded(t, lambda: fn(t)), list(tasks), threads)


def for_each_table(
    state: NamespaceState, tables: Sequence[SearchTable], fn: Callable[[SearchTable], T]
) -> list[T]:
    """:func:`for_each_task` over tables already opened (always concurrently)."""
    threads = scan_concurrency(state.uri)
    return parallel_map(lambda s: _guarded(s.task, lambda: fn(s)), list(tables), threads)


def take_rows(ds: lance.LanceDataset, ids: Sequence[int], columns: list[str]) -> pa.Table:
    """The rows of ``ds`` with row ids ``ids`` (each once), in that order, in ``columns``;
    rows of one fragment without deletions are read through the fragment (half the time of
    a take by row id)."""
    fragments = {i >> 32 for i in ids}
    if not ds.has_stable_row_ids and len(fragments) == 1 and len(set(ids)) == len(ids):
        fragment = ds.get_fragment(fragments.pop())
        if fragment is not None and fragment.metadata.deletion_file is None:
            # a row id is (fragment id, position in the fragment) without stable row ids
            offsets = np.array([i & 0xFFFFFFFF for i in ids], dtype=np.int64)
            order = np.argsort(offsets)
            found = fragment.take(offsets[order].tolist(), columns=columns)
            return found.take(pa.array(np.argsort(order)))
    return ds._take_rows(list(ids), columns=columns)


def rows_by_id(
    table: SearchTable, row_ids: Sequence[int], schema: pa.Schema, wanted: pa.Schema
) -> pa.Table:
    """The rows ``row_ids`` of a searched table in the namespace's ``wanted`` columns (in the
    order given), then those the search filter keeps when Lance could not apply it where they
    were found (``_rowid`` kept as a column)."""
    plain = strip_field_ids(schema)
    refilter = bool(table.sql) and table.lance_sql is None
    need = plain if refilter else wanted
    present = [src for f in need if (src := table.sources.get(f.name)) is not None]
    ids = [int(i) for i in row_ids]
    if present:
        raw = take_rows(table.ds, ids, present)
    else:
        raw = pa.table({"__rows": pa.nulls(len(ids), pa.null())})
    out = conform_for_read(raw, need, table.task.object_id, table.sources)
    out = fill_constants(out, table.task.constants, need)
    out = out.append_column("_rowid", pa.array(ids, pa.uint64()))
    if refilter:
        assert table.sql is not None
        out = _filtered(out, table.sql, out.schema)
    return out.select([*wanted.names, "_rowid"])


def fetch_scored(
    picked: Sequence[tuple[SearchTable, np.ndarray, np.ndarray]],
    column: str,
    schema: pa.Schema,
    target: pa.Schema,
    threads: int = 1,
) -> list[pa.Table]:
    """For each (table, row ids, values): those rows in ``target``'s columns (the ones the
    search filter keeps) with their values as float32 column ``column``; ``threads`` tables
    at a time (Lance's takes of a few rows wait on more than the CPU: the 50 text queries of
    bench/bench_search.py took 5.9 ms p50 so, 7.7 ms one table after another)."""

    def one_table(item: tuple[SearchTable, np.ndarray, np.ndarray]) -> pa.Table:
        table, ids, values = item
        rows = rows_by_id(table, ids.tolist(), schema, target)
        by_id = dict(zip(ids.tolist(), values.tolist(), strict=True))
        got = rows.column("_rowid").to_pylist()
        return rows.drop_columns(["_rowid"]).append_column(
            column, pa.array([by_id[r] for r in got], pa.float32())
        )

    return parallel_map(
        lambda item: _guarded(item[0].task, lambda: one_table(item)), list(picked), threads
    )


def matching_ids(session: SearchSession, table: SearchTable) -> np.ndarray:
    """The row ids (ascending) of the rows the table's filter keeps (Lance evaluates it, with
    the table's scalar indexes)."""

    def read() -> np.ndarray:
        found = table.ds.to_table(columns=[], with_row_id=True, filter=table.lance_sql)
        return np.sort(found.column("_rowid").to_numpy().astype(np.uint64))

    key = (*table.version_key, table.lance_sql)
    return session.keep("matches", key, read, lambda a: int(a.nbytes))


def quoted(name: str) -> str:
    """``name`` as a Lance SQL identifier."""
    return "`" + name.replace("`", "``") + "`"
