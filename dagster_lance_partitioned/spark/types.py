"""Arrow <-> Spark types: the Spark schema of a namespace, and batches cast to exactly the Arrow
layout Spark expects from a Python data source."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    TimeType,
)

from ..core import SchemaError
from ..core.engine import is_list_like

# Spark has no unsigned integers: each is read as the next wider signed type (uint64 as an
# exact decimal), and written back with a checked cast.
_PRIMITIVES: list[tuple[pa.DataType, DataType]] = [
    (pa.bool_(), BooleanType()),
    (pa.int8(), ByteType()),
    (pa.int16(), ShortType()),
    (pa.int32(), IntegerType()),
    (pa.int64(), LongType()),
    (pa.uint8(), ShortType()),
    (pa.uint16(), IntegerType()),
    (pa.uint32(), LongType()),
    (pa.uint64(), DecimalType(20, 0)),
    (pa.float16(), FloatType()),
    (pa.float32(), FloatType()),
    (pa.float64(), DoubleType()),
    (pa.utf8(), StringType()),
    (pa.large_utf8(), StringType()),
    (pa.string_view(), StringType()),
    (pa.binary(), BinaryType()),
    (pa.large_binary(), BinaryType()),
    (pa.binary_view(), BinaryType()),
    (pa.date32(), DateType()),
    (pa.date64(), DateType()),
    (pa.null(), NullType()),
]


def spark_type(t: pa.DataType, path: str = "") -> DataType:
    """The Spark type a column of Arrow type ``t`` is read as."""
    for arrow, spark in _PRIMITIVES:
        if t == arrow:
            return spark
    if pa.types.is_dictionary(t):
        return spark_type(t.value_type, path)
    if pa.types.is_timestamp(t):
        return TimestampType() if t.tz is not None else TimestampNTZType()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise SchemaError(f"column {path!r}: {t} is wider than Spark's DECIMAL(38)")
        return DecimalType(t.precision, t.scale)
    if pa.types.is_fixed_size_binary(t):
        return BinaryType()
    if pa.types.is_time(t):
        return TimeType(6)
    if pa.types.is_duration(t):
        return DayTimeIntervalType(DayTimeIntervalType.DAY, DayTimeIntervalType.SECOND)
    if pa.types.is_struct(t):
        return StructType(
            [
                StructField(c.name, spark_type(c.type, f"{path}.{c.name}"), c.nullable)
                for c in (t.field(i) for i in range(t.num_fields))
            ]
        )
    if is_list_like(t):
        item = t.value_field
        return ArrayType(spark_type(item.type, f"{path}[]"), item.nullable)
    if pa.types.is_map(t):
        return MapType(
            spark_type(t.key_type, f"{path}.key"),
            spark_type(t.item_type, f"{path}.value"),
            t.item_field.nullable,
        )
    raise SchemaError(f"column {path!r}: Arrow type {t} has no Spark equivalent")


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a namespace (Arrow) schema."""
    return StructType([StructField(f.name, spark_type(f.type, f.name), f.nullable) for f in schema])


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects batches of ``schema`` in (timestamps in UTC)."""
    return to_arrow_schema(schema, timezone="UTC")


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` (columns of the namespace types, by name) as ``target`` exactly: types cast
    (nanosecond timestamps truncated to microseconds, as Spark keeps them), nested field names
    and nullability as Spark declares them."""
    if batch.schema.equals(target):
        return batch
    columns = [_cast(batch.column(f.name), f.type) for f in target]
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _cast(arr: pa.Array, dst: pa.DataType) -> pa.Array:
    if arr.type == dst:
        return arr
    if isinstance(arr, pa.DictionaryArray):
        arr = arr.dictionary_decode()
    try:
        return pc.cast(arr, dst, safe=True)
    except pa.ArrowInvalid:
        if not _temporal(arr.type):
            raise
        # Spark keeps microseconds: sub-microsecond precision is dropped
        return pc.cast(arr, dst, safe=False)


def _temporal(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        return True
    return any(_temporal(t.field(i).type) for i in range(t.num_fields))
