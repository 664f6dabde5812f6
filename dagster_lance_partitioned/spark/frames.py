"""DataFrame helpers for the Dagster layer: read a namespace into a DataFrame, write one into a
namespace and get back what was written."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession

from ..core import (
    Changes,
    MergeOptions,
    NamespaceState,
    PartitionSpec,
    RowChangeResult,
    WriteError,
    WriteMode,
    WriteResult,
)
from ..core.engine import (
    WRITE_MODES,
    FilterLike,
    Granularity,
    StagedWrite,
    commit_changes,
    source_names,
    source_types,
)
from ..core.engine import apply_changes as apply_to
from . import options as opt
from .merge import merge_dataframe
from .result import find_result, package_error
from .session import activate, functions_of, is_connect
from .types import arrow_schema
from .writer import (
    CHANGES_OPTION,
    PARTITIONS_OPTION,
    WRITE_ID_OPTION,
    encode_partitions,
    open_or_create,
)

# the Spark function computing each date part (Spark's ``day`` is ``dayofmonth``)
_SPARK_DATE_PART = {
    Granularity.YEAR: "year",
    Granularity.MONTH: "month",
    Granularity.DAY: "dayofmonth",
    Granularity.HOUR: "hour",
}


def read_dataframe(
    spark: SparkSession,
    uri: str,
    filter: FilterLike = None,
    columns: Sequence[str] | None = None,
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The namespace at ``uri`` as a DataFrame: only the partition tables ``filter`` may match
    are read (the filter is also applied inside each scan), only ``columns`` are read, at
    manifest ``version`` (default: the latest, pinned now). ``options``: further reader
    options (``rowsPerPartition``, ``minPartitions``, ``batchSize``, ...); at least the
    session's current ``defaultParallelism`` input partitions by default, when the data
    allows."""
    activate(spark)
    given = dict(options or {})
    if not any(k.lower() == "minpartitions" for k in given) and not is_connect(spark):
        # the session's parallelism now (executors may have joined since registration)
        given["minPartitions"] = str(spark.sparkContext.defaultParallelism)
    reader = spark.read.format(opt.FORMAT).options(**given)
    sql = opt.encode_filter(filter)
    if sql is not None:
        reader = reader.option("filter", sql)
    if columns is not None:
        reader = reader.option("columns", json.dumps(list(columns)))
    if version is not None:
        reader = reader.option("version", str(version))
    if storage_options:
        reader = reader.option("storageOptions", json.dumps(storage_options))
    return reader.load(uri)


