"""Table statistics: what the manifest knows about the rows of a partition table version.

A :class:`TableStats` describes one table version: its row count, the size of its data files,
and per column (keyed by field id) the null count, the NaN count (floating point) and a lower
and upper bound of its values (orderable types; strings and binaries truncated to
:data:`TRUNCATE` characters, the bounds widened so they stay bounds, as Iceberg truncates
them). Counts are exact or, after rows were removed without reading them (a delete), upper
bounds (``nulls_exact`` False); bounds may be loose but never too tight. Statistics are kept
for the first :data:`MAX_COLUMNS` leaf columns of the schema (as Delta Lake does).

They are stored as JSON in the ``__manifest`` column :data:`STATS_COLUMN` of the table's row
(this package's extension of the format, see docs/reference/format.md), with the table version
they describe: a row whose ``read_version`` moved without its statistics (a commit of another
writer) has none. Values are encoded by type family so that a widened column type reads them
the same: integers and finite floats as JSON numbers (non-finite floats as ``"inf"`` /
``"-inf"``), decimals as strings, strings as strings, binaries in base64, dates as days since
the epoch, timestamps as nanoseconds since the epoch (UTC), times as nanoseconds since
midnight, durations as nanoseconds."""

from __future__ import annotations

import base64
import decimal
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import arrow_json

STATS_COLUMN = "dlp_stats"  # the __manifest column holding a table row's statistics (JSON)
FORMAT_VERSION = 1
MAX_COLUMNS = 32  # leaf columns with statistics, in schema order
TRUNCATE = 16  # characters (strings) or bytes (binaries) of a bound
_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_DAY_MS = 86_400_000
_MAX_CHAR = 0x10FFFF


def stats_field() -> pa.Field:
    """The ``__manifest`` column of table statistics."""
    return pa.field(STATS_COLUMN, pa.utf8())


@dataclass(frozen=True)
class ColumnStats:
    """What is known of one column's values in a table version (None: unknown)."""

    nulls: int | None = None
    nulls_exact: bool = True  # False: ``nulls`` is an upper bound
    nans: int | None = None  # floating point only
    nans_exact: bool = True
    lower: Any = None  # comparable key (see :func:`key_of`), <= every non-NULL, non-NaN value
    upper: Any = None  # >= every non-NULL, non-NaN value
    bounded: bool = False  # whether ``lower`` / ``upper`` were recorded

    def union(self, other: ColumnStats, rows: tuple[int, int]) -> ColumnStats:
        """The statistics of the rows of both (``rows``: how many rows each describes)."""
        nulls = _add(self.nulls, other.nulls)
        nans = _add(self.nans, other.nans)
        lower, upper, bounded = _union_bounds(self, other, rows)
        return ColumnStats(
            nulls,
            self.nulls_exact and other.nulls_exact,
            nans,
            self.nans_exact and other.nans_exact,
            lower,
            upper,
            bounded,
        )

    def without_rows(self, rows: int) -> ColumnStats:
        """What stays known when some rows were removed unread, ``rows`` remaining: counts
        become upper bounds (capped at ``rows``), the value bounds stay bounds."""
        return replace(
            self,
            nulls=None if self.nulls is None else min(self.nulls, rows),
            nulls_exact=self.nulls == 0 or (rows == 0 and self.nulls is not None),
            nans=None if self.nans is None else min(self.nans, rows),
            nans_exact=self.nans == 0 or (rows == 0 and self.nans is not None),
        )

    def values_known(self, rows: int) -> bool:
        """Whether every non-NULL, non-NaN value lies within the bounds: bounds recorded, or
        the column holds no such value (its NULLs and NaNs are all its rows, exactly)."""
        if self.bounded:
            return True
        if self.nulls is None or not self.nulls_exact:
            return False
        nans = self.nans or 0
        return self.nans_exact and self.nulls + nans == rows


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _union_bounds(a: ColumnStats, b: ColumnStats, rows: tuple[int, int]) -> tuple[Any, Any, bool]:
    a_known, b_known = a.values_known(rows[0]), b.values_known(rows[1])
    if not (a_known and b_known):
        return None, None, False
    if not a.bounded:
        return b.lower, b.upper, b.bounded
    if not b.bounded:
        return a.lower, a.upper, True
    lower = None if a.lower is None or b.lower is None else min(a.lower, b.lower)
    upper = None if a.upper is None or b.upper is None else max(a.upper, b.upper)
    return lower, upper, True


