"""Registering new versions of registered partition tables (:class:`.TableVersion`s of
compaction and index builds): each made on exactly the version its manifest row pinned, all
registered in one manifest commit;
a table whose pin a concurrent commit changed (or whose version a cleanup retired) keeps that
commit's version and is reported as skipped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .commit_summary import CommitSummary
from .edit import ManifestEdit, NothingToCommit
from .registration import TableVersion, pin_of, pin_version
from .retire import Use, conflicting
from .snapshot import ManifestSnapshot
from .state import NamespaceState, load_snapshot


@dataclass(frozen=True)
class Registered:
    """The outcome of :func:`register`: the manifest version after it (unchanged when nothing
    was committed) and the object ids registered and skipped."""

    manifest_version: int
    committed: tuple[str, ...]
    skipped: tuple[str, ...]


def register(
    ns: NamespaceState,
    revisions: Sequence[TableVersion],
    summary: CommitSummary,
    made_at: int,
) -> Registered:
    """Register ``revisions`` in one manifest commit recorded as ``summary`` (``made_at``: the
    retirement epoch of the manifest they were made from)."""
    if not revisions:
        return Registered(ns.refresh().version, (), ())
    committed: list[str] = []
    skipped: list[str] = []

    def use(r: TableVersion) -> Use:
        used = r.use(made_at)
        assert used is not None and r.object_id is not None
        return used

    def plan(snap: ManifestSnapshot) -> ManifestEdit:
        committed.clear()
        skipped.clear()
        current = {t.object_id: t for t in snap.tables()}
        edit = ManifestEdit(properties=summary.to_properties())
        retired = {u.location for u in conflicting(snap, [use(r) for r in revisions])}
        for r in revisions:
            assert r.object_id is not None
            entry = current.get(r.object_id)
            if (
                entry is None
                or entry.location != r.location
                or pin_of(entry) != r.base
                or r.location in retired
            ):
                skipped.append(r.object_id)
                continue
            pin_version(edit, r.object_id, r.version, r.stats)
            edit.uses.append(use(r))
            committed.append(r.object_id)
        if not committed:
            raise NothingToCommit
        return edit

    try:
        version = ns.store.commit(load_snapshot, plan).version
    except NothingToCommit:
        version = ns.refresh().version
    ns.refresh()
    return Registered(version, tuple(sorted(committed)), tuple(sorted(skipped)))
