"""One filter language everywhere: a partition field's id (``event_date_year``) filters in
every API that takes a filter, as it does in the CLI, selecting exactly the rows of the
matching partitions; a single ``(column, op, value)`` tuple is a filter; errors never show
the name of the internal table filters are parsed over."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from helpers.data import SCHEMA, sample_table, sorted_rows

from dagster_lance_partitioned import MergeOptions, PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import FilterError

FIELDS = [PartitionField.identity("country"), PartitionField.year("event_date")]


@pytest.fixture
def ns(tmp_path: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, FIELDS)
    ns.write(sample_table(12))
    return ns


def rows_2025(ns: PartitionedNamespace) -> list[dict]:
    return sorted_rows(
        ns.to_table("event_date >= DATE '2025-01-01' AND event_date < DATE '2026-01-01'")
    )


def test_a_partition_field_id_filters_every_api(ns: PartitionedNamespace) -> None:
    want = rows_2025(ns)
    assert want and len(want) < 12
    flt = "event_date_year = 2025"
    assert sorted_rows(ns.to_table(flt)) == want
    assert sorted_rows(ns.scan(flt).read_all()) == want
    assert ns.count_rows(flt) == len(want)
    assert len(ns.plan_scan(flt).tasks) < len(ns.inspect.partitions())
    assert ns.count_rows("event_date_year = 2025 AND country = 'US'") == sum(
        1 for r in want if r["country"] == "US"
    )
    # every row of a kept partition matches: counted from the manifest
    assert all(t.filter_implied for t in ns.plan_scan(flt).tasks)
    # changes take it too
    assert ns.delete("event_date_year = 2026").rows_deleted == 12 - len(want)
    ns.update("event_date_year = 2025", {"value": "value + 1000"})
    assert min(ns.to_table(flt)["value"].to_pylist()) >= 1000
    ns.merge_insert(
        sample_table(3, start=100),
        MergeOptions(
            "id",
            when_not_matched_by_source="delete",
            scope="event_date_year = 2025 AND country = 'FR'",
        ),
    )
    assert ns.maintenance.drop_partitions("event_date_year = 2025 AND country = 'DE'").rows > 0


def test_search_takes_a_partition_field_id(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("vec", pa.list_(pa.float32(), 2))])
    ns = PartitionedNamespace.create(tmp_path / "v", schema, [PartitionField.year("d")])
    ns.write(
        pa.table(
            {
                "id": [1, 2, 3],
                "d": [dt.date(2024, 1, 1), dt.date(2025, 1, 1), dt.date(2025, 6, 1)],
                "vec": [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]],
            },
            schema=schema,
        )
    )
    got = ns.search([0.0, 0.0], k=3, filter="d_year = 2025")
    assert sorted(got["id"].to_pylist()) == [2, 3]


def test_a_single_filter_tuple_is_a_filter(ns: PartitionedNamespace) -> None:
    assert ns.count_rows(("country", "=", "US")) == ns.count_rows("country = 'US'") == 4
    assert ns.count_rows(("country", "in", ["US", "FR"])) == 8
    assert ns.count_rows([("country", "=", "US"), ("value", ">", 3.0)]) == ns.count_rows(
        "country = 'US' AND value > 3.0"
    )
    with pytest.raises(FilterError, match="filter tuples"):
        ns.count_rows([("country", "=")])


def test_errors_never_show_the_internal_table(ns: PartitionedNamespace) -> None:
    for flt in ("event_dat = 2025", "nosuch = 1", "event_date_year = 'x' AND nosuch"):
        with pytest.raises(FilterError) as info:
            ns.to_table(flt)
        assert "__dlp" not in str(info.value), str(info.value)
    with pytest.raises(FilterError) as info:
        ns.to_table("event_dat = 2025")
    assert "Did you mean 'event_date'" in str(info.value)
