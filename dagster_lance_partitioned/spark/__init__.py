"""Spark layer: the ``lance_partitioned`` Python data source and DataFrame helpers.

```python
from dagster_lance_partitioned.spark import register
register(spark)
df = spark.read.format("lance_partitioned").load(uri)
df.write.format("lance_partitioned").mode("append").save(uri)
```
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from .errors import ScatteredWriteWarning, SparkOptionError
from .frames import read_dataframe, write_dataframe
from .indexes import build_indexes
from .merge import merge_dataframe
from .options import FORMAT
from .source import LancePartitionedDataSource, with_parallelism

__all__ = [
    "FORMAT",
    "LancePartitionedDataSource",
    "ScatteredWriteWarning",
    "SparkOptionError",
    "build_indexes",
    "merge_dataframe",
    "read_dataframe",
    "register",
    "write_dataframe",
]

_SESSION_CONF = {
    # Python data sources only see pushed filters with this on (off by default in Spark 4.x)
    "spark.sql.python.filterPushdown.enabled": "true",
    # time-of-day columns are read as Spark TIME, which Spark 4.x keeps behind this flag
    "spark.sql.timeType.enabled": "true",
}

_REGISTERED = "spark.dagster_lance_partitioned.registered"
_MARK = f"{LancePartitionedDataSource.__module__}.{LancePartitionedDataSource.__qualname__}"


def register(spark: SparkSession) -> None:
    """Register the ``lance_partitioned`` format with ``spark`` and switch on Python data source
    filter pushdown (and the TIME type) for the session. Reads then default to at least the
    session's current ``defaultParallelism`` input partitions (option ``minPartitions``)."""
    for key, value in _SESSION_CONF.items():
        spark.conf.set(key, value)
    if spark.conf.get(_REGISTERED, None) == _MARK:  # once per session: Spark warns on repeats
        return
    spark.dataSource.register(with_parallelism(default_parallelism(spark)))
    spark.conf.set(_REGISTERED, _MARK)


def default_parallelism(spark: SparkSession) -> int:
    """The session's ``defaultParallelism`` (with Spark Connect: ``spark.default.parallelism``
    if set, else the partition count Spark gives a range without one)."""
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        return spark.sparkContext.defaultParallelism
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured and configured.strip().isdigit():
        return int(configured)
    ids = spark.range(0, 1 << 16).selectExpr("spark_partition_id() AS p")
    probe = ids.selectExpr("max(p) + 1 AS n")
    return int(probe.collect()[0][0])
