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
