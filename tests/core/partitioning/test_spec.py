"""Partition specs: JSON shape, transforms, field-id rules, draft compatibility."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionField, PartitionSpec, SpecField
from dagster_lance_partitioned.core.errors import SpecError, UnknownTransformError
from dagster_lance_partitioned.core.partitioning.partition_spec import (
    resolve_fields,
    specs_from_metadata,
)
from dagster_lance_partitioned.core.partitioning.transforms import Bucket, Identity, Year
from dagster_lance_partitioned.core.schema import arrow_json

SCHEMA, _ = arrow_json.assign_field_ids(
    pa.schema(
        [
            ("id", pa.int64()),
            ("event_date", pa.date32()),
            ("country", pa.utf8()),
            ("user_id", pa.int32()),
            ("name", pa.utf8()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("amount", pa.int64()),
        ]
    )
)

EXAMPLE_V2 = {
    "id": 2,
    "fields": [
        {
            "field_id": "event_year",
            "source_ids": [1],
            "transform": {"type": "year"},
            "result_type": {"type": "int32"},
        },
        {
            "field_id": "country",
            "source_ids": [2],
            "transform": {"type": "identity"},
            "result_type": {"type": "utf8"},
        },
        {
            "field_id": "tenant_bucket",
            "source_ids": [3],
            "transform": {"type": "bucket", "num_buckets": 16},
            "result_type": {"type": "int32"},
        },
        {
            "field_id": "region",
            "source_ids": [2, 4],
            "expression": "concat(col0, '-', col1)",
            "result_type": {"type": "utf8"},
        },
    ],
}


def test_format_example_round_trips_exactly():
    spec = PartitionSpec.from_json(json.dumps(EXAMPLE_V2), 2)
    assert spec.to_json() == EXAMPLE_V2
    assert [f.column for f in spec.fields] == [
        "partition_field_event_year",
        "partition_field_country",
        "partition_field_tenant_bucket",
        "partition_field_region",
    ]
    assert spec.fields[2].transform == Bucket(16)
    assert spec.fields[3].expression == "concat(col0, '-', col1)"
    assert PartitionSpec.from_json(spec.to_json_str(), 2) == spec


def test_every_builder_resolves_and_round_trips():
    fields = [
        PartitionField.identity("country"),
        PartitionField.year("event_date"),
        PartitionField.month("event_date"),
        PartitionField.day("event_date"),
        PartitionField.hour("ts"),
        PartitionField.bucket("user_id", 16),
        PartitionField.multi_bucket(["country", "user_id"], 8),
        PartitionField.truncate("name", 3),
        PartitionField.truncate("amount", 100),
        PartitionField.expression(
            ["country", "name"], "concat(col0, '-', col1)", result_type=pa.utf8(), field_id="ab"
        ),
    ]
    resolved = resolve_fields(fields, SCHEMA)
    ids = [f.field_id for f in resolved]
    assert ids == [
        "country",
        "event_date_year",
        "event_date_month",
        "event_date_day",
        "ts_hour",
        "user_id_bucket_16",
        "country_user_id_bucket_8",
        "name_trunc_3",
        "amount_trunc_100",
        "ab",
    ]
    types = [f.result_type for f in resolved]
    assert types == [pa.utf8()] + [pa.int32()] * 6 + [pa.utf8(), pa.int64(), pa.utf8()]
    assert resolved[6].source_ids == (2, 3)
    spec = PartitionSpec(1, resolved)
    assert PartitionSpec.from_json(spec.to_json_str(), 1) == spec


def test_field_id_reuse_rule():
    v1 = PartitionSpec(1, resolve_fields([PartitionField.identity("country")], SCHEMA))
    # same source + transform -> same field id, even when another name is proposed by default
    v2_fields = resolve_fields(
        [PartitionField.year("event_date"), PartitionField.identity("country")], SCHEMA, [v1]
    )
    assert [f.field_id for f in v2_fields] == ["event_date_year", "country"]
    assert v2_fields[1] is v1.fields[0]
    # a different definition never takes an existing id
    v2 = PartitionSpec(2, v2_fields)
    v3_fields = resolve_fields(
        [PartitionField.bucket("country", 4, field_id=None)], SCHEMA, [v1, v2]
    )
    assert v3_fields[0].field_id == "country_bucket_4"
    with pytest.raises(SpecError, match="'country' already names a different"):
        resolve_fields([PartitionField.bucket("user_id", 4, field_id="country")], SCHEMA, [v1])
    # a clash of the default id with a different field gets a fresh suffix
    v1b = PartitionSpec(1, (SpecField("user_id_bucket_4", (4,), pa.int32(), Identity()),))
    got = resolve_fields([PartitionField.bucket("user_id", 4)], SCHEMA, [v1b])
    assert got[0].field_id == "user_id_bucket_4_2"


def test_unknown_transform_and_malformed_fields():
    bad = {"id": 1, "fields": [dict(EXAMPLE_V2["fields"][0], transform={"type": "week"})]}
    with pytest.raises(UnknownTransformError, match="'week'"):
        PartitionSpec.from_json(bad, 1)
    both = dict(EXAMPLE_V2["fields"][0], expression="col0")
    with pytest.raises(SpecError, match="exactly one"):
        PartitionSpec.from_json({"id": 1, "fields": [both]}, 1)
    with pytest.raises(SpecError, match="says id 2"):
        PartitionSpec.from_json(EXAMPLE_V2, 1)
    with pytest.raises(SpecError, match="num_buckets"):
        PartitionSpec.from_json(
            {"id": 1, "fields": [dict(EXAMPLE_V2["fields"][2], transform={"type": "bucket"})]}, 1
        )


def test_resolution_errors_name_the_problem():
    with pytest.raises(SpecError, match="'nope' is not in the schema"):
        resolve_fields([PartitionField.identity("nope")], SCHEMA)
    with pytest.raises(SpecError, match="'hour' needs a timestamp"):
        resolve_fields([PartitionField.hour("event_date")], SCHEMA)
    with pytest.raises(SpecError, match="truncate needs"):
        resolve_fields([PartitionField.truncate("event_date", 2)], SCHEMA)
    with pytest.raises(SpecError, match="appears twice"):
        resolve_fields(
            [PartitionField.identity("country"), PartitionField.identity("country")], SCHEMA
        )
    with pytest.raises(SpecError, match="needs a result_type"):
        PartitionField(("a",), None, "col0")
    with pytest.raises(SpecError, match="positive"):
        PartitionField.bucket("user_id", 0)


def test_draft_shape_is_normalised():
    draft = [
        {
            "field_id": 2,
            "name": "event_year",
            "source_id": 1,
            "expression": "date_part('year', col)",
            "result_type": {"type": "int32"},
        },
        {
            "field_id": 3,
            "name": "country",
            "source_id": 2,
            "expression": "col",
            "result_type": {"type": "utf8"},
        },
    ]
    spec = PartitionSpec.from_json(json.dumps(draft), 2)
    assert spec.draft
    assert [f.field_id for f in spec.fields] == ["event_year", "country"]
    assert [f.column for f in spec.fields] == ["event_year", "country"]  # draft column names kept
    assert spec.fields[0].expression == "date_part('year', col0)"
    assert spec.fields[1].expression == "col0"
    # written back only in the current shape
    assert "fields" in spec.to_json() and spec.to_json()["fields"][0]["source_ids"] == [1]


def test_specs_from_metadata_orders_versions_and_ignores_other_keys():
    md = {
        "partition_spec_v2": json.dumps(EXAMPLE_V2),
        "partition_spec_v1": json.dumps(
            {
                "id": 1,
                "fields": [
                    {
                        "field_id": "event_date",
                        "source_ids": [1],
                        "transform": {"type": "identity"},
                        "result_type": {"type": "date32"},
                    }
                ],
            }
        ),
        "schema": "{}",
        "partition_spec_vX": "ignored",
    }
    specs = specs_from_metadata(md)
    assert [s.spec_id for s in specs] == [1, 2]
    assert specs[0].fields[0].transform == Identity()
    assert specs[1].fields[0].transform == Year()
