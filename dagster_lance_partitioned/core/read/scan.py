"""Reading scan tasks: each partition table at its pinned version, projected, filtered and
reconciled to the namespace schema, as one stream.

A scan of several partitions opens and reads their tables concurrently (see
:func:`scan_concurrency`: a few at a time on local disk, dozens on object stores, where every
table costs a few requests of latency), ahead of the consumer but within a bound on the bytes
read ahead (:data:`READ_AHEAD_BYTES`), and delivers them in plan order."""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import datafusion as dfn
import lance
import pyarrow as pa
from lance.lance import _Session as Session  # what lance.Session is (not re-exported for mypy)

from .. import storage
from ..errors import (
    FilterError,
    PartitionReadError,
    SchemaError,
    clean_message,
    is_storage_failure,
    storage_error,
)
from ..expr.filters import to_lance_sql
from ..manifest import stats
from ..manifest.snapshot import clear_version_cache
from ..manifest.stats import TableStats
from ..partitioning.partition_constants import fill_constants
from ..schema.arrow_json import strip_field_ids
from ..schema.conform import column_sources, conform_for_read
from ..table_files import check_version_files, data_bytes
from .data_files import SMALL_TABLE_ROWS, data_files, kept_rows
from .data_files import forget as forget_files
from .data_files import read as read_files
from .planning import ScanPlan, ScanTask, check_at_use

# partition tables a scan reads at once on local disk: two per core. Opening a table and its
# data files waits on more than the CPU (a cold read of 150 small tables on 2 cores: 155 ms one
# per core, 120 ms two, 122 ms four; bench/bench_read_filters.py); more only take turns
LOCAL_CONCURRENCY = 2 * max(2, os.cpu_count() or 2)
REMOTE_CONCURRENCY = 48  # ... on object stores: each table costs a few requests of latency
CONCURRENCY_ENV = "DLP_SCAN_CONCURRENCY"  # overrides both defaults (a positive integer)
# Bytes (of the partition tables' data files) a scan reads ahead of its consumer at most; one
# table is always read, however large.
READ_AHEAD_BYTES = 256 * 1024 * 1024
OPENED_TABLES = 4096  # partition tables kept open at pinned versions (process-wide)
TABLE_BATCH_ROWS = 65_536  # rows per batch read for a whole table (fewer, larger batches)
# rows of small tables read whole that are filtered together (one DataFusion query)
GROUP_ROWS = 262_144

T = TypeVar("T")
R = TypeVar("R")


