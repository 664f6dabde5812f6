"""Health inspection of a partitioned namespace (read-only): do the partition tables agree with
the namespace schema, can every pinned table version still be read, are there table versions or
whole tables no manifest version references, and do the rows of each partition table belong to
the partition the manifest says.

Everything here only reads. Each check reads a manifest version at most once and opens each
partition table once; tables are inspected a few at a time (the work is I/O bound)."""

from __future__ import annotations

import datetime as dt
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from .. import storage
from ..concurrency import parallel_map
from ..errors import PathEscapeError, SchemaError, TableLocationError
from ..manifest.layout import is_table_dir_name
from ..manifest.locations import check_row_locations
from ..manifest.registration import Pin, pin_of
from ..manifest.snapshot import MANIFEST_DIR, ManifestSnapshot, TableEntry
from ..manifest.state import HasState, NamespaceState, state_of
from ..manifest.store import ManifestStore
from ..partitioning.partition_constants import fill_constants, identity_constants
from ..partitioning.partition_spec import PartitionSpec
from ..partitioning.partitioner import SpecEvaluator
from ..schema import arrow_json
from ..schema.conform import column_ids, column_sources, conform_for_read
from ..schema.namespace_schema import full_schema, is_widening
from ..table_files import VersionFiles, check_version_files, dataset_files

VERSIONS_DIR = "_versions/"
MANIFEST_SUFFIX = ".manifest"
U64_MAX = (1 << 64) - 1
_OPEN_ERRORS = (ValueError, OSError, RuntimeError, FileNotFoundError)
# a table the checks of schemas and rows cannot read, reported by check_read_versions
_UNREADABLE = (*_OPEN_ERRORS, PathEscapeError, TableLocationError)


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class SchemaIssue:
    """A partition table whose schema disagrees with the namespace schema (in ``column``)."""

    object_id: str
    location: str
    values: dict[str, Any]
    column: str
    problem: str


@dataclass(frozen=True)
class VersionIssue:
    """A registered table whose pinned state cannot be read. ``problem`` is one of
    ``missing table``, ``read_version cleaned up``, ``branch does not resolve``,
    ``tag does not resolve``, ``location outside the root``, ``location through a symbolic
    link``, ``location in a nested namespace``; ``detail`` says what exactly is wrong."""

    object_id: str
    location: str
    values: dict[str, Any]
    problem: str
    detail: str


@dataclass(frozen=True)
class UncommittedVersion:
    """Versions of a registered table newer than its pinned version that no manifest version
    (within the history inspected) references: a write that never reached its manifest commit,
    or a commit to the table made outside this package."""

    object_id: str
    location: str
    read_version: int
    versions: tuple[int, ...]


# Orphans younger than this are writes in flight (or left for vacuum, whose default grace it
# is): health checks report them, and count only older ones as a problem.
ORPHAN_GRACE = dt.timedelta(days=7)


@dataclass(frozen=True)
class Orphan:
    """A partition-table directory under the root that no manifest version inspected
    references. ``age_seconds`` counts from its newest file."""

    location: str
    age_seconds: float
    bytes: int

    def stale(self, grace: dt.timedelta = ORPHAN_GRACE) -> bool:
        """Whether it is older than ``grace``: no write in flight, and a vacuum with that grace
        would have removed it (a health problem; younger ones are not)."""
        return self.age_seconds > grace.total_seconds()


@dataclass(frozen=True)
class IntegrityIssue:
    """A partition table holding ``rows_wrong`` rows whose partition values (computed by the
    table's own spec version) differ from the manifest's ``values``; ``sample`` is one of them."""

    object_id: str
    values: dict[str, Any]
    rows_wrong: int
    sample: dict[str, Any]


# --------------------------------------------------------------------------------------------
# Table directories: versions on storage and the files each version references


@dataclass(frozen=True)
class VersionManifest:
    """One version manifest of a Lance table found on storage."""

    version: int
    path: str  # relative to the table directory
    mtime: float

    @property
    def detached(self) -> bool:
        """Whether this is a detached version (outside the table's main line)."""
        return self.version >= storage.DETACHED_BIT


