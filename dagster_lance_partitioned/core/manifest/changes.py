"""Changes of a namespace's table metadata (its schema and partition specs) as steps: each
step computes the keys it sets from the metadata before it, so a series of steps can be checked
on any manifest version, folded into one set of keys and committed in one manifest commit
(schema evolution, spec updates and transactions are built from them)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import lance

from ..errors import CommitConflictError
from ..partitioning.partition_spec import specs_from_metadata
from .commit_summary import PROP_STEPS, PROP_TRANSACTION, CommitSummary, Operation
from .edit import ManifestEdit, NothingToCommit
from .snapshot import ManifestSnapshot
from .state import NamespaceState, load_snapshot
from .store import COMMIT_TIMEOUT_SECONDS, ManifestStore

log = logging.getLogger(__name__)

EVOLVE_OPERATION = Operation.EVOLVE  # a commit of several steps at once
TRANSACTION_PROPERTY = PROP_TRANSACTION


@dataclass(frozen=True)
class MetadataStep:
    """One change of table metadata: ``apply(metadata)`` returns the keys it sets, raising
    a package error (naming the column or field) when the change is refused there."""

    operation: str
    apply: Callable[[Mapping[str, str]], dict[str, str]]


def fold(metadata: Mapping[str, str], steps: Sequence[MetadataStep]) -> dict[str, str]:
    """The keys ``steps``, applied in order on top of ``metadata``, set to a new value."""
    current = dict(metadata)
    for step in steps:
        current.update(step.apply(current))
    return {k: v for k, v in current.items() if metadata.get(k) != v}


def apply_to(snap: ManifestSnapshot, updates: Mapping[str, str]) -> ManifestSnapshot:
    """A view of ``snap`` with ``updates`` set in its metadata (its rows unchanged): what the
    manifest version after a commit of ``updates`` on ``snap`` reads as."""
    view = ManifestSnapshot(snap.dataset, [])
    view.metadata.update(updates)
    view.specs = {s.spec_id: s for s in specs_from_metadata(view.metadata)}
    view._specs_key = tuple(sorted(view.specs.items()))
    return view


def operation_of(operations: Sequence[str]) -> Operation | str:
    """Commit property ``operation`` of a commit of steps of ``operations``."""
    ops = set(operations)
    return ops.pop() if len(ops) == 1 else EVOLVE_OPERATION


def commit_steps(
    store: ManifestStore,
    steps: Sequence[MetadataStep],
    *,
    properties: Mapping[str, str] | None = None,
) -> ManifestSnapshot:
    """Commit ``steps`` as one manifest commit, planned on the latest version (again after a
    concurrent commit wins). Returns the version made (the latest one, when the steps change
    nothing)."""

    def plan(snap: ManifestSnapshot) -> ManifestEdit | None:
        updates = fold(snap.metadata, steps)
        if not updates:
            return None
        return _edit(updates, [s.operation for s in steps], properties or {})

    return store.commit(lambda ds: ManifestSnapshot(ds, []), plan)


@dataclass(frozen=True)
class Changes:
    """Table-metadata keys a transaction sets (``updates``), the values they had on the
    version it was prepared on (``before``; None: absent), the operations that made them and
    the transaction's id: what work prepared meanwhile (data written under the new schema and
    spec) relies on. Serializable (:meth:`to_json`), for engines that commit on another
    process."""

    updates: dict[str, str]
    before: dict[str, str | None]
    operations: tuple[str, ...]
    transaction_id: str

    @classmethod
    def prepare(
        cls, metadata: Mapping[str, str], steps: Sequence[MetadataStep], transaction_id: str
    ) -> Changes:
        """The changes ``steps`` make on top of ``metadata``."""
        updates = fold(metadata, steps)
        before = {k: metadata.get(k) for k in updates}
        return cls(updates, before, tuple(s.operation for s in steps), transaction_id)

    def to_json(self) -> str:
        """The changes as JSON text."""
        return json.dumps(
            {
                "updates": self.updates,
                "before": self.before,
                "operations": list(self.operations),
                "transaction": self.transaction_id,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Changes:
        """The changes of :meth:`to_json`'s text."""
        raw = json.loads(text)
        return cls(
            dict(raw["updates"]),
            dict(raw["before"]),
            tuple(raw["operations"]),
            str(raw["transaction"]),
        )

    def made_in(self, metadata: Mapping[str, str]) -> bool:
        """Whether ``metadata`` holds every key as these changes set it."""
        return all(metadata.get(k) == v for k, v in self.updates.items())

    def properties(self) -> dict[str, str]:
        """Commit properties linking a commit to the transaction."""
        return {TRANSACTION_PROPERTY: self.transaction_id}


