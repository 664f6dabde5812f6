"""Writing data into a partitioned namespace: split rows by the current spec, write each
partition's rows as a new version of its partition table, then register everything in one
``__manifest`` commit (until which readers see the previous state)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata, write_fragments
from lance.schema import LanceSchema

from . import storage
from .conform import (
    append_layout,
    check_write_schema,
    column_sources,
    conform_for_write,
    conform_to,
    same_layout,
    table_write_schema,
)
from .errors import (
    CommitConflictError,
    SchemaError,
    UnnamedPartitionError,
    VersionGoneError,
    WriteError,
)
from .manifest import (
    OVERWRITE_ALL,
    SEP,
    TABLE_NAME,
    ManifestEdit,
    ManifestSnapshot,
    ManifestStore,
    TableEntry,
    delete_empty_namespaces,
    missing_files,
    overwritten_ids,
    partition_field_columns,
    random_name,
    table_location,
)
from .ns_schema import dropped_names, full_schema
from .partition_constants import fill_constants, identity_constants
from .partitioner import Rows, SpecEvaluator
from .spec import PartitionSpec

WriteMode = Literal["append", "overwrite_partitions", "overwrite"]
WRITE_MODES: tuple[str, ...] = ("append", "overwrite_partitions", "overwrite")
WRITER_ID = "dagster-lance-partitioned"

# Buffered rows are flushed to fragments past these sizes (bounded memory for streamed input).
PARTITION_FLUSH_BYTES = 128 * 1024 * 1024
TOTAL_FLUSH_BYTES = 512 * 1024 * 1024
MAX_ROWS_PER_FILE = 1024 * 1024
SPLIT_CHUNK_ROWS = 1 << 20  # large batches are split in chunks of this many rows ...
SPLIT_THREADS = 4  # ... on up to this many threads (bounded by the CPU count)
TABLE_WRITE_THREADS = 8  # partition tables written and committed concurrently
DETACHED_BIT = 1 << 63  # Lance marks detached versions with the top bit


@dataclass(frozen=True)
class PartitionWrite:
    """What a write did to one partition."""

    object_id: str
    location: str
    values: dict[str, Any]
    rows: int
    read_version: int
    created: bool
    replaced: bool
    bytes_written: int = 0  # size of the data files this write added to the table


@dataclass(frozen=True)
class WriteResult:
    """The outcome of one write: the manifest version that made it visible and each partition."""

    manifest_version: int
    spec_id: int
    mode: str
    partitions: tuple[PartitionWrite, ...]
    removed: tuple[str, ...] = ()
    committed: bool = True  # False: the write changed nothing, no manifest commit was made

    @property
    def rows_written(self) -> int:
        """Rows written across all partitions."""
        return sum(p.rows for p in self.partitions)

    @property
    def bytes_written(self) -> int:
        """Bytes of data files written across all partitions."""
        return sum(p.bytes_written for p in self.partitions)

    @property
    def read_versions(self) -> dict[str, int]:
        """Table object id -> the read_version now registered for it."""
        return {p.object_id: p.read_version for p in self.partitions}


@dataclass
class _Pending:
    """One partition's buffered rows and written fragments during a write."""

    key: tuple[Any, ...]
    existing: TableEntry | None
    path: list[str]  # partition namespace names, one per spec field
    location: str
    batches: list[Rows] = field(default_factory=list)
    buffered_bytes: int = 0
    rows: int = 0
    fragments: list[FragmentMetadata] = field(default_factory=list)
    version: int | None = None
    # the schema ``fragments`` were written with (None: the write schema) and, for appends to
    # an existing table, that table's data storage version
    layout: pa.Schema | None = None
    storage_version: str | None = None
    bytes_written: int = 0
    data_files: list[str] = field(default_factory=list)  # written by this write, table-relative

    @property
    def object_id(self) -> str:
        return SEP.join([*self.path, TABLE_NAME])


