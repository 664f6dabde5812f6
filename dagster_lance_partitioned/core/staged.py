"""Staged writes for distributed engines: workers write fragments into partition tables, the
driver commits every partition table once and then makes the single ``__manifest`` commit.

Workers of one write agree on the directory of each new partition table without talking to each
other: names are derived from the write's id and the partition values, so two workers holding
rows of the same new partition write into the same table."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from lance.fragment import FragmentMetadata

from .conform import check_write_schema
from .errors import WriteError
from .manifest import ManifestStore
from .state import HasState, NamespaceState, load_snapshot, state_of
from .writer import (
    TABLE_WRITE_THREADS,
    WRITE_MODES,
    PartitionWriter,
    WriteResult,
    _data_bytes,
    _data_files,
    _Pending,
)

_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def _digest(*parts: str) -> bytes:
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).digest()


def derived_name(write_id: str, prefix: tuple[Any, ...]) -> str:
    """A 16-character ``a-z0-9`` namespace name, the same in every worker of one write."""
    n = int.from_bytes(_digest(write_id, "ns", repr(prefix)), "big")
    chars = []
    for _ in range(16):
        n, r = divmod(n, 36)
        chars.append(_ALPHABET[r])
    return "".join(chars)


def derived_location(write_id: str, key: tuple[Any, ...], object_id: str) -> str:
    """``<8 hex>_<object_id>`` for a new partition table, the same in every worker."""
    return f"{_digest(write_id, 'table', repr(key)).hex()[:8]}_{object_id}"


@dataclass(frozen=True)
class StagedPartition:
    """What one worker wrote for one partition: fragments not yet committed anywhere."""

    key: tuple[Any, ...]
    existing: str | None  # object id of the registered table appended to / replaced, if any
    location: str
    path: tuple[str, ...]
    rows: int
    fragments: tuple[FragmentMetadata, ...]
    layout: pa.Schema | None = None
    storage_version: str | None = None


@dataclass(frozen=True)
class StageResult:
    """A worker's commit message: the partitions it wrote."""

    partitions: tuple[StagedPartition, ...] = ()

    @property
    def rows(self) -> int:
        """Rows staged by the worker."""
        return sum(p.rows for p in self.partitions)


class _StagingWriter(PartitionWriter):
    """A writer whose new partition tables are named from the write id (see module doc)."""

    write_id: str = ""

    def _namespace_name(self, prefix: tuple[Any, ...]) -> str:
        return derived_name(self.write_id, (self.spec.spec_id, *prefix))

    def _new_location(self, object_id: str, key: tuple[Any, ...]) -> str:
        return derived_location(self.write_id, (self.spec.spec_id, *key), object_id)


@dataclass(frozen=True)
class StagedWrite:
    """One distributed write, planned on the driver against one manifest version; picklable."""

    root: str
    storage_options: dict[str, str] | None
    manifest_version: int
    mode: str
    write_id: str
    commit_properties: dict[str, str] = field(default_factory=dict)
    partitions: tuple[dict[str, Any], ...] | None = None  # the only partitions it may touch

    @classmethod
    def begin(
        cls,
        ns: NamespaceState | HasState,
        mode: str = "append",
        commit_properties: dict[str, str] | None = None,
        partitions: Sequence[Mapping[str, Any]] | None = None,
    ) -> StagedWrite:
        """Plan a write into ``ns`` at its latest manifest version (driver side); see
        :meth:`PartitionedNamespace.write` for ``partitions``."""
        if mode not in WRITE_MODES:
            raise WriteError(f"unknown write mode {mode!r} (use one of {', '.join(WRITE_MODES)})")
        ns = state_of(ns)
        ns.refresh()
        if ns.pinned:
            raise WriteError(f"{ns.uri} was opened at manifest version {ns.version}")
        return cls(
            ns.uri,
            ns.storage_options,
            ns.version,
            mode,
            secrets.token_hex(8),
            dict(commit_properties or {}),
            None if partitions is None else tuple(dict(p) for p in partitions),
        )

    def _writer(self) -> _StagingWriter:
        store = ManifestStore(self.root, self.storage_options)
        ns = NamespaceState(store, load_snapshot(store.dataset(self.manifest_version)), True)
        writer = _StagingWriter(
            store,
            ns.snapshot,
            ns.schema_with_ids,
            ns.current_spec,
            self.mode,
            commit_properties={**self.commit_properties, "write_id": self.write_id},
            partitions=self.partitions,
        )
        writer.write_id = self.write_id
        return writer

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema rows are written with (the namespace schema, no field ids)."""
        return self._writer().write_schema

    def check_schema(self, schema: pa.Schema) -> None:
        """Raise :class:`SchemaMismatchError` naming the column when ``schema`` cannot be
        written (before any data is)."""
        writer = self._writer()
        check_write_schema(schema, writer.write_schema, writer.dropped)

    def stage(self, batches: Iterable[pa.RecordBatch]) -> StageResult:
        """Write ``batches`` as fragments of their partition tables (worker side); nothing
        becomes visible. Returns the message to hand to :meth:`commit`."""
        it: Iterator[pa.RecordBatch] = iter(batches)
        first = next(it, None)
        if first is None:
            return StageResult()
        writer = self._writer()
        reader = pa.RecordBatchReader.from_batches(first.schema, _chain(first, it))
        writer.ingest(reader)
        out = []
        for pending in writer._pending.values():
            writer._flush(pending)
            out.append(
                StagedPartition(
                    pending.key,
                    pending.existing.object_id if pending.existing else None,
                    pending.location,
                    tuple(pending.path),
                    pending.rows,
                    tuple(pending.fragments),
                    pending.layout,
                    pending.storage_version,
                )
            )
        return StageResult(tuple(out))

    def commit(self, messages: Sequence[StageResult | None]) -> WriteResult:
        """Commit every staged partition table once, then one ``__manifest`` commit (driver
        side). Partitions of the data not staged by any worker are untouched."""
        writer = self._writer()
        writer._resolve(
            {part.key for message in messages if message for part in message.partitions}
        )
        merged: dict[tuple[Any, ...], _Pending] = {}
        for message in messages:
            for part in message.partitions if message else ():
                pending = merged.get(part.key)
                if pending is None:
                    existing = writer._index.get(part.key)
                    if (existing.object_id if existing else None) != part.existing:
                        raise WriteError(
                            f"staged partition {part.key} does not match manifest version "
                            f"{self.manifest_version}; was it staged by another write?"
                        )
                    pending = _Pending(part.key, existing, list(part.path), part.location)
                    pending.layout, pending.storage_version = part.layout, part.storage_version
                    merged[part.key] = pending
                pending.fragments.extend(part.fragments)
                pending.rows += part.rows
        writer._pending = merged
        writer.empty_named_partitions()
        merged = writer._pending

        def commit_table(pending: _Pending) -> None:
            if pending.existing is None and not pending.fragments:  # a named, empty partition
                pending.version = writer._create_table(pending)
                return
            pending.bytes_written = _data_bytes(pending.fragments)
            pending.data_files = _data_files(pending.fragments)
            pending.version = writer._commit_table(
                pending, pending.existing, replace=writer._replaces(pending)
            )

        with ThreadPoolExecutor(max_workers=TABLE_WRITE_THREADS) as pool:
            for future in [pool.submit(commit_table, p) for p in merged.values()]:
                future.result()
        return writer._commit_manifest()

    def abort(self, messages: Sequence[StageResult | None]) -> None:
        """Give the write up: nothing was made visible; the staged fragments are orphans that
        a vacuum removes."""
        del messages


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
