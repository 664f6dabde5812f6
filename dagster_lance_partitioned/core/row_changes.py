"""Row-level changes across partitions: merge (upsert), delete and update.

Each operation changes every partition table it touches as a **detached** Lance version built
on the version the manifest registers, then moves all their ``read_version`` pins (and
registers new partitions, deregisters emptied ones) in **one** manifest commit: readers see
all of it or none of it.

The whole change is planned inside the manifest commit's plan function, on the snapshot that
commit is built on. When a concurrent commit wins, the plan runs again on the latest snapshot:
partitions whose pin did not move reuse the detached version already made (memoized by table,
base version and change), partitions that moved are redone on their new version -- so no
concurrent change is ever lost. After :data:`MAX_REDO` rounds in which some touched partition
kept moving, :class:`CommitConflictError` is raised (nothing visible)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import datafusion as dfn
import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.fragment import write_fragments

from . import arrow_json, storage
from .conform import check_write_schema, conform_for_write, same_layout, table_write_schema
from .errors import (
    CommitConflictError,
    DuplicateKeyError,
    MergeKeyError,
    UpdateExpressionError,
    WriteError,
)
from .filters import FilterLike, quote_ident, to_sql
from .filters import check as check_filter
from .health import parallel_map
from .manifest import (
    SEP,
    TABLE_NAME,
    ManifestEdit,
    ManifestSnapshot,
    ManifestStore,
    TableEntry,
    delete_empty_namespaces,
    partition_field_columns,
    random_name,
    table_location,
)
from .ns_schema import dropped_names, full_schema
from .partitioner import SpecEvaluator
from .planning import ScanTask, _task, plan_scan
from .scan import iter_task_batches, lance_filter, open_table
from .spec import PartitionSpec
from .state import HasState, NamespaceState, load_snapshot, state_of
from .writer import DETACHED_BIT, MAX_ROWS_PER_FILE, WRITER_ID, as_reader

WHEN_MATCHED = ("update", "ignore")
WHEN_NOT_MATCHED = ("insert", "ignore")
WHEN_NOT_MATCHED_BY_SOURCE = ("keep", "delete")
# Re-plans in which a touched partition had moved, before giving up with CommitConflictError.
MAX_REDO = 8
# At most this many distinct values per key column are pushed into the lookup filter that
# prunes the partitions a merge searches for its keys (more: every partition is searched).
LOOKUP_IN_LIST_MAX = 2_000
TABLE_THREADS = 8


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class RowChangeResult:
    """What a merge, delete or update did.

    ``rows_updated`` counts rows replaced by a new version of themselves (``rows_moved`` of
    them changed partition), ``rows_deleted`` rows removed, ``rows_inserted`` rows added.
    ``partitions`` are the object ids of every partition table changed, created or
    deregistered; ``committed`` is False when nothing changed (no manifest commit made, and
    ``manifest_version`` is the current version)."""

    operation: str
    manifest_version: int
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    rows_moved: int = 0
    partitions: tuple[str, ...] = ()
    partitions_created: tuple[str, ...] = ()
    partitions_removed: tuple[str, ...] = ()
    committed: bool = True


# --------------------------------------------------------------------------------------------
# One partition table's change


@dataclass
class _Change:
    """What happens to one existing partition table, applied in this order: rows matching
    ``delete_filter`` removed, rows whose ``on`` key is in ``delete_keys`` removed, ``upsert``
    merged on ``on`` (matched rows replaced when ``update``, others added when ``insert``),
    ``appends`` added."""

    on: tuple[str, ...] = ()
    delete_filter: str | None = None
    delete_keys: list[pa.Table] = field(default_factory=list)
    upsert: pa.Table | None = None
    update: bool = True
    insert: bool = True
    appends: list[pa.Table] = field(default_factory=list)
    counted: bool = False  # the upsert's rows are counted from Lance's merge statistics

    def same(self, other: _Change) -> bool:
        """Whether ``other`` is the same change (so its result can be reused)."""
        return (
            self.on == other.on
            and self.delete_filter == other.delete_filter
            and (self.update, self.insert) == (other.update, other.insert)
            and _same_tables(self.delete_keys, other.delete_keys)
            and _same_tables(
                [] if self.upsert is None else [self.upsert],
                [] if other.upsert is None else [other.upsert],
            )
            and _same_tables(self.appends, other.appends)
        )


def _same_tables(a: list[pa.Table], b: list[pa.Table]) -> bool:
    return len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class _Applied:
    """A detached version holding a table's content after a change."""

    version: int
    rows: int
    updated: int = 0
    inserted: int = 0


