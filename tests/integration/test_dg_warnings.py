"""No warning of ours in ``dg check defs`` nor in ``dg dev`` while the project's sensors tick.

The one warning every ``dg`` command prints, ``PreviewWarning: Class
SparkDeclarativePipelineScaffolder is currently in preview``, is Dagster's: the scaffolder belongs
to ``dagster-spark`` (installed with ``dagster-pyspark``), and ``dg`` instantiates the scaffolder
of every installed component library. The component of this package has a scaffolder that warns
about nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import dagster as dg
import pytest
from dagster.components.scaffold.scaffold import get_scaffolder

from dagster_lance_partitioned.orchestration.component import LancePartitionedComponent

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DAGSTERS = "SparkDeclarativePipelineScaffolder"  # the preview warning of dagster-spark
pytestmark = pytest.mark.ui


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return {
        **os.environ,
        "DLP_ROOT": str(tmp_path / "lake"),
        "DAGSTER_HOME": str(home),
        "VIRTUAL_ENV": sys.prefix,  # dg checks the active environment is the project's
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _warnings_in(text: str) -> list[str]:
    """Lines of ``text`` that report a Python warning or a WARNING log record."""
    return [
        line
        for line in text.splitlines()
        if "Warning" in line or " - WARNING - " in line or "warnings.warn" in line
    ]


def test_the_scaffolder_preview_warning_is_dagster_sparks(tmp_path):
    done = subprocess.run(
        [str(BIN / "dg"), "check", "defs"],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = _warnings_in(done.stdout + done.stderr)
    assert all(DAGSTERS in line for line in found), found  # nothing but Dagster's own
    # it comes from dagster-spark, a Dagster package, not from this one
    from dagster_spark.components.spark_declarative_pipeline.scaffolder import (
        SparkDeclarativePipelineScaffolder,
    )

    assert SparkDeclarativePipelineScaffolder.__module__.startswith("dagster_spark.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ours: instantiating the scaffolder warns about nothing
        ours = get_scaffolder(LancePartitionedComponent)
    assert type(ours).__module__ == "dagster_lance_partitioned.orchestration.component"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_dg_dev_with_every_sensor_running_logs_no_warning_of_ours(tmp_path):
    """The sensors started as the README says, then ``dg dev`` until each has ticked."""
    env = _env(tmp_path)
    start = subprocess.run(
        [sys.executable, "-m", "dagster", "sensor", "start", "--start-all", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert start.returncode == 0, start.stderr[-3000:]
    log = tmp_path / "dev.log"
    with log.open("w") as out:
        dev = subprocess.Popen(
            [str(BIN / "dg"), "dev", "-h", "127.0.0.1", "-p", str(_free_port())],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    ticked = [
        "Finished auto-materialization tick for default_automation_condition_sensor",
        "Checking for new runs for sensor: lance_external_changes",
        "Checking for new runs for sensor: lance_schema_evolution",
    ]
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not all(t in log.read_text() for t in ticked):
            assert dev.poll() is None, log.read_text()[-3000:]
            time.sleep(2)
        time.sleep(5)  # what each tick logs after it started
    finally:
        dev.send_signal(signal.SIGINT)
        try:
            dev.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
    text = log.read_text()
    assert all(t in text for t in ticked), text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    found = [line for line in _warnings_in(text) if DAGSTERS not in line]
    assert found == [], found
    with dg.DagsterInstance.local_temp(env["DAGSTER_HOME"]) as instance:
        assert instance.get_runs() == []  # nothing to do on empty storage: no run launched
