"""Creating a namespace never replaces one: of racing creators exactly one wins, the others get
``NamespaceExistsError`` (or, with ``exist_ok``, the winner's namespace), and no write is lost."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import NamespaceExistsError
from dagster_lance_partitioned.core.manifest.layout import base_manifest_schema
from dagster_lance_partitioned.core.manifest.store import ManifestStore
from dagster_lance_partitioned.core.ops.hive import import_hive

FIELDS = [PartitionField.identity("country")]


def test_a_late_create_commit_does_not_replace_a_written_namespace(tmp_path: Path) -> None:
    """B passed its existence check before A created and wrote; B's commit comes after."""
    root = tmp_path / "ns"
    late = ManifestStore(str(root))  # B, between its existence check and its commit
    a = PartitionedNamespace.create(root, SCHEMA, FIELDS)
    a.write(sample_table(9))
    before = fingerprint(root)
    rows = pa.Table.from_pylist(
        [{"object_id": "v1", "object_type": "namespace"}], schema=base_manifest_schema()
    )
    with pytest.raises(NamespaceExistsError):
        late.create(rows, {"schema": "{}"})
    after = fingerprint(root)
    assert after["manifest_rows"] == before["manifest_rows"]
    assert after["metadata"] == before["metadata"]
    assert PartitionedNamespace.open(root).count_rows() == 9


def test_create_on_an_existing_namespace(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    PartitionedNamespace.create(root, SCHEMA, FIELDS).write(sample_table(6))
    before = fingerprint(root)
    with pytest.raises(NamespaceExistsError, match="already exists"):
        PartitionedNamespace.create(root, SCHEMA, [PartitionField.identity("id")])
    ns = PartitionedNamespace.create(root, SCHEMA, [PartitionField.identity("id")], exist_ok=True)
    assert [f.field_id for f in ns.current_spec.fields] == ["country"]  # the existing one
    assert ns.count_rows() == 6
    assert fingerprint(root) == before


def test_import_hive_never_replaces_a_namespace(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    PartitionedNamespace.create(root, SCHEMA, FIELDS).write(sample_table(6))
    before = fingerprint(root)
    with pytest.raises(NamespaceExistsError):
        import_hive(str(root))
    assert fingerprint(root) == before


_CREATOR = textwrap.dedent(
    """
    import json, sys, time
    import pyarrow as pa
    from dagster_lance_partitioned import PartitionedNamespace, PartitionField
    from dagster_lance_partitioned.core.errors import NamespaceExistsError
    sys.path.insert(0, sys.argv[4])
    from helpers.data import SCHEMA, sample_table

    root, me, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    while time.time() < start:
        time.sleep(0.001)
    won = True
    try:
        ns = PartitionedNamespace.create(root, SCHEMA, [PartitionField.identity("country")])
    except NamespaceExistsError:
        won = False
        ns = PartitionedNamespace.create(
            root, SCHEMA, [PartitionField.identity("country")], exist_ok=True
        )
    ns.write(sample_table(5, start=1000 * me))
    print(json.dumps({"me": me, "won": won}))
    """
)


def _race(root: Path, n: int) -> list[dict]:
    start = time.time() + 2.5
    tests = str(Path(__file__).resolve().parents[1])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CREATOR, str(root), str(i), str(start), tests],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-2000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


@pytest.mark.parametrize("trial", range(2))
def test_racing_creators_one_wins_and_every_write_lands(tmp_path: Path, trial: int) -> None:
    n = 6
    results = _race(tmp_path / "ns", n)
    assert sum(r["won"] for r in results) == 1
    ids = sorted(PartitionedNamespace.open(tmp_path / "ns").to_table().column("id").to_pylist())
    assert ids == sorted(1000 * i + k for i in range(n) for k in range(5))