def as_reader(data: Any) -> pa.RecordBatchReader:
    """A RecordBatchReader over a Table, RecordBatch, reader or Arrow C stream object."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    raise TypeError(
        f"cannot write {type(data).__name__}: pass a pyarrow Table, RecordBatch, "
        "RecordBatchReader or an object with __arrow_c_stream__"
    )


class PartitionWriter:
    """One write into a partitioned namespace, from a base manifest snapshot."""

    def __init__(
        self,
        store: ManifestStore,
        base: ManifestSnapshot,
        schema: pa.Schema,
        spec: PartitionSpec,
        mode: str,
        commit_properties: dict[str, str] | None = None,
        before_commit: Callable[[list[_Pending]], None] | None = None,
        partitions: Iterable[Mapping[str, Any]] | None = None,
    ) -> None:
        if mode not in WRITE_MODES:
            raise WriteError(f"unknown write mode {mode!r} (use one of {', '.join(WRITE_MODES)})")
        self.store = store
        self.base = base
        self.schema = schema
        # no field-level ids (Lance drops them); dlp:field_ids in the schema metadata instead
        self.write_schema = table_write_schema(schema)
        self.dropped = _dropped(base)
        self.spec = spec
        self.mode = mode
        self.commit_properties = dict(commit_properties or {})
        self.before_commit = before_commit
        self.allowed = None if partitions is None else self._keys(partitions)
        # registered tables and partition namespaces of the base version, looked up as keys
        # arrive (a large manifest is queried for them, never read whole)
        self._index: dict[tuple[Any, ...], TableEntry] = {}
        self._ns_ids: dict[tuple[int, tuple[Any, ...]], str] = {}
        self._resolved: set[tuple[Any, ...]] = set()
        self._pending: dict[tuple[Any, ...], _Pending] = {}
        self._new_names: dict[tuple[Any, ...], str] = {}  # prefix -> name chosen by this write
        self._relocations: dict[tuple[tuple[Any, ...], str], tuple[str, int]] = {}
        self._buffered = 0

    # -- data ---------------------------------------------------------------------------------
    def _keys(self, partitions: Iterable[Mapping[str, Any]]) -> set[tuple[Any, ...]]:
        """Partition keys (values in spec order, typed like the manifest) of ``partitions``,
        each a mapping of field id -> value of the current spec."""
        ids = [f.field_id for f in self.spec.fields]
        keys = set()
        for values in partitions:
            unknown = sorted(set(values) - set(ids))
            missing = [fid for fid in ids if fid not in values]
            if unknown or missing:
                raise WriteError(
                    f"partition {dict(values)} does not name the fields of spec "
                    f"v{self.spec.spec_id} ({', '.join(ids)}): "
                    f"unknown {unknown}, missing {missing}"
                )
            key = []
            for f in self.spec.fields:
                value = values[f.field_id]
                if value is not None:
                    try:
                        value = pa.scalar(value).cast(f.result_type).as_py()
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                        raise WriteError(
                            f"partition value {value!r} of field {f.field_id!r} is not a "
                            f"{f.result_type}"
                        ) from None
                key.append(value)
            keys.add(tuple(key))
        return keys

    def empty_named_partitions(self) -> None:
        """With ``overwrite_partitions``, named partitions that got no rows become empty: an
        existing one is replaced by nothing, a new one is registered as an empty table (so a
        write of N named partitions always leaves N partitions)."""
        if self.allowed is not None and self.mode == "overwrite_partitions":
            self._resolve(self.allowed - set(self._pending))
            for key in sorted(self.allowed - set(self._pending), key=repr):
                self._pending[key] = self._new_pending(key)

    def write(self, data: Any) -> WriteResult:
        """Write ``data`` and commit; nothing is visible unless this returns."""
        self.ingest(data)
        self.empty_named_partitions()
        if not self._pending and not (
            self.mode == "overwrite" and sum(self.base.table_counts().values())
        ):
            # nothing to write and nothing to deregister: no commit
            return WriteResult(self.base.version, self.spec.spec_id, self.mode, (), (), False)
        self._finish_tables()
        if self.before_commit is not None:
            self.before_commit(list(self._pending.values()))
        return self._commit_manifest()

    def ingest(self, data: Any) -> None:
        """Split ``data`` by partition into buffers (large ones flushed to fragments);
        nothing is committed."""
        reader = as_reader(data)
        check_write_schema(reader.schema, self.write_schema, self.dropped)
        evaluator = SpecEvaluator(self.spec, self.schema)
        workers = max(1, min(SPLIT_THREADS, os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for batch in reader:
                # rows of the previous batch are gathered now, so buffers never keep more
                # than one input batch alive
                self._gather_lazy(pool)
                batch = conform_for_write(batch, self.write_schema)
                chunks = [
                    batch.slice(start, SPLIT_CHUNK_ROWS)
                    for start in range(0, batch.num_rows, SPLIT_CHUNK_ROWS)
                ]
                for parts in pool.map(lambda c: list(evaluator.split(c)), chunks):
                    self._resolve({key for key, _ in parts if key not in self._pending})
                    for key, part in parts:
                        self._add(key, part)

    def _add(self, key: tuple[Any, ...], part: Rows) -> None:
        if self.allowed is not None and key not in self.allowed:
            values = dict(zip((f.field_id for f in self.spec.fields), key, strict=True))
            sample = part.materialize().slice(0, 1).to_pylist()[0]
            raise UnnamedPartitionError(
                f"a row belongs to partition {values}, which this write may not touch "
                f"(it names {len(self.allowed)} partition(s)); nothing was committed. "
                f"Sample row: {sample}",
                values,
                sample,
            )
        pending = self._pending.get(key)
        if pending is None:
            pending = self._new_pending(key)
            self._pending[key] = pending
        pending.batches.append(part)
        pending.rows += part.num_rows
        pending.buffered_bytes += part.nbytes
        self._buffered += part.nbytes
        if pending.buffered_bytes >= PARTITION_FLUSH_BYTES:
            self._flush(pending)
        while self._buffered >= TOTAL_FLUSH_BYTES:
            self._flush(max(self._pending.values(), key=lambda p: p.buffered_bytes))

    def _gather_lazy(self, pool: ThreadPoolExecutor) -> None:
        """Replace buffered row selections by gathered batches of their own."""

        def gather(pending: _Pending) -> None:
            pending.batches = [Rows(rows.materialize()) for rows in pending.batches]

        lazy = [p for p in self._pending.values() if any(r.indices is not None for r in p.batches)]
        for future in [pool.submit(gather, p) for p in lazy]:
            future.result()

    def _resolve(self, keys: set[tuple[Any, ...]]) -> None:
        """Look up, in the base version, the tables and partition namespaces of new ``keys``
        (one query for all of them)."""
        todo = keys - self._resolved
        if not todo:
            return
        self._index.update(self.base.find_tables(self.spec, todo))
        prefixes = {
            k[:level] for k in todo if k not in self._index for level in range(1, len(k) + 1)
        }
        self._ns_ids.update(self.base.find_namespaces(self.spec, prefixes))
        self._resolved |= todo

    def _new_pending(self, key: tuple[Any, ...]) -> _Pending:
        self._resolve({key})
        existing = self._index.get(key)
        if existing is not None:
            storage.check_location(existing.location, existing.object_id)
            path = existing.object_id.split(SEP)[:-1]
            if existing.read_branch is not None:
                raise WriteError(
                    f"partition {existing.object_id} reads branch {existing.read_branch!r}; "
                    "writing to branch-pinned partitions is not supported"
                )
            return _Pending(key, existing, path, existing.location)
        path = [self.spec.namespace]
        for level in range(1, len(key) + 1):
            known = self._ns_ids.get((self.spec.spec_id, key[:level]))
            if known is not None:
                path.append(known.split(SEP)[-1])
            else:
                path.append(self._namespace_name(key[:level]))
        oid = SEP.join([*path, TABLE_NAME])
        return _Pending(key, None, path, self._new_location(oid, key))

    def _namespace_name(self, prefix: tuple[Any, ...]) -> str:
        """The name of a partition namespace this write creates (shared by its partitions)."""
        return self._new_names.setdefault(prefix, random_name())

    def _new_location(self, object_id: str, key: tuple[Any, ...]) -> str:
        """The directory of a partition table this write creates."""
        return table_location(object_id)

    def _uri(self, pending: _Pending) -> str:
        return storage.table_uri(self.store.root, pending.location, pending.object_id)

    def _flush(self, pending: _Pending) -> None:
        if not pending.batches:
            return
        table = pa.Table.from_batches(
            [rows.materialize() for rows in pending.batches], schema=self.write_schema
        )
        if pending.existing is not None and not self._replaces(pending):
            # appends: fragments in the layout the table takes (see _append_layout), with field
            # ids numbered from that layout as the table's are
            layout, version = self._append_layout(pending)
            pending.fragments.extend(
                self._write_layout(
                    conform_to(table, layout, column_sources(self.write_schema, layout)),
                    self._uri(pending),
                    layout,
                    version,
                )
            )
        else:
            # replacements take the write schema's ids; new tables are created by the write
            pending.fragments.extend(
                write_fragments(
                    table,
                    self._uri(pending),
                    schema=self.write_schema,
                    mode="create" if pending.existing is None else "overwrite",
                    max_rows_per_file=MAX_ROWS_PER_FILE,
                    storage_options=self.store.storage_options,
                )
            )
        self._buffered -= pending.buffered_bytes
        pending.batches.clear()
        pending.buffered_bytes = 0

    def _replaces(self, pending: _Pending) -> bool:
        """Whether this write replaces ``pending``'s partition (else appends to it)."""
        return self.mode in ("overwrite_partitions", "overwrite")

    def _append_layout(self, pending: _Pending) -> tuple[pa.Schema, str]:
        """The layout (and storage version) of ``pending``'s appended fragments, fixed at the
        first flush from the table at its registered version."""
        if pending.layout is None or pending.storage_version is None:
            assert pending.existing is not None
            ds = self._open(pending.existing)
            pending.layout = append_layout(ds.schema, self.write_schema)
            pending.storage_version = ds.data_storage_version
        return pending.layout, pending.storage_version

    def _open(self, entry: TableEntry) -> lance.LanceDataset:
        """A registered partition table at its registered version."""
        uri = storage.table_uri(self.store.root, entry.location, entry.object_id)
        version = self._base_version(entry)
        return lance.dataset(uri, version=version, storage_options=self.store.storage_options)

    def _write_layout(
        self,
        data: pa.Table | pa.RecordBatchReader,
        uri: str,
        layout: pa.Schema,
        storage_version: str,
    ) -> list[FragmentMetadata]:
        """Fragments of ``data`` (shaped ``layout``) with field ids numbered from ``layout``."""
        return write_fragments(
            data,
            uri,
            schema=layout,
            mode="overwrite",
            max_rows_per_file=MAX_ROWS_PER_FILE,
            data_storage_version=storage_version,
            storage_options=self.store.storage_options,
        )

    # -- partition tables ---------------------------------------------------------------------
    def _base_version(self, entry: TableEntry) -> int:
        uri = storage.table_uri(self.store.root, entry.location, entry.object_id)
        storage.check_ref_name(entry.read_tag, entry.object_id, "read_tag")
        if entry.read_version is not None:
            return int(entry.read_version)
        version: int | str | None = entry.read_tag
        ds = lance.dataset(uri, version=version, storage_options=self.store.storage_options)
        return ds.version

    def _commit_table(self, pending: _Pending, onto: TableEntry | None, replace: bool) -> int:
        """Commit ``pending``'s fragments as a new version of its table; return the version."""
        uri = (
            storage.table_uri(self.store.root, onto.location, onto.object_id)
            if onto
            else self._uri(pending)
        )
        opts = self.store.storage_options
        if onto is None:
            op = LanceOperation.Overwrite(self.write_schema, pending.fragments)
            return lance.LanceDataset.commit(uri, op, storage_options=opts).version
        base = self._base_version(onto)
        if not replace:
            return self._append_into(pending, uri, self._detached_base(uri, base))
        op = LanceOperation.Overwrite(self.write_schema, pending.fragments)
        ds = lance.LanceDataset.commit(
            uri, op, read_version=base, detached=True, storage_options=opts
        )
        return ds.version

    def _append_into(self, pending: _Pending, uri: str, base: int) -> int:
        """Append ``pending``'s rows to the table at detached version ``base``; return the new
        detached version.

        When the table's schema is older than the write's (columns added, renamed, promoted or
        dropped since it was written), it first takes the append layout: metadata-only (a Lance
        Project: renames, added NULL columns, relaxed nullability) when its columns keep their
        positions and types, else by rewriting its rows in the new layout together with ours."""
        opts = self.store.storage_options
        ds = lance.dataset(uri, version=base, storage_options=opts)
        layout = append_layout(ds.schema, self.write_schema)
        version = ds.data_storage_version
        fragments = pending.fragments
        if pending.layout is None or not (
            same_layout(layout, pending.layout) and version == pending.storage_version
        ):
            # the table changed under us (a concurrent commit): re-lay our rows out for it
            fragments = self._write_layout(self._our_rows(pending, layout), uri, layout, version)
        values = dict(zip((f.field_id for f in self.spec.fields), pending.key, strict=True))
        constants = identity_constants(self.spec, self.schema, values)
        if any(v is not None and n not in ds.schema.names for n, v in constants.items()):
            # an imported (Hive) table lacks its key columns: store them once, with our rows
            return self._rewrite_with(ds, layout, fragments, uri, constants)
        if not same_layout(ds.schema, layout):
            evolved = _project(ds, layout, uri, opts)
            if evolved is None:
                return self._rewrite_with(ds, layout, fragments, uri)
            base = evolved
        ds = lance.LanceDataset.commit(
            uri,
            LanceOperation.Append(fragments),
            read_version=base,
            detached=True,
            storage_options=opts,
        )
        return ds.version

    def _rewrite_with(
        self,
        ds: lance.LanceDataset,
        layout: pa.Schema,
        fragments: list[FragmentMetadata],
        uri: str,
        constants: dict[str, Any] | None = None,
    ) -> int:
        """A detached version holding the table's rows re-written in ``layout`` (identity
        partition columns it lacks filled from ``constants``) plus ``fragments``."""

        sources = column_sources(ds.schema, layout)

        def batches() -> Iterator[pa.RecordBatch]:
            """The table's batches in ``layout``."""
            for batch in ds.to_batches():
                table = conform_to(batch, layout, sources)
                if constants:
                    table = fill_constants(table, constants, layout)
                yield from table.to_batches()

        reader = pa.RecordBatchReader.from_batches(layout, batches())
        carried = self._write_layout(reader, uri, layout, ds.data_storage_version)
        op = LanceOperation.Overwrite(layout, [*carried, *fragments])
        new = lance.LanceDataset.commit(
            uri,
            op,
            read_version=ds.version,
            detached=True,
            storage_options=self.store.storage_options,
        )
        return new.version

    def _create_table(self, pending: _Pending) -> int:
        """Create a new partition table holding all of ``pending``'s rows in one call."""
        table = pa.Table.from_batches(
            [rows.materialize() for rows in pending.batches], schema=self.write_schema
        )
        ds = lance.write_dataset(
            table,
            self._uri(pending),
            schema=self.write_schema,
            mode="create",
            max_rows_per_file=MAX_ROWS_PER_FILE,
            storage_options=self.store.storage_options,
        )
        self._buffered -= pending.buffered_bytes
        pending.batches.clear()
        pending.buffered_bytes = 0
        fragments = [frag.metadata for frag in ds.get_fragments()]
        pending.bytes_written = _data_bytes(fragments)
        pending.data_files = _data_files(fragments)
        return ds.version

    def _detached_base(self, uri: str, base: int) -> int:
        """A detached version with exactly ``base``'s content.

        Lance rebases a commit onto later versions of the main line, which may hold data no
        manifest registered; a detached base has no later versions, so an append lands on
        exactly the registered content."""
        if base >= DETACHED_BIT:
            return base
        opts = self.store.storage_options
        latest = lance.dataset(uri, storage_options=opts).version
        restored = lance.LanceDataset.commit(
            uri,
            LanceOperation.Restore(base),
            read_version=latest,
            detached=True,
            storage_options=opts,
        )
        return restored.version

    def _finish_tables(self) -> None:
        """Flush what is buffered and commit every partition table, several at a time."""

        def finish(pending: _Pending) -> None:
            if pending.existing is None and not pending.fragments:
                pending.version = self._create_table(pending)
                return
            self._flush(pending)
            pending.bytes_written = _data_bytes(pending.fragments)
            pending.data_files = _data_files(pending.fragments)
            pending.version = self._commit_table(
                pending, pending.existing, replace=self._replaces(pending)
            )

        pendings = list(self._pending.values())
        if len(pendings) <= 1:
            for p in pendings:
                finish(p)
            return
        with ThreadPoolExecutor(max_workers=min(TABLE_WRITE_THREADS, len(pendings))) as pool:
            for future in [pool.submit(finish, p) for p in pendings]:
                future.result()

    # -- manifest -----------------------------------------------------------------------------
    def _commit_manifest(self) -> WriteResult:
        replaced: list[str] = []
        removed: list[str] = []
        results: list[PartitionWrite] = []

        def plan(snap: ManifestSnapshot) -> ManifestEdit:
            replaced.clear()
            removed.clear()
            results.clear()
            theirs = self._overwritten_since(snap)
            if (
                self.mode == "overwrite"
                and snap.version != self.base.version
                and (theirs is None or theirs)
            ):
                raise CommitConflictError(
                    f"{self.store.root}: a concurrent commit replaced partitions while this "
                    "write was replacing the whole table; retry the write"
                )
            if snap.metadata.get(self.spec.key) != self.base.metadata.get(self.spec.key):
                raise CommitConflictError(
                    f"{self.store.root}: partition spec v{self.spec.spec_id} changed while this "
                    "write was running (e.g. an upgrade); retry the write"
                )
            if snap is self.base:
                index, ns_ids = self._index, dict(self._ns_ids)
            else:
                keys = set(self._pending)
                index = snap.find_tables(self.spec, keys)
                prefixes = {k[:n] for k in keys for n in range(1, len(k) + 1)}
                ns_ids = dict(snap.find_namespaces(self.spec, prefixes))
            # the spec's manifest columns and v<N> namespace come with its first write
            edit = ManifestEdit(new_columns=partition_field_columns([self.spec]))
            edit.upserts[self.spec.namespace] = {"object_type": "namespace"}
            for pending in self._pending.values():
                results.append(self._plan_partition(pending, snap, index, ns_ids, theirs, edit))
            if self.mode == "overwrite":
                removed.extend(self._deregister_rest(snap, edit))
            elif self.mode == "overwrite_partitions":
                removed.extend(self._deregister_covered(snap, edit))
            replaced.extend(p.object_id for p in results if p.replaced)
            edit.properties = {
                "operation": "write",
                "mode": self.mode,
                "writer": WRITER_ID,
                "overwritten": json.dumps(
                    OVERWRITE_ALL if self.mode == "overwrite" else sorted(replaced)
                ),
                **self.commit_properties,
            }
            return edit

        def load(ds: lance.LanceDataset) -> ManifestSnapshot:
            # a manifest version never changes: without a concurrent commit, reuse the base
            if ds.version == self.base.version:
                return self.base
            return ManifestSnapshot(ds, list(self.base.specs.values()))

        self._check_data_files()
        snap = self.store.commit(load, plan)
        if self.spec.draft and snap.metadata.get(self.spec.key) != self.base.metadata.get(
            self.spec.key
        ):
            # an upgrade switched the draft specs while this commit was in flight, and Lance
            # merged the two: give this write's rows their current-shape columns too
            from .compat import refill_after_switch

            refill_after_switch(self.store, self.base.specs, self.schema)
        return WriteResult(
            manifest_version=snap.version,
            spec_id=self.spec.spec_id,
            mode=self.mode,
            partitions=tuple(results),
            removed=tuple(removed),
        )

    def _check_data_files(self) -> None:
        """Raise :class:`VersionGoneError` when a data file this write made is gone (a vacuum
        with a grace period shorter than the write removed it as uncommitted)."""
        gone = missing_files(
            self.store.root,
            [(p.object_id, p.location, p.data_files) for p in self._pending.values()],
            self.store.storage_options,
        )
        if gone:
            listed = ", ".join(f"{oid} ({path})" for oid, path in gone[:5])
            raise VersionGoneError(
                f"{self.store.root}: {len(gone)} data file(s) this write made are gone before "
                f"its manifest commit: {listed}. A vacuum with a grace period shorter than the "
                "write removed them; nothing of the write is visible, retry it"
            )

    def _overwritten_since(self, snap: ManifestSnapshot) -> set[str] | None:
        """Table ids replaced by commits after the base version (None: unknown / everything)."""
        out: set[str] = set()
        for version in range(self.base.version + 1, snap.version + 1):
            ids = overwritten_ids(self.store.commit_properties(version, via=snap.dataset))
            if ids is None:
                return None
            out |= ids
        return out

    def _plan_partition(
        self,
        pending: _Pending,
        snap: ManifestSnapshot,
        index: dict[tuple[Any, ...], TableEntry],
        ns_ids: dict[tuple[int, tuple[Any, ...]], str],
        theirs: set[str] | None,
        edit: ManifestEdit,
    ) -> PartitionWrite:
        """Register one written partition in ``edit``, rebasing onto ``snap`` when concurrent
        commits changed the partition since this write's base manifest version."""
        replace = self._replaces(pending)
        values = dict(zip((f.field_id for f in self.spec.fields), pending.key, strict=True))
        current = index.get(pending.key)
        existing = pending.existing
        version = pending.version
        assert version is not None

        def conflict(what: str, oid: str) -> CommitConflictError:
            return CommitConflictError(
                f"partition {values} {what} by a concurrent commit while this write replaced it; "
                "nothing of this write is visible, retry it",
                [oid],
            )

        if existing is not None and current is not None and current.object_id == existing.object_id:
            if current.read_version != existing.read_version:
                if replace and (theirs is None or current.object_id in theirs):
                    raise conflict("was replaced", current.object_id)
                if not replace:  # rebase the append onto the concurrently committed version
                    version = self._commit_table(pending, current, replace=False)
            return self._register_existing(pending, current, version, values, edit)
        if existing is not None:  # our table was deregistered or replaced concurrently
            if replace:
                raise conflict("was deregistered or replaced", existing.object_id)
            if current is not None:
                version = self._copy_into(pending, current, replace=False)
                return self._register_existing(pending, current, version, values, edit)
            return self._register_new(pending, ns_ids, values, edit, copy=True)
        if current is not None:  # the same new partition was created concurrently
            if replace and (theirs is None or current.object_id in theirs):
                raise conflict("was created", current.object_id)
            version = self._copy_into(pending, current, replace)
            return self._register_existing(pending, current, version, values, edit)
        return self._register_new(pending, ns_ids, values, edit, copy=False)

    def _register_existing(
        self,
        pending: _Pending,
        target: TableEntry,
        version: int,
        values: dict[str, Any],
        edit: ManifestEdit,
    ) -> PartitionWrite:
        edit.upserts[target.object_id] = {"read_version": version, "location": target.location}
        return PartitionWrite(
            target.object_id,
            target.location,
            values,
            pending.rows,
            version,
            created=False,
            replaced=self._replaces(pending),
            bytes_written=pending.bytes_written,
        )

    def _register_new(
        self,
        pending: _Pending,
        ns_ids: dict[tuple[int, tuple[Any, ...]], str],
        values: dict[str, Any],
        edit: ManifestEdit,
        copy: bool,
    ) -> PartitionWrite:
        """Register namespaces and a table for a partition the latest manifest does not have."""
        path = [self.spec.namespace]
        row_values: dict[str, Any] = {}
        for level, f in enumerate(self.spec.fields, start=1):
            row_values[f.column] = pending.key[level - 1]
            prefix = pending.key[:level]
            known = ns_ids.get((self.spec.spec_id, prefix))
            if known is None:
                known = SEP.join([*path, pending.path[level]])
                edit.upserts[known] = {"object_type": "namespace", "metadata": "{}", **row_values}
                ns_ids[(self.spec.spec_id, prefix)] = known
            path = known.split(SEP)
        oid = SEP.join([*path, TABLE_NAME])
        location, version = pending.location, pending.version
        if copy or oid != pending.object_id:
            # the rows must live in a table directory named after the registered object id
            location, version = self._relocated(pending, oid)
        assert version is not None
        edit.upserts[oid] = {
            "object_type": "table",
            "location": location,
            "metadata": "{}",
            "read_version": version,
            **row_values,
        }
        return PartitionWrite(
            oid,
            location,
            values,
            pending.rows,
            version,
            created=True,
            replaced=self._replaces(pending),
            bytes_written=pending.bytes_written,
        )

    def _our_rows(self, pending: _Pending, shape: pa.Schema) -> pa.Table:
        """The rows this write put in ``pending``'s table (without the table's earlier rows),
        shaped ``shape``."""
        written = pending.layout or self.write_schema
        return conform_to(self._stored_rows(pending), shape, column_sources(written, shape))

    def _stored_rows(self, pending: _Pending) -> pa.Table:
        """The rows this write put in ``pending``'s table, as its fragments hold them."""
        opts = self.store.storage_options
        if pending.existing is None:
            assert pending.version is not None
            return lance.dataset(
                self._uri(pending), version=pending.version, storage_options=opts
            ).to_table()
        only_ours = lance.LanceDataset.commit(
            self._uri(pending),
            LanceOperation.Overwrite(pending.layout or self.write_schema, pending.fragments),
            read_version=self._base_version(pending.existing),
            detached=True,
            storage_options=opts,
        )
        return only_ours.to_table()

    def _relocated(self, pending: _Pending, oid: str) -> tuple[str, int]:
        """Our rows as a new table whose directory is named for ``oid`` (cached across retries)."""
        cached = self._relocations.get((pending.key, oid))
        if cached is None:
            location = table_location(oid)
            uri = storage.join(self.store.root, location)
            ds = lance.write_dataset(
                self._our_rows(pending, self.write_schema),
                uri,
                schema=self.write_schema,
                storage_options=self.store.storage_options,
            )
            cached = self._relocations[(pending.key, oid)] = (location, ds.version)
        return cached

    def _copy_into(self, pending: _Pending, target: TableEntry, replace: bool) -> int:
        """Re-write our rows into a partition table that another writer registered."""
        uri = storage.table_uri(self.store.root, target.location, target.object_id)
        frags = write_fragments(
            self._our_rows(pending, self.write_schema),
            uri,
            schema=self.write_schema,
            mode="overwrite",
            storage_options=self.store.storage_options,
        )
        # appends re-lay these out for the target table if it needs another layout
        copy = _Pending(pending.key, target, pending.path, target.location, fragments=frags)
        return self._commit_table(copy, target, replace)

    def _deregister_covered(self, snap: ManifestSnapshot, edit: ManifestEdit) -> list[str]:
        """For ``overwrite_partitions``: partitions of older spec versions that lie wholly inside
        a replaced partition (see :func:`covering_keys`) are deregistered in the same commit;
        others are kept."""
        replaced = set(self._pending)
        removed = []
        for spec_id, spec in snap.specs.items():
            if spec_id == self.spec.spec_id:
                continue
            tables = [t for t in snap.tables() if t.spec_id == spec_id]
            keys = covering_keys(self.spec, spec, self.schema, [t.values for t in tables])
            if keys is not None:
                removed += [t.object_id for t, k in zip(tables, keys, strict=True) if k in replaced]
        if removed:
            edit.deletes.update(removed)
            delete_empty_namespaces(snap, edit)
        return removed

    def _deregister_rest(self, snap: ManifestSnapshot, edit: ManifestEdit) -> list[str]:
        """For ``overwrite``: remove every table (of any spec) this write did not write, and
        partition namespaces left with no table."""
        kept = {oid for oid, cols in edit.upserts.items() if cols.get("object_type") == "table"}
        kept |= {oid for oid in edit.upserts if oid.endswith(SEP + TABLE_NAME)}
        removed = [t.object_id for t in snap.tables() if t.object_id not in kept]
        edit.deletes.update(removed)
        delete_empty_namespaces(snap, edit)
        return removed


