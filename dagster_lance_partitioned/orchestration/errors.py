"""Exceptions raised by the Dagster layer (besides those of the core it re-raises;
:class:`~..core.errors.EvolutionRefusedError`, which the core raises for it, is importable from
here as before)."""

from __future__ import annotations

from typing import Any

from ..core import EvolutionRefusedError as EvolutionRefusedError
from ..core import IndexDeclarationError, PartitionedNamespaceError, WriteError


class InvalidAssetKeyError(PartitionedNamespaceError):
    """An asset key part cannot be a path segment under the IO manager root (empty, ``.`` or
    ``..``, or a character outside ``A-Z a-z 0-9 _ - .``); nothing was read or written.
    ``asset_key`` is the key, ``part`` the offending part."""

    def __init__(self, message: str, asset_key: str, part: str) -> None:
        super().__init__(message)
        self.asset_key = asset_key
        self.part = part


class NestedAssetError(InvalidAssetKeyError):
    """The namespace of ``asset_key`` would lie inside the namespace of another asset
    (``other``), or another asset's inside it: asset keys ``a`` and ``a/b/c`` under one IO
    manager root. Refused when the second namespace would be created; nothing was written."""

    def __init__(self, message: str, asset_key: str, other: str) -> None:
        super().__init__(message, asset_key, "")
        self.other = other


class MissingUpstreamPartitionsError(PartitionedNamespaceError):
    """A load maps to upstream partitions that were never materialized (no Dagster
    materialization and no partition in the namespace). ``asset_key`` is the upstream asset,
    ``missing`` its missing partition keys."""

    def __init__(self, message: str, asset_key: str, missing: list[str]) -> None:
        super().__init__(message)
        self.asset_key = asset_key
        self.missing = missing


class StorageRootError(PartitionedNamespaceError):
    """The IO manager's ``root`` cannot hold namespaces (a regular file, not creatable, or not
    writable); raised when a run starts, before any asset computes. ``path`` is the root."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class PartitionKeyMismatchError(WriteError):
    """An asset's output holds a row of a partition the run does not target, or (a merge) a key
    whose stored row lies in such a partition; nothing was committed. ``partition_key`` is that
    partition's Dagster key, ``sample`` one such row (when known)."""

    def __init__(
        self,
        message: str,
        partition_key: str | None = None,
        sample: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.partition_key = partition_key
        self.sample = sample


class UnsupportedTypeError(PartitionedNamespaceError, TypeError):
    """An asset returned, or an input asked for, a type no type handler of the IO manager
    stores or loads (or ``type_handlers()`` returned something that is not a handler)."""


class RetentionRuleError(PartitionedNamespaceError, ValueError):
    """A maintenance job's retention rule is unusable (neither or both of a filter and an age,
    a column that is not a date or timestamp, an asset the job does not maintain); nothing was
    deleted. ``asset`` is the asset key it names."""

    def __init__(self, message: str, asset: str) -> None:
        super().__init__(message)
        self.asset = asset


class PartitionLayoutError(PartitionedNamespaceError, ValueError):
    """An asset's partitions cannot be stored as Lance partitions (missing or unknown
    ``partition_expr`` column, a cron cadence that is not a calendar unit, a key that does
    not fit the column type)."""


class IndexMetadataError(IndexDeclarationError):
    """An asset's ``lance/indexes`` metadata is malformed (not a list of ``{"column",
    "index_type", ...}``, a missing or mistyped key, a column the output lacks, an unknown
    index type, a name used twice) or asks for an index the namespace cannot hold; nothing
    was written. ``asset`` is the asset key, ``entry`` the position of the entry at fault in
    the list (None: the value as a whole)."""

    def __init__(self, message: str, asset: str, entry: int | None = None) -> None:
        super().__init__(message)
        self.asset = asset
        self.entry = entry


class IndexDeclarationConflictError(IndexMetadataError):
    """An entry of ``lance/indexes`` names an index that the namespace already declares
    otherwise (another column, type, ``min_rows`` or parameters); the IO manager never
    changes a declaration: drop it (``ns.drop_index(name)``) or choose another name. Nothing
    was written. ``name`` is the index, ``stored`` and ``wanted`` the two declarations."""

    def __init__(
        self,
        message: str,
        asset: str,
        entry: int | None,
        name: str,
        stored: dict[str, Any],
        wanted: dict[str, Any],
    ) -> None:
        super().__init__(message, asset, entry)
        self.name = name
        self.stored = stored
        self.wanted = wanted
