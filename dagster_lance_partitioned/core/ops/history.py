"""The commit history of a partitioned namespace: for each ``__manifest`` version, who made it
(its commit properties) and which partition tables it registered, moved or deregistered."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import storage
from ..errors import NotAPartitionedNamespaceError, is_storage_failure, storage_error
from ..manifest.commit_summary import CommitSummary
from ..manifest.snapshot import ManifestSnapshot
from ..manifest.state import load_snapshot, registered_partitions
from ..manifest.store import ManifestStore


@dataclass(frozen=True)
class TableChange:
    """One partition table a commit changed."""

    object_id: str
    spec_id: int
    values: dict[str, Any]
    kind: str  # 'added' | 'updated' | 'removed'
    read_version: int | None  # after the commit (None when removed)
    previous_read_version: int | None  # before it (None when added)


@dataclass(frozen=True)
class Commit:
    """One ``__manifest`` version and what it changed."""

    version: int
    properties: dict[str, str] | None  # this package's commit properties (None: another tool)
    changes: tuple[TableChange, ...]

    @property
    def summary(self) -> CommitSummary | None:
        """The properties read as a :class:`~.manifest.commit_summary.CommitSummary` (None: another
        tool's commit; one without ``overwritten`` counts as having replaced every table)."""
        return None if self.properties is None else CommitSummary.from_properties(self.properties)

    @property
    def operation(self) -> str | None:
        """``write``, ``compact``, ... for commits of this package."""
        summary = self.summary
        return None if summary is None or summary.operation is None else str(summary.operation)

    @property
    def source(self) -> str | None:
        """Who wrote it, when the writer said (``dlp.source``), e.g. the Dagster IO manager."""
        summary = self.summary
        return None if summary is None else summary.source


def _snapshot(store: ManifestStore, version: int | None = None) -> ManifestSnapshot:
    """The manifest ``version`` (default: the latest), checked as opening it checks it."""
    ds = store.dataset(version) if version is not None else store.open_latest()
    return load_snapshot(ds).verify(latest=version is None)


def _tables(store: ManifestStore, version: int) -> dict[str, dict[str, Any]]:
    """The partition tables registered at ``version`` (none before the namespace was created,
    nor at its first version, which ``create`` commits before the spec)."""
    if version < 1:
        return {}
    try:
        snap = _snapshot(store, version)
    except NotAPartitionedNamespaceError:
        if version == 1:
            return {}
        raise
    return {p["object_id"]: p for p in registered_partitions(snap)}


def commits(
    uri: str | os.PathLike[str],
    since: int,
    until: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> Iterator[Commit]:
    """The commits after manifest version ``since`` (0: from the first) up to ``until``
    (default: the latest), oldest first. Metadata-only commits (a new spec version, schema
    evolution) have no changes. Versions a cleanup removed are skipped, and so is the oldest
    version still on storage (what it changed went with its predecessor). Raw Lance / Arrow
    failures, also while iterating, are raised as :class:`~.errors.StorageError`."""
    root = storage.normalize_root(uri)
    try:
        yield from _commits(ManifestStore(root, storage_options), since, until)
    except Exception as e:
        if not is_storage_failure(e):
            raise
        raise storage_error(e, root, "reading the commit history") from None


def _commits(store: ManifestStore, since: int, until: int | None) -> Iterator[Commit]:
    until = _snapshot(store).version if until is None else until
    oldest = min(int(ref["version"]) for ref in store.dataset().version_refs())
    if since + 1 < oldest:  # the versions before it are gone: start after it
        since = oldest
    before = _tables(store, since)
    for version in range(since + 1, until + 1):
        after = _tables(store, version)
        changes = [
            TableChange(
                oid,
                p["spec_id"],
                p["values"],
                "added" if oid not in before else "updated",
                p["read_version"],
                before[oid]["read_version"] if oid in before else None,
            )
            for oid, p in after.items()
            if oid not in before or _pin(before[oid]) != _pin(p)
        ]
        changes += [
            TableChange(oid, p["spec_id"], p["values"], "removed", None, p["read_version"])
            for oid, p in before.items()
            if oid not in after
        ]
        yield Commit(version, store.commit_properties(version), tuple(changes))
        before = after


def _pin(p: dict[str, Any]) -> tuple[Any, ...]:
    return (p["read_version"], p["read_branch"], p["read_tag"])
