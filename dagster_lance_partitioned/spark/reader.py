"""The read side of the Spark data source: plan once on the driver, read Arrow batches on the
executors.

Planning (``pushFilters()`` then ``partitions()``) runs in Spark's planning worker on the
driver: the namespace is opened at the manifest version pinned when the DataFrame was created,
``plan_scan`` selects the partition tables with the core filter (``filter`` option AND the
filters Spark pushed), and the selected tables are packed into input partitions of at most
``rowsPerPartition`` rows, and at least ``minPartitions`` of them when the data allows (small
tables share one, a large table is split into groups of its fragments; no input partition is
made smaller than 65,536 rows for the sake of ``minPartitions``). An input partition carries
only small data: per table the scan task (uri, location, pinned version, partition values)
and fragment ids. ``read()`` opens each table at
that version and yields Arrow batches in exactly the layout Spark expects.

Spark pickles the reader for the executors before it calls ``partitions()``: everything
``read()`` needs is set in ``__init__`` or ``pushFilters()``, or carried by the partition."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from ..core import PartitionedNamespace, ScanPlan, ScanTask
from ..core.engine import iter_task_batches, lance_filter, open_table, strip_field_ids
from . import options as opt
from .filters import translate
from .types import arrow_schema, conform_batch

PLAN_THREADS = 8  # partition tables opened concurrently to list their fragments


@dataclass(frozen=True)
class ReadOptions:
    """What every input partition of one read shares (small and picklable)."""

    uri: str
    manifest_version: int
    schema_with_ids: pa.Schema  # the namespace schema at that manifest version
    columns: tuple[str, ...]
    storage_options: dict[str, str] | None
    base_filter: str | None  # option ``filter``
    batch_rows: int
    partition_rows: int
    split_fragments: bool
    push_filters: bool = True
    min_partitions: int = 1


Piece = tuple[ScanTask, tuple[int, ...] | None]
"""A partition table at its pinned version, whole (None) or some of its fragments."""


class LancePartition(InputPartition):
    """One Spark input partition: one or more pieces of partition tables, about
    ``rowsPerPartition`` rows in all (small tables share an input partition; a large table with
    several fragments is split into groups of fragments)."""

    def __init__(self, pieces: Sequence[Piece]) -> None:
        self.pieces = tuple(pieces)

    @property
    def tasks(self) -> tuple[ScanTask, ...]:
        """The partition tables this input partition reads (some perhaps in part)."""
        return tuple(task for task, _ in self.pieces)


class LancePartitionedReader(DataSourceReader):
    """Reads one DataFrame's worth of a partitioned namespace, at one manifest version."""

    def __init__(self, opts: ReadOptions, spark_schema: StructType) -> None:
        self.opts = opts
        self.spark_schema = spark_schema
        self.pushed: tuple[str, ...] = ()  # SQL of the filters Spark pushed

    # -- planning (driver) --------------------------------------------------------------------
    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Keep the filters the core can apply (for pruning and inside each scan); hand back
        the ones it cannot apply, or not exactly as Spark would."""
        if not self.opts.push_filters:
            yield from filters
            return
        plain = strip_field_ids(self.opts.schema_with_ids)
        translated = translate(filters, plain)
        self.pushed = translated.conjuncts
        returned = {id(f) for f in translated.returned}
        for f in filters:
            if id(f) in returned:
                yield f

    @property
    def filter_sql(self) -> str | None:
        """The filter applied by the core: option ``filter`` AND the pushed filters."""
        parts = [p for p in (self.opts.base_filter, *self.pushed) if p]
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        return " AND ".join(f"({p})" for p in parts)

    def plan(self) -> ScanPlan:
        """The core scan plan, on the pinned manifest version."""
        ns = PartitionedNamespace.open(
            self.opts.uri, self.opts.storage_options, version=self.opts.manifest_version
        )
        return ns.plan_scan(self.filter_sql)

    def partitions(self) -> list[InputPartition]:
        """The selected partition tables packed into input partitions (see the module doc):
        small tables share one (Spark's per-task cost of a Python data source is tens of
        milliseconds), a large table with several fragments is split into groups of
        fragments."""
        plan = self.plan()
        if not plan.tasks:
            return []
        workers = max(1, min(PLAN_THREADS, len(plan.tasks)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            listed = list(pool.map(self._fragments, plan.tasks))
        total = sum(rows for fragments in listed for _, rows in fragments)
        target = split_target(
            total, self.opts.partition_rows, self.opts.min_partitions, opt.MIN_SPLIT_ROWS
        )
        units = [
            split(task, fragments, target, self.opts.split_fragments)
            for task, fragments in zip(plan.tasks, listed, strict=True)
        ]
        return [LancePartition(pieces) for pieces in pack(units, target)]

    def _fragments(self, task: ScanTask) -> list[tuple[int, int]]:
        """(fragment id, physical rows) of a task's table at its pinned version."""
        ds = open_table(task, self.opts.storage_options)
        return [(f.fragment_id, f.metadata.num_rows) for f in ds.get_fragments()]

    # -- reading (executors) ------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Arrow batches of one input partition, in the layout Spark expects."""
        if not isinstance(partition, LancePartition):
            return  # Spark's placeholder partition when the scan selects no table
        target = arrow_schema(self.spark_schema)
        for batch in self._batches(partition):
            if batch.num_rows:
                yield conform_batch(batch, target)

    def _batches(self, partition: LancePartition) -> Iterator[pa.RecordBatch]:
        for task, fragment_ids in partition.pieces:
            yield from self._piece(task, fragment_ids)

    def _piece(
        self, task: ScanTask, fragment_ids: tuple[int, ...] | None
    ) -> Iterator[pa.RecordBatch]:
        opts = self.opts
        filter_sql = self.filter_sql
        yield from iter_task_batches(
            task,
            opts.schema_with_ids,
            list(opts.columns),
            filter_sql,
            opts.storage_options,
            opts.batch_rows,
            lance_filter(filter_sql, strip_field_ids(opts.schema_with_ids)),
            fragment_ids=fragment_ids,
        )


