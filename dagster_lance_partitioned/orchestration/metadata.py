"""The materialization metadata of an output the IO manager wrote: what it wrote (rows,
partition tables, bytes, read versions, a merge's row counts, the namespace schema, manifest and
spec versions) and the coverage of the declared indexes (:func:`describe_output`,
:func:`describe_indexes`); recorded on the run's events by :func:`record_metadata`. A run of
several keys gives each key's event its own numbers and names the run's totals
``lance/run_*`` (see :mod:`.metadata_keys`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pyarrow as pa

from ..core import PartitionedNamespace, RowChangeResult, WriteResult
from ..core.engine import open_table, parallel_map
from .dagster_private import (
    add_partition_metadata,
    emit_in_order,
    output_instance,
    unordered_partition_keys,
)
from .indexes import coverage_metadata, coverage_over, coverage_summary
from .layout import Layout
from .metadata_keys import (
    BYTES_WRITTEN,
    COMMITTED,
    ENGINE,
    INDEXES_DECLARED,
    MANIFEST_VERSION,
    MERGE_ON,
    PARTITION_ROW_COUNTS,
    PARTITIONS_REMOVED,
    PARTITIONS_WRITTEN,
    READ_VERSIONS,
    ROWS_DELETED,
    ROWS_INSERTED,
    ROWS_MOVED,
    ROWS_UPDATED,
    RUN_PARTITION_KEYS,
    RUN_ROWS_WRITTEN,
    SIZE_WRITTEN,
    SPEC_UPDATED,
    SPEC_VERSION,
    WRITE_MODE,
    scoped,
)
from .output import MERGE, OutputSlice

COUNT_THREADS = 8  # partition tables whose rows are counted at once (merge metadata)


def column_schema(schema: pa.Schema) -> dg.TableSchema:
    """The namespace schema as Dagster column metadata."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                f.name,
                str(f.type),
                constraints=dg.TableColumnConstraints(nullable=f.nullable),
            )
            for f in schema
        ]
    )


@dataclass
class OutputMetadata:
    """An output's metadata: ``shared`` on every event of the run and, for a run of several
    keys, ``per_key`` each key's own (its row count, the read versions of its tables, the
    partition tables and bytes it wrote)."""

    shared: dict[str, Any]
    per_key: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Table:
    """A partition table an output wrote or changed: its partition values (spec order), the
    version now registered, and its rows (those written; for a merge, all of it now)."""

    object_id: str
    values: Mapping[str, Any]
    read_version: int | None
    rows: int
    spec_id: int | None = None
    bytes: int = 0  # of the data files written (writes; merges do not report them)
    changed: bool = True  # written by this output (False: a merge left it as it was)

    @classmethod
    def written(cls, p: Any) -> _Table:
        """A partition a write wrote (a ``PartitionWrite``)."""
        return cls(p.object_id, p.values, p.read_version, p.rows, bytes=p.bytes_written)


def describe_output(
    out: OutputSlice,
    engine: str | None,
    ns: PartitionedNamespace,
    result: WriteResult | RowChangeResult | None,
    spec_changed: bool,
    storage_options: dict[str, str] | None,
) -> OutputMetadata:
    """The metadata of ``result``, which ``out`` wrote into ``ns`` (read after the write) with
    ``engine`` (None: Arrow); ``spec_changed``: whether the write added a spec version. A run
    of several keys: each key's own numbers, the run's totals as ``lance/run_*``."""
    meta: dict[str, Any] = {
        "dagster/uri": dg.MetadataValue.path(out.uri),
        "dagster/table_name": out.asset,
        "dagster/column_schema": column_schema(ns.schema),
        MANIFEST_VERSION: ns.version,
        SPEC_VERSION: ns.current_spec.spec_id,
        SPEC_UPDATED: spec_changed,
    }
    total: int | None = None  # the namespace's rows, when they are the count to report
    keys, layout = out.keys, out.layout
    # a run of several keys: each key's event carries its own numbers, the run's totals are
    # named lance/run_*
    several = keys is not None and len(keys) > 1 and layout is not None
    if isinstance(result, RowChangeResult):
        tables, total = _merge_metadata(out, ns, result, meta, storage_options, several)
    else:
        tables = [_Table.written(p) for p in result.partitions] if result else []
        meta[scoped(PARTITIONS_WRITTEN, several)] = len(tables)
        meta.update(_bytes_metadata(result.bytes_written if result else 0, several))
        if result is not None and result.removed:
            meta[scoped(PARTITIONS_REMOVED, several)] = len(result.removed)
    meta[ENGINE] = engine or "arrow"
    rows = sum(t.rows for t in tables) if total is None else total
    if not several:
        meta[READ_VERSIONS] = dg.MetadataValue.json(_read_versions(tables, layout))
        meta["dagster/row_count" if keys is None else "dagster/partition_row_count"] = rows
        return OutputMetadata(meta)
    assert keys is not None and layout is not None
    if not isinstance(result, RowChangeResult):
        meta[RUN_ROWS_WRITTEN] = rows
    meta[RUN_PARTITION_KEYS] = len(keys)
    per_key = _per_key_metadata(tables, keys, layout, isinstance(result, RowChangeResult))
    return OutputMetadata(meta, per_key)