def manifest_file_version(name: str) -> int | None:
    """The Lance version a ``_versions/`` file name stands for (None: not a version manifest).

    ``<n>.manifest`` (V1 naming), ``<20 digits>.manifest`` = u64::MAX - version (V2 naming) and
    ``d<version>.manifest`` (detached versions)."""
    if not name.endswith(MANIFEST_SUFFIX):
        return None
    stem = name[: -len(MANIFEST_SUFFIX)]
    if stem.startswith("d") and stem[1:].isdigit():
        return int(stem[1:])
    if not stem.isdigit():
        return None
    if len(stem) == 20:
        return U64_MAX - int(stem)
    return int(stem)


@dataclass
class TableListing:
    """Every file of one partition-table directory and the versions among them."""

    location: str
    uri: str
    files: dict[str, storage.FileEntry]
    storage_options: dict[str, str] | None = None
    versions: dict[int, VersionManifest] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for path, entry in self.files.items():
            if not path.startswith(VERSIONS_DIR) or "/" in path[len(VERSIONS_DIR) :]:
                continue
            version = manifest_file_version(path[len(VERSIONS_DIR) :])
            if version is not None:
                self.versions[version] = VersionManifest(version, path, entry.mtime)

    @property
    def exists(self) -> bool:
        """Whether the directory holds a Lance table (at least one version manifest)."""
        return bool(self.versions)

    @property
    def has_branches(self) -> bool:
        """Whether the table has Lance branches (``tree/``), whose versions are not listed."""
        return any(p.startswith("tree/") for p in self.files)

    @property
    def latest_main(self) -> int | None:
        """The newest version of the main line (what an unpinned read sees)."""
        main = [v for v in self.versions if v < storage.DETACHED_BIT]
        return max(main) if main else None

    @property
    def bytes(self) -> int:
        """Total size of the directory's files."""
        return sum(f.size for f in self.files.values())

    @property
    def newest_mtime(self) -> float | None:
        """Modification time of the newest file (None: no files)."""
        return max((f.mtime for f in self.files.values()), default=None)


def list_table(
    root: str,
    location: str,
    storage_options: dict[str, str] | None = None,
    links: bool = False,
) -> TableListing:
    """List one partition-table directory (one recursive listing).

    On a local root a table that is, is reached through, or holds a symbolic link anywhere
    raises :class:`PathEscapeError` naming the location and the link, so maintenance never
    reads or deletes through one, and a table holding a ``__manifest`` at any depth (a
    namespace nested in it) raises :class:`TableLocationError`; with ``links`` (orphans,
    deleted as a whole without following a link, and never when they hold a namespace) both
    are merely left to the caller."""
    uri = storage.join(root, location) if links else storage.table_uri(root, location)
    found, linked = storage.list_tree(uri, storage_options)
    if linked and not links:
        where = f"{(storage.local_path(uri) or uri).rstrip('/')}/{linked[0]}"
        raise storage.link_error(root, location, None, where)
    files = {f.path: f for f in found}
    if not links and holds_namespace(files):
        raise storage.nested_namespace_error(None, location, location, at_root=True)
    return TableListing(location, uri, files, storage_options)


def version_files(
    uri: str,
    version: int,
    storage_options: dict[str, str] | None = None,
    transaction: bool = False,
) -> VersionFiles:
    """The files version ``version`` of the table at ``uri`` references (with its transaction
    file when ``transaction``)."""
    ds = lance.dataset(uri, version=version, storage_options=storage_options)
    found = dataset_files(ds)
    if not transaction:
        return found
    txn = None
    try:
        tx = ds.read_transaction(version)
    except _OPEN_ERRORS:
        tx = None
    if tx is not None and getattr(tx, "uuid", None):
        txn = f"_transactions/{tx.read_version}-{tx.uuid}.txn"
    return VersionFiles(found.files, found.indices, txn)


# --------------------------------------------------------------------------------------------
# Manifest versions and the table versions they pin


def manifest_versions(store: ManifestStore) -> list[int]:
    """Every ``__manifest`` version still on storage, oldest first."""
    return sorted(int(ref["version"]) for ref in store.dataset().version_refs())


def history_versions(on_storage: Sequence[int], base: int, history: int | None) -> list[int]:
    """The manifest versions that count as referencing: ``base``, every later one, and the
    ``history`` newest (all with None)."""
    if history is None:
        return sorted(set(on_storage) | {base})
    newest = sorted(on_storage)[-history:] if history > 0 else []
    return sorted({base, *newest, *(v for v in on_storage if v > base)})


