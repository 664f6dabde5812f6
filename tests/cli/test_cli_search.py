"""The command line's index and search subcommands on real namespaces in temporary
directories: ``indexes`` (declarations and coverage), ``search`` (vectors from JSON, files and
stdin, text, filters, parameters), ``create-index``, ``drop-index`` and ``optimize-indexes``;
their text and JSON output, exit codes and error messages, in-process and through the installed
console script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.cli import run, run_json
from helpers.search import DIM, brute_force, index_map, make_ns, make_rows

from dagster_lance_partitioned import PartitionedNamespace

ROWS = make_rows(3000)
QUERY = np.random.default_rng(7).normal(size=DIM).astype(np.float32)
MIN_ROWS = 200  # of the vector index: about half the partitions (50 to 500 rows) carry it
BIN_DIR = Path(sys.executable).parent


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one error line of a failing command: exit 1, nothing on stdout, no traceback."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (1, ""), (code, out, err)
    assert err.startswith("lance-partitioned: error: "), err
    assert "Traceback" not in err
    return err.strip()


def vector_arg(q: np.ndarray) -> str:
    """A query vector as ``--vector`` takes it."""
    return json.dumps([float(x) for x in q])


def table_rows(out: str) -> list[list[str]]:
    """The header and rows of the aligned table in ``out`` (cells split at two or more
    spaces; the dashes and the lines around the table, which have no such gaps, dropped)."""
    lines = out.splitlines()
    dashes = next(i for i, line in enumerate(lines) if line and set(line) <= {"-", " "})
    header = re.split(r"\s{2,}", lines[dashes - 1].strip())
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[dashes + 1 :]]
    return [header, *(r for r in rows if len(r) == len(header))]


def declare_all(ns: PartitionedNamespace) -> PartitionedNamespace:
    """``ns`` with a vector, a full-text and a bitmap index declared."""
    ns.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)
    ns.create_index("txt", "FTS")
    ns.create_index("tenant", "BITMAP")
    return PartitionedNamespace.open(ns.uri)


@pytest.fixture(scope="module")
def searchable(tmp_path_factory: pytest.TempPathFactory) -> PartitionedNamespace:
    """3,000 rows in 12 partitions (tenant x day), with three declared indexes; read only."""
    return declare_all(make_ns(tmp_path_factory.mktemp("search") / "ns", ROWS))


@pytest.fixture
def fresh(tmp_path: Path) -> PartitionedNamespace:
    """The same rows without any index, for the commands that change a namespace."""
    return make_ns(tmp_path / "ns", ROWS)


# -- indexes ----------------------------------------------------------------------------------
def test_indexes_text_lists_each_index_with_its_coverage(capsys, searchable):
    code, out, err = run(capsys, "indexes", searchable.uri)
    assert code == 0, err
    rows = table_rows(out)
    assert rows[0] == [
        "name",
        "column",
        "type",
        "indexed",
        "needing",
        "flat",
        "total",
        "unindexed rows",
        "min_rows",
        "params",
    ]
    by_name = {r[0]: r for r in rows[1:]}
    assert set(by_name) == {"tenant_bitmap", "txt_inverted", "v_ivf_flat"}
    api = {c.name: c for c in searchable.indexes()}
    vec = api["v_ivf_flat"]
    assert 0 < vec.partitions_indexed < 12 and vec.partitions_flat == 12 - vec.partitions_indexed
    assert by_name["v_ivf_flat"] == [
        "v_ivf_flat",
        "v",
        "IVF_FLAT",
        str(vec.partitions_indexed),
        "0",
        str(vec.partitions_flat),
        "12",
        "0",
        str(MIN_ROWS),
        '{"num_partitions": 2}',
    ]
    assert by_name["txt_inverted"][1:9] == ["txt", "INVERTED", "12", "0", "0", "12", "0", "1"]
    assert by_name["tenant_bitmap"][-1] == "-"  # no parameters
    assert out.splitlines()[-1] == (
        f"3 indexes over 12 partitions (manifest version {searchable.version}); flat: below "
        "min_rows, searched exhaustively"
    )


def test_indexes_json_equals_the_api(capsys, searchable):
    doc = run_json(capsys, "indexes", searchable.uri)
    assert doc["uri"] == searchable.uri
    assert doc["manifest_version"] == searchable.version
    assert doc["filter"] is None
    expected = [{**c.to_dict(), "complete": True} for c in searchable.indexes()]
    assert doc["indexes"] == expected
    assert [i["name"] for i in doc["indexes"]] == ["tenant_bitmap", "txt_inverted", "v_ivf_flat"]


def test_indexes_filter_and_name_narrow_the_coverage(capsys, searchable):
    doc = run_json(
        capsys, "indexes", searchable.uri, "--filter", "tenant = 'a'", "--name", "txt_inverted"
    )
    assert doc["filter"] == "tenant = 'a'"
    [only] = doc["indexes"]
    assert only["name"] == "txt_inverted"
    assert only["partitions_total"] == only["partitions_indexed"] == 3  # tenant a: 3 days
    assert only["indexed_rows"] == int(pc.sum(pc.equal(ROWS["tenant"], "a")).as_py())
    code, out, _ = run(capsys, "indexes", searchable.uri, "--filter", "tenant = 'a'")
    assert code == 0
    assert out.splitlines()[-1].startswith(
        "3 indexes over 3 partitions selected by filter: tenant = 'a'"
    )
    err = error_of(capsys, "indexes", searchable.uri, "--name", "nope")
    assert "no index named 'nope' is declared" in err
    assert "tenant_bitmap, txt_inverted, v_ivf_flat" in err


def test_indexes_of_a_namespace_without_any(capsys, fresh):
    code, out, _ = run(capsys, "indexes", fresh.uri)
    assert code == 0
    assert out == (
        f"{fresh.uri}: no index is declared (declare one with `lance-partitioned create-index "
        "URI COLUMN TYPE`)\n"
    )
    assert run_json(capsys, "indexes", fresh.uri)["indexes"] == []


# -- search: vectors --------------------------------------------------------------------------
def test_search_vector_json_equals_brute_force(capsys, searchable):
    # IVF_FLAT probing both of its IVF partitions, and flat tables: exact
    rows = run_json(
        capsys, "search", searchable.uri, "--vector", vector_arg(QUERY), "-k", "7", "--nprobes", "2"
    )
    ids, dist = brute_force(ROWS, QUERY, 7)
    assert [r["id"] for r in rows] == ids
    np.testing.assert_allclose([r["_distance"] for r in rows], dist, rtol=1e-4, atol=1e-4)
    assert list(rows[0]) == [*ROWS.column_names, "_distance"]  # every column, then the distance
    assert len(rows[0]["v"]) == DIM
    # float32 values as their shortest decimals: they read back as the stored float32 values
    stored = ROWS.filter(pc.equal(ROWS["id"], ids[0]))["v"][0].values.to_numpy()
    assert np.array_equal(np.asarray(rows[0]["v"], dtype=np.float32), stored)


def test_search_probes_routes_like_the_api(capsys, searchable):
    # one cluster over all the indexed tables (the flat ones are searched in full)
    argv = ["search", searchable.uri, "--vector", vector_arg(QUERY), "-k", "7", "--columns", "id"]
    rows = run_json(capsys, *argv, "--probes", "1")
    api = searchable.search(QUERY, k=7, columns=["id"], probes=1)
    assert [r["id"] for r in rows] == api.column("id").to_pylist()
    assert rows != run_json(capsys, *argv, "--probes", "2")  # the option reaches the search
    every = run_json(capsys, *argv, "--probes", "1000")
    assert [r["id"] for r in every] == brute_force(ROWS, QUERY, 7)[0]
    err = error_of(capsys, *argv, "--probes", "4", "--nprobes", "2")
    assert "probes" in err and "nprobes" in err and "exclude each other" in err


def test_search_vector_text_output(capsys, searchable):
    code, out, err = run(
        capsys,
        "search",
        searchable.uri,
        "--vector",
        vector_arg(QUERY),
        "-k",
        "3",
        "--columns",
        "id,tenant",
        "--nprobes",
        "2",
    )
    assert code == 0, err
    rows = table_rows(out)
    assert rows[0] == ["id", "tenant", "_distance"]
    ids, dist = brute_force(ROWS, QUERY, 3)
    assert [int(r[0]) for r in rows[1:]] == ids
    assert [float(r[2]) for r in rows[1:]] == pytest.approx(dist.tolist(), rel=1e-4)
    assert out.splitlines()[-1] == (
        "3 rows nearest to the vector on column v (_distance: squared L2 distance), nearest "
        "first (12 of 12 partitions searched)"
    )


def test_search_filter_prunes_partitions_and_filters_inside_them(capsys, searchable):
    flt = "tenant = 'b' AND n < 500"
    argv = ["search", searchable.uri, "--vector", vector_arg(QUERY), "-k", "5", "--filter", flt]
    rows = run_json(capsys, *argv, "--nprobes", "2")
    keep = pc.and_(pc.equal(ROWS["tenant"], "b"), pc.less(ROWS["n"], 500))
    ids, _ = brute_force(ROWS.filter(keep), QUERY, 5)
    assert [r["id"] for r in rows] == ids
    assert all(r["tenant"] == "b" and r["n"] < 500 for r in rows)
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert out.splitlines()[-1].endswith("(3 of 12 partitions searched)")


def test_search_says_when_fewer_than_k_rows_match(capsys, searchable):
    three = ROWS["id"].to_pylist()[:3]
    flt = f"id IN ({', '.join(map(str, three))})"
    argv = ["search", searchable.uri, "--vector", vector_arg(QUERY), "--filter", flt]
    assert sorted(r["id"] for r in run_json(capsys, *argv)) == sorted(three)
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert out.splitlines()[-1].startswith("3 rows nearest to the vector on column v")
    assert "fewer than k = 10: no more rows match" in out.splitlines()[-1]


def test_search_vector_files_json_npy_and_stdin(capsys, searchable, tmp_path, monkeypatch):
    base = ["search", searchable.uri, "-k", "4", "--columns", "id", "--nprobes", "2"]
    expected = run_json(capsys, *base, "--vector", vector_arg(QUERY))
    assert [r["id"] for r in expected] == brute_force(ROWS, QUERY, 4)[0]
    as_json = tmp_path / "q.json"
    as_json.write_text(vector_arg(QUERY))
    as_npy, as_row, as_f64 = tmp_path / "q.npy", tmp_path / "row.NPY", tmp_path / "q64.npy"
    np.save(as_npy, QUERY)
    with as_row.open("wb") as f:  # (np.save would append .npy to this name)
        np.save(f, QUERY.reshape(1, DIM))  # one row of a matrix: that vector
    np.save(as_f64, QUERY.astype(np.float64))
    for path in (as_json, as_npy, as_row, as_f64):
        assert run_json(capsys, *base, "--vector-file", str(path)) == expected, path
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO(vector_arg(QUERY)))
    assert run_json(capsys, *base, "--vector-file", "-") == expected


def test_search_parameters_pass_through(capsys, searchable):
    base = ["search", searchable.uri, "--vector", vector_arg(QUERY), "-k", "5", "--columns", "id"]
    cosine = run_json(capsys, *base, "--metric", "cosine", "--no-index")
    ids, dist = brute_force(ROWS, QUERY, 5, metric="cosine")
    assert [r["id"] for r in cosine] == ids
    np.testing.assert_allclose([r["_distance"] for r in cosine], dist, rtol=1e-4, atol=1e-5)
    code, out, _ = run(capsys, *base, "--metric", "cosine", "--no-index")
    assert code == 0 and "(_distance: 1 - cosine similarity)" in out.splitlines()[-1]
    exact = run_json(capsys, *base, "--param", "use_index=false", "--refine-factor", "3")
    assert [r["id"] for r in exact] == brute_force(ROWS, QUERY, 5)[0]
    # parameters reach Lance: one the core does not know is refused by name
    err = error_of(capsys, *base, "--param", "nprobs=3")
    assert "unknown vector search parameter(s) ['nprobs']" in err
    err = error_of(capsys, *base, "--nprobes", "2", "--param", "nprobes=3")
    assert "--param nprobes=3 contradicts nprobes = 2" in err


# -- search: text -----------------------------------------------------------------------------
def test_search_text_equals_the_api(capsys, searchable):
    query = "t1x t7x"
    rows = run_json(capsys, "search", searchable.uri, "--text", query, "-k", "6")
    api = searchable.search(query, k=6)
    np.testing.assert_allclose([r["_score"] for r in rows], api["_score"].to_numpy(), rtol=1e-6)
    # the same rows up to ties (scores equal to float32 precision: the first search of a
    # table is scored by Lance, later ones from its terms held in memory)
    cli = tie_groups([r["id"] for r in rows], [r["_score"] for r in rows])
    same = tie_groups(api["id"].to_pylist(), api["_score"].to_pylist())
    assert len(cli) == len(same)
    assert cli[:-1] == same[:-1]  # the last group may be cut at k differently
    assert list(rows[0])[-1] == "_score"
    scores = [r["_score"] for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert all("t1x" in r["txt"].split() or "t7x" in r["txt"].split() for r in rows)
    code, out, _ = run(
        capsys, "search", searchable.uri, "--text", query, "-k", "6", "--columns", "id,txt"
    )
    assert code == 0
    assert table_rows(out)[0] == ["id", "txt", "_score"]
    assert out.splitlines()[-1] == (
        "6 rows matching the text on column txt (_score: BM25), best first (12 of 12 "
        "partitions searched)"
    )


def tie_groups(ids: list[int], scores: list[float]) -> list[set[int]]:
    """``ids`` (best first) grouped by score, scores within float32 rounding tied."""
    groups: list[tuple[float, set[int]]] = []
    for i, score in zip(ids, scores, strict=True):
        if groups and abs(groups[-1][0] - score) <= 1e-6 * abs(score):
            groups[-1][1].add(i)
        else:
            groups.append((score, {i}))
    return [g for _, g in groups]


# -- search: errors ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--vector", "[1, 2]"], ["column 'v' holds vectors of dimension 16", "shape (2,)"]),
        (["--vector", "[1, x]"], ["--vector: not JSON", "line 1 column 5"]),
        (["--vector", '{"v": [1]}'], ["--vector: expected a JSON array of numbers", "object"]),
        (["--vector", "[]"], ["--vector: the vector is empty"]),
        (["--vector", '[1, "2"]'], ['--vector: element 1 is "2", not a number']),
        (["--vector", "[1, true]"], ["--vector: element 1 is true, not a number"]),
        (["--vector", "[NaN" + ", 1" * (DIM - 1) + "]"], ["must hold finite numbers"]),
        (["--vector", "[1]", "--column", "nope"], ["no column 'nope'", "columns: id, tenant"]),
        (["--vector", "[1]", "--column", "tenant"], ["column 'tenant' is string", "not a vector"]),
        (["--vector", vector_arg(QUERY), "--filter", "bogus > 1"], ["invalid filter 'bogus > 1'"]),
        (
            ["--text", "t1x", "--nprobes", "2"],
            ["full-text search takes no parameters, got ['nprobes']"],
        ),
        (["--text", "t1x", "--column", "tenant"], ["full-text (INVERTED) index on 'tenant'"]),
        (["--text", "  "], ["--text: the query is empty"]),
    ],
)
def test_search_errors_name_what_is_wrong(capsys, searchable, argv, fragments):
    err = error_of(capsys, "search", searchable.uri, *argv)
    for fragment in fragments:
        assert fragment in err


def test_search_file_errors_name_the_file(capsys, searchable, tmp_path):
    matrix, words, text, bad = (tmp_path / n for n in ("m.npy", "w.npy", "q.txt", "bad.npy"))
    np.save(matrix, np.zeros((2, DIM)))
    np.save(words, np.array(["a", "b"]))
    text.write_text("[1, 2]")
    bad.write_text("not numpy")
    broken = tmp_path / "broken.json"
    broken.write_text("[1, 2")
    cases = [
        (tmp_path / "absent.npy", "no such file"),
        (matrix, "holds an array of shape (2, 16); a query is one vector"),
        (words, "holds <U1 values; a vector holds numbers"),
        (text, "expected a .json file (an array of numbers) or a .npy file"),
        (bad, "not a NumPy .npy array"),
        (broken, "not JSON"),
    ]
    for path, fragment in cases:
        err = error_of(capsys, "search", searchable.uri, "--vector-file", str(path))
        assert f"--vector-file {path}: " in err and fragment in err, err


def test_search_usage_errors_exit_2(capsys, searchable):
    for argv in (
        ["search", searchable.uri],  # no query
        ["search", searchable.uri, "--vector", "[1]", "--text", "a"],  # two queries
        ["search", searchable.uri, "--text", "a", "-k", "0"],
    ):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, ""), argv
        assert "usage: lance-partitioned search" in err and "Traceback" not in err


@pytest.mark.parametrize("option", ["-k", "--probes", "--nprobes", "--refine-factor", "--ef"])
def test_counts_below_one_say_they_take_a_positive_integer(capsys, searchable, option):
    """-5 and 0 get the same, correct, message (-5 was told ">= 0", 0 ">= 1")."""
    for given, shown in (("-5", "-5"), ("0", "0"), ("abc", "'abc'"), ("2.5", "'2.5'")):
        argv = ["search", searchable.uri, "--vector", vector_arg(QUERY), option, given]
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, ""), argv
        assert f"argument {option}: expected a positive integer, got {shown}\n" in err, err


@pytest.mark.parametrize(
    ("param", "says"),
    [
        (
            "nprobes=abc",
            "nprobes must be a positive integer (IVF clusters probed in every "
            "partition), got 'abc'",
        ),
        ("minimum_nprobes=0", "minimum_nprobes must be a positive integer"),
        ("maximum_nprobes=-1", "maximum_nprobes must be a positive integer"),
        ("refine_factor=1.5", "refine_factor must be a positive integer"),
        ("ef=0", "ef must be a positive integer (HNSW search breadth), got 0"),
        ("ef=3", "ef (HNSW search breadth) must be at least k = 10, got 3"),
        ("use_index=yes", "use_index must be True or False, got 'yes'"),
        ("metric=3", "metric must be one of l2, cosine, dot, got 3"),
    ],
)
def test_param_values_are_checked_naming_the_parameter(capsys, searchable, param, says):
    err = error_of(
        capsys, "search", searchable.uri, "--vector", vector_arg(QUERY), "--param", param
    )
    assert says in err
    assert "int()" not in err and "invalid literal" not in err and ".rs:" not in err


def test_probe_bounds_that_contradict_are_refused(capsys, searchable):
    base = ["search", searchable.uri, "--vector", vector_arg(QUERY)]
    err = error_of(capsys, *base, "--param", "minimum_nprobes=5", "--param", "maximum_nprobes=2")
    assert "minimum_nprobes (5) exceeds maximum_nprobes (2)" in err
    err = error_of(capsys, *base, "--nprobes", "3", "--param", "maximum_nprobes=2")
    assert "nprobes sets both minimum_nprobes and maximum_nprobes" in err
    err = error_of(capsys, *base, "--probes", "3", "--no-index")
    assert "probes (IVF clusters probed) and use_index=False" in err


def test_a_k_beyond_every_row_prints_the_rows_that_match(capsys, searchable):
    huge = "99999999999999999999"  # more than 64 bits
    argv = ["search", searchable.uri, "--vector", vector_arg(QUERY), "-k", huge]
    kept = ROWS.filter(pc.equal(ROWS["tenant"], "a"))  # indexed partitions (> MIN_ROWS)
    rows = run_json(capsys, *argv, "--filter", "tenant = 'a'", "--columns", "id")
    assert [r["id"] for r in rows] == brute_force(kept, QUERY, kept.num_rows)[0]
    code, out, err = run(capsys, *argv, "--filter", "tenant = 'a'", "--columns", "id")
    assert code == 0 and "Traceback" not in err
    assert out.splitlines()[-1].startswith(f"{kept.num_rows} rows nearest to the vector")
    assert f"fewer than k = {huge}: no more rows match" in out.splitlines()[-1]
    rows = run_json(capsys, "search", searchable.uri, "--text", "t3x", "-k", huge)
    assert len(rows) == sum("t3x" in d.split() for d in ROWS["txt"].to_pylist())


def test_a_zero_vector_with_cosine_is_refused(capsys, searchable):
    zero = json.dumps([0] * DIM)
    for extra in ([], ["--filter", "tenant = 'a'"], ["--no-index"], ["--nprobes", "2"]):
        err = error_of(
            capsys, "search", searchable.uri, "--vector", zero, "--metric", "cosine", *extra
        )
        assert "a zero vector has no direction: its cosine distance to the vectors of 'v'" in err
    rows = run_json(capsys, "search", searchable.uri, "--vector", zero, "--metric", "l2", "-k", "3")
    assert len(rows) == 3


def test_search_reads_an_older_manifest_version_with_as_of(capsys, fresh):
    before = fresh.version
    target = np.full(DIM, 9.0, dtype=np.float32)  # far from every existing vector
    extra = make_rows(1, seed=3, start=77_000, tenants=("a",), weights=None)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(target), DIM)
    fresh.write(extra.set_column(extra.schema.get_field_index("v"), "v", vectors), "append")
    base = ["search", fresh.uri, "--vector", vector_arg(target), "-k", "1", "--columns", "id"]
    assert run_json(capsys, *base) == [{"id": 77_000, "_distance": 0.0}]
    [old] = run_json(capsys, *base, "--as-of", str(before))
    assert old["id"] != 77_000 and old["_distance"] > 0


# -- create-index / drop-index / optimize-indexes ---------------------------------------------
def test_create_index_builds_it_on_every_table_then_drop_index_removes_it(capsys, fresh):
    code, out, err = run(capsys, "create-index", fresh.uri, "txt", "FTS")
    assert code == 0, err
    fresh.refresh()
    assert out.splitlines()[0] == (
        f"index txt_inverted (INVERTED on txt) declared; 12 partitions indexed, manifest "
        f"version {fresh.version}"
    )
    assert table_rows("\n".join(out.splitlines()[1:]))[1][:7] == [
        "txt_inverted",
        "txt",
        "INVERTED",
        "12",
        "0",
        "0",
        "12",
    ]
    tables = index_map(fresh)
    assert all("txt_inverted" in found for _, found in tables.values())
    rows = run_json(capsys, "search", fresh.uri, "--text", "t3x", "-k", "2", "--columns", "id")
    assert len(rows) == 2 and rows[0]["_score"] >= rows[1]["_score"] > 0

    code, out, err = run(capsys, "drop-index", fresh.uri, "txt_inverted")
    assert code == 0, err
    fresh.refresh()
    assert out == (
        "index txt_inverted dropped: declaration removed, 12 partition tables rewritten "
        f"without it, manifest version {fresh.version}\n"
    )
    assert fresh.indexes() == []
    assert all("txt_inverted" not in found for _, found in index_map(fresh).values())
    err = error_of(capsys, "search", fresh.uri, "--text", "t3x")
    assert "a text query needs a full-text (INVERTED) index; none is declared" in err


def test_create_index_json_with_parameters(capsys, fresh):
    doc = run_json(
        capsys,
        "create-index",
        fresh.uri,
        "v",
        "IVF_PQ",
        "--name",
        "vec",
        "--min-rows",
        "256",
        "--metric",
        "cosine",
        "--param",
        "num_sub_vectors=4",
    )
    fresh.refresh()
    assert doc["uri"] == fresh.uri and doc["manifest_version"] == fresh.version
    index = doc["index"]
    assert (index["name"], index["column"], index["index_type"]) == ("vec", "v", "IVF_PQ")
    assert index["params"] == {"metric": "cosine", "num_sub_vectors": 4}
    assert index["min_rows"] == 256 and index["complete"] is True
    tables = index_map(fresh)
    big = {oid for oid, (rows, _) in tables.items() if rows >= 256}
    assert big and index["partitions_indexed"] == len(big)
    assert {oid for oid, (_, found) in tables.items() if "vec" in found} == big
    assert fresh.indexes()[0].to_dict() == {k: v for k, v in index.items() if k != "complete"}


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["v", "HNSW"], ["unknown index type 'HNSW'", "IVF_PQ"]),
        (["nope", "BTREE"], ["no column 'nope' in the namespace schema"]),
        (["tenant", "IVF_PQ"], ["column 'tenant' is string", "fixed-size list of floats"]),
        (["n", "BTREE", "--metric", "l2"], ["--metric applies to vector indexes", "not to BTREE"]),
        (["v", "IVF_PQ", "--metric", "manhattan"], ["metric 'manhattan'", "l2, cosine, dot"]),
        (["v", "IVF_PQ", "--param", "min_rows=3"], ["--param min_rows=...: give it as --min-rows"]),
        (["n", "BTREE", "--name", "bad name"], ["index name 'bad name'"]),
    ],
)
def test_create_index_errors_change_nothing(capsys, fresh, argv, fragments):
    version = fresh.version
    err = error_of(capsys, "create-index", fresh.uri, *argv)
    for fragment in fragments:
        assert fragment in err
    fresh.refresh()
    assert fresh.version == version and fresh.indexes() == []


def test_a_taken_index_name_and_an_unknown_one(capsys, fresh):
    assert run(capsys, "create-index", fresh.uri, "n", "BTREE", "--name", "by_n")[0] == 0
    fresh.refresh()
    version = fresh.version
    err = error_of(capsys, "create-index", fresh.uri, "tenant", "BITMAP", "--name", "by_n")
    assert "index 'by_n' is already declared as" in err and "drop it first" in err
    err = error_of(capsys, "drop-index", fresh.uri, "by_tenant")
    assert "no index named 'by_tenant' is declared (declared: by_n)" in err
    fresh.refresh()
    assert fresh.version == version


def test_commands_that_change_a_namespace_refuse_as_of(capsys, fresh):
    for argv in (
        ["create-index", fresh.uri, "n", "BTREE"],
        ["drop-index", fresh.uri, "n_btree"],
        ["optimize-indexes", fresh.uri],
    ):
        code, out, err = run(capsys, *argv, "--as-of", "1")
        assert (code, out) == (2, "")
        assert f"--as-of selects a manifest version to read; {argv[0]} cannot use it" in err


def test_optimize_indexes_folds_appended_rows(capsys, fresh):
    code, out, _ = run(capsys, "optimize-indexes", fresh.uri)
    assert (code, out) == (0, f"{fresh.uri}: no index is declared, nothing to optimize\n")
    declare_all(fresh)
    fresh.refresh()
    code, out, _ = run(capsys, "optimize-indexes", fresh.uri)
    assert (code, out) == (
        0,
        f"{fresh.uri}: every index is up to date, nothing to optimize (manifest version "
        f"{fresh.version})\n",
    )
    more = make_rows(300, seed=5, start=50_000, tenants=("a",), weights=None)
    fresh.write(more, "append")
    doc = run_json(capsys, "indexes", fresh.uri)
    assert {i["name"]: i["unindexed_rows"] for i in doc["indexes"]} == {
        "tenant_bitmap": 300,
        "txt_inverted": 300,
        "v_ivf_flat": 300,  # tenant a's tables are all above min_rows
    }
    code, out, _ = run(capsys, "indexes", fresh.uri, "--name", "v_ivf_flat")
    assert table_rows(out)[1][7] == "300"
    done = run_json(capsys, "optimize-indexes", fresh.uri, "--filter", "tenant = 'a'")
    fresh.refresh()
    a_tables = {p["object_id"] for p in fresh.inspect.partitions() if p["values"]["tenant"] == "a"}
    assert set(done["partitions"]) == a_tables and done["skipped"] == []
    assert done["manifest_version"] == fresh.version
    assert all(i["unindexed_rows"] == 0 for i in run_json(capsys, "indexes", fresh.uri)["indexes"])


def test_optimize_indexes_builds_the_partitions_needing_an_index(capsys, fresh, before_commit):
    declarer = PartitionedNamespace.open(fresh.uri)
    more = make_rows(900, seed=68, start=90_000, tenants=("e",), weights=None)

    def declare(_pending: Any) -> None:
        # the declaration lands after this write planned, before its manifest commit: the
        # write's new tables (tenant e) lack the index
        declarer.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)

    before_commit(fresh, declare)
    try:
        fresh.write(more)
    finally:
        before_commit(fresh, None)
    needing = sorted(
        p["object_id"] for p in fresh.inspect.partitions() if p["values"]["tenant"] == "e"
    )
    assert len(needing) == 3
    [index] = run_json(capsys, "indexes", fresh.uri)["indexes"]
    assert index["needing"] == needing and index["partitions_needing"] == 3
    assert index["complete"] is False and index["unindexed_rows"] == 900
    assert index["status"] == "pending" and "3 partition(s) not built yet" in index["hint"]
    code, out, _ = run(capsys, "indexes", fresh.uri, "--max-width", "0")
    assert code == 0
    assert table_rows(out)[1][4] == "3"  # needing
    assert (
        "v_ivf_flat: pending, not built yet on 3 partitions (searched exhaustively meanwhile; "
        "`lance-partitioned optimize-indexes`, or a write to them, builds it): "
        + ", ".join(needing)
    ) in out.splitlines()
    code, out, _ = run(capsys, "optimize-indexes", fresh.uri, "--max-width", "0")
    assert code == 0
    fresh.refresh()
    assert out.splitlines()[0] == (
        f"optimized the indexes of 3 partitions in manifest version {fresh.version}: "
        + ", ".join(needing)
    )
    [index] = run_json(capsys, "indexes", fresh.uri)["indexes"]
    assert (index["partitions_needing"], index["unindexed_rows"]) == (0, 0)
    assert all("v_ivf_flat" in index_map(fresh)[oid][1] for oid in needing)


# -- the installed console script -------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def test_console_script_searches_and_reports_errors(searchable):
    script = BIN_DIR / "lance-partitioned"
    assert script.exists(), f"{script}: console script not installed (pip install -e .)"
    done = subprocess.run(
        [str(script), "search", searchable.uri, "--vector-file", "-", "-k", "2", "--json"],
        input=vector_arg(QUERY),
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["id"] for r in rows] == brute_force(ROWS, QUERY, 2)[0]
    done = subprocess.run(
        [str(script), "indexes", searchable.uri, "--json"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["indexes"]) == 3
    done = subprocess.run(
        [str(script), "search", searchable.uri, "--vector", "[0.5, 1]"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "lance-partitioned: error: column 'v' holds vectors of dimension 16; the query has "
        "shape (2,)\n"
    )


def test_a_text_search_without_a_full_text_index_names_the_cli_command(capsys, fresh):
    """The error of ``search --text`` names ``lance-partitioned create-index``, not the
    Python call."""
    err = error_of(capsys, "search", fresh.uri, "--text", "t3x")
    assert err.endswith(
        "a text query needs a full-text (INVERTED) index; none is declared: declare one with "
        f"`lance-partitioned create-index {fresh.uri} COLUMN INVERTED`"
    ), err
    err = error_of(capsys, "search", fresh.uri, "--text", "t3x", "--column", "txt")
    assert err.endswith(
        "a text query needs a full-text (INVERTED) index on 'txt': declare one with "
        f"`lance-partitioned create-index {fresh.uri} txt INVERTED`"
    ), err
    assert "ns.create_index" not in err
