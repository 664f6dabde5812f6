"""The read side of the Spark data source: plan once on the driver, read Arrow batches on the
executors.

Planning (``partitions()``) runs in Spark's planning worker on the driver: the namespace is
opened at the manifest version pinned when the DataFrame was created, ``plan_scan`` selects the
partition tables with the core filter (``filter`` option AND the filters Spark pushed), and each
selected table becomes one or more input partitions (groups of its fragments). An input
partition carries only small data: the task (uri, location, pinned version, partition values)
and fragment ids. ``read()`` opens the table at that version and yields Arrow batches in exactly
the layout Spark expects."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import lance
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from ..core.arrow_json import strip_field_ids
from ..core.conform import column_sources, conform_for_read
from ..core.errors import PartitionReadError
from ..core.namespace import PartitionedNamespace
from ..core.planning import ScanPlan, ScanTask
from ..core.scan import iter_task_batches, lance_filter, open_table, read_schema
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


class LancePartition(InputPartition):
    """One Spark input partition: a partition table at its pinned version, whole or a group of
    its fragments."""

    def __init__(self, task: ScanTask, fragment_ids: tuple[int, ...] | None) -> None:
        self.task = task
        self.fragment_ids = fragment_ids


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
        """One input partition per selected partition table, or per group of its fragments
        of about ``rowsPerPartition`` rows."""
        plan = self.plan()
        if not plan.tasks:
            return []
        if not self.opts.split_fragments:
            return [LancePartition(t, None) for t in plan.tasks]
        translated = lance_filter(plan.residual_filter, strip_field_ids(self.opts.schema_with_ids))
        splittable = plan.residual_filter is None or translated is not None
        workers = max(1, min(PLAN_THREADS, len(plan.tasks)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            groups = list(pool.map(lambda t: self._groups(t, splittable), plan.tasks))
        return [LancePartition(t, g) for t, gs in zip(plan.tasks, groups, strict=True) for g in gs]

    def _groups(self, task: ScanTask, splittable: bool) -> list[tuple[int, ...] | None]:
        """Fragment groups of one task; ``[None]`` reads the task whole."""
        if not splittable:
            return [None]
        ds = open_table(task, self.opts.storage_options)
        if not _plain_layout(ds.schema, self.opts.schema_with_ids):
            return [None]  # reconciled reads go through the core, whole table at once
        fragments = ds.get_fragments()
        if len(fragments) <= 1:
            return [None]
        groups: list[tuple[int, ...]] = []
        current: list[int] = []
        rows = 0
        for frag in fragments:
            current.append(frag.fragment_id)
            rows += frag.metadata.num_rows
            if rows >= self.opts.partition_rows:
                groups.append(tuple(current))
                current, rows = [], 0
        if current:
            groups.append(tuple(current))
        return [None] if len(groups) == 1 else list(groups)

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
        opts = self.opts
        filter_sql = self.filter_sql
        plain = strip_field_ids(opts.schema_with_ids)
        translated = lance_filter(filter_sql, plain)
        if partition.fragment_ids is None:
            yield from iter_task_batches(
                partition.task,
                opts.schema_with_ids,
                list(opts.columns),
                filter_sql,
                opts.storage_options,
                opts.batch_rows,
                translated,
            )
            return
        yield from read_fragments(
            partition.task,
            partition.fragment_ids,
            opts.schema_with_ids,
            opts.columns,
            translated,
            opts.storage_options,
            opts.batch_rows,
        )


def _plain_layout(table_schema: pa.Schema, schema_with_ids: pa.Schema) -> bool:
    """Whether a partition table holds every namespace column under its name and type (so a
    subset of its fragments can be scanned directly, as the core does for the whole table)."""
    plain = strip_field_ids(schema_with_ids)
    sources = column_sources(table_schema, schema_with_ids)
    return all(
        sources[f.name] == f.name and table_schema.field(f.name).type == f.type for f in plain
    )


def read_fragments(
    task: ScanTask,
    fragment_ids: Sequence[int],
    schema_with_ids: pa.Schema,
    columns: Sequence[str],
    translated_filter: str | None,
    storage_options: dict[str, str] | None,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    """Batches of some fragments of one partition table (planned only for tables whose layout
    is the namespace schema's, with a filter Lance evaluates)."""
    plain = strip_field_ids(schema_with_ids)
    target = read_schema(plain, list(columns))
    ds = open_table(task, storage_options)
    where = f"partition {task.object_id} (version {ds.version})"
    if not _plain_layout(ds.schema, schema_with_ids):
        raise PartitionReadError(f"{where}: its schema changed since the scan was planned")
    fragments = [_fragment(ds, i, where) for i in fragment_ids]
    scanner = ds.scanner(
        columns=list(target.names),
        filter=translated_filter,
        fragments=fragments,
        batch_size=batch_rows,
    )
    for batch in scanner.to_reader():
        yield from conform_for_read(pa.Table.from_batches([batch]), target, where).to_batches()


def _fragment(ds: lance.LanceDataset, fragment_id: int, where: str) -> lance.LanceFragment:
    frag = ds.get_fragment(fragment_id)
    if frag is None:
        raise PartitionReadError(f"{where}: fragment {fragment_id} is missing")
    return frag
