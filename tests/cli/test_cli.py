"""The ``lance-partitioned`` command line: every subcommand's text and JSON output, options,
exit codes and error messages, in-process and through the installed console script."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.cli import run, run_json
from helpers.data import SCHEMA, sample_table

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.cli import parse, parse_arrow_type
from dagster_lance_partitioned.core.manifest.layout import base_manifest_schema
from dagster_lance_partitioned.core.partitioning.windows import TimeWindow
from dagster_lance_partitioned.core.schema import arrow_json

LONG_COUNTRY = "Z" * 150
BIN_DIR = Path(sys.executable).parent


def jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON, with dates and decimals as strings."""

    def default(v: Any) -> Any:
        if isinstance(v, dt.date | dt.datetime):
            return v.isoformat()
        if isinstance(v, decimal.Decimal):
            return str(v)
        raise TypeError(type(v))

    return json.loads(json.dumps(value, default=default))


def make_ns(root: Path) -> tuple[PartitionedNamespace, int, int]:
    """identity(country) x year(event_date), two writes; returns (ns, version 1st, version 2nd)."""
    ns = PartitionedNamespace.create(
        root, SCHEMA, [PartitionField.identity("country"), PartitionField.year("event_date")]
    )
    first = ns.write(sample_table(12)).manifest_version
    extra = pa.table(
        {
            "id": [100, 101],
            "country": ["US", LONG_COUNTRY],
            "event_date": [dt.date(2025, 5, 1), dt.date(2024, 1, 2)],
            "value": [None, 1.5],
        },
        schema=SCHEMA,
    )
    second = ns.write(extra).manifest_version
    return ns, first, second


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[PartitionedNamespace, int, int]:
    return make_ns(tmp_path_factory.mktemp("cli") / "ns")


@pytest.fixture
def ns(built: tuple[PartitionedNamespace, int, int]) -> PartitionedNamespace:
    return PartitionedNamespace.open(built[0].uri)


def kv_lines(out: str) -> dict[str, str]:
    """``key  value`` lines (keys separated from values by two or more spaces)."""
    pairs = (re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines() if line)
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def assert_error(code: int, out: str, err: str, *fragments: str) -> None:
    """Exit 1, nothing on stdout, one ``lance-partitioned: error:`` message naming ``fragments``."""
    assert code == 1
    assert out == ""
    assert err.startswith("lance-partitioned: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


# -- info / specs ------------------------------------------------------------------------------
def test_info_text(capsys, ns):
    code, out, _ = run(capsys, "info", ns.uri)
    assert code == 0
    kv = kv_lines(out)
    assert kv["root"] == ns.uri
    assert kv["manifest version"] == str(ns.version)
    assert kv["current spec"] == "v1: country=identity(country), event_date_year=year(event_date)"
    assert kv["spec versions"] == "1"
    assert kv["partitions"] == "7"
    assert kv["columns"] == "4 (id, country, event_date, value)"
    assert kv["writer flag"].startswith(f"{1 << 62} = bit 62: set by dagster-lance-partitioned")


def test_info_json_matches_api(capsys, ns):
    doc = run_json(capsys, "info", ns.uri)
    assert doc["uri"] == ns.uri
    assert doc["manifest_version"] == ns.version
    assert doc["partitions"] == len(ns.inspect.partitions()) == 7
    assert doc["spec_versions"] == len(ns.specs)
    assert doc["columns"] == len(ns.schema)
    assert [c["name"] for c in doc["schema"]] == ns.schema.names
    assert [c["field_id"] for c in doc["schema"]] == [0, 1, 2, 3]
    assert doc["schema"][0]["nullable"] is False
    assert doc["current_spec"]["spec_id"] == ns.current_spec.spec_id
    assert [f["field_id"] for f in doc["current_spec"]["fields"]] == ["country", "event_date_year"]
    assert (
        doc["writer_feature_flags"] == ns.metadata["lance.namespace.manifest.writer_feature_flags"]
    )


def test_specs_text(capsys, ns):
    code, out, _ = run(capsys, "specs", ns.uri)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "spec v1 (current)"
    assert lines[1].split() == [
        "field_id",
        "sources",
        "transform",
        "result_type",
        "manifest",
        "column",
    ]
    rows = {line.split()[0]: line.split() for line in lines[3:]}
    assert rows["country"] == [
        "country",
        "country",
        "identity",
        "string",
        "partition_field_country",
    ]
    assert rows["event_date_year"] == [
        "event_date_year",
        "event_date",
        "year",
        "int32",
        "partition_field_event_date_year",
    ]


def test_specs_json_matches_api(capsys, ns):
    doc = run_json(capsys, "specs", ns.uri)
    assert doc["current_spec"] == 1
    assert [s["spec_id"] for s in doc["specs"]] == [s.spec_id for s in ns.specs]
    (spec,) = doc["specs"]
    assert spec["current"] is True and spec["draft"] is False
    for got, want in zip(spec["fields"], ns.current_spec.to_json()["fields"], strict=True):
        assert {k: got[k] for k in want} == want
    assert [f["source_columns"] for f in spec["fields"]] == [["country"], ["event_date"]]
    assert spec["fields"][1]["transform"] == {"type": "year"}


# -- partitions --------------------------------------------------------------------------------
def test_partitions_text(capsys, ns):
    code, out, _ = run(capsys, "partitions", ns.uri)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "values",
        "rows",
        "size",
        "spec",
        "read_version",
        "object_id",
        "location",
    ]
    assert lines[-1].startswith("7 partitions (14 rows, ")
    for p in ns.inspect.partitions():
        (line,) = [row for row in lines if f"  {p['object_id']}  " in row]
        assert line.rstrip().endswith(p["location"])
        if p["values"]["country"] != LONG_COUNTRY:
            country, year = p["values"]["country"], p["values"]["event_date_year"]
            assert line.startswith(f"country={country}, event_date_year={year} ")
    # the 150-character partition value is cut to the default width with an ellipsis
    assert LONG_COUNTRY not in out
    assert "country=" + "Z" * 71 + "…" in out  # 80 characters in all


