"""Maintenance of a partitioned namespace: compact partition tables, clean up old versions,
vacuum orphans, and drop partitions.

Lance's own ``cleanup_old_versions`` is used for ``__manifest`` only. On partition tables it is
unsafe for this format (see docs/explanation/implementation-notes.md, "Maintenance"): it never
lists detached versions -- the versions every ``read_version`` of this package pins after the
first write -- so it neither removes old ones nor protects their files, and deletes data files
a pinned detached version still reads once no main-line version references them. Partition
tables are therefore
cleaned file by file here: a version's manifest is removed only when no retained manifest
version pins it, then the files only removed versions referenced."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from lance import LanceOperation
from lance.fragment import write_fragments

from .. import storage
from .. import table_version as tv
from ..concurrency import parallel_map
from ..errors import PartialPartitionError, PartitionedNamespaceError, WriteError, storage_error
from ..expr.filters import FilterLike, to_sql
from ..manifest.commit_summary import WRITER_ID, CommitSummary, Operation
from ..manifest.edit import ManifestEdit, NothingToCommit
from ..manifest.registration import Pin, TableVersion
from ..manifest.retire import Retirement, announcement, epoch
from ..manifest.revisions import register
from ..manifest.snapshot import ManifestSnapshot
from ..manifest.state import HasState, NamespaceState, load_snapshot, state_of
from ..manifest.store import ManifestStore, delete_empty_namespaces
from ..read.field_filters import namespace_row_filter
from ..read.planning import ScanTask, plan_namespace, plan_scan
from ..read.scan import collect, count_matching, open_table
from ..schema.namespace_schema import snapshot_schema
from ..search.build import index_version
from ..search.declaration import declarations
from ..table_files import VersionFiles, data_bytes
from .health import (
    ORPHAN_GRACE,
    TableListing,
    list_table,
    manifest_versions,
    orphans_among,
    referenced_pins,
    resolve_pins,
    table_tags,
    version_files,
)

# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class CompactResult:
    """What ``compact`` did: the manifest version that made the compacted tables visible (the
    unchanged current version when nothing was compacted), each compacted partition as
    ``(object_id, fragments_before, fragments_after)``, and the partitions whose compaction
    was discarded because a concurrent commit moved them first."""

    manifest_version: int
    partitions: tuple[tuple[str, int, int], ...]
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class CleanupResult:
    """What ``cleanup`` removed: ``__manifest`` versions, partition-table versions, and the
    files only removed versions referenced. ``tables_skipped`` are table locations left alone
    (Lance branches, or a version manifest that could not be read)."""

    manifest_versions_removed: int
    manifest_versions_kept: int
    table_versions_removed: int
    files_removed: int
    bytes_removed: int
    tables_skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class VacuumResult:
    """What ``vacuum`` removed: orphan table directories older than the grace period, and files
    inside referenced tables that no version of their table references. ``orphans_kept`` are
    orphans still inside the grace period (possibly writes in progress)."""

    orphans_removed: tuple[str, ...]
    orphans_kept: tuple[str, ...]
    files_removed: int
    bytes_removed: int
    tables_skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class DroppedPartition:
    """One partition ``drop_partitions`` deregistered."""

    object_id: str
    location: str
    values: dict[str, Any]
    rows: int


@dataclass(frozen=True)
class DropResult:
    """What ``drop_partitions`` did: the manifest version that deregistered the partitions (the
    unchanged current version when none matched) and each dropped partition."""

    manifest_version: int
    partitions: tuple[DroppedPartition, ...]

    @property
    def rows(self) -> int:
        """Rows the dropped partitions held."""
        return sum(p.rows for p in self.partitions)


def _refuse_pinned(ns: NamespaceState, what: str) -> None:
    if ns.pinned:
        raise WriteError(
            f"{ns.uri} was opened at manifest version {ns.version}; "
            f"open it without a version to {what}"
        )


# --------------------------------------------------------------------------------------------
# compact


@dataclass(frozen=True)
class _Compacted:
    revision: TableVersion
    before: int
    after: int


def _compact_table(ns: NamespaceState, task: ScanTask, target_rows: int) -> _Compacted | None:
    """Write a detached version of ``task``'s table holding its rows in fewer fragments, built
    on exactly its pinned version (carrying the declared indexes its size calls for); None
    when it has nothing to gain."""
    if task.read_branch is not None:
        return None  # branch-pinned tables are not written by this package
    opts = ns.storage_options
    ds = open_table(task, opts)
    before = len(ds.get_fragments())
    if before <= 1:
        return None
    rows = ds.count_rows()
    if max(1, math.ceil(rows / target_rows)) >= before:
        return None  # the fragments are already as large as the target allows
    schema = ds.schema
    reader = pa.RecordBatchReader.from_batches(schema, ds.to_batches())
    known = task.stats if task.stats is not None else collect(task, ns.schema_with_ids, opts)
    fragments = write_fragments(
        reader,
        task.uri,
        schema=schema,
        mode="overwrite",
        max_rows_per_file=target_rows,
        data_storage_version=ds.data_storage_version,
        storage_options=opts,
    )
    new = tv.commit(task.uri, LanceOperation.Overwrite(schema, fragments), ds.version, opts)
    if new.count_rows() != rows:  # never register a version that lost or gained rows
        raise PartitionedNamespaceError(
            f"partition {task.object_id}: compacted version {new.version} holds "
            f"{new.count_rows()} rows, the pinned version {ds.version} {rows}; nothing committed"
        )
    declared = [d.with_column(ns.schema_with_ids) for d in declarations(ns.metadata)]
    version = index_version(
        task.uri,
        new.version,
        declared,
        ns.schema_with_ids,
        opts,
        object_id=task.object_id,
        dataset=new,
    ).version
    found = known.with_bytes(data_bytes(fragments))  # exactly the pinned version's rows
    revision = TableVersion.of_task(task, version, stats=found)
    return _Compacted(revision, before, len(fragments))


def compact(
    ns: NamespaceState | HasState,
    filter: FilterLike = None,
    target_rows_per_fragment: int = 1 << 20,
) -> CompactResult:
    """Rewrite the selected partition tables (``filter`` as in ``plan_scan``) with fewer, larger
    fragments and make all of them visible in one manifest commit.

    Each table gets a detached Lance version holding exactly the rows of its pinned version
    (an ``Overwrite`` built on it, same schema and data storage version, with the declared
    indexes built again); tables with at most one fragment, or whose fragments cannot get
    fewer at ``target_rows_per_fragment``, are left alone. A table whose pin a concurrent
    commit changed keeps that commit's version and is reported in ``skipped``. Commit property
    ``operation`` = ``compact``."""
    ns = state_of(ns)
    _refuse_pinned(ns, "compact it")
    if target_rows_per_fragment < 1:
        raise ValueError("target_rows_per_fragment must be at least 1")
    ns.store.check_store()  # before anything is written
    made_at = epoch(ns.refresh().snapshot)
    plan = plan_namespace(ns, filter, by_stats=False)
    done = [
        c
        for c in parallel_map(
            lambda t: _compact_table(ns, t, target_rows_per_fragment), list(plan.tasks)
        )
        if c is not None
    ]
    if not done:
        return CompactResult(ns.version, ())
    summary = CommitSummary(Operation.COMPACT, writer=WRITER_ID)
    outcome = register(ns, [c.revision for c in done], summary, made_at)
    committed = set(outcome.committed)
    return CompactResult(
        outcome.manifest_version,
        tuple(
            sorted(
                (c.revision.object_id, c.before, c.after)
                for c in done
                if c.revision.object_id in committed
            )
        ),
        outcome.skipped,
    )


# --------------------------------------------------------------------------------------------
# cleanup


def announce(store: ManifestStore, retirement: Retirement, operation: str) -> ManifestSnapshot:
    """Announce ``retirement`` in two manifest commits (see :mod:`.manifest.retire`); the manifest
    snapshot after which every commit that depends on it conflicts."""
    summary = CommitSummary(Operation.RETIRE, of=operation)

    def record(snap: ManifestSnapshot) -> ManifestEdit:
        return ManifestEdit(
            metadata=announcement(snap, retirement), properties=summary.to_properties()
        )

    def touch(snap: ManifestSnapshot) -> ManifestEdit:
        # re-writes the sentinel row only: every commit planned before it must plan again
        return ManifestEdit(properties=summary.to_properties())

    load = lambda ds: ManifestSnapshot(ds, [])  # noqa: E731
    store.commit(load, record)
    return store.commit(load, touch)


@dataclass
class _TableCleanup:
    versions: int = 0
    files: int = 0
    bytes: int = 0
    skipped: bool = False


@dataclass
class _TablePlan:
    """What maintenance found to remove in one table before announcing it: the listing, the
    versions to remove and the files each listed version references."""

    location: str
    listing: TableListing | None = None
    remove: set[int] = field(default_factory=set)
    files: dict[int, VersionFiles] = field(default_factory=dict)
    candidates: list[str] = field(default_factory=list)  # vacuum: unreferenced files
    skipped: bool = False


def _plan_clean_table(
    ns: NamespaceState, location: str, pins: set[Pin], cutoff: float
) -> _TablePlan:
    """The versions of one table that no pin protects and that are older than ``cutoff``."""
    opts = ns.storage_options
    plan = _TablePlan(location)
    listing = list_table(ns.uri, location, opts)
    if not listing.exists:
        return plan
    plan.listing = listing
    if listing.has_branches:
        plan.skipped = True  # branch manifests may read this table's files: leave it alone
        return plan
    tags = table_tags(listing.uri, opts)
    protected, on_branch = resolve_pins(pins, listing, lambda: tags)
    if on_branch:
        plan.skipped = True
        return plan
    protected |= set(tags.values())  # tagged versions are kept, as Lance keeps them
    if listing.latest_main is not None:
        protected.add(listing.latest_main)  # Lance needs the main line's latest version
    remove = {v for v, tv in listing.versions.items() if v not in protected and tv.mtime < cutoff}
    if not remove:
        return plan
    try:
        found = parallel_map(
            lambda v: version_files(listing.uri, v, opts, transaction=v in remove),
            sorted(listing.versions),
            threads=4,
        )
    except (ValueError, OSError, RuntimeError):
        plan.skipped = True  # a manifest we cannot read might reference anything: do nothing
        return plan
    plan.files = dict(zip(sorted(listing.versions), found, strict=True))
    plan.remove = remove
    return plan


def _finish_clean_table(ns: NamespaceState, plan: _TablePlan, pins: set[Pin]) -> _TableCleanup:
    """Remove what ``plan`` found, but for the versions ``pins`` (read after the announcement)
    protect, and the files only removed versions reference (any version registered since the
    plan counts as kept)."""
    out = _TableCleanup(skipped=plan.skipped)
    listing = plan.listing
    if listing is None or not plan.remove:
        return out
    opts = ns.storage_options
    protected, on_branch = resolve_pins(pins, listing, lambda: table_tags(listing.uri, opts))
    if on_branch:
        out.skipped = True
        return out
    remove = sorted(plan.remove - protected)
    kept = [f for v, f in plan.files.items() if v not in set(remove)]
    try:  # versions registered since the listing (rebased writes) keep what they read
        kept += parallel_map(
            lambda v: version_files(listing.uri, v, opts),
            sorted(protected - set(plan.files)),
            threads=4,
        )
    except (ValueError, OSError, RuntimeError):
        out.skipped = True
        return out
    if not remove:
        return out
    # manifests first: a crash in between leaves unreferenced files (vacuum's), never a
    # version whose files are gone
    manifests = [listing.versions[v].path for v in remove]
    storage.delete_files(listing.uri, manifests, opts)
    doomed = _only_in([plan.files[v] for v in remove], kept, listing)
    out.versions = len(remove)
    out.files = storage.delete_files(listing.uri, doomed, opts)
    out.bytes = sum(listing.files[p].size for p in [*manifests, *doomed] if p in listing.files)
    return out


def _union(found: Iterable[VersionFiles]) -> VersionFiles:
    """The files of several versions as one."""
    files: set[str] = set()
    indices: set[str] = set()
    for v in found:
        files |= v.files
        indices |= v.indices
        if v.transaction is not None:
            files.add(v.transaction)
    return VersionFiles(frozenset(files), frozenset(indices))


def _only_in(
    gone: Iterable[VersionFiles], kept: Iterable[VersionFiles], listing: TableListing
) -> list[str]:
    """Files of ``listing`` that some of ``gone`` references and none of ``kept``."""
    gone_all, kept_all = _union(gone), _union(kept)
    return sorted(p for p in listing.files if gone_all.covers(p) and not kept_all.covers(p))


def _all_pins(store: ManifestStore) -> dict[str, set[Pin]]:
    """location -> pins, over every ``__manifest`` version on storage."""
    return referenced_pins(store, manifest_versions(store))


def cleanup(
    ns: NamespaceState | HasState,
    older_than: dt.timedelta = dt.timedelta(days=7),
    keep_manifest_versions: int = 10,
) -> CleanupResult:
    """Remove old ``__manifest`` versions and old partition-table versions.

    A manifest version is removed when it is older than ``older_than`` and not among the
    ``keep_manifest_versions`` newest (the latest is always kept; tagged versions too). Then a
    partition-table version is removed when it is older than ``older_than`` and no retained
    manifest version pins it (``read_version``, or a tag), it is not the newest main-line
    version and carries no tag; the files only removed versions referenced go with it. Time
    travel to every retained manifest version keeps working. Files nobody ever referenced
    (failed writes) and tables no retained version references are left to :func:`vacuum`.

    Safe beside writers whatever the bounds (see :mod:`.manifest.retire`): the table versions to
    remove are announced in ``__manifest`` first, a write that would register or build on one
    conflicts, and the pins are read again after the announcement."""
    ns = state_of(ns)
    _refuse_pinned(ns, "clean it up")
    if keep_manifest_versions < 1:
        raise ValueError("keep_manifest_versions must be at least 1 (the latest is always kept)")
    store = ns.store
    store.check_store()
    ns.refresh()  # refuses a malformed manifest before anything is removed
    cutoff = time.time() - older_than.total_seconds()
    manifest = store.dataset()
    # every location any manifest version names must lie inside the root before anything is
    # removed (a hostile row raises PathEscapeError here, with nothing deleted)
    _all_pins(store)
    try:
        stats = manifest.cleanup_old_versions(
            older_than=older_than,
            retain_versions=keep_manifest_versions,
            error_if_tagged_old_versions=False,
        )
    except (OSError, ValueError, RuntimeError) as e:
        raise storage_error(e, ns.uri, "cleaning up __manifest versions") from None
    ns.refresh()
    retained = manifest_versions(store)
    pins = referenced_pins(store, retained)
    locations = sorted(pins)
    plans = parallel_map(lambda loc: _plan_clean_table(ns, loc, pins[loc], cutoff), locations)
    retirement = Retirement(versions={p.location: frozenset(p.remove) for p in plans if p.remove})
    if retirement:
        announce(store, retirement, "cleanup")
        pins = _all_pins(store)
    results = parallel_map(lambda p: _finish_clean_table(ns, p, pins.get(p.location, set())), plans)
    ns.refresh()
    return CleanupResult(
        manifest_versions_removed=int(stats.old_versions),
        manifest_versions_kept=len(retained),
        table_versions_removed=sum(r.versions for r in results),
        files_removed=sum(r.files for r in results),
        bytes_removed=int(stats.bytes_removed) + sum(r.bytes for r in results),
        tables_skipped=tuple(loc for loc, r in zip(locations, results, strict=True) if r.skipped),
    )


# --------------------------------------------------------------------------------------------
# vacuum

# The files of a Lance table that vacuum may delete when no version references them: data
# files (``data/<file>``), deletion files (``_deletions/<file>``) and index files
# (``_indices/<uuid>/<file>``), exactly as deep as Lance writes them (a table holding a
# ``__manifest`` at any depth is refused by its listing, see health.list_table).
_MANAGED = re.compile(r"(?:data|_deletions)/[^/]+|_indices/[^/]+/[^/]+")


def _managed(path: str) -> bool:
    return _MANAGED.fullmatch(path) is not None


def _plan_vacuum_table(ns: NamespaceState, location: str, cutoff: float) -> _TablePlan:
    """The files of one table that no version on storage references, older than ``cutoff``:
    data, deletion and index files of writes that never committed a version."""
    opts = ns.storage_options
    plan = _TablePlan(location)
    listing = list_table(ns.uri, location, opts)
    if not listing.exists:
        return plan
    plan.listing = listing
    if listing.has_branches:
        plan.skipped = True
        return plan
    candidates = [p for p, f in listing.files.items() if _managed(p) and f.mtime < cutoff]
    if not candidates:
        return plan
    try:
        referenced = parallel_map(
            lambda v: version_files(listing.uri, v, opts), sorted(listing.versions), threads=4
        )
    except (ValueError, OSError, RuntimeError):
        plan.skipped = True
        return plan
    everything = _union(referenced)
    plan.files = dict(zip(sorted(listing.versions), referenced, strict=True))
    plan.candidates = [p for p in candidates if not everything.covers(p)]
    return plan


def _finish_vacuum_table(ns: NamespaceState, plan: _TablePlan) -> _TableCleanup:
    """Delete ``plan``'s candidates but those a version committed since the plan references."""
    out = _TableCleanup(skipped=plan.skipped)
    if plan.listing is None or not plan.candidates:
        return out
    opts = ns.storage_options
    now = list_table(ns.uri, plan.location, opts)
    try:
        since = parallel_map(
            lambda v: version_files(now.uri, v, opts),
            sorted(set(now.versions) - set(plan.files)),
            threads=4,
        )
    except (ValueError, OSError, RuntimeError):
        out.skipped = True
        return out
    referenced = _union(since)
    doomed = [p for p in plan.candidates if not referenced.covers(p)]
    out.files = storage.delete_files(now.uri, doomed, opts)
    out.bytes = sum(plan.listing.files[p].size for p in doomed)
    return out


