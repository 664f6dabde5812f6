"""Applying a :class:`TableEdit` to one partition table: one new **detached** Lance version
built on the version the manifest pins (nothing visible until a manifest commit registers it),
and creating new partition tables.

A table with the namespace's write layout is changed row-level, with one Lance commit: the
stored rows to remove are found by scanning only the key columns (and the delete filter's)
with their row addresses, removed with deletion vectors, and the rows to write (upserted,
moved in, appended) are added as new fragments -- one ``Update`` per table, as the manifest's
own row-level commits. A table of an older layout (or a filter only DataFusion evaluates) is
read whole in the namespace schema, changed in memory and written as one ``Overwrite``.

One :class:`TableExecutor` serves one operation, from the core (in threads) or a Spark task:
each table is opened once, its key columns are read once (the merge planning that searched
them and the change reuse the read), and a change already applied to the same base version is
not made again when a commit is re-planned."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.fragment import FragmentMetadata, write_fragments

from .. import storage
from .. import table_version as tv
from ..concurrency import table_threads
from ..errors import PartitionReadError, WriteError, is_storage_failure, storage_error
from ..lru import Lru
from ..manifest import retire, stats
from ..read.planning import ScanTask
from ..read.scan import iter_task_batches, lance_filter, open_table
from ..schema import arrow_json
from ..schema.conform import conform_for_write, same_layout, table_write_schema
from ..search.build import index_version
from ..search.declaration import IndexDeclaration
from ..table_files import data_bytes
from ..tuning import tuning
from . import keys as K
from .change import Applied, TableEdit

ROWADDR = "_rowaddr"
RECENT_VERSIONS = 512  # table versions made by this process kept open for the next change
_OFFSET_MASK = np.uint64(0xFFFFFFFF)


class TableExecutor:
    """Makes the detached versions (and new tables) of one operation under ``root``; see the
    module doc. Safe to use from several threads (one table at a time per thread)."""

    def __init__(self, root: str, storage_options: dict[str, str] | None) -> None:
        self.root = root
        self.opts = storage_options
        self._datasets: dict[tuple[Any, ...], lance.LanceDataset] = {}
        self._keys: dict[tuple[Any, ...], pa.Table] = {}
        self._done: dict[tuple[str, int], list[tuple[TableEdit, Applied]]] = {}
        self._created: dict[str, tuple[pa.Table, int]] = {}
        self.misses = 0  # changes and creations actually made (not reused)
        self.threads = table_threads(root)  # tables changed at once
        self._native: dict[tuple[Any, ...], bool] = {}
        self._schemas: dict[int, tuple[pa.Schema, pa.Schema, pa.Schema]] = {}
        self._indexes: tuple[list[IndexDeclaration], pa.Schema] | None = None

    def index_with(self, declared: list[IndexDeclaration], schema: pa.Schema) -> None:
        """Build ``declared`` (columns of ``schema``, with field ids) on every version made
        from now on, before it is returned (see :func:`..search.build.index_version`)."""
        self._indexes = (declared, schema) if declared else None

    def _indexed(self, uri: str, version: int, object_id: str) -> int:
        """``version`` of the table at ``uri`` carrying the declared indexes it needs."""
        if self._indexes is None:
            return version
        declared, schema = self._indexes
        return index_version(uri, version, declared, schema, self.opts, object_id=object_id).version

    # -- what was made ---------------------------------------------------------------------
    def made(self, epoch: int) -> list[retire.Use]:
        """Every version and new table made so far, as made on a manifest of retirement epoch
        ``epoch`` (see :mod:`.manifest.retire`)."""
        uses = [
            retire.Use(location, applied.version, base, epoch)
            for (location, base), memo in self._done.items()
            for _, applied in memo
        ]
        uses += [retire.Use(loc, v, None, epoch) for loc, (_, v) in self._created.items()]
        return uses

    def forget(self, locations: set[str]) -> None:
        """Forget what was made or read at ``locations`` (a retirement named them)."""
        if not locations:
            return
        caches: list[dict[Any, Any]] = [self._done, self._datasets, self._keys, self._native]
        for cache in caches:
            for ref in [r for r in cache if r[0] in locations]:
                del cache[ref]
        for loc in locations & set(self._created):
            del self._created[loc]

    # -- reading ---------------------------------------------------------------------------
    def dataset(self, task: ScanTask) -> lance.LanceDataset:
        """``task``'s table at its pinned version (opened once per operation)."""
        ref = (task.location, task.read_version, task.read_branch, task.read_tag)
        if task.read_version is None and task.read_tag is None:
            return self._open(task)  # the latest of main: never reused
        ds = self._datasets.get(ref)
        if ds is None:
            ds = self._datasets[ref] = self._open(task)
        return ds

    def _open(self, task: ScanTask) -> lance.LanceDataset:
        if task.read_version is not None and task.read_branch is None:
            known = _recent.get((task.uri, task.read_version, _options_key(self.opts)))
            if known is not None:
                return known
        try:
            return open_table(task, self.opts)
        except Exception as e:
            if is_storage_failure(e):
                raise storage_error(
                    e, self.root, "opening partition", task.object_id, PartitionReadError
                ) from None
            raise

    def native(self, task: ScanTask, schema: pa.Schema) -> bool:
        """Whether ``task``'s table has the namespace's write layout (read and changed as
        stored, with row addresses)."""
        ds = self.dataset(task)
        write_schema = self.schemas(schema)[1]  # held by the executor: its id stays its own
        ref = (task.location, ds.version, id(write_schema))
        known = self._native.get(ref)
        if known is None:
            known = self._native[ref] = bool(same_layout(ds.schema, write_schema))
        return known

    def schemas(self, schema: pa.Schema) -> tuple[pa.Schema, pa.Schema]:
        """The namespace schema without field ids, and the write schema (computed once)."""
        known = self._schemas.get(id(schema))
        if known is None or known[0] is not schema:
            plain = arrow_json.strip_field_ids(schema)
            known = self._schemas[id(schema)] = (schema, plain, table_write_schema(schema))
        return known[1], known[2]

    def stored_keys(
        self, task: ScanTask, schema: pa.Schema, on: Sequence[str], where: str | None = None
    ) -> pa.Table:
        """The ``on`` columns of ``task``'s stored rows (matching the SQL ``where``), read once
        per operation; with their row addresses (column ``_rowaddr``) when the table has the
        write layout and Lance evaluates ``where``."""
        read, constants = self.key_columns(task, on)
        stored = self._stored(task, schema, read, where)
        if not constants:
            return stored
        plain = self.schemas(schema)[0]
        columns = {name: stored.column(name) for name in read}
        for name, value in constants.items():
            columns[name] = pa.repeat(pa.scalar(value, plain.field(name).type), stored.num_rows)
        if ROWADDR in stored.column_names:
            columns[ROWADDR] = stored.column(ROWADDR)
        names = [*on, *([ROWADDR] if ROWADDR in columns else [])]
        return pa.table([columns[n] for n in names], names=names)

    def key_columns(self, task: ScanTask, on: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
        """The key columns to read from ``task``'s table, and those it need not read: identity
        partition columns, whose every stored row holds the partition value (name -> value)."""
        constants = {c: task.constants[c] for c in on if c in task.constants}
        read = [c for c in on if c not in constants]
        if not read:  # every key column is constant: read one anyway (rows are counted)
            return list(on), {}
        return read, constants

    def _stored(
        self, task: ScanTask, schema: pa.Schema, columns: list[str], where: str | None
    ) -> pa.Table:
        """``columns`` of ``task``'s stored rows matching ``where`` (cached, see
        :meth:`stored_keys`)."""
        ds = self.dataset(task)
        ref = (task.location, ds.version, tuple(columns), where)
        cached = self._keys.get(ref)
        if cached is not None:
            return cached
        plain = self.schemas(schema)[0]
        predicate = lance_filter(where, plain)
        if self.native(task, schema) and (where is None or predicate is not None):
            table = self._scan(task, ds, columns, predicate)
        else:
            batches = list(
                iter_task_batches(
                    task, schema, columns, where, self.opts, translated_filter=predicate
                )
            )
            key_schema = pa.schema([plain.field(k) for k in columns])
            table = pa.Table.from_batches(batches, schema=key_schema)
        self._keys[ref] = table
        return table

    def _scan(
        self, task: ScanTask, ds: lance.LanceDataset, columns: list[str], predicate: str | None
    ) -> pa.Table:
        try:
            table = ds.scanner(columns=columns, filter=predicate, with_row_address=True).to_table()
        except Exception as e:
            if is_storage_failure(e):
                raise storage_error(
                    e, self.root, "reading partition", task.object_id, PartitionReadError
                ) from None
            raise
        return table.replace_schema_metadata(None)

    # -- changing existing tables ------------------------------------------------------------
    def apply(self, task: ScanTask, change: TableEdit, schema: pa.Schema) -> Applied:
        """``change`` applied to ``task``'s table at its pinned version, as one detached
        version (reused when the same change was applied to the same version before)."""
        if task.read_branch is not None:
            raise WriteError(
                f"partition {task.object_id} reads branch {task.read_branch!r}; changing rows "
                "of branch-pinned partitions is not supported"
            )
        ds = self.dataset(task)
        memo = self._done.setdefault((task.location, ds.version), [])
        for known, applied in memo:
            if known.same(change):
                return applied
        self.misses += 1
        plain = self.schemas(schema)[0]
        rowwise = self.native(task, schema) and (
            change.delete_filter is None or lance_filter(change.delete_filter, plain) is not None
        )
        if rowwise:
            applied = self._apply_rowwise(task, ds, change, schema)
        else:
            applied = self._apply_rewrite(task, ds, change, schema)
        if applied.changed and applied.rows and applied.version != ds.version:
            indexed = self._indexed(task.uri, applied.version, task.object_id)
            applied = dataclasses.replace(applied, version=indexed)
        memo.append((change, applied))
        return applied

    def _apply_rowwise(
        self, task: ScanTask, ds: lance.LanceDataset, change: TableEdit, schema: pa.Schema
    ) -> Applied:
        """The change as deletion vectors plus new fragments, in one commit."""
        plain, write_schema = self.schemas(schema)
        on = list(change.on)
        gone: list[np.ndarray] = []  # row addresses removed
        if change.delete_filter is not None:
            hit = self._scan(task, ds, [], lance_filter(change.delete_filter, plain))
            gone.append(_addresses(hit))
        upsert = change.upsert
        if upsert is not None and (upsert.num_rows == 0 or not (change.update or change.insert)):
            upsert = None
        stored = None
        read, constants = self.key_columns(task, on)
        if on and (change.delete_keys or upsert is not None):
            stored = self._stored(task, schema, read, None)
        doomed = K.concat(change.delete_keys)
        if stored is not None and doomed is not None and doomed.num_rows:
            rows, _ = _key_pairs(stored, doomed, read, constants, unique=False)
            gone.append(_addresses(stored)[rows])
        deleted = len(np.unique(np.concatenate(gone))) if gone else 0
        written: list[pa.Table] = []
        updated = inserted = 0
        if upsert is not None:
            assert stored is not None
            live = stored
            if gone:
                removed = pa.array(np.concatenate(gone))
                live = stored.filter(pc.invert(pc.is_in(stored.column(ROWADDR), removed)))
            done = _upsert(live, upsert, change, read, constants, written)
            updated, inserted = done.updated, done.inserted
            if len(done.replaced):
                gone.append(_addresses(live)[done.replaced])
        written.extend(change.appends)
        new_rows = _conformed(K.concat([t for t in written if t.num_rows]), write_schema)
        addresses = np.unique(np.concatenate(gone)) if gone else np.zeros(0, np.uint64)
        if not len(addresses) and new_rows is None:
            return Applied(ds.version, ds.count_rows(), updated, inserted, 0, changed=False)
        added = new_rows.num_rows if new_rows is not None else 0
        expected = ds.count_rows() - len(addresses) + added
        found = None
        if task.stats is not None:  # the rows kept are known by bounds, the new ones exactly
            found = task.stats.after_removal(expected - added)
            if new_rows is not None:
                found = found.union(stats.of_table(new_rows, schema))
        if expected == 0:  # nothing left: the table is deregistered, no version needed
            return Applied(ds.version, 0, updated, inserted, deleted)
        changed_fragments: list[FragmentMetadata] = []
        removed_ids: list[int] = []
        for fragment_id, offsets in _by_fragment(addresses):
            meta = _delete_rows(ds, fragment_id, offsets)
            if meta is None:
                removed_ids.append(fragment_id)
            else:
                changed_fragments.append(meta)
        new_fragments: list[FragmentMetadata] = []
        if new_rows is not None:
            new_fragments = self._write(task.uri, new_rows, write_schema, ds)
        op: Any
        if changed_fragments or removed_ids:
            op = LanceOperation.Update(
                removed_fragment_ids=removed_ids,
                updated_fragments=changed_fragments,
                new_fragments=new_fragments,
            )
        else:
            op = LanceOperation.Append(new_fragments)
        new = self._commit_on(task.uri, ds, op, removed_ids, len(new_fragments), expected)
        return Applied(new.version, expected, updated, inserted, deleted, stats=found)

    def _apply_rewrite(
        self, task: ScanTask, ds: lance.LanceDataset, change: TableEdit, schema: pa.Schema
    ) -> Applied:
        """The change computed in memory over the table's rows read in the namespace schema
        (tables of an older layout, or filters only DataFusion evaluates), written as one
        ``Overwrite`` built on the pinned version."""
        plain, write_schema = self.schemas(schema)
        batches = list(iter_task_batches(task, schema, None, None, self.opts))
        rows = pa.Table.from_batches(batches, schema=plain)
        before = rows.num_rows
        if change.delete_filter is not None:
            rows = K.where(rows, f"({change.delete_filter}) IS NOT TRUE")
        on = list(change.on)
        doomed = K.concat(change.delete_keys)
        if doomed is not None and doomed.num_rows:
            rows = K.anti(rows, doomed, on)
        deleted = before - rows.num_rows
        written: list[pa.Table] = []
        updated = inserted = 0
        upsert = change.upsert
        if upsert is not None and upsert.num_rows and (change.update or change.insert):
            done = _upsert(rows.select(on), upsert.cast(plain), change, on, {}, written)
            updated, inserted = done.updated, done.inserted
            if len(done.replaced):
                keep = np.ones(rows.num_rows, dtype=bool)
                keep[done.replaced] = False
                rows = rows.filter(pa.array(keep))
        parts = [rows, *(t.cast(plain) for t in written), *(a.cast(plain) for a in change.appends)]
        out = _conformed(pa.concat_tables(parts), write_schema)
        if out is None:  # nothing left: the table is deregistered, no version needed
            return Applied(ds.version, 0, updated, inserted, deleted)
        fragments = self._write(task.uri, out, write_schema, ds)
        op = LanceOperation.Overwrite(write_schema, fragments)
        new = self._commit(task.uri, op, self._detached(task.uri, ds).version)
        found = stats.of_table(out, schema, data_bytes(fragments))
        return Applied(new.version, out.num_rows, updated, inserted, deleted, stats=found)

    # -- new tables --------------------------------------------------------------------------
    def create(self, location: str, rows: pa.Table) -> int:
        """A new partition table at ``location`` holding ``rows`` (written with the write
        schema); its version. Made once per location and content."""
        known = self._created.get(location)
        if known is not None and known[0].equals(rows):
            return known[1]
        self.misses += 1
        uri = storage.table_uri(self.root, location)
        ds = tv.create(uri, rows, rows.schema, self.opts, tuning().max_rows_per_file)
        _recent.put((uri, ds.version, _options_key(self.opts)), ds)
        version = self._indexed(uri, int(ds.version), location)
        self._created[location] = (rows, version)
        return version

    # -- Lance commits ---------------------------------------------------------------------------
    def _write(
        self, uri: str, rows: pa.Table, write_schema: pa.Schema, ds: lance.LanceDataset
    ) -> list[FragmentMetadata]:
        fragments: list[FragmentMetadata] = write_fragments(
            rows,
            uri,
            schema=write_schema,
            mode="overwrite",  # fragments only; no dataset is opened or changed
            max_rows_per_file=tuning().max_rows_per_file,
            data_storage_version=ds.data_storage_version,
            storage_options=self.opts,
        )
        return fragments

    def _commit(self, uri: str, op: Any, base: int) -> lance.LanceDataset:
        return self._kept(uri, tv.commit(uri, op, base, self.opts))

    def _kept(self, uri: str, ds: lance.LanceDataset) -> lance.LanceDataset:
        _recent.put((uri, ds.version, _options_key(self.opts)), ds)
        return ds

    def _detached(self, uri: str, ds: lance.LanceDataset) -> lance.LanceDataset:
        """A detached version with exactly ``ds``'s content."""
        return self._kept(uri, tv.detached_copy(uri, ds, self.opts))

    def _commit_on(
        self,
        uri: str,
        ds: lance.LanceDataset,
        op: Any,
        removed_ids: list[int],
        new_fragments: int,
        rows: int,
    ) -> lance.LanceDataset:
        """``op`` committed as a detached version on exactly ``ds``'s content, checked to
        remove ``removed_ids``, add ``new_fragments`` and leave ``rows`` rows (see
        :func:`..table_version.commit_on`)."""
        check = tv.updated(ds, removed_ids, new_fragments, rows)
        return self._kept(uri, tv.commit_on(uri, ds, op, self.opts, check))


# the table versions this process made lately, open (a version never changes, so the next
# change of the table starts from the handle instead of reading its manifest again)
_recent: Lru[lance.LanceDataset] = Lru(RECENT_VERSIONS)


def _options_key(options: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((options or {}).items()))


@dataclass(frozen=True)
class _Upserted:
    """What an upsert writes: input rows written that matched / did not, and the stored rows
    (row numbers in the keys it was decided against) it replaces."""

    updated: int
    inserted: int
    replaced: np.ndarray


def _upsert(
    stored: pa.Table,
    upsert: pa.Table,
    change: TableEdit,
    on: list[str],
    constants: dict[str, Any],
    out: list[pa.Table],
) -> _Upserted:
    """Decide ``change``'s upsert against the live ``stored`` keys (columns ``on``; every
    stored row also holds ``constants``): append the rows to write to ``out`` (one per stored
    copy replaced, one per other row written)."""
    n = upsert.num_rows
    stored_rows, input_rows = _key_pairs(stored, upsert, on, constants, unique=True)
    here = np.zeros(n, dtype=bool)
    here[input_rows] = True
    elsewhere = change.elsewhere if change.elsewhere is not None else np.zeros(n, dtype=bool)
    matched = here | elsewhere
    write = (matched & change.update) | (~matched & change.insert)
    if change.update and len(input_rows):
        out.append(upsert.take(pa.array(input_rows)))
    rest = write & ~here
    if rest.any():
        out.append(upsert.filter(pa.array(rest)))
    return _Upserted(
        int((write & matched).sum()),
        int((write & ~matched).sum()),
        stored_rows if change.update else np.zeros(0, dtype=np.int64),
    )


def _key_pairs(
    stored: pa.Table, rows: pa.Table, on: list[str], constants: dict[str, Any], unique: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(stored row, ``rows`` row) pairs with equal keys, where the keys are ``on`` plus the
    ``constants`` every stored row holds (only ``rows`` holding them can match). ``unique``:
    the keys of ``rows`` are unique (else only the stored rows are exact, the other side is
    any matching row)."""
    candidates = None
    if constants:
        ok = np.ones(rows.num_rows, dtype=bool)
        for name, value in constants.items():
            col = rows.column(name)
            if value is None:
                ok[:] = False  # NULL keys never match
                break
            same = pc.equal(col, pa.scalar(value, col.type)).fill_null(False)
            ok &= same.to_numpy(zero_copy_only=False)
        if not ok.all():
            candidates = np.flatnonzero(ok)
            rows = rows.take(pa.array(candidates))
    if unique:
        stored_rows, input_rows = K.pairs(stored, rows.select(on), on)
    else:
        stored_rows = np.flatnonzero(K.member(stored.select(on), rows.select(on), on))
        input_rows = np.zeros(len(stored_rows), dtype=np.int64)
    if candidates is not None:
        input_rows = candidates[input_rows] if len(candidates) else input_rows
    return stored_rows, input_rows


def _addresses(table: pa.Table) -> np.ndarray:
    return cast(np.ndarray, table.column(ROWADDR).to_numpy()).astype(np.uint64, copy=False)


def _by_fragment(addresses: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Sorted row addresses grouped by fragment: (fragment id, row offsets)."""
    if not len(addresses):
        return []
    fragments = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = (addresses & _OFFSET_MASK).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, fragments[1:] != fragments[:-1]])
    ends = np.r_[starts[1:], len(fragments)]
    return [(int(fragments[s]), offsets[s:e]) for s, e in zip(starts, ends, strict=True)]


def _delete_rows(
    ds: lance.LanceDataset, fragment_id: int, offsets: np.ndarray
) -> FragmentMetadata | None:
    """The fragment's metadata with the rows at ``offsets`` deleted (None: no row left)."""
    fragment = ds.get_fragment(fragment_id)
    if fragment is None:
        raise WriteError(f"{ds.uri}: version {ds.version} has no fragment {fragment_id}")
    delete_rows = getattr(fragment, "delete_rows", None)
    if delete_rows is not None:
        deleted: FragmentMetadata | None = delete_rows(offsets.tolist())
        return deleted
    listed = ", ".join(str(int(o)) for o in offsets)  # Lance without delete_rows
    return fragment.delete(f"_rowoffset IN ({listed})")


def _conformed(rows: pa.Table | None, write_schema: pa.Schema) -> pa.Table | None:
    """``rows`` in the write schema (None when there are none)."""
    if rows is None or rows.num_rows == 0:
        return None
    if rows.schema.equals(write_schema, check_metadata=True):
        return rows
    return pa.Table.from_batches(
        [conform_for_write(b, write_schema) for b in rows.to_batches()], schema=write_schema
    )
