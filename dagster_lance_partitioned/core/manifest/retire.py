"""Deletion safe by protocol: maintenance announces in ``__manifest`` what it is about to delete
(a *retirement*), and deletes it only after the announcement landed; a commit that would
register a table version made before the announcement, and that depends on anything it names,
conflicts (nothing of it becomes visible).

An announcement is two manifest commits: a table-metadata commit carrying the retirement, then
a row-level commit re-writing the sentinel row, with which every row-level commit conflicts.
A commit planned before the second cannot land after it without planning again on a manifest
that carries the retirement; one that landed before it is seen by maintenance, which reads the
pins only after its announcement. The manifest's own put-if-absent commit orders the two, on
object stores as on local disk. ``older_than`` and ``grace`` decide only what counts as
garbage, never what is safe. This module is the protocol's format and checks, below the
manifest commit that runs them; the announcement itself is :func:`~.ops.maintenance.announce`.

Stored in the ``__manifest`` table metadata (this package's extension of the format, see
docs/reference/format.md):

- ``dlp.retirements``: JSON list of the epochs (1, 2, ...) of the most recent
  :data:`KEPT_FENCES` announcements, oldest first (absent: none yet);
- ``dlp.retire.<epoch % KEPT_FENCES>``: JSON ``{"epoch": e, "versions": {location: [table
  versions]}, "files": [locations], "tables": [locations], "all": false}``: the table versions
  cleanup removes (with the files only they reference), the tables in which vacuum removes
  files no version references, the orphan table directories vacuum removes whole (``all``: a
  retirement too large to list, naming every table).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import MaintenanceConflictError

FENCES_KEY = "dlp.retirements"
SLOT_PREFIX = "dlp.retire."
KEPT_FENCES = 16  # announcements remembered (a commit made before older ones conflicts)
MAX_MARKS_BYTES = 64 * 1024  # larger retirements are stored by location, then as "all"


class Snapshot(Protocol):
    """A manifest version (a :class:`~.snapshot.ManifestSnapshot`): its table metadata."""

    @property
    def metadata(self) -> Mapping[str, str]: ...


class Store(Protocol):
    """A namespace's manifest store (a :class:`~.store.ManifestStore`): its root."""

    @property
    def root(self) -> str: ...


@dataclass(frozen=True)
class Retirement:
    """What one maintenance run is about to delete (see the module doc)."""

    versions: Mapping[str, frozenset[int]] = field(default_factory=dict)
    files: frozenset[str] = frozenset()
    tables: frozenset[str] = frozenset()
    everything: bool = False

    def __bool__(self) -> bool:
        return bool(self.versions or self.files or self.tables or self.everything)

    def to_json(self, epoch: int) -> str:
        """The stored form of this retirement as announcement ``epoch`` (bounded in size: a
        large one names whole tables, a huge one every table)."""
        value = {
            "epoch": epoch,
            "versions": {loc: sorted(vs) for loc, vs in sorted(self.versions.items())},
            "files": sorted(self.files),
            "tables": sorted(self.tables),
            "all": self.everything,
        }
        text = json.dumps(value, separators=(",", ":"))
        if len(text) > MAX_MARKS_BYTES:
            value["files"] = sorted(self.files | set(self.versions))
            value["versions"] = {}
            text = json.dumps(value, separators=(",", ":"))
        if len(text) > MAX_MARKS_BYTES:
            text = json.dumps({"epoch": epoch, "all": True}, separators=(",", ":"))
        return text

    @classmethod
    def from_json(cls, text: str) -> tuple[int, Retirement]:
        """Read a stored retirement: its epoch and itself."""
        value = json.loads(text)
        return int(value["epoch"]), cls(
            {loc: frozenset(int(v) for v in vs) for loc, vs in value.get("versions", {}).items()},
            frozenset(value.get("files", ())),
            frozenset(value.get("tables", ())),
            bool(value.get("all", False)),
        )

    def names(self, use: Use) -> bool:
        """Whether ``use`` depends on something this retirement deletes."""
        if self.everything or use.location in self.tables or use.location in self.files:
            return True
        gone = self.versions.get(use.location, frozenset())
        return use.version in gone or use.base in gone


@dataclass(frozen=True)
class Use:
    """A table version a commit registers: made at ``location`` on top of version ``base``
    (None: a new table), before the commit, from a manifest whose retirement epoch was
    ``epoch``."""

    location: str
    version: int | None
    base: int | None
    epoch: int


def fences(snap: Snapshot) -> list[int]:
    """The epochs of the announcements ``snap`` remembers, oldest first."""
    text = snap.metadata.get(FENCES_KEY)
    return [int(e) for e in json.loads(text)] if text else []


def epoch(snap: Snapshot) -> int:
    """The number of announcements made up to ``snap`` (0: none)."""
    known = fences(snap)
    return known[-1] if known else 0


def _slot(epoch: int) -> str:
    return f"{SLOT_PREFIX}{epoch % KEPT_FENCES}"


def _since(snap: Snapshot, after: int) -> list[Retirement] | None:
    """The retirements announced after epoch ``after`` up to ``snap`` (None: not all known)."""
    out = []
    for e in range(after + 1, epoch(snap) + 1):
        text = snap.metadata.get(_slot(e))
        if text is None:
            return None
        stored, retirement = Retirement.from_json(text)
        if stored != e:
            return None  # forgotten (its slot holds a later one): assume the worst
        out.append(retirement)
    return out


def conflicting(snap: Snapshot, uses: Iterable[Use]) -> list[Use]:
    """The ``uses`` named by retirements announced after their epoch, up to ``snap``."""
    current = epoch(snap)
    found: list[Use] = []
    cache: dict[int, list[Retirement] | None] = {}
    for use in uses:
        if use.epoch >= current:
            continue
        if use.epoch not in cache:
            cache[use.epoch] = _since(snap, use.epoch)
        retired = cache[use.epoch]
        if retired is None or any(r.names(use) for r in retired):
            found.append(use)
    return found


def check(store: Store, snap: Snapshot, uses: Iterable[Use]) -> None:
    """Raise :class:`MaintenanceConflictError` when one of ``uses`` (table versions a commit
    planned on ``snap`` registers) is named by a retirement announced after it was made."""
    bad = conflicting(snap, uses)
    if bad:
        shown = ", ".join(
            f"{u.location} version {u.version}" if u.version is not None else u.location
            for u in bad[:5]
        )
        raise MaintenanceConflictError(
            f"{store.root}: a maintenance run (cleanup / vacuum) retired table versions or "
            f"files that {len(bad)} table version(s) of this commit depend on ({shown}) while "
            "it was running; nothing of it is visible, retry it",
            sorted({u.location for u in bad}),
        )


def announcement(snap: Snapshot, retirement: Retirement) -> dict[str, str | None]:
    """The table-metadata keys that announce ``retirement`` in the manifest version after
    ``snap`` (the first of an announcement's two commits, see the module doc and
    :func:`~.ops.maintenance.announce`)."""
    e = epoch(snap) + 1
    kept = [*fences(snap), e][-KEPT_FENCES:]
    return {FENCES_KEY: json.dumps(kept), _slot(e): retirement.to_json(e)}
