"""The example in the UI: what the example materialized into a persistent Dagster home is what
``dg dev`` (the example is a ``dg`` project) and ``dagster dev -w workspace.yaml`` (same
``DAGSTER_HOME`` and ``DLP_ROOT``) show, through the webserver's own GraphQL endpoint on
127.0.0.1; the code location loads without warnings, with the component's assets, checks and
sensors and the schedules the README names."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LOCAL = ["-h", "127.0.0.1"]
pytestmark = pytest.mark.ui
DEV = {  # the README's two ways to open the example in the UI
    "dg dev": [str(BIN / "dg"), "dev", *LOCAL],
    "dagster dev -w workspace.yaml": [
        sys.executable,
        "-m",
        "dagster",
        "dev",
        "-w",
        "workspace.yaml",
        *LOCAL,
    ],
}

ASSETS = [
    "flights",
    "weather",
    "planes",
    "airlines",
    "flight_delays_enriched",
    "monthly_carrier_delays",
]
CHECKS = {
    "lance_schema_consistency",
    "lance_read_version_consistency",
    "lance_partition_integrity",
    "lance_dagster_coverage",
}
INDEXED = {"flight_delays_enriched"}  # declares lance/indexes: also lance_index_coverage

QUERY = """
{
  assetNodes {
    assetKey { path }
    kinds
    assetChecksOrError { ... on AssetChecks { checks { name } } }
    assetMaterializations(limit: 1) { runId metadataEntries { label } }
  }
  repositoriesOrError {
    ... on RepositoryConnection {
      nodes { schedules { name } sensors { name } jobs { name } }
    }
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
        "import sys, dagster as dg; sys.path.insert(0, sys.argv[1])\n"
        "from nyc_flights.definitions import defs\n"
        "d = defs()\n"
        "with dg.DagsterInstance.get() as i:\n"
        "    assert dg.materialize(list(d.assets), selection=['planes', 'airlines'], instance=i,"
        " resources=d.resources).success\n"
    )
    env = {**os.environ, "DAGSTER_HOME": str(home), "DLP_ROOT": str(root)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@contextlib.contextmanager
def _dev_server(command: str, home: Path, root: Path, log: Path) -> Iterator[tuple[int, dict]]:
    """``command`` (one of :data:`DEV`) serving the example on ``home`` and ``root``: yields its
    port and the first answer of :data:`QUERY` once the code location has loaded (or failed
    to); stopped with SIGINT on the way out, then checked for warnings of the project."""
    port = _free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DLP_ROOT": str(root),
        "VIRTUAL_ENV": sys.prefix,  # dg checks the active environment is the project's
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    with log.open("w") as out:
        dev = subprocess.Popen(
            [*DEV[command], "-p", str(port)],
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
        yield port, data
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
        if "Warning" in line
        and "SupersessionWarning" not in line
        and "dev_command" not in line
        and "SparkDeclarativePipelineScaffolder" not in line
    ]
    # the only warnings left are Dagster's own: `dagster dev` is superseded by `dg dev`; and
    # `dg`, checking the defs.yaml files before it starts, lists the installed component
    # libraries and so may instantiate dagster-spark's preview scaffolder (PreviewWarning)
    assert project_warnings == [], text[-3000:]


@pytest.mark.parametrize("command", list(DEV))
def test_dev_server_shows_what_the_example_materialized(tmp_path, command):
    home, root = tmp_path / ".dagster", tmp_path / "pipeline"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    _materialize_reference_tables(home, root)
    with dg.DagsterInstance.local_temp(str(home)) as instance:
        runs = {r.run_id for r in instance.get_runs()}

    with _dev_server(command, home, root, tmp_path / "dev.log") as (_, data):
        [location] = data["workspaceOrError"]["locationEntries"]
        assert location["name"] == "nyc_flights"
        assert location["locationOrLoadError"]["__typename"] == "RepositoryLocation", location
        nodes = {"/".join(n["assetKey"]["path"]): n for n in data["assetNodes"]}
        assert set(nodes) == set(ASSETS)
        for key in ["planes", "airlines"]:
            [mat] = nodes[key]["assetMaterializations"]
            assert mat["runId"] in runs  # the example's run, in the shared instance
            assert "lance/manifest_version" in {e["label"] for e in mat["metadataEntries"]}
        for key, node in nodes.items():
            assert "lance" in node["kinds"], key  # set by the component
            checks = {c["name"] for c in node["assetChecksOrError"]["checks"]}
            expected = CHECKS | ({"lance_index_coverage"} if key in INDEXED else set())
            assert checks == expected, key
        [repo] = data["repositoriesOrError"]["nodes"]
        assert {s["name"] for s in repo["schedules"]} == {
            "daily_flights_schedule",
            "weather_schedule",
            "lance_maintenance_nightly",
        }
        sensors = {s["name"] for s in repo["sensors"]}
        assert {"lance_external_changes", "lance_schema_evolution"} <= sensors
        assert {"flights_job", "weather_job", "lance_maintenance"} <= {
            j["name"] for j in repo["jobs"]
        }


# what the UI shows on each asset: its checks' state against its latest materialization
CHECK_STATES = """
{
  assetNodes {
    assetKey { path }
    assetChecksOrError {
      ... on AssetChecks { checks { name executionForLatestMaterialization { status } } }
    }
  }
}
"""


def test_when_the_example_ends_the_ui_shows_the_checks_it_printed(tmp_path):
    """``examples/run_pipeline.py`` (what ``run_example.sh`` runs; two days, Spark in local
    mode), then ``dagster dev`` on its instance: every check the script printed as passed is
    shown passed on its asset, none "Not evaluated" -- also on ``flights`` and
    ``flight_delays_enriched``, which the external-change demonstration materializes again."""
    home, root = tmp_path / ".dagster", tmp_path / "pipeline"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env["DLP_SOURCE_DIR"] = str(tmp_path / "source")
    env.pop("DAGSTER_HOME", None)
    args = ["--root", str(root), "--days", "2", "--dagster-home", str(home)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_pipeline.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    printed = re.search(r"^asset checks: (\d+) passed, 0 failed", proc.stdout, re.M)
    assert printed is not None, proc.stdout

    with _dev_server("dagster dev -w workspace.yaml", home, root, tmp_path / "dev.log") as (
        port,
        _,
    ):
        data = _graphql(port, CHECK_STATES)
    shown = {
        "/".join(n["assetKey"]["path"]): {
            c["name"]: (c["executionForLatestMaterialization"] or {}).get("status")
            for c in n["assetChecksOrError"]["checks"]
        }
        for n in data["assetNodes"]
    }
    assert set(shown) == set(ASSETS)
    not_passed = {
        f"{asset}:{check}": status
        for asset, checks in shown.items()
        for check, status in checks.items()
        if status != "SUCCEEDED"
    }
    assert not_passed == {}, not_passed  # None: "Not evaluated" on the latest materialization
    assert sum(len(c) for c in shown.values()) == int(printed.group(1))


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
