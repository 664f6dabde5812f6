"""Index builds as Spark tasks (``build_indexes``): declared and built on every partition,
registered by the driver in one manifest commit, errors raised in tasks with their own class."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import IndexBuildError, IndexDeclarationError
from dagster_lance_partitioned.spark import build_indexes

DIM = 8


def _table(rows: int, tenants: list[str], seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((rows, DIM)).astype(np.float32)
    return pa.table(
        {
            "id": np.arange(rows),
            "tenant": [tenants[i % len(tenants)] for i in range(rows)],
            "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM),
            "txt": [f"doc {i} {'apple' if i % 3 == 0 else 'pear'}" for i in range(rows)],
        }
    )


@pytest.fixture
def ns(tmp_path):
    data = _table(900, ["a", "b", "c"])
    small = _table(20, ["tiny"], seed=1).set_column(0, "id", pa.array(np.arange(900, 920)))
    ns = PartitionedNamespace.create(
        str(tmp_path / "ns"), data.schema, [PartitionField.identity("tenant")]
    )
    ns.write(pa.concat_tables([data, small]))
    return ns


def _indexes_of(ns: PartitionedNamespace) -> dict[str, set[str]]:
    out = {}
    for task in ns.plan_scan().tasks:
        ds = lance.dataset(task.uri, version=task.read_version)
        out[task.constants["tenant"]] = {d.name for d in ds.describe_indices()}
    return out


def test_build_indexes_in_spark_tasks_one_commit_per_declaration(spark, ns):
    before = ns.version
    found = build_indexes(
        spark,
        ns.uri,
        [
            {"column": "v", "index_type": "IVF_FLAT", "min_rows": 100, "num_partitions": 2},
            {"column": "txt", "index_type": "FTS"},
        ],
    )
    ns.refresh()
    # per declaration: the declaration, then every table's indexed version in one commit
    assert ns.version == before + 4
    by_name = {c.name: c for c in found}
    assert by_name["v_ivf_flat"].partitions_indexed == 3
    assert by_name["v_ivf_flat"].partitions_flat == 1  # "tiny" is below min_rows
    assert by_name["txt_inverted"].partitions_indexed == 4
    assert all(c.complete for c in found)
    indexes = _indexes_of(ns)
    assert indexes["a"] == {"v_ivf_flat", "txt_inverted"}
    assert indexes["tiny"] == {"txt_inverted"}
    # the search over the built indexes is exact (IVF_FLAT with every partition probed)
    table = ns.to_table()
    q = np.asarray(table.column("v")[5].as_py(), dtype=np.float32)
    got = ns.search(q, k=5, columns=["id"], nprobes=2)
    matrix = np.stack([np.asarray(v, dtype=np.float32) for v in table.column("v").to_pylist()])
    expected = table.column("id").to_numpy()[np.argsort(((matrix - q) ** 2).sum(1))[:5]]
    assert got.column("id").to_pylist() == expected.tolist()


def test_build_indexes_folds_appended_rows(spark, ns):
    build_indexes(spark, ns.uri, [{"column": "txt", "index_type": "FTS"}])
    ns.refresh().write(_table(30, ["a"], seed=3).set_column(0, "id", pa.array(range(5000, 5030))))
    assert {c.name: c.unindexed_rows for c in ns.indexes()} == {"txt_inverted": 30}
    found = build_indexes(spark, ns.uri)
    assert {c.name: c.unindexed_rows for c in found} == {"txt_inverted": 0}


def test_a_failing_build_raises_its_package_error_and_commits_nothing(spark, ns):
    before = ns.version
    with pytest.raises(IndexBuildError, match="partition"):
        # 7 sub-vectors cannot divide 8 dimensions: Lance refuses in the tasks
        build_indexes(
            spark,
            ns.uri,
            [{"column": "v", "index_type": "IVF_PQ", "min_rows": 100, "num_sub_vectors": 7}],
        )
    assert ns.refresh().version == before
    assert ns.indexes() == []


def test_a_bad_declaration_is_refused_before_any_task(spark, ns):
    before = ns.version
    with pytest.raises(IndexDeclarationError, match="'id'"):
        build_indexes(spark, ns.uri, [{"column": "id", "index_type": "FTS"}])
    assert ns.refresh().version == before


def test_a_spark_merge_indexes_the_tables_it_writes(spark, ns):
    from dagster_lance_partitioned.spark.merge import merge_dataframe

    ns.create_index("txt", "FTS")
    fresh = _table(40, ["a", "new"], seed=5).set_column(0, "id", pa.array(range(7000, 7040)))
    df = spark.createDataFrame(fresh.drop_columns(["v"]).to_pandas())
    merge_dataframe(df, ns.uri, "id")
    ns.refresh()
    assert {c.name: c.partitions_needing for c in ns.indexes()} == {"txt_inverted": 0}
    indexes = _indexes_of(ns)
    assert indexes["new"] == {"txt_inverted"}  # a partition the merge created
    assert indexes["a"] == {"txt_inverted"}
    found = ns.search("apple", k=1000, filter="id >= 7000", columns=["id"])
    assert sorted(found.column("id").to_pylist()) == [
        i for i in range(7000, 7040) if (i - 7000) % 3 == 0
    ]