@dataclass(frozen=True)
class TableStats:
    """What the manifest knows of one table version's rows (see the module doc)."""

    rows: int
    bytes: int | None = None
    columns: Mapping[int, ColumnStats] = field(default_factory=dict)  # field id -> stats

    def union(self, other: TableStats) -> TableStats:
        """The statistics of a version holding the rows of both (an append)."""
        size = None if self.bytes is None or other.bytes is None else self.bytes + other.bytes
        if not self.rows or not other.rows:  # no rows: nothing to say of any column
            kept = other if not self.rows else self
            return TableStats(self.rows + other.rows, size, kept.columns)
        columns = {
            fid: self.columns[fid].union(other.columns[fid], (self.rows, other.rows))
            for fid in self.columns.keys() & other.columns.keys()
        }
        return TableStats(self.rows + other.rows, size, columns)

    def after_removal(self, rows: int, size: int | None = None) -> TableStats:
        """The statistics of a version made by removing rows unread, holding ``rows``."""
        return TableStats(
            rows, size, {fid: c.without_rows(rows) for fid, c in self.columns.items()}
        )

    def with_bytes(self, size: int | None) -> TableStats:
        """These statistics with the data files' size ``size``."""
        return replace(self, bytes=size)

    # -- stored form ---------------------------------------------------------------------------
    def to_json(self, version: int) -> str:
        """The stored form, describing table version ``version``."""
        return json.dumps({**self._value(), "version": version}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None, version: int | None) -> TableStats | None:
        """The statistics stored as ``text`` when they describe table version ``version`` (a
        pin by version number); None otherwise, or when unreadable (never an error: a table
        without statistics is read, never pruned by them)."""
        if not text or version is None:
            return None
        try:
            value = json.loads(text)
            if int(value["version"]) != int(version):
                return None
            return cls._of_value(value)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def dumps(self) -> str:
        """These statistics as text, for a message (no table version yet)."""
        return json.dumps(self._value(), separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> TableStats | None:
        """Statistics from :meth:`dumps` (None when unreadable)."""
        try:
            return cls._of_value(json.loads(text))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def _value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"v": FORMAT_VERSION, "rows": self.rows}
        if self.bytes is not None:
            value["bytes"] = self.bytes
        columns = {}
        for fid, c in sorted(self.columns.items()):
            entry: dict[str, Any] = {}
            if c.nulls is not None:
                entry["nulls"] = c.nulls
                if not c.nulls_exact:
                    entry["nulls_at_most"] = True
            if c.nans is not None:
                entry["nans"] = c.nans
                if not c.nans_exact:
                    entry["nans_at_most"] = True
            if c.bounded:
                entry["lower"] = _encode(c.lower)
                entry["upper"] = _encode(c.upper)
            columns[str(fid)] = entry
        value["columns"] = columns
        return value

    @classmethod
    def _of_value(cls, value: dict[str, Any]) -> TableStats | None:
        if value.get("v") != FORMAT_VERSION:
            return None
        columns = {}
        for fid, entry in value.get("columns", {}).items():
            columns[int(fid)] = ColumnStats(
                nulls=entry.get("nulls"),
                nulls_exact=not entry.get("nulls_at_most", False),
                nans=entry.get("nans"),
                nans_exact=not entry.get("nans_at_most", False),
                lower=_decode(entry.get("lower")),
                upper=_decode(entry.get("upper")),
                bounded="lower" in entry or "upper" in entry,
            )
        size = value.get("bytes")
        return cls(int(value["rows"]), None if size is None else int(size), columns)


def union(a: TableStats | None, b: TableStats | None) -> TableStats | None:
    """The statistics of the rows of both (None when either is unknown)."""
    return None if a is None or b is None else a.union(b)