def table_bytes(ns: PartitionedNamespace, location: str) -> int:
    """The bytes of the data files under a partition table (each written once, never removed)."""
    data = Path(ns.uri) / location / "data"
    return sum(f.stat().st_size for f in data.iterdir())


def test_partitions_sorted_with_rows_and_bytes(capsys, ns):
    doc = run_json(capsys, "partitions", ns.uri)
    parts = doc["partitions"]
    keys = [(p["values"]["country"], p["values"]["event_date_year"]) for p in parts]
    assert keys == sorted(keys)
    assert keys[0] == ("DE", 2025) and keys[-1] == (LONG_COUNTRY, 2024)
    rows = ns.to_table().to_pylist()
    for p in parts:
        want = [
            r
            for r in rows
            if r["country"] == p["values"]["country"]
            and r["event_date"].year == p["values"]["event_date_year"]
        ]
        assert p["rows"] == len(want) > 0
        assert p["bytes"] == table_bytes(ns, p["location"]) > 0
    assert sum(p["rows"] for p in parts) == 14
    _, out, _ = run(capsys, "partitions", ns.uri)
    body = out.splitlines()[2:-1]
    assert [re.split(r"\s{2,}", line.strip())[1] for line in body] == [
        str(p["rows"]) for p in parts
    ]
    total = sum(p["bytes"] for p in parts)
    assert out.splitlines()[-1] == f"7 partitions (14 rows, {total / 1024:.1f} KiB)"
    # without stats the tables are not opened
    doc = run_json(capsys, "partitions", ns.uri, "--no-stats")
    assert {p["rows"] for p in doc["partitions"]} == {None}
    assert [p["object_id"] for p in doc["partitions"]] == [p["object_id"] for p in parts]


def test_partitions_and_info_take_rows_and_bytes_from_the_manifest(capsys, ns, tmp_path):
    """The rows and sizes the manifest records are shown without opening a table: with every
    table's data files gone, ``partitions`` and ``info`` still show them."""
    shutil.copytree(ns.uri, tmp_path / "copy")
    ns = PartitionedNamespace.open(tmp_path / "copy")
    before = run_json(capsys, "partitions", ns.uri)
    for p in ns.inspect.partitions():
        shutil.rmtree(os.path.join(ns.uri, p["location"], "data"))
    after = run_json(capsys, "partitions", ns.uri)
    assert [(p["rows"], p["bytes"]) for p in after["partitions"]] == [
        (p["rows"], p["bytes"]) for p in before["partitions"]
    ]
    assert run_json(capsys, "info", ns.uri)["rows"] == 14


def test_partitions_json_matches_api(capsys, ns):
    doc = run_json(capsys, "partitions", ns.uri)
    assert doc["total_partitions"] == 7
    assert doc["filter"] is None
    assert doc["manifest_version"] == ns.version
    got = {
        p["object_id"]: {k: v for k, v in p.items() if k not in ("rows", "bytes")}
        for p in doc["partitions"]
    }
    assert got == {p["object_id"]: p for p in jsonable(ns.inspect.partitions())}


def test_partitions_filter_lists_only_planned(capsys, ns):
    sql = "country = 'FR'"
    doc = run_json(capsys, "partitions", ns.uri, "--filter", sql)
    plan = ns.plan_scan(sql)
    assert len(doc["partitions"]) == len(plan.tasks) == 2
    assert doc["total_partitions"] == 7
    assert {p["values"]["country"] for p in doc["partitions"]} == {"FR"}
    assert {p["object_id"] for p in doc["partitions"]} == {t.object_id for t in plan.tasks}
    assert [p["values"]["event_date_year"] for p in doc["partitions"]] == [2025, 2026]
    code, out, _ = run(capsys, "partitions", ns.uri, "--filter", sql)
    assert code == 0
    assert out.splitlines()[-1].startswith(
        "2 of 7 partitions selected by filter: country = 'FR' (4 rows, "
    )
    assert "country=US" not in out and out.count("country=FR") == 2


# -- scan --------------------------------------------------------------------------------------
def test_scan_json_rows_equal_api(capsys, ns):
    rows = run_json(capsys, "scan", ns.uri)
    want = jsonable(ns.to_table().to_pylist())
    assert sorted(rows, key=lambda r: r["id"]) == sorted(want, key=lambda r: r["id"])
    assert len(rows) == 14
    by_id = {r["id"]: r for r in rows}
    assert by_id[100] == {"id": 100, "country": "US", "event_date": "2025-05-01", "value": None}
    assert list(by_id[0]) == ["id", "country", "event_date", "value"]


def test_scan_filter_and_columns(capsys, ns):
    sql = "country = 'FR' AND value > 3"
    rows = run_json(capsys, "scan", ns.uri, "--filter", sql, "--columns", "id,value")
    assert all(list(r) == ["id", "value"] for r in rows)
    want = ns.to_table(sql, columns=["id", "value"]).to_pylist()
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in want) == [4, 7, 10]


def test_scan_limit_returns_exactly_n_rows(capsys, ns):
    all_rows = jsonable(ns.to_table().to_pylist())
    for n in (0, 1, 5, 13):
        rows = run_json(capsys, "scan", ns.uri, "--limit", str(n))
        assert len(rows) == n
        assert all(r in all_rows for r in rows)
    assert len(run_json(capsys, "scan", ns.uri, "--limit", "1000")) == 14
    code, out, _ = run(capsys, "scan", ns.uri, "--limit", "3", "--filter", "country = 'DE'")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2 + 3 + 1  # header, dashes, rows, footer
    assert lines[-1] == "3 rows (limit reached)"
    assert all(line.split()[1] == "DE" for line in lines[2:5])


