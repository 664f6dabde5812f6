"""The Spark session shared by the Spark tests (local[2], one per test session), a table with a
column of every type, and Spark processes of their own: a standalone master and workers, and
Spark Connect servers (all on 127.0.0.1, started from the pyspark package, stopped by PID).

``tests/conftest.py`` registers the session fixture, named ``spark``, for every test folder:
all tests asking for it share the one SparkSession."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyspark
import pytest
from pyspark.sql import SparkSession

from dagster_lance_partitioned.spark import register
from helpers.data import sorted_rows


@pytest.fixture(scope="session", name="spark")
def spark_session() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("dagster-lance-partitioned-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


UTC = dt.UTC


def every_type_table() -> pa.Table:
    """One column of every type the core supports, with NULLs (also in partition columns)."""
    ts = [dt.datetime(2025, 12, 10, 1, 2, 3, 456789), None, dt.datetime(1960, 1, 1)]
    ts += [dt.datetime(2025, 1, 1)]
    utc = [dt.datetime(2025, 12, 10, 1, 2, 3, tzinfo=UTC), None]
    utc += [dt.datetime(2025, 12, 11, tzinfo=UTC), dt.datetime(2025, 12, 10, 23, 59, tzinfo=UTC)]
    ny = [dt.datetime(2025, 12, 10, 1, 2, 3, 456000, tzinfo=UTC), None]
    ny += [dt.datetime(1960, 1, 1, tzinfo=UTC), dt.datetime(2025, 7, 1, tzinfo=UTC)]
    nested = pa.struct(
        [("a", pa.int32()), ("b", pa.list_(pa.utf8())), ("c", pa.struct([("x", pa.float64())]))]
    )
    d = decimal.Decimal
    columns = {
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "country": pa.array(["US", None, "FR", None], pa.utf8()),
        "i8": pa.array([-1, None, 127, 0], pa.int8()),
        "i16": pa.array([1, 2, None, -32768], pa.int16()),
        "i32": pa.array([1, 2, 3, None], pa.int32()),
        "u8": pa.array([255, 0, None, 1], pa.uint8()),
        "u16": pa.array([65535, 0, None, 1], pa.uint16()),
        "u32": pa.array([4294967295, 0, None, 1], pa.uint32()),
        "u64": pa.array([18446744073709551615, 0, None, 1], pa.uint64()),
        "f16": pa.array(np.array([1.5, 2.0, 0, 3], dtype=np.float16), pa.float16()),
        "f32": pa.array([1.5, None, float("nan"), -0.0], pa.float32()),
        "f64": pa.array([1.5, None, float("inf"), 2.25], pa.float64()),
        "b": pa.array([True, False, None, True], pa.bool_()),
        "s": pa.array(["é", "", None, "x'y"], pa.large_utf8()),
        "bin": pa.array([b"\x00\x01", b"", None, b"z"], pa.binary()),
        "lbin": pa.array([b"a", None, b"", b"b"], pa.large_binary()),
        "fbin": pa.array([b"abc", None, b"xyz", b"\x00\x00\x00"], pa.binary(3)),
        "d32": pa.array([dt.date(2025, 12, 10), None, dt.date(1969, 12, 31), None], pa.date32()),
        "d64": pa.array([dt.date(2025, 12, 10), None, dt.date(1970, 1, 1), None], pa.date64()),
        "ts": pa.array(ts, pa.timestamp("us")),
        "ts_ns": pa.array(ts, pa.timestamp("ns")),
        "ts_ny": pa.array(ny, pa.timestamp("ms", tz="America/New_York")),
        "ts_utc": pa.array(utc, pa.timestamp("us", tz="UTC")),
        "dec": pa.array([d("12.34"), None, d("-0.01"), d("99999999.99")], pa.decimal128(10, 2)),
        "dec38": pa.array(
            [d("1234567890123456789012345678.0123456789"), None, d("0"), d("-1.5")],
            pa.decimal128(38, 10),
        ),
        "t64": pa.array([dt.time(1, 2, 3, 4), None, dt.time(23, 59, 59, 999999), None]),
        "t32": pa.array([dt.time(1, 2, 3, 4000), None, dt.time(0), dt.time(12)], pa.time32("ms")),
        "dur": pa.array([dt.timedelta(days=1, microseconds=5), None, dt.timedelta(0), None]),
        "st": pa.array(
            [
                {"a": 1, "b": ["x", None], "c": {"x": 1.0}},
                None,
                {"a": None, "b": None, "c": None},
                {"a": 3, "b": [], "c": {"x": None}},
            ],
            nested,
        ),
        "li": pa.array([[1, 2], None, [], [None]], pa.list_(pa.int64())),
        "lli": pa.array(
            [[{"k": "a", "v": 1}], None, [], [None]],
            pa.large_list(pa.struct([("k", pa.utf8()), ("v", pa.int16())])),
        ),
        "fsl": pa.array([[1.0, 2.0], None, [None, 3.0], [0.0, 0.0]], pa.list_(pa.float32(), 2)),
        "m": pa.array(
            [[("a", 1), ("b", None)], None, [], [("z", 3)]], pa.map_(pa.utf8(), pa.int64())
        ),
    }
    return pa.table(columns)


def norm(v):
    """A value comparable across Arrow and Spark representations (NaN, float16, decimals that
    hold integers such as uint64)."""
    if isinstance(v, np.floating):
        v = float(v)
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, decimal.Decimal) and v == v.to_integral_value():
        return int(v)
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [norm(x) for x in v]
    return v


def rows_of(table: pa.Table) -> list[dict]:
    return [norm(r) for r in sorted_rows(table)]


# -- Spark processes of the tests' own -----------------------------------------------------------
SPARK_HOME = Path(pyspark.__file__).resolve().parent
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(tmp: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a Spark process started by the tests (``tmp``: its temp dir)."""
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "384m",
        **extra,
    }
    for key in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE"):
        env.pop(key, None)
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return env


