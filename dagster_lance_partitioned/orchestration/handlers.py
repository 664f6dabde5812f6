"""Type handlers: how each dataframe type an asset may return or take is written into and read
from a partitioned namespace. Arrow and pandas go through the core; Spark DataFrames through the
Spark layer (rows stay in the executors).

A handler is a :class:`TypeHandler` ``[T]`` for the types in its ``supported_types``. Only the
conversion to and from Arrow is abstract: writes, merges, reads and the row checks go through
Arrow by default, and an engine whose rows live elsewhere (Spark) overrides them. Users add
handlers by overriding ``LancePartitionedIOManager.type_handlers()`` (as with
dagster-duckdb's ``DuckDBIOManager.type_handlers()``); the first handler supporting a type wins.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa

from ..core import (
    MergeOptions,
    PartitionedNamespace,
    RowChangeResult,
    Transaction,
    WriteMode,
    WriteResult,
)
from .errors import UnsupportedTypeError

T = TypeVar("T")


WriteTarget = PartitionedNamespace | Transaction
"""Where a handler writes: a namespace, or a transaction (its ``write`` / ``merge_insert`` join
the transaction's schema and spec changes and return None: the result comes with the
transaction's)."""


@dataclass(frozen=True)
class ReadRequest:
    """What a load reads: rows matching ``filter``, ``columns``, at manifest ``version``."""

    uri: str
    filter: str | None
    columns: Sequence[str] | None
    version: int | None
    storage_options: dict[str, str] | None


@dataclass(frozen=True)
class WriteRequest:
    """What a write does: ``mode``, the only ``partitions`` it may touch (``{field id: value}``;
    None: any) and the properties its manifest commit records."""

    mode: WriteMode
    partitions: list[dict[str, Any]] | None
    commit_properties: Mapping[str, str]


class TypeHandler(abc.ABC, Generic[T]):
    """Converts one kind of dataframe (``supported_types``) to and from a partitioned namespace.

    A subclass implements ``supported_types``, ``to_arrow`` and ``from_arrow``; everything else
    goes through Arrow, and may be overridden where the rows should not be collected (Spark).
    For example, Polars::

        class PolarsHandler(TypeHandler[pl.DataFrame]):
            supported_types = (pl.DataFrame,)

            def to_arrow(self, obj):
                return obj.to_arrow()

            def from_arrow(self, data):
                return pl.from_arrow(data.read_all())
    """

    engine: ClassVar[str | None] = None  # the asset kind of the compute engine, if any
    # to_arrow() returns a stream that reads ``obj`` up: it can be converted only once
    single_pass: ClassVar[bool] = False

    @property
    @abc.abstractmethod
    def supported_types(self) -> Sequence[type]:
        """The types this handler writes (instances) and loads (input annotations)."""

    @abc.abstractmethod
    def to_arrow(self, obj: T) -> pa.Table | pa.RecordBatchReader:
        """``obj`` as Arrow (a table, or a stream of batches)."""

    @abc.abstractmethod
    def from_arrow(self, data: pa.RecordBatchReader) -> T:
        """The loaded rows ``data`` as this handler's type."""

    # -- dispatch -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The supported types, for messages."""
        return ", ".join(_type_name(t) for t in self.supported_types) or type(self).__name__

    def handles(self, obj: Any) -> bool:
        """Whether this handler writes ``obj``."""
        types = tuple(self.supported_types)
        return bool(types) and isinstance(obj, types)

    def handles_type(self, typ: Any) -> bool:
        """Whether this handler loads an input annotated ``typ``."""
        types = tuple(self.supported_types)
        return bool(types) and isinstance(typ, type) and issubclass(typ, types)

    # -- output -------------------------------------------------------------------------------
    def schema(self, obj: T) -> pa.Schema:
        """The Arrow schema of ``obj``'s rows."""
        return self.to_arrow(obj).schema

    def write(self, obj: T, ns: WriteTarget, request: WriteRequest) -> WriteResult | None:
        """Write ``obj`` into ``ns`` (one manifest commit); None when nothing was committed."""
        return ns.write(
            self.to_arrow(obj),
            request.mode,
            partitions=request.partitions,
            commit_properties=dict(request.commit_properties),
        )

    def merge(
        self,
        obj: T,
        ns: WriteTarget,
        options: MergeOptions,
        commit_properties: Mapping[str, str],
    ) -> RowChangeResult | None:
        """Merge ``obj``'s rows into ``ns`` as ``options`` say (one manifest commit recording
        ``commit_properties``)."""
        return ns.merge_insert(
            self.to_arrow(obj), options, commit_properties=dict(commit_properties)
        )

    def sample_outside(self, obj: T, row_filter: str) -> dict[str, Any] | None:
        """One row of ``obj`` that ``row_filter`` does not select (NULL counts as not
        selected), or None; for a single-pass type None (its write checks every row)."""
        if self.single_pass:
            return None
        return _sample_outside_arrow(_as_table(self.to_arrow(obj)), row_filter)

    # -- input --------------------------------------------------------------------------------
    def read(self, request: ReadRequest) -> T:
        """The rows ``request`` selects, as this handler's type."""
        return self.from_arrow(_open(request).scan(request.filter, request.columns))


def _type_name(t: type) -> str:
    return f"{t.__module__.split('.')[0]}.{t.__qualname__}"


def _as_table(data: pa.Table | pa.RecordBatchReader) -> pa.Table:
    return data.read_all() if isinstance(data, pa.RecordBatchReader) else data


def _open(request: ReadRequest) -> PartitionedNamespace:
    return PartitionedNamespace.open(request.uri, request.storage_options, request.version)


def outside(row_filter: str) -> str:
    """A predicate selecting the rows ``row_filter`` does not select, NULL included (valid in
    DataFusion and Spark SQL)."""
    return f"NOT coalesce(({row_filter}), FALSE)"


def _sample_outside_arrow(table: pa.Table, row_filter: str) -> dict[str, Any] | None:
    import datafusion as dfn

    ctx = dfn.SessionContext()
    ctx.register_record_batches("t", [table.to_batches()])
    rows = ctx.sql(f"SELECT * FROM t WHERE {outside(row_filter)} LIMIT 1").to_arrow_table()
    return rows.to_pylist()[0] if rows.num_rows else None


class ArrowTableHandler(TypeHandler[pa.Table]):
    """``pyarrow.Table`` (and ``RecordBatch`` outputs); inputs annotated with either load as a
    table."""

    @property
    def supported_types(self) -> Sequence[type]:
        return (pa.Table, pa.RecordBatch)

    @property
    def name(self) -> str:
        return "pyarrow.Table"

    def to_arrow(self, obj: pa.Table | pa.RecordBatch) -> pa.Table:
        return pa.Table.from_batches([obj]) if isinstance(obj, pa.RecordBatch) else obj

    def from_arrow(self, data: pa.RecordBatchReader) -> pa.Table:
        return data.read_all()

    def schema(self, obj: pa.Table | pa.RecordBatch) -> pa.Schema:
        return obj.schema


class ArrowReaderHandler(TypeHandler[pa.RecordBatchReader]):
    """``pyarrow.RecordBatchReader``: streamed in and out."""

    single_pass = True

    @property
    def supported_types(self) -> Sequence[type]:
        return (pa.RecordBatchReader,)

    def to_arrow(self, obj: pa.RecordBatchReader) -> pa.RecordBatchReader:
        return obj

    def from_arrow(self, data: pa.RecordBatchReader) -> pa.RecordBatchReader:
        return data


class PandasHandler(TypeHandler[Any]):
    """``pandas.DataFrame`` (the index is not stored)."""

    @property
    def supported_types(self) -> Sequence[type]:
        pd = _pandas()
        return (pd.DataFrame,) if pd is not None else ()

    def to_arrow(self, obj: Any) -> pa.Table:
        return pa.Table.from_pandas(obj, preserve_index=False)

    def from_arrow(self, data: pa.RecordBatchReader) -> Any:
        return data.read_all().to_pandas()

    def schema(self, obj: Any) -> pa.Schema:
        return pa.Schema.from_pandas(obj, preserve_index=False)


def _pandas() -> Any:
    try:
        return importlib.import_module("pandas")
    except ImportError:  # pragma: no cover - pandas is optional
        return None


class SparkHandler(TypeHandler[Any]):
    """Spark DataFrames (classic and Connect): distributed writes and reads through the
    ``lance_partitioned`` data source, merges through ``spark.merge.merge_dataframe``. Package
    errors raised in Spark's Python workers come back with their own class."""

    engine = "spark"

    @property
    def supported_types(self) -> Sequence[type]:
        DataFrame = _spark_dataframe()
        return (DataFrame,) if DataFrame is not None else ()

    @property
    def name(self) -> str:
        return "pyspark.sql.DataFrame"

    def to_arrow(self, obj: Any) -> pa.Table:
        return obj.toArrow()  # collects to the driver: only for handlers built on this one

    def from_arrow(self, data: pa.RecordBatchReader) -> Any:
        return _spark().createDataFrame(data.read_all())

    def schema(self, obj: Any) -> pa.Schema:
        from ..spark.types import arrow_schema

        return arrow_schema(obj.schema)

    def write(self, obj: Any, ns: WriteTarget, request: WriteRequest) -> WriteResult | None:
        from ..spark import register, write_dataframe

        register(obj.sparkSession)  # idempotent; the session may not know the format yet
        # in a transaction, the Spark driver commits its changes just before the data
        changes = ns.detach_changes() if isinstance(ns, Transaction) else None
        # the result comes back through the namespace (the commit records it), also from a
        # Spark Connect server on another machine; None: Spark committed nothing
        result = write_dataframe(
            obj,
            ns.uri,
            request.mode,
            partition_values=request.partitions,
            storage_options=ns.storage_options,
            commit_properties=dict(request.commit_properties),
            changes=changes,
        )
        assert not isinstance(result, RowChangeResult)  # only mode "merge" gives one
        if result is None and request.partitions and request.mode == "overwrite_partitions":
            # Spark committed nothing (no rows): the named partitions still become empty
            empty = pa.Table.from_batches([], schema=self.schema(obj))
            if isinstance(ns, Transaction):  # its changes are committed by now
                ns = PartitionedNamespace.open(ns.uri, ns.storage_options)
            result = ns.write(
                empty,
                request.mode,
                partitions=request.partitions,
                commit_properties=dict(request.commit_properties),
            )
        return result

    def merge(
        self,
        obj: Any,
        ns: WriteTarget,
        options: MergeOptions,
        commit_properties: Mapping[str, str],
    ) -> RowChangeResult | None:
        from ..spark import register
        from ..spark.merge import merge_dataframe

        register(obj.sparkSession)
        if isinstance(ns, Transaction):  # the changes first, then the distributed merge
            ns.commit()
        # distributed; package errors raised in its tasks come back with their own class
        return merge_dataframe(
            obj,
            ns.uri,
            options,
            storage_options=ns.storage_options,
            commit_properties=dict(commit_properties),
        )

    def read(self, request: ReadRequest) -> Any:
        from ..spark import read_dataframe, register

        spark = _spark()
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
        rows = obj.where(outside(row_filter)).limit(1).collect()
        return rows[0].asDict(recursive=True) if rows else None


def _spark() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()


def _spark_dataframe() -> Any:
    try:
        from pyspark.sql import DataFrame
    except ImportError:  # pragma: no cover - pyspark is a dependency, kept optional here
        return None
    return DataFrame


def default_type_handlers() -> list[TypeHandler[Any]]:
    """The handlers the IO manager uses unless ``type_handlers()`` is overridden: Arrow tables,
    Arrow record batch readers, pandas and Spark DataFrames."""
    return [ArrowTableHandler(), ArrowReaderHandler(), PandasHandler(), SparkHandler()]


def handler_for_object(
    obj: Any, asset: str, handlers: Sequence[TypeHandler[Any]] | None = None
) -> TypeHandler[Any]:
    """The first of ``handlers`` (default: :func:`default_type_handlers`) that writes ``obj``."""
    handlers = default_type_handlers() if handlers is None else handlers
    for h in handlers:
        if h.handles(obj):
            return h
    raise UnsupportedTypeError(
        f"asset {asset} returned a {type(obj).__module__}.{type(obj).__name__}; the Lance "
        f"IO manager stores {_names(handlers)} (add a TypeHandler for others: override "
        "LancePartitionedIOManager.type_handlers())"
    )


def handler_for_type(
    typ: Any, asset: str, handlers: Sequence[TypeHandler[Any]] | None = None
) -> TypeHandler[Any]:
    """The first of ``handlers`` that loads an input annotated ``typ``; Any / no annotation:
    the one loading ``pyarrow.Table`` (else the first)."""
    handlers = default_type_handlers() if handlers is None else handlers
    if typ is None or typ is Any or typ is object:
        typ = pa.Table
        if not any(h.handles_type(typ) for h in handlers) and handlers:
            return handlers[0]
    for h in handlers:
        if h.handles_type(typ):
            return h
    raise UnsupportedTypeError(
        f"input from asset {asset} is annotated {typ!r}; the Lance IO manager loads "
        f"{_names(handlers)} (add a TypeHandler for others: override "
        "LancePartitionedIOManager.type_handlers())"
    )


def check_handlers(handlers: Sequence[Any]) -> list[TypeHandler[Any]]:
    """``handlers`` as a list, refusing anything that is not a :class:`TypeHandler`."""
    out = list(handlers)
    for h in out:
        if not isinstance(h, TypeHandler):
            raise UnsupportedTypeError(
                f"type_handlers() returned {h!r}, which is not a TypeHandler instance"
            )
    return out


def _names(handlers: Sequence[TypeHandler[Any]]) -> str:
    return ", ".join(h.name for h in handlers if h.supported_types)