def vacuum(ns: NamespaceState | HasState, grace: dt.timedelta = ORPHAN_GRACE) -> VacuumResult:
    """Delete what no manifest version on storage can reach and that is older than ``grace``:
    orphan partition-table directories (see :func:`~.health.find_orphans`; age counted from
    their newest file, so a write in progress keeps its table), and files inside referenced
    tables that no version of the table references (fragments of writes that failed before
    committing a version). Never touches a file a table version references, nor
    ``__manifest``.

    Safe beside writers whatever ``grace`` (see :mod:`.manifest.retire`): what is to be deleted is
    announced in ``__manifest`` first; a write in flight whose files or new table it names
    conflicts instead of committing, and the references are read again after the
    announcement."""
    ns = state_of(ns)
    _refuse_pinned(ns, "vacuum it")
    ns.refresh()
    store = ns.store
    store.check_store()
    limit = grace.total_seconds()
    cutoff = time.time() - limit
    refs = _all_pins(store)  # one read per manifest version
    orphans = orphans_among(ns.uri, refs, ns.storage_options)
    doomed = [o for o in orphans if o.age_seconds > limit]
    kept = [o.location for o in orphans if o.age_seconds <= limit]
    locations = sorted(refs)
    plans = parallel_map(lambda loc: _plan_vacuum_table(ns, loc, cutoff), locations)
    retirement = Retirement(
        files=frozenset(p.location for p in plans if p.candidates),
        tables=frozenset(o.location for o in doomed),
    )
    if retirement:
        announce(store, retirement, "vacuum")
        refs = _all_pins(store)
    removed = []
    for orphan in doomed:
        if orphan.location in refs:  # registered meanwhile, by a commit before the announcement
            kept.append(orphan.location)
            continue
        storage.delete_tree(storage.join(ns.uri, orphan.location), ns.storage_options)
        removed.append(orphan)
    results = parallel_map(lambda p: _finish_vacuum_table(ns, p), plans)
    return VacuumResult(
        orphans_removed=tuple(o.location for o in removed),
        orphans_kept=tuple(kept),
        files_removed=sum(r.files for r in results),
        bytes_removed=sum(o.bytes for o in removed) + sum(r.bytes for r in results),
        tables_skipped=tuple(loc for loc, r in zip(locations, results, strict=True) if r.skipped),
    )