@dataclass
class Pins:
    """Table location -> every pin of it, over some manifest versions, and for each location
    the object id of a row naming it (for errors)."""

    by_location: dict[str, set[Pin]] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)

    def add(self, object_id: str, location: str, pin: Pin) -> None:
        """Record one table row's pin."""
        self.by_location.setdefault(location, set()).add(pin)
        self.owners.setdefault(location, object_id)

    def update(self, other: Pins) -> None:
        """Take every pin of ``other``."""
        for location, found in other.by_location.items():
            self.by_location.setdefault(location, set()).update(found)
        for location, oid in other.owners.items():
            self.owners.setdefault(location, oid)


def table_pins(store: ManifestStore, version: int, strict: bool = True) -> Pins:
    """The pins of every table row of one manifest version (one read).

    Rows whose locations are ``__manifest`` (or inside it), or share a directory with another
    row, or lie inside another row's table, raise :class:`TableLocationError` (see
    :func:`~.manifest.locations.check_row_locations`). A location (or branch / tag) outside
    the root raises :class:`PathEscapeError` when ``strict``, else the row is left out."""
    ds = store.dataset(version)
    names = set(ds.schema.names)
    wanted = [c for c in ("location", "read_version", "read_branch", "read_tag") if c in names]
    columns = ["object_id", "object_type", *wanted]
    table = ds.to_table(columns=columns, filter="object_type = 'table'")
    check_row_locations(table, f"{store.root} (__manifest version {version})")
    out = Pins()
    for row in table.to_pylist():
        location = row.get("location")
        if location is None:
            continue
        try:
            storage.check_table_refs(
                row["object_id"], location, row.get("read_branch"), row.get("read_tag")
            )
        except PathEscapeError:
            if strict:
                raise
            continue
        rv = row.get("read_version")
        pin = Pin(None if rv is None else int(rv), row.get("read_branch"), row.get("read_tag"))
        out.add(row["object_id"], location, pin)
    return out


def referenced_pins(
    store: ManifestStore,
    versions: Iterable[int],
    known: ManifestSnapshot | None = None,
    strict: bool = True,
) -> dict[str, set[Pin]]:
    """Table location -> every pin of it in the manifest ``versions`` (``known`` is a snapshot
    already in memory, used instead of reading its version again); see :func:`table_pins` for
    ``strict``. When ``strict``, a location that is (or holds) a symbolic link on a local root,
    or lies at or inside a namespace nested below the root, raises too (see
    :func:`~.storage.check_table_dir` and :func:`~.storage.check_not_nested`)."""
    versions = list(versions)
    todo = [v for v in versions if known is None or v != known.version]
    out = Pins()
    if known is not None and known.version in set(versions):
        for t in known.tables():
            try:
                storage.check_table_refs(t.object_id, t.location, t.read_branch, t.read_tag)
            except PathEscapeError:
                if strict:
                    raise
                continue
            out.add(t.object_id, t.location, pin_of(t))
    for pins in parallel_map(lambda v: table_pins(store, v, strict), todo):
        out.update(pins)
    if strict:  # once per location, before anything works through it
        for location, oid in sorted(out.owners.items()):
            storage.check_table_dir(store.root, location, oid)
        storage.check_not_nested(store.root, out.owners, store.storage_options)
    return out.by_location


def resolve_pins(
    pins: Iterable[Pin], listing: TableListing, tags: Callable[[], dict[str, int]]
) -> tuple[set[int], bool]:
    """The table versions ``pins`` stand for, and whether any pin is on a branch (those
    versions live under ``tree/`` and are not resolved here). ``tags`` is called (once) only
    when a pin names a tag; a tag that does not resolve pins nothing."""
    out: set[int] = set()
    branch = False
    tag_versions: dict[str, int] | None = None
    for pin in pins:
        if pin.read_branch is not None:
            branch = True
        elif pin.read_version is not None:
            out.add(pin.read_version)
        elif pin.read_tag is not None:
            if tag_versions is None:
                tag_versions = tags()
            if pin.read_tag in tag_versions:
                out.add(tag_versions[pin.read_tag])
        elif listing.latest_main is not None:
            out.add(listing.latest_main)
    return out, branch


def table_tags(uri: str, storage_options: dict[str, str] | None = None) -> dict[str, int]:
    """Tag name -> version of the table at ``uri`` (empty when it cannot be opened)."""
    try:
        ds = lance.dataset(uri, storage_options=storage_options)
        return {name: int(t["version"]) for name, t in ds.tags.list().items()}
    except _OPEN_ERRORS:
        return {}


