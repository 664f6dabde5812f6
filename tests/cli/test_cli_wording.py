"""What the command line says, on real namespaces in temporary directories: the writer flag by
its meaning, a root holding namespaces answered with ``ls``, an unquoted string value in a
filter explained, parse errors positioned in the text the user wrote, and a namespace's
creation shown as the one ``create`` it is."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.cli import main
from dagster_lance_partitioned.cli.inspect import writer_flag_bits
from dagster_lance_partitioned.core.manifest.layout import WRITER_FLAG_KEY

SCHEMA = pa.schema([("id", pa.int64()), ("origin", pa.utf8()), ("day", pa.date32())])
ROWS = pa.table(
    {
        "id": [1, 2, 3],
        "origin": ["JFK", "EWR", "JFK"],
        "day": [dt.date(2013, 3, 1), dt.date(2013, 3, 1), dt.date(2013, 3, 2)],
    },
    schema=SCHEMA,
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``main(argv)``: (exit code, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def info_value(out: str, key: str) -> str:
    """The value of ``key`` in ``info``'s ``key  value`` lines."""
    for line in out.splitlines():
        parts = re.split(r"\s{2,}", line, maxsplit=1)
        if parts[0] == key and len(parts) == 2:
            return parts[1]
    raise AssertionError(f"no {key!r} line in {out!r}")


def make(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, SCHEMA, [PartitionField.identity("origin"), PartitionField.day("day")]
    )
    ns.write(ROWS)
    return PartitionedNamespace.open(root)


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one error line of a failing command (exit 1, nothing on stdout)."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (1, ""), (code, out, err)
    assert err.startswith("lance-partitioned: error: ") and err.count("\n") == 1, err
    return err.removeprefix("lance-partitioned: error: ").rstrip("\n")


# -- the writer flag, by its meaning ----------------------------------------------------------
def test_info_names_what_the_writer_flag_means(capsys, tmp_path):
    ns = make(tmp_path / "ns")
    code, out, _ = run(capsys, "info", ns.uri)
    assert code == 0
    assert info_value(out, "writer flag") == (
        "4611686018427387904 = bit 62: set by dagster-lance-partitioned, so Lance's own "
        "namespace tools read this __manifest but do not change it"
    )
    code, out, _ = run(capsys, "info", ns.uri, "--json")
    doc: dict[str, Any] = json.loads(out)
    assert doc["writer_feature_flags"] == "4611686018427387904"  # the stored value, as before
    assert [b["bit"] for b in doc["writer_feature_flag_bits"]] == [62]

    # a namespace of an earlier version of the package carries the legacy value 2
    ns.state.store.update_metadata({WRITER_FLAG_KEY: "2"}, base_version=ns.version)
    _, out, _ = run(capsys, "info", ns.uri)
    assert info_value(out, "writer flag") == (
        "2 = bit 1: the legacy flag of an earlier dagster-lance-partitioned (`upgrade` replaces "
        "it by bit 62)"
    )


def test_every_set_bit_is_named():
    bits = writer_flag_bits(str(1 << 62 | 1 << 5 | 1))
    assert [(b["bit"], b["meaning"].split(",")[0]) for b in bits] == [
        (0, "Lance's namespace lifecycle feature"),
        (5, "unknown to this package (another writer's feature)"),
        (62, "set by dagster-lance-partitioned"),
    ]
    assert writer_flag_bits(str(1 << 62 | 2))[0]["meaning"].startswith("unknown")  # not legacy
    assert writer_flag_bits(None) == []


# -- a root holding namespaces ----------------------------------------------------------------
def test_a_command_on_a_root_of_namespaces_suggests_ls(capsys, tmp_path):
    root = tmp_path / "lake"
    make(root / "flights")
    message = error_of(capsys, "specs", str(root))
    assert message == (
        f"{root}: no partitioned namespace here (no readable __manifest table); it holds the "
        f"partitioned namespace flights (list namespaces with `lance-partitioned ls {root}`; "
        f"open it with `lance-partitioned specs {root}/flights`)"
    )
    for name in ["weather", "nested/planes", "nested/deeper/airlines", "zz"]:
        make(root / name)
    message = error_of(capsys, "history", str(root))
    # a few, nearest first, then the command that lists them all
    assert "it holds partitioned namespaces flights, weather, zz, ..." in message
    assert f"list them with `lance-partitioned ls {root}`" in message
    assert f"open one with `lance-partitioned history {root}/flights`" in message
    # and what ls then lists is every one of them
    code, out, _ = run(capsys, "ls", str(root), "--json")
    paths = sorted(n["path"] for n in json.loads(out)["namespaces"])
    assert code == 0 and paths == [
        "flights",
        "nested/deeper/airlines",
        "nested/planes",
        "weather",
        "zz",
    ]


