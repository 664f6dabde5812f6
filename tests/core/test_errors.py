"""Bad input raises a specific error naming what is at fault, and leaves storage unchanged."""

from __future__ import annotations

import json
import os

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table

from dagster_lance_partitioned import (
    NamespaceExistsError,
    NamespaceNotFoundError,
    NotAPartitionedNamespaceError,
    NullabilityError,
    PartitionedNamespace,
    PartitionField,
    ResultTypeMismatchError,
    SchemaMismatchError,
    SpecError,
    UnknownTransformError,
    WriteError,
)
from dagster_lance_partitioned.core.expr.filters import FilterError


@pytest.fixture
def ns(tmp_path):
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table())
    return ns


def test_unknown_column_is_named_and_nothing_changes(ns):
    before = fingerprint(ns.uri)
    bad = sample_table().append_column("surprise", pa.array(["x"] * 12))
    with pytest.raises(SchemaMismatchError, match="'surprise'") as info:
        ns.write(bad)
    assert info.value.column == "surprise"
    assert fingerprint(ns.uri) == before


def test_incompatible_type_is_named_and_nothing_changes(ns):
    before = fingerprint(ns.uri)
    bad = sample_table().set_column(3, "value", pa.array(["not a number"] * 12))
    with pytest.raises(SchemaMismatchError, match="'value' has type string") as info:
        ns.write(bad, mode="overwrite")
    assert info.value.column == "value"
    assert fingerprint(ns.uri) == before


def test_value_that_does_not_fit_is_named(ns):
    before = fingerprint(ns.uri)
    bad = pa.table({"id": pa.array([2**40], pa.uint64()), "country": ["US"]})
    ok = pa.table({"id": pa.array([5], pa.uint64()), "country": ["US"]})
    ns.write(ok)  # a castable type whose values fit is fine
    after_ok = fingerprint(ns.uri)
    assert after_ok != before
    with pytest.raises(SchemaMismatchError, match="'id'"):
        ns.write(pa.table({"id": pa.array([2**63 + 1], pa.uint64()), "country": ["US"]}))
    assert fingerprint(ns.uri) == after_ok
    del bad


def test_non_nullable_violation_is_named_and_nothing_changes(ns):
    before = fingerprint(ns.uri)
    bad = pa.table({"id": pa.array([1, None], pa.int64()), "country": ["US", "FR"]})
    with pytest.raises(NullabilityError, match="'id' is not nullable") as info:
        ns.write(bad)
    assert info.value.column == "id"
    missing = pa.table({"country": ["US"]})
    with pytest.raises(NullabilityError, match="'id' is not nullable"):
        ns.write(missing)
    assert fingerprint(ns.uri) == before


def test_result_type_mismatch_is_refused_at_create(tmp_path):
    with pytest.raises(ResultTypeMismatchError, match=r"'cc'.*int"):
        PartitionedNamespace.create(
            tmp_path / "x",
            SCHEMA,
            [PartitionField.expression(["id"], "col0 * 2", result_type=pa.utf8(), field_id="cc")],
        )
    assert not os.path.exists(tmp_path / "x")


def test_result_value_overflow_is_refused_at_write(tmp_path):
    ns = PartitionedNamespace.create(
        tmp_path / "x",
        SCHEMA,
        [PartitionField.expression(["id"], "col0 * 2", result_type=pa.int32(), field_id="twice")],
    )
    ns.write(pa.table({"id": pa.array([1], pa.int64())}))
    before = fingerprint(ns.uri)
    with pytest.raises(ResultTypeMismatchError, match=r"'twice'.*do not fit"):
        ns.write(pa.table({"id": pa.array([2**40], pa.int64())}))
    assert fingerprint(ns.uri) == before


def test_unknown_transform_in_stored_spec(ns):
    manifest = lance.dataset(os.path.join(ns.uri, "__manifest"))
    spec = json.loads(manifest.metadata["partition_spec_v1"])
    spec["fields"][0]["transform"] = {"type": "zorder"}
    manifest.update_metadata({"partition_spec_v1": json.dumps(spec)})
    before = fingerprint(ns.uri)
    with pytest.raises(UnknownTransformError, match="'zorder'"):
        PartitionedNamespace.open(ns.uri)
    assert fingerprint(ns.uri) == before


def test_bad_spec_at_create_leaves_nothing(tmp_path):
    with pytest.raises(SpecError, match="'nope'"):
        PartitionedNamespace.create(tmp_path / "y", SCHEMA, [PartitionField.identity("nope")])
    assert not os.path.exists(tmp_path / "y")


def test_not_a_partitioned_namespace(tmp_path):
    plain = tmp_path / "plain"
    lance.write_dataset(
        pa.table({"object_id": ["a"], "object_type": ["table"]}), plain / "__manifest"
    )
    before = fingerprint(plain)
    with pytest.raises(NotAPartitionedNamespaceError, match="no partition_spec"):
        PartitionedNamespace.open(plain)
    assert fingerprint(plain) == before


def test_missing_uri_and_empty_dir(tmp_path):
    with pytest.raises(NamespaceNotFoundError, match="no such directory"):
        PartitionedNamespace.open(tmp_path / "does-not-exist")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NamespaceNotFoundError, match="no partitioned namespace here"):
        PartitionedNamespace.open(tmp_path / "empty")
    assert os.listdir(tmp_path / "empty") == []


def test_create_over_existing_namespace_refused(ns):
    before = fingerprint(ns.uri)
    with pytest.raises(NamespaceExistsError):
        PartitionedNamespace.create(ns.uri, SCHEMA, [PartitionField.identity("country")])
    assert fingerprint(ns.uri) == before


def test_unknown_version_and_mode_and_filter(ns):
    before = fingerprint(ns.uri)
    with pytest.raises(Exception, match="no manifest version 999"):
        PartitionedNamespace.open(ns.uri, version=999)
    with pytest.raises(WriteError, match="unknown write mode 'upsert'"):
        ns.write(sample_table(), mode="upsert")
    with pytest.raises(FilterError, match="invalid filter"):
        ns.to_table(filter="no_such_column = 1")
    with pytest.raises(FilterError, match="unknown filter operator"):
        ns.to_table(filter=[("country", "~", "x")])
    with pytest.raises(Exception, match=r"\['nope'\] not in the namespace schema"):
        ns.to_table(columns=["nope"])
    assert fingerprint(ns.uri) == before