class _Executor:
    """Makes the detached versions of one operation, remembering them across re-plans."""

    def __init__(self, store: ManifestStore) -> None:
        self.store = store
        self.opts = store.storage_options
        self._done: dict[tuple[str, int], list[tuple[_Change, _Applied]]] = {}
        self._created: dict[tuple[str, tuple[Any, ...]], tuple[pa.Table, str, int]] = {}
        self.misses = 0
        # names of partition namespaces this operation creates, kept across re-plans
        self.names: dict[tuple[Any, ...], str] = {}

    # -- existing tables -------------------------------------------------------------------
    def apply(self, task: ScanTask, change: _Change, schema: pa.Schema) -> _Applied:
        """``change`` applied to ``task``'s table at its pinned version (cached)."""
        if task.read_branch is not None:
            raise WriteError(
                f"partition {task.object_id} reads branch {task.read_branch!r}; changing rows "
                "of branch-pinned partitions is not supported"
            )
        ds = open_table(task, self.opts)
        memo = self._done.setdefault((task.location, ds.version), [])
        for known, applied in memo:
            if known.same(change):
                return applied
        self.misses += 1
        write_schema = table_write_schema(schema)
        plain = arrow_json.strip_field_ids(schema)
        native = same_layout(ds.schema, write_schema) and (
            change.delete_filter is None or lance_filter(change.delete_filter, plain) is not None
        )
        if native:
            applied = self._apply_native(task, ds, change, write_schema, plain)
        else:
            applied = self._apply_rewrite(task, ds, change, schema, write_schema)
        memo.append((change, applied))
        return applied

    def _commit(self, uri: str, op: Any, base: int) -> lance.LanceDataset:
        return lance.LanceDataset.commit(
            uri, op, read_version=base, detached=True, storage_options=self.opts
        )

    def _detached(self, uri: str, ds: lance.LanceDataset) -> lance.LanceDataset:
        """A detached version with exactly ``ds``'s content (commits built on a main-line
        version would be rebased onto later main-line versions no manifest registered)."""
        if ds.version >= DETACHED_BIT:
            return ds
        latest = lance.dataset(uri, storage_options=self.opts).version
        return self._commit(uri, LanceOperation.Restore(ds.version), latest)

    def _apply_native(
        self,
        task: ScanTask,
        ds: lance.LanceDataset,
        change: _Change,
        write_schema: pa.Schema,
        plain: pa.Schema,
    ) -> _Applied:
        """The change made with Lance's own operations (the table has the write layout)."""
        uri = task.uri
        ds = self._detached(uri, ds)
        updated = inserted = 0
        if change.delete_filter is not None:
            predicate = lance_filter(change.delete_filter, plain)
            assert predicate is not None
            changed, removed = [], []
            for fragment in ds.get_fragments():
                meta = fragment.delete(predicate)
                if meta is None:
                    removed.append(fragment.fragment_id)
                elif meta != fragment.metadata:
                    changed.append(meta)
            if changed or removed:
                op = LanceOperation.Delete(changed, removed, predicate)
                ds = self._commit(uri, op, ds.version)
        keys = _concat(change.delete_keys)
        if keys is not None and keys.num_rows:
            builder = ds.merge_insert(list(change.on)).when_matched_delete()
            tx, _ = builder.execute_uncommitted(keys)
            ds = self._commit(uri, tx, ds.version)
        upsert = change.upsert
        if upsert is not None and upsert.num_rows and (change.update or change.insert):
            builder = ds.merge_insert(list(change.on))
            if change.update:
                builder = builder.when_matched_update_all()
            if change.insert:
                builder = builder.when_not_matched_insert_all()
            tx, stats = builder.execute_uncommitted(upsert)
            ds = self._commit(uri, tx, ds.version)
            updated, inserted = stats["num_updated_rows"], stats["num_inserted_rows"]
        rows = _concat(change.appends)
        if rows is not None and rows.num_rows:
            rows = rows.cast(write_schema)
            fragments = write_fragments(
                rows,
                uri,
                schema=write_schema,
                mode="overwrite",
                max_rows_per_file=MAX_ROWS_PER_FILE,
                data_storage_version=ds.data_storage_version,
                storage_options=self.opts,
            )
            ds = self._commit(uri, LanceOperation.Append(fragments), ds.version)
        return _Applied(ds.version, ds.count_rows(), updated, inserted)

    def _apply_rewrite(
        self,
        task: ScanTask,
        ds: lance.LanceDataset,
        change: _Change,
        schema: pa.Schema,
        write_schema: pa.Schema,
    ) -> _Applied:
        """The change computed in memory over the table's rows read in the namespace schema
        (tables of an older layout, or filters only DataFusion evaluates), written as one
        ``Overwrite`` built on the pinned version."""
        batches = list(iter_task_batches(task, schema, None, None, self.opts))
        plain = arrow_json.strip_field_ids(schema)
        rows = pa.Table.from_batches(batches, schema=plain)
        if change.delete_filter is not None:
            rows = _where(rows, f"({change.delete_filter}) IS NOT TRUE")
        keys = _concat(change.delete_keys)
        on = list(change.on)
        if keys is not None and keys.num_rows:
            rows = _anti(rows, keys, on)
        updated = inserted = 0
        if change.upsert is not None and change.upsert.num_rows:
            new = change.upsert.cast(plain)
            matched = _semi(new, rows.select(on), on)
            unmatched = _anti(new, rows.select(on), on)
            parts = []
            if change.update:
                updated = _semi(rows, matched.select(on), on).num_rows
                rows = _anti(rows, matched.select(on), on)
                parts.append(matched)
            if change.insert:
                inserted = unmatched.num_rows
                parts.append(unmatched)
            rows = pa.concat_tables([rows, *parts])
        appended = _concat(change.appends)
        if appended is not None:
            rows = pa.concat_tables([rows, appended.cast(plain)])
        out = pa.Table.from_batches(
            [conform_for_write(b, write_schema) for b in rows.to_batches()], schema=write_schema
        )
        fragments = write_fragments(
            out,
            task.uri,
            schema=write_schema,
            mode="overwrite",
            max_rows_per_file=MAX_ROWS_PER_FILE,
            data_storage_version=ds.data_storage_version,
            storage_options=self.opts,
        )
        op = LanceOperation.Overwrite(write_schema, fragments)
        new_ds = self._commit(task.uri, op, self._detached(task.uri, ds).version)
        return _Applied(new_ds.version, out.num_rows, updated, inserted)

    # -- new partition tables --------------------------------------------------------------
    def create(self, object_id: str, key: tuple[Any, ...], rows: pa.Table) -> tuple[str, int]:
        """A new partition table for ``object_id`` holding ``rows`` (cached): its location
        and version."""
        known = self._created.get((object_id, key))
        if known is not None and known[0].equals(rows):
            return known[1], known[2]
        self.misses += 1
        location = table_location(object_id)
        uri = storage.join(self.store.root, location)
        ds = lance.write_dataset(
            rows,
            uri,
            schema=rows.schema,
            mode="create",
            max_rows_per_file=MAX_ROWS_PER_FILE,
            storage_options=self.opts,
        )
        self._created[(object_id, key)] = (rows, location, ds.version)
        return location, ds.version


