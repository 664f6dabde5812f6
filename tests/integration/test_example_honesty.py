"""The examples say what they do: ``run_pipeline`` says when it wipes the instance's history of
the example's assets, and which sensors and schedules start stopped and how to start them (the
printed command is run here against a real instance); ``flights_core`` resets only a root it
created. Real Dagster instances in temporary homes, real runs, real namespaces."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import dagster as dg
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
pytestmark = pytest.mark.example
QUIET: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@pytest.fixture
def run_pipeline(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``examples/run_pipeline.py`` as a module (its functions, not its main)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(ROOT))
    import run_pipeline as module

    return module


@pytest.fixture
def defs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dg.Definitions:
    """The example project's definitions, storing under a temporary root."""
    monkeypatch.setenv("DLP_ROOT", str(tmp_path / "lake"))
    monkeypatch.syspath_prepend(str(ROOT))
    from nyc_flights.definitions import defs as load_definitions

    return load_definitions()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    (path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return path


@pytest.fixture
def instance(home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.local_temp(str(home)) as inst:
        yield inst


def test_the_reset_says_it_wipes_the_instance_history(run_pipeline, defs, instance, capsys):
    planes, airlines = dg.AssetKey("planes"), dg.AssetKey("airlines")
    result = dg.materialize(
        list(defs.assets or []),
        selection=[planes, airlines],
        instance=instance,
        resources=defs.resources,
        run_config=QUIET,
    )
    assert result.success
    capsys.readouterr()
    run_pipeline._forget_example_assets(defs, instance)
    said = capsys.readouterr().out
    assert said == (
        "wiped the Dagster instance's history of planes, airlines (materializations, "
        "observations, check results; runs stay listed): the storage was reset\n"
    )
    assert instance.get_latest_materialization_event(planes) is None
    assert not instance.has_asset_key(airlines)
    assert instance.get_run_by_id(result.run_id) is not None  # the run itself stays listed
    run_pipeline._forget_example_assets(defs, instance)  # nothing left to wipe: nothing said
    assert capsys.readouterr().out == ""


def test_the_stopped_sensors_are_named_with_a_command_that_starts_them(
    run_pipeline, defs, home, capsys
):
    run_pipeline._stopped_automation_hint(defs, str(home))
    said = capsys.readouterr().out.splitlines()
    assert f"DAGSTER_HOME={home}" in said[0]
    assert "`dagster sensor start -w workspace.yaml NAME`" in said[0]
    listed = {line.split()[1]: line.split()[0] for line in said[1:]}
    assert listed == {
        "default_automation_condition_sensor": "sensor",
        "lance_external_changes": "sensor",
        "lance_schema_evolution": "sensor",
        "daily_flights_schedule": "schedule",
        "weather_schedule": "schedule",
        "lance_maintenance_nightly": "schedule",
    }
    repo = defs.get_repository_def()  # and they do start stopped
    assert {s.name for s in repo.sensor_defs} == {n for n, k in listed.items() if k == "sensor"}
    assert all(s.default_status == dg.DefaultSensorStatus.STOPPED for s in repo.sensor_defs)
    assert all(s.default_status == dg.DefaultScheduleStatus.STOPPED for s in repo.schedule_defs)

    # the printed command, as a user runs it from the repository root
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DLP_ROOT": os.environ["DLP_ROOT"],
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    name = "default_automation_condition_sensor"
    for command in (["sensor", "start", name], ["sensor", "list"]):
        done = subprocess.run(
            [sys.executable, "-m", "dagster", *command, "-w", "workspace.yaml"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"Sensor: {name} [RUNNING]" in done.stdout
    assert "Sensor: lance_external_changes [STOPPED]" in done.stdout


def _core_example() -> dict[str, Any]:
    """``examples/flights_core.py``'s functions."""
    return runpy.run_path(str(EXAMPLES / "flights_core.py"), run_name="flights_core")


def test_flights_core_refuses_a_root_it_did_not_create(tmp_path, monkeypatch):
    root = tmp_path / "precious"
    root.mkdir()
    (root / "data.txt").write_text("not the example's")
    script = EXAMPLES / "flights_core.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--root", str(root)])
    with pytest.raises(SystemExit) as stopped:
        runpy.run_path(str(script), run_name="__main__")
    assert "did not create" in str(stopped.value.code)
    assert "nothing was deleted" in str(stopped.value.code)
    assert (root / "data.txt").read_text() == "not the example's"
    # a regular file given as the root is not deleted either
    plain = tmp_path / "file.txt"
    plain.write_text("mine")
    with pytest.raises(SystemExit):
        _core_example()["prepare_root"](str(plain))
    assert plain.read_text() == "mine"


def test_flights_core_resets_only_what_it_marked(tmp_path, capsys):
    example = _core_example()
    root = tmp_path / "flights"
    example["prepare_root"](str(root))  # missing: nothing to do
    root.mkdir()
    example["prepare_root"](str(root))  # empty: nothing to do
    assert root.is_dir()
    (root / "old.lance").mkdir()
    example["mark_root"](str(root))
    assert (root / ".dlp-example").is_file()
    capsys.readouterr()
    example["prepare_root"](str(root))
    assert (
        capsys.readouterr().out == f"resetting {root} (created by an earlier run of this example)\n"
    )
    assert not root.exists()
