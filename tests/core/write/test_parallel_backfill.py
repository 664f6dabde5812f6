"""Parallel runs of one backfill never copy data: three writer processes each write 28 new days of
their own airport under day-level partition namespaces they all create at once (the commits race
at a barrier). Before namespace names came from the namespace's naming key, two of the three
lost the race to register the day namespaces and re-wrote all their tables as copies, leaving
the originals behind as orphans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.cli import main as cli_main
from dagster_lance_partitioned.core.manifest.naming import NAMING_KEY

WRITER = Path(__file__).resolve().parents[2] / "helpers" / "writer_proc.py"
AIRPORTS = ("EWR", "JFK", "LGA")
DAYS = [20130101 + d for d in range(28)]
ROWS = 3  # per day and airport
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("day", pa.int32()),
        pa.field("origin", pa.utf8()),
        pa.field("delay", pa.float64()),
    ]
)


def _rows(w: int, airport: str) -> list[dict[str, Any]]:
    return [
        {"id": w * 100_000 + n * 10 + r, "day": day, "origin": airport, "delay": float(r)}
        for n, day in enumerate(DAYS)
        for r in range(ROWS)
    ]


def _run_racing(tmp_path: Path, uri: str) -> list[dict[str, Any]]:
    sync = tmp_path / "sync"
    sync.mkdir()
    names = [f"w{w}" for w in range(len(AIRPORTS))]
    procs = []
    for w, airport in enumerate(AIRPORTS):
        cfg = tmp_path / f"{names[w]}.json"
        cfg.write_text(
            json.dumps(
                {
                    "uri": uri,
                    "writes": [{"rows": _rows(w, airport), "mode": "overwrite_partitions"}],
                    "sync_dir": str(sync),
                    "name": names[w],
                    "barrier": names,
                    "result": str(tmp_path / f"{names[w]}.jsonl"),
                }
            )
        )
        procs.append(subprocess.Popen([sys.executable, str(WRITER), str(cfg)]))
    for p in procs:
        assert p.wait(timeout=180) == 0
    return [json.loads((tmp_path / f"{n}.jsonl").read_text().splitlines()[0]) for n in names]


@pytest.mark.parametrize("legacy", [False, True], ids=["new", "created-before-naming-keys"])
def test_racing_runs_register_their_tables_where_they_wrote_them(
    tmp_path: Path, legacy: bool
) -> None:
    uri = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(
        uri, SCHEMA, [PartitionField.identity("day"), PartitionField.identity("origin")]
    )
    if legacy:  # a namespace made before naming keys: its first write gives it one
        meta = ns.state.store.dataset().metadata
        assert NAMING_KEY in meta
        ns.state.store.dataset().update_metadata({NAMING_KEY: None})  # as older versions made
        assert NAMING_KEY not in PartitionedNamespace.open(uri).metadata
    results = _run_racing(tmp_path, uri)
    assert all(r["ok"] for r in results), results
    fresh = PartitionedNamespace.open(uri)
    assert NAMING_KEY in fresh.metadata
    # every row written once
    got = sorted((r["id"], r["day"], r["origin"]) for r in fresh.to_table().to_pylist())
    want = sorted(
        (r["id"], r["day"], r["origin"]) for w, a in enumerate(AIRPORTS) for r in _rows(w, a)
    )
    assert got == want
    # one namespace per day, one table per (day, airport), each where it was written
    partitions = fresh.inspect.partitions()
    assert len(partitions) == len(DAYS) * len(AIRPORTS)
    day_namespaces = {p["object_id"].split("$")[1] for p in partitions}
    assert len(day_namespaces) == len(DAYS)
    directories = {d for d in os.listdir(uri) if d != "__manifest"}
    assert directories == {p["location"] for p in partitions}  # no copies, no orphans
    written = {p["object_id"] for r in results for p in r["partitions"]}
    assert written == {p["object_id"] for p in partitions}
    assert fresh.inspect.find_orphans() == []
    assert cli_main(["check", uri]) == 0