def scan_concurrency(uri: str, requested: int | None = None) -> int:
    """How many partition tables a scan of tables under ``uri`` reads at once: ``requested``,
    else the positive integer in the environment variable ``DLP_SCAN_CONCURRENCY``, else
    :data:`LOCAL_CONCURRENCY` on local disk and :data:`REMOTE_CONCURRENCY` on object stores."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise ValueError(f"scan concurrency must be a positive integer, got {requested!r}")
        return requested
    env = os.environ.get(CONCURRENCY_ENV, "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return LOCAL_CONCURRENCY if storage.local_path(uri) is not None else REMOTE_CONCURRENCY


def open_table(
    task: ScanTask, storage_options: dict[str, str] | None, planned: bool = True
) -> lance.LanceDataset:
    """The partition table at the version its manifest row pins, about to be read: on a local
    root, no file it reads is reached through a symbolic link (checked now, see
    :func:`~.table_files.check_version_files`; a version read before was checked when the
    read was planned, unless ``planned`` is False: the plan did not check links)."""
    options = tuple(sorted((storage_options or {}).items()))
    pinned = not (task.read_version is None and task.read_tag is None)
    if pinned:
        ds = _open_pinned(task.uri, task.read_version, task.read_branch, task.read_tag, options)
    else:
        ds = _open(task.uri, None, None, None, options)  # latest of main: never cached
    # a version read before was checked when this read was planned (its files are known)
    planned = planned and task.read_version is not None and task.read_branch is None
    check_version_files(task.root, task.location, ds, task.object_id, pinned=planned)
    return ds


# One Lance session (its caches of manifests and file metadata, bounded in bytes) for every
# partition table a scan opens, instead of one per table: the memory they take is bounded
# process-wide, and a table opened again after its handle was dropped reuses its metadata.
SESSION_METADATA_BYTES = 256 * 1024 * 1024
SESSION_INDEX_BYTES = 256 * 1024 * 1024
_session: Session | None = None
_session_lock = threading.Lock()


def _shared_session() -> Session:
    global _session
    with _session_lock:
        if _session is None:
            _session = Session(
                index_cache_size_bytes=SESSION_INDEX_BYTES,
                metadata_cache_size_bytes=SESSION_METADATA_BYTES,
            )
        return _session


def _open(
    uri: str,
    version: int | None,
    branch: str | None,
    tag: str | None,
    options: tuple[tuple[str, str], ...],
) -> lance.LanceDataset:
    storage_options = dict(options) or None
    session = _shared_session()
    if branch is not None:
        ds = lance.dataset(uri, storage_options=storage_options, session=session)
        return ds.checkout_version((branch, version))
    pinned: int | str | None = version if version is not None else tag
    return lance.dataset(uri, version=pinned, storage_options=storage_options, session=session)


class _PinnedTables:
    """Partition tables opened at pinned versions, reused across scans (a table at a pinned
    version never changes): a thread-safe LRU of :data:`OPENED_TABLES` handles.

    ``cache_clear()`` also drops the shared Lance session and forgets the manifest versions
    this process has read (see :func:`clear_caches`), so that a cold read can be measured."""

    def __init__(self) -> None:
        self._cached = functools.lru_cache(maxsize=OPENED_TABLES)(_open)

    def __call__(
        self,
        uri: str,
        version: int | None,
        branch: str | None,
        tag: str | None,
        options: tuple[tuple[str, str], ...],
    ) -> lance.LanceDataset:
        return self._cached(uri, version, branch, tag, options)

    def cache_info(self) -> Any:
        return self._cached.cache_info()

    def cache_clear(self) -> None:
        global _session
        self._cached.cache_clear()
        forget_files()
        with _session_lock:
            _session = None  # a new session: nothing cached
        clear_version_cache()


_open_pinned = _PinnedTables()


def clear_caches() -> None:
    """Forget what this process keeps of what it read (opened partition tables, manifest
    versions): the next reads make every request again (benchmarks of cold reads, tests)."""
    _open_pinned.cache_clear()


def read_schema(schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """The schema a scan returns: the namespace schema, projected to ``columns``."""
    if columns is None:
        return schema
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        raise SchemaError(
            f"column(s) {missing} not in the namespace schema (columns: {', '.join(schema.names)})"
        )
    return pa.schema([schema.field(c) for c in columns])


@functools.lru_cache(maxsize=64)
def _plain(schema: pa.Schema) -> pa.Schema:
    return strip_field_ids(schema)


@functools.lru_cache(maxsize=1024)
def _layout(table_schema: pa.Schema, schema: pa.Schema) -> tuple[dict[str, str | None], bool]:
    """(namespace column -> the table's column holding it, whether the table has every
    namespace column under the same name and type) for a table schema."""
    sources = column_sources(table_schema, schema)
    same = all(
        sources[f.name] == f.name and table_schema.field(f.name).type == f.type
        for f in _plain(schema)
    )
    return sources, same


def iter_task_batches(
    task: ScanTask,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    filter_sql: str | None,
    storage_options: dict[str, str] | None,
    batch_size: int | None = None,
    translated_filter: str | None = None,
    fragment_ids: Sequence[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of one task (or of the fragments ``fragment_ids`` of its table), projected,
    filtered and reconciled to the namespace schema.

    ``schema`` is the namespace schema, preferably with its field ids: the table's columns are
    then matched by id (a renamed column is found under its old name), else by name.
    ``translated_filter`` is ``filter_sql`` in Lance's dialect (see :func:`lance_filter`); it is
    pushed to Lance only when the table has every namespace column under the same name and type.
    Otherwise the table is reconciled first and the filter applied by DataFusion.

    A raw Lance / Arrow failure (a missing or corrupt data file) raises
    :class:`PartitionReadError` naming the partition and the file."""
    prepared = _guarded(
        task,
        lambda: _prepare(
            task,
            schema,
            columns,
            filter_sql,
            storage_options,
            batch_size,
            translated_filter,
            fragment_ids,
        ),
    )
    yield from _streamed(task, prepared)


