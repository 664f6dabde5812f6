"""The ``__manifest`` table on storage: creating it, opening its versions as
:class:`~.snapshot.ManifestSnapshot` values, and committing changes to it as single Lance
commits that rebase onto concurrent commits (its shape is :mod:`.layout`'s)."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

try:
    import fcntl
except ImportError:  # not on POSIX: writers race optimistically
    fcntl = None  # type: ignore[assignment]

import lance
import lance.commit
import pyarrow as pa
from lance import LanceOperation
from lance.dataset import Transaction
from lance.fragment import write_fragments

from .. import storage
from ..concurrency import decided_by, in_background
from ..errors import (
    CommitConflictError,
    ManifestError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    PartitionedNamespaceError,
    StorageError,
    clean_message,
    is_storage_failure,
    storage_error,
)
from ..schema.namespace_schema import (
    SCHEMA_KEY as SCHEMA_KEY,  # re-exported: a manifest metadata key
)
from . import retire
from .commit_summary import (
    PROP_OPERATION,
    CommitSummary,
    Operation,
    creation_properties,
)
from .edit import ManifestEdit, build_transaction, upkeep
from .layout import (
    COMMIT_PROPERTY_PREFIX,
    SEP,
)
from .snapshot import (
    MANIFEST_DIR,
    ManifestSnapshot,
)

# How long a commit keeps re-planning over concurrent commits before it gives up.
COMMIT_TIMEOUT_SECONDS = 120.0
COMMIT_LOCK = "_dlp_commit.lock"  # advisory turn-taking of local writers, see ManifestStore._turn
CREATE_WAIT_SECONDS = 10.0  # how long an open waits for a concurrent creation to complete


_HELD = threading.local()  # manifest paths whose commit turn this thread holds


class ManifestStore:
    """Reads and commits the ``__manifest`` table of one root."""

    def __init__(self, root: str, storage_options: dict[str, str] | None = None) -> None:
        self.root = root
        self.storage_options = storage_options
        self.uri = storage.join(root, MANIFEST_DIR)
        self._properties: dict[int, dict[str, str] | None] = {}

    def exists(self) -> bool:
        """Whether a ``__manifest`` table exists at the root."""
        try:
            self.dataset()
        except NamespaceNotFoundError:
            return False
        return True

    def dataset(self, version: int | None = None) -> lance.LanceDataset:
        """The ``__manifest`` Lance dataset, latest or at ``version``."""
        try:
            return lance.dataset(
                self.uri,
                version=version,
                storage_options=self.storage_options,
                session=storage.lance_session(),
            )
        except (ValueError, OSError, FileNotFoundError) as first:
            error: BaseException = first
        if not storage.manifest_exists(self.uri, self.storage_options):
            raise NamespaceNotFoundError(
                f"{self.root}: no partitioned namespace here (no readable __manifest table)"
            )
        if version is None:
            try:  # created between the failed open and the check: open it now
                return lance.dataset(
                    self.uri,
                    storage_options=self.storage_options,
                    session=storage.lance_session(),
                )
            except (ValueError, OSError, FileNotFoundError) as again:
                error = again
        if version is not None and "not found" in str(error).lower():
            raise ManifestError(
                f"{self.uri}: no manifest version {version}: {clean_message(error)}"
            )
        at = "latest version" if version is None else f"version {version}"
        if version is None and (newest := self._newest_version_file()):
            at += f", {MANIFEST_DIR}/_versions/{newest}"
        raise storage_error(error, self.root, f"opening __manifest ({at})")

    def create(self, rows: pa.Table, metadata: dict[str, str]) -> lance.LanceDataset:
        """Create ``__manifest`` holding ``rows`` with table ``metadata``; never replaces an
        existing manifest: of racing creators exactly one wins, the others get
        :class:`NamespaceExistsError`.

        Version 1 (the rows) is committed put-if-absent on top of "no dataset"; version 2 sets
        the metadata. Between the two the manifest is incomplete, which :meth:`open_latest`
        waits out."""
        exists = NamespaceExistsError(f"{self.root}: a __manifest table already exists here")
        if self.exists_on_storage():
            raise exists
        self.check_store()
        try:
            frags = write_fragments(
                rows,
                self.uri,
                schema=rows.schema,
                mode="create",
                storage_options=self.storage_options,
                session=storage.lance_session(),
            )
            tx = Transaction(
                read_version=0,
                operation=LanceOperation.Overwrite(rows.schema, frags),
                transaction_properties={
                    COMMIT_PROPERTY_PREFIX + k: v for k, v in creation_properties().items()
                },
            )
            ds = lance.LanceDataset.commit(
                self.uri, tx, storage_options=self.storage_options, max_retries=0
            )
        except (lance.commit.CommitConflictError, OSError, ValueError) as e:
            if self.exists_on_storage():
                raise exists from None  # another creator's version 1 landed first
            raise StorageError(
                f"{self.root}: cannot create __manifest: {clean_message(e)}",
                namespace=self.root,
                path=self.uri,
            ) from None
        if ds.version != 1:  # Lance put our create on top of a manifest that appeared
            raise exists
        return self.update_metadata(metadata, base_version=1, operation=Operation.CREATE)

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """On a local filesystem, writers on this machine take turns at the manifest commit
        (an advisory ``flock`` on ``__manifest/_dlp_commit.lock``), so concurrent writers do
        not waste attempts on each other; correctness never depends on it (Lance detects
        concurrent commits everywhere), and object stores race optimistically."""
        path = storage.local_path(self.uri)
        held = _HELD.__dict__.setdefault("paths", set())
        if path is None or fcntl is None or path in held:  # (a commit nested in a commit)
            yield
            return
        try:
            fd = os.open(os.path.join(path, COMMIT_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            yield  # read-only or gone: no turn-taking
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held.add(path)
            yield
        finally:
            held.discard(path)
            os.close(fd)  # releases the lock

    def check_store(self) -> None:
        """Refuse to commit to an object store without put-if-absent (probed once per store;
        see :mod:`.conditional_put`)."""
        from ..conditional_put import ensure_conditional_put

        ensure_conditional_put(self.root, self.storage_options)

    def _newest_version_file(self) -> str | None:
        """The name of the newest version file under ``_versions`` (best effort)."""
        try:
            files = storage.list_files(storage.join(self.uri, "_versions"), self.storage_options)
        except Exception:
            return None
        versions = {}
        for f in files:
            stem = f.path.removesuffix(".manifest")
            if f.path.endswith(".manifest") and stem.isdigit():
                # V2 names count down from u64::MAX, V1 names count up
                versions[_U64_MAX - int(stem) if len(stem) == 20 else int(stem)] = f.path
        return versions[max(versions)] if versions else None

    def newest_version(self) -> int | None:
        """The newest ``__manifest`` version by one listing (object stores; None when a
        listing cannot tell: then open the latest)."""
        return storage.newest_listed_version(self.uri, self.storage_options)

    def exists_on_storage(self) -> bool:
        """Whether any ``__manifest`` version file exists (even an incomplete creation)."""
        return storage.manifest_exists(self.uri, self.storage_options)

    def open_latest(self, wait: float = CREATE_WAIT_SECONDS) -> lance.LanceDataset:
        """The latest ``__manifest``; while a creation is between its two commits (version 1
        without table metadata), wait up to ``wait`` seconds for it to complete."""
        deadline = time.monotonic() + wait
        while True:
            ds = self.dataset()
            if not being_created(ds) or time.monotonic() > deadline:
                return ds
            time.sleep(0.02)

    def update_metadata(
        self, values: dict[str, str], base_version: int, operation: Operation = Operation.METADATA
    ) -> lance.LanceDataset:
        """Set table-metadata keys in one commit planned on ``base_version`` (through
        :meth:`commit`; :class:`CommitConflictError` when the latest version is another)."""

        def plan(snap: ManifestSnapshot) -> ManifestEdit:
            if snap.version != base_version:
                raise CommitConflictError(
                    f"{self.uri}: manifest moved from version {base_version} to {snap.version} "
                    "before this metadata change; retry it"
                )
            return ManifestEdit(
                metadata=dict(values), properties=CommitSummary(operation).to_properties()
            )

        return self.commit(lambda ds: ManifestSnapshot(ds, []), plan).dataset

    def commit(
        self,
        load: Callable[[lance.LanceDataset], ManifestSnapshot],
        plan: Callable[[ManifestSnapshot], ManifestEdit | None],
        timeout: float = COMMIT_TIMEOUT_SECONDS,
        known: ManifestSnapshot | None = None,
    ) -> ManifestSnapshot:
        """Apply ``plan(latest snapshot)`` as one Lance commit (row-level: only the changed rows
        are written, see :func:`~.edit.build_transaction`); on a concurrent commit,
        reload the latest manifest and plan again, backing off with jitter, until ``timeout``
        seconds have passed (then :class:`CommitConflictError`; ``plan`` raises to give up, or
        returns None when there is nothing to commit: the snapshot it saw is returned).

        This is the one way ``__manifest`` changes after its creation: rows and table metadata
        (schema, specs, writer flags) alike. ``known``: a version already read (the caller's
        base); on an object store the first attempt plans on it, and writes its files, while
        one listing checks that it is still the newest (if not, that attempt is dropped and the
        latest version read and planned on as after a lost race)."""
        self.check_store()
        deadline = time.monotonic() + timeout
        delay = 0.005
        attempts = 0
        listing = None
        if known is not None and storage.store_scheme(self.uri) in storage.OBJECT_STORE_SCHEMES:
            listing = in_background(self.newest_version)

        def prepare(snap: ManifestSnapshot) -> tuple[ManifestEdit | None, Any]:
            edit = plan(snap)
            if edit is None:
                return None, None
            retire.check(self, snap, edit.uses)
            for use in edit.uses:  # written into a real directory of this namespace, still
                storage.check_table_dir(self.root, use.location)
            props = {COMMIT_PROPERTY_PREFIX + k: v for k, v in edit.properties.items()}
            return edit, build_transaction(snap, edit, self.storage_options, props)

        while True:
            attempts += 1
            snap: ManifestSnapshot | None = None
            try:
                with self._turn():
                    prepared: tuple[ManifestEdit | None, Any] | None = None
                    if known is not None and listing is not None and attempts == 1:
                        # planned on the base while the listing says whether it is the newest
                        # (if not, the files written for it are never referenced)
                        current, prepared = decided_by(
                            listing, known.version, functools.partial(prepare, known)
                        )
                        snap = known if current else None
                    if snap is None or prepared is None:  # no listing, or a stale base
                        snap = load(self.dataset())
                        prepared = prepare(snap)
                    edit, tx = prepared
                    if edit is None:
                        return snap
                    # through the open handle: Lance checks for a concurrent commit all the same
                    ds = lance.LanceDataset.commit(
                        snap.dataset, tx, storage_options=self.storage_options, max_retries=0
                    )
            except Exception as e:
                lost_race = isinstance(e, (lance.commit.CommitConflictError, OSError))
                if not ((lost_race and _is_conflict(e)) or self._moved_on(snap, e)):
                    raise
                if time.monotonic() + delay > deadline:
                    raise CommitConflictError(
                        f"{self.uri}: gave up after {attempts} attempts in {timeout:.0f} s of "
                        "concurrent manifest commits; nothing of this commit is visible, retry it"
                    ) from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.1)
                continue
            committed = load(ds)
            upkeep(ds)
            return committed

    def _moved_on(self, snap: ManifestSnapshot | None, error: Exception) -> bool:
        """Whether ``error``, raised while planning on ``snap``, is a read of files a cleanup
        removed after a later manifest version superseded ``snap`` (then plan again)."""
        if snap is None or not (isinstance(error, StorageError) or is_storage_failure(error)):
            return False
        try:
            return bool(self.dataset().version != snap.version)
        except PartitionedNamespaceError:
            return False

    def commit_properties(
        self, version: int, via: lance.LanceDataset | None = None
    ) -> dict[str, str] | None:
        """This package's properties of the commit that made ``version`` (None: not ours);
        ``via`` is an open handle of any later version to read it through. Cached: a version
        never changes."""
        if version in self._properties:
            return self._properties[version]
        ds = via if via is not None and via.version >= version else self.dataset(version)
        tx = ds.read_transaction(version)
        props = (tx.transaction_properties or {}) if tx is not None else {}
        ours = {
            k[len(COMMIT_PROPERTY_PREFIX) :]: v
            for k, v in props.items()
            if k.startswith(COMMIT_PROPERTY_PREFIX)
        }
        self._properties[version] = ours or None
        return ours or None


def delete_empty_namespaces(snap: ManifestSnapshot, edit: ManifestEdit) -> None:
    """Add to ``edit`` the deletion of every partition namespace of ``snap`` that would be left
    with no table beneath it (tables ``edit`` registers count, those it deletes do not)."""
    tables = {t.object_id for t in snap.tables()} - edit.deletes
    tables |= {oid for oid, cols in edit.upserts.items() if cols.get("object_type") == "table"}
    ancestors = {
        SEP.join(oid.split(SEP)[:i]) for oid in tables for i in range(1, oid.count(SEP) + 1)
    }
    for ns_oid in snap.namespace_ids().values():
        if ns_oid not in ancestors:
            edit.deletes.add(ns_oid)


_U64_MAX = (1 << 64) - 1


def being_created(ds: lance.LanceDataset) -> bool:
    """Whether ``ds`` is a ``__manifest`` this package is creating: only its first version,
    made by our create commit, and no table metadata yet."""
    if ds.version != 1 or ds.metadata:
        return False
    try:
        tx = ds.read_transaction(1)
    except (OSError, ValueError):
        return False
    props = (tx.transaction_properties or {}) if tx is not None else {}
    return props.get(COMMIT_PROPERTY_PREFIX + PROP_OPERATION) == Operation.CREATE


def _is_conflict(e: Exception) -> bool:
    if isinstance(e, lance.commit.CommitConflictError):
        return True
    text = str(e).lower()
    return any(w in text for w in ("conflict", "preempted", "already exists", "incompatible"))


def overwritten_ids(properties: dict[str, str] | None) -> set[str] | None:
    """Table object ids a commit replaced (``None``: unknown, treat every table as replaced),
    from its properties (None: not this package's commit)."""
    if properties is None:
        return None
    ids = CommitSummary.from_properties(properties).overwritten
    return None if ids is None else set(ids)