def _concat(tables: list[pa.Table]) -> pa.Table | None:
    if not tables:
        return None
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _where(rows: pa.Table, predicate: str) -> pa.Table:
    """The rows of ``rows`` for which the DataFusion SQL ``predicate`` holds."""
    if rows.num_rows == 0:
        return rows
    ctx = dfn.SessionContext()
    ctx.register_record_batches("t", [rows.to_batches()])
    out = ctx.sql(f"SELECT * FROM t WHERE {predicate}").to_arrow_table()
    return out.cast(rows.schema) if out.num_rows else rows.slice(0, 0)


def _keyed(keys: pa.Table, on: list[str]) -> pa.Table:
    return keys.select(on).group_by(on).aggregate([])


def _semi(rows: pa.Table, keys: pa.Table, on: list[str]) -> pa.Table:
    """The rows of ``rows`` whose ``on`` key is among ``keys`` (order kept)."""
    return _mask_join(rows, keys, on, keep=True)


def _anti(rows: pa.Table, keys: pa.Table, on: list[str]) -> pa.Table:
    """The rows of ``rows`` whose ``on`` key is not among ``keys`` (order kept)."""
    return _mask_join(rows, keys, on, keep=False)


def _mask_join(rows: pa.Table, keys: pa.Table, on: list[str], keep: bool) -> pa.Table:
    if rows.num_rows == 0 or keys.num_rows == 0:
        return rows if not keep else rows.slice(0, 0)
    return rows.filter(pa.array(_member(rows, keys, on) == keep))


def _member(rows: pa.Table, keys: pa.Table, on: list[str]) -> np.ndarray:
    """Per row of ``rows``: whether its ``on`` key is among ``keys`` (NULL keys never are)."""
    if rows.num_rows == 0:
        return np.zeros(0, dtype=bool)
    if keys.num_rows == 0:
        return np.zeros(rows.num_rows, dtype=bool)
    if len(on) == 1:
        col = rows.column(on[0])
        found = pc.is_in(col, value_set=keys.column(on[0]).cast(col.type), skip_nulls=True)
        return found.fill_null(False).to_numpy(zero_copy_only=False)
    marker = "__dlp_row"
    left = rows.select(on).append_column(marker, pa.array(np.arange(rows.num_rows)))
    right = _keyed(keys.select(on).cast(rows.select(on).schema), on)
    hit = left.join(right, keys=on, join_type="left semi").column(marker).to_numpy()
    out = np.zeros(rows.num_rows, dtype=bool)
    out[hit] = True
    return out


# --------------------------------------------------------------------------------------------
# The commit plan shared by the three operations


@dataclass
class _Plan:
    """One planning round's changes, against one manifest snapshot."""

    snap: ManifestSnapshot
    root: str
    schema: pa.Schema
    spec: PartitionSpec
    changes: dict[str, tuple[ScanTask, _Change]] = field(default_factory=dict)
    creates: dict[tuple[Any, ...], list[pa.Table]] = field(default_factory=dict)
    deregister: dict[str, ScanTask] = field(default_factory=dict)
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    moved: int = 0

    def change(self, task: ScanTask) -> _Change:
        """The change of ``task``'s table (created empty on first use)."""
        if task.object_id not in self.changes:
            self.changes[task.object_id] = (task, _Change())
        return self.changes[task.object_id][1]


@dataclass
class _Outcome:
    result: RowChangeResult | None = None


class _NothingToCommit(Exception):
    """The plan changes nothing."""


