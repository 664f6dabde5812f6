"""Type handlers: how each dataframe type an asset may return or take is written into and read
from a partitioned namespace. Arrow and pandas go through the core; Spark DataFrames through the
Spark layer (rows stay in the executors)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..core.errors import PartitionedNamespaceError
from ..core.namespace import PartitionedNamespace
from ..core.writer import WriteResult


class UnsupportedTypeError(PartitionedNamespaceError, TypeError):
    """An asset returned, or an input asked for, a type the IO manager cannot store."""


@dataclass(frozen=True)
class ReadRequest:
    """What a load reads: rows matching ``filter``, ``columns``, at manifest ``version``."""

    uri: str
    filter: str | None
    columns: Sequence[str] | None
    version: int | None
    storage_options: dict[str, str] | None


class TypeHandler:
    """Converts one dataframe type to and from a partitioned namespace."""

    name = "?"
    engine: str | None = None  # the asset kind of the compute engine, if any

    def handles(self, obj: Any) -> bool:
        raise NotImplementedError

    def handles_type(self, typ: Any) -> bool:
        raise NotImplementedError

    def schema(self, obj: Any) -> pa.Schema:
        raise NotImplementedError

    def write(
        self,
        obj: Any,
        ns: PartitionedNamespace,
        mode: str,
        partitions: list[dict[str, Any]] | None,
        commit_properties: Mapping[str, str],
    ) -> WriteResult | None:
        raise NotImplementedError

    def read(self, request: ReadRequest) -> Any:
        raise NotImplementedError

    def sample_outside(self, obj: Any, row_filter: str) -> dict[str, Any] | None:
        """One row of ``obj`` not matching ``row_filter`` (for error messages)."""
        raise NotImplementedError


def _open(request: ReadRequest) -> PartitionedNamespace:
    return PartitionedNamespace.open(request.uri, request.storage_options, request.version)


class ArrowTableHandler(TypeHandler):
    name = "pyarrow.Table"

    def handles(self, obj: Any) -> bool:
        return isinstance(obj, pa.Table | pa.RecordBatch)

    def handles_type(self, typ: Any) -> bool:
        return typ in (pa.Table, pa.RecordBatch)

    def schema(self, obj: Any) -> pa.Schema:
        return obj.schema

    def write(self, obj, ns, mode, partitions, commit_properties):  # type: ignore[no-untyped-def]
        return ns.write(obj, mode, partitions=partitions, commit_properties=dict(commit_properties))

    def read(self, request: ReadRequest) -> Any:
        return _open(request).to_table(request.filter, request.columns)

    def sample_outside(self, obj: Any, row_filter: str) -> dict[str, Any] | None:
        return _sample_outside_arrow(
            pa.table(obj) if isinstance(obj, pa.RecordBatch) else obj, row_filter
        )


def _sample_outside_arrow(table: pa.Table, row_filter: str) -> dict[str, Any] | None:
    import datafusion as dfn

    ctx = dfn.SessionContext()
    ctx.register_record_batches("t", [table.to_batches()])
    rows = ctx.sql(f"SELECT * FROM t WHERE NOT ({row_filter}) LIMIT 1").to_arrow_table()
    return rows.to_pylist()[0] if rows.num_rows else None


class ArrowReaderHandler(ArrowTableHandler):
    name = "pyarrow.RecordBatchReader"

    def handles(self, obj: Any) -> bool:
        return isinstance(obj, pa.RecordBatchReader)

    def handles_type(self, typ: Any) -> bool:
        return typ is pa.RecordBatchReader

    def read(self, request: ReadRequest) -> Any:
        return _open(request).scan(request.filter, request.columns)

    def sample_outside(self, obj: Any, row_filter: str) -> dict[str, Any] | None:
        return None  # a reader is consumed by the write; the core error has a sample row


class PandasHandler(TypeHandler):
    name = "pandas.DataFrame"

    def handles(self, obj: Any) -> bool:
        pd = _pandas()
        return pd is not None and isinstance(obj, pd.DataFrame)

    def handles_type(self, typ: Any) -> bool:
        pd = _pandas()
        return pd is not None and typ is pd.DataFrame

    def schema(self, obj: Any) -> pa.Schema:
        return pa.Schema.from_pandas(obj, preserve_index=False)

    def write(self, obj, ns, mode, partitions, commit_properties):  # type: ignore[no-untyped-def]
        table = pa.Table.from_pandas(obj, preserve_index=False)
        return ns.write(
            table, mode, partitions=partitions, commit_properties=dict(commit_properties)
        )

    def read(self, request: ReadRequest) -> Any:
        return _open(request).to_table(request.filter, request.columns).to_pandas()

    def sample_outside(self, obj: Any, row_filter: str) -> dict[str, Any] | None:
        return _sample_outside_arrow(pa.Table.from_pandas(obj, preserve_index=False), row_filter)


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional
        return None
    return pd


class SparkHandler(TypeHandler):
    """Spark DataFrames (classic and Connect): distributed writes and reads through the
    ``lance_partitioned`` data source."""

    name = "pyspark.sql.DataFrame"
    engine = "spark"

    def handles(self, obj: Any) -> bool:
        DataFrame = _spark_dataframe()
        return DataFrame is not None and isinstance(obj, DataFrame)

    def handles_type(self, typ: Any) -> bool:
        DataFrame = _spark_dataframe()
        return DataFrame is not None and isinstance(typ, type) and issubclass(typ, DataFrame)

    def schema(self, obj: Any) -> pa.Schema:
        from ..spark.types import arrow_schema

        return arrow_schema(obj.schema)

    def write(self, obj, ns, mode, partitions, commit_properties):  # type: ignore[no-untyped-def]
        from ..spark import register, write_dataframe

        register(obj.sparkSession)  # idempotent; the session may not know the format yet
        # the result comes back through the namespace (the commit records it), also from a
        # Spark Connect server on another machine; None: Spark committed nothing
        result = write_dataframe(
            obj,
            ns.uri,
            mode,
            partition_values=partitions,
            storage_options=ns.storage_options,
            commit_properties=dict(commit_properties),
        )
        if result is None and partitions and mode == "overwrite_partitions":
            # Spark committed nothing (no rows): the named partitions still become empty
            empty = pa.Table.from_batches([], schema=self.schema(obj))
            result = ns.write(
                empty, mode, partitions=partitions, commit_properties=dict(commit_properties)
            )
        return result

    def read(self, request: ReadRequest) -> Any:
        from pyspark.sql import SparkSession

        from ..spark import read_dataframe, register

        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        register(spark)
        return read_dataframe(
            spark,
            request.uri,
            filter=request.filter,
            columns=request.columns,
            version=request.version,
            storage_options=request.storage_options,
        )

    def sample_outside(self, obj: Any, row_filter: str) -> dict[str, Any] | None:
        rows = obj.where(f"NOT ({row_filter})").limit(1).collect()
        return rows[0].asDict(recursive=True) if rows else None


def _spark_dataframe() -> Any:
    try:
        from pyspark.sql import DataFrame
    except ImportError:  # pragma: no cover - pyspark is a dependency, kept optional here
        return None
    return DataFrame


HANDLERS: tuple[TypeHandler, ...] = (
    ArrowTableHandler(),
    ArrowReaderHandler(),
    PandasHandler(),
    SparkHandler(),
)


def handler_for_object(obj: Any, asset: str) -> TypeHandler:
    """The handler that writes ``obj``."""
    for h in HANDLERS:
        if h.handles(obj):
            return h
    raise UnsupportedTypeError(
        f"asset {asset} returned a {type(obj).__module__}.{type(obj).__name__}; the Lance "
        f"IO manager stores {', '.join(h.name for h in HANDLERS)}"
    )


def handler_for_type(typ: Any, asset: str) -> TypeHandler:
    """The handler that loads an input annotated ``typ`` (Any / no annotation: Arrow)."""
    if typ is None or typ is Any or typ is object:
        return HANDLERS[0]
    for h in HANDLERS:
        if h.handles_type(typ):
            return h
    raise UnsupportedTypeError(
        f"input from asset {asset} is annotated {typ!r}; the Lance IO manager loads "
        f"{', '.join(h.name for h in HANDLERS)}"
    )