def open_entry(
    root: str, entry: TableEntry, storage_options: dict[str, str] | None = None
) -> lance.LanceDataset:
    """A registered table at the state its manifest row pins, about to be read (raises when
    it cannot, or when, on a local root, a file it reads is reached through a link)."""
    storage.check_table_refs(entry.object_id, entry.location, entry.read_branch, entry.read_tag)
    uri = storage.table_uri(root, entry.location, entry.object_id)
    if entry.read_branch is not None:
        ds = lance.dataset(uri, storage_options=storage_options)
        ds = ds.checkout_version((entry.read_branch, entry.read_version))
    elif entry.read_version is not None:
        ds = lance.dataset(uri, version=int(entry.read_version), storage_options=storage_options)
    else:
        ds = lance.dataset(uri, version=entry.read_tag, storage_options=storage_options)
    check_version_files(root, entry.location, ds, entry.object_id)
    return ds


def _entries(ns: NamespaceState) -> list[tuple[TableEntry, PartitionSpec]]:
    snap = ns.snapshot
    return [(t, snap.specs[t.spec_id]) for t in snap.tables()]


# --------------------------------------------------------------------------------------------
# Schemas


def _compatible(table_type: pa.DataType, ns_type: pa.DataType) -> bool:
    """Whether a table column of ``table_type`` reads as the namespace's ``ns_type``."""
    src, dst = arrow_json.normalize_type(table_type), arrow_json.normalize_type(ns_type)
    return src == dst or is_widening(src, dst)


def _schema_issues(
    entry: TableEntry,
    spec: PartitionSpec,
    table: pa.Schema,
    schema: pa.Schema,
    full: pa.Schema,
) -> list[SchemaIssue]:
    values = entry.partition_values(spec)
    constants = identity_constants(spec, schema, values)
    sources = column_sources(table, schema)
    issues = []

    def issue(column: str, problem: str) -> None:
        issues.append(SchemaIssue(entry.object_id, entry.location, values, column, problem))

    for f in schema:
        src = sources.get(f.name)
        if src is None:
            if not f.nullable and constants.get(f.name) is None:
                issue(f.name, "missing: the namespace column is not nullable")
            continue
        have = table.field(src).type
        if not _compatible(have, f.type):
            held = "" if src == f.name else f" (held by column {src!r})"
            issue(f.name, f"type {have}{held} is neither {f.type} nor safely castable to it")
    used = {src for src in sources.values() if src is not None}
    table_ids = column_ids(table)
    known_ids = {i for f in full if (i := arrow_json.field_id(f)) is not None}
    known_names = set(full.names)
    for f in table:
        if f.name in used:
            continue
        if table_ids is not None and f.name in table_ids:
            known = table_ids[f.name] in known_ids
        else:
            known = f.name in known_names
        if not known:
            issue(f.name, f"column of type {f.type} is not in the namespace schema")
    return issues


def check_schemas(ns: NamespaceState | HasState) -> list[SchemaIssue]:
    """Every registered table, at its pinned version, against the namespace schema: columns
    are matched by ``dlp:field_ids`` (else by name); a type must equal the namespace type or
    widen to it; a non-nullable namespace column the table lacks, and a column unknown to the
    namespace (never part of its schema), are issues. Tables that cannot be opened are left to
    :func:`check_read_versions`."""
    ns = state_of(ns)
    schema = ns.schema_with_ids
    full = full_schema(ns.metadata)

    def schema_issues_of(item: tuple[TableEntry, PartitionSpec]) -> list[SchemaIssue]:
        entry, spec = item
        try:
            ds = open_entry(ns.uri, entry, ns.storage_options)
        except _UNREADABLE:
            return []
        return _schema_issues(entry, spec, ds.schema, schema, full)

    return [i for found in parallel_map(schema_issues_of, _entries(ns)) for i in found]


# --------------------------------------------------------------------------------------------
# Read versions