def _run(
    ns: NamespaceState,
    operation: str,
    build: Callable[[_Plan], None],
    properties: dict[str, str],
    before_commit: Callable[[], None] | None = None,
) -> RowChangeResult:
    """Plan with ``build`` on the latest manifest, make the detached versions and commit them
    in one manifest commit (re-planned on conflicts, see the module docstring)."""
    store = ns.store
    executor = _Executor(store)
    outcome = _Outcome()
    rounds = [0, 0]  # planning rounds, rounds that had to redo a partition
    hooked = [False]

    def plan(snap: ManifestSnapshot) -> ManifestEdit:
        state = NamespaceState(store, snap, pinned=True)
        p = _Plan(snap, ns.uri, state.schema_with_ids, state.current_spec)
        build(p)
        before = executor.misses
        edit = _materialize(p, executor, operation, outcome)
        if rounds[0] and executor.misses > before:
            rounds[1] += 1
            if rounds[1] > MAX_REDO:
                moved = sorted(p.changes)[:5]
                raise CommitConflictError(
                    f"{store.root}: partitions this {operation} changes kept being changed by "
                    f"concurrent commits ({MAX_REDO} re-plans); nothing of it is visible, "
                    "retry it",
                    moved,
                )
        rounds[0] += 1
        if edit is None:
            raise _NothingToCommit
        edit.properties = {
            "operation": operation,
            "writer": WRITER_ID,
            "overwritten": json.dumps(sorted(p.deregister)),
            **properties,
        }
        if before_commit is not None and not hooked[0]:
            hooked[0] = True
            before_commit()
        return edit

    try:
        snap = store.commit(load_snapshot, plan)
    except _NothingToCommit:
        ns.refresh()
        assert outcome.result is not None
        return _replace(outcome.result, manifest_version=ns.version, committed=False)
    ns.refresh()
    assert outcome.result is not None
    return _replace(outcome.result, manifest_version=snap.version)


def _replace(result: RowChangeResult, **changes: Any) -> RowChangeResult:
    from dataclasses import replace

    return replace(result, **changes)


def _materialize(
    p: _Plan,
    executor: _Executor,
    operation: str,
    outcome: _Outcome,
) -> ManifestEdit | None:
    """Make the detached versions and new tables of ``p``; the manifest edit registering them
    (None when nothing changes)."""
    snap, spec = p.snap, p.spec
    write_schema = table_write_schema(p.schema)
    items = list(p.changes.values())
    applied = parallel_map(lambda it: executor.apply(it[0], it[1], p.schema), items, TABLE_THREADS)
    edit = ManifestEdit()
    created: list[str] = []
    changed: list[str] = []
    updated, inserted = p.updated, p.inserted
    for (task, change), result in zip(items, applied, strict=True):
        if change.counted:
            updated += result.updated
            inserted += result.inserted
        if result.rows == 0:
            p.deregister[task.object_id] = task
        else:
            edit.upserts[task.object_id] = {"read_version": result.version}
            changed.append(task.object_id)
    if p.creates:
        edit.new_columns = partition_field_columns([spec])
        edit.upserts[spec.namespace] = {"object_type": "namespace"}
        prefixes = {k[:n] for k in p.creates for n in range(1, len(k) + 1)}
        ns_ids = dict(snap.find_namespaces(spec, prefixes))
        names = executor.names
        jobs = []
        for key, parts in sorted(p.creates.items(), key=lambda kv: repr(kv[0])):
            rows = _concat(parts)
            assert rows is not None
            rows = pa.Table.from_batches(
                [conform_for_write(b, write_schema) for b in rows.to_batches()],
                schema=write_schema,
            )
            oid = _register_namespaces(spec, key, ns_ids, names, edit)
            jobs.append((oid, key, rows))
        made = parallel_map(lambda j: executor.create(*j), jobs, TABLE_THREADS)
        for (oid, key, _rows), (location, version) in zip(jobs, made, strict=True):
            row_values = {f.column: v for f, v in zip(spec.fields, key, strict=True)}
            edit.upserts[oid] = {
                "object_type": "table",
                "location": location,
                "metadata": "{}",
                "read_version": version,
                **row_values,
            }
            created.append(oid)
    if p.deregister:
        edit.deletes.update(p.deregister)
        delete_empty_namespaces(snap, edit)
    outcome.result = RowChangeResult(
        operation=operation,
        manifest_version=snap.version,
        rows_inserted=inserted,
        rows_updated=updated,
        rows_deleted=p.deleted,
        rows_moved=p.moved,
        partitions=tuple(sorted({*changed, *created, *p.deregister})),
        partitions_created=tuple(sorted(created)),
        partitions_removed=tuple(sorted(p.deregister)),
    )
    if not edit.upserts and not edit.deletes:
        return None
    return edit


def _register_namespaces(
    spec: PartitionSpec,
    key: tuple[Any, ...],
    ns_ids: dict[tuple[int, tuple[Any, ...]], str],
    names: dict[tuple[Any, ...], str],
    edit: ManifestEdit,
) -> str:
    """Add the partition namespaces of a new partition ``key`` the manifest lacks to ``edit``;
    the new table's object id."""
    path = [spec.namespace]
    row_values: dict[str, Any] = {}
    for level, f in enumerate(spec.fields, start=1):
        row_values[f.column] = key[level - 1]
        prefix = key[:level]
        known = ns_ids.get((spec.spec_id, prefix))
        if known is None:
            name = names.setdefault(prefix, random_name())
            known = SEP.join([*path, name])
            edit.upserts[known] = {"object_type": "namespace", "metadata": "{}", **row_values}
            ns_ids[(spec.spec_id, prefix)] = known
        path = known.split(SEP)
    return SEP.join([*path, TABLE_NAME])


def _tasks_of(p: _Plan, entries: Iterable[TableEntry]) -> list[ScanTask]:
    return [_task(e, p.snap.specs[e.spec_id], p.root, p.schema) for e in entries]


