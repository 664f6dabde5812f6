"""``check`` and ``info`` given a directory holding several namespaces (a Dagster IO manager's
root, say) check or describe each namespace ``ls`` finds there, instead of refusing: one
report per namespace and a summary, exit 1 when any of them has a problem (or, with
``--strict``, a leftover) or cannot be opened; ``--as-of`` is refused there, since every
namespace has its own versions. Real namespaces on local disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
from helpers.cli import run

from dagster_lance_partitioned import PartitionedNamespace, PartitionField

ROWS = pa.table({"id": [1, 2, 3], "origin": ["EWR", "JFK", "EWR"]})


def make(path: Path, fields=None) -> PartitionedNamespace:
    fields = [PartitionField.identity("origin")] if fields is None else fields
    ns = PartitionedNamespace.create(path, ROWS.schema, fields)
    ns.write(ROWS)
    return PartitionedNamespace.open(path)


def lake(tmp_path: Path) -> Path:
    """An IO manager's root: three namespaces, one nested, one unpartitioned."""
    root = tmp_path / "lake"
    make(root / "flights")
    make(root / "ref" / "airports", fields=[])
    make(root / "weather")
    return root


def test_check_on_a_root_checks_every_namespace(capsys, tmp_path):
    root = lake(tmp_path)
    code, out, err = run(capsys, "check", str(root))
    assert (code, err) == (0, ""), out
    blocks = out.split("\n== ")
    assert out.startswith("== flights\n")
    assert [b.splitlines()[0].removeprefix("== ") for b in blocks] == [
        "flights",
        "ref/airports",
        "weather",
    ]
    assert all("\nhealthy\n" in b for b in blocks)
    assert out.splitlines()[-1] == f"3 namespaces under {root}: all healthy"

    doc = json.loads(run(capsys, "check", str(root), "--json")[1])
    assert doc["healthy"] is True and doc["failed"] == []
    assert [(n["path"], n["healthy"], n["partitions"]) for n in doc["namespaces"]] == [
        ("flights", True, 2),
        ("ref/airports", True, 1),
        ("weather", True, 2),
    ]


def test_check_on_a_root_fails_when_one_namespace_has_a_problem(capsys, tmp_path):
    root = lake(tmp_path)
    weather = PartitionedNamespace.open(root / "weather")
    broken = weather.inspect.partitions()[0]
    shutil.rmtree(root / "weather" / broken["location"])
    code, out, _ = run(capsys, "check", str(root))
    assert code == 1
    assert out.splitlines()[-1] == f"3 namespaces under {root}: 1 failed (weather)"
    weather_block = out.split("\n== weather\n")[1]
    assert "read versions     1 unreadable table" in weather_block
    doc = json.loads(run(capsys, "check", str(root), "--json")[1])
    assert doc["healthy"] is False and doc["failed"] == ["weather"]


def test_info_on_a_root_describes_every_namespace(capsys, tmp_path):
    root = lake(tmp_path)
    code, out, err = run(capsys, "info", str(root))
    assert (code, err) == (0, "")
    assert out.startswith("== flights\nroot              ")
    assert "\n== ref/airports\n" in out and "\n== weather\n" in out
    airports = out.split("\n== ref/airports\n")[1].split("\n== ")[0]
    assert "current spec      v1: no partition fields (one table holds every row)" in airports
    doc = json.loads(run(capsys, "info", str(root), "--json")[1])
    assert doc["root"] == str(root)
    assert [(n["path"], n["partitions"]) for n in doc["namespaces"]] == [
        ("flights", 2),
        ("ref/airports", 1),
        ("weather", 2),
    ]
    one = json.loads(run(capsys, "info", str(root / "flights"), "--json")[1])
    assert {k: v for k, v in doc["namespaces"][0].items() if k != "path"} == one


def test_as_of_is_refused_on_a_root_of_namespaces(capsys, tmp_path):
    root = lake(tmp_path)
    code, out, err = run(capsys, "check", str(root), "--as-of", "2")
    assert (code, out) == (1, "")
    assert "holds 3 partitioned namespaces" in err and "--as-of reads one namespace" in err


def test_a_directory_without_namespaces_is_still_an_error(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    for command in ("check", "info"):
        code, out, err = run(capsys, command, str(tmp_path / "empty"))
        assert (code, out) == (1, "") and "no partitioned namespace here" in err
