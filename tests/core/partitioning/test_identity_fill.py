"""The source columns of identity partition fields are filled with their one value per
partition instead of gathered row by row (``spec/partitioner.py``): the stored rows are exactly
the rows written, for every type that is filled, for NULL partitions, and for floats, which
are gathered (0.0 and -0.0 fall in one partition but are different values)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.partitioning.partitioner import Rows

N = 600

VALUES: dict[str, tuple[pa.DataType, list[object]]] = {
    "string": (pa.string(), ["a", "b", None, "a\u00e9", ""]),
    "large_string": (pa.large_string(), ["x", "y", None]),
    "int64": (pa.int64(), [0, -1, 2**40, None]),
    "int8": (pa.int8(), [1, -128, None]),
    "date32": (pa.date32(), [dt.date(2024, 1, 1), dt.date(1970, 1, 1), None]),
    "timestamp_tz": (
        pa.timestamp("us", tz="UTC"),
        [dt.datetime(2024, 1, 1, 3, tzinfo=dt.UTC), None, dt.datetime(2001, 5, 2, tzinfo=dt.UTC)],
    ),
    "bool": (pa.bool_(), [True, False, None]),
    "float64": (pa.float64(), [0.0, -0.0, 1.5, None, float("nan")]),
}


def _rows(kind: pa.DataType, values: list[object], seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    picked = [values[i] for i in rng.integers(0, len(values), N)]
    return pa.table(
        {
            "id": pa.array(range(N), pa.int64()),
            "key": pa.array(picked, kind),
            "payload": pa.array([f"p{i}" for i in range(N)]),
        }
    )


def _same(a: pa.Array, b: pa.Array) -> bool:
    """Equal values, NULLs in the same rows, floats compared bit for bit."""
    if pa.types.is_floating(a.type):
        na = a.to_numpy(zero_copy_only=False)
        nb = b.to_numpy(zero_copy_only=False)
        valid = pc.is_valid(a).to_numpy(zero_copy_only=False)
        return bool(
            np.array_equal(valid, pc.is_valid(b).to_numpy(zero_copy_only=False))
            and np.array_equal(na[valid].view(np.uint64), nb[valid].view(np.uint64))
        )
    return a.equals(b)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_identity_columns_are_stored_exactly(tmp_path, name):
    kind, values = VALUES[name]
    rows = _rows(kind, values)
    ns = PartitionedNamespace.create(tmp_path / "ns", rows.schema, [PartitionField.identity("key")])
    ns.write(rows)
    ns.write(_rows(kind, values, seed=1).set_column(0, "id", pa.array(range(N, 2 * N))))
    stored = ns.to_table().sort_by("id")
    both = pa.concat_tables(
        [rows, _rows(kind, values, seed=1).set_column(0, "id", pa.array(range(N, 2 * N)))]
    )
    assert stored.column("id").to_pylist() == list(range(2 * N))
    assert _same(stored.column("key").combine_chunks(), both.column("key").combine_chunks())
    assert stored.column("payload").equals(both.column("payload"))


def test_filled_rows_equal_gathered_rows():
    rng = np.random.default_rng(3)
    batch = pa.record_batch(
        {
            "k": pa.array(["v"] * 50 + [None] * 50),
            "n": pa.array(rng.integers(0, 9, 100)),
            "d": pa.array([dt.date(2024, 2, 2)] * 100, pa.date32()),
        }
    )
    for indices in (np.arange(0, 50), np.arange(50, 100), np.array([3, 7, 8])):
        filled = Rows(batch, indices, (0, 2)).materialize()
        assert filled.equals(batch.take(pa.array(indices)))
        assert filled.schema == batch.schema


@pytest.fixture(params=["small manifest", "queried manifest"])
def manifest_path(request, tune):
    """Both ways a write finds a partition's table: the manifest read whole, or queried."""

    if request.param == "queried manifest":
        tune(small_manifest_rows=0)
    return request.param


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ([0.0, float("nan"), 1.0, float("nan")], [float("nan"), 0.0]),
        ([0.0, -0.0, 1.0], [-0.0, 0.0]),
    ],
)
def test_appending_to_nan_and_signed_zero_partitions_keeps_their_rows(
    tmp_path, manifest_path, first, then
):
    # a NaN key equals only itself and -0.0 equals 0.0: the partition's table must still be
    # found, not replaced by a new one (the rows written before were lost that way)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("key", pa.float64())])
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, [PartitionField.identity("key")])
    ns.write(pa.table({"id": range(len(first)), "key": first}, schema=schema))
    tables = len(ns.plan_scan().tasks)
    ns.write(pa.table({"id": range(100, 100 + len(then)), "key": then}, schema=schema))
    stored = ns.to_table().sort_by("id")
    assert stored.column("id").to_pylist() == [*range(len(first)), *range(100, 100 + len(then))]
    written = pa.concat_arrays([pa.array(first, pa.float64()), pa.array(then, pa.float64())])
    assert _same(stored.column("key").combine_chunks(), written)
    assert len(ns.plan_scan().tasks) == tables  # no partition got a second table
