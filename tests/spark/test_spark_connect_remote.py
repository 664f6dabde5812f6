"""A Spark Connect server that cannot see the Dagster process's files (its own temp dirs, and the
client's temp dir hidden from it by a private mount, as on another machine): Connect DataFrames
still materialize through ``LancePartitionedIOManager`` with their full metadata, and
``write_dataframe`` reports what it committed, because the commit result travels through the
namespace's manifest commit, not through a local file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.spark import SparkProcess, spark_env, start_connect_server

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.manifest.store import ManifestStore

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def _hiding_wrapper(hidden: Path) -> list[str] | None:
    """A command prefix running a process in a private mount namespace in which ``hidden`` is
    an empty tmpfs (None when this machine cannot do that)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    marker = hidden / ".client-only"
    marker.write_text("x")
    script = f'mount -t tmpfs tmpfs "{hidden}" && test ! -e "{marker}" && exec "$@"'
    for prefix in ([unshare, "--mount"], [unshare, "--user", "--map-root-user", "--mount"]):
        probe = subprocess.run([*prefix, "sh", "-c", script, "sh", "true"], capture_output=True)
        if probe.returncode == 0:
            return [*prefix, "sh", "-c", script, "sh"]
    return None


@pytest.fixture(scope="module")
def remote(tmp_path_factory) -> Iterator[tuple[str, Path, bool]]:
    """A Connect server (local[2]) with its own temp dirs; the client's temp dir is hidden from
    it when the machine allows private mounts. Yields (URL, client temp dir, hidden)."""
    base = tmp_path_factory.mktemp("connect-remote")
    client_tmp = base / "client-tmp"
    client_tmp.mkdir()
    wrapper = _hiding_wrapper(client_tmp)
    server: SparkProcess
    server, url = start_connect_server(
        "connect-remote", "local[2]", base / "logs", base / "server-tmp", wrapper=wrapper or []
    )
    try:
        yield url, client_tmp, wrapper is not None
    finally:
        server.stop()


def test_connect_server_without_the_clients_files_materializes_with_full_metadata(remote, tmp_path):
    url, client_tmp, hidden = remote
    if not hidden:
        pytest.skip("cannot hide the client's temp dir from the server (no private mounts)")
    root, out = tmp_path / "lake", tmp_path / "out.json"
    env = spark_env(client_tmp)
    proc = subprocess.run(
        [sys.executable, str(HELPERS / "connect_proc.py"), str(root), str(out), url],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    report = json.loads(out.read_text())
    assert report["session"].startswith("pyspark.sql.connect")
    readings = PartitionedNamespace.open(root / "readings")
    for run in report["runs"]:
        assert run["success"], run
        meta = run["events"]["readings"]
        day = int(run["key"][-2:])
        assert meta["rows"] == meta["dagster/partition_row_count"] == 10 + day
        assert meta["lance/engine"] == "spark"
        assert meta["lance/partitions_written"] == 1
        assert meta["lance/bytes_written"] > 0
        version = meta["lance/manifest_version"]
        # the recorded read versions are the ones that manifest version registered
        at = PartitionedNamespace.open(readings.uri, version=version)
        pins = {str(p["read_version"]) for p in at.inspect.partitions()}
        recorded = {str(v) for v in meta["lance/read_versions"].values()}
        assert len(recorded) == 1 and recorded <= pins
        assert run["events"]["per_sensor"]["rows"] == 3
    # one data commit per run: no retry wrote anything twice
    assert readings.count_rows() == 12 + 13
    store = ManifestStore(readings.uri)
    ops = [
        (store.commit_properties(v) or {}).get("operation") for v in range(1, readings.version + 1)
    ]
    assert ops.count("write") == 2

    direct = report["direct"]
    assert direct["result"] is not None, "write_dataframe returned None after committing"
    assert direct["result"]["manifest_version"] == direct["manifest_version"]
    assert direct["result"]["rows"] == 1000
    assert direct["result"]["bytes"] > 0
    assert direct["result"]["read_versions"] == direct["read_versions"]
