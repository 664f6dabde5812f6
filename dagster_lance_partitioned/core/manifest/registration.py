"""What a change made of one partition table (:class:`TableVersion`) and the one way it is
registered in a manifest edit: a registered table's pin moved to its new version
(:func:`pin_version`), or a new partition's table and the partition namespaces above it added
(:func:`add_table`).

Writes, row-level changes, compaction and index builds make their versions with
:mod:`.table_version` and register them here; they differ only in what they check against
concurrent commits before registering."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..partitioning.partition_spec import PartitionSpec
from .edit import ManifestEdit
from .layout import SEP, TABLE_NAME
from .retire import Use
from .snapshot import TableEntry
from .stats import STATS_COLUMN, TableStats, stats_field

Key = tuple[Any, ...]  # a partition's values, in its spec's field order
NameOf = Callable[[Key], str]  # the name of a new partition namespace at a key prefix
Namespaces = dict[tuple[int, Key], str]  # (spec id, key prefix) -> namespace object id


@dataclass(frozen=True)
class Pin:
    """How one manifest row pins its table: ``read_version`` (on ``read_branch``), or
    ``read_tag``; all None means the latest version of the main line."""

    read_version: int | None
    read_branch: str | None
    read_tag: str | None


def pin_of(entry: TableEntry) -> Pin:
    """The pin of a registered table."""
    rv = None if entry.read_version is None else int(entry.read_version)
    return Pin(rv, entry.read_branch, entry.read_tag)


class PinnedTable(Protocol):
    """A registered table as a scan plan lists it (a :class:`~..read.planning.ScanTask`)."""

    @property
    def object_id(self) -> str: ...
    @property
    def location(self) -> str: ...
    @property
    def read_version(self) -> int | None: ...
    @property
    def read_branch(self) -> str | None: ...
    @property
    def read_tag(self) -> str | None: ...


@dataclass(frozen=True)
class TableVersion:
    """One partition table's part of a change.

    For a registered table: its ``object_id`` and ``location``, the ``base`` pin the version
    was made on, the new ``version`` and the ``rows`` it holds (0: deregister the table; None:
    not counted); ``changed`` False leaves its pin alone. For a new partition of the current
    spec: ``key``, the ``location`` its table was created at, its ``version`` and ``rows``.
    ``stats``: what is known of the new version's rows (None: nothing; registered with it)."""

    location: str | None
    version: int
    object_id: str | None = None
    base: Pin | None = None
    key: Key | None = None
    rows: int | None = None
    changed: bool = True
    stats: TableStats | None = None

    @classmethod
    def of_task(
        cls,
        task: PinnedTable,
        version: int,
        rows: int | None = None,
        changed: bool = True,
        stats: TableStats | None = None,
    ) -> TableVersion:
        """A new version of ``task``'s table, made on the version ``task`` pins."""
        pin = Pin(task.read_version, task.read_branch, task.read_tag)
        return cls(task.location, version, task.object_id, pin, None, rows, changed, stats)

    @classmethod
    def new_table(
        cls, key: Key, location: str, version: int, rows: int, stats: TableStats | None
    ) -> TableVersion:
        """The table of a new partition ``key``, created at ``location``."""
        return cls(location, version, key=key, rows=rows, stats=stats)

    @property
    def base_version(self) -> int | None:
        """The table version the change was made on (None: a new table)."""
        return None if self.base is None else self.base.read_version

    def use(self, made_at: int) -> Use | None:
        """What registering this version depends on (see :mod:`.retire`), for a version made
        on a manifest of retirement epoch ``made_at``; None: nothing to register."""
        if self.location is None or not self.changed or self.rows == 0:
            return None
        return Use(self.location, self.version, self.base_version, made_at)


def stats_record(edit: ManifestEdit, version: int, stats: TableStats | None) -> dict[str, Any]:
    """The manifest columns recording ``stats`` of table version ``version`` (none recorded:
    the column is cleared, so statistics of an earlier version never describe this one); the
    statistics column is added to the manifest with ``edit`` when it has none yet."""
    if not any(f.name == STATS_COLUMN for f in edit.new_columns):
        edit.new_columns.append(stats_field())
    return {STATS_COLUMN: None if stats is None else stats.to_json(version)}


def pin_version(
    edit: ManifestEdit,
    object_id: str,
    version: int,
    stats: TableStats | None,
    location: str | None = None,
) -> None:
    """Move the pin of the registered table ``object_id`` to ``version`` (and its
    ``location``, when given) in ``edit``, with the statistics of that version."""
    columns: dict[str, Any] = {"read_version": version, **stats_record(edit, version, stats)}
    if location is not None:
        columns["location"] = location
    edit.upserts[object_id] = columns


def add_table(
    edit: ManifestEdit,
    spec: PartitionSpec,
    key: Key,
    location: str,
    version: int,
    namespaces: Namespaces,
    name_of: NameOf,
    stats: TableStats | None,
) -> str:
    """Register in ``edit`` the table of the new partition ``key`` of ``spec`` at
    ``location`` / ``version`` (with the statistics of that version), with the partition
    namespaces above it that ``namespaces`` (updated) lacks, named by ``name_of``; the
    table's object id."""
    path = [spec.namespace]
    row_values: dict[str, Any] = {}
    for level, f in enumerate(spec.fields, start=1):
        row_values[f.column] = key[level - 1]
        prefix = key[:level]
        known = namespaces.get((spec.spec_id, prefix))
        if known is None:
            known = SEP.join([*path, name_of(prefix)])
            edit.upserts[known] = {"object_type": "namespace", "metadata": "{}", **row_values}
            namespaces[(spec.spec_id, prefix)] = known
        path = known.split(SEP)
    oid = SEP.join([*path, TABLE_NAME])
    edit.upserts[oid] = {
        "object_type": "table",
        "location": location,
        "metadata": "{}",
        "read_version": version,
        **stats_record(edit, version, stats),
        **row_values,
    }
    return oid


def table_object_id(spec: PartitionSpec, key: Key, namespaces: Namespaces, name_of: NameOf) -> str:
    """The object id :func:`add_table` gives the table of ``key`` (nothing registered)."""
    path = [spec.namespace]
    for level in range(1, len(spec.fields) + 1):
        known = namespaces.get((spec.spec_id, key[:level]))
        path = known.split(SEP) if known is not None else [*path, name_of(key[:level])]
    return SEP.join([*path, TABLE_NAME])


__all__ = [
    "Key",
    "NameOf",
    "Namespaces",
    "TableVersion",
    "add_table",
    "pin_version",
    "stats_record",
    "table_object_id",
]