def covering_keys(
    spec: PartitionSpec, old: PartitionSpec, schema: pa.Schema, rows: list[tuple[Any, ...]]
) -> list[tuple[Any, ...]] | None:
    """For partitions of ``old`` (their values), the key of the partition of ``spec`` each lies
    wholly inside; None when ``old`` partitions need not nest in ``spec`` partitions. A field
    nests when ``old`` has it with the same id, or has a finer time window of the same source
    that nests in it (daily inside monthly)."""
    from .spec import source_types
    from .windows import parse_window, window_values

    old_ids = [f.field_id for f in old.fields]
    columns: list[list[Any]] = []
    for f in spec.fields:
        if f.field_id in old_ids:
            i = old_ids.index(f.field_id)
            columns.append([r[i] for r in rows])
            continue
        types = source_types(f, schema)
        if len(types) != 1 or (window := parse_window(f.sql(types), types[0])) is None:
            return None
        for i, g in enumerate(old.fields):
            inner = None
            if g.source_ids == f.source_ids:
                inner = parse_window(g.sql(types), types[0])
            if inner is not None and inner.nests_in(window):
                starts = [None if r[i] is None else inner.start_value(r[i], types[0]) for r in rows]
                columns.append(window_values(window, types[0], starts) if rows else [])
                break
        else:
            return None
    return list(zip(*columns, strict=True)) if rows else []