def check_read_versions(
    ns: NamespaceState | HasState, history: int | None = 50
) -> tuple[list[VersionIssue], list[UncommittedVersion]]:
    """Whether every registered table can be read at its pinned state (problems:
    ``missing table``, ``read_version cleaned up`` -- its version manifest or some of its
    files are gone --, ``branch does not resolve``, ``tag does not resolve``, ``location
    outside the root``, ``location through a symbolic link``, ``location in a nested
    namespace``), and which
    registered tables hold versions that no manifest version references and that are newer
    than every version one does (writes that never reached their manifest commit, commits
    made to the table directly). ``history``: the namespace's own manifest version, every
    later one and the ``history`` newest versions count as referencing (None: every version
    on storage)."""
    ns = state_of(ns)
    store = ns.store
    snap = ns.snapshot
    versions = history_versions(manifest_versions(store), ns.version, history)
    refs = referenced_pins(store, versions, known=snap, strict=False)
    opts = ns.storage_options

    def problem(entry: TableEntry, listing: TableListing) -> tuple[str, str, int | None]:
        """(problem, detail, pinned version) -- problem "" when the pinned state reads."""
        if not listing.exists:
            what = "does not exist" if not listing.files else "holds no Lance version manifest"
            return "missing table", f"{listing.uri} {what}", None
        if entry.read_version is not None:
            pinned = int(entry.read_version)
            if pinned not in listing.versions:
                return (
                    "read_version cleaned up",
                    f"version {pinned} is no longer on storage (versions there: "
                    f"{_versions_text(listing.versions)})",
                    pinned,
                )
            try:
                ds = lance.dataset(listing.uri, version=pinned, storage_options=opts)
            except _OPEN_ERRORS as e:
                return "read_version cleaned up", f"version {pinned}: {_first(e)}", pinned
        elif entry.read_tag is not None:
            try:
                ds = lance.dataset(listing.uri, version=entry.read_tag, storage_options=opts)
            except _OPEN_ERRORS as e:
                return "tag does not resolve", f"tag {entry.read_tag!r}: {_first(e)}", None
        else:
            ds = lance.dataset(listing.uri, storage_options=opts)
        missing = sorted(p for p in dataset_files(ds).files if p not in listing.files)
        if missing:
            return (
                "read_version cleaned up",
                f"{len(missing)} file(s) of version {ds.version} are gone, e.g. {missing[0]}",
                ds.version,
            )
        return "", "", ds.version

    def version_issues_of(
        item: tuple[TableEntry, PartitionSpec],
    ) -> tuple[VersionIssue | None, UncommittedVersion | None]:
        entry, spec = item
        values = entry.partition_values(spec)
        try:
            storage.check_table_refs(
                entry.object_id, entry.location, entry.read_branch, entry.read_tag
            )
        except PathEscapeError as e:
            issue = VersionIssue(
                entry.object_id, entry.location, values, "location outside the root", str(e)
            )
            return issue, None
        try:  # branch tables are only opened (their listing would include every branch)
            listing = None
            if entry.read_branch is None:
                listing = list_table(ns.uri, entry.location, opts)
            else:
                storage.check_table_dir(ns.uri, entry.location, entry.object_id)
        except PathEscapeError as e:
            link = "location through a symbolic link"
            return VersionIssue(entry.object_id, entry.location, values, link, str(e)), None
        except TableLocationError as e:
            nested = "location in a nested namespace"
            return VersionIssue(entry.object_id, entry.location, values, nested, str(e)), None
        if listing is None:  # branch versions live under tree/: only resolved
            try:
                open_entry(ns.uri, entry, opts)
            except _OPEN_ERRORS as e:
                detail = f"branch {entry.read_branch!r} version {entry.read_version}: {_first(e)}"
                return (
                    VersionIssue(
                        entry.object_id,
                        entry.location,
                        values,
                        "branch does not resolve",
                        detail,
                    ),
                    None,
                )
            return None, None
        what, detail, pinned = problem(entry, listing)
        found = None
        if what:
            found = VersionIssue(entry.object_id, entry.location, values, what, detail)
        if pinned is None:
            return found, None
        referenced, _ = resolve_pins(
            refs.get(entry.location, set()), listing, lambda: table_tags(listing.uri, opts)
        )
        # newer than every referenced version still on storage: intermediate versions a
        # committed write made on its way (a Restore base, a schema Project) are older than
        # what it registered
        times = [listing.versions[v].mtime for v in {pinned, *referenced} if v in listing.versions]
        since = max(times, default=float("-inf"))
        newer = sorted(
            v
            for v, tv in listing.versions.items()
            if tv.mtime > since and v not in referenced and not _intermediate(listing, v)
        )
        if not newer:
            return found, None
        return found, UncommittedVersion(entry.object_id, entry.location, pinned, tuple(newer))

    issues, uncommitted = [], []
    for issue_, pending in parallel_map(version_issues_of, _entries(ns)):
        if issue_ is not None:
            issues.append(issue_)
        if pending is not None:
            uncommitted.append(pending)
    return issues, uncommitted


