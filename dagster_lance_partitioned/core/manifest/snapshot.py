"""One version of the ``__manifest`` table as a value: its rows, the lookups reads and writes
make in it (memoized per version), and the cache of versions kept in memory."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import lance
import lance.commit
import pyarrow as pa
import pyarrow.compute as pc

from .. import storage
from ..errors import ManifestError, is_storage_failure, storage_error
from ..partitioning.partition_spec import PartitionSpec, canonical_value
from ..tuning import tuning
from .layout import SEP
from .locations import check_row_locations
from .stats import STATS_COLUMN, TableStats

MANIFEST_DIR = storage.MANIFEST_DIR

ROW_ADDRESS = "_rowaddr"  # the column Lance adds for with_row_address=True


@dataclass(frozen=True)
class TableEntry:
    """A registered partition table as one manifest version sees it."""

    object_id: str
    location: str
    spec_id: int
    values: tuple[Any, ...]  # partition values in the spec's field order
    read_version: int | None
    read_branch: str | None
    read_tag: str | None
    metadata: str | None = None
    stats_text: str | None = None  # the row's statistics column, as stored (see .stats)

    def partition_values(self, spec: PartitionSpec) -> dict[str, Any]:
        """Partition values keyed by field id."""
        return {f.field_id: v for f, v in zip(spec.fields, self.values, strict=True)}

    @functools.cached_property
    def stats(self) -> TableStats | None:
        """The statistics of the pinned table version (None: none recorded for it, e.g. the
        row's pin was moved by another writer, or it pins a branch or tag)."""
        pinned = self.read_version if self.read_branch is None and self.read_tag is None else None
        return TableStats.from_json(self.stats_text, pinned)


def _spec_id_of(object_id: str) -> int | None:
    head = object_id.split(SEP, 1)[0]
    if head.startswith("v") and head[1:].isdigit():
        return int(head[1:])
    return None


class _VersionState:
    """What this process learned of one ``__manifest`` version (shared by every snapshot of
    it: a version never changes): that its object ids are unique, its row count, its rows
    when read whole, and memoized lookups (:meth:`ManifestSnapshot.memo`)."""

    __slots__ = (
        "addresses",
        "arrow_schema",
        "dataset",
        "memos",
        "nbytes",
        "row_count",
        "table",
        "verified",
    )

    def __init__(self) -> None:
        self.dataset: lance.LanceDataset | None = None  # the first handle: warm for queries
        self.verified = False
        self.row_count: int | None = None
        self.table: pa.Table | None = None
        self.addresses: pa.ChunkedArray | None = None  # the row address of each row of table
        self.arrow_schema: pa.Schema | None = None
        self.memos: OrderedDict[Hashable, Any] = OrderedDict()
        self.nbytes = 0  # of ``table``, counted against VERSION_CACHE_BYTES


# Process-wide, per manifest version: bounded by entries and by the bytes of the rows kept.
VERSION_CACHE_ENTRIES = 64

VERSION_CACHE_BYTES = 256 * 1024 * 1024

VERSION_MEMOS = 128  # memoized lookups per version (scan plans' manifest queries)

_VERSIONS: OrderedDict[Hashable, _VersionState] = OrderedDict()

_VERSIONS_LOCK = threading.Lock()

_versions_bytes = 0


def _version_key(dataset: lance.LanceDataset) -> Hashable:
    """What identifies a manifest version's rows in this process: its URI, version and files
    (data files carry random names, so a manifest re-created at the same path and version
    number never shares a key with the one before)."""
    files = []
    for fragment in dataset.get_fragments():
        meta = fragment.metadata
        deletion = meta.deletion_file
        files.append(
            (
                meta.id,
                tuple(f.path for f in meta.files),
                None if deletion is None else (deletion.id, deletion.read_version),
            )
        )
    return (str(dataset.uri), int(dataset.version), tuple(files))


def _options(dataset: lance.LanceDataset) -> Any:
    return getattr(dataset, "_storage_options", None)


def _version_state(key: Hashable) -> _VersionState:
    with _VERSIONS_LOCK:
        state = _VERSIONS.get(key)
        if state is None:
            state = _VERSIONS[key] = _VersionState()
            _evict(keep=key)
        else:
            _VERSIONS.move_to_end(key)
        return state


def _evict(keep: Hashable) -> None:
    """Drop the least recently used versions beyond the bounds (under the lock)."""
    global _versions_bytes
    while len(_VERSIONS) > 1 and (
        len(_VERSIONS) > VERSION_CACHE_ENTRIES or _versions_bytes > VERSION_CACHE_BYTES
    ):
        key, state = next(iter(_VERSIONS.items()))
        if key == keep:
            _VERSIONS.move_to_end(key)
            key, state = next(iter(_VERSIONS.items()))
        del _VERSIONS[key]
        _versions_bytes -= state.nbytes


def _keep_table(
    key: Hashable, state: _VersionState, table: pa.Table, addresses: pa.ChunkedArray
) -> None:
    """Keep ``table`` (the verified rows of a small manifest version) and the row address
    of each row for later snapshots of it."""
    global _versions_bytes
    size = int(table.nbytes) + int(addresses.nbytes)
    if table.num_rows > tuning().small_manifest_rows or size > VERSION_CACHE_BYTES:
        return  # only small manifests are taken from memory (see ManifestSnapshot.verify)
    with _VERSIONS_LOCK:
        if state.table is not None:
            return
        state.table, state.addresses, state.nbytes = table, addresses, size
        if _VERSIONS.get(key) is state:
            _versions_bytes += size
            _evict(keep=key)


def clear_version_cache() -> None:
    """Forget every manifest version this process has read (tests, benchmarks)."""
    global _versions_bytes
    with _VERSIONS_LOCK:
        _VERSIONS.clear()
        _versions_bytes = 0


class ManifestSnapshot:
    """One version of ``__manifest``: all rows, the table metadata and lookups over them.

    What this process learned of a version (its object ids are unique, its row count, the
    rows of a small one, memoized query results) is shared by every snapshot of it (see
    :class:`_VersionState`)."""

    def __init__(self, dataset: lance.LanceDataset, specs: list[PartitionSpec]) -> None:
        self.dataset = dataset
        self.version: int = dataset.version
        self.metadata: dict[str, str] = dict(dataset.metadata)
        self.specs = {s.spec_id: s for s in specs}
        self._key = _version_key(dataset)
        self._shared = _version_state(self._key)
        self._specs_key: Hashable = tuple(sorted(self.specs.items()))
        if self._shared.dataset is None:
            self._shared.dataset = dataset
        self._table: pa.Table | None = None
        self._addresses: pa.ChunkedArray | None = None  # row address of each row of _table
        self._counts: dict[int, int] | None = None
        self._tables: list[TableEntry] | None = None
        self._ns_index: dict[tuple[int, tuple[Any, ...]], str] | None = None
        self._sentinel: str | None = None
        self._verified = False

    @property
    def table(self) -> pa.Table:
        """Every row of this manifest version (read on first use; refused when an object id
        occurs twice, see :meth:`check_rows`)."""
        if self._table is None:
            with self.reading():
                rows = self.dataset.to_table(with_row_address=True)
            # the addresses serve row-level commits (deletion vectors) without a re-read
            addresses = rows.column(ROW_ADDRESS)
            rows = rows.drop_columns([ROW_ADDRESS])
            self._table = self.check_rows(rows)
            self._addresses = addresses
            self._verified = self._shared.verified = True
            self._shared.row_count = int(rows.num_rows)
            _keep_table(self._key, self._shared, self._table, addresses)
        return self._table

    @property
    def query_dataset(self) -> lance.LanceDataset:
        """A handle of this version for queries: the first one this process opened (Lance
        caches file metadata per handle, so a query through a handle used before is several
        times faster than through a fresh one), when opened with the same storage options."""
        shared = self._shared.dataset
        if shared is not None and _options(shared) == _options(self.dataset):
            return shared
        return self.dataset

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per manifest version, specs and ``key`` in this process (a
        version never changes; the least recently used results are dropped beyond
        :data:`VERSION_MEMOS`). For immutable results only: they are shared."""
        full = (self._specs_key, key)
        memos = self._shared.memos
        try:
            with _VERSIONS_LOCK:
                if full in memos:
                    memos.move_to_end(full)
                    return memos[full]
        except TypeError:  # an unhashable key: not memoized
            return compute()
        value = compute()  # outside the lock: two threads may both compute it, harmlessly
        with _VERSIONS_LOCK:
            memos[full] = value
            while len(memos) > VERSION_MEMOS:
                memos.popitem(last=False)
        return value

    @property
    def storage_options(self) -> dict[str, str] | None:
        """The storage options this version was opened with."""
        options = _options(self.dataset)
        return dict(options) if options else None

    @property
    def root(self) -> str:
        """The namespace root this manifest belongs to."""
        return str(self.dataset.uri).rstrip("/").removesuffix(MANIFEST_DIR).rstrip("/")

    def check_rows(self, rows: pa.Table) -> pa.Table:
        """``rows`` (read from this manifest version) when no object id occurs in them twice and
        their table rows' locations are each a directory of its own (see
        :func:`~.locations.check_row_locations`); else :class:`ManifestError` naming the rows
        (a row duplicated, two rows sharing an id or a table, a row pointing at ``__manifest``:
        written around this package). Vectorised passes over the columns."""
        if "object_id" not in rows.column_names:
            return rows
        repeated = duplicate_ids(rows.column("object_id"))
        if repeated:
            listed = ", ".join(f"{oid!r} ({n} rows)" for oid, n in repeated[:5])
            more = f" and {len(repeated) - 5} more" if len(repeated) > 5 else ""
            raise ManifestError(
                f"{self.root}: __manifest version {self.version} lists object id(s) more than "
                f"once: {listed}{more}. Each object must have one row; the manifest was changed "
                "outside this package. Nothing was read or written; restore an earlier manifest "
                "version or remove the extra rows"
            )
        check_row_locations(rows, f"{self.root}: __manifest version {self.version}")
        return rows

    def verify(self, latest: bool = False) -> ManifestSnapshot:
        """This snapshot, after checking that no object id of its version occurs twice and that
        each table row has a directory of its own (see :meth:`check_rows`): a small manifest is
        read whole (and kept for later lookups), a large one only its ``object_id``,
        ``object_type`` and ``location`` columns.

        ``latest``: the version was just found to be the latest (so its files are all there):
        when this process has checked it already, a small one's rows are taken from memory
        and a large one is not read again. Otherwise the version is read (its files may be
        gone: an old version a cleanup removed)."""
        if self._verified:
            return self
        shared = self._shared
        reuse = latest and shared.verified
        if self._table is not None:
            pass  # checked as it was read
        elif self.is_small():
            if reuse and shared.table is not None:
                # read (and checked) by this process already
                self._table, self._addresses = shared.table, shared.addresses
            else:
                _ = self.table  # checked as it is read
        elif not reuse:
            with self.reading():
                ids = self.dataset.to_table(columns=["object_id", "object_type", "location"])
            self.check_rows(ids)
        self._verified = shared.verified = True
        return self

    @contextlib.contextmanager
    def reading(self, what: str = "reading __manifest") -> Iterator[None]:
        """Raw Lance / Arrow failures inside become :class:`StorageError` naming the manifest
        version and the file (and, when the version is no longer the latest, that a cleanup
        may have removed its files)."""
        try:
            yield
        except Exception as e:
            if is_storage_failure(e):
                at = f"{what} version {self.version}{self._stale_hint()}"
                raise storage_error(e, self.root, at) from None
            raise

    def _stale_hint(self) -> str:
        """Why reading this version may fail: a newer one exists (best effort, error path)."""
        try:
            latest = int(self.dataset.latest_version)
        except Exception:
            return ""
        if latest <= self.version:
            return ""
        return (
            f" (the latest is version {latest}; a cleanup may have removed files of this one: "
            "refresh to read the latest)"
        )

    def row_count(self) -> int:
        """How many rows this manifest version has (without reading them)."""
        if self._table is not None:
            return int(self._table.num_rows)
        if self._shared.row_count is None:
            with self.reading():
                self._shared.row_count = int(self.dataset.count_rows())
        return self._shared.row_count

    @property
    def loaded(self) -> bool:
        """Whether every row has been read already."""
        return self._table is not None

    @property
    def arrow_schema(self) -> pa.Schema:
        """The manifest's Arrow schema (including unknown columns)."""
        if self._shared.arrow_schema is None:
            self._shared.arrow_schema = self.dataset.schema
        return self._shared.arrow_schema

    def table_counts(self) -> dict[int, int]:
        """Registered partition tables per spec version (without reading every row)."""
        if self._counts is None:
            self._counts = self.memo(("table_counts",), self._count_tables)
        return self._counts

    def _count_tables(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        if self.loaded:
            for t in self.tables():
                counts[t.spec_id] = counts.get(t.spec_id, 0) + 1
        else:
            for sid in self.specs:
                with self.reading():
                    counts[sid] = self.query_dataset.count_rows(
                        f"object_type = 'table' AND object_id LIKE 'v{sid}{SEP}%'"
                    )
        return counts

    def entries(self, rows: pa.Table) -> list[TableEntry]:
        """Table entries of manifest ``rows`` (e.g. the result of a filtered query)."""
        return ManifestSnapshot._entries(rows, self.specs)[0]

    def tables(self) -> list[TableEntry]:
        """Every registered partition table, in manifest order."""
        if self._tables is None:
            self._tables, self._ns_index = self._entries(self.table, self.specs)
        return self._tables

    def namespace_ids(self) -> dict[tuple[int, tuple[Any, ...]], str]:
        """(spec id, values of the levels so far) -> object id of that partition namespace."""
        if self._ns_index is None:
            self._tables, self._ns_index = self._entries(self.table, self.specs)
        return self._ns_index

    @staticmethod
    def _entries(
        rows: pa.Table, specs: dict[int, PartitionSpec]
    ) -> tuple[list[TableEntry], dict[tuple[int, tuple[Any, ...]], str]]:
        """Table entries and the partition-namespace index of manifest ``rows``, per spec
        version (rows of unknown versions and other objects are ignored)."""
        tables: list[TableEntry] = []
        ns_index: dict[tuple[int, tuple[Any, ...]], str] = {}
        if rows.num_rows == 0:
            return tables, ns_index
        ids = rows.column("object_id")
        types = rows.column("object_type")
        depth = pc.subtract(pc.list_value_length(pc.split_pattern(ids, SEP)), 1)

        def column(sub: pa.Table, name: str) -> list[Any]:
            if name in sub.column_names:
                values = sub.column(name)
                if pa.types.is_floating(values.type):
                    # one NaN object for every NaN value, so that NaN partitions are found
                    # by key (a NaN equals only itself), as the partitioner's keys are made
                    return [canonical_value(v) for v in values.to_pylist()]
                return list(values.to_pylist())
            return [None] * sub.num_rows

        for spec in specs.values():
            in_spec = pc.starts_with(ids, f"v{spec.spec_id}{SEP}")
            sub = rows.filter(pc.and_(in_spec, pc.equal(types, "table")))
            locations = column(sub, "location")
            if any(loc is None for loc in locations):
                bad = column(sub, "object_id")[locations.index(None)]
                raise ManifestError(f"manifest table row {bad!r} has no location")
            values = (
                list(zip(*(column(sub, f.column) for f in spec.fields), strict=True))
                if spec.fields
                else [()] * sub.num_rows  # a spec without fields: its table holds no values
            )
            for oid, loc, vals, rv, rb, rt, meta, stats in zip(
                column(sub, "object_id"),
                locations,
                values,
                column(sub, "read_version"),
                column(sub, "read_branch"),
                column(sub, "read_tag"),
                column(sub, "metadata"),
                column(sub, STATS_COLUMN),
                strict=True,
            ):
                tables.append(TableEntry(oid, loc, spec.spec_id, vals, rv, rb, rt, meta, stats))
            is_ns = pc.and_(in_spec, pc.equal(types, "namespace"))
            for level in range(1, len(spec.fields) + 1):
                sub = rows.filter(pc.and_(is_ns, pc.equal(depth, level)))
                level_values = zip(
                    *(column(sub, f.column) for f in spec.fields[:level]), strict=True
                )
                for oid, vals in zip(column(sub, "object_id"), level_values, strict=True):
                    ns_index[(spec.spec_id, vals)] = oid
        return tables, ns_index

    def table_index(self, spec_id: int) -> dict[tuple[Any, ...], TableEntry]:
        """Partition values -> table, for one spec version."""
        return {t.values: t for t in self.tables() if t.spec_id == spec_id}

    # -- targeted lookups (a large manifest is queried, never read whole) -----------------------
    def rows_where(
        self, where: pc.Expression, columns: list[str] | None = None, with_address: bool = False
    ) -> pa.Table:
        """The manifest rows matching ``where`` (all columns unless ``columns``; with
        ``_rowaddr`` when ``with_address``), from memory when loaded, else by an (indexed)
        Lance scan."""
        if self._table is not None and not with_address:
            rows = self._table.filter(where)
            return rows if columns is None else rows.select(columns)
        if self._table is not None and self._addresses is not None:
            rows = self._table.append_column(ROW_ADDRESS, self._addresses).filter(where)
            return rows if columns is None else rows.select([*columns, ROW_ADDRESS])
        with self.reading("querying __manifest"):
            rows = self.dataset.to_table(
                columns=columns, filter=where, with_row_address=with_address
            )
        return self.check_rows(rows)

    def rows_by_id(self, object_ids: Iterable[str], with_address: bool = False) -> pa.Table:
        """Every column of the rows with ``object_ids``."""
        ids = pa.array(sorted(set(object_ids)), pa.utf8())
        return self.rows_where(pc.field("object_id").isin(ids), with_address=with_address)

    def sentinel_id(self) -> str | None:
        """The row every row-level commit re-writes (the first spec namespace, ``v<N>``), so
        that concurrent commits always conflict; None when the manifest has no such row."""
        if self._sentinel is None:
            # spec namespace rows are never removed and later ones sort after: once found,
            # the sentinel of a manifest never changes
            self._sentinel = _SENTINELS.get(self.dataset.uri)
        if self._sentinel is None:
            rows = self.rows_where(
                pc.field("object_type") == "namespace", columns=["object_id"]
            ).column("object_id")
            spec_rows = [oid for oid in rows.to_pylist() if SEP not in oid]
            self._sentinel = min(spec_rows, key=_spec_order) if spec_rows else ""
            if self._sentinel:
                _SENTINELS[self.dataset.uri] = self._sentinel
        return self._sentinel or None

    def forget_sentinel(self) -> None:
        """Drop the cached sentinel (it was not found in this version)."""
        _SENTINELS.pop(self.dataset.uri, None)
        self._sentinel = ""

    def find_tables(
        self, spec: PartitionSpec, keys: Iterable[tuple[Any, ...]]
    ) -> dict[tuple[Any, ...], TableEntry]:
        """The registered tables of ``spec`` with partition values ``keys``."""
        wanted = set(keys)
        if not wanted:
            return {}
        if self._tables is not None:
            index = self.table_index(spec.spec_id)
            return {k: index[k] for k in wanted if k in index}
        if not self._has_columns(spec, len(spec.fields)):
            return {}  # a spec's columns come with its first write: it has no tables yet
        self._load_if_small()
        # the rows of these keys only (a vectorised filter, in memory for a small manifest):
        # a write's cost does not grow with the partitions it does not touch
        where = _values_filter(spec, len(spec.fields), wanted) & (
            pc.field("object_type") == "table"
        )
        found = self.entries(self.rows_where(where))
        return {t.values: t for t in found if t.spec_id == spec.spec_id and t.values in wanted}

    def find_namespaces(
        self, spec: PartitionSpec, prefixes: Iterable[tuple[Any, ...]]
    ) -> dict[tuple[int, tuple[Any, ...]], str]:
        """(spec id, values of the levels so far) -> object id of the partition namespaces of
        ``spec`` at ``prefixes``."""
        wanted = {(spec.spec_id, p) for p in prefixes}
        if not wanted:
            return {}
        if self._ns_index is not None:
            index = self.namespace_ids()
        elif not self._has_columns(spec, 1):
            return {}  # a spec's columns come with its first write: no namespaces yet
        else:
            self._load_if_small()
            where = _values_filter(spec, 1, {p[:1] for _, p in wanted}) & (
                pc.field("object_type") == "namespace"
            )
            index = ManifestSnapshot._entries(self.rows_where(where), {spec.spec_id: spec})[1]
        return {k: index[k] for k in wanted if k in index}

    def _has_columns(self, spec: PartitionSpec, levels: int) -> bool:
        """Whether the manifest has the columns of the first ``levels`` fields of ``spec``."""
        names = set(self.arrow_schema.names)
        return all(f.column in names for f in spec.fields[:levels])

    def _load_if_small(self) -> None:
        """Read every row of a small manifest (cheaper than querying it), once."""
        if self._table is None and self.is_small():
            _ = self.table

    def is_small(self) -> bool:
        """Whether reading every row is cheaper than querying it (see
        :attr:`~..tuning.Tuning.small_manifest_rows`)."""
        return self.row_count() <= tuning().small_manifest_rows


def duplicate_ids(ids: pa.Array | pa.ChunkedArray) -> list[tuple[str, int]]:
    """(object id, rows) of every id occurring more than once in ``ids``, sorted (empty, at the
    cost of one hash pass, when all are distinct)."""
    if len(ids) < 2 or len(pc.unique(ids)) == len(ids):
        return []
    counts = pc.value_counts(ids)
    repeated = counts.filter(pc.greater(counts.field("counts"), 1))
    return sorted(
        zip(
            repeated.field("values").to_pylist(),
            repeated.field("counts").to_pylist(),
            strict=True,
        ),
        key=lambda r: (r[0] is None, r[0] or ""),
    )


_SENTINELS: dict[str, str] = {}  # manifest uri -> its sentinel row's object id


def _spec_order(object_id: str) -> tuple[int, str]:
    spec_id = _spec_id_of(object_id + SEP)
    return (spec_id if spec_id is not None else 1 << 62, object_id)


def _values_filter(spec: PartitionSpec, levels: int, keys: set[tuple[Any, ...]]) -> pc.Expression:
    """A filter keeping (at least) the manifest rows whose first ``levels`` partition columns of
    ``spec`` take the values of one of ``keys`` (each column tested against its values)."""
    where = pc.scalar(True)
    for i, f in enumerate(spec.fields[:levels]):
        values = {k[i] for k in keys}
        present = [v for v in values if v is not None]
        if pa.types.is_floating(f.result_type) and any(v == 0.0 for v in present):
            present += [0.0, -0.0]  # equal as keys, told apart by isin
        test = None
        if present:
            test = pc.field(f.column).isin(pa.array(present, f.result_type))
        if None in values:
            null = pc.field(f.column).is_null()
            test = null if test is None else test | null
        where = where & test
    return where