def _merge_metadata(
    out: OutputSlice,
    ns: PartitionedNamespace,
    result: RowChangeResult,
    meta: dict[str, Any],
    storage_options: dict[str, str] | None,
    run: bool = False,
) -> tuple[list[_Table], int | None]:
    """Add a merge's own metadata to ``meta`` (rows inserted / updated / deleted / moved,
    partition tables changed; named ``lance/rows_inserted``, ...: with ``run``, the totals of
    a run of several keys, ``lance/run_...``). Returns the tables describing it, with their
    rows after it: those of the run's keys (current spec; ``changed`` when the merge wrote
    them) -- for an unpartitioned asset the changed ones, and the namespace's row count."""
    assert out.merge is not None
    meta.update(
        {
            WRITE_MODE: MERGE,
            MERGE_ON: dg.MetadataValue.json(list(out.merge.on)),
            scoped(ROWS_INSERTED, run): dg.MetadataValue.int(result.rows_inserted),
            scoped(ROWS_UPDATED, run): dg.MetadataValue.int(result.rows_updated),
            scoped(ROWS_DELETED, run): dg.MetadataValue.int(result.rows_deleted),
            scoped(ROWS_MOVED, run): dg.MetadataValue.int(result.rows_moved),
            scoped(PARTITIONS_WRITTEN, run): len(result.partitions),
            COMMITTED: result.committed,
        }
    )
    if result.partitions_removed:
        meta[scoped(PARTITIONS_REMOVED, run)] = len(result.partitions_removed)
    changed = set(result.partitions)
    if not out.partitioned:
        tables = _counted(ns, None, storage_options, changed)
        return [t for t in tables if t.changed], sum(t.rows for t in tables)
    current = ns.current_spec.spec_id
    tables = _counted(ns, out.row_filter(ns.schema), storage_options, changed)
    return [t for t in tables if t.spec_id == current], None  # older specs': no key's


def describe_indexes(
    out: OutputSlice,
    ns: PartitionedNamespace,
    result: WriteResult | RowChangeResult | None,
    meta: OutputMetadata,
    declared_now: Sequence[str],
) -> str | None:
    """Add the indexes ``declared_now`` and the coverage of the namespace's declared indexes
    to ``meta`` (nothing when it declares none): over the partition tables of the run's keys
    for a partitioned asset (each key's event: its own tables; the run's under
    ``lance/run_*``), over the tables the run wrote or changed for an unpartitioned one. Only
    those tables are opened, never the whole namespace. Returns a line for the run's log
    (None: no coverage)."""
    shared, per_key = meta.shared, meta.per_key
    if declared_now:
        shared[INDEXES_DECLARED] = dg.MetadataValue.json(list(declared_now))
    if out.partitioned:
        tasks = list(ns.plan_scan(out.row_filter(ns.schema), by_stats=False).tasks)
    else:
        written = _written_ids(result)
        tasks = [t for t in ns.plan_scan(None, by_stats=False).tasks if t.object_id in written]
    layout, current = out.layout, ns.current_spec.spec_id

    def key_of(task: Any) -> str | None:
        if layout is None or task.spec_id != current:
            return None  # a table of an older partitioning belongs to no key's event
        return layout.key_of(list(task.partition_values.values()))

    several = bool(per_key)
    total, by_key = coverage_over(
        ns, tasks, key_of if several else None, list(per_key) if several else ()
    )
    if not total:
        return None
    shared.update(coverage_metadata(total, run=several))
    for key, key_meta in per_key.items():
        key_meta.update(coverage_metadata(by_key[key]))
    scope = "the run's partition keys" if out.partitioned else "the tables the run wrote"
    return f"{out.asset}: indexes over {scope}: {coverage_summary(total)}"