@dataclass
class SparkProcess:
    """A JVM the tests started (its log in ``log``)."""

    name: str
    proc: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def children(self) -> list[int]:
        """PIDs of the processes this one started (e.g. a worker's executor JVMs)."""
        out: list[int] = []
        try:
            for task in Path(f"/proc/{self.pid}/task").iterdir():
                out += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
        return out

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        """Stop the process (SIGKILL after ``timeout``), and the JVMs it started."""
        children = self.children()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for pid in children:
            _kill(pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def start_process(
    name: str, cmd: list[str], env: dict[str, str], logs: Path, wrapper: list[str] = ()
) -> SparkProcess:
    """Start ``cmd`` (prefixed by ``wrapper``) with its output in ``logs/<name>.log``."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([*wrapper, *cmd], env=env, stdout=fh, stderr=subprocess.STDOUT)
    return SparkProcess(name, proc, log)


def wait_for_port(process: SparkProcess, port: int, timeout: float = 180) -> None:
    """Wait until ``process`` listens on ``port`` (fails with its log if it exits first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.proc.poll() is not None:
            raise RuntimeError(
                f"{process.name} exited ({process.proc.returncode}):\n{process.tail()}"
            )
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{process.name} is not listening on {port}:\n{process.tail()}")


def start_connect_server(
    name: str,
    master: str,
    logs: Path,
    tmp: Path,
    conf: dict[str, str] | None = None,
    wrapper: list[str] = (),
) -> tuple[SparkProcess, str]:
    """A Spark Connect server on 127.0.0.1 for ``master`` whose temp dirs (TMPDIR,
    java.io.tmpdir, spark.local.dir) are ``tmp``; returns it and its ``sc://`` URL."""
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.local.dir": str(tmp),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        **(conf or {}),
    }
    cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, "--name", name]
    cmd += ["--class", CONNECT_SERVER_CLASS, "--driver-java-options", f"-Djava.io.tmpdir={tmp}"]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    env = spark_env(tmp)
    env["SPARK_DAEMON_MEMORY"] = "1g"  # a Connect server's driver heap comes from it
    cmd[1:1] = ["--driver-memory", "1g"]
    server = start_process(name, cmd, env, logs, wrapper)
    try:
        wait_for_port(server, port)
    except BaseException:
        server.stop()
        raise
    return server, f"sc://127.0.0.1:{port}"


@dataclass
class StandaloneCluster:
    """A Spark standalone master and workers (one JVM each, 1 core and 1 GiB per worker)."""

    logs: Path
    port: int = 0
    ui_port: int = 0
    master: SparkProcess | None = None
    workers: list[SparkProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, workers: int = 2) -> StandaloneCluster:
        """Start the master and ``workers`` workers; return when all are registered."""
        self.port, self.ui_port = free_port(), free_port()
        cmd = [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master"]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--webui-port", str(self.ui_port)]
        self.master = start_process("master", cmd, spark_env(self.logs / "master-tmp"), self.logs)
        wait_for_port(self.master, self.port)
        for _ in range(workers):
            self.add_worker()
        self.wait(lambda state: len(alive(state)) >= workers, "workers registered")
        return self

    def add_worker(self) -> SparkProcess:
        """Start one more worker (1 core, 1 GiB)."""
        n = len(self.workers)
        work = self.logs / f"worker{n}"
        (work / "tmp").mkdir(parents=True, exist_ok=True)
        cmd = [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker"]
        cmd += ["--host", "127.0.0.1", "--cores", "1", "--memory", "1g"]
        cmd += ["--webui-port", str(free_port()), "--work-dir", str(work), self.url]
        worker = start_process(f"worker{n}", cmd, spark_env(work / "tmp"), self.logs)
        self.workers.append(worker)
        return worker

    def state(self) -> dict:
        """The master's JSON status."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.load(r)

    def wait(self, ready, what: str, timeout: float = 120) -> dict:
        """Poll the master's status until ``ready(state)``."""
        deadline = time.monotonic() + timeout
        state: dict = {}
        while time.monotonic() < deadline:
            try:
                state = self.state()
            except (OSError, ValueError):  # not up yet
                state = {}
            if state and ready(state):
                return state
            time.sleep(0.5)
        raise RuntimeError(f"cluster: no {what} after {timeout}s: {state}")

    def kill_worker(self, index: int) -> None:
        """SIGKILL one worker and the executor JVMs it started (a machine lost)."""
        self.workers[index].stop(signal.SIGKILL)

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master."""
        for worker in self.workers:
            worker.stop()
        if self.master is not None:
            self.master.stop()


def alive(state: dict) -> list[dict]:
    """The alive workers of a master status."""
    return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]


def connect_session(url: str):
    """A Spark Connect session of the server at ``url``, usable next to the classic session
    of the other tests (it does not switch this process into Connect mode)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    return ConnectSession.builder.remote(url).create()