def _encode(key: Any) -> Any:
    """A comparable key (see :func:`key_of`) as JSON."""
    if key is None or isinstance(key, bool | int | str):
        return key
    if isinstance(key, float):
        if math.isinf(key):
            return {"f": "inf" if key > 0 else "-inf"}
        return key
    if isinstance(key, decimal.Decimal):
        return {"d": str(key)}
    if isinstance(key, bytes):
        return {"b": base64.b64encode(key).decode()}
    raise TypeError(f"no stored form for a statistics key of type {type(key).__name__}")


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "f" in value:
            return math.inf if value["f"] == "inf" else -math.inf
        if "d" in value:
            return decimal.Decimal(value["d"])
        if "b" in value:
            return base64.b64decode(value["b"])
        raise ValueError(f"unknown statistics value {value!r}")
    return value


# -- comparable keys ----------------------------------------------------------------------------
def family(t: pa.DataType) -> str | None:
    """The family whose keys compare values of type ``t`` (None: no bounds are kept)."""
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_duration(t):
        return "duration"
    return None


def key_of(value: Any, t: pa.DataType) -> Any:
    """The comparable key of the Python ``value`` of Arrow type ``t`` (None for NULL), as the
    statistics store its bounds: dates as days, timestamps / times / durations as
    nanoseconds, booleans as 0 / 1, the rest as themselves."""
    if value is None:
        return None
    kind = family(t)
    if kind in ("date", "timestamp", "time", "duration"):
        ticks = pa.scalar(value, t).cast(pa.int32() if t.bit_width == 32 else pa.int64()).as_py()
        if kind == "date":
            return ticks if pa.types.is_date32(t) else ticks // _DAY_MS
        return ticks * _NS[t.unit]
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    return value


def column_stats(array: pa.Array | pa.ChunkedArray, t: pa.DataType) -> ColumnStats:
    """The statistics of one column's values (exact counts; bounds for orderable types)."""
    nulls = int(array.null_count)
    rows = len(array)
    kind = family(t)
    if kind == "float" and not pa.types.is_float16(t) and nulls == 0:
        return _float_stats(array)
    nans = None
    if kind == "float":
        if pa.types.is_float16(t):
            array, t = array.cast(pa.float32()), pa.float32()
        nans = int(pc.sum(pc.is_nan(array)).as_py() or 0) if rows > nulls else 0
    if kind is None or rows == nulls + (nans or 0):
        return ColumnStats(nulls, True, nans, True)
    if kind in ("date", "timestamp", "time", "duration"):
        width = pa.int32() if t.bit_width == 32 else pa.int64()
        if kind == "duration":  # Arrow has no min_max of durations: their ticks, a view
            array = array.cast(width)
        found = pc.min_max(array)  # on the values, their ticks taken of the two results
        low, high = (found[k].cast(width).as_py() for k in ("min", "max"))
        factor = 1 if kind == "date" else _NS[t.unit]
        if kind == "date" and pa.types.is_date64(t):  # milliseconds: whole days around them
            low, high = low // _DAY_MS, -(-high // _DAY_MS)
        return ColumnStats(nulls, True, nans, True, low * factor, high * factor, True)
    if kind == "string" and pa.types.is_string_view(t):
        array = array.cast(pa.utf8())
    elif kind == "binary" and (pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t)):
        array = array.cast(pa.binary())
    low, high = _min_max(array)
    if kind == "int":
        low, high = int(low), int(high)
    elif kind == "float":
        low, high = float(low), float(high)
    elif kind in ("string", "binary"):
        low, high = truncate_lower(low), truncate_upper(high)
        if high is None:  # no bound above fits: the column has a lower bound only
            return ColumnStats(nulls, True, nans, True, low, None, True)
    return ColumnStats(nulls, True, nans, True, low, high, True)


def _float_stats(array: pa.Array | pa.ChunkedArray) -> ColumnStats:
    """The statistics of floating-point values without NULLs (NumPy, one pass each)."""
    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    if not chunks:
        return ColumnStats(0, True, 0, True)
    values = (
        np.concatenate([c.to_numpy() for c in chunks]) if len(chunks) > 1 else chunks[0].to_numpy()
    )
    nan = np.isnan(values)
    nans = int(nan.sum())
    if nans == len(values):
        return ColumnStats(0, True, nans, True)
    kept = values[~nan] if nans else values
    return ColumnStats(0, True, nans, True, float(kept.min()), float(kept.max()), True)