def record_metadata(
    context: dg.OutputContext, asset: str, version: int, meta: OutputMetadata
) -> None:
    """Record ``meta`` on the run's events: each key's own on its event only (so a backfill of
    N keys stores N small events, not N copies of every key's numbers), emitted in partition
    order; the shared metadata on every event. Logs a multi-key run's totals."""
    shared, per_key = meta.shared, meta.per_key
    if per_key:
        context.log.info(_run_summary(asset, version, shared, len(per_key)))
        context.log.info(
            f"{asset}: Dagster now records {len(per_key)} materializations, one per "
            "partition key, each with its own metadata"
        )
        if not add_partition_metadata(context, per_key):  # a context built outside a run
            shared[PARTITION_ROW_COUNTS] = dg.MetadataValue.json(
                {k: m["dagster/partition_row_count"] for k, m in per_key.items()}
            )
        _emit_in_partition_order(context)
    context.add_output_metadata(shared)


def _written_ids(result: WriteResult | RowChangeResult | None) -> set[str]:
    """The object ids of the partition tables a write or merge wrote or changed."""
    if result is None:
        return set()
    if isinstance(result, RowChangeResult):
        return set(result.partitions)
    return {p.object_id for p in result.partitions}


def _counted(
    ns: PartitionedNamespace,
    filter: str | None,
    storage_options: dict[str, str] | None,
    changed: set[str],
) -> list[_Table]:
    """The partition tables a scan with ``filter`` reads, with their row counts (recorded in
    the manifest; a table without them counted from its metadata, a few tables at a time);
    ``changed``: the object ids a merge wrote."""
    tasks = list(ns.plan_scan(filter, by_stats=False).tasks)

    def count(task: Any) -> int:
        if task.rows is not None:
            return int(task.rows)
        return int(open_table(task, storage_options).count_rows())

    rows = parallel_map(count, tasks, COUNT_THREADS)
    return [
        _Table(
            t.object_id, t.partition_values, t.read_version, n, t.spec_id, 0, t.object_id in changed
        )
        for t, n in zip(tasks, rows, strict=True)
    ]


def _per_key_metadata(
    tables: Sequence[_Table], keys: Sequence[str], layout: Layout, merge: bool = False
) -> dict[str, dict[str, Any]]:
    """For each key of a multi-key run: its row count, the read versions of its tables, the
    partition tables it wrote and (a write) their bytes."""
    mine: dict[str, list[_Table]] = {k: [] for k in keys}
    for t in tables:
        key = layout.key_of(list(t.values.values()))
        if key in mine:  # partitions of other keys (an older spec's) belong to no event
            mine[key].append(t)
    out: dict[str, dict[str, Any]] = {}
    for k in keys:
        written = [t for t in mine[k] if t.changed]
        out[k] = {
            "dagster/partition_row_count": sum(t.rows for t in mine[k]),
            READ_VERSIONS: dg.MetadataValue.json(_read_versions(mine[k], layout)),
            PARTITIONS_WRITTEN: len(written),
        }
        if not merge:
            out[k].update(_bytes_metadata(sum(t.bytes for t in written)))
    return out


def _bytes_metadata(n: int, run: bool = False) -> dict[str, Any]:
    """``lance/bytes_written`` (an integer, which the UI plots) and ``lance/size_written`` (the
    same as text a person reads, e.g. ``2.8 MiB``); ``lance/run_...`` with ``run``."""
    return {
        scoped(BYTES_WRITTEN, run): dg.MetadataValue.int(n),
        scoped(SIZE_WRITTEN, run): dg.MetadataValue.text(_human_size(n)),
    }