def test_scan_limit_stops_reading_early(capsys, tmp_path):
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(40, countries=tuple(f"C{i:02d}" for i in range(20))))
    last = ns.plan_scan().tasks[-1]
    shutil.rmtree(last.uri)  # the last partition table read is gone
    rows = run_json(capsys, "scan", ns.uri, "--limit", "1")
    assert len(rows) == 1 and rows[0]["country"] != last.partition_values["country"]
    code, out, err = run(capsys, "scan", ns.uri)
    assert code == 1
    assert out == ""  # text output is written only once every row is read
    assert err.startswith(f"lance-partitioned: error: partition {last.object_id}: cannot open")
    assert last.location in err and "Traceback" not in err


def test_scan_text_table(capsys, ns):
    code, out, _ = run(capsys, "scan", ns.uri, "--filter", "country = 'US' OR value = 1.5")
    assert code == 0
    lines = out.splitlines()
    header, body, footer = lines[0], lines[2:-1], lines[-1]
    assert header.split() == ["id", "country", "event_date", "value"]
    assert footer == "6 rows"
    at = header.index("event_date")
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", row[at : at + 10]) for row in body)
    (null_row,) = [row for row in body if row.split()[0] == "100"]
    assert null_row.split() == ["100", "US", "2025-05-01", "null"]
    (long_row,) = [row for row in body if "ZZZ" in row]
    assert "Z" * 79 + "…" in long_row and "Z" * 80 not in long_row
    code, out, _ = run(
        capsys,
        "scan",
        ns.uri,
        "--filter",
        "value = 1.5",
        "--max-width",
        "0",
        "--columns",
        "country",
    )
    assert code == 0
    assert out.splitlines()[2] == LONG_COUNTRY


# -- versions, options -------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["--as-of", "--version"])
def test_as_of_reads_older_manifest(capsys, built, option):
    ns, first, second = built
    assert first < second
    old = PartitionedNamespace.open(ns.uri, version=first)
    doc = run_json(capsys, option, str(first), "partitions", ns.uri)
    assert doc["manifest_version"] == first
    assert sorted(p["object_id"] for p in doc["partitions"]) == sorted(
        p["object_id"] for p in old.inspect.partitions()
    )
    assert len(doc["partitions"]) == 6
    rows = run_json(capsys, "scan", ns.uri, option, str(first))
    assert sorted(r["id"] for r in rows) == list(range(12))
    code, out, _ = run(capsys, "info", ns.uri, option, str(first))
    assert code == 0
    assert kv_lines(out)["manifest version"] == str(first)
    assert kv_lines(out)["partitions"] == "6"


def test_as_of_in_help_and_version_alias_hidden(capsys):
    for argv in (["--help"], ["scan", "--help"]):
        code, out, _ = run(capsys, *argv)
        assert code == 0
        assert "--as-of N" in out
        assert "--version" not in out
    code, out, err = run(capsys, "compact", "x", "--as-of", "2")
    assert code == 2 and "--as-of selects a manifest version to read" in err


def test_program_version(capsys):
    from dagster_lance_partitioned import __version__

    for argv in (["-V"], ["version"]):
        code, out, err = run(capsys, *argv)
        assert (code, out, err) == (0, f"lance-partitioned {__version__}\n", "")
    assert run_json(capsys, "version") == {"program": "lance-partitioned", "version": __version__}


def test_global_options_before_and_after_the_command():
    args, opts = parse(
        ["--storage-option", "a=1", "--as-of", "3", "scan", "u", "--storage-option", "b=x=y"]
    )
    assert args.command == "scan" and args.uri == "u"
    assert opts.storage_options == {"a": "1", "b": "x=y"}
    assert opts.version == 3 and opts.json is False
    _, opts = parse(["--as-of", "3", "info", "u", "--as-of", "5", "--json"])
    assert opts.version == 5 and opts.json is True
    _, opts = parse(["--version", "3", "info", "u", "--version", "4"])
    assert opts.version == 4
    _, opts = parse(["info", "u"])
    assert opts.storage_options is None and opts.version is None


def test_storage_options_are_passed_through(capsys, ns):
    doc = run_json(capsys, "info", ns.uri, "--storage-option", "timeout=30s")
    assert doc["partitions"] == 7


def test_parse_arrow_type():
    assert parse_arrow_type("int64") == pa.int64()
    assert parse_arrow_type("utf8") == pa.utf8()
    assert parse_arrow_type("date32") == pa.date32()
    assert parse_arrow_type("decimal128(10, 2)") == pa.decimal128(10, 2)
    assert parse_arrow_type("timestamp[us, tz=UTC]") == pa.timestamp("us", tz="UTC")
    with pytest.raises(ValueError, match="unknown Arrow type 'integer64'"):
        parse_arrow_type("integer64")


# -- explain / upgrade / import-hive -----------------------------------------------------------
def test_explain(capsys, ns):
    sql = "country = 'US' AND event_date >= DATE '2025-06-01'"
    code, out, _ = run(capsys, "explain", ns.uri, "--filter", sql)
    assert code == 0
    assert out == str(ns.plan_scan(sql)).rstrip("\n") + "\n"
    assert sql in out
    doc = run_json(capsys, "explain", ns.uri, "--filter", sql)
    assert doc == jsonable(ns.plan_scan(sql).to_dict())


