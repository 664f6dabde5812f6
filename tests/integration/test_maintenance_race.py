"""Maintenance with zero bounds racing writer processes never breaks the namespace
(``bench/bench_maintenance_race.py``; figures in docs/explanation/reliability.md).

The default run is short (local disk, 2 writers, 3 rounds; the S3-compatible server, 2 writers,
2 rounds); the acceptance soak (4 writers, 20 rounds, local disk and the S3-compatible server) is
``pytest -m slow tests/integration/test_maintenance_race.py``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "bench_maintenance_race.py"
_spec = importlib.util.spec_from_file_location("bench_maintenance_race", _PATH)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_maintenance_race"] = bench
_spec.loader.exec_module(bench)


def _check(rep: object) -> None:
    text = bench.markdown([rep])
    print(text)
    assert rep.reads_failed == [], text  # opened and read after every round
    assert rep.rows_lost == 0 and rep.rows_extra == 0, text
    assert rep.unreadable_tables == 0, text
    assert rep.raw_errors == 0, rep.ops_failed
    assert sum(rep.ops_ok.values()) > 0, text  # the writers did work beside maintenance
    assert rep.table_versions_removed > 0, text  # and maintenance deleted while they did


@pytest.mark.parametrize(
    ("store", "writers", "rounds"),
    [
        pytest.param("local", 2, 3, id="local"),
        pytest.param("s3", 2, 2, id="s3", marks=pytest.mark.object_store),
    ],
)
def test_maintenance_beside_writers_short(
    tmp_path: Path, store: str, writers: int, rounds: int
) -> None:
    _check(bench.run(store, writers, rounds, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.object_store)])
def test_maintenance_beside_writers_soak(tmp_path: Path, store: str) -> None:
    _check(bench.run(store, 4, 20, tmp_path))