def _guarded(task: ScanTask, fn: Callable[[], T]) -> T:
    """``fn()``, raw Lance / Arrow failures raised as :class:`PartitionReadError`."""
    try:
        return fn()
    except Exception as e:
        if is_storage_failure(e):
            root = task.uri[: -len(task.location)].rstrip("/") or task.uri
            raise storage_error(
                e, root, "reading partition", task.object_id, PartitionReadError
            ) from None
        raise


class _Prepared:
    """A partition table opened for a read, and how its rows become the scan's."""

    def __init__(
        self,
        task: ScanTask,
        ds: lance.LanceDataset,
        schema: pa.Schema,
        target: pa.Schema,
        filter_sql: str | None,
        batch_size: int | None,
        translated_filter: str | None,
        fragment_ids: Sequence[int] | None,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.task = task
        self.ds = ds
        self.storage_options = storage_options
        self.plain = _plain(schema)
        self.target = target
        self.filter_sql = filter_sql
        self.batch_size = batch_size
        self.translated_filter = translated_filter
        self.fragment_ids = fragment_ids
        self.where = f"partition {task.object_id} (version {ds.version})"
        self.table_schema = ds.schema
        self.sources, same = _layout(self.table_schema, schema)
        self.direct = same and (translated_filter is not None or not filter_sql)
        # a small table in the namespace's layout is read from its data files
        self.files = data_files(ds, task.uri) if same and fragment_ids is None else None

    def from_files(self) -> pa.Table | None:
        """Every row of the table, read from its data files, with the namespace's columns
        (None: it must be scanned; see :mod:`.data_files`)."""
        if self.files is None:
            return None
        table = read_files(self.files, self.table_schema, self.storage_options)
        return None if table is None else _as_plain(table, self.plain)

    def small(self) -> bool:
        """Whether the table is small enough to read in one pass (see :data:`SMALL_TABLE_ROWS`;
        the rows come from the manifest, else from the table's fragments)."""
        rows = self.task.rows
        if rows is None:
            rows = sum(int(f.metadata.physical_rows or 0) for f in self.ds.get_fragments())
        return rows <= SMALL_TABLE_ROWS

    def estimate(self) -> int:
        """Bytes of the table's data files, in the share of the columns read (what a read of
        it holds in memory, roughly; 0 when unknown)."""
        try:
            fragments = self.ds.get_fragments()
            wanted = None if self.fragment_ids is None else set(self.fragment_ids)
            size = data_bytes(
                f.metadata for f in fragments if wanted is None or f.fragment_id in wanted
            )
            columns = len(self.table_schema)
        except Exception:
            return 0
        return size if columns <= len(self.target) else size * len(self.target) // columns

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self.direct:
            reader = self._lance_reader()
            if reader is not None:
                yield from self._conformed(reader)
                return
        yield from self._reconciled()

    def _lance_reader(self) -> pa.RecordBatchReader | None:
        kwargs: dict[str, Any] = {
            "columns": list(self.target.names),
            "filter": self.translated_filter,
        }
        if self.translated_filter is not None and self.small():
            # a small table is read in one pass: reading the filter's columns first and the
            # others for the matching rows (two passes) costs more than it saves there
            kwargs["late_materialization"] = False
        if self.batch_size:
            kwargs["batch_size"] = self.batch_size
        try:
            if self.fragment_ids is not None:
                kwargs["fragments"] = [self.ds.get_fragment(i) for i in self.fragment_ids]
            return self.ds.scanner(**kwargs).to_reader()
        except (ValueError, OSError):
            return None  # Lance cannot evaluate this filter: DataFusion does it

    def _conformed(self, reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
        target = self.target
        got = reader.schema
        exact = got.names == target.names and all(
            a.type == b.type for a, b in zip(got, target, strict=True)
        )
        for batch in reader:
            if exact:
                yield pa.RecordBatch.from_arrays(batch.columns, schema=target)
            else:
                yield from conform_for_read(
                    pa.Table.from_batches([batch]), target, self.where
                ).to_batches()

    def _reconciled(self) -> Iterator[pa.RecordBatch]:
        # schemas differ (or Lance cannot take the filter): reconcile, then filter with DataFusion
        plain, target = self.plain, self.target
        wanted = plain if self.filter_sql else target
        table = conform_for_read(
            _read_sources(self.ds, wanted, self.sources, self.fragment_ids),
            wanted,
            self.where,
            self.sources,
        )
        table = fill_constants(table, self.task.constants, wanted)  # identity keys it lacks
        if self.filter_sql:
            table = _filtered(table, self.filter_sql, plain)
            table = conform_for_read(table, plain, self.where)
        yield from table.select(list(target.names)).to_batches(max_chunksize=self.batch_size)


def _prepare(
    task: ScanTask,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    filter_sql: str | None,
    storage_options: dict[str, str] | None,
    batch_size: int | None,
    translated_filter: str | None,
    fragment_ids: Sequence[int] | None,
) -> _Prepared:
    target = read_schema(_plain(schema), columns)
    try:
        ds = open_table(task, storage_options)
    except (ValueError, OSError, FileNotFoundError) as e:
        raise PartitionReadError(
            f"partition {task.object_id}: cannot open its table {task.uri} at version "
            f"{task.read_version if task.read_version is not None else 'latest'}: "
            f"{clean_message(e)}",
            object_id=task.object_id,
            path=task.uri,
        ) from None
    return _Prepared(
        task,
        ds,
        schema,
        target,
        filter_sql,
        batch_size,
        translated_filter,
        fragment_ids,
        storage_options,
    )


_DATAFUSION = threading.local()  # one DataFusion context per thread, reused


def _filtered(table: pa.Table, sql: str, schema: pa.Schema) -> pa.Table:
    """The rows of ``table`` (of ``schema``) matching ``sql``, selected by DataFusion."""
    ctx = getattr(_DATAFUSION, "ctx", None)
    if ctx is None:
        ctx = _DATAFUSION.ctx = dfn.SessionContext()
    ctx.register_record_batches("t", [table.to_batches() or [_empty(schema)]])
    try:
        return ctx.sql(f"SELECT * FROM t WHERE {sql}").to_arrow_table()
    finally:
        ctx.deregister_table("t")


def _fragment(ds: lance.LanceDataset, fragment_id: int) -> lance.LanceFragment:
    fragment = ds.get_fragment(fragment_id)
    if fragment is None:
        raise PartitionReadError(f"{ds.uri}: version {ds.version} has no fragment {fragment_id}")
    return fragment


def _read_sources(
    ds: lance.LanceDataset,
    wanted: pa.Schema,
    sources: dict[str, str | None],
    fragment_ids: Sequence[int] | None = None,
) -> pa.Table:
    """The table's columns holding ``wanted``'s columns (all its rows, or those of
    ``fragment_ids``, even when it holds none of the columns)."""
    fragments = None if fragment_ids is None else [_fragment(ds, i) for i in fragment_ids]
    present = [src for f in wanted if (src := sources.get(f.name)) is not None]
    if present:
        return ds.scanner(columns=present, fragments=fragments).to_table()
    rows = sum(int(f.count_rows()) for f in fragments) if fragments is not None else ds.count_rows()
    return pa.table({"__rows": pa.nulls(rows, pa.null())})


def count_matching(
    task: ScanTask, schema: pa.Schema, sql: str, storage_options: dict[str, str] | None
) -> int:
    """How many rows of ``task``'s table ``sql`` selects (reading one column)."""
    plain = _plain(schema)
    batches = iter_task_batches(
        task,
        schema,
        plain.names[:1],
        sql,
        storage_options,
        translated_filter=lance_filter(sql, plain),
    )
    return sum(b.num_rows for b in batches)


def collect(
    task: ScanTask, schema: pa.Schema, storage_options: dict[str, str] | None
) -> TableStats:
    """The statistics of ``task``'s table at its pin, read as scans read it (in the namespace
    schema ``schema``, with field ids: renamed columns by id, identity partition columns a
    table does not store filled with their value), with the size of its data files."""
    plain = _plain(schema)
    batches = iter_task_batches(task, schema, None, None, storage_options, TABLE_BATCH_ROWS)
    found = stats.of_batches((pa.Table.from_batches([b], schema=plain) for b in batches), schema)
    ds = open_table(task, storage_options)
    return found.with_bytes(data_bytes(g.metadata for g in ds.get_fragments()))


def count_plan_rows(
    plan: ScanPlan,
    schema: pa.Schema,
    storage_options: dict[str, str] | None,
    concurrency: int | None = None,
) -> int:
    """How many rows of ``plan``'s tables match its filter: counted from a table's metadata
    when every row of it matches (no filter, or one its partition values imply), else by
    reading one column; ``concurrency`` tables at once (see :func:`scan_concurrency`)."""
    tasks = plan.tasks
    if not tasks:
        return 0
    sql = plan.residual_filter
    plain = _plain(schema)
    translated = lance_filter(sql, plain)

    def recorded(task: ScanTask) -> bool:
        """Whether the manifest records the count: every row matches and its rows are known."""
        return (not sql or task.filter_implied) and task.rows is not None

    def count(task: ScanTask) -> int:
        if recorded(task):
            assert task.rows is not None
            return task.rows  # no table is opened
        if not sql or task.filter_implied:
            prepared = _guarded(
                task,
                lambda: _prepare(task, schema, None, None, storage_options, None, None, None),
            )
            return _guarded(task, lambda: int(prepared.ds.count_rows()))
        batches = iter_task_batches(
            task, schema, plain.names[:1], sql, storage_options, translated_filter=translated
        )
        return sum(b.num_rows for b in batches)

    opened = [t for t in tasks if not recorded(t)]
    check_at_use(opened)
    workers = min(scan_concurrency(tasks[0].uri, concurrency), len(tasks))
    if workers <= 1 or not opened:
        return sum(count(t) for t in tasks)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dlp-count") as pool:
        return sum(pool.map(count, tasks))


def lance_filter(filter_sql: str | None, schema: pa.Schema) -> str | None:
    """``filter_sql`` as Lance's scanner reads it, or None when it must be applied by DataFusion."""
    if not filter_sql:
        return None
    try:
        return to_lance_sql(filter_sql, schema)
    except FilterError:
        return None


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def scan_reader(
    plan: ScanPlan,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    storage_options: dict[str, str] | None,
    batch_size: int | None = None,
    prefetch: int | None = None,
    read_ahead_bytes: int = READ_AHEAD_BYTES,
) -> pa.RecordBatchReader:
    """A reader over every task of ``plan`` in order, reading up to ``prefetch`` tasks at once
    (default: :func:`scan_concurrency`) and at most ``read_ahead_bytes`` ahead of the consumer.

    A task whose partition values imply the plan's filter (``ScanTask.filter_implied``) is
    read without it. ``schema`` is the namespace schema, with field ids (columns matched by
    id) or without (by name); the batches have it without ids."""
    plain = _plain(schema)
    target = read_schema(plain, columns)
    translated = lance_filter(plan.residual_filter, plain)
    tasks = plan.tasks
    workers = scan_concurrency(tasks[0].uri, prefetch) if tasks else 1

    def prepare(task: ScanTask) -> _Prepared:
        implied = task.filter_implied
        return _guarded(
            task,
            lambda: _prepare(
                task,
                schema,
                columns,
                None if implied else plan.residual_filter,
                storage_options,
                batch_size,
                None if implied else translated,
                None,
            ),
        )

    def read(prepared: _Prepared) -> list[pa.RecordBatch] | _Unfiltered:
        whole = _guarded(prepared.task, prepared.from_files)
        if whole is None:
            return _guarded(prepared.task, lambda: list(prepared.batches()))
        if prepared.filter_sql:
            return _Unfiltered(whole)  # filtered together with its neighbours
        batches: list[pa.RecordBatch] = whole.select(list(target.names)).to_batches(
            max_chunksize=batch_size
        )
        return batches

    def filtered(group: list[pa.Table]) -> Iterator[pa.RecordBatch]:
        """The rows of ``group`` (small tables read whole) matching the plan's filter."""
        assert plan.residual_filter is not None
        table = pa.concat_tables(group).combine_chunks()
        table = conform_for_read(_filtered(table, plan.residual_filter, plain), plain, "a scan")
        yield from table.select(list(target.names)).to_batches(max_chunksize=batch_size)

    def in_memory() -> list[pa.Table] | None:
        """Every task's rows, when this process keeps them all in the namespace's layout (a
        repeated read): then no table is opened."""
        found = []
        for task in tasks:
            if task.read_branch is not None:
                return None
            rows = kept_rows(task.uri, task.read_version)
            if rows is None or not _layout(rows.schema, schema)[1]:
                return None
            found.append(rows)
        return found

    def gen() -> Iterator[pa.RecordBatch]:
        results: Iterable[list[pa.RecordBatch] | _Unfiltered]
        kept = in_memory()
        if kept is None:  # files will be read: checked now, in this thread
            check_at_use(tasks)
        if kept is not None:
            results = (
                _Unfiltered(_as_plain(t, plain))
                if plan.residual_filter and not task.filter_implied
                else _as_plain(t, plain).select(list(target.names)).to_batches(batch_size)
                for t, task in zip(kept, tasks, strict=True)
            )
        elif workers <= 1 or len(tasks) <= 1:  # nothing read ahead
            results = (read(prepare(task)) for task in tasks)
        else:
            results = _pipeline(tasks, prepare, read, workers, read_ahead_bytes)
        group: list[pa.Table] = []
        rows = 0
        for out in results:
            if isinstance(out, _Unfiltered):
                group.append(out.table)
                rows += out.table.num_rows
                if rows < GROUP_ROWS:
                    continue
            if group:
                yield from filtered(group)
                group, rows = [], 0
            if not isinstance(out, _Unfiltered):
                yield from out
        if group:
            yield from filtered(group)

    return pa.RecordBatchReader.from_batches(target, gen())


def _as_plain(table: pa.Table, plain: pa.Schema) -> pa.Table:
    """``table`` (a table's rows in the namespace's layout) with the namespace's columns."""
    return pa.Table.from_arrays([table.column(f.name) for f in plain], schema=plain)


@dataclass(frozen=True)
class _Unfiltered:
    """A small table read whole, awaiting the filter it is applied with its neighbours."""

    table: pa.Table


def _streamed(task: ScanTask, prepared: _Prepared) -> Iterator[pa.RecordBatch]:
    batches = prepared.batches()
    while (batch := _guarded(task, lambda: next(batches, None))) is not None:
        yield batch


class _Closed(Exception):
    """The consumer of a scan stopped: reads not yet started are skipped."""


def _pipeline(
    tasks: Sequence[ScanTask],
    prepare: Callable[[ScanTask], _Prepared],
    read: Callable[[_Prepared], R],
    workers: int,
    budget: int,
) -> Iterator[R]:
    """The batches of every task, in order, ``workers`` tasks at a time.

    Each task is opened (``prepare``: a few requests on an object store, no data) as soon as
    a worker takes it, at most ``workers`` tasks ahead of the consumer; its data is read once
    the bytes read ahead and not yet consumed leave room for it within ``budget`` (the task the
    consumer waits for is always read)."""
    cond = threading.Condition()
    head = 0  # the task the consumer waits for
    in_use = 0  # bytes of tasks being read or read and not yet consumed
    closed = False

    def job(i: int, task: ScanTask) -> tuple[R, int]:
        nonlocal in_use
        prepared = prepare(task)
        size = prepared.estimate() if budget > 0 else 0
        with cond:
            while not closed and i != head and in_use + size > budget:
                cond.wait()
            if closed:
                raise _Closed
            in_use += size
        try:
            return read(prepared), size
        except BaseException:
            with cond:
                in_use -= size
                cond.notify_all()
            raise

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dlp-scan")
    pending: deque[Future[tuple[R, int]]] = deque()
    submitted = 0
    try:
        for i in range(len(tasks)):
            while submitted < len(tasks) and submitted < i + workers:
                pending.append(pool.submit(job, submitted, tasks[submitted]))
                submitted += 1
            batches, size = pending.popleft().result()
            with cond:
                in_use -= size
                head = i + 1
                cond.notify_all()
            yield batches
    finally:
        with cond:
            closed = True
            cond.notify_all()
        for future in pending:
            future.cancel()
        pool.shutdown(wait=False)