def make_draft_ns(root: Path) -> None:
    """A namespace in the Jan-2026 draft shape: array spec, manifest column named ``country``."""
    schema, _ = arrow_json.assign_field_ids(SCHEMA, 0)
    data = sample_table(12)
    rows: list[dict[str, Any]] = [{"object_id": "v1", "object_type": "namespace"}]
    for country in ("US", "FR"):
        location = f"tbl_{country}"
        part = data.filter(pc.equal(data["country"], country))
        lance.write_dataset(part, str(root / location), schema=schema)
        ns_id = f"v1${country.lower()}"
        rows.append({"object_id": ns_id, "object_type": "namespace", "country": country})
        rows.append(
            {
                "object_id": ns_id + "$dataset",
                "object_type": "table",
                "location": location,
                "read_version": 1,
                "country": country,
            }
        )
    manifest_schema = base_manifest_schema().append(pa.field("country", pa.utf8()))
    manifest = lance.write_dataset(
        pa.Table.from_pylist(rows, schema=manifest_schema), str(root / "__manifest")
    )
    draft_spec = [
        {"name": "country", "source_id": 1, "expression": "col0", "result_type": {"type": "utf8"}}
    ]
    manifest.update_metadata(
        {
            "schema": json.dumps(arrow_json.schema_to_json(schema)),
            "partition_spec_v1": json.dumps(draft_spec),
        }
    )


def test_upgrade_draft_namespace(capsys, tmp_path):
    root = tmp_path / "draft"
    make_draft_ns(root)
    uri = str(root)
    code, out, _ = run(capsys, "specs", uri)
    assert code == 0
    assert out.splitlines()[0] == "spec v1 (current, draft shape)"
    assert out.splitlines()[3].split() == [
        "country",
        "country",
        "expression:",
        "col0",
        "string",
        "country",
    ]
    assert kv_lines(run(capsys, "info", uri)[1])["writer flag"].startswith("(not set)")
    before = PartitionedNamespace.open(uri).version
    code, out, _ = run(capsys, "upgrade", uri)
    after = PartitionedNamespace.open(uri).version
    assert code == 0
    assert after > before
    assert out == f"{uri}: upgraded, manifest version {before} -> {after}\n"
    spec = run_json(capsys, "specs", uri)["specs"][0]
    assert spec["draft"] is False
    assert spec["fields"][0]["transform"] == {"type": "identity"}
    assert spec["fields"][0]["column"] == "partition_field_country"
    rows = run_json(capsys, "scan", uri, "--filter", "country = 'FR'")
    assert sorted(r["id"] for r in rows) == [1, 4, 7, 10]
    # a second run finds nothing to do
    doc = run_json(capsys, "upgrade", uri)
    assert doc == {
        "uri": uri,
        "previous_version": after,
        "manifest_version": after,
        "changed": False,
    }
    code, out, _ = run(capsys, "upgrade", uri)
    assert out == f"{uri}: already in the current shape (manifest version {after})\n"


def test_upgrade_current_shape_changes_nothing(capsys, tmp_path):
    ns, _, _ = make_ns(tmp_path / "ns")
    doc = run_json(capsys, "upgrade", ns.uri)
    assert doc["changed"] is False
    assert doc["manifest_version"] == doc["previous_version"] == ns.version
    assert PartitionedNamespace.open(ns.uri).version == ns.version


def test_import_hive(capsys, tmp_path):
    root = tmp_path / "hive"
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "value": [1.0, 2.0]})
    keys = [("US", 2024), ("US", 2025), ("FR", 2025)]
    for country, year in keys:
        lance.write_dataset(data, str(root / f"country={country}" / f"year={year}" / "data.lance"))
    code, out, err = run(capsys, "import-hive", str(root), "--type", "yr=int16")
    assert_error(code, out, err, "'yr'", "not keys")
    doc = run_json(capsys, "import-hive", str(root), "--type", "year=int16")
    ns = PartitionedNamespace.open(root)
    assert doc["uri"] == ns.uri and doc["manifest_version"] == ns.version
    assert doc["partitions"] == len(ns.inspect.partitions()) == 3
    assert sorted(tuple(p["values"].values()) for p in ns.inspect.partitions()) == sorted(keys)
    fields = {f["field_id"]: f for f in doc["current_spec"]["fields"]}
    assert fields["year"]["result_type_name"] == "int16"  # --type took effect
    assert fields["country"]["result_type_name"] == "string"
    assert ns.to_table().num_rows == 6
    code, out, _ = run(capsys, "partitions", str(root))
    assert code == 0
    assert "country=US/year=2024/data.lance" in out and "country=FR, year=2025" in out
    # importing again finds the namespace it made
    code, out, err = run(capsys, "import-hive", str(root))
    assert_error(code, out, err, str(root), "already exists")


def test_import_hive_text(capsys, tmp_path):
    root = tmp_path / "hive"
    lance.write_dataset(pa.table({"id": [1]}), str(root / "k=a" / "t.lance"))
    code, out, _ = run(capsys, "import-hive", str(root))
    assert code == 0
    assert out.startswith("imported 1 partition table\n\n")
    kv = kv_lines(out)
    assert kv["root"] == str(root) and kv["partitions"] == "1"
    assert kv["current spec"] == "v1: k=identity(k)"


# -- check and maintenance ------------------------------------------------------------------
def test_check_healthy(capsys, ns):
    code, out, err = run(capsys, "check", ns.uri)
    assert code == 0, err
    kv = kv_lines(out)
    assert kv["manifest version"] == str(ns.version)
    assert kv["partitions"] == "7"
    assert kv["schema"] == kv["read versions"] == kv["uncommitted"] == "ok"
    assert kv["orphans"] == "none"
    assert kv["integrity"] == "ok (7 checked)"
    assert out.splitlines()[-1] == "healthy"
    doc = run_json(capsys, "check", ns.uri, "--sample", "2")
    assert doc["healthy"] is True and doc["issues"] == 0
    assert doc["integrity_partitions_checked"] == 2
    assert doc["schema"] == doc["read_versions"] == doc["orphans"] == doc["integrity"] == []


