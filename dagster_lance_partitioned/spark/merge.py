"""Row-level changes from Spark: merge a DataFrame into a namespace (upsert on key columns),
distributed.

The executors merge, the driver commits once; the rows never reach the driver. On the driver:
the options and the DataFrame schema are checked and the merge is planned against the latest
manifest version (:class:`~.merge_job.MergeJob`: the registered tables and which of them may
hold keys whose new row lies in another partition). Then one Spark job:

1. every input row gets the route of its partition under the current spec (``mapInArrow``);
2. when keys may be stored in another partition than their new row's (``on`` does not include
   every spec's partition source columns, or older specs have partitions), the key columns of
   those tables are read in tasks and joined with the input keys: input rows whose key is
   stored elsewhere are flagged, and the stored keys to delete are routed to their table;
3. the input rows and the moved-out keys are brought together by route (one task holds all
   of a route's rows); per partition table the task merges them into the table's pinned
   version as a detached Lance version (or creates the new partition's table) with the core's
   per-table executor, its tables in threads, and returns a message of about a hundred bytes
   (object id, base and new version, rows, counts).

When ``on`` includes the current spec's partition source columns, all the rows of a key go to
one partition, so the tasks check the keys for duplicates and NULLs themselves; otherwise a
separate Spark job checks them first (a grouped count, at most one row back).

The driver collects the messages and registers every table in one ``__manifest`` commit
(:func:`~dagster_lance_partitioned.core.engine.commit_outcomes`). When a concurrent commit
changed a partition the merge touched (or created one it creates), the merge is made again on
the new state, up to :data:`MAX_ATTEMPTS` times, then :class:`CommitConflictError`; a change is
never lost. Package errors raised in the tasks reach the caller with their own class."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
from functools import reduce
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from ..core import (
    CommitConflictError,
    MergeKeyError,
    MergeOptions,
    NamespaceState,
    PartitionedNamespace,
    RowChangeResult,
    StaleChangeError,
    WriteError,
)
from ..core.engine import (
    NAMING_KEY,
    ChangePlan,
    Counts,
    TableVersion,
    check_input_schema,
    commit_outcomes,
    duplicate_key_error,
    ensure_naming_key,
    keys_cover_partitions,
    strip_field_ids,
)
from ..core.engine import declared_indexes as declared
from ..core.engine import spec_source_columns as source_names
from .merge_job import AWAY, HOME, KIND, ROUTE, ROUTE_COLUMNS, MergeJob
from .result import package_error
from .session import activate, functions_of
from .types import arrow_schema, spark_type

MAX_ATTEMPTS = 3  # merges redone because a concurrent commit changed a touched partition
MESSAGE_SCHEMA = StructType(
    [StructField("route", StringType(), True), StructField("message", BinaryType(), True)]
)
_COUNT = "__dlp_count"


def merge_dataframe(
    df: DataFrame,
    uri: str,
    on: str | Sequence[str] | MergeOptions,
    *,
    storage_options: dict[str, str] | None = None,
    commit_properties: dict[str, str] | None = None,
) -> RowChangeResult:
    """Merge the rows of ``df`` into the namespace at ``uri`` in one manifest commit,
    distributed (see the module doc), on the key column(s) ``on`` with the default options or
    as a :class:`~dagster_lance_partitioned.core.row_changes.merge.MergeOptions` says. Semantics of
    :func:`~dagster_lance_partitioned.core.row_changes.merge.merge_rows`: matched keys updated or
    ignored, new keys inserted or ignored, moved keys deleted from their old partition,
    ``when_not_matched_by_source="delete"`` limited to the partitions the input touches or to
    ``scope``; keys must be unique and not NULL (:class:`DuplicateKeyError` /
    :class:`MergeKeyError` naming one, nothing changed); ``confine``: the partitions it may
    change (a key to move out of another raises :class:`UnnamedPartitionError`)."""
    options = MergeOptions.of(on)
    ns = PartitionedNamespace.open(uri, storage_options)
    state = ns.state
    state.require_unpinned("merge into it")
    opts = options.checked(state)
    data_schema = arrow_schema(df.schema)
    missing = [k for k in opts.on if data_schema.get_field_index(k) < 0]
    if missing:
        raise MergeKeyError(
            f"merge key {missing[0]!r} is not a column of the DataFrame", missing[0]
        )
    clash = [c for c in df.columns if c in ROUTE_COLUMNS]
    if clash:
        raise WriteError(f"column {clash[0]!r} is reserved for the merge; rename it")
    check_input_schema(data_schema, state)  # SchemaMismatchError naming the column
    activate(df.sparkSession)
    props = {"source": "spark", **opts.properties(), **(commit_properties or {})}
    try:
        error: StaleChangeError | None = None
        for _attempt in range(MAX_ATTEMPTS):
            if ensure_naming_key(state.store, state.refresh().snapshot):
                state.refresh()
            job = plan_job(state, opts)
            base = state.snapshot
            # a key's rows may go to several partitions: checked before, not in the tasks
            check = not keys_pick_partition(state, list(opts.on))
            outcomes, counts = run_job(df, job, check)
            try:
                return commit_outcomes(state, base, outcomes, "merge", counts, props, job.name_of)
            except StaleChangeError as e:
                error = e  # made again on the new state
        raise CommitConflictError(
            f"{uri}: partitions this merge touches kept being changed by concurrent commits "
            f"({MAX_ATTEMPTS} attempts); nothing of it is visible, retry it",
            error.partitions if error is not None else None,
        )
    except PySparkException as e:
        carried = package_error(e)  # a package error raised in a task, with its own class
        if carried is not None:
            raise carried from e
        raise WriteError(f"Spark merge into {uri} failed, nothing committed: {e}") from e


def check_unique_keys(df: DataFrame, on: list[str]) -> None:
    """Refuse keys that are NULL or occur twice in ``df``, naming one (one Spark job; one row
    at most comes back)."""
    F = functions_of(df)
    nulls = reduce(lambda a, b: a | b, [F.col(k).isNull() for k in on])
    counted = df.groupBy(*on).agg(F.count(F.lit(1)).alias(_COUNT))
    bad = counted.where((F.col(_COUNT) > 1) | nulls).limit(1).collect()
    if not bad:
        return
    row = bad[0].asDict()
    for name in on:
        if row[name] is None:
            raise MergeKeyError(
                f"merge key column {name!r} is NULL in input row(s); keys must be set", name
            )
    raise duplicate_key_error({k: row[k] for k in on}, int(row[_COUNT]), None)


def keys_pick_partition(state: NamespaceState, on: list[str]) -> bool:
    """Whether ``on`` includes the current spec's partition source columns: then all the input
    rows of one key go to the same partition, and the task merging it sees every one."""
    names = source_names(state.current_spec, state.schema_with_ids)
    return names is not None and names <= set(on)


def plan_job(state: NamespaceState, opts: MergeOptions) -> MergeJob:
    """The merge planned on ``state``'s snapshot: the registered tables by route, those searched
    for keys stored elsewhere, those ``scope`` selects."""
    snap = state.snapshot
    spec = state.current_spec
    schema = state.schema_with_ids
    plan = ChangePlan(snap, state.uri, schema, spec)
    tasks = plan.tasks(None)
    tables = {MergeJob.route_of(t, spec): t for t in tasks}
    if keys_cover_partitions(snap, schema, opts.on):
        # a key is stored only where its values map under each spec: only older specs' tables
        search = [r for r, t in tables.items() if t.spec_id != spec.spec_id]
    else:
        search = list(tables)
    scoped: frozenset[str] = frozenset()
    if opts.by_source and opts.scope is not None:
        scoped = frozenset(MergeJob.route_of(t, spec) for t in plan.tasks(opts.scope))
    confined = None
    if opts.confine is not None:
        confined = frozenset(MergeJob.route_of(t, spec) for t in plan.tasks(opts.confine))
    return MergeJob(
        state.uri,
        state.storage_options,
        snap.version,
        schema,
        spec,
        opts,
        secrets.token_hex(8),
        tables,
        tuple(search),
        scoped,
        confined,
        snap.metadata.get(NAMING_KEY),
        tuple(declared(state)),
    )


def run_job(
    df: DataFrame, job: MergeJob, check_keys: bool = False
) -> tuple[list[TableVersion], Counts]:
    """Run the merge's Spark job(s); the tables' outcomes and the rows counted (see the module
    doc). ``check_keys``: check the keys for duplicates first (another job)."""
    spark = df.sparkSession
    F = functions_of(df)
    on = list(job.options.on)
    routed = df.mapInArrow(job.route, StructType([*df.schema.fields, _string(ROUTE)]))
    if check_keys or job.search:
        # the input is read more than once below: materialized once, in the executors (every
        # use then sees the same rows, also of a source that would not give them twice)
        routed = routed.localCheckpoint(eager=True)
    if check_keys:
        check_unique_keys(routed, on)
    left = routed.withColumn(AWAY, F.lit(False))
    right: DataFrame | None = None
    plain = strip_field_ids(job.schema)
    key_fields = [StructField(k, spark_type(plain.field(k).type, k), True) for k in on]
    if job.search:
        stored_schema = StructType([*key_fields, _string(HOME)])
        numbers = spark.range(0, len(job.search), 1, _parallelism(spark, len(job.search)))
        stored = numbers.mapInArrow(
            functools.partial(job.stored, target=arrow_schema(stored_schema)), stored_schema
        )
        # the input keys under fresh names (a join of ``routed`` with a frame derived from
        # itself is ambiguous for Spark otherwise)
        fresh = [f"__dlp_key{i}" for i in range(len(on))]
        incoming = routed.select(
            *[F.col(k).alias(n) for k, n in zip(on, fresh, strict=True)], ROUTE
        )
        found = stored.select(*[F.col(k).alias(n) for k, n in zip(on, fresh, strict=True)], HOME)
        # shuffled hash joins building on the input side: Spark estimates the stored keys from
        # the table numbers they are read from (a few hundred rows) and would broadcast
        # millions of keys; sorting them (a sort-merge join) takes longer
        away = incoming.hint("shuffle_hash").join(found, fresh, "inner")
        away = away.where(F.col(HOME) != F.col(ROUTE))
        flags = away.select(*[F.col(n).alias(k) for k, n in zip(on, fresh, strict=True)])
        flags = flags.distinct().withColumn(AWAY, F.lit(True)).hint("shuffle_hash")
        left = routed.join(flags, on, "left_outer").withColumn(
            AWAY, F.coalesce(F.col(AWAY), F.lit(False))
        )
        right = away.select(
            F.col(HOME).alias(ROUTE), *[F.col(n).alias(k) for k, n in zip(on, fresh, strict=True)]
        )
    if job.scoped:
        marker_schema = StructType([_string(ROUTE), *key_fields])
        markers = spark.createDataFrame(
            [(r, *([None] * len(on))) for r in sorted(job.scoped)], marker_schema
        )
        right = markers if right is None else right.unionByName(markers)
    # one frame holding both sides, each route in one task (the task changes its tables in
    # threads; a cogroup would call Python once per table, one after the other)
    both = left.withColumn(KIND, F.lit(0))
    if right is not None:
        both = both.unionByName(right.withColumn(KIND, F.lit(1)), allowMissingColumns=True)
    tasks = _parallelism(spark, 1 << 30)
    out = both.repartition(tasks, ROUTE).mapInArrow(job.apply_rows, MESSAGE_SCHEMA)
    return gather(row["message"] for row in out.collect())


def gather(payloads: Any) -> tuple[list[TableVersion], Counts]:
    """The outcomes and the summed counts of the tasks' messages."""
    import pickle

    outcomes: list[TableVersion] = []
    total = Counts()
    for payload in payloads:
        if not payload:
            continue
        outcome, counts = pickle.loads(bytes(payload))
        outcomes.append(outcome)
        total.inserted += counts.inserted
        total.updated += counts.updated
        total.deleted += counts.deleted
        total.moved += counts.moved
    return outcomes, total


def _string(name: str) -> StructField:
    return StructField(name, StringType(), True)


def _parallelism(spark: Any, items: int) -> int:
    """Tasks for reading ``items`` tables' keys: the session's default parallelism at most."""
    try:
        default = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext
        default = 8
    return max(1, min(items, default))


__all__ = ["MAX_ATTEMPTS", "merge_dataframe"]
