"""``partition_by`` in text form: the partition fields of a namespace created by a Spark write
(option ``partitionBy``) or by the Dagster IO manager (metadata ``lance/partition_by``).

Simple form: comma-separated fields, each a column (identity) or ``transform(column[, arg])``::

    country,year(event_date),bucket(user_id,16),truncate(name,3),month(ts),day(ts),hour(ts)

JSON form: a list whose items are simple-form strings or objects::

    [{"transform": "identity", "column": "country"},
     {"transform": "bucket", "column": "user_id", "num_buckets": 16, "field_id": "user_b"},
     {"transform": "multi_bucket", "columns": ["a", "b"], "num_buckets": 8},
     {"transform": "truncate", "column": "name", "width": 3},
     {"expression": "CAST(col0 AS DATE)", "columns": ["ts"], "result_type": "date32",
      "field_id": "event_day"}]
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..errors import PartitionByError
from ..schema.arrow_json import type_from_json
from .partition_spec import PartitionField

_CALL = re.compile(r"^\s*([A-Za-z_]+)\s*\((.*)\)\s*$", re.S)
_ONE_COLUMN = {
    "identity": PartitionField.identity,
    "year": PartitionField.year,
    "month": PartitionField.month,
    "day": PartitionField.day,
    "hour": PartitionField.hour,
}


def parse_partition_by(raw: str | Sequence[Any]) -> list[PartitionField]:
    """Partition fields from the simple form, the JSON form, or an already parsed list."""
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            raise PartitionByError("partition_by is empty")
        if text.startswith("["):
            try:
                items = json.loads(text)
            except ValueError as e:
                raise PartitionByError(f"partition_by is not a JSON list: {e}") from None
        else:
            items = _split_top_level(text)
    else:
        items = list(raw)
    if not items:
        raise PartitionByError("partition_by names no partition field")
    return [_field(item) for item in items]


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _field(item: Any) -> PartitionField:
    if isinstance(item, PartitionField):
        return item
    if isinstance(item, str):
        return _simple(item)
    if isinstance(item, dict):
        return _object(item)
    raise PartitionByError(f"partitionBy: cannot read partition field {item!r}")


def _simple(text: str) -> PartitionField:
    m = _CALL.match(text)
    if m is None:
        name = text.strip().strip("`")
        if not name:
            raise PartitionByError(f"partitionBy: empty partition field in {text!r}")
        return PartitionField.identity(name)
    transform, args = m.group(1).lower(), [a.strip().strip("`") for a in m.group(2).split(",")]
    if transform in _ONE_COLUMN and len(args) == 1:
        return _ONE_COLUMN[transform](args[0])
    if transform == "bucket" and len(args) == 2:
        return PartitionField.bucket(args[0], _int(args[1], text))
    if transform == "truncate" and len(args) == 2:
        return PartitionField.truncate(args[0], _int(args[1], text))
    if transform == "multi_bucket" and len(args) >= 3:
        return PartitionField.multi_bucket(args[:-1], _int(args[-1], text))
    raise PartitionByError(
        f"partitionBy: cannot read {text!r} (use column, identity(c), year(c), month(c), day(c), "
        "hour(c), bucket(c, n), multi_bucket(c1, c2, ..., n) or truncate(c, w))"
    )


def _int(raw: str, text: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise PartitionByError(f"partitionBy: {raw!r} in {text!r} is not an integer") from None


def _object(obj: dict[str, Any]) -> PartitionField:
    field_id = obj.get("field_id")
    if "expression" in obj:
        columns = obj.get("columns") or obj.get("source_columns")
        rtype = obj.get("result_type")
        if not columns or rtype is None or not field_id:
            raise PartitionByError(
                f"partitionBy: expression field {obj!r} needs columns, result_type and field_id"
            )
        result_type = type_from_json(rtype if isinstance(rtype, dict) else {"type": rtype})
        return PartitionField.expression(
            list(columns), obj["expression"], result_type=result_type, field_id=field_id
        )
    transform = str(obj.get("transform", "identity")).lower()
    columns = obj.get("columns") or obj.get("source_columns")
    column = obj.get("column") or (columns[0] if columns and len(columns) == 1 else None)
    try:
        if transform in _ONE_COLUMN and column:
            return _ONE_COLUMN[transform](column, field_id=field_id)
        if transform == "bucket" and column:
            return PartitionField.bucket(column, int(obj["num_buckets"]), field_id=field_id)
        if transform == "truncate" and column:
            return PartitionField.truncate(column, int(obj["width"]), field_id=field_id)
        if transform == "multi_bucket" and columns:
            return PartitionField.multi_bucket(
                list(columns), int(obj["num_buckets"]), field_id=field_id
            )
    except (KeyError, TypeError, ValueError) as e:
        raise PartitionByError(f"partitionBy: malformed field {obj!r}: {e}") from None
    raise PartitionByError(f"partitionBy: cannot read partition field {obj!r}")
