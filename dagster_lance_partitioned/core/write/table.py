"""The table commit: writing one partition's rows as fragments and committing them as a new
(detached) version of its partition table, in the layout the table takes.

Every version a write makes is detached (Lance marks those with :data:`DETACHED_BIT`): it is
reachable only through the ``read_version`` the manifest commit registers, so a write that never
reaches that commit leaves no trace readers can see. Appends land on a detached copy of exactly
the registered version (see :meth:`TableWriter.detached_base`); when the table's schema is older
than the write's, the table first takes the append layout (see :meth:`TableWriter.append_into`).
The rebase helpers (:meth:`TableWriter.copy_into`, :meth:`TableWriter.relocated`) move a write's
rows when a concurrent manifest commit registered another table for its partition."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata, write_fragments
from lance.schema import LanceSchema

from .. import storage
from .. import table_version as tv
from ..concurrency import LOCAL_TABLE_THREADS
from ..manifest.layout import table_location
from ..manifest.snapshot import TableEntry
from ..manifest.store import ManifestStore
from ..partitioning.partition_constants import fill_constants, identity_constants
from ..partitioning.partition_spec import PartitionSpec
from ..schema.conform import append_layout, column_sources, conform_to, same_layout
from ..tuning import tuning
from . import ahead
from .pending import Key, PendingPartition


class TableWriter:
    """Writes and commits the partition tables of one write (``schema``: the namespace schema
    with field ids; ``write_schema``: what the rows are written with)."""

    def __init__(
        self,
        store: ManifestStore,
        spec: PartitionSpec,
        schema: pa.Schema,
        write_schema: pa.Schema,
    ) -> None:
        self.store = store
        self.spec = spec
        self.schema = schema
        self.write_schema = write_schema
        self._relocations: dict[tuple[Key, str], tuple[str, int]] = {}
        self._datasets: dict[tuple[str, int], lance.LanceDataset] = {}

    def dataset(self, uri: str, version: int) -> lance.LanceDataset:
        """The table at ``uri`` at ``version``, opened once per write: Lance writes fragments
        into, and commits detached versions on top of, exactly the version an open handle is
        at, without listing the table or reading its manifest again."""
        key = (uri, version)
        ds = self._datasets.get(key)
        if ds is None:
            ds = self._datasets[key] = tv.open_version(uri, version, self.store.storage_options)
        return ds

    def uri(self, pending: PendingPartition) -> str:
        """Where ``pending``'s table lives."""
        return storage.table_uri(self.store.root, pending.location, pending.object_id)

    def _entry_uri(self, entry: TableEntry) -> str:
        return storage.table_uri(self.store.root, entry.location, entry.object_id)

    # -- fragments ------------------------------------------------------------------------------
    def write_rows(self, pending: PendingPartition, table: pa.Table, replace: bool) -> None:
        """Write ``table`` (rows of the write schema) as more fragments of ``pending``."""
        if pending.existing is not None and not replace:
            # appends: fragments in the layout the table takes (see append_into), with field
            # ids numbered from that layout as the table's are
            layout, version = self.append_layout(pending)
            pending.fragments.extend(
                self.write_layout(
                    conform_to(table, layout, column_sources(self.write_schema, layout)),
                    self.open(pending.existing),
                    layout,
                    version,
                )
            )
        else:
            # replacements take the write schema's ids; new tables are created by the write
            target = self.uri(pending) if pending.existing is None else self.open(pending.existing)
            pending.fragments.extend(
                write_fragments(
                    table,
                    target,
                    schema=self.write_schema,
                    mode="create" if pending.existing is None else "overwrite",
                    max_rows_per_file=tuning().max_rows_per_file,
                    storage_options=self.store.storage_options,
                    session=_session_for(target),
                )
            )

    def prepare_ahead(
        self, pending: PendingPartition, table: pa.Table, replace: bool
    ) -> ahead.AheadFile:
        """The data file of ``pending``'s registered table that will hold ``table`` (rows of
        the write schema), written without opening the table, in the layout and storage version
        it most likely has (checked when it is committed: see :mod:`.ahead`); nothing is sent
        before :meth:`write_ahead`."""
        assert pending.existing is not None
        write = self.write_schema
        layout = write if replace else append_layout(write, write)
        rows = table if replace else conform_to(table, layout, column_sources(write, layout))
        pending.layout = None if replace else layout
        pending.ahead = rows
        return ahead.prepare(
            self._entry_uri(pending.existing), rows, layout, self.store.storage_options
        )

    def write_ahead(self, pending: PendingPartition, file: ahead.AheadFile) -> None:
        """Upload ``file`` (prepared for ``pending``) as a fragment of its table."""
        fragment, version = file.write()
        pending.fragments.append(fragment)
        pending.storage_version = version

    def _redo_ahead(
        self,
        pending: PendingPartition,
        uri: str,
        fragments: list[FragmentMetadata],
        layout: pa.Schema | None,
        version: str,
    ) -> None:
        """``pending``'s rows written ahead are re-written as ``fragments`` (in ``layout`` and
        ``version``, which the table takes): use those, and delete the files written ahead
        (never referenced by any version)."""
        stale = ahead.written_paths(pending.fragments)
        pending.fragments = fragments
        pending.layout = layout
        pending.storage_version = version
        pending.record_written(fragments)
        storage.delete_files(uri, stale, self.store.storage_options)

    def append_layout(self, pending: PendingPartition) -> tuple[pa.Schema, str]:
        """The layout (and storage version) of ``pending``'s appended fragments, fixed at the
        first flush from the table at its registered version."""
        if pending.layout is None or pending.storage_version is None:
            assert pending.existing is not None
            ds = self.open(pending.existing)
            pending.layout = append_layout(ds.schema, self.write_schema)
            pending.storage_version = ds.data_storage_version
        return pending.layout, pending.storage_version

    def write_layout(
        self,
        data: pa.Table | pa.RecordBatchReader,
        table: str | lance.LanceDataset,
        layout: pa.Schema,
        storage_version: str,
    ) -> list[FragmentMetadata]:
        """Fragments of ``data`` (shaped ``layout``) with field ids numbered from ``layout``,
        for ``table`` (a URI, or an open table: then nothing is read)."""
        return write_fragments(
            data,
            table,
            schema=layout,
            mode="overwrite",
            max_rows_per_file=tuning().max_rows_per_file,
            data_storage_version=storage_version,
            storage_options=self.store.storage_options,
            session=_session_for(table),
        )

    # -- versions -------------------------------------------------------------------------------
    def open(self, entry: TableEntry) -> lance.LanceDataset:
        """A registered partition table at its registered version (opened once per write)."""
        return self.dataset(self._entry_uri(entry), self.base_version(entry))

    def base_version(self, entry: TableEntry) -> int:
        """The table version ``entry`` registers (its tag resolved)."""
        uri = self._entry_uri(entry)
        storage.check_ref_name(entry.read_tag, entry.object_id, "read_tag")
        if entry.read_version is not None:
            return int(entry.read_version)
        return int(tv.open_version(uri, entry.read_tag, self.store.storage_options).version)

    def create(self, pending: PendingPartition, table: pa.Table) -> None:
        """Create ``pending``'s new table holding all of its rows (``table``) in one call."""
        ds = tv.create(
            self.uri(pending),
            table,
            self.write_schema,
            self.store.storage_options,
            tuning().max_rows_per_file,
        )
        pending.record_written(frag.metadata for frag in ds.get_fragments())
        pending.version = ds.version

    def commit_written(self, pending: PendingPartition, replace: bool) -> None:
        """Commit ``pending``'s fragments as the new version of its table."""
        pending.record_written(pending.fragments)
        pending.version = self.commit(pending, pending.existing, replace)

    def commit(self, pending: PendingPartition, onto: TableEntry | None, replace: bool) -> int:
        """Commit ``pending``'s fragments as a new version of table ``onto`` (None: create
        ``pending``'s table) that appends to or replaces its registered version; return it."""
        uri = self._entry_uri(onto) if onto else self.uri(pending)
        opts = self.store.storage_options
        if onto is None:
            op = LanceOperation.Overwrite(self.write_schema, pending.fragments)
            return int(tv.create_from(uri, op, opts).version)
        base = self.base_version(onto)
        if not replace:
            return self.append_into(pending, uri, base)
        ds = self.dataset(uri, base)
        if pending.ahead is not None and pending.storage_version != ds.data_storage_version:
            # written ahead in another storage version than the table's: write them again
            again = self.write_layout(pending.ahead, ds, self.write_schema, ds.data_storage_version)
            self._redo_ahead(pending, uri, again, None, ds.data_storage_version)
        op = LanceOperation.Overwrite(self.write_schema, pending.fragments)
        return int(tv.commit(ds, op, base, opts).version)

    def detached_base(self, uri: str, base: int) -> int:
        """A detached version with exactly ``base``'s content.

        Lance rebases a commit onto later versions of the main line, which may hold data no
        manifest registered; a detached base has no later versions, so an append lands on
        exactly the registered content."""
        if tv.is_detached(base):
            return base
        return int(
            tv.detached_copy(uri, self.dataset(uri, base), self.store.storage_options).version
        )

    def append_into(self, pending: PendingPartition, uri: str, base: int) -> int:
        """Append ``pending``'s rows to the table at version ``base``; return the new detached
        version (built on exactly ``base``, see :meth:`_append`).

        When the table's schema is older than the write's (columns added, renamed, promoted or
        dropped since it was written), it first takes the append layout: metadata-only (a Lance
        Project: renames, added NULL columns, relaxed nullability) when its columns keep their
        positions and types, else by rewriting its rows in the new layout together with ours."""
        opts = self.store.storage_options
        ds = self.dataset(uri, base)
        layout = append_layout(ds.schema, self.write_schema)
        version = ds.data_storage_version
        fragments = pending.fragments
        if pending.layout is None or not (
            same_layout(layout, pending.layout) and version == pending.storage_version
        ):
            # the table changed under us (a concurrent commit), or was not laid out as the rows
            # written ahead guessed: re-lay our rows out for it
            rows = self.our_rows(pending, layout)
            fragments = self.write_layout(rows, ds, layout, version)
            if pending.ahead is not None:
                self._redo_ahead(pending, uri, fragments, layout, version)
                pending.ahead = rows
        constants = identity_constants(self.spec, self.schema, pending.values(self.spec))
        if any(v is not None and n not in ds.schema.names for n, v in constants.items()):
            # an imported (Hive) table lacks its key columns: store them once, with our rows
            return self._rewrite_with(ds, layout, fragments, uri, constants)
        if not same_layout(ds.schema, layout):
            # the layout change is committed by URI, which Lance rebases onto the latest
            # main-line version: make it on a detached copy of exactly the registered one
            ds = self.dataset(uri, self.detached_base(uri, ds.version))
            evolved = _project(ds, layout, uri, opts)
            if evolved is None:
                return self._rewrite_with(ds, layout, fragments, uri)
            ds = self.dataset(uri, evolved)
        return self._append(ds, fragments, uri)

    def _append(self, ds: lance.LanceDataset, fragments: list[FragmentMetadata], uri: str) -> int:
        """A detached version of exactly ``ds``'s content plus ``fragments``.

        Committed through the open handle (no listing, no re-read), and made again on a
        detached copy of ``ds`` should the result hold other fragments than ``ds``'s and ours
        (see :func:`..table_version.commit_on`)."""
        op = LanceOperation.Append(fragments)
        check = tv.appended(ds, len(fragments))
        return int(tv.commit_on(uri, ds, op, self.store.storage_options, check).version)

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
        carried = self.write_layout(reader, uri, layout, ds.data_storage_version)
        op = LanceOperation.Overwrite(layout, [*carried, *fragments])
        return int(tv.commit(uri, op, ds.version, self.store.storage_options).version)

    # -- moving rows for a rebase ---------------------------------------------------------------
    def our_rows(self, pending: PendingPartition, shape: pa.Schema) -> pa.Table:
        """The rows this write put in ``pending``'s table (without the table's earlier rows),
        shaped ``shape``."""
        written = pending.layout or self.write_schema
        return conform_to(self._stored_rows(pending), shape, column_sources(written, shape))

    def _stored_rows(self, pending: PendingPartition) -> pa.Table:
        """The rows this write put in ``pending``'s table, as its fragments hold them."""
        opts = self.store.storage_options
        if pending.ahead is not None:
            return pending.ahead
        if pending.existing is None:
            assert pending.version is not None
            return tv.open_version(self.uri(pending), pending.version, opts).to_table()
        only_ours = tv.commit(
            self.uri(pending),
            LanceOperation.Overwrite(pending.layout or self.write_schema, pending.fragments),
            self.base_version(pending.existing),
            opts,
        )
        return only_ours.to_table()

    def relocated(self, pending: PendingPartition, oid: str) -> tuple[str, int]:
        """Our rows as a new table whose directory is named for ``oid`` (cached across
        retries): its location and version."""
        cached = self._relocations.get((pending.key, oid))
        if cached is None:
            location = table_location(oid)
            uri = storage.table_uri(self.store.root, location, oid)
            ds = tv.create(
                uri,
                self.our_rows(pending, self.write_schema),
                self.write_schema,
                self.store.storage_options,
                tuning().max_rows_per_file,
            )
            cached = self._relocations[(pending.key, oid)] = (location, ds.version)
        return cached

    def copy_into(self, pending: PendingPartition, target: TableEntry, replace: bool) -> int:
        """Re-write our rows into a partition table that another writer registered; return the
        new version of that table."""
        frags = write_fragments(
            self.our_rows(pending, self.write_schema),
            self._entry_uri(target),
            schema=self.write_schema,
            mode="overwrite",
            storage_options=self.store.storage_options,
            session=storage.lance_session(),
        )
        # appends re-lay these out for the target table if it needs another layout
        copy = PendingPartition(pending.key, target, pending.path, target.location, fragments=frags)
        return self.commit(copy, target, replace)


def _session_for(target: str | lance.LanceDataset) -> Any:
    """The session to write fragments of ``target`` with: the shared one for a URI; for an
    open table, its own (Lance takes it from the handle)."""
    return storage.lance_session() if isinstance(target, str) else None


def for_each_table(
    pendings: Sequence[PendingPartition],
    finish: Callable[[PendingPartition], None],
    threads: int = LOCAL_TABLE_THREADS,
) -> None:
    """Run ``finish`` on every partition, ``threads`` tables at a time."""
    if len(pendings) <= 1 or threads <= 1:
        for p in pendings:
            finish(p)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(pendings))) as pool:
        for future in [pool.submit(finish, p) for p in pendings]:
            future.result()


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
        new = tv.commit(
            uri, LanceOperation.Project(LanceSchema.from_pyarrow(layout)), ds.version, opts
        )
    except (OSError, ValueError):
        return None
    return int(new.version)
