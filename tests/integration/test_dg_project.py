"""The example is a ``dg`` project (``[tool.dg]`` in pyproject.toml, package ``nyc_flights``):
``dg list defs`` and ``dg check defs``, run as a user runs them from the repository root, load the
assets, the component's checks, sensors and maintenance job, the Spark resource and the
schedules; and the example package is not part of the library's wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.ui
ASSETS = {
    "flights": {"lance", "spark"},
    "weather": {"lance", "pandas"},
    "planes": {"lance"},
    "airlines": {"lance"},
    "flight_delays_enriched": {"lance", "spark"},
    "monthly_carrier_delays": {"lance", "spark"},
}
CHECKS = [
    "lance_schema_consistency",
    "lance_read_version_consistency",
    "lance_partition_integrity",
    "lance_dagster_coverage",
]
# only the asset whose metadata declares lance/indexes gets the index coverage check
INDEXED = {"flight_delays_enriched": ["lance_index_coverage"]}


def _dg(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DLP_ROOT": str(tmp_path / "lake"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "VIRTUAL_ENV": sys.prefix,  # dg checks the active environment is the project's
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return subprocess.run(
        [str(BIN / "dg"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_dg_list_defs_shows_the_example(tmp_path):
    done = _dg("list", "defs", "--json", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    defs = json.loads(done.stdout)
    assets = {a["asset_key"]: a for a in defs["assets"]}
    assert {k: set(a["kinds"]) for k, a in assets.items()} == ASSETS
    assert all(a["group_name"] == "nyc" for a in assets.values())
    # declared by the component in defs/lake/defs.yaml
    assert {a["source"].split(":")[0] for a in assets.values()} == {
        "nyc_flights/defs/lake/defs.yaml"
    }
    checks = sorted(c["key"] for c in defs["asset_checks"])
    assert checks == sorted(f"{a}:{c}" for a in ASSETS for c in CHECKS + INDEXED.get(a, []))
    assert str(tmp_path / "lake" / "flights") in next(
        c["description"] for c in defs["asset_checks"] if c["asset_key"] == "flights"
    )  # DLP_ROOT, through the component's {{ lake_root }}
    assert {j["name"] for j in defs["jobs"]} == {"flights_job", "weather_job", "lance_maintenance"}
    assert {s["name"]: s["cron_schedule"] for s in defs["schedules"]} == {
        "daily_flights_schedule": "0 5 * * *",
        "weather_schedule": "5 * * * *",
        "lance_maintenance_nightly": "0 3 * * *",
    }
    sensors = {s["name"] for s in defs["sensors"]}
    assert {"lance_external_changes", "lance_schema_evolution"} <= sensors
    resources = {r["name"]: r["type"].rpartition(".")[2] for r in defs["resources"]}
    assert resources == {
        "io_manager": "LancePartitionedIOManager",
        "lance": "LancePartitionedResource",
        "pyspark": "PySparkResource",
    }


def test_dg_check_defs_passes(tmp_path):
    done = _dg("check", "defs", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All component YAML validated successfully." in done.stdout
    assert "All definitions loaded successfully." in done.stdout
    assert not (tmp_path / "lake").exists()  # loading the definitions writes nothing


def test_the_project_configuration_and_the_wheel():
    """``dg`` finds the project from pyproject.toml; the wheel ships only the library."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["dg"]["directory_type"] == "project"
    project = config["tool"]["dg"]["project"]
    assert project["root_module"] == "nyc_flights"
    assert project["code_location_target_module"] == "nyc_flights.definitions"
    assert (ROOT / "nyc_flights" / "definitions.py").is_file()
    assert (ROOT / "nyc_flights" / "defs" / "lake" / "defs.yaml").is_file()
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == [
        "dagster_lance_partitioned*"
    ]