def _data_files(fragments: Iterable[FragmentMetadata]) -> list[str]:
    """The data files of ``fragments``, relative to their table's directory."""
    return [f"data/{f.path}" for frag in fragments for f in frag.files]


def _data_bytes(fragments: Iterable[FragmentMetadata]) -> int:
    """Total size of the data files of ``fragments`` (0 where Lance did not record one)."""
    return sum(f.file_size_bytes or 0 for frag in fragments for f in frag.files)


def _dropped(base: ManifestSnapshot) -> set[str]:
    """Columns dropped from the namespace schema of ``base`` (writing them is an error)."""
    try:
        return dropped_names(full_schema(base.metadata))
    except SchemaError:
        return set()


def _lance_ids(fields: list[Any]) -> list[int]:
    """Lance field ids of ``fields`` and their children, depth first."""
    out: list[int] = []
    for f in fields:
        out.append(f.id())
        out.extend(_lance_ids(f.children()))
    return out


def _project(
    ds: lance.LanceDataset, layout: pa.Schema, uri: str, opts: dict[str, str] | None
) -> int | None:
    """A detached version of ``ds`` with schema ``layout`` changed in metadata only, or None
    when that is not possible (columns moved, types changed, or field ids not numbered as
    ``layout`` numbers them)."""
    current = ds.schema
    sources = column_sources(current, layout)
    if len(layout) < len(current) or any(
        sources[layout.field(i).name] != f.name or layout.field(i).type != f.type
        for i, f in enumerate(current)
    ):
        return None
    ids = _lance_ids(ds.lance_schema.fields())
    if ids != _lance_ids(LanceSchema.from_pyarrow(current).fields()):
        return None
    known = set(ids)
    for fragment in ds.get_fragments():
        for data_file in fragment.metadata.files:
            if not {i for i in data_file.fields if i >= 0} <= known:
                return None  # a file still holds a dropped field the new columns would take
    try:
        new = lance.LanceDataset.commit(
            uri,
            LanceOperation.Project(LanceSchema.from_pyarrow(layout)),
            read_version=ds.version,
            detached=True,
            storage_options=opts,
        )
    except (OSError, ValueError):
        return None
    return new.version
