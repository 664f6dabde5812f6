"""The one producer of partition-table versions: open a table at the version a manifest row
pins, make a new **detached** version built on exactly that content, create a new table.

Writes, row-level changes and compaction all make their versions here; they differ in what the
new version holds, not in how it is made. A detached version is reachable only through the
``read_version`` a manifest commit registers, so a change that never reaches its manifest
commit leaves nothing readers see.

Lance rebases a commit built on a main-line version onto later main-line versions (versions no
manifest registered, e.g. of a killed write). Such versions are rare, so
:func:`commit_on` commits on the base directly and checks the result; when it holds other
content than the operation makes of the base (it was rebased) or it conflicted, the version is
made again on a detached copy of the base (:func:`detached_copy`), which has no later versions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lance
import pyarrow as pa

from . import storage
from .errors import is_storage_failure
from .storage import DETACHED_BIT

Check = Callable[[lance.LanceDataset], bool]  # whether a new version holds what it should


def is_detached(version: int) -> bool:
    """Whether ``version`` is a detached version (Lance sets :data:`DETACHED_BIT` on them)."""
    return version >= DETACHED_BIT


def open_version(
    uri: str, version: int | str | None, storage_options: dict[str, str] | None
) -> lance.LanceDataset:
    """The table at ``uri`` at ``version`` (a number, a tag, or None: the latest of its main
    line), through the process's shared Lance session."""
    return lance.dataset(
        uri, version=version, storage_options=storage_options, session=storage.lance_session()
    )


def commit(
    target: str | lance.LanceDataset,
    op: Any,
    base: int,
    storage_options: dict[str, str] | None,
) -> lance.LanceDataset:
    """``op`` committed as a detached version with read version ``base``, through an open
    handle of ``base`` (no listing, no re-read) or a URI."""
    new: lance.LanceDataset = lance.LanceDataset.commit(
        target, op, read_version=base, detached=True, storage_options=storage_options
    )
    return new


def detached_copy(
    uri: str, base: lance.LanceDataset, storage_options: dict[str, str] | None
) -> lance.LanceDataset:
    """A detached version with exactly ``base``'s content (``base`` itself when detached)."""
    if is_detached(base.version):
        return base
    latest = open_version(uri, None, storage_options).version
    return commit(uri, lance.LanceOperation.Restore(base.version), latest, storage_options)


def commit_on(
    uri: str,
    base: lance.LanceDataset,
    op: Any,
    storage_options: dict[str, str] | None,
    check: Check | None = None,
) -> lance.LanceDataset:
    """``op`` as a detached version built on exactly ``base``'s content (see the module doc):
    committed on ``base`` directly, and again on a detached copy of it when ``base`` is on the
    main line and the result fails ``check`` or the commit conflicted."""
    if is_detached(base.version):
        return commit(base, op, base.version, storage_options)
    try:
        new = commit(base, op, base.version, storage_options)
    except Exception as e:  # a conflict with a later main-line version
        if not is_storage_failure(e) and "conflict" not in str(e).lower():
            raise
    else:
        if check is None or check(new):
            return new
    copy = detached_copy(uri, base, storage_options)
    return commit(copy, op, copy.version, storage_options)


def appended(base: lance.LanceDataset, added: int) -> Check:
    """The check of an append of ``added`` fragments to ``base``: every fragment of ``base``
    kept, ``added`` more."""
    before = {f.fragment_id for f in base.get_fragments()}

    def check(new: lance.LanceDataset) -> bool:
        after = {f.fragment_id for f in new.get_fragments()}
        return before <= after and len(after) == len(before) + added

    return check


def updated(base: lance.LanceDataset, removed: list[int], added: int, rows: int) -> Check:
    """The check of an update of ``base`` removing the fragments ``removed``, adding
    ``added`` and leaving ``rows`` rows."""
    gone = set(removed)
    kept = [f.fragment_id for f in base.get_fragments() if f.fragment_id not in gone]

    def check(new: lance.LanceDataset) -> bool:
        got = [f.fragment_id for f in new.get_fragments()]
        return (
            got[: len(kept)] == kept
            and len(got) == len(kept) + added
            and (new.count_rows() == rows)
        )

    return check


def create(
    uri: str,
    rows: pa.Table | pa.RecordBatchReader,
    schema: pa.Schema,
    storage_options: dict[str, str] | None,
    max_rows_per_file: int,
) -> lance.LanceDataset:
    """A new table at ``uri`` holding ``rows`` (its first, main-line version)."""
    ds: lance.LanceDataset = lance.write_dataset(
        rows,
        uri,
        schema=schema,
        mode="create",
        max_rows_per_file=max_rows_per_file,
        storage_options=storage_options,
        session=storage.lance_session(),
    )
    return ds


def create_from(uri: str, op: Any, storage_options: dict[str, str] | None) -> lance.LanceDataset:
    """A new table at ``uri`` made by ``op`` (an ``Overwrite`` of fragments written before,
    e.g. by the workers of a distributed write)."""
    ds: lance.LanceDataset = lance.LanceDataset.commit(uri, op, storage_options=storage_options)
    return ds


__all__ = [
    "Check",
    "appended",
    "commit",
    "commit_on",
    "create",
    "create_from",
    "detached_copy",
    "is_detached",
    "open_version",
    "updated",
]
