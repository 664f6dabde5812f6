"""Options of the ``lance_partitioned`` Spark format (Spark passes them case-insensitively, with
lower-cased keys)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..core.engine import FilterLike, to_sql
from .errors import SparkOptionError

FORMAT = "lance_partitioned"

STORAGE_PREFIX = "storage."
DEFAULT_BATCH_ROWS = 64 * 1024
DEFAULT_PARTITION_ROWS = 1024 * 1024
MIN_SPLIT_ROWS = 64 * 1024  # a read is not split below this many rows per input partition


def _get(options: Mapping[str, str], key: str) -> str | None:
    value = options.get(key.lower(), options.get(key))
    return None if value is None or str(value).strip() == "" else str(value)


def path(options: Mapping[str, str]) -> str:
    """The namespace root: ``load(uri)`` / ``save(uri)`` or option ``path``."""
    value = _get(options, "path")
    if value is None:
        raise SparkOptionError(
            f"format {FORMAT!r} needs the namespace URI: .load(uri) / .save(uri) or .option('path')"
        )
    return value


def version(options: Mapping[str, str]) -> int | None:
    """Option ``version``: the ``__manifest`` version to read (time travel)."""
    return _int(options, "version")


def _int(options: Mapping[str, str], key: str) -> int | None:
    raw = _get(options, key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SparkOptionError(f"option {key!r} must be an integer, got {raw!r}") from None
    if value < 0:
        raise SparkOptionError(f"option {key!r} must not be negative, got {value}")
    return value


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = _get(options, key)
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise SparkOptionError(f"option {key!r} must be true or false, got {raw!r}")


def overwrite_mode_value(raw: str, source: str) -> str:
    """``raw`` as a partition overwrite mode, ``static`` or ``dynamic`` (any case); ``source``
    names where it came from in the error."""
    value = raw.strip().lower()
    if value not in ("static", "dynamic"):
        raise SparkOptionError(f"{source} must be static or dynamic, got {raw!r}")
    return value


def partition_overwrite_mode(options: Mapping[str, str]) -> str | None:
    """Option ``partitionOverwriteMode`` (``static`` or ``dynamic``); None when not given."""
    raw = _get(options, "partitionOverwriteMode")
    return None if raw is None else overwrite_mode_value(raw, "option 'partitionOverwriteMode'")


def storage_options(options: Mapping[str, str]) -> dict[str, str] | None:
    """Storage options: a JSON object in ``storageOptions`` (keys kept as written) plus every
    ``storage.<key>`` option (Spark lower-cases those keys)."""
    out: dict[str, str] = {}
    raw = _get(options, "storageOptions")
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except ValueError as e:
            raise SparkOptionError(f"option 'storageOptions' is not JSON: {e}") from None
        if not isinstance(parsed, dict):
            raise SparkOptionError("option 'storageOptions' must be a JSON object")
        out.update({str(k): str(v) for k, v in parsed.items()})
    for key, value in options.items():
        if key.lower().startswith(STORAGE_PREFIX) and len(key) > len(STORAGE_PREFIX):
            out[key[len(STORAGE_PREFIX) :]] = str(value)
    return out or None


def filter_sql(options: Mapping[str, str]) -> str | None:
    """Option ``filter``: a DataFusion SQL predicate, or a JSON list of ``[column, op, value]``."""
    raw = _get(options, "filter")
    if raw is None:
        return None
    if raw.lstrip().startswith("["):
        try:
            items = json.loads(raw)
        except ValueError as e:
            raise SparkOptionError(f"option 'filter' is not a JSON list: {e}") from None
        return to_sql([tuple(item) for item in items])
    return raw


def encode_filter(filter: FilterLike) -> str | None:
    """A core filter (SQL string or tuples) as the value of option ``filter``."""
    if filter is None or isinstance(filter, str):
        return filter
    return to_sql(filter)


def columns(options: Mapping[str, str]) -> list[str] | None:
    """Option ``columns``: the columns to read (comma-separated or a JSON list)."""
    raw = _get(options, "columns")
    if raw is None:
        return None
    if raw.lstrip().startswith("["):
        try:
            parsed = json.loads(raw)
        except ValueError as e:
            raise SparkOptionError(f"option 'columns' is not a JSON list: {e}") from None
        return [str(c) for c in parsed]
    return [c.strip() for c in raw.split(",") if c.strip()]


def batch_rows(options: Mapping[str, str]) -> int:
    """Option ``batchSize``: rows per Arrow batch handed to Spark."""
    return _int(options, "batchSize") or DEFAULT_BATCH_ROWS


def partition_rows(options: Mapping[str, str]) -> int:
    """Option ``rowsPerPartition``: Spark input partitions hold about this many rows (small
    partition tables share one; a larger table with several fragments is split)."""
    return _int(options, "rowsPerPartition") or DEFAULT_PARTITION_ROWS


def min_partitions(options: Mapping[str, str]) -> int | None:
    """Option ``minPartitions``: at least this many Spark input partitions when the data
    allows (tables split by fragments, not below 65,536 rows each; ``rowsPerPartition``
    still caps their size); None when not given (0 or 1: no minimum)."""
    return _int(options, "minPartitions")


def split_fragments(options: Mapping[str, str]) -> bool:
    """Option ``splitFragments`` (default true): a partition table with several fragments may
    become several Spark input partitions."""
    return _bool(options, "splitFragments", True)


def push_filters(options: Mapping[str, str]) -> bool:
    """Option ``pushFilters`` (default true): use the filters Spark pushes to prune partition
    tables. See the module doc of ``source`` for the Spark 4.x caveat it works around."""
    return _bool(options, "pushFilters", True)
