"""Filling in table statistics: the partition tables registered without them (written before
this package recorded them, imported, or moved by another writer) are read once and their
statistics registered in one manifest commit, without changing any table version."""

from __future__ import annotations

from dataclasses import dataclass

from ..concurrency import parallel_map
from ..expr.filters import FilterLike
from ..manifest.commit_summary import WRITER_ID, CommitSummary, Operation
from ..manifest.edit import ManifestEdit, NothingToCommit
from ..manifest.registration import Pin, pin_of, stats_record
from ..manifest.snapshot import ManifestSnapshot
from ..manifest.state import HasState, NamespaceState, load_snapshot, state_of
from ..manifest.stats import TableStats
from ..read.planning import ScanTask, plan_namespace
from ..read.scan import collect


@dataclass(frozen=True)
class StatisticsResult:
    """What ``collect_statistics`` did: the manifest version that registered the statistics
    (the current one when there was nothing to do), the partitions it read, and those whose
    pin a concurrent commit moved meanwhile (their new version carries its own)."""

    manifest_version: int
    partitions: tuple[str, ...]
    skipped: tuple[str, ...] = ()


def collect_statistics(
    ns: NamespaceState | HasState, filter: FilterLike = None, *, refresh: bool = False
) -> StatisticsResult:
    """Read every selected partition table (``filter`` as in ``plan_scan``) that has no
    statistics for its pinned version (``refresh``: every selected table) and register them
    in one manifest commit; the pins stay as they are. Tables pinned to a branch or a tag are
    left alone (statistics describe a version number)."""
    state = state_of(ns)
    state.require_unpinned("collect statistics")
    state.refresh()
    schema = state.schema_with_ids
    plan = plan_namespace(state, filter, by_stats=False)
    todo = [
        t
        for t in plan.tasks
        if t.read_version is not None
        and t.read_branch is None
        and t.read_tag is None
        and (refresh or t.stats is None)
    ]
    if not todo:
        return StatisticsResult(state.version, ())
    found = parallel_map(lambda t: collect(t, schema, state.storage_options), todo)
    made = dict(zip((t.object_id for t in todo), zip(todo, found, strict=True), strict=True))
    registered: list[str] = []
    skipped: list[str] = []

    def plan_commit(snap: ManifestSnapshot) -> ManifestEdit:
        registered.clear()
        skipped.clear()
        current = {t.object_id: t for t in snap.tables()}
        edit = ManifestEdit()
        for oid, (task, stats) in made.items():
            entry = current.get(oid)
            if entry is None or entry.location != task.location or pin_of(entry) != _pin(task):
                skipped.append(oid)
                continue
            assert task.read_version is not None
            edit.upserts[oid] = stats_record(edit, task.read_version, stats)
            registered.append(oid)
        if not registered:
            raise NothingToCommit
        edit.properties = CommitSummary(Operation.STATISTICS, writer=WRITER_ID).to_properties()
        return edit

    try:
        version = state.store.commit(load_snapshot, plan_commit).version
    except NothingToCommit:
        version = state.version
    state.refresh()
    return StatisticsResult(version, tuple(sorted(registered)), tuple(sorted(skipped)))


def _pin(task: ScanTask) -> Pin:
    return Pin(task.read_version, task.read_branch, task.read_tag)


__all__ = ["StatisticsResult", "TableStats", "collect_statistics"]