def commit_changes(store: ManifestStore, changes: Changes) -> ManifestSnapshot:
    """Commit ``changes`` in one manifest commit on the latest version, when the keys they set
    still hold their ``before`` values there (or hold the changes' values already: a
    concurrent transaction made the same changes; then nothing is committed); else
    :class:`CommitConflictError`, nothing committed."""

    def plan(snap: ManifestSnapshot) -> ManifestEdit | None:
        if changes.made_in(snap.metadata):
            return None
        moved = sorted(k for k in changes.updates if snap.metadata.get(k) != changes.before[k])
        if moved:
            raise CommitConflictError(
                f"{store.root}: the namespace's {', '.join(moved)} changed while this "
                "transaction was prepared; nothing of it is visible, retry it"
            )
        return _edit(changes.updates, changes.operations, changes.properties())

    return store.commit(lambda ds: ManifestSnapshot(ds, []), plan)


def _edit(
    updates: Mapping[str, str], operations: Sequence[str], properties: Mapping[str, str]
) -> ManifestEdit:
    steps = {PROP_STEPS: json.dumps(list(operations))} if len(operations) > 1 else {}
    summary = CommitSummary(operation_of(operations), user={**steps, **properties})
    metadata: dict[str, str | None] = dict(updates)
    return ManifestEdit(metadata=metadata, properties=summary.to_properties())


class ChangesFirstStore(ManifestStore):
    """The store a data operation prepared under uncommitted ``changes`` commits through:
    before its manifest commit, the operation's plan is tried on the latest version with the
    changes applied (so every refusal comes while nothing is committed), then the changes are
    committed (:func:`commit_changes`), then the data. A data commit that fails after the
    changes landed reverts them when nothing else was committed since."""

    def __init__(self, store: ManifestStore, changes: Changes) -> None:
        super().__init__(store.root, store.storage_options)
        self._inner = store
        self.changes = changes
        self.made: ManifestSnapshot | None = None  # the version the changes made (or found)

    def commit(
        self,
        load: Callable[[lance.LanceDataset], ManifestSnapshot],
        plan: Callable[[ManifestSnapshot], ManifestEdit | None],
        timeout: float = COMMIT_TIMEOUT_SECONDS,
        known: ManifestSnapshot | None = None,
    ) -> ManifestSnapshot:
        # ``known`` (the data's base) precedes the changes' commit: never the newest here
        if self.made is None:
            nothing = False
            try:
                plan(apply_to(load_latest(self._inner), self.changes.updates))
            except NothingToCommit:
                nothing = True
            self.commit_changes()
            if nothing:
                raise NothingToCommit
        try:
            return self._inner.commit(load, plan, timeout)
        except BaseException:
            self._revert()
            raise

    def commit_changes(self) -> ManifestSnapshot:
        """Commit the changes (once); the version holding them."""
        if self.made is None:
            self.made = commit_changes(self._inner, self.changes)
        return self.made

    def _revert(self) -> None:
        """Undo the committed changes when the latest version is still theirs."""
        made = self.made
        if made is None or not self.changes.made_in(made.metadata):
            return
        restore: dict[str, str | None] = dict(self.changes.before)

        def plan(snap: ManifestSnapshot) -> ManifestEdit | None:
            if snap.version != made.version:
                log.warning(
                    "%s: a transaction's data commit failed after its schema/spec changes "
                    "(version %d) and other commits followed them: the changes stay",
                    self.root,
                    made.version,
                )
                return None
            summary = CommitSummary(Operation.REVERT, user=self.changes.properties())
            return ManifestEdit(metadata=restore, properties=summary.to_properties())

        try:
            self._inner.commit(lambda ds: ManifestSnapshot(ds, []), plan)
        except Exception:  # the original failure is what the caller needs to see
            log.warning("%s: reverting a failed transaction's changes failed", self.root)


class ChangedState(NamespaceState):
    """The namespace as uncommitted changes leave it: the latest version with the changes in
    its metadata, until ``store`` has committed them (then the latest version as it is)."""

    def __init__(self, store: ChangesFirstStore, latest: ManifestSnapshot | None = None) -> None:
        base = latest if latest is not None else load_latest(store)
        super().__init__(store, apply_to(base, store.changes.updates), False)
        self._changes = store

    def refresh(self) -> NamespaceState:
        latest = load_latest(self._changes)
        if self._changes.made is None:
            latest = apply_to(latest, self._changes.changes.updates)
        self.snapshot = latest
        return self


def load_latest(store: ManifestStore) -> ManifestSnapshot:
    """The latest manifest version of ``store`` as a checked snapshot."""
    return load_snapshot(store.open_latest()).verify(latest=True)


__all__ = [
    "EVOLVE_OPERATION",
    "TRANSACTION_PROPERTY",
    "ChangedState",
    "Changes",
    "ChangesFirstStore",
    "MetadataStep",
    "apply_to",
    "commit_changes",
    "commit_steps",
    "fold",
    "load_latest",
    "operation_of",
]
