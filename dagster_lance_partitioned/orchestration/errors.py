"""Exceptions raised by the Dagster layer (besides those of the core it re-raises)."""

from __future__ import annotations

from ..core.errors import PartitionedNamespaceError


class InvalidAssetKeyError(PartitionedNamespaceError):
    """An asset key part cannot be a path segment under the IO manager root (empty, ``.`` or
    ``..``, or a character outside ``A-Z a-z 0-9 _ - .``); nothing was read or written.
    ``asset_key`` is the key, ``part`` the offending part."""

    def __init__(self, message: str, asset_key: str, part: str) -> None:
        super().__init__(message)
        self.asset_key = asset_key
        self.part = part


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