def split_target(total: int, max_rows: int, min_partitions: int, floor_rows: int) -> int:
    """Rows per input partition: at most ``max_rows``, and small enough for
    ``min_partitions`` input partitions over ``total`` rows, but not below ``floor_rows``
    for that (an explicit ``max_rows`` below it is kept)."""
    if min_partitions <= 1 or total <= 0:
        return max_rows
    return min(max_rows, max(floor_rows, -(-total // min_partitions)))


def split(
    task: ScanTask, fragments: Sequence[tuple[int, int]], target: int, splittable: bool
) -> list[tuple[Piece, int]]:
    """A task as pieces with their (physical) row counts: the whole table, or groups of
    consecutive fragments of at most ``target`` rows (a larger fragment alone)."""
    total = sum(rows for _, rows in fragments)
    if not splittable or total <= target or len(fragments) <= 1:
        return [((task, None), total)]
    units: list[tuple[Piece, int]] = []
    current: list[int] = []
    rows = 0
    for fid, n in fragments:
        if current and rows + n > target:
            units.append(((task, tuple(current)), rows))
            current, rows = [], 0
        current.append(fid)
        rows += n
    if current:
        units.append(((task, tuple(current)), rows))
    return units


def pack(units: Sequence[Sequence[tuple[Piece, int]]], target_rows: int) -> list[list[Piece]]:
    """Pieces (in plan order) packed greedily into groups of about ``target_rows`` rows; a
    piece larger than that gets a group of its own."""
    groups: list[list[Piece]] = []
    current: list[Piece] = []
    rows = 0
    for piece, n in (u for task_units in units for u in task_units):
        if current and rows + n > target_rows:
            groups.append(current)
            current, rows = [], 0
        current.append(piece)
        rows += n
    if current:
        groups.append(current)
    return groups
