"""Checking the table statistics a manifest records against the rows read back with plain
pylance (an independent reading of the tables)."""

from __future__ import annotations

import math
import os
from typing import Any

import lance
import pyarrow.compute as pc

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.manifest.stats import STATS_COLUMN, TableStats, key_of
from dagster_lance_partitioned.core.schema.arrow_json import field_id


def manifest_rows(ns: PartitionedNamespace) -> list[dict[str, Any]]:
    """The table rows of the latest manifest version, read with plain pylance."""
    table = lance.dataset(os.path.join(ns.uri, "__manifest")).to_table()
    rows = table.filter(pc.equal(table.column("object_type"), "table")).to_pylist()
    return sorted(rows, key=lambda r: r["object_id"])


def assert_statistics_hold(ns: PartitionedNamespace, *, required: bool = True) -> int:
    """Every table row's statistics describe its pinned version's rows (read with pylance);
    the number of rows that have statistics."""
    schema = ns.schema_with_ids
    with_stats = 0
    for row in manifest_rows(ns):
        stats = TableStats.from_json(row.get(STATS_COLUMN), row["read_version"])
        if stats is None:
            assert not required, f"{row['object_id']} has no statistics"
            continue
        with_stats += 1
        data = lance.dataset(
            os.path.join(ns.uri, row["location"]), version=row["read_version"]
        ).to_table()
        assert stats.rows == data.num_rows, row["object_id"]
        for f in schema:
            fid = field_id(f)
            column = stats.columns.get(fid)
            if column is None or f.name not in data.column_names:
                continue
            values = data.column(f.name)
            nulls = values.null_count
            assert column.nulls is not None
            assert column.nulls == nulls if column.nulls_exact else column.nulls >= nulls
            present = [v for v in values.to_pylist() if v is not None]
            nans = sum(1 for v in present if isinstance(v, float) and math.isnan(v))
            if column.nans is not None:
                assert column.nans == nans if column.nans_exact else column.nans >= nans
            keys = [key_of(v, f.type) for v in present]
            keys = [k for k in keys if not (isinstance(k, float) and math.isnan(k))]
            if column.bounded and keys:
                assert column.lower <= min(keys), (f.name, column, min(keys))
                assert column.upper is None or column.upper >= max(keys), (f.name, column)
    return with_stats