def test_check_counts_only_orphans_older_than_the_grace(capsys, ns):
    """A young orphan is a write in flight (reported, exit 0); one older than vacuum's grace
    is a problem (exit 1) -- the rule of the Dagster read-version check too."""
    orphan = os.path.join(ns.uri, "0badc0de_v1$orphanorphanorph$dataset")
    lance.write_dataset(sample_table(2), orphan)
    code, out, err = run(capsys, "check", ns.uri)
    assert code == 0, err
    assert kv_lines(out)["orphans"].startswith("1 orphan table")
    assert "0 older than 168 h" in kv_lines(out)["orphans"]
    doc = run_json(capsys, "check", ns.uri)
    assert doc["healthy"] is True and [o["stale"] for o in doc["orphans"]] == [False]
    old = time.time() - 8 * 24 * 3600
    for dirpath, _dirs, names in os.walk(orphan):
        for name in [*names, "."]:
            os.utime(os.path.join(dirpath, name), (old, old))
    code, out, _ = run(capsys, "check", ns.uri)
    assert code == 1 and "1 older than 168 h" in kv_lines(out)["orphans"]
    code, out, _ = run(capsys, "check", ns.uri, "--grace-hours", "240")
    assert code == 0  # younger than a 10-day grace


def test_check_reports_faults_and_exits_1(capsys, tmp_path):
    ns, _, _ = make_ns(tmp_path / "ns")
    broken = next(p for p in ns.inspect.partitions() if p["values"]["country"] == "FR")
    shutil.rmtree(os.path.join(ns.uri, broken["location"]))
    code, out, err = run(capsys, "check", ns.uri, "--max-width", "0")
    assert code == 1
    assert err == ""
    assert kv_lines(out)["read versions"] == "1 unreadable table"
    assert "unreadable tables:" in out
    assert broken["object_id"] in out and "missing table" in out
    assert out.splitlines()[-1] == "1 issue found"
    code, out, _ = run(capsys, "check", ns.uri, "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["healthy"] is False and doc["issues"] == 1
    assert [(i["object_id"], i["problem"]) for i in doc["read_versions"]] == [
        (broken["object_id"], "missing table")
    ]


def test_compact_cleanup_vacuum(capsys, tmp_path):
    ns, _, second = make_ns(tmp_path / "ns")
    rows = sorted(ns.to_table().to_pylist(), key=lambda r: r["id"])
    us = next(
        p
        for p in ns.inspect.partitions()
        if p["values"] == {"country": "US", "event_date_year": 2025}
    )
    doc = run_json(capsys, "compact", ns.uri)
    assert doc["manifest_version"] == second + 1
    assert doc["partitions"] == [[us["object_id"], 2, 1]]  # the one table appended to
    assert doc["skipped"] == []
    code, out, _ = run(capsys, "compact", ns.uri, "--filter", "country = 'US'")
    assert code == 0 and "nothing to compact" in out

    doc = run_json(capsys, "cleanup", ns.uri, "--older-than-days", "0", "--keep-versions", "1")
    assert doc["manifest_versions_kept"] == 1
    assert doc["manifest_versions_removed"] == second  # versions 1 .. second
    assert doc["table_versions_removed"] >= 1
    code, out, _ = run(capsys, "vacuum", ns.uri, "--grace-hours", "0")
    assert code == 0
    assert kv_lines(out)["orphans removed"] == "0"
    fresh = PartitionedNamespace.open(ns.uri)
    assert fresh.version == second + 3  # compact, then cleanup's announcement (two commits)
    assert [c.operation for c in fresh.inspect.history()][-2:] == ["retire", "retire"]
    assert sorted(fresh.to_table().to_pylist(), key=lambda r: r["id"]) == rows


def test_drop_partitions(capsys, tmp_path):
    ns, _, second = make_ns(tmp_path / "ns")
    code, out, err = run(capsys, "drop-partitions", ns.uri, "--filter", "id < 1")
    assert_error(code, out, err, "matches only some rows", "US", "Nothing was dropped")
    assert PartitionedNamespace.open(ns.uri).version == second

    code, out, _ = run(capsys, "drop-partitions", ns.uri, "--filter", "country = 'FR'")
    assert code == 0
    assert out.startswith(f"dropped 2 partitions (4 rows) in manifest version {second + 1}")
    assert "country=FR" in out
    doc = run_json(capsys, "drop-partitions", ns.uri, "--filter", "country = 'FR'")
    assert doc["partitions"] == [] and doc["rows"] == 0
    remaining = PartitionedNamespace.open(ns.uri).inspect.partitions()
    assert {p["values"]["country"] for p in remaining} == {"US", "DE", LONG_COUNTRY}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["drop-partitions", "x"], "required: --filter"),
        (["compact", "x", "--as-of", "2"], "compact cannot use it"),
        (["cleanup", "x", "--keep-versions", "0"], "expected a positive integer, got 0"),
        (["vacuum", "x", "--grace-hours", "-1"], "expected a number >= 0, got -1"),
        (["cleanup", "x", "--older-than-days", "soon"], "expected a number, got 'soon'"),
    ],
)
def test_maintenance_usage_errors_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert message in err


# -- errors and usage --------------------------------------------------------------------------
def test_error_missing_uri(capsys, tmp_path):
    missing = tmp_path / "nowhere"
    code, out, err = run(capsys, "info", str(missing))
    assert_error(code, out, err, str(missing), "no such directory")


def test_error_plain_lance_dataset(capsys, tmp_path):
    lance.write_dataset(sample_table(), str(tmp_path / "plain"))
    code, out, err = run(capsys, "partitions", str(tmp_path / "plain"))
    assert_error(code, out, err, str(tmp_path / "plain"), "no partitioned namespace")