# --------------------------------------------------------------------------------------------
# drop_partitions


def drop_partitions(ns: NamespaceState | HasState, filter: FilterLike) -> DropResult:
    """Deregister, in one manifest commit, every partition all of whose rows match ``filter``.

    Candidates are the partitions a scan with ``filter`` reads (``plan_scan``); each is then
    read to count the rows failing the filter (NULL counts as failing). A partition with no
    failing row is dropped -- so is an empty candidate. When some partition holds rows both
    matching and failing, :class:`PartialPartitionError` names those partitions and nothing is
    changed. Data files stay (``cleanup`` / ``vacuum`` remove them once no retained manifest
    version references them); partition namespaces left empty are deleted in the same commit."""
    ns = state_of(ns)
    _refuse_pinned(ns, "drop partitions")
    if to_sql(filter) is None:
        raise WriteError("drop_partitions needs a filter (the rows whose partitions to drop)")
    sql = namespace_row_filter(ns.refresh(), filter)
    assert sql is not None
    opts = ns.storage_options
    counted: dict[tuple[str, Pin], tuple[int, int]] = {}  # (location, pin) -> (matching, rows)

    def count(task: ScanTask, schema: pa.Schema) -> tuple[int, int]:
        key = (task.location, Pin(task.read_version, task.read_branch, task.read_tag))
        if key not in counted:
            rows = open_table(task, opts).count_rows()
            counted[key] = (count_matching(task, schema, sql, opts), rows)
        return counted[key]

    dropped: list[DroppedPartition] = []

    def plan_commit(snap: ManifestSnapshot) -> ManifestEdit:
        dropped.clear()
        schema = snapshot_schema(snap, f"{ns.uri} (__manifest version {snap.version})")
        tasks = list(plan_scan(snap, schema, ns.uri, sql, by_stats=False).tasks)
        counts = parallel_map(lambda t: count(t, schema), tasks)
        partial = [t for t, (match, rows) in zip(tasks, counts, strict=True) if 0 < match < rows]
        if partial:
            shown = "; ".join(json.dumps(t.partition_values, default=str) for t in partial[:10])
            raise PartialPartitionError(
                f"filter {sql!r} matches only some rows of {len(partial)} partition(s) "
                f"({shown}); a partition is dropped only when all its rows match. Nothing "
                "was dropped",
                [t.object_id for t in partial],
                [t.partition_values for t in partial],
            )
        edit = ManifestEdit()
        for t, (match, rows) in zip(tasks, counts, strict=True):
            if match == rows:
                edit.deletes.add(t.object_id)
                dropped.append(DroppedPartition(t.object_id, t.location, t.partition_values, rows))
        if not dropped:
            raise NothingToCommit
        delete_empty_namespaces(snap, edit)
        edit.properties = CommitSummary(
            Operation.DROP_PARTITIONS,
            overwritten=tuple(p.object_id for p in dropped),
            writer=WRITER_ID,
            filter=sql,
        ).to_properties()
        return edit

    try:
        version = ns.store.commit(load_snapshot, plan_commit).version
    except NothingToCommit:
        dropped.clear()
        version = ns.refresh().version
    ns.refresh()
    return DropResult(version, tuple(sorted(dropped, key=lambda p: p.object_id)))