def write_dataframe(
    df: DataFrame,
    uri: str,
    mode: WriteMode | Literal["merge"] = "append",
    partition_by: str | Sequence[Any] | None = None,
    partition_values: Sequence[Mapping[str, Any]] | None = None,
    *,
    storage_options: dict[str, str] | None = None,
    commit_properties: dict[str, str] | None = None,
    cluster: bool = True,
    on: str | Sequence[str] | MergeOptions | None = None,
    changes: Changes | None = None,
) -> WriteResult | RowChangeResult | None:
    """Write ``df`` into the namespace at ``uri`` through the ``lance_partitioned`` format and
    return what was written (rows and bytes per partition, read versions, manifest version);
    None when the write committed nothing. The result is read back from the namespace (the
    write's manifest commit records it under a write id chosen here), so it also reaches this
    process from a Spark Connect server on another machine.

    ``mode``: ``append``, ``overwrite_partitions`` or ``overwrite`` (the whole table, also when
    the session sets ``spark.sql.sources.partitionOverwriteMode=dynamic``). ``partition_by`` creates
    a missing namespace (``"country,year(event_date)"``, JSON, or PartitionFields).
    ``partition_values`` (mappings of the current spec's field ids to values) names the only
    partitions the write may touch: a row of another partition fails the job, naming it, and
    nothing is committed; with ``overwrite_partitions`` a named partition without rows becomes
    empty. ``cluster`` first hash-partitions the rows by their partition values (where Spark can
    compute them), so each partition table gets few, large fragments.

    The schema is checked on the driver before anything is written (SchemaMismatchError naming
    the column); the rows never leave the executors.

    ``mode="merge"`` upserts instead, distributed, into an existing namespace and returns a
    :class:`RowChangeResult`: ``on`` is the key column(s) (the default options) or a
    :class:`~dagster_lance_partitioned.core.row_changes.merge.MergeOptions`, as for
    :func:`~dagster_lance_partitioned.spark.merge.merge_dataframe`. An option of one kind of
    mode given with the other (``on`` with a write mode; ``partition_by``, ``partition_values``
    or ``changes`` with a merge, whose partitions are limited with ``MergeOptions.confine``)
    raises :class:`WriteError` naming it; nothing is written.

    ``changes`` (a transaction's schema / spec changes, :meth:`.Transaction.detach_changes`):
    the rows are written under the schema and spec they make, and the Spark driver commits
    them just before the data; a write refused on the way commits neither (for a merge,
    commit the transaction first)."""
    if mode == "merge":
        refused = [
            name
            for name, value in (
                ("partition_by", partition_by),
                ("partition_values", partition_values),
                ("changes", changes),
            )
            if value is not None
        ]
        if refused:
            raise WriteError(
                f"write_dataframe(mode='merge') does not take {' or '.join(refused)}: a merge "
                "writes into an existing namespace, and confine= limits the partitions it may "
                "change; nothing was written"
            )
        return merge_dataframe(
            df,
            uri,
            on if on is not None else [],
            storage_options=storage_options,
            commit_properties=commit_properties,
        )
    if mode not in WRITE_MODES:
        raise WriteError(f"unknown write mode {mode!r} (use one of {', '.join(WRITE_MODES)})")
    if on is not None:
        raise WriteError(
            f"write_dataframe: on only apply with mode='merge', not mode={mode!r}; "
            "nothing was written"
        )
    data_schema = arrow_schema(df.schema)
    ns = open_or_create(uri, storage_options, data_schema, partition_by)
    # the checks the job repeats, here with the core's own exceptions
    staged = StagedWrite.begin(ns, mode, partitions=partition_values, changes=changes)
    staged.check_schema(data_schema)
    before = ns.version  # this write's commit is searched after it
    write_id = secrets.token_hex(8)
    activate(df.sparkSession)
    if cluster:
        target: Any = ns
        if changes is not None and changes.updates:  # partitioned by the changed spec
            target = NamespaceState(
                ns.state.store, apply_to(ns.state.snapshot, changes.updates), pinned=True
            )
        df = cluster_by_partition(df, target)
    writer = df.write.format(opt.FORMAT).mode("append" if mode == "append" else "overwrite")
    if mode != "append":  # the helper's mode is explicit: the session's overwrite mode is not
        writer = writer.option(
            "partitionOverwriteMode", "dynamic" if mode == "overwrite_partitions" else "static"
        )
    if storage_options:
        writer = writer.option("storageOptions", json.dumps(storage_options))
    if commit_properties:
        writer = writer.option("commitProperties", json.dumps(commit_properties))
    if partition_values is not None:
        writer = writer.option(PARTITIONS_OPTION, encode_partitions(list(partition_values)))
    if staged.changes is not None:
        writer = writer.option(CHANGES_OPTION, staged.changes)
    try:
        writer.option(WRITE_ID_OPTION, write_id).save(ns.uri)
    except PySparkException as e:
        # the commit may have landed before the failure reached this process (a Connect
        # server that lost its client): then the write stands
        result = find_result(ns.uri, storage_options, before, write_id)
        if result is None:
            # a package error raised in a Python worker: again with its own class and fields
            carried = package_error(e)
            if carried is not None:
                raise carried from e
            raise WriteError(f"Spark write into {ns.uri} failed, nothing committed: {e}") from e
        return result
    if changes is not None and changes.updates:
        commit_changes(ns.state.store, changes)  # made already, unless Spark committed nothing
    return find_result(ns.uri, storage_options, before, write_id)


def partition_columns(
    spec: PartitionSpec,
    schema_with_ids: Any,
    columns: Sequence[str],
    df: DataFrame | None = None,
) -> list[Column]:
    """Spark expressions (for ``df``'s kind of session) grouping rows like ``spec`` (identity
    and date-part fields of ``columns``; other fields are left out, which only makes the
    grouping coarser)."""
    F = functions_of(df)
    exprs: list[Column] = []
    for f in spec.fields:
        names = source_names(f, schema_with_ids)
        if len(names) != 1 or names[0] not in columns:
            continue
        transform = f.transform_for(source_types(f, schema_with_ids))
        if transform.is_identity:
            exprs.append(F.col(names[0]))
        elif transform.granularity is not None:
            exprs.append(getattr(F, _SPARK_DATE_PART[transform.granularity])(F.col(names[0])))
    return exprs


def cluster_by_partition(df: DataFrame, ns: Any) -> DataFrame:
    """``df`` hash-partitioned by its partition values, so that each Spark task writes whole
    partitions (one fragment per partition table and task instead of one per task)."""
    exprs = partition_columns(ns.current_spec, ns.schema_with_ids, df.columns, df)
    return df.repartition(*exprs) if exprs else df
