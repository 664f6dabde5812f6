"""Index builds of many partitions as Spark tasks: each task indexes its partitions' tables
(detached versions, nothing published) and returns a message of a few hundred bytes; the
driver registers every table in one ``__manifest`` commit (see
:mod:`dagster_lance_partitioned.core.search.catalog`)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, StructField, StructType

from ..core import IndexBuildError, IndexCoverage, PartitionedNamespace
from ..core.engine import (
    FilterLike,
    IndexRunner,
    Reindex,
    TableVersion,
    create_index,
    index_coverages,
    optimize_indexes,
)
from .result import carried, package_error

_PAYLOAD = "revision"
_SCHEMA = StructType([StructField(_PAYLOAD, BinaryType(), True)])


def build_indexes(
    spark: SparkSession,
    uri: str,
    indexes: Sequence[Mapping[str, Any]] = (),
    *,
    filter: FilterLike = None,
    storage_options: dict[str, str] | None = None,
) -> list[IndexCoverage]:
    """Declare ``indexes`` (each ``{"column", "index_type", "name"?, "min_rows"?, **params}``)
    on the namespace at ``uri`` and build every declared index on the partition tables
    ``filter`` selects (missing ones, and rows appended since) in Spark tasks: two manifest
    commits per new declaration (the declaration, then its tables) and one for the rest;
    returns the coverage of every declared index."""
    ns = PartitionedNamespace.open(uri, storage_options)
    runner = _runner(spark, uri)
    for spec in indexes:
        params = dict(spec)
        column = params.pop("column", None)
        index_type = params.pop("index_type", None)
        name = params.pop("name", None)
        min_rows = params.pop("min_rows", None)
        create_index(
            ns,
            str(column),
            str(index_type),
            name=name,
            min_rows=min_rows,
            params=params,
            runner=runner,
        )
    optimize_indexes(ns, filter, runner=runner)
    return index_coverages(ns.refresh())


def _runner(spark: SparkSession, uri: str) -> IndexRunner:
    def run(job: Reindex) -> list[TableVersion]:
        if not job.tasks:
            return []
        count = len(job.tasks)
        slices = max(1, min(count, _parallelism(spark)))

        @carried
        def index_tables(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                out = []
                for i in batch.column(0).to_pylist():
                    made = job.new_version(job.tasks[int(i)])
                    out.append(pickle.dumps(made) if made is not None else None)
                yield pa.RecordBatch.from_arrays([pa.array(out, pa.binary())], [_PAYLOAD])

        try:
            rows = spark.range(count, numPartitions=slices).mapInArrow(index_tables, _SCHEMA)
            payloads = [r[_PAYLOAD] for r in rows.collect()]
        except PySparkException as e:
            found = package_error(e)
            if found is not None:
                raise found from e
            raise IndexBuildError(
                f"Spark index build of {uri} failed, nothing committed: {e}"
            ) from e
        return [pickle.loads(p) for p in payloads if p is not None]

    return run


def _parallelism(spark: SparkSession) -> int:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext
        return 8
