"""Shared pieces of the Dagster tests' runs."""

from __future__ import annotations

from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)


def range_tags(range_: tuple[str, str] | None) -> dict[str, str] | None:
    """The run tags of a range run over partition keys ``range_`` (None: a one-key run)."""
    if range_ is None:
        return None
    return {ASSET_PARTITION_RANGE_START_TAG: range_[0], ASSET_PARTITION_RANGE_END_TAG: range_[1]}
