"""An asset's Dagster partitions as a Lance partition spec: one partition field per dimension
(time windows -> the window start, static/dynamic -> identity on the column), and the run's
partition keys as the exact partition values a write may touch and the row filter a read uses."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from ..core import PartitionedNamespaceError, PartitionField, SpecError, TimeWindow
from ..core.engine import as_source, is_zoned, quote_ident, sql_literal, window_values
from .errors import PartitionLayoutError

# by the name of the cadence the public ``schedule_type`` property returns (an enum Dagster
# does not export)
_UNITS = {"HOURLY": "hour", "DAILY": "day", "WEEKLY": "week", "MONTHLY": "month"}


def time_window(pdef: dg.TimeWindowPartitionsDefinition) -> TimeWindow:
    """The calendar cadence of a time-window partitions definition (PartitionLayoutError for
    cron schedules that are not one, or windows the zone's DST changes make ambiguous)."""
    cadence = pdef.schedule_type
    unit = _UNITS.get(cadence.name) if cadence is not None else None
    if unit is None:
        raise PartitionLayoutError(
            f"cron schedule {pdef.cron_schedule!r} is not an hourly, daily, weekly or monthly "
            "cadence; Lance partitions need one of those"
        )
    day = pdef.day_offset if unit in ("week", "month") else 0
    hour = pdef.hour_offset if unit != "hour" else 0  # Dagster refuses to ask hourly ones
    try:
        return TimeWindow(unit, pdef.timezone or "UTC", pdef.minute_offset, hour, day)
    except SpecError as e:
        raise PartitionLayoutError(f"{pdef}: {e}") from None


@dataclass(frozen=True)
class Dimension:
    """One partition dimension of an asset and the column holding it."""

    name: str | None  # the dimension name of a multi-partitions definition
    column: str
    partitions_def: dg.PartitionsDefinition

    @property
    def window(self) -> TimeWindow | None:
        if isinstance(self.partitions_def, dg.TimeWindowPartitionsDefinition):
            return time_window(self.partitions_def)
        return None

    def source_type(self, schema: pa.Schema, asset: str) -> pa.DataType:
        index = schema.get_field_index(self.column)
        if index < 0:
            what = f"dimension {self.name!r}" if self.name else "partitions"
            raise PartitionLayoutError(
                f"asset {asset}: partition_expr column {self.column!r} of its {what} is not a "
                f"column of the data ({', '.join(schema.names)})"
            )
        return schema.field(index).type

    def field(self, schema: pa.Schema, asset: str) -> PartitionField:
        source = self.source_type(schema, asset)
        window = self.window
        if window is None:
            return PartitionField.identity(self.column)
        try:
            return PartitionField.window(self.column, window, source)
        except PartitionedNamespaceError as e:
            raise PartitionLayoutError(
                f"asset {asset}: column {self.column!r} cannot hold {window.unit}ly partitions: {e}"
            ) from None

    # -- keys -> values -----------------------------------------------------------------------
    def values(self, keys: Sequence[str], schema: pa.Schema, asset: str) -> list[Any]:
        """The partition value of each key (same order)."""
        source = self.source_type(schema, asset)
        window = self.window
        if window is None:
            out = []
            for key in keys:
                try:
                    out.append(pa.scalar(key).cast(source).as_py())
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    raise PartitionLayoutError(
                        f"asset {asset}: partition key {key!r} is not a value of column "
                        f"{self.column!r} ({source})"
                    ) from None
            return out
        starts = [as_source(self._window(k).start, source) for k in keys]
        values = window_values(window, source, starts)
        seen: dict[Any, str] = {}
        for key, value in zip(keys, values, strict=True):
            if seen.setdefault(value, key) != key:
                raise PartitionLayoutError(
                    f"asset {asset}: partition keys {seen[value]!r} and {key!r} fall in one "
                    f"window of column {self.column!r} ({source}); a naive timestamp cannot "
                    "tell the repeated hour of a DST change apart, store a zoned timestamp"
                )
        return values

    def _window(self, key: str) -> dg.TimeWindow:
        assert isinstance(self.partitions_def, dg.TimeWindowPartitionsDefinition)
        return self.partitions_def.time_window_for_partition_key(key)

    def key_of(self, value: Any) -> str:
        """The Dagster partition key of a partition value (for messages and coverage)."""
        window = self.window
        if window is None or value is None:
            return str(value)
        pdef = self.partitions_def
        assert isinstance(pdef, dg.TimeWindowPartitionsDefinition)
        if isinstance(value, dt.datetime):  # hourly: the start instant (or wall clock)
            instant = value if value.tzinfo else value.replace(tzinfo=window.tzinfo)
            return pdef.get_partition_key_for_timestamp(instant.timestamp())
        # longer windows start on this date at the offset: the key is that start, formatted
        return dt.datetime.combine(
            value, dt.time(window.hour_offset, window.minute_offset)
        ).strftime(pdef.fmt)

    # -- keys -> rows -------------------------------------------------------------------------
    def row_filter(self, keys: Sequence[str], schema: pa.Schema, asset: str) -> str:
        """A SQL predicate on the column selecting exactly the rows of ``keys``."""
        source = self.source_type(schema, asset)
        col = quote_ident(self.column)
        if self.window is None:
            literals = [sql_literal(v) for v in dict.fromkeys(self.values(keys, schema, asset))]
            return f"{col} IN ({', '.join(literals)})"
        spans: list[list[dt.datetime]] = []
        for w in sorted((self._window(k) for k in set(keys)), key=lambda w: w.start):
            if spans and spans[-1][1] == w.start:
                spans[-1][1] = w.end
            else:
                spans.append([w.start, w.end])
        parts = [
            f"({col} >= {_bound(lo, source)} AND {col} < {_bound(hi, source)})" for lo, hi in spans
        ]
        return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"


def _bound(t: dt.datetime, source: pa.DataType) -> str:
    """A window bound as a SQL literal of the source column (an instant in UTC)."""
    return sql_literal(t.astimezone(dt.UTC) if is_zoned(source) else as_source(t, source))


@dataclass(frozen=True)
class Layout:
    """The partition dimensions of an asset, in spec order."""

    asset: str
    dimensions: tuple[Dimension, ...]

    @classmethod
    def of(
        cls,
        asset: str,
        partitions_def: dg.PartitionsDefinition,
        partition_expr: str | Mapping[str, str] | None,
    ) -> Layout:
        """The layout of an asset partitioned by ``partitions_def``, its dimensions stored in
        the columns ``partition_expr`` names (a column, or ``{dimension: column}``)."""
        if isinstance(partitions_def, dg.MultiPartitionsDefinition):
            dims = partitions_def.partitions_defs
            if not isinstance(partition_expr, Mapping):
                raise PartitionLayoutError(
                    f"asset {asset} is multi-partitioned ({', '.join(d.name for d in dims)}): "
                    "give metadata partition_expr={dimension: column} for every dimension"
                )
            missing = [d.name for d in dims if d.name not in partition_expr]
            unknown = sorted(set(partition_expr) - {d.name for d in dims})
            if missing or unknown:
                raise PartitionLayoutError(
                    f"asset {asset}: partition_expr must name a column for each dimension "
                    f"{[d.name for d in dims]}: missing {missing}, unknown {unknown}"
                )
            return cls(
                asset,
                tuple(Dimension(d.name, partition_expr[d.name], d.partitions_def) for d in dims),
            )
        if not isinstance(partition_expr, str) or not partition_expr:
            raise PartitionLayoutError(
                f"asset {asset} is partitioned: give metadata partition_expr=<column> naming "
                "the column that holds its partition (a date/timestamp for time windows)"
            )
        return cls(asset, (Dimension(None, partition_expr, partitions_def),))

    @property
    def multi(self) -> bool:
        return self.dimensions[0].name is not None

    def fields(self, schema: pa.Schema) -> list[PartitionField]:
        """The partition fields of the spec this layout writes with."""
        return [d.field(schema, self.asset) for d in self.dimensions]

    def split(self, keys: Sequence[str]) -> list[tuple[str, ...]]:
        """Each key as its per-dimension keys (in dimension order)."""
        if not self.multi:
            return [(str(k),) for k in keys]
        out = []
        for key in keys:
            by_dim = (
                key.keys_by_dimension
                if isinstance(key, dg.MultiPartitionKey)
                else dict(zip(_dim_names(self), str(key).split("|"), strict=True))
            )
            out.append(tuple(by_dim[d.name] for d in self.dimensions if d.name is not None))
        return out

    def partitions(
        self, keys: Sequence[str], schema: pa.Schema, field_ids: Sequence[str]
    ) -> list[dict[str, Any]]:
        """The partitions (``{field_id: value}``) of ``keys``: the only ones a write may touch."""
        parts = self.split(keys)
        columns = [
            d.values([p[i] for p in parts], schema, self.asset)
            for i, d in enumerate(self.dimensions)
        ]
        return [dict(zip(field_ids, row, strict=True)) for row in zip(*columns, strict=True)]

    def key_of(self, values: Sequence[Any]) -> str:
        """The Dagster key of one partition's values (in spec order)."""
        parts = [d.key_of(v) for d, v in zip(self.dimensions, values, strict=True)]
        return "|".join(parts)

    def key_of_row(self, row: Mapping[str, Any], schema: pa.Schema) -> str:
        """The Dagster key a row belongs to."""
        values = []
        for d in self.dimensions:
            value = row.get(d.column)
            window = d.window
            if window is not None and value is not None:
                value = window_values(window, d.source_type(schema, self.asset), [value])[0]
            values.append(value)
        return self.key_of(values)

    def row_filter(self, keys: Sequence[str], schema: pa.Schema) -> str:
        """A SQL predicate selecting exactly the rows of ``keys`` (prunes to their partitions)."""
        parts = self.split(keys)
        if not self.multi:
            return self.dimensions[0].row_filter([p[0] for p in parts], schema, self.asset)
        first, second = self.dimensions
        a = list(dict.fromkeys(p[0] for p in parts))
        b = list(dict.fromkeys(p[1] for p in parts))
        if len(set(parts)) == len(a) * len(b):  # a full product: one filter per dimension
            return (
                f"{first.row_filter(a, schema, self.asset)} AND "
                f"{second.row_filter(b, schema, self.asset)}"
            )
        # any other set: per key of the dimension with fewer keys, the keys of the other
        group, other = (0, 1) if len(a) <= len(b) else (1, 0)
        by: dict[str, list[str]] = {}
        for p in parts:
            by.setdefault(p[group], []).append(p[other])
        g, o = self.dimensions[group], self.dimensions[other]
        return (
            "("
            + " OR ".join(
                f"({g.row_filter([k], schema, self.asset)} AND "
                f"{o.row_filter(ks, schema, self.asset)})"
                for k, ks in by.items()
            )
            + ")"
        )


def _dim_names(layout: Layout) -> list[str]:
    return [d.name for d in layout.dimensions if d.name is not None]
