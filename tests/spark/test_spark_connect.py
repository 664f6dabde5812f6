"""Spark Connect DataFrames through the IO manager: a local Connect server (in a subprocess, see
``helpers/connect_proc.py``) writes two daily partitions and a downstream asset loads one of
them."""

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from dagster_lance_partitioned import PartitionedNamespace

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def test_connect_dataframes_are_written_and_loaded_per_partition(tmp_path):
    root, out = tmp_path / "lake", tmp_path / "out.json"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [sys.executable, str(HELPERS / "connect_proc.py"), str(root), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    report = json.loads(out.read_text())
    assert report["session"].startswith("pyspark.sql.connect")
    for run in report["runs"]:
        day = dt.date.fromisoformat(run["key"])
        assert run["success"]
        assert run["events"]["readings"] == {"lance/engine": "spark", "rows": 10 + day.day}
        assert run["events"]["per_sensor"] == {"lance/engine": "spark", "rows": 3}

    readings = PartitionedNamespace.open(root / "readings")
    days = sorted(v for p in readings.inspect.partitions() for v in p["values"].values())
    assert days == [dt.date(2024, 3, 2), dt.date(2024, 3, 3)]
    assert readings.count_rows() == 12 + 13
    counts = PartitionedNamespace.open(root / "per_sensor").to_table()
    by_day = {}
    for row in counts.to_pylist():
        by_day.setdefault(row["day"], {})[row["sensor"]] = row["count"]
    for day in (2, 3):  # each downstream run saw exactly its own day's rows
        n = 10 + day
        assert by_day[dt.date(2024, 3, day)] == {f"s{s}": len(range(s, n, 3)) for s in range(3)}