def _tasks(p: _Plan, sql: str | None) -> list[ScanTask]:
    """The partition tables ``plan_scan(sql)`` selects on ``p``'s snapshot (every table when
    pruning cannot render its manifest query, e.g. for a spec version no write has used yet:
    the filter is applied inside each table anyway)."""
    try:
        return list(plan_scan(p.snap, p.schema, p.root, sql).tasks)
    except KeyError:
        return list(plan_scan(p.snap, p.schema, p.root, None).tasks)


def _route(
    p: _Plan, rows: pa.Table
) -> tuple[dict[tuple[Any, ...], np.ndarray], dict[tuple[Any, ...], ScanTask]]:
    """``rows`` (namespace columns) split by the current spec: partition key -> row numbers,
    and the registered tables of those keys."""
    groups: dict[tuple[Any, ...], list[np.ndarray]] = {}
    evaluator = SpecEvaluator(p.spec, p.schema)
    start = 0
    for batch in rows.to_batches():
        for key, part in evaluator.split(batch):
            idx = np.arange(batch.num_rows) if part.indices is None else np.asarray(part.indices)
            groups.setdefault(key, []).append(idx + start)
        start += batch.num_rows
    routed = {k: np.concatenate(v) for k, v in groups.items()}
    entries = p.snap.find_tables(p.spec, routed)
    return routed, {k: t for k, t in zip(entries, _tasks_of(p, entries.values()), strict=True)}


# --------------------------------------------------------------------------------------------
# delete


