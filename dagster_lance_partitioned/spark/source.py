"""The ``lance_partitioned`` Spark Python data source.

``spark.read.format("lance_partitioned").load(uri)``: the schema is the namespace schema, and the
``__manifest`` version is pinned when the DataFrame is created (``schema()`` runs then), so
every action on it reads that one snapshot, whatever writers commit meanwhile.

Read options: ``version`` (time travel), ``storageOptions`` (JSON) or ``storage.<key>``,
``filter`` (SQL or JSON ``[[column, op, value], ...]``), ``columns`` (read only these;
Spark 4.3's Python data sources get no column pruning from ``select``, so this option, or a
user-specified schema naming a subset of the columns, is how a read is narrowed),
``batchSize``, ``rowsPerPartition`` (at most this many rows per Spark input partition, default
1,048,576: small partition tables share one, large ones are split by fragments),
``minPartitions`` (at least this many input partitions when the data allows, splitting by
fragments down to 65,536 rows each; default: the session's ``defaultParallelism`` when the
format was registered, and ``read_dataframe`` passes the current one), ``splitFragments``,
``pushFilters``.

Spark 4.3 caveat (fixed upstream for 5.0 by SPARK-58551): Spark keeps the pushdown result of
the last query *with* pushable filters on the data source object of a loaded DataFrame, and a
later query on the same DataFrame that pushes no filter at all (no ``where``, or only
``OR``-ed / function predicates) reuses it, reading only the partitions of that earlier
query. Load the DataFrame again (or use ``read_dataframe``) for each differently filtered
query, or set option ``pushFilters=false`` on a DataFrame reused that way (then only the
``filter`` option prunes).

Write options: ``partitionBy`` (only to create a missing namespace), ``partitionOverwriteMode``
(``dynamic``: mode ``overwrite`` replaces only the partitions present in the data; ``static``:
the whole table; without it, the session's ``spark.sql.sources.partitionOverwriteMode`` at the
time of the write decides, default static), ``storageOptions`` / ``storage.<key>``,
``commitProperties`` (JSON), ``writeId`` (recorded as ``dlp.write_id``; by default a random
one). Every write's manifest commit also records its outcome (``dlp.spark.result``: rows and
bytes per partition, task and commit-message counts), which is how ``write_dataframe`` learns
what it wrote, wherever the driver runs (see ``result``)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter
from pyspark.sql.types import StructType

from ..core import PartitionedNamespace, SchemaError
from ..core.engine import strip_field_ids
from . import options as opt
from .reader import LancePartitionedReader, ReadOptions
from .types import spark_schema


class LancePartitionedDataSource(DataSource):
    """Spark data source over a Lance partitioned namespace (format ``lance_partitioned``)."""

    # the manifest version and namespace schema pinned by ``schema()`` (set on the instance)
    _pinned: tuple[int, pa.Schema] | None = None
    # default of option ``minPartitions`` (``register`` sets the session's parallelism)
    default_min_partitions: int = 1

    @classmethod
    def name(cls) -> str:
        return opt.FORMAT

    # -- read ---------------------------------------------------------------------------------
    def _open(self) -> PartitionedNamespace:
        return PartitionedNamespace.open(
            opt.path(self.options),
            opt.storage_options(self.options),
            version=opt.version(self.options),
        )

    def _pin(self) -> tuple[int, pa.Schema]:
        if self._pinned is None:
            ns = self._open()
            self._pinned = (ns.version, ns.schema_with_ids)
        return self._pinned

    def _read_schema(self, with_ids: pa.Schema) -> pa.Schema:
        """The namespace schema narrowed to option ``columns``, with field ids."""
        wanted = opt.columns(self.options)
        if wanted is None:
            return with_ids
        missing = [c for c in wanted if with_ids.get_field_index(c) < 0]
        if missing:
            raise SchemaError(
                f"option 'columns': {missing} not in the namespace schema "
                f"(columns: {', '.join(with_ids.names)})"
            )
        return pa.schema([with_ids.field(c) for c in wanted], metadata=with_ids.metadata)

    def schema(self) -> StructType:
        """The namespace schema (narrowed to option ``columns``) at the pinned manifest version."""
        _version, with_ids = self._pin()
        return spark_schema(strip_field_ids(self._read_schema(with_ids)))

    def reader(self, schema: StructType) -> DataSourceReader:
        version, with_ids = self._pin()
        names = [f.name for f in schema.fields]
        missing = [n for n in names if with_ids.get_field_index(n) < 0]
        if missing:
            raise SchemaError(
                f"columns {missing} of the requested schema are not in the namespace schema "
                f"(columns: {', '.join(with_ids.names)})"
            )
        read = ReadOptions(
            uri=opt.path(self.options),
            manifest_version=version,
            schema_with_ids=with_ids,
            columns=tuple(names),
            storage_options=opt.storage_options(self.options),
            base_filter=opt.filter_sql(self.options),
            batch_rows=opt.batch_rows(self.options),
            partition_rows=opt.partition_rows(self.options),
            min_partitions=_or(opt.min_partitions(self.options), self.default_min_partitions),
            split_fragments=opt.split_fragments(self.options),
            push_filters=opt.push_filters(self.options),
        )
        return LancePartitionedReader(read, schema)

    # -- write --------------------------------------------------------------------------------
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import make_writer

        return make_writer(self.options, schema, overwrite)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def with_parallelism(parallelism: int) -> type[LancePartitionedDataSource]:
    """The data source class whose reads default to at least ``parallelism`` input
    partitions (what ``register`` registers)."""
    return type(
        "LancePartitionedDataSource",
        (LancePartitionedDataSource,),
        {
            "default_min_partitions": max(1, int(parallelism)),
            "__doc__": LancePartitionedDataSource.__doc__,
        },
    )
