"""The state operations on a partitioned namespace work on: its store (root, storage options,
manifest commits), the manifest version read, and that version's schema and specs.

Maintenance, health checks, schema evolution, upgrades and staged writes take a
:class:`NamespaceState`; the :class:`~.namespace.PartitionedNamespace` facade holds one and
delegates to them, so the modules below it never need the facade."""

from __future__ import annotations

import functools
from typing import Any, Protocol

import pyarrow as pa

from ..errors import NotAPartitionedNamespaceError, WriteError
from ..partitioning.partition_spec import SPEC_KEY_PREFIX, PartitionSpec, specs_from_metadata
from ..schema.namespace_schema import SCHEMA_KEY, snapshot_schema
from .snapshot import ManifestSnapshot
from .store import ManifestStore, being_created


def load_snapshot(ds: Any) -> ManifestSnapshot:
    """One ``__manifest`` version of a partitioned namespace (refused when its metadata has no
    partition spec or schema)."""
    metadata = dict(ds.metadata)
    specs = _specs_of(
        tuple(sorted((k, v) for k, v in metadata.items() if k.startswith(SPEC_KEY_PREFIX)))
    )
    if being_created(ds):
        raise NotAPartitionedNamespaceError(
            f"{ds.uri}: __manifest is being created (or its creation was interrupted): it has "
            "no table metadata yet; retry, or remove the __manifest directory if no creator "
            "is running"
        )
    if not specs:
        raise NotAPartitionedNamespaceError(
            f"{ds.uri}: __manifest has no partition_spec_v<N> in its metadata; this directory "
            "catalog is not a partitioned namespace"
        )
    if SCHEMA_KEY not in metadata:
        raise NotAPartitionedNamespaceError(f"{ds.uri}: __manifest metadata has no 'schema'")
    return ManifestSnapshot(ds, specs)


@functools.lru_cache(maxsize=64)
def _specs(entries: tuple[tuple[str, str], ...]) -> list[PartitionSpec]:
    """The specs of ``__manifest`` metadata entries (parsed once per distinct text in the
    process; callers get a list of their own)."""
    return specs_from_metadata(dict(entries))


def _specs_of(entries: tuple[tuple[str, str], ...]) -> list[PartitionSpec]:
    return list(_specs(entries))


def registered_partitions(snap: ManifestSnapshot) -> list[dict[str, Any]]:
    """Every partition table ``snap`` registers: object id, location, spec id, partition values
    (field id -> value) and the pinned read version, branch and tag."""
    out = []
    for t in snap.tables():
        out.append(
            {
                "object_id": t.object_id,
                "location": t.location,
                "spec_id": t.spec_id,
                "values": t.partition_values(snap.specs[t.spec_id]),
                "read_version": t.read_version,
                "read_branch": t.read_branch,
                "read_tag": t.read_tag,
            }
        )
    return out


@functools.lru_cache(maxsize=64)
def _parsed_schema(text: str) -> pa.Schema:
    """The namespace schema of a ``schema`` metadata value (parsed once per distinct text)."""
    return snapshot_schema(_Metadata({SCHEMA_KEY: text}), "")


class _Metadata:
    def __init__(self, metadata: dict[str, str]) -> None:
        self.metadata = metadata


class NamespaceState:
    """A namespace's store and the manifest version it reads (``pinned``: opened at a version,
    never moves)."""

    def __init__(self, store: ManifestStore, snapshot: ManifestSnapshot, pinned: bool) -> None:
        self.store = store
        self.snapshot = snapshot
        self.pinned = pinned
        self._schema: tuple[int, pa.Schema] | None = None

    @property
    def uri(self) -> str:
        """The namespace root."""
        return self.store.root

    @property
    def storage_options(self) -> dict[str, str] | None:
        """Storage options of every table of the namespace."""
        return self.store.storage_options

    @property
    def version(self) -> int:
        """The manifest version read."""
        return self.snapshot.version

    @property
    def metadata(self) -> dict[str, str]:
        """The ``__manifest`` table metadata of that version."""
        return dict(self.snapshot.metadata)

    @property
    def specs(self) -> list[PartitionSpec]:
        """Every partition spec version, oldest first."""
        return sorted(self.snapshot.specs.values(), key=lambda s: s.spec_id)

    @property
    def current_spec(self) -> PartitionSpec:
        """The newest spec."""
        return self.specs[-1]

    @property
    def schema_with_ids(self) -> pa.Schema:
        """The namespace schema of that version, with field ids."""
        if self._schema is None or self._schema[0] != self.version:
            text = self.snapshot.metadata.get(SCHEMA_KEY)
            try:
                schema = _parsed_schema(text) if text is not None else None
            except Exception:
                schema = None  # parsed again below, for the error naming the namespace
            if schema is None:
                schema = snapshot_schema(self.snapshot, self.uri)
            self._schema = (self.version, schema)
        return self._schema[1]

    def refresh(self) -> NamespaceState:
        """Move to the latest manifest version (no-op when pinned); refused, staying on the
        version read, when it lists an object id twice (see :meth:`ManifestSnapshot.verify`).
        On an object store, when one listing shows the version read is still the newest,
        nothing is read again."""
        if not self.pinned and self.store.newest_version() != self.snapshot.version:
            self.read_latest()
        return self

    def read_latest(self) -> NamespaceState:
        """Read the latest manifest version and move to it (a listing showed it is newer)."""
        self.snapshot = load_snapshot(self.store.open_latest()).verify(latest=True)
        return self

    def require_unpinned(self, what: str) -> None:
        """Refuse to ``what`` (e.g. "vacuum it") a namespace opened at a manifest version."""
        if self.pinned:
            raise WriteError(
                f"{self.uri} was opened at manifest version {self.version}; "
                f"open it without a version to {what}"
            )


class HasState(Protocol):
    """Anything holding a :class:`NamespaceState` (the ``PartitionedNamespace`` facade)."""

    @property
    def state(self) -> NamespaceState: ...


def state_of(ns: NamespaceState | HasState) -> NamespaceState:
    """The state of ``ns`` (a state itself, or a facade holding one)."""
    return ns if isinstance(ns, NamespaceState) else ns.state
