"""Lance's Rust log stays quiet: a search across the indexed partitions of a namespace prints no
``WARN`` line of Lance (its per-table ``disable_scoring_autoprojection`` deprecation notice and
Rust module paths) on stderr, because importing the package sets ``LANCE_LOG=error``; a
``LANCE_LOG`` the user set is kept. Real searches in fresh Python processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SEARCH = """
import sys
import numpy as np
import pyarrow as pa
from dagster_lance_partitioned import PartitionedNamespace, PartitionField

rng = np.random.default_rng(0)
n = 6000
vectors = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8)
table = pa.table({"id": np.arange(n), "g": np.arange(n) % 3, "v": vectors})
ns = PartitionedNamespace.create(sys.argv[1], table.schema, [PartitionField.identity("g")])
ns.write(table)
ns.create_index("v", "IVF_PQ", num_partitions=4, num_sub_vectors=2, min_rows=256)
query = rng.random(8, dtype=np.float32)
hits = ns.search(query, column="v", k=3, columns=["id"], filter="id > 5", refine_factor=10)
exact = ns.search(query, column="v", k=3, columns=["id"], use_index=False)
print(hits.num_rows, exact.num_rows)
"""


def _search(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "LANCE_LOG"}
    proc = subprocess.run(
        [sys.executable, "-c", SEARCH, str(tmp_path / "ns")],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["3", "3"]
    return proc


def test_a_search_on_an_indexed_namespace_prints_no_lance_warnings(tmp_path):
    proc = _search(tmp_path)
    assert "WARN" not in proc.stderr, proc.stderr[-3000:]
    assert "lance::" not in proc.stderr


@pytest.mark.parametrize("level", ["warn", "WARN", "debug"])
def test_a_lance_log_the_user_set_is_kept(level):
    environ = {k: v for k, v in os.environ.items() if k != "LANCE_LOG"}
    code = "import os, dagster_lance_partitioned; print(os.environ.get('LANCE_LOG'))"
    for env, want in (({**environ, "LANCE_LOG": level}, level), (environ, "error")):
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.strip() == want