def _human_size(n: int) -> str:
    """A byte count in binary units: ``512 B``, ``2.8 MiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _run_summary(asset: str, version: int, meta: Mapping[str, Any], keys: int) -> str:
    """One line with a multi-key run's totals, for the run's log."""

    def num(key: str) -> Any:
        value = meta.get(scoped(key, True))
        return getattr(value, "value", value)

    parts = [f"{keys} partition keys", f"{num(PARTITIONS_WRITTEN)} partition table(s) written"]
    if meta.get(RUN_ROWS_WRITTEN) is not None:
        parts.append(f"{num(RUN_ROWS_WRITTEN)} rows, {num(SIZE_WRITTEN)}")
    else:
        parts.append(
            f"rows inserted {num(ROWS_INSERTED)}, updated {num(ROWS_UPDATED)}, "
            f"deleted {num(ROWS_DELETED)}, moved {num(ROWS_MOVED)}"
        )
    return f"{asset}: manifest version {version}: " + ", ".join(parts)


def _read_versions(tables: Sequence[_Table], layout: Layout | None) -> dict[str, str]:
    """The Lance table version now registered for each table, keyed by its Dagster partition
    key (by ``column=value`` for assets stored partitioned by their data). Versions are text:
    detached versions exceed 2**53, which the Dagster UI (JavaScript) would round."""
    out: dict[str, str] = {}
    for t in tables:
        if layout is not None:
            name = layout.key_of(list(t.values.values()))
        else:
            name = "/".join(f"{c}={v}" for c, v in t.values.items()) or t.object_id
        if name in out:  # several tables under one name (should not happen): keep them all
            name = f"{name} ({t.object_id})"
        out[name] = str(t.read_version)
    return out


# -- the order of a run's events ---------------------------------------------------------------
def _emit_in_partition_order(context: dg.OutputContext) -> None:
    """Have Dagster emit the run's materializations in partition order, so the run's newest
    event (the asset's "latest materialization" in the UI) is its last key. Dagster lists the
    keys of a run of static, dynamic or multi-partitions from a set (any order); time windows
    already come in order. Left as it is when Dagster holds them otherwise (see
    :mod:`.dagster_private`)."""
    keys = unordered_partition_keys(context)
    if keys is None or len(keys) < 2 or not context.has_asset_partitions:
        return
    order = partition_order(context.asset_partitions_def, output_instance(context))
    emit_in_order(context, sorted(keys, key=order))


def partition_order(
    pdef: dg.PartitionsDefinition, instance: dg.DagsterInstance | None = None
) -> Callable[[str], tuple[Any, ...]]:
    """A sort key putting partition keys of ``pdef`` in its order (time windows by start,
    static keys as defined, dynamic keys as added, multi-partitions dimension by dimension, in
    Dagster's dimension order)."""
    if isinstance(pdef, dg.MultiPartitionsDefinition):
        dims = [(d.name, _rank(d.partitions_def, instance)) for d in pdef.partitions_defs]

        def multi(key: str) -> tuple[Any, ...]:
            parts = (
                key.keys_by_dimension
                if isinstance(key, dg.MultiPartitionKey)
                else dict(zip([n for n, _ in dims], str(key).split("|"), strict=True))
            )
            return tuple(rank(parts[name]) for name, rank in dims)

        return multi
    rank = _rank(pdef, instance)
    return lambda key: (rank(key),)


def _rank(
    pdef: dg.PartitionsDefinition, instance: dg.DagsterInstance | None
) -> Callable[[str], tuple[Any, ...]]:
    """A sort key of one dimension's keys."""
    if isinstance(pdef, dg.TimeWindowPartitionsDefinition):
        return lambda key: (pdef.time_window_for_partition_key(key).start.timestamp(), key)
    if isinstance(pdef, dg.DynamicPartitionsDefinition):
        known = pdef.get_partition_keys(dynamic_partitions_store=instance) if instance else []
    else:
        known = pdef.get_partition_keys()
    index = {k: i for i, k in enumerate(known)}
    return lambda key: (index.get(key, len(index)), key)
