"""Faults injected at the moment between a change's table commits and its ``__manifest`` commit,
by patching the production calls made there (no hook in the package itself).

- Writes (:meth:`PartitionedNamespace.write`): :class:`CommitHooks` calls ``hook(pending)`` once
  every partition table of the write is committed, just before ``manifest_commit.commit`` (the
  mode's :class:`~dagster_lance_partitioned.core.write.commit.WriteCommit`). In tests, the
  ``before_commit`` fixture (tests/conftest.py) patches through ``monkeypatch``; subprocess
  scripts patch for their whole process with :meth:`CommitHooks.install`.
- Row changes (merge / update / delete of ``core.row_changes``): :func:`before_row_change_commit`
  calls ``hook()`` once, when the first manifest commit attempt has been planned (its detached
  versions made), before it is committed; a commit landing in the hook makes the change re-plan.

A hook belongs to one namespace object (its manifest store): writes of other objects on the same
root, e.g. a concurrent writer the hook itself uses, run unhooked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from dagster_lance_partitioned.core.write.pending import PendingPartition
from dagster_lance_partitioned.core.write.writer import PartitionWriter

Hook = Callable[[list[PendingPartition]], None]
ROW_CHANGES = frozenset({"merge", "update", "delete"})  # commit property ``operation``


class CommitHooks:
    """Per-namespace hooks of writes: ``hooks(ns, hook)`` sets ``ns``'s, ``hooks(ns, None)``
    clears it. Active once :meth:`patch` (or :meth:`install`) wrapped ``PartitionWriter.finish``
    (which writes the table versions and makes the manifest commit)."""

    def __init__(self) -> None:
        self._hooks: list[tuple[object, Hook]] = []

    def __call__(self, ns: Any, hook: Hook | None) -> None:
        store = ns.state.store
        self._hooks = [(s, h) for s, h in self._hooks if s is not store]
        if hook is not None:
            self._hooks.append((store, hook))

    def hook_of(self, store: object) -> Hook | None:
        return next((h for s, h in self._hooks if s is store), None)

    def patch(self, setattr: Callable[[Any, str, Any], Any]) -> CommitHooks:
        """Wrap ``PartitionWriter.finish`` through ``setattr`` (``monkeypatch.setattr``)."""
        finish = PartitionWriter.finish
        hooks = self

        def hooked_finish(writer: PartitionWriter) -> Any:
            hook = hooks.hook_of(writer.store)
            if hook is not None:
                commit = writer.manifest_commit.commit

                def commit_after_hook(pending: Sequence[PendingPartition]) -> Any:
                    hook(list(pending))
                    return commit(pending)

                writer.manifest_commit.commit = commit_after_hook  # type: ignore[method-assign]
            return finish(writer)

        setattr(PartitionWriter, "finish", hooked_finish)
        return self

    @classmethod
    def install(cls) -> CommitHooks:
        """Hooks patched in for the rest of the process (a subprocess script's)."""
        return cls().patch(setattr)


@contextmanager
def before_manifest_commit(ns: Any, hook: Hook) -> Iterator[None]:
    """Within the block, ``ns``'s writes call ``hook(pending)`` just before their manifest
    commit (for helpers without the ``before_commit`` fixture)."""
    with pytest.MonkeyPatch.context() as mp:
        CommitHooks().patch(mp.setattr)(ns, hook)
        yield


@contextmanager
def before_row_change_commit(ns: Any, hook: Callable[[], None]) -> Iterator[None]:
    """Within the block, ``hook()`` runs once: when a merge / update / delete of ``ns`` has
    planned its first manifest commit attempt, before that attempt commits."""
    store = ns.state.store
    commit = store.commit
    pending = [hook]

    def hooked_commit(load: Any, plan: Callable[[Any], Any], *args: Any, **kwargs: Any) -> Any:
        def planned(snap: Any) -> Any:
            edit = plan(snap)
            if pending and edit is not None and edit.properties.get("operation") in ROW_CHANGES:
                pending.pop()()
            return edit

        return commit(load, planned, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store, "commit", hooked_commit)
        yield