def test_error_manifest_without_spec(capsys, tmp_path):
    lance.write_dataset(pa.table({"object_id": ["x"]}), str(tmp_path / "ns" / "__manifest"))
    code, out, err = run(capsys, "specs", str(tmp_path / "ns"))
    assert_error(code, out, err, "partition_spec_v", "not a partitioned namespace")


@pytest.mark.parametrize("command", ["scan", "partitions", "explain"])
def test_error_bad_filter(capsys, ns, command):
    code, out, err = run(capsys, command, ns.uri, "--filter", "no_such_col = 1")
    assert_error(code, out, err, "no_such_col")


def test_error_unknown_column_and_version(capsys, ns):
    code, out, err = run(capsys, "scan", ns.uri, "--columns", "id,nope")
    assert_error(code, out, err, "'nope'", "not in the namespace schema")
    code, out, err = run(capsys, "info", ns.uri, "--version", "999")
    assert_error(code, out, err, "999")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required: COMMAND"),
        (["frobnicate", "x"], "invalid choice: 'frobnicate'"),
        (["info"], "required: URI"),
        (["scan", "x", "--limit", "-1"], "expected an integer >= 0, got -1"),
        (["scan", "x", "--limit", "many"], "expected an integer, got 'many'"),
        (["info", "x", "--storage-option", "novalue"], "expected KEY=VALUE"),
        (["explain", "x"], "required: --filter"),
        (["upgrade", "x", "--version", "2"], "upgrade cannot use it"),
        (["import-hive", "x", "--type", "year=notatype"], "unknown Arrow type 'notatype'"),
        (["import-hive", "x", "--type", "a=int32", "--type", "a=int64"], "more than once for a"),
    ],
)
def test_usage_errors_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert "usage: lance-partitioned" in err
    assert message in err


def test_help_exits_0(capsys):
    code, out, _ = run(capsys, "scan", "--help")
    assert code == 0
    assert "--limit N" in out and "--storage-option KEY=VALUE" in out


# -- partition fields by name -----------------------------------------------------------------
NY = "America/New_York"
HOURLY = pa.timestamp("us", tz="UTC")
WINDOW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("time_hour", HOURLY),
        pa.field("country", pa.utf8()),
    ]
)


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


def make_window_ns(root: Path) -> PartitionedNamespace:
    """Daily windows in New York over a UTC timestamp, and 4 country buckets."""
    ns = PartitionedNamespace.create(
        root,
        WINDOW_SCHEMA,
        [
            PartitionField.window("time_hour", TimeWindow("day", NY), HOURLY),
            PartitionField.bucket("country", 4),
        ],
    )
    times = [
        utc(2013, 1, 2, 3),  # 2013-01-01 22:00 in New York
        utc(2013, 1, 2, 5),  # 2013-01-02 00:00
        utc(2013, 1, 2, 12),
        utc(2013, 1, 3, 4, 59),  # 2013-01-02 23:59
        utc(2013, 1, 3, 5),  # 2013-01-03 00:00
        None,
    ]
    countries = ["US", "FR", "US", "DE", "US", "FR"]
    ns.write(
        pa.table(
            {"id": list(range(len(times))), "time_hour": times, "country": countries},
            schema=WINDOW_SCHEMA,
        )
    )
    return ns


@pytest.fixture(scope="module")
def window_ns(tmp_path_factory: pytest.TempPathFactory) -> PartitionedNamespace:
    return make_window_ns(tmp_path_factory.mktemp("cli_windows") / "ns")


def test_windows_described(capsys, window_ns):
    code, out, _ = run(capsys, "specs", window_ns.uri)
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()[3:]}
    assert "window[day, America/New_York]" in rows["time_hour_day"]
    assert "date_bin" not in out and "arrow_cast" not in out
    assert "bucket[4]" in rows["country_bucket_4"]
    code, out, _ = run(capsys, "info", window_ns.uri)
    assert kv_lines(out)["current spec"] == (
        "v1: time_hour_day=window[day, America/New_York](time_hour), "
        "country_bucket_4=bucket[4](country)"
    )
    (spec,) = run_json(capsys, "specs", window_ns.uri)["specs"]
    day, bucket = spec["fields"]
    assert day["window"] == {
        "unit": "day",
        "timezone": NY,
        "minute_offset": 0,
        "hour_offset": 0,
        "day_offset": 0,
    }
    assert day["description"] == "time_hour_day=window[day, America/New_York](time_hour)"
    assert day["expression"] == window_ns.current_spec.fields[0].expression  # stored form kept
    assert bucket["window"] is None


def test_window_text_offsets_and_wall_clock():
    from dagster_lance_partitioned.core.partitioning.describe import window_text

    zoned, naive = pa.timestamp("us", tz="UTC"), pa.timestamp("us")
    assert window_text(TimeWindow("hour", "Asia/Kolkata", 30), zoned) == (
        "hour, Asia/Kolkata, starting at :30"
    )
    assert window_text(TimeWindow("week", NY, day_offset=1), zoned) == (
        "week, America/New_York, starting Monday"
    )
    assert window_text(TimeWindow("month", "UTC", 0, 6, 15), zoned) == (
        "month, UTC, starting day 15 06:00"
    )
    assert window_text(TimeWindow("day", NY), naive) == "day"  # wall-clock time: no zone
    assert window_text(TimeWindow("week", NY), pa.date32()) == "week"


