"""Registering new versions of registered partition tables (compaction, index builds): each
made on exactly the version its manifest row pinned, all registered in one manifest commit;
a table whose pin a concurrent commit changed (or whose version a cleanup retired) keeps that
commit's version and is reported as skipped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .health import Pin, pin_of
from .manifest import ManifestSnapshot
from .manifest_ops import ManifestEdit
from .retire import Use, conflicting
from .state import NamespaceState, load_snapshot


@dataclass(frozen=True)
class Revision:
    """A new version ``version`` of the table ``object_id`` at ``location``, made on the
    version ``pin`` registered."""

    object_id: str
    location: str
    pin: Pin
    version: int


@dataclass(frozen=True)
class Registered:
    """The outcome of :func:`register`: the manifest version after it (unchanged when nothing
    was committed) and the object ids registered and skipped."""

    manifest_version: int
    committed: tuple[str, ...]
    skipped: tuple[str, ...]


class _NothingToCommit(Exception):
    pass


def register(
    ns: NamespaceState,
    revisions: Sequence[Revision],
    properties: dict[str, str],
    made_at: int,
) -> Registered:
    """Register ``revisions`` in one manifest commit with ``properties`` (``made_at``: the
    retirement epoch of the manifest they were made from)."""
    if not revisions:
        return Registered(ns.refresh().version, (), ())
    committed: list[str] = []
    skipped: list[str] = []

    def use(r: Revision) -> Use:
        return Use(r.location, r.version, r.pin.read_version, made_at)

    def plan(snap: ManifestSnapshot) -> ManifestEdit:
        committed.clear()
        skipped.clear()
        current = {t.object_id: t for t in snap.tables()}
        edit = ManifestEdit(properties=dict(properties))
        retired = {u.location for u in conflicting(snap, [use(r) for r in revisions])}
        for r in revisions:
            entry = current.get(r.object_id)
            if (
                entry is None
                or entry.location != r.location
                or pin_of(entry) != r.pin
                or r.location in retired
            ):
                skipped.append(r.object_id)
                continue
            edit.upserts[r.object_id] = {"read_version": r.version}
            edit.uses.append(use(r))
            committed.append(r.object_id)
        if not committed:
            raise _NothingToCommit
        return edit

    try:
        version = ns.store.commit(load_snapshot, plan).version
    except _NothingToCommit:
        version = ns.refresh().version
    ns.refresh()
    return Registered(version, tuple(sorted(committed)), tuple(sorted(skipped)))