def test_a_directory_without_namespaces_gets_no_suggestion(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    message = error_of(capsys, "info", str(tmp_path / "empty"))
    assert message.endswith("no partitioned namespace here (no readable __manifest table)")
    assert "ls" not in message


# -- filters ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "word", "value"),
    [
        ("origin = JFK", "JFK", "'JFK'"),
        ("origin IN ('EWR', LGA)", "LGA", "'LGA'"),
        ('origin = "JFK"', '"JFK"', "'JFK'"),
        ("id > 1 AND origin != Jfk", "Jfk", "'Jfk'"),
    ],
)
def test_an_unquoted_string_value_is_explained(capsys, tmp_path, given, word, value):
    ns = make(tmp_path / "ns")
    message = error_of(capsys, "scan", ns.uri, "--filter", given)
    assert f"no column named {word} (" in message
    assert f"write a string value in single quotes: {value}" in message
    assert "jfk." not in message.lower()  # not DataFusion's lower-cased "No field named jfk."
    fixed = given.replace(word, value)
    code, _, err = run(capsys, "scan", ns.uri, "--filter", fixed)
    assert code == 0, err  # the hint's spelling is a filter that works


def test_an_unknown_column_is_not_taken_for_a_value(capsys, tmp_path):
    ns = make(tmp_path / "ns")
    message = error_of(capsys, "scan", ns.uri, "--filter", "orign = 'JFK'")
    assert "single quotes" not in message and "orign" in message
    assert "Did you mean 'origin'?" in message  # DataFusion's suggestion stays
    # a partition field id named in the filter (the CLI resolves it first) gets the hint too
    message = error_of(capsys, "partitions", ns.uri, "--filter", "day_day = x AND origin = JFK")
    assert "no column named x (" in message


@pytest.mark.parametrize(
    ("given", "line", "column", "found"),
    [
        ("origin = = 'JFK'", None, 10, "`=`"),
        ("id > 1 AND origin IN ('JFK',, 'EWR')", None, 29, "`,`"),
        ("id >", None, 5, "the end of the filter"),
        ("id > 1 AND\n   origin = = 'JFK'", 2, 13, "`=`"),
    ],
)
def test_a_parse_error_is_positioned_in_the_users_text(
    capsys, tmp_path, given, line, column, found
):
    ns = make(tmp_path / "ns")
    message = error_of(capsys, "scan", ns.uri, "--filter", given)
    where = f"column {column}" if line is None else f"line {line}, column {column}"
    assert f"syntax error at {where}: expected an expression, found {found}" in message
    assert "Line: 1" not in message and "ParserError" not in message
    text = given.split("\n")[(line or 1) - 1]
    if found != "the end of the filter":
        assert f"`{text[column - 1]}`" == found  # the column points at the offending character
    else:
        assert column == len(text) + 1


# -- history ----------------------------------------------------------------------------------
def test_history_shows_one_create_for_one_creation(capsys, tmp_path):
    ns = make(tmp_path / "ns")  # versions 1 and 2: the creation; 3: the write
    code, out, _ = run(capsys, "history", ns.uri)
    assert code == 0
    rows = [line.split() for line in out.splitlines()[2:-1]]
    assert [(r[0], r[3]) for r in rows] == [("3", "write"), ("1-2", "create")]
    assert out.splitlines()[-1] == f"3 manifest versions of {ns.uri}"
    code, out, _ = run(capsys, "history", ns.uri, "--json")
    versions = json.loads(out)["versions"]
    assert [(v["version"], v["through_version"], v["operation"]) for v in versions] == [
        (3, 3, "write"),
        (1, 2, "create"),
    ]
    # a window starting inside the creation shows the part it holds, still one create
    code, out, _ = run(capsys, "history", ns.uri, "--limit", "2")
    assert [line.split()[:1] + line.split()[3:4] for line in out.splitlines()[2:-1]] == [
        ["3", "write"],
        ["2", "create"],
    ]