def test_filter_by_window_field_name(capsys, window_ns):
    sql = "time_hour_day = DATE '2013-01-02'"
    rows = run_json(capsys, "scan", window_ns.uri, "--filter", sql)
    assert sorted(r["id"] for r in rows) == [1, 2, 3]  # New York's 2 January, ends included
    doc = run_json(capsys, "partitions", window_ns.uri, "--filter", sql)
    assert doc["filter"] == sql and doc["total_partitions"] == 6
    assert {p["values"]["time_hour_day"] for p in doc["partitions"]} == {"2013-01-02"}
    assert sum(p["rows"] for p in doc["partitions"]) == 3
    # the scan prunes: only the 2 January partitions are read
    jan2 = [
        p
        for p in window_ns.inspect.partitions()
        if p["values"]["time_hour_day"] == dt.date(2013, 1, 2)
    ]
    assert len(jan2) == len(doc["partitions"]) > 1
    plan = run_json(capsys, "explain", window_ns.uri, "--filter", sql)
    assert plan["kept_partitions"] == len(jan2)
    assert plan["given_filter"] == sql
    assert plan["partition_fields"] == {"time_hour_day": "window[day, America/New_York](time_hour)"}
    code, out, _ = run(capsys, "explain", window_ns.uri, "--filter", sql)
    assert code == 0
    assert out.splitlines()[:2] == [
        f"given filter: {sql}",
        "  time_hour_day: partition field window[day, America/New_York](time_hour), "
        "filtered on its source",
    ]
    assert f": {len(jan2)} of 6 partition tables" in out
    # ranges, IN, NULL, mixed with columns, case-folded and quoted names
    cases = {
        "time_hour_day < DATE '2013-01-02'": [0],
        "time_hour_day >= DATE '2013-01-03'": [4],
        "time_hour_day <= DATE '2013-01-02' AND country = 'US'": [0, 2],
        "time_hour_day IN (DATE '2013-01-01', DATE '2013-01-03') OR id = 2": [0, 2, 4],
        "time_hour_day != DATE '2013-01-02'": [0, 4],
        "time_hour_day IS NULL": [5],
        "Time_Hour_Day = DATE '2013-01-03' OR `time_hour_day` = DATE '2013-01-01'": [0, 4],
    }
    for sql, want in cases.items():
        rows = run_json(capsys, "scan", window_ns.uri, "--filter", sql)
        assert sorted(r["id"] for r in rows) == want, sql


def test_filter_by_bucket_field_name(capsys, window_ns):
    ids_by_bucket: dict[int, list[int]] = {}
    for p in window_ns.inspect.partitions():
        table = lance.dataset(os.path.join(window_ns.uri, p["location"]), p["read_version"])
        ids = ids_by_bucket.setdefault(p["values"]["country_bucket_4"], [])
        ids += table.to_table(columns=["id"])["id"].to_pylist()
    for bucket, ids in ids_by_bucket.items():
        sql = f"country_bucket_4 = {bucket}"
        parts = run_json(capsys, "partitions", window_ns.uri, "--filter", sql)["partitions"]
        assert {p["values"]["country_bucket_4"] for p in parts} == {bucket}
        assert sum(p["rows"] for p in parts) == len(ids)
    # a filter cannot hash: reading rows by a bucket is refused, naming what to do instead
    code, out, err = run(capsys, "scan", window_ns.uri, "--filter", "country_bucket_4 = 1")
    assert_error(code, out, err, "partition field country_bucket_4", "filter on country instead")


def test_filter_by_year_field_name(capsys, tmp_path):
    ns, _, second = make_ns(tmp_path / "ns")
    rows = run_json(capsys, "scan", ns.uri, "--filter", "event_date_year = 2024")
    assert [r["id"] for r in rows] == [101]
    doc = run_json(capsys, "explain", ns.uri, "--filter", "event_date_year >= 2026")
    assert doc["kept_partitions"] == 3  # pruned on the year, not read in full
    code, out, _ = run(capsys, "drop-partitions", ns.uri, "--filter", "event_date_year = 2026")
    assert code == 0
    assert out.startswith(f"dropped 3 partitions (3 rows) in manifest version {second + 1}")
    left = PartitionedNamespace.open(ns.uri)
    assert {p["values"]["event_date_year"] for p in left.inspect.partitions()} == {2024, 2025}


def test_filter_errors_name_no_internal_table(capsys, window_ns):
    code, out, err = run(capsys, "scan", window_ns.uri, "--filter", "time_hour_dya = 1")
    assert_error(code, out, err, "time_hour_dya")
    assert "__dlp_filter" not in err


# -- history -----------------------------------------------------------------------------------
def test_history_lists_versions_with_run_ids(capsys, tmp_path):
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    # what the Dagster IO manager records (core stores these as dlp.<key>)
    props = {"source": "dagster-lance-partitioned/io-manager", "dagster.run_id": "abc"}
    first = ns.write(sample_table(6), commit_properties=props).manifest_version
    second = ns.write(
        sample_table(2, countries=("US", "IT"), start=50), commit_properties={"dagster.run_id": "d"}
    ).manifest_version
    third = ns.maintenance.drop_partitions("country = 'FR'").manifest_version
    doc = run_json(capsys, "history", ns.uri)
    versions = {v["version"]: v for v in doc["versions"]}
    # newest first; the creation's two commits (1 and 2) are one entry
    assert [v["version"] for v in doc["versions"]] == [*range(third, 2, -1), 1]
    assert versions[first]["dagster_run_id"] == "abc"
    assert versions[first]["operation"] == "write"
    assert versions[first]["source"] == "dagster-lance-partitioned/io-manager"
    assert sorted(c["values"]["country"] for c in versions[first]["changes"]) == ["DE", "FR", "US"]
    assert {c["kind"] for c in versions[first]["changes"]} == {"added"}
    assert versions[second]["dagster_run_id"] == "d"
    assert sorted((c["values"]["country"], c["kind"]) for c in versions[second]["changes"]) == [
        ("IT", "added"),
        ("US", "updated"),
    ]
    assert versions[third]["operation"] == "drop_partitions"
    assert versions[third]["dagster_run_id"] is None
    assert versions[1]["operation"] == "create"
    now = dt.datetime.now(dt.UTC)
    assert all(
        abs(now - dt.datetime.fromisoformat(v["time"])) < dt.timedelta(minutes=5)
        for v in doc["versions"]
    )
    code, out, _ = run(capsys, "history", ns.uri)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "version",
        "time",
        "(UTC)",
        "operation",
        "partitions",
        "dagster",
        "run",
        "id",
    ]
    table = {line.split()[0]: line.split() for line in lines[2:-1]}
    assert table[str(first)][3:] == ["write", "+3", "abc"]
    assert table[str(second)][3:] == ["write", "+1", "~1", "d"]
    assert table[str(third)][3:] == ["drop_partitions", "-1", "-"]
    assert lines[-1] == f"{third} manifest versions of {ns.uri}"
    # --as-of stops at that version, --limit keeps the newest
    doc = run_json(capsys, "history", ns.uri, "--as-of", str(second), "--limit", "2")
    assert [v["version"] for v in doc["versions"]] == [second, first]