def delete_rows(
    ns: NamespaceState | HasState,
    filter: FilterLike,
    *,
    commit_properties: Mapping[str, str] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> RowChangeResult:
    """Delete the rows matching ``filter`` (NULL is not a match) in one manifest commit.

    Only the partitions ``plan_scan(filter)`` selects are read (every spec version); a
    partition all of whose rows match is deregistered, others get a detached version without
    the matching rows. A filter is required (``"TRUE"`` deletes everything)."""
    ns = state_of(ns)
    ns.require_unpinned("delete rows")
    sql = to_sql(filter)
    if sql is None:
        raise WriteError("delete needs a filter (use 'TRUE' to delete every row)")
    ns.refresh()
    check_filter(sql, ns.schema_with_ids)  # a bad filter fails here, before anything is written
    counts: dict[tuple[str, int | None, str | None], tuple[int, int]] = {}

    def count(task: ScanTask, schema: pa.Schema) -> tuple[int, int]:
        key = (task.location, task.read_version, task.read_tag)
        if key not in counts or task.read_version is None:
            plain = arrow_json.strip_field_ids(schema)
            batches = iter_task_batches(
                task,
                schema,
                plain.names[:1],
                sql,
                ns.storage_options,
                translated_filter=lance_filter(sql, plain),
            )
            matching = sum(b.num_rows for b in batches)
            counts[key] = (matching, open_table(task, ns.storage_options).count_rows())
        return counts[key]

    def build(p: _Plan) -> None:
        tasks = _tasks(p, sql)
        found = parallel_map(lambda t: count(t, p.schema), tasks, TABLE_THREADS)
        for task, (matching, rows) in zip(tasks, found, strict=True):
            if matching == 0:
                continue
            p.deleted += matching
            if matching == rows:
                p.deregister[task.object_id] = task
            else:
                p.change(task).delete_filter = sql

    return _run(ns, "delete", build, {"filter": sql, **(commit_properties or {})}, before_commit)


# --------------------------------------------------------------------------------------------
# update


def _compile_set(assignments: Mapping[str, str], schema: pa.Schema) -> str:
    """The SELECT list applying ``assignments`` (column -> DataFusion SQL expression over the
    row's columns); every column keeps its name."""
    plain = arrow_json.strip_field_ids(schema)
    if not assignments:
        raise UpdateExpressionError("update needs at least one column to set", None)
    if (name := _first_unknown(plain, assignments)) is not None:
        raise UpdateExpressionError(
            f"update sets column {name!r}, which the namespace schema does not have "
            f"(columns: {', '.join(plain.names)})",
            name,
        )
    parts = []
    for f in plain:
        expr = assignments.get(f.name)
        parts.append(f"({expr}) AS {quote_ident(f.name)}" if expr else quote_ident(f.name))
    return ", ".join(parts)


def _apply_set(rows: pa.Table, select: str, assignments: Mapping[str, str]) -> pa.Table:
    """``rows`` with the assigned columns recomputed, cast to their column types."""
    ctx = dfn.SessionContext()
    batches = rows.to_batches() or [
        pa.RecordBatch.from_pylist([], schema=rows.schema)  # an empty input still type-checks
    ]
    ctx.register_record_batches("t", [batches])
    try:
        out = ctx.sql(f"SELECT {select} FROM t").to_arrow_table()
    except Exception as e:  # DataFusion raises plain exceptions for bad SQL
        column = next(iter(assignments)) if len(assignments) == 1 else None
        raise UpdateExpressionError(
            f"update expressions {dict(assignments)} cannot be evaluated: {e}", column
        ) from None
    arrays = []
    for f in rows.schema:
        col = out.column(f.name)
        if col.type != f.type:
            try:
                col = pc.cast(col, f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise UpdateExpressionError(
                    f"update of column {f.name!r}: {assignments.get(f.name)!r} gives "
                    f"{col.type}, which cannot be stored as {f.type}: {e}",
                    f.name,
                ) from None
        if not f.nullable and col.null_count:
            raise UpdateExpressionError(
                f"update of column {f.name!r}: {assignments.get(f.name)!r} gives NULL for "
                f"{col.null_count} row(s), but the column is not nullable",
                f.name,
            )
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=rows.schema)


def update_rows(
    ns: NamespaceState | HasState,
    filter: FilterLike,
    set: Mapping[str, str],
    *,
    commit_properties: Mapping[str, str] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> RowChangeResult:
    """Set ``set``'s columns (DataFusion SQL expressions over the row) on the rows matching
    ``filter``, in one manifest commit.

    Rows stay in their partition table when their partition values (under that table's spec)
    do not change; otherwise they move: removed from it and written to the partition of the
    current spec they now belong to, in the same commit. ``filter`` None updates every row."""
    ns = state_of(ns)
    ns.require_unpinned("update rows")
    sql = to_sql(filter)
    ns.refresh()
    select = _compile_set(set, ns.schema_with_ids)
    if sql is not None:
        check_filter(sql, ns.schema_with_ids)  # a bad filter fails here
    _apply_set(
        pa.Table.from_pylist([], schema=arrow_json.strip_field_ids(ns.schema_with_ids)),
        select,
        set,
    )
    where = sql or "TRUE"
    matched: dict[tuple[str, int | None, str | None, str], pa.Table] = {}

    def read(task: ScanTask, schema: pa.Schema) -> pa.Table:
        shape = schema.to_string(show_schema_metadata=True, show_field_metadata=True)
        key = (task.location, task.read_version, task.read_tag, shape)
        if key not in matched or task.read_version is None:
            plain = arrow_json.strip_field_ids(schema)
            batches = list(
                iter_task_batches(
                    task,
                    schema,
                    None,
                    where,
                    ns.storage_options,
                    translated_filter=lance_filter(where, plain),
                )
            )
            matched[key] = pa.Table.from_batches(batches, schema=plain)
        return matched[key]

    def build(p: _Plan) -> None:
        select_now = _compile_set(set, p.schema)
        tasks = _tasks(p, sql)
        found = parallel_map(lambda t: read(t, p.schema), tasks, TABLE_THREADS)
        moving: list[pa.Table] = []
        for task, rows in zip(tasks, found, strict=True):
            if rows.num_rows == 0:
                continue
            new = _apply_set(rows, select_now, set)
            p.updated += new.num_rows
            spec = p.snap.specs[task.spec_id]
            here = _stays(spec, p.schema, new, task)
            change = p.change(task)
            change.delete_filter = where
            if here.all():
                change.appends.append(new)
                continue
            if here.any():
                change.appends.append(new.filter(pa.array(here)))
            gone = new.filter(pa.array(~here))
            p.moved += gone.num_rows
            moving.append(gone)
        if moving:
            _place(p, pa.concat_tables(moving))

    return _run(
        ns,
        "update",
        build,
        {"filter": where, "set": json.dumps(dict(set)), **(commit_properties or {})},
        before_commit,
    )


def _stays(spec: PartitionSpec, schema: pa.Schema, rows: pa.Table, task: ScanTask) -> np.ndarray:
    """Per row of ``rows``: whether its partition under ``spec`` is still ``task``'s."""
    evaluator = SpecEvaluator(spec, schema)
    here = np.ones(rows.num_rows, dtype=bool)
    for batch_start, batch in _batches_with_offsets(rows):
        for value, f in zip(evaluator.values(batch), spec.fields, strict=True):
            want = task.partition_values[f.field_id]
            if want is None:
                same = pc.is_null(value)
            else:
                same = pc.fill_null(pc.equal(value, pa.scalar(want, value.type)), False)
            here[batch_start : batch_start + batch.num_rows] &= same.to_numpy(zero_copy_only=False)
    return here


def _batches_with_offsets(rows: pa.Table) -> Iterable[tuple[int, pa.RecordBatch]]:
    start = 0
    for batch in rows.to_batches():
        yield start, batch
        start += batch.num_rows


def _place(p: _Plan, rows: pa.Table) -> None:
    """Append ``rows`` to their partitions of the current spec (new ones created)."""
    routed, tables = _route(p, rows)
    for key, idx in routed.items():
        part = rows.take(pa.array(idx))
        task = tables.get(key)
        if task is not None:
            p.change(task).appends.append(part)
        else:
            p.creates.setdefault(key, []).append(part)


# --------------------------------------------------------------------------------------------
# merge


def _input_table(data: Any, ns: NamespaceState) -> pa.Table:
    """``data`` read whole and conformed to the namespace's write schema."""
    schema = ns.schema_with_ids
    write_schema = table_write_schema(schema)
    reader = as_reader(data)
    try:
        dropped = dropped_names(full_schema(ns.snapshot.metadata))
    except Exception:
        dropped = set()
    check_write_schema(reader.schema, write_schema, dropped)
    batches = [conform_for_write(b, write_schema) for b in reader]
    return pa.Table.from_batches(batches, schema=write_schema)


def _check_keys(rows: pa.Table, on: list[str]) -> None:
    """Refuse NULL keys and keys occurring twice in the merge input, naming one."""
    for name in on:
        nulls = rows.column(name).null_count
        if nulls:
            raise MergeKeyError(
                f"merge key column {name!r} is NULL in {nulls} input row(s); keys must be set",
                name,
            )
    if rows.num_rows < 2:
        return
    counts = rows.select(on).group_by(on).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dup.num_rows:
        first = dup.slice(0, 1).to_pylist()[0]
        key = {name: first[name] for name in on}
        raise DuplicateKeyError(
            f"merge key {key} occurs {first['count_all']} times in the input "
            f"({dup.num_rows} duplicate key(s)); each key may occur once. Nothing was changed",
            key,
        )


def _source_names(spec: PartitionSpec, schema: pa.Schema) -> set[str] | None:
    """The columns ``spec``'s partition values are computed from (None: one is gone)."""
    names = {arrow_json.field_id(f): f.name for f in schema}
    out: set[str] = set()
    for f in spec.fields:
        for sid in f.source_ids:
            if sid not in names:
                return None
            out.add(names[sid])
    return out


def merge_rows(
    ns: NamespaceState | HasState,
    data: Any,
    on: str | Sequence[str],
    *,
    when_matched: str = "update",
    when_not_matched: str = "insert",
    when_not_matched_by_source: str = "keep",
    scope: FilterLike = None,
    commit_properties: Mapping[str, str] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> RowChangeResult:
    """Merge ``data`` into the namespace on the key columns ``on``, in one manifest commit
    (``data`` is read whole into memory).

    An input row whose key exists is a match: ``when_matched="update"`` replaces the stored
    row(s) with it, ``"ignore"`` keeps them. An unmatched row is inserted
    (``when_not_matched="insert"``) or dropped (``"ignore"``). Input rows are routed by the
    current spec. A matched row whose stored copy lies in another partition (its partition
    source columns changed, or it was written under an older spec) is moved: the stored copy
    is deleted and the new one written to its partition, in the same commit.

    Where keys are searched: when ``on`` includes the source columns of every spec version
    that has partitions, a key can only be in the partitions its values map to, so only those
    are read (an exact and cheap lookup). Otherwise every partition that may hold the keys is
    searched (pruned by ``on`` IN (input values) when the values are few), so moved keys are
    always found.

    ``when_not_matched_by_source="delete"`` deletes stored rows whose key is not in the input,
    limited to the partitions the input rows are routed to -- or, with ``scope`` (a filter),
    to the stored rows matching ``scope`` instead. It never empties partitions the input does
    not touch unless ``scope`` says so.

    Keys must be unique in the input and never NULL (:class:`DuplicateKeyError`,
    :class:`MergeKeyError`); nothing is changed then."""
    ns = state_of(ns)
    ns.require_unpinned("merge into it")
    keys = [on] if isinstance(on, str) else list(on)
    for name, value, allowed in (
        ("when_matched", when_matched, WHEN_MATCHED),
        ("when_not_matched", when_not_matched, WHEN_NOT_MATCHED),
        ("when_not_matched_by_source", when_not_matched_by_source, WHEN_NOT_MATCHED_BY_SOURCE),
    ):
        if value not in allowed:
            raise WriteError(f"{name}={value!r}: use one of {', '.join(allowed)}")
    ns.refresh()
    plain = arrow_json.strip_field_ids(ns.schema_with_ids)
    if not keys:
        raise MergeKeyError("merge needs at least one key column in `on`", None)
    if (name := _first_unknown(plain, keys)) is not None:
        raise MergeKeyError(
            f"merge key {name!r} is not a column of the namespace "
            f"(columns: {', '.join(plain.names)})",
            name,
        )
    scope_sql = to_sql(scope)
    if scope_sql is not None and when_not_matched_by_source != "delete":
        raise WriteError("scope only applies with when_not_matched_by_source='delete'")
    if scope_sql is not None:
        check_filter(scope_sql, ns.schema_with_ids)  # a bad scope fails here
    src = _input_table(data, ns)
    _check_keys(src, keys)
    by_source = when_not_matched_by_source == "delete"
    update, insert = when_matched == "update", when_not_matched == "insert"
    lookups: dict[tuple[str, int | None, str | None, str | None], pa.Table] = {}

    def stored_keys(task: ScanTask, schema: pa.Schema, where: str | None) -> pa.Table:
        """The ``on`` columns of the stored rows of ``task`` (matching ``where``)."""
        key = (task.location, task.read_version, task.read_tag, where)
        if key not in lookups or task.read_version is None:
            p_plain = arrow_json.strip_field_ids(schema)
            batches = list(
                iter_task_batches(
                    task,
                    schema,
                    keys,
                    where,
                    ns.storage_options,
                    translated_filter=lance_filter(where, p_plain),
                )
            )
            lookups[key] = pa.Table.from_batches(
                batches, schema=pa.schema([p_plain.field(k) for k in keys])
            )
        return lookups[key]

    def build(p: _Plan) -> None:
        counts = p.snap.table_counts()
        specs = [s for s in p.snap.specs.values() if counts.get(s.spec_id)]
        covered = all(
            (names := _source_names(s, p.schema)) is not None and names <= set(keys) for s in specs
        )
        routed, targets = _route(p, src)
        candidates: dict[str, ScanTask] = {}
        if covered:
            for s in specs:
                if s.spec_id == p.spec.spec_id:
                    candidates.update((t.object_id, t) for t in targets.values())
                    continue
                evaluator = SpecEvaluator(s, p.schema)
                found: set[tuple[Any, ...]] = set()
                for batch in src.to_batches():
                    found.update(k for k, _ in evaluator.split(batch))
                entries = p.snap.find_tables(s, found)
                candidates.update((t.object_id, t) for t in _tasks_of(p, entries.values()))
        elif src.num_rows:
            lookup = _lookup_filter(src, keys)
            candidates.update((t.object_id, t) for t in _tasks(p, lookup))
        target_ids = {t.object_id for t in targets.values()}
        if covered and not by_source and set(candidates) <= target_ids:
            # every key can only be in its own target partition: Lance's merge decides
            for key, idx in routed.items():
                rows = src.take(pa.array(idx))
                task = targets.get(key)
                if task is not None:
                    change = p.change(task)
                    change.on, change.upsert = tuple(keys), rows
                    change.update, change.insert = update, insert
                    change.counted = True
                elif insert:
                    p.creates.setdefault(key, []).append(rows)
                    p.inserted += rows.num_rows
            return
        _plan_merge(p, src, keys, routed, targets, candidates, stored_keys, update, insert)
        if by_source:
            if scope_sql is None:
                scoped = [(t, None) for t in targets.values()]
            else:
                tasks = _tasks(p, scope_sql)
                scoped = [(t, scope_sql) for t in tasks]
            for task, where in scoped:
                stored = stored_keys(task, p.schema, where)
                gone = _keyed(_anti(stored, src.select(keys), keys), keys)
                if gone.num_rows:
                    p.deleted += _semi(stored, gone, keys).num_rows
                    change = p.change(task)
                    change.on = tuple(keys)
                    change.delete_keys.append(gone)

    props = {
        "on": json.dumps(keys),
        "when_matched": when_matched,
        "when_not_matched": when_not_matched,
        "when_not_matched_by_source": when_not_matched_by_source,
        **({"scope": scope_sql} if scope_sql else {}),
        **(commit_properties or {}),
    }
    return _run(ns, "merge", build, props, before_commit)


def _lookup_filter(src: pa.Table, keys: list[str]) -> str | None:
    """A filter selecting (at least) the stored rows with the input's keys, for pruning; None
    when the input has too many distinct values."""
    from .filters import sql_literal

    parts = []
    for name in keys:
        values = pc.unique(src.column(name)).to_pylist()
        if len(values) > LOOKUP_IN_LIST_MAX:
            continue
        try:
            literals = ", ".join(sql_literal(v) for v in values)
        except Exception:
            continue
        parts.append(f"{quote_ident(name)} IN ({literals})")
    return " AND ".join(parts) or None


def _plan_merge(
    p: _Plan,
    src: pa.Table,
    keys: list[str],
    routed: dict[tuple[Any, ...], np.ndarray],
    targets: dict[tuple[Any, ...], ScanTask],
    candidates: dict[str, ScanTask],
    stored_keys: Callable[[ScanTask, pa.Schema, str | None], pa.Table],
    update: bool,
    insert: bool,
) -> None:
    """Decide every input row from where its key is stored (looked up in ``candidates``):
    written to its target partition or not, and the stored copies in other partitions
    deleted."""
    n = src.num_rows
    target_of = np.full(n, -1, dtype=np.int64)  # index into order, -1 unused
    order = list(routed)
    for i, key in enumerate(order):
        target_of[routed[key]] = i
    target_ids = np.array(
        [targets[k].object_id if k in targets else None for k in order], dtype=object
    )
    row_target = target_ids[target_of]
    tasks = list(candidates.values())
    stored = parallel_map(lambda t: stored_keys(t, p.schema, None), tasks, TABLE_THREADS)
    found_in = [_member(src, s, keys) for s in stored]
    matched = np.zeros(n, dtype=bool)
    for mask in found_in:
        matched |= mask
    write = (matched & update) | (~matched & insert)
    for task, mask in zip(tasks, found_in, strict=True):
        # stored copies of written keys whose new row goes to another partition
        elsewhere = row_target != task.object_id
        moving = mask & write & elsewhere
        if moving.any():
            gone = src.filter(pa.array(moving)).select(keys)
            change = p.change(task)
            change.on = tuple(keys)
            change.delete_keys.append(gone)
            p.moved += int(moving.sum())
    p.updated += int((matched & write).sum())
    p.inserted += int((~matched & write).sum())
    for key in order:
        idx = routed[key]
        idx = idx[write[idx]]
        if len(idx) == 0:
            continue
        rows = src.take(pa.array(idx))
        task = targets.get(key)
        if task is not None:
            change = p.change(task)
            change.on, change.upsert = tuple(keys), rows
            change.update = change.insert = True
        else:
            p.creates.setdefault(key, []).append(rows)


__all__ = [
    "RowChangeResult",
    "delete_rows",
    "merge_rows",
    "update_rows",
]


def _first_unknown(schema: pa.Schema, names: Iterable[str]) -> str | None:
    """The first of ``names`` that is not a column of ``schema`` (None: all are)."""
    return next((n for n in names if schema.get_field_index(n) < 0), None)
