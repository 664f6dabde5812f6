"""An S3-compatible server on 127.0.0.1 for the object-storage tests (moto's server), a proxy in
front of it that drops the ``If-None-Match`` request header (a store without put-if-absent),
and a writer process appending to a namespace on either.

Run as ``python s3.py write CONFIG.json`` it is the writer process (see
:func:`writer_main`).
"""

from __future__ import annotations

import http.client
import http.server
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from dagster_lance_partitioned import PartitionedNamespace

ACCESS_KEY = "dlp-test-key"
SECRET_KEY = "dlp-test-secret"
REGION = "us-east-1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client of the test server at ``endpoint`` (with the test credentials)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )


def storage_options(endpoint: str) -> dict[str, str]:
    """Lance storage options for the S3-compatible server at ``endpoint`` (path-style
    requests, the default of Lance's object_store when an endpoint is given)."""
    return {
        "aws_access_key_id": ACCESS_KEY,
        "aws_secret_access_key": SECRET_KEY,
        "aws_endpoint": endpoint,
        "aws_region": REGION,
        "allow_http": "true",
    }


@dataclass
class S3Server:
    """A running moto S3 server on 127.0.0.1."""

    port: int
    endpoint: str
    server: object = field(repr=False)

    def client(self) -> Any:
        """A boto3 S3 client of this server (for setting up and inspecting buckets)."""
        return s3_client(self.endpoint)

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh random name by default); returns its name."""
        name = name or f"dlp-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key in ``bucket`` under ``prefix``."""
        paginator = self.client().get_paginator("list_objects_v2")
        out: list[str] = []
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            out.extend(obj["Key"] for obj in page.get("Contents", []))
        return out


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """Start moto's S3 server on a free 127.0.0.1 port; stop it on exit."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Server(port, f"http://127.0.0.1:{port}", server)
    finally:
        server.stop()


# -- a proxy that strips If-None-Match -------------------------------------------------------------
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
}


class StripProxy:
    """An HTTP proxy on 127.0.0.1 forwarding every request to an upstream server without its
    ``If-None-Match`` header (with ``strip=False``: unchanged): the upstream then overwrites
    where it would have refused.

    ``requests`` counts requests by method; ``stripped`` counts the headers dropped; ``signed``
    counts those listed in the request's SigV4 ``SignedHeaders`` (moto does not verify
    signatures, so they pass)."""

    def __init__(self, upstream_port: int, strip: bool = True) -> None:
        self.upstream_port = upstream_port
        self.strip = strip
        self.requests: dict[str, int] = {}
        self.stripped = 0
        self.signed = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _forward(self) -> None:
                body = self._read_body()
                with proxy._lock:
                    proxy.requests[self.command] = proxy.requests.get(self.command, 0) + 1
                headers = {}
                dropped = False
                for name, value in self.headers.items():
                    lower = name.lower()
                    if lower == "if-none-match" and proxy.strip:
                        dropped = True
                        continue
                    if lower in _HOP_BY_HOP or lower == "content-length":
                        continue
                    headers[name] = value
                if dropped:
                    auth = self.headers.get("Authorization", "")
                    with proxy._lock:
                        proxy.stripped += 1
                        if "if-none-match" in auth.lower():
                            proxy.signed += 1
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    resp = upstream.getresponse()
                    data = resp.read()
                    self.send_response(resp.status, resp.reason)
                    length_sent = False
                    for name, value in resp.getheaders():
                        lower = name.lower()
                        if lower in _HOP_BY_HOP:
                            continue
                        if lower == "content-length":
                            if self.command != "HEAD":
                                continue
                            length_sent = True
                        self.send_header(name, value)
                    if self.command != "HEAD":
                        self.send_header("Content-Length", str(len(data)))
                    elif not length_sent:
                        self.send_header("Content-Length", "0")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    upstream.close()

            def _read_body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> StripProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@contextmanager
def strip_proxy(upstream_port: int, strip: bool = True) -> Iterator[StripProxy]:
    """A running :class:`StripProxy` in front of ``upstream_port``."""
    proxy = StripProxy(upstream_port, strip).start()
    try:
        yield proxy
    finally:
        proxy.stop()


# -- racing writer processes -----------------------------------------------------------------------
def _wait_for(paths: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {[p for p in paths if not os.path.exists(p)]}")
        time.sleep(0.005)


def writer_main(config_path: str) -> int:
    """Append each of ``writes`` (lists of rows) to the namespace, one write at a time.

    Config keys: ``uri``, ``storage_options``, ``writes``, ``result`` (a JSON-lines file, one
    line per write), and optionally ``sync_dir``, ``name`` and ``barrier`` (writer names): before
    each commit the writer marks itself ready and waits until every writer of ``barrier`` is."""
    import pyarrow as pa
    from faults import CommitHooks  # run as a script: its directory (tests/helpers) is on sys.path

    from dagster_lance_partitioned import PartitionedNamespace

    with open(config_path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    before_commit = CommitHooks.install()
    ns = PartitionedNamespace.open(cfg["uri"], cfg.get("storage_options"))
    sync_dir, name, barrier = cfg.get("sync_dir"), cfg.get("name", "w"), cfg.get("barrier")
    timeout = float(cfg.get("timeout", 60))
    for i, rows in enumerate(cfg["writes"]):
        if sync_dir and barrier:

            def hook(pending: list, i: int = i) -> None:
                open(os.path.join(sync_dir, f"{name}.{i}.ready"), "w").close()
                _wait_for([os.path.join(sync_dir, f"{n}.{i}.ready") for n in barrier], timeout)

            before_commit(ns, hook)
        record: dict = {"i": i}
        started = time.monotonic()
        try:
            result = ns.write(pa.Table.from_pylist(rows, schema=ns.schema), mode="append")
            record.update(ok=True, manifest_version=result.manifest_version)
        except Exception as e:
            record.update(ok=False, error=type(e).__name__, message=str(e)[:2000])
            if sync_dir and barrier:  # let the others through the barrier
                open(os.path.join(sync_dir, f"{name}.{i}.ready"), "w").close()
        record["seconds"] = round(time.monotonic() - started, 3)
        with open(cfg["result"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    return 0


WRITERS, WRITES, ROWS = 4, 3, 10
WAIT = 120.0  # seconds; upper bound for a writer process


def race_schema() -> pa.Schema:
    """The schema of the namespaces the racing writers append to."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("country", pa.utf8()),
            pa.field("value", pa.float64()),
        ]
    )