def _min_max(array: pa.Array | pa.ChunkedArray) -> tuple[Any, Any]:
    found = pc.min_max(array)
    return found["min"].as_py(), found["max"].as_py()


def truncate_lower(value: str | bytes) -> str | bytes:
    """A prefix of ``value`` of at most :data:`TRUNCATE` characters (a lower bound of it)."""
    return value[:TRUNCATE]


def truncate_upper(value: str | bytes) -> str | bytes | None:
    """A value of at most :data:`TRUNCATE` characters that is >= ``value`` (its prefix with the
    last character that can grow grown), or None when there is none."""
    if len(value) <= TRUNCATE:
        return value
    prefix = value[:TRUNCATE]
    for i in range(len(prefix) - 1, -1, -1):
        if isinstance(prefix, bytes):
            if prefix[i] < 0xFF:
                return prefix[:i] + bytes([prefix[i] + 1])
            continue
        code = ord(prefix[i]) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000  # surrogates are no characters
        if code <= _MAX_CHAR:
            return prefix[:i] + chr(code)
    return None


def stats_columns(schema: pa.Schema, limit: int = MAX_COLUMNS) -> list[tuple[int, str]]:
    """(field id, name) of the top-level columns of ``schema`` (with field ids) that get
    statistics: the first ``limit`` of them."""
    out = []
    for f in schema:
        fid = arrow_json.field_id(f)
        if fid is None:
            continue
        out.append((fid, f.name))
        if len(out) >= limit:
            break
    return out


def of_table(
    table: pa.Table,
    schema: pa.Schema,
    size: int | None = None,
    constants: Mapping[str, Any] | None = None,
) -> TableStats:
    """The statistics of ``table``'s rows, shaped like the namespace schema ``schema`` (with
    field ids): its columns are the namespace's, by name (columns it lacks get none).
    ``constants``: columns every row holds one value of (identity partition columns, by
    name), whose statistics are that value's."""
    columns: dict[int, ColumnStats] = {}
    names = set(table.column_names)
    rows = table.num_rows
    for fid, name in stats_columns(schema):
        t = schema.field(name).type
        if constants is not None and name in constants:
            columns[fid] = constant_stats(constants[name], t, rows)
        elif name in names:
            columns[fid] = column_stats(table.column(name), table.schema.field(name).type)
    return TableStats(rows, size, columns)


def constant_stats(value: Any, t: pa.DataType, rows: int) -> ColumnStats:
    """The statistics of ``rows`` values all equal to ``value`` (of type ``t``)."""
    kind = family(t)
    nans = 0 if kind == "float" else None
    if value is None:
        return ColumnStats(rows, True, nans, True)
    if kind == "float" and math.isnan(value):
        return ColumnStats(0, True, rows, True)
    if kind is None:
        return ColumnStats(0, True, nans, True)
    key = key_of(value, t)
    if kind in ("string", "binary"):
        return ColumnStats(0, True, nans, True, truncate_lower(key), truncate_upper(key), True)
    return ColumnStats(0, True, nans, True, key, key, True)


def of_batches(
    batches: Iterable[pa.RecordBatch | pa.Table], schema: pa.Schema, size: int | None = None
) -> TableStats:
    """The statistics of every row of ``batches`` (see :func:`of_table`)."""
    total: TableStats | None = None
    for batch in batches:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        part = of_table(table, schema)
        total = part if total is None else total.union(part)
    if total is None:
        total = of_table(pa.table({}), schema)
    return total.with_bytes(size)


__all__ = [
    "FORMAT_VERSION",
    "MAX_COLUMNS",
    "STATS_COLUMN",
    "TRUNCATE",
    "ColumnStats",
    "TableStats",
    "column_stats",
    "constant_stats",
    "family",
    "key_of",
    "of_batches",
    "of_table",
    "stats_columns",
    "stats_field",
    "truncate_lower",
    "truncate_upper",
    "union",
]