def test_history_after_cleanup(capsys, tmp_path):
    ns, _, second = make_ns(tmp_path / "ns")
    ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    doc = run_json(capsys, "history", ns.uri)
    # the one version kept, then the two commits announcing what cleanup removed
    *announced, only = doc["versions"]  # newest first
    assert only["version"] == second and only["operation"] == "write"
    assert only["changes"] is None  # what it changed is gone with the previous version
    # (a cleanup that removes table versions announces them first: two commits)
    assert [a["operation"] for a in announced] in ([], ["retire", "retire"])
    assert all(a["changes"] == [] for a in announced)  # no partition changed
    _, out, _ = run(capsys, "history", ns.uri)
    assert out.splitlines()[2 + len(announced)].split()[3:] == ["write", "?", "-"]


# -- ls ----------------------------------------------------------------------------------------
def test_ls_finds_nested_namespaces(capsys, tmp_path):
    root = tmp_path / "warehouse"
    make_ns(root / "analytics" / "daily" / "events")  # <root>/<asset key path>
    make_window_ns(root / "raw")
    lance.write_dataset(sample_table(), str(root / "plain_table"))  # a Lance table: not listed
    lance.write_dataset(  # a __manifest without a partition spec: not listed
        pa.table({"object_id": ["x"]}), str(root / "other" / "__manifest")
    )
    doc = run_json(capsys, "ls", str(root))
    assert doc["root"] == str(root)
    found = {n["path"]: n for n in doc["namespaces"]}
    assert list(found) == ["analytics/daily/events", "raw"]
    events = found["analytics/daily/events"]
    assert events["uri"] == str(root / "analytics" / "daily" / "events")
    assert events["partitions"] == 7 and events["manifest_version"] == 4
    assert events["fields"] == ["country=identity(country)", "event_date_year=year(event_date)"]
    assert found["raw"]["fields"][0] == "time_hour_day=window[day, America/New_York](time_hour)"
    code, out, _ = run(capsys, "ls", str(root))
    assert code == 0
    lines = out.splitlines()
    assert lines[2].split()[:3] == ["analytics/daily/events", "4", "7"]
    assert lines[-1] == f"2 partitioned namespaces under {root}"
    shallow = run_json(capsys, "ls", str(root), "--max-depth", "2")
    assert [n["path"] for n in shallow["namespaces"]] == ["raw"]
    # a namespace root itself is listed as '.'
    assert [n["path"] for n in run_json(capsys, "ls", str(root / "raw"))["namespaces"]] == ["."]
    code, out, err = run(capsys, "ls", str(tmp_path / "absent"))
    assert_error(code, out, err, "no such directory")


# -- errors never show Rust source locations ---------------------------------------------------
def test_errors_never_show_rust_source_paths(capsys, tmp_path):
    root = tmp_path / "hive"
    table = root / "k=a" / "t.lance"
    lance.write_dataset(pa.table({"id": [1]}), str(table))
    for version in (table / "_versions").iterdir():
        version.write_bytes(b"xx")  # Lance's error names its own source file
    code, out, err = run(capsys, "import-hive", str(root))
    assert_error(code, out, err, "k=a/t.lance", "not a readable Lance table")
    assert ".rs:" not in err

    ns, _, _ = make_ns(tmp_path / "ns")
    broken = ns.inspect.partitions()[0]
    for version in (Path(ns.uri) / broken["location"] / "_versions").iterdir():
        version.write_bytes(b"xx")
    for argv in (
        ["scan", ns.uri],
        ["compact", ns.uri],
        ["drop-partitions", ns.uri, "--filter", "id >= 0"],
    ):
        code, out, err = run(capsys, *argv)
        assert code == 1 and err.startswith("lance-partitioned: error: ")
        assert ".rs:" not in err, argv
    code, out, _ = run(capsys, "check", ns.uri, "--max-width", "0")
    assert code == 1 and broken["object_id"] in out
    assert ".rs:" not in out
    code, out, _ = run(capsys, "check", ns.uri, "--json")
    assert ".rs:" not in out and json.loads(out)["read_versions"]


# -- the installed entry points ----------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def test_console_script(ns):
    script = BIN_DIR / "lance-partitioned"
    assert script.exists(), f"{script}: console script not installed (pip install -e .)"
    done = subprocess.run(
        [str(script), "info", ns.uri, "--json"], capture_output=True, text=True, env=_env()
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["partitions"] == 7
    done = subprocess.run(
        [str(script), "scan", ns.uri, "--filter", "bogus_col > 1"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "lance-partitioned: error: invalid filter 'bogus_col > 1'" in done.stderr
    assert "Traceback" not in done.stderr


def test_python_dash_m(ns, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "dagster_lance_partitioned.cli", "scan", ns.uri, "--limit", "2"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "2 rows (limit reached)"
    done = subprocess.run(
        [sys.executable, "-m", "dagster_lance_partitioned.cli", "info", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert done.returncode == 1
    assert "no such directory" in done.stderr and "Traceback" not in done.stderr
