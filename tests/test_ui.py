"""The example in the UI: what the example materialized into a persistent Dagster home is what
``dagster dev -w workspace.yaml`` (same ``DAGSTER_HOME`` and ``DLP_ROOT``) shows, through the
webserver's own GraphQL endpoint on 127.0.0.1; the code location loads without warnings and
with the schedules the README names."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parents[1]
DEV = [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1"]

QUERY = """
{
  assetNodes(assetKeys: [{path: ["planes"]}, {path: ["airlines"]}]) {
    assetKey { path }
    assetMaterializations(limit: 1) { runId metadataEntries { label } }
  }
  repositoriesOrError {
    ... on RepositoryConnection { nodes { schedules { name } sensors { name } } }
  }
  workspaceOrError {
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError { __typename ... on PythonError { message } }
      }
    }
  }
}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["data"]


def _materialize_reference_tables(home: Path, root: Path) -> None:
    """What the example's reference-table run does, into the persistent home (no Spark)."""
    code = (
        "import sys, dagster as dg; sys.path.insert(0, sys.argv[1]); import definitions as d\n"
        "with dg.DagsterInstance.get() as i:\n"
        "    assert dg.materialize(d.ASSETS, selection=[d.planes, d.airlines], instance=i,"
        " resources=d.RESOURCES).success\n"
    )
    env = {**os.environ, "DAGSTER_HOME": str(home), "DLP_ROOT": str(root)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_dagster_dev_shows_what_the_example_materialized(tmp_path):
    home, root = tmp_path / ".dagster", tmp_path / "pipeline"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    _materialize_reference_tables(home, root)
    with dg.DagsterInstance.local_temp(str(home)) as instance:
        runs = {r.run_id for r in instance.get_runs()}

    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "DLP_ROOT": str(root)}
    log = tmp_path / "dev.log"
    with log.open("w") as out:
        dev = subprocess.Popen(
            [*DEV, "-p", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        data = None
        deadline = time.monotonic() + 75
        while time.monotonic() < deadline:
            try:
                data = _graphql(port, QUERY)
                entries = data["workspaceOrError"]["locationEntries"]
                if entries and entries[0]["locationOrLoadError"]:
                    break
            except (OSError, KeyError, TypeError, ValueError):
                pass
            time.sleep(1)
        assert data is not None, log.read_text()[-3000:]
        [location] = data["workspaceOrError"]["locationEntries"]
        assert location["locationOrLoadError"]["__typename"] == "RepositoryLocation", location
        nodes = {tuple(n["assetKey"]["path"]): n for n in data["assetNodes"]}
        for key in [("planes",), ("airlines",)]:
            [mat] = nodes[key]["assetMaterializations"]
            assert mat["runId"] in runs  # the example's run, in the shared instance
            assert "lance/manifest_version" in {e["label"] for e in mat["metadataEntries"]}
        [repo] = data["repositoriesOrError"]["nodes"]
        schedules = {s["name"] for s in repo["schedules"]}
        assert {"daily_flights_schedule", "weather_schedule"} <= schedules
    finally:
        dev.send_signal(signal.SIGINT)
        try:
            dev.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
    text = log.read_text()
    project_warnings = [
        line
        for line in text.splitlines()
        if "Warning" in line and "SupersessionWarning" not in line and "dev_command" not in line
    ]
    # the only warning left is Dagster's own note that `dagster dev` is superseded by `dg dev`
    assert project_warnings == [], text[-3000:]


def test_example_script_creates_the_dagster_home_the_readme_names(tmp_path):
    """``run_example.sh`` passes ``$ROOT/.dagster`` (or DAGSTER_HOME) and run_pipeline.py creates
    it with a dagster.yaml, so ``DAGSTER_HOME=$PWD/.dagster dagster dev`` works afterwards."""
    script = (ROOT / "scripts" / "run_example.sh").read_text()
    assert 'DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/.dagster}"' in script
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import run_pipeline
    finally:
        sys.path.remove(str(ROOT / "examples"))
    home = tmp_path / ".dagster"
    saved = os.environ.get("DAGSTER_HOME")
    try:
        run_pipeline._prepare_home(str(home))
        assert os.environ["DAGSTER_HOME"] == str(home)
    finally:
        if saved is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = saved
    assert (home / "dagster.yaml").is_file()
    with dg.DagsterInstance.local_temp(str(home)) as instance:
        assert instance.get_runs() == []