def _intermediate(listing: TableListing, version: int) -> bool:
    """Whether ``version`` is a detached metadata-only step a write takes on its way (a
    ``Restore`` base, a schema ``Project``): no rows of its own, so no uncommitted write."""
    if version < storage.DETACHED_BIT:
        return False
    try:
        ds = lance.dataset(listing.uri, version=version, storage_options=listing.storage_options)
        tx = ds.read_transaction(version)
    except _OPEN_ERRORS:
        return False
    return tx is not None and type(tx.operation).__name__ in ("Restore", "Project")


def _versions_text(versions: dict[int, VersionManifest], shown: int = 5) -> str:
    main = sorted(v for v in versions if v < storage.DETACHED_BIT)
    detached = len(versions) - len(main)
    text = ", ".join(str(v) for v in main[-shown:]) or "none on the main line"
    if len(main) > shown:
        text = "..., " + text
    return text + (f" and {detached} detached" if detached else "")


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# --------------------------------------------------------------------------------------------
# Orphans


def holds_namespace(paths: Iterable[str]) -> bool:
    """Whether any of ``paths`` (files listed under a directory, relative to it) lies inside a
    ``__manifest`` directory at any depth: a partitioned namespace (or another directory
    catalog) lives there, which nothing of the namespace above may touch."""
    return any(MANIFEST_DIR in p.split("/")[:-1] for p in paths)


def orphan_candidates(
    root: str, referenced: Iterable[str], storage_options: dict[str, str] | None = None
) -> list[tuple[str, TableListing]]:
    """Directories directly under ``root`` that no ``referenced`` location lies in, whose names
    this package gives partition tables (see :func:`~.manifest.layout.is_table_dir_name`), and below
    which no ``__manifest`` lives at any depth (a namespace nested under this one: Dagster
    asset keys ``a`` and ``a/b/c``); with their listings. Anything else under the root is not
    the namespace's to delete. On a local root symbolic links are never candidates (nor
    followed: an orphan's listing leaves out the links below it, which deleting it removes as
    links)."""
    used = set()
    for location in referenced:
        rel = storage.relative_to(root, location)
        if rel:
            used.add(rel.split("/", 1)[0])
    names = [
        n
        for n in storage.list_dirs(root, storage_options)
        if n not in used and is_table_dir_name(n)
    ]

    def listed_table(name: str) -> tuple[str, TableListing] | None:
        listing = list_table(root, name, storage_options, links=True)
        return None if holds_namespace(listing.files) else (name, listing)

    return [found for found in parallel_map(listed_table, names) if found is not None]


def find_orphans(ns: NamespaceState | HasState, history: int | None = None) -> list[Orphan]:
    """Partition-table directories under the root that no table row of the latest manifest
    version, nor of the ``history`` newest versions (None: every version still on storage),
    has as its location: tables of writes that never reached their manifest commit, and
    tables deregistered longer ago than the inspected history. Only directories directly under
    the root named as this package names table directories, with no ``__manifest`` below
    them, are candidates (see :func:`orphan_candidates`)."""
    ns = state_of(ns)
    store = ns.store
    on_storage = manifest_versions(store)
    versions = history_versions(on_storage, on_storage[-1], history)
    refs = referenced_pins(store, versions, strict=False)  # escaping rows are reported elsewhere
    return orphans_among(ns.uri, refs, ns.storage_options)


def orphans_among(
    root: str, referenced: Iterable[str], storage_options: dict[str, str] | None = None
) -> list[Orphan]:
    """The orphans under ``root`` when ``referenced`` are the locations in use."""
    now = time.time()
    out = []
    for name, listing in orphan_candidates(root, referenced, storage_options):
        newest = listing.newest_mtime
        if newest is None:  # no files (a writer killed while creating it): the directory's age
            newest = storage.mtime(storage.join(root, name), storage_options)
        age = now - newest if newest is not None else 0.0
        out.append(Orphan(name, max(age, 0.0), listing.bytes))
    return sorted(out, key=lambda o: o.location)


# --------------------------------------------------------------------------------------------
# Integrity