def create_race_namespace(uri: str, options: dict[str, str]) -> None:
    """An empty namespace of :func:`race_schema` partitioned by ``country``."""
    from dagster_lance_partitioned import PartitionedNamespace, PartitionField

    PartitionedNamespace.create(
        uri, race_schema(), [PartitionField.identity("country")], storage_options=options
    )


def writer_rows(w: int, k: int) -> list[dict]:
    """Write ``k`` of writer ``w``: half in its own partition ``C<w>``, half in ``shared``."""
    return [
        {"id": w * 1000 + k * 100 + r, "country": "shared" if r % 2 else f"C{w}", "value": 1.0}
        for r in range(ROWS)
    ]


def run_writers(
    work_dir: Path, uri: str, options: dict[str, str], env: dict[str, str] | None = None
) -> list[dict]:
    """Run ``WRITERS`` writer processes, each appending ``WRITES`` times (:func:`writer_rows`);
    every commit waits at a barrier for all writers, so the commits race. Returns every
    write's result record (with ``writer``: the writer's number)."""
    sync = work_dir / "sync"
    sync.mkdir()
    names = [f"w{w}" for w in range(WRITERS)]
    procs: list[tuple[subprocess.Popen, Path]] = []
    try:
        for w, name in enumerate(names):
            cfg = {
                "uri": uri,
                "storage_options": options,
                "writes": [writer_rows(w, k) for k in range(WRITES)],
                "result": str(work_dir / f"{name}.jsonl"),
                "sync_dir": str(sync),
                "name": name,
                "barrier": names,
                "timeout": WAIT,
            }
            config = work_dir / f"{name}.json"
            config.write_text(json.dumps(cfg))
            stderr = work_dir / f"{name}.stderr"
            with open(stderr, "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, __file__, "write", str(config)],
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env={**os.environ, **(env or {})},
                )
            procs.append((proc, stderr))
        for proc, stderr in procs:
            if proc.wait(timeout=WAIT) != 0:
                raise RuntimeError(f"writer failed:\n{stderr.read_text(errors='replace')[-4000:]}")
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results = []
    for w, name in enumerate(names):
        for line in (work_dir / f"{name}.jsonl").read_text().splitlines():
            results.append({"writer": w, **json.loads(line)})
    return results


def count_losses(ns: PartitionedNamespace, results: list[dict]) -> dict[str, int]:
    """Rows acknowledged by successful writes, rows found, rows lost (acknowledged but not
    found), duplicated rows, and rows found in another partition than written."""
    acknowledged = {
        row["id"]: row["country"]
        for r in results
        if r["ok"]
        for row in writer_rows(r["writer"], r["i"])
    }
    from dagster_lance_partitioned import PartitionedNamespaceError

    found: list[dict] = []
    unreadable = 0
    for (
        p
    ) in ns.inspect.partitions():  # one at a time: on an unsafe store a table may have lost files
        values = p["values"]
        where = " AND ".join(f"{k} = '{v}'" for k, v in values.items())
        try:
            found += ns.to_table(where, columns=["id", "country"]).to_pylist()
        except PartitionedNamespaceError:
            unreadable += 1
    ids = [r["id"] for r in found]
    return {
        "acknowledged": len(acknowledged),
        "unreadable_partitions": unreadable,
        "found": len(ids),
        "lost": len(set(acknowledged) - set(ids)),
        "duplicates": len(ids) - len(set(ids)),
        "misplaced": sum(
            1 for r in found if acknowledged.get(r["id"], r["country"]) != r["country"]
        ),
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        sys.exit(writer_main(sys.argv[2]))
    sys.exit("usage: s3.py write CONFIG.json")
