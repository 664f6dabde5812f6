"""A write's partitions in flight: what the base manifest version registers for their keys
(:class:`BaseIndex`) and what the write buffered and wrote for each (:class:`PendingPartition`).

Ingest creates and fills them, the table commit gives each a new table version, and the manifest
commit of the write's mode registers them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from lance.fragment import FragmentMetadata

from ..manifest import stats
from ..manifest.layout import SEP, TABLE_NAME
from ..manifest.snapshot import ManifestSnapshot, TableEntry
from ..manifest.stats import TableStats
from ..partitioning.partition_spec import PartitionSpec
from ..partitioning.partitioner import Rows
from ..table_files import data_bytes

Key = tuple[Any, ...]
"""A partition key: the partition values in spec field order, typed like the manifest."""


@dataclass
class PendingPartition:
    """One partition's buffered rows and written fragments during a write."""

    key: Key
    existing: TableEntry | None  # the registered table appended to / replaced, if any
    path: list[str]  # partition namespace names, one per spec field
    location: str
    batches: list[Rows] = field(default_factory=list)
    buffered_bytes: int = 0
    rows: int = 0
    fragments: list[FragmentMetadata] = field(default_factory=list)
    version: int | None = None  # the table version this write made
    # the schema ``fragments`` were written with (None: the write schema) and, for appends to
    # an existing table, that table's data storage version
    layout: pa.Schema | None = None
    storage_version: str | None = None
    bytes_written: int = 0
    # the rows of ``fragments`` when they were written ahead of opening the table (shaped
    # ``layout``, see write.ahead): kept until the commit, which re-writes them if needed
    ahead: pa.Table | None = None
    # what is known of the rows this write put in the table (every row noted, see note_rows)
    stats: TableStats | None = None

    def note_rows(
        self, rows: pa.Table, schema: pa.Schema, constants: Mapping[str, Any] | None = None
    ) -> None:
        """Count ``rows`` (about to be written into this partition's table; ``schema`` is the
        namespace schema with field ids; ``constants``: the identity partition columns, whose
        every row holds the partition's value) into :attr:`stats`."""
        found = stats.of_table(rows, schema, constants=constants)
        self.stats = found if self.stats is None else self.stats.union(found)

    def written_stats(self, schema: pa.Schema) -> TableStats | None:
        """The statistics of the rows this write put in the table, with their size (None:
        some of its rows were not noted, e.g. staged by a worker that kept none)."""
        found = self.stats
        if found is None and self.rows == 0:
            found = stats.of_table(pa.table({}), schema)
        if found is None or found.rows != self.rows:
            return None
        return found.with_bytes(self.bytes_written)

    @property
    def object_id(self) -> str:
        return SEP.join([*self.path, TABLE_NAME])

    def values(self, spec: PartitionSpec) -> dict[str, Any]:
        """Field id -> value of this partition under ``spec``."""
        return dict(zip((f.field_id for f in spec.fields), self.key, strict=True))

    def record_written(self, fragments: Iterable[FragmentMetadata]) -> None:
        """Note the size of the data files of ``fragments``, which this write wrote."""
        self.bytes_written = data_bytes(fragments)


class BaseIndex:
    """The tables and partition namespaces a write's base manifest version registers for the
    keys looked up so far (a large manifest is queried for them, never read whole)."""

    def __init__(self, base: ManifestSnapshot, spec: PartitionSpec) -> None:
        self.base = base
        self.spec = spec
        self.tables: dict[Key, TableEntry] = {}
        self.namespaces: dict[tuple[int, Key], str] = {}  # (spec id, key prefix) -> object id
        self._resolved: set[Key] = set()

    def resolve(self, keys: set[Key]) -> None:
        """Look up the tables and partition namespaces of new ``keys`` (one query for all)."""
        todo = keys - self._resolved
        if not todo:
            return
        self.tables.update(self.base.find_tables(self.spec, todo))
        prefixes = {
            k[:level] for k in todo if k not in self.tables for level in range(1, len(k) + 1)
        }
        self.namespaces.update(self.base.find_namespaces(self.spec, prefixes))
        self._resolved |= todo

    def table(self, key: Key) -> TableEntry | None:
        """The table registered for ``key`` (None: none)."""
        self.resolve({key})
        return self.tables.get(key)
