"""Tests for dagster_lance_partitioned.core.schema.arrow_json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_lance_partitioned.core.errors import SchemaError
from dagster_lance_partitioned.core.schema.arrow_json import (
    FIELD_ID_KEY,
    MAP_ENTRIES_FIELD_ID_KEY,
    assign_field_ids,
    field_from_json,
    field_id,
    field_to_json,
    fields_by_id,
    max_field_id,
    normalize_schema,
    normalize_type,
    schema_from_json,
    schema_to_json,
    strip_field_ids,
    type_from_json,
    type_to_json,
)

SPEC_EXAMPLE = (
    '{"fields":[{"name":"id","nullable":false,"type":{"type":"int64"},'
    '"metadata":{"lance:field_id":"0"}},{"name":"event_date","nullable":true,'
    '"type":{"type":"date32"},"metadata":{"lance:field_id":"1"}},{"name":"country",'
    '"nullable":true,"type":{"type":"utf8"},"metadata":{"lance:field_id":"2"}}]}'
)


def _item(t: pa.DataType, name: str = "item", nullable: bool = True) -> dict:
    return {"name": name, "nullable": nullable, "type": type_to_json(t)}


# (Arrow type, exact JsonArrowDataType) for every supported type.
TYPE_CASES: list[tuple[pa.DataType, dict]] = [
    (pa.null(), {"type": "null"}),
    (pa.bool_(), {"type": "bool"}),
    (pa.int8(), {"type": "int8"}),
    (pa.int16(), {"type": "int16"}),
    (pa.int32(), {"type": "int32"}),
    (pa.int64(), {"type": "int64"}),
    (pa.uint8(), {"type": "uint8"}),
    (pa.uint16(), {"type": "uint16"}),
    (pa.uint32(), {"type": "uint32"}),
    (pa.uint64(), {"type": "uint64"}),
    (pa.float16(), {"type": "float16"}),
    (pa.float32(), {"type": "float32"}),
    (pa.float64(), {"type": "float64"}),
    (pa.utf8(), {"type": "utf8"}),
    (pa.large_utf8(), {"type": "large_utf8"}),
    (pa.binary(), {"type": "binary"}),
    (pa.large_binary(), {"type": "large_binary"}),
    (pa.binary(16), {"type": "fixed_size_binary", "length": 16}),
    (pa.date32(), {"type": "date32"}),
    (pa.date64(), {"type": "date64"}),
    (pa.time32("s"), {"type": "time32:s"}),
    (pa.time32("ms"), {"type": "time32:ms"}),
    (pa.time64("us"), {"type": "time64:us"}),
    (pa.time64("ns"), {"type": "time64:ns"}),
    (pa.timestamp("us"), {"type": "timestamp"}),
    (pa.timestamp("s"), {"type": "timestamp:s:-"}),
    (pa.timestamp("ms"), {"type": "timestamp:ms:-"}),
    (pa.timestamp("ns"), {"type": "timestamp:ns:-"}),
    (pa.timestamp("us", tz="UTC"), {"type": "timestamp:us:UTC"}),
    (pa.timestamp("ms", tz="America/New_York"), {"type": "timestamp:ms:America/New_York"}),
    (pa.timestamp("s", tz="+05:30"), {"type": "timestamp:s:+05:30"}),
    (pa.duration("us"), {"type": "duration"}),
    (pa.duration("s"), {"type": "duration:s"}),
    (pa.duration("ms"), {"type": "duration:ms"}),
    (pa.duration("ns"), {"type": "duration:ns"}),
    (pa.decimal128(10, 2), {"type": "decimal128", "length": 10002}),
    (pa.decimal128(38, 0), {"type": "decimal128", "length": 38000}),
    (pa.decimal128(9, -2), {"type": "decimal128", "length": 8998}),
    (pa.decimal256(76, 38), {"type": "decimal256", "length": 76038}),
    (pa.decimal256(40, -3), {"type": "decimal256", "length": 39997}),
    (pa.struct([]), {"type": "struct", "fields": []}),
    (
        pa.struct([pa.field("a", pa.int64(), nullable=False), ("b", pa.utf8())]),
        {
            "type": "struct",
            "fields": [_item(pa.int64(), "a", False), _item(pa.utf8(), "b")],
        },
    ),
    (pa.list_(pa.int32()), {"type": "list", "fields": [_item(pa.int32())]}),
    (
        pa.list_(pa.field("element", pa.utf8(), nullable=False)),
        {"type": "list", "fields": [_item(pa.utf8(), "element", False)]},
    ),
    (pa.large_list(pa.utf8()), {"type": "large_list", "fields": [_item(pa.utf8())]}),
    (
        pa.list_(pa.float32(), 128),
        {"type": "fixed_size_list", "length": 128, "fields": [_item(pa.float32())]},
    ),
    (
        pa.map_(pa.utf8(), pa.int32()),
        {
            "type": "map",
            "fields": [
                {
                    "name": "entries",
                    "nullable": False,
                    "type": {
                        "type": "struct",
                        "fields": [_item(pa.utf8(), "key", False), _item(pa.int32(), "value")],
                    },
                }
            ],
        },
    ),
    (
        pa.map_(pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.utf8()), True),
        {
            "type": "map:sorted",
            "fields": [
                {
                    "name": "entries",
                    "nullable": False,
                    "type": {
                        "type": "struct",
                        "fields": [_item(pa.int64(), "k", False), _item(pa.utf8(), "v")],
                    },
                }
            ],
        },
    ),
]
if hasattr(pa, "decimal32"):
    TYPE_CASES.append((pa.decimal32(9, 3), {"type": "decimal32", "length": 9003}))
if hasattr(pa, "decimal64"):
    TYPE_CASES.append((pa.decimal64(18, -5), {"type": "decimal64", "length": 17995}))


def _ids(x):
    return str(x)


def _via_text(obj: dict) -> dict:
    return json.loads(json.dumps(obj))


# --------------------------------------------------------------------------------------------
# Type conventions and round trips


@pytest.mark.parametrize(("arrow_type", "expected"), TYPE_CASES, ids=_ids)
def test_type_to_json_exact(arrow_type: pa.DataType, expected: dict) -> None:
    assert type_to_json(arrow_type) == expected


@pytest.mark.parametrize(("arrow_type", "expected"), TYPE_CASES, ids=_ids)
def test_type_round_trip_both_ways(arrow_type: pa.DataType, expected: dict) -> None:
    back = type_from_json(_via_text(type_to_json(arrow_type)))
    assert back.equals(arrow_type, check_metadata=True)
    assert type_to_json(type_from_json(_via_text(expected))) == expected


def test_result_type_examples() -> None:
    assert type_to_json(pa.int32()) == {"type": "int32"}
    assert type_to_json(pa.utf8()) == {"type": "utf8"}
    assert type_to_json(pa.date32()) == {"type": "date32"}
    assert type_from_json({"type": "date32"}) == pa.date32()


@pytest.mark.parametrize(
    ("json_type", "arrow_type"),
    [
        ({"type": "boolean"}, pa.bool_()),
        ({"type": "Int64"}, pa.int64()),
        ({"type": "UTF8"}, pa.utf8()),
        ({"type": "timestamp"}, pa.timestamp("us")),
        ({"type": "timestamp:ms"}, pa.timestamp("ms")),
        ({"type": "TIMESTAMP:NS:Europe/Paris"}, pa.timestamp("ns", tz="Europe/Paris")),
        ({"type": "duration"}, pa.duration("us")),
        ({"type": "time32"}, pa.time32("ms")),
        ({"type": "time64"}, pa.time64("us")),
    ],
    ids=_ids,
)
def test_reads_aliases_and_lance_bare_forms(json_type: dict, arrow_type: pa.DataType) -> None:
    assert type_from_json(json_type).equals(arrow_type)


def test_field_round_trip_keeps_metadata_and_nullability() -> None:
    f = pa.field(
        "s",
        pa.struct(
            [
                pa.field("a", pa.int32(), nullable=False, metadata={FIELD_ID_KEY: "2", "x": "y"}),
                pa.field(
                    "l",
                    pa.list_(
                        pa.field("item", pa.utf8(), nullable=False, metadata={FIELD_ID_KEY: "4"})
                    ),
                    metadata={FIELD_ID_KEY: "3"},
                ),
            ]
        ),
        nullable=False,
        metadata={FIELD_ID_KEY: "1", "comment": "naïve ✓"},
    )
    j = field_to_json(f)
    assert j["metadata"] == {FIELD_ID_KEY: "1", "comment": "naïve ✓"}
    assert j["nullable"] is False
    a, lst = j["type"]["fields"]
    assert a == {
        "name": "a",
        "nullable": False,
        "type": {"type": "int32"},
        "metadata": {FIELD_ID_KEY: "2", "x": "y"},
    }
    assert lst["type"]["fields"][0]["metadata"] == {FIELD_ID_KEY: "4"}
    assert field_from_json(_via_text(j)).equals(f, check_metadata=True)
    assert field_to_json(field_from_json(j)) == j


def test_empty_metadata_is_omitted() -> None:
    assert field_to_json(pa.field("x", pa.int8())) == {
        "name": "x",
        "nullable": True,
        "type": {"type": "int8"},
    }
    assert schema_to_json(pa.schema([pa.field("x", pa.int8())])) == {
        "fields": [{"name": "x", "nullable": True, "type": {"type": "int8"}}]
    }


def _full_schema() -> pa.Schema:
    """One field of every supported type, nested ones included, with schema metadata."""
    fields = [
        pa.field(f"c{i}", t, nullable=i % 2 == 0, metadata={"n": str(i)})
        for i, (t, _) in enumerate(TYPE_CASES)
    ]
    fields.append(
        pa.field(
            "deep",
            pa.list_(
                pa.struct(
                    [
                        ("m", pa.map_(pa.utf8(), pa.list_(pa.timestamp("ns", tz="UTC")))),
                        ("f", pa.list_(pa.struct([("d", pa.decimal128(20, 4))]), 2)),
                        ("ll", pa.large_list(pa.large_list(pa.binary(3)))),
                    ]
                )
            ),
        )
    )
    return pa.schema(fields, metadata={"owner": "tests", "k": ""})


def test_schema_round_trip_every_type_with_ids() -> None:
    schema, _ = assign_field_ids(_full_schema())
    text = json.dumps(schema_to_json(schema))
    back = schema_from_json(text)
    assert back.equals(schema, check_metadata=True)
    assert schema_to_json(back) == json.loads(text)
    assert fields_by_id(back) == fields_by_id(schema)


def test_spec_example_json_round_trip_exact() -> None:
    schema = schema_from_json(SPEC_EXAMPLE)
    assert schema.equals(
        pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False, metadata={FIELD_ID_KEY: "0"}),
                pa.field("event_date", pa.date32(), metadata={FIELD_ID_KEY: "1"}),
                pa.field("country", pa.utf8(), metadata={FIELD_ID_KEY: "2"}),
            ]
        ),
        check_metadata=True,
    )
    out = schema_to_json(schema)
    assert out == json.loads(SPEC_EXAMPLE)
    assert json.dumps(out, separators=(",", ":")) == SPEC_EXAMPLE
    assert schema_from_json(SPEC_EXAMPLE.encode()).equals(schema, check_metadata=True)
    assert schema_from_json(json.loads(SPEC_EXAMPLE)).equals(schema, check_metadata=True)
    assert fields_by_id(schema) == {0: ("id",), 1: ("event_date",), 2: ("country",)}


def test_matches_what_lance_directory_namespace_writes(tmp_path: Path) -> None:
    """For types Lance's converter keeps losslessly, our JSON equals pylance's own."""
    from lance.namespace import DirectoryNamespace
    from lance_namespace_urllib3_client.models import DescribeTableRequest

    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False, metadata={"k": "v"}),
            pa.field("b", pa.bool_()),
            pa.field("u8", pa.uint8()),
            pa.field("h", pa.float16()),
            pa.field("f", pa.float64()),
            pa.field("s", pa.utf8()),
            pa.field("ls", pa.large_utf8()),
            pa.field("bin", pa.binary()),
            pa.field("lbin", pa.large_binary()),
            pa.field("fsb", pa.binary(16)),
            pa.field("d32", pa.date32()),
            pa.field("d64", pa.date64()),
            pa.field("ts", pa.timestamp("us")),
            pa.field("dur", pa.duration("us")),
            pa.field("dec", pa.decimal128(10, 2)),
            pa.field("dec_neg", pa.decimal256(40, -3)),
            pa.field("st", pa.struct([("x", pa.int32()), ("l", pa.list_(pa.utf8()))])),
            pa.field("vec", pa.list_(pa.float32(), 4)),
            pa.field("ll", pa.large_list(pa.int8())),
            pa.field("m", pa.map_(pa.utf8(), pa.int32())),
            pa.field("dict", pa.dictionary(pa.int32(), pa.utf8())),
        ],
        metadata={"schema_key": "1"},
    )
    lance.write_dataset(pa.Table.from_pylist([], schema), tmp_path / "t.lance")
    ns = DirectoryNamespace(root=str(tmp_path))
    response = ns.describe_table(DescribeTableRequest(id=["t"], load_detailed_metadata=True))
    lance_json = response.var_schema.to_dict()
    assert schema_to_json(schema) == lance_json
    assert schema_from_json(lance_json).equals(normalize_schema(schema), check_metadata=True)


# --------------------------------------------------------------------------------------------
# Dictionary normalisation


def test_dictionary_normalised_to_value_type() -> None:
    assert type_to_json(pa.dictionary(pa.int32(), pa.utf8())) == {"type": "utf8"}
    assert type_to_json(pa.list_(pa.dictionary(pa.int8(), pa.large_utf8()))) == {
        "type": "list",
        "fields": [_item(pa.large_utf8())],
    }
    assert normalize_type(pa.dictionary(pa.int32(), pa.utf8())) == pa.utf8()


def test_normalize_type_nested_and_unchanged() -> None:
    dict_t = pa.dictionary(pa.int16(), pa.utf8())
    nested = pa.struct(
        [
            pa.field("a", dict_t, nullable=False, metadata={FIELD_ID_KEY: "1"}),
            ("l", pa.list_(pa.field("e", dict_t, metadata={FIELD_ID_KEY: "3"}))),
            ("fl", pa.list_(dict_t, 2)),
            ("ll", pa.large_list(dict_t)),
            ("m", pa.map_(pa.int32(), dict_t, keys_sorted=True)),
            ("x", pa.float64()),
        ]
    )
    expected = pa.struct(
        [
            pa.field("a", pa.utf8(), nullable=False, metadata={FIELD_ID_KEY: "1"}),
            ("l", pa.list_(pa.field("e", pa.utf8(), metadata={FIELD_ID_KEY: "3"}))),
            ("fl", pa.list_(pa.utf8(), 2)),
            ("ll", pa.large_list(pa.utf8())),
            ("m", pa.map_(pa.int32(), pa.utf8(), keys_sorted=True)),
            ("x", pa.float64()),
        ]
    )
    assert normalize_type(nested).equals(expected, check_metadata=True)
    for t, _ in TYPE_CASES:
        assert normalize_type(t) is t
    schema = pa.schema([pa.field("n", nested)], metadata={"a": "b"})
    normalized = normalize_schema(schema)
    assert normalized.equals(pa.schema([pa.field("n", expected)], metadata={"a": "b"}), True)


# --------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    "bad_type",
    [
        "string",
        "int128",
        "timestamp:xs",
        "timestamp:xs:UTC",
        "time32:us",
        "time64:ms",
        "duration:days",
        "map:unsorted",
        "list:x",
        "interval",
    ],
)
def test_unknown_type_string_raises_naming_it(bad_type: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(repr(bad_type))):
        type_from_json({"type": bad_type})
    field_json = {"name": "col", "nullable": True, "type": {"type": bad_type}}
    with pytest.raises(SchemaError, match="col"):
        schema_from_json(
            {"fields": [{"name": "s", "type": {"type": "struct", "fields": [field_json]}}]}
        )


@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.string_view(),
        pa.binary_view(),
        pa.month_day_nano_interval(),
        pa.dense_union([pa.field("a", pa.int32())]),
        pa.run_end_encoded(pa.int32(), pa.utf8()),
        pa.list_view(pa.int32()),
        pa.uuid(),
    ],
    ids=_ids,
)
def test_unsupported_arrow_type_raises(arrow_type: pa.DataType) -> None:
    with pytest.raises(SchemaError, match=re.escape(str(arrow_type))):
        type_to_json(arrow_type)
    with pytest.raises(SchemaError, match=r"'outer\.inner'"):
        schema_to_json(pa.schema([pa.field("outer", pa.struct([("inner", arrow_type)]))]))


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "fixed_size_binary"},
        {"type": "fixed_size_list", "fields": [{"name": "item", "type": {"type": "int8"}}]},
        {"type": "decimal128"},
        {"type": "decimal128", "length": -1},
        {"type": "list"},
        {"type": "list", "fields": []},
        {"type": "struct"},
        {"type": "map", "fields": [{"name": "entries", "type": {"type": "int32"}}]},
        {"type": 5},
        {"length": 3},
        {
            "type": "struct",
            "fields": [{"name": "n", "nullable": False, "type": {"type": "null"}}],
        },
        {
            "type": "map",
            "fields": [
                {
                    "name": "entries",
                    "nullable": False,
                    "type": {
                        "type": "struct",
                        "fields": [
                            {"name": "key", "nullable": True, "type": {"type": "utf8"}},
                            {"name": "value", "nullable": True, "type": {"type": "utf8"}},
                        ],
                    },
                }
            ],
        },
    ],
    ids=_ids,
)
def test_malformed_json_type_raises(bad: dict) -> None:
    with pytest.raises(SchemaError):
        type_from_json(bad)


def test_malformed_schema_raises() -> None:
    with pytest.raises(SchemaError):
        schema_from_json("{not json")
    with pytest.raises(SchemaError):
        schema_from_json({"nofields": []})
    with pytest.raises(SchemaError):
        schema_from_json({"fields": [{"name": "x", "nullable": "yes", "type": {"type": "int8"}}]})
    with pytest.raises(SchemaError):
        schema_from_json(
            {"fields": [{"name": "x", "type": {"type": "int8"}, "metadata": {"a": 1}}]}
        )
    with pytest.raises(SchemaError):
        schema_from_json({"fields": [{"name": "x"}]})


# --------------------------------------------------------------------------------------------
# Field ids


def _lance_ids(schema: pa.Schema, path: Path) -> dict[tuple[str, ...], int]:
    """Field path -> id as pylance assigns them to a new dataset of ``schema``."""
    ds = lance.write_dataset(pa.Table.from_pylist([], schema), path)
    found = re.findall(
        r'Field \{ name: "([^"]*)", id: (-?\d+), parent_id: (-?\d+)', str(ds.lance_schema)
    )
    by_id = {int(i): (name, int(parent)) for name, i, parent in found}
    out: dict[tuple[str, ...], int] = {}
    for fid in by_id:
        names: list[str] = []
        cur = fid
        while cur != -1:
            name, cur = by_id[cur]
            names.append(name)
        out[tuple(reversed(names))] = fid
    return out


def _our_ids(schema: pa.Schema) -> dict[tuple[str, ...], int]:
    return {path: fid for fid, path in fields_by_id(schema).items()}


NESTED = pa.schema(
    [
        pa.field("a", pa.int64(), nullable=False),
        pa.field(
            "s",
            pa.struct(
                [
                    ("x", pa.int32()),
                    ("y", pa.struct([("p", pa.utf8()), ("q", pa.list_(pa.int8()))])),
                ]
            ),
        ),
        pa.field("l", pa.list_(pa.struct([("u", pa.int32()), ("v", pa.utf8())]))),
        pa.field("ll", pa.large_list(pa.utf8())),
        pa.field("vec", pa.list_(pa.float32(), 4)),
        pa.field("fsl_struct", pa.list_(pa.struct([("a", pa.int32())]), 2)),
        pa.field("list_vec", pa.list_(pa.list_(pa.float32(), 3))),
        pa.field("m", pa.map_(pa.utf8(), pa.struct([("w", pa.list_(pa.int32()))]))),
        pa.field("dict", pa.dictionary(pa.int32(), pa.utf8())),
        pa.field("ts", pa.timestamp("ns", tz="UTC")),
        pa.field("z", pa.utf8()),
    ]
)


def test_assign_field_ids_matches_pylance(tmp_path: Path) -> None:
    assigned, next_id = assign_field_ids(NESTED)
    lance_ids = _lance_ids(NESTED, tmp_path / "t")
    assert _our_ids(assigned) == lance_ids
    assert next_id == max(lance_ids.values()) + 1 == max_field_id(assigned) + 1
    # spot checks of Lance's numbering rules
    ours = _our_ids(assigned)
    assert ours[("a",)] == 0
    assert ours[("s", "x")] == ours[("s",)] + 1
    assert ours[("l", "item")] == ours[("l",)] + 1
    assert ours[("m", "entries")] == ours[("m",)] + 1
    assert ("vec", "item") not in ours  # Lance gives a primitive fixed_size_list item no id
    assert ours[("fsl_struct", "item")] == ours[("fsl_struct",)] + 1
    # ids survive the JSON round trip, entries id included
    back = schema_from_json(json.dumps(schema_to_json(assigned)))
    assert _our_ids(back) == lance_ids
    m_json = next(f for f in schema_to_json(assigned)["fields"] if f["name"] == "m")
    assert m_json["metadata"] == {FIELD_ID_KEY: str(ours[("m",)])}
    assert m_json["type"]["fields"][0]["metadata"] == {FIELD_ID_KEY: str(ours[("m", "entries")])}


def test_assign_field_ids_keeps_existing_and_never_reuses() -> None:
    schema, next_id = assign_field_ids(NESTED)
    again, next_again = assign_field_ids(schema, next_id)
    assert again.equals(schema, check_metadata=True)
    assert next_again == next_id

    # a renamed column keeps its id; new top-level and nested fields get fresh ids
    old_ids = fields_by_id(schema)
    s_field = schema.field("s")
    grown_s = pa.field(
        "s",
        pa.struct([*s_field.type, pa.field("new_child", pa.list_(pa.int64()))]),
        metadata=s_field.metadata,
    )
    evolved = pa.schema(
        [
            schema.field("a").with_name("a_renamed"),
            grown_s,
            *[f for f in schema if f.name not in ("a", "s", "l")],  # "l" dropped
            pa.field("new_top", pa.struct([("k", pa.int8())])),
        ]
    )
    assigned, next2 = assign_field_ids(evolved, next_id)
    new_ids = fields_by_id(assigned)
    assert new_ids[_our_ids(schema)[("a",)]] == ("a_renamed",)
    kept = {fid for fid in old_ids if fid in new_ids}
    fresh = set(new_ids) - kept
    assert fresh == set(range(next_id, next2))
    assert {new_ids[i] for i in fresh} == {
        ("s", "new_child"),
        ("s", "new_child", "item"),
        ("new_top",),
        ("new_top", "k"),
    }
    # ids of the dropped "l" subtree are not handed out again
    assert not fresh & {fid for fid, path in old_ids.items() if path[0] == "l"}
    # pre-order: a new parent comes before its children
    assert new_ids[next_id] == ("s", "new_child")


def test_assign_field_ids_next_id_and_existing_maximum() -> None:
    schema = pa.schema([pa.field("x", pa.int32()), pa.field("y", pa.int32())])
    assigned, nxt = assign_field_ids(schema, 10)
    assert [field_id(f) for f in assigned] == [10, 11]
    assert nxt == 12
    # a next_id below existing ids is raised past them
    partly = pa.schema(
        [pa.field("x", pa.int32(), metadata={FIELD_ID_KEY: "7"}), pa.field("y", pa.int32())]
    )
    assigned, nxt = assign_field_ids(partly, 0)
    assert [field_id(f) for f in assigned] == [7, 8]
    assert nxt == 9
    assert assign_field_ids(pa.schema([]), 5) == (pa.schema([]), 5)


def test_field_id_helpers() -> None:
    assert field_id(pa.field("x", pa.int8())) is None
    assert field_id(pa.field("x", pa.int8(), metadata={FIELD_ID_KEY: "12", "o": "p"})) == 12
    with pytest.raises(SchemaError, match="x"):
        field_id(pa.field("x", pa.int8(), metadata={FIELD_ID_KEY: "twelve"}))
    assert max_field_id(pa.schema([pa.field("x", pa.int8())])) == -1
    assert (
        max_field_id(assign_field_ids(NESTED)[0]) == len(_our_ids(assign_field_ids(NESTED)[0])) - 1
    )


def test_duplicate_ids_rejected() -> None:
    dup = pa.schema(
        [
            pa.field("x", pa.int8(), metadata={FIELD_ID_KEY: "1"}),
            pa.field("s", pa.struct([pa.field("y", pa.int8(), metadata={FIELD_ID_KEY: "1"})])),
        ]
    )
    with pytest.raises(SchemaError, match=r"duplicate.*'x'.*'s\.y'"):
        fields_by_id(dup)
    with pytest.raises(SchemaError, match="duplicate"):
        assign_field_ids(dup)


def test_strip_field_ids_keeps_other_metadata() -> None:
    schema = pa.schema(
        [
            pa.field("a", pa.int8(), metadata={"doc": "a column"}),
            pa.field("s", pa.struct([pa.field("b", pa.utf8(), metadata={"doc": "b"})])),
            pa.field("m", pa.map_(pa.utf8(), pa.int8())),
        ],
        metadata={"schema": "meta"},
    )
    assigned, _ = assign_field_ids(schema)
    assert MAP_ENTRIES_FIELD_ID_KEY.encode() in assigned.field("m").metadata
    stripped = strip_field_ids(assigned)
    assert stripped.equals(schema, check_metadata=True)
    assert fields_by_id(stripped) == {}
    assert max_field_id(stripped) == -1
    assert strip_field_ids(schema).equals(schema, check_metadata=True)


def test_map_entries_id_only_lives_in_type_for_fields() -> None:
    assigned, _ = assign_field_ids(pa.schema([pa.field("m", pa.map_(pa.utf8(), pa.int8()))]))
    m = assigned.field("m")
    # type-level conversion cannot carry the entries id (pyarrow's entries field has no metadata)
    entries = type_to_json(m.type)["fields"][0]
    assert "metadata" not in entries
    assert field_to_json(m)["type"]["fields"][0]["metadata"] == {FIELD_ID_KEY: "1"}
    assert field_from_json(field_to_json(m)).equals(m, check_metadata=True)


# --------------------------------------------------------------------------------------------
# Property tests


_NAMES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
_METADATA = st.dictionaries(_NAMES, _NAMES, max_size=2)
_UNITS = st.sampled_from(["s", "ms", "us", "ns"])
_ZONES = st.sampled_from([None, "UTC", "America/New_York", "+05:30", "Europe/Paris"])

_PRIMITIVES = [t for t, _ in TYPE_CASES if not pa.types.is_nested(t)]
_LEAF_TYPES = st.one_of(
    st.sampled_from(_PRIMITIVES),
    st.builds(pa.timestamp, _UNITS, tz=_ZONES),
    st.builds(pa.duration, _UNITS),
    st.builds(pa.binary, st.integers(0, 64)),
    st.integers(1, 38).flatmap(lambda p: st.builds(pa.decimal128, st.just(p), st.integers(-5, p))),
    st.integers(1, 76).flatmap(lambda p: st.builds(pa.decimal256, st.just(p), st.integers(-5, p))),
)
_KEY_TYPES = st.sampled_from([pa.utf8(), pa.int32(), pa.int64(), pa.binary(), pa.date32()])


@st.composite
def _fields(draw, types, names=_NAMES, metadata=_METADATA, with_ids=True) -> pa.Field:
    t = draw(types)
    md = dict(draw(metadata))
    if with_ids and draw(st.booleans()):
        md[FIELD_ID_KEY] = str(draw(st.integers(0, 10**6)))
    if with_ids and pa.types.is_map(t) and draw(st.booleans()):
        md[MAP_ENTRIES_FIELD_ID_KEY] = str(draw(st.integers(0, 10**6)))
    nullable = pa.types.is_null(t) or draw(st.booleans())  # pyarrow: null fields are nullable
    return pa.field(draw(names), t, nullable=nullable, metadata=md or None)


def _nested(children):
    return st.one_of(
        st.lists(_fields(children), max_size=3).map(pa.struct),
        _fields(children).map(pa.list_),
        _fields(children).map(pa.large_list),
        st.builds(pa.list_, _fields(children), st.integers(0, 5)),
        st.builds(
            pa.map_,
            _fields(_KEY_TYPES).map(lambda f: f.with_nullable(False)),
            _fields(children),
            st.booleans(),
        ),
    )


_TYPES = st.recursive(_LEAF_TYPES, _nested, max_leaves=8)
_SCHEMAS = st.builds(
    lambda fields, md: pa.schema(fields, metadata=md or None),
    st.lists(_fields(_TYPES), max_size=5),
    _METADATA,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SCHEMAS)
def test_property_random_nested_schemas_round_trip(schema: pa.Schema) -> None:
    text = json.dumps(schema_to_json(schema))
    back = schema_from_json(text)
    assert back.equals(schema, check_metadata=True)
    assert schema_to_json(back) == json.loads(text)
    for f in schema:
        assert field_from_json(_via_text(field_to_json(f))).equals(f, check_metadata=True)
        assert type_from_json(_via_text(type_to_json(f.type))).equals(f.type)


@settings(max_examples=200, deadline=None)
@given(_SCHEMAS.map(strip_field_ids), st.integers(0, 1000))
def test_property_assign_ids_then_round_trip(schema: pa.Schema, start: int) -> None:
    assigned, nxt = assign_field_ids(schema, start)
    ids = fields_by_id(assigned)
    assert sorted(ids) == list(range(start, nxt))
    assert strip_field_ids(assigned).equals(schema, check_metadata=True)
    back = schema_from_json(json.dumps(schema_to_json(assigned)))
    assert fields_by_id(back) == ids
    assert assign_field_ids(back, nxt) == (back, nxt)


# Schemas pylance accepts: distinct simple names per level, no sorted maps, and
# fixed_size_list items that are primitive or struct.
_LANCE_NAMES = st.text("abcdefgh", min_size=1, max_size=3)
_LANCE_LEAVES = st.sampled_from(
    [pa.int32(), pa.int64(), pa.utf8(), pa.float32(), pa.bool_(), pa.date32(), pa.binary(4)]
)


def _lance_fields(types, names=_LANCE_NAMES):
    return _fields(types, names, st.just({}), with_ids=False)


def _lance_structs(fields):
    return st.lists(fields, min_size=1, max_size=3, unique_by=lambda f: f.name).map(pa.struct)


def _lance_nested(children):
    fields = _lance_fields(children)
    return st.one_of(
        _lance_structs(fields),
        fields.map(pa.list_),
        fields.map(pa.large_list),
        st.builds(
            pa.list_, _lance_fields(_LANCE_LEAVES | _lance_structs(fields)), st.integers(1, 3)
        ),
        st.builds(
            pa.map_,
            st.just(pa.field("key", pa.utf8(), nullable=False)),
            _lance_fields(children, st.just("value")),
        ),
    )


_LANCE_SCHEMAS = st.lists(
    _lance_fields(st.recursive(_LANCE_LEAVES, _lance_nested, max_leaves=6)),
    min_size=1,
    max_size=4,
    unique_by=lambda f: f.name,
).map(pa.schema)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_LANCE_SCHEMAS)
def test_property_assign_ids_agrees_with_pylance(tmp_path: Path, schema: pa.Schema) -> None:
    assigned, nxt = assign_field_ids(schema)
    target = tmp_path / f"ds{len(list(tmp_path.iterdir()))}"
    lance_ids = _lance_ids(schema, target)
    assert _our_ids(assigned) == lance_ids
    assert nxt == max(lance_ids.values()) + 1
