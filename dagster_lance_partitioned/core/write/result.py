"""What a write reports: per partition (:class:`PartitionWrite`) and as a whole
(:class:`WriteResult`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .mode import WriteMode


@dataclass(frozen=True)
class PartitionWrite:
    """What a write did to one partition."""

    object_id: str
    location: str
    values: dict[str, Any]
    rows: int
    read_version: int
    created: bool
    replaced: bool
    bytes_written: int = 0  # size of the data files this write added to the table


@dataclass(frozen=True)
class WriteResult:
    """The outcome of one write: the manifest version that made it visible and each partition."""

    manifest_version: int
    spec_id: int
    mode: WriteMode
    partitions: tuple[PartitionWrite, ...]
    removed: tuple[str, ...] = ()
    committed: bool = True  # False: the write changed nothing, no manifest commit was made

    @property
    def rows_written(self) -> int:
        """Rows written across all partitions."""
        return sum(p.rows for p in self.partitions)

    @property
    def bytes_written(self) -> int:
        """Bytes of data files written across all partitions."""
        return sum(p.bytes_written for p in self.partitions)

    @property
    def read_versions(self) -> dict[str, int]:
        """Table object id -> the read_version now registered for it."""
        return {p.object_id: p.read_version for p in self.partitions}
