"""Shared test data: a sample schema and table, sorted rows, a fingerprint of everything
stored under a namespace root, and a partition table's data file swapped for a link."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.utf8()),
        pa.field("event_date", pa.date32()),
        pa.field("value", pa.float64()),
    ]
)


def sample_table(n: int = 12, countries=("US", "FR", "DE"), start: int = 0) -> pa.Table:
    """Rows spread over ``countries`` and three dates."""
    days = [dt.date(2025, 12, 10), dt.date(2025, 12, 11), dt.date(2026, 1, 1)]
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "country": [countries[i % len(countries)] for i in range(n)],
            "event_date": [days[(i // len(countries)) % len(days)] for i in range(n)],
            "value": [float(i) for i in range(start, start + n)],
        },
        schema=SCHEMA,
    )


def sorted_rows(table: pa.Table, key: str = "id") -> list[dict]:
    """Rows as dicts sorted by ``key`` (order-independent comparison)."""
    return sorted(table.to_pylist(), key=lambda r: (r[key] is None, r[key]))


def fail_write(ns: Any, data: pa.Table) -> None:
    """A write whose tables are written and whose manifest commit never happens."""
    import pytest

    from helpers.faults import before_manifest_commit

    def boom(_: Any) -> None:
        raise RuntimeError("injected failure before the manifest commit")

    with before_manifest_commit(ns, boom), pytest.raises(RuntimeError, match="injected"):
        ns.write(data)


def link_data_file(root: str, partition: dict, outside: Path) -> Path:
    """Replace the first data file of ``partition``'s pinned version (a row of
    ``ns.inspect.partitions()``) by a link to a copy of it in ``outside`` (the rows are the
    same: only the link is wrong); the link."""
    table = Path(root) / partition["location"]
    ds = lance.dataset(str(table), version=partition["read_version"])
    name = ds.get_fragments()[0].metadata.files[0].path
    outside.mkdir(parents=True, exist_ok=True)
    shutil.copy(table / "data" / name, outside / name)
    (table / "data" / name).unlink()
    (table / "data" / name).symlink_to(outside / name)
    return table / "data" / name


def file_hashes(root: str | Path) -> dict[str, str]:
    """Every file under ``root`` (links not followed) with a hash of its content."""
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                files[os.path.relpath(path, root)] = hashlib.sha1(fh.read()).hexdigest()
    return files


def fingerprint(root: str | Path) -> dict:
    """Everything a reader could observe: manifest version, rows, metadata, and file tree."""
    root = str(root)
    m = lance.dataset(os.path.join(root, "__manifest"))
    files = file_hashes(root)
    return {
        "manifest_version": m.version,
        "manifest_rows": sorted(m.to_table().to_pylist(), key=lambda r: r["object_id"]),
        "metadata": dict(m.metadata),
        "files": files,
    }