def _evaluation_schema(spec: PartitionSpec, full: pa.Schema, live: pa.Schema) -> pa.Schema:
    """The source columns of ``spec`` (dropped ones too, renamed when a live column took
    their name), with their field ids."""
    ids = {i for f in spec.fields for i in f.source_ids}
    live_names = set(live.names)
    fields = []
    for f in full:
        fid = arrow_json.field_id(f)
        if fid not in ids:
            continue
        live_field = live.get_field_index(f.name) >= 0 and arrow_json.field_id(live.field(f.name))
        if f.name in live_names and live_field != fid:
            f = f.with_name(f"{f.name}__dropped_{fid}")
        fields.append(f)
    return pa.schema(fields)


def _mismatches(computed: pa.Array, expected: Any) -> pa.Array:
    """Boolean mask: the rows whose computed value is not ``expected`` (NULL-safe)."""
    if expected is None:
        return computed.is_valid()
    if isinstance(expected, float) and math.isnan(expected):
        return pc.invert(pc.fill_null(pc.is_nan(computed), False))
    equal = pc.equal(computed, pa.scalar(expected, computed.type))
    return pc.invert(pc.fill_null(equal, False))


def _integrity_issue(
    ds: lance.LanceDataset,
    entry: TableEntry,
    spec: PartitionSpec,
    wanted: pa.Schema,
    evaluator: SpecEvaluator,
    live: pa.Schema,
) -> IntegrityIssue | None:
    values = entry.partition_values(spec)
    sources = column_sources(ds.schema, wanted)
    # identity columns a table does not store (Hive imports) hold the partition value; a NULL
    # in a column it does store is a row in the wrong partition
    constants = {
        name: value
        for name, value in identity_constants(spec, live, values).items()
        if sources.get(name) is None
    }
    present = [src for f in wanted if (src := sources.get(f.name)) is not None]
    where = f"partition {entry.object_id}"
    if present:
        batches: Iterable[pa.RecordBatch] = ds.to_batches(columns=present)
    else:
        rows = ds.count_rows()
        batches = [pa.RecordBatch.from_pydict({"__rows": pa.nulls(rows)})] if rows else []
    wrong = 0
    first: int | None = None
    offset = 0
    for batch in batches:
        table = conform_for_read(pa.Table.from_batches([batch]), wanted, where, sources)
        table = fill_constants(table, constants, wanted)
        for part in table.to_batches():
            mask = None
            for arr, expected in zip(evaluator.values(part), entry.values, strict=True):
                bad = _mismatches(arr, expected)
                mask = bad if mask is None else pc.or_(mask, bad)
            if mask is not None:
                count = pc.sum(mask).as_py() or 0
                if count and first is None:
                    first = offset + pc.index(mask, True).as_py()
                wrong += count
            offset += part.num_rows
    if not wrong:
        return None
    sample = ds.take([first]).to_pylist()[0] if first is not None else {}
    return IntegrityIssue(entry.object_id, values, wrong, sample)


def check_integrity(
    ns: NamespaceState | HasState, sample: int | None = None, seed: int = 0
) -> list[IntegrityIssue]:
    """Rows whose partition values, computed by their table's own spec version, differ from
    the values the manifest registers the table under. ``sample``: None checks every
    partition, else a deterministic (``seed``) sample of that many. Tables that cannot be
    opened are left to :func:`check_read_versions`."""
    ns = state_of(ns)
    entries = sorted(_entries(ns), key=lambda item: item[0].object_id)
    if sample is not None and sample < len(entries):
        entries = sorted(
            random.Random(seed).sample(entries, max(sample, 0)), key=lambda i: i[0].object_id
        )
    live = ns.schema_with_ids
    full = full_schema(ns.metadata)
    prepared: dict[int, tuple[pa.Schema, SpecEvaluator]] = {}
    for _, spec in entries:
        if spec.spec_id not in prepared:
            wanted = _evaluation_schema(spec, full, live)
            prepared[spec.spec_id] = (wanted, SpecEvaluator(spec, wanted))

    def integrity_issue_of(item: tuple[TableEntry, PartitionSpec]) -> IntegrityIssue | None:
        entry, spec = item
        try:
            ds = open_entry(ns.uri, entry, ns.storage_options)
        except _UNREADABLE:
            return None
        wanted, evaluator = prepared[spec.spec_id]
        try:
            return _integrity_issue(ds, entry, spec, wanted, evaluator, live)
        except SchemaError:
            return None  # a column that cannot be read as its type: check_schemas reports it
        except _OPEN_ERRORS:
            return None  # files gone: check_read_versions reports it

    return [i for i in parallel_map(integrity_issue_of, entries) if i is not None]
