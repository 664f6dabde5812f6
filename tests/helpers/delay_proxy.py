"""A latency-adding, request-counting HTTP proxy in front of an S3-compatible server, and child
processes running such a server behind such a proxy (for benchmarks on "object storage": the
server's and the proxy's Python work then do not compete with the client for its GIL).

:class:`DelayProxy` forwards every request to the upstream server after sleeping a fixed delay
(one simulated round trip per request) and counts requests by kind: ``GET``, ``PUT``, ``HEAD``,
``POST``, ``DELETE``, and ``LIST`` (a ``GET`` whose query has ``list-type=`` or ``prefix=``).
It speaks HTTP/1.1 with keep-alive to its clients and to the upstream (one upstream connection
per client connection), de-chunks ``Transfer-Encoding: chunked`` request bodies (forwarded with
a ``Content-Length``), forwards ``aws-chunked`` bodies unchanged (the upstream decodes them),
answers ``Expect: 100-continue`` itself and serves each connection on its own thread.

:class:`S3ProxyProcess` runs one of :data:`SERVERS` (moto's server by default) and a proxy in
front of it in child processes.
"""

from __future__ import annotations

import http.client
import http.server
import logging
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

KINDS = ("GET", "LIST", "HEAD", "PUT", "POST", "DELETE")
_STATS = ("bytes_sent", "bytes_received", "conditional", "errors_5xx")

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "transfer-encoding",
    "te",
    "trailer",
    "trailers",
    "upgrade",
    "expect",
}


def request_kind(method: str, path: str) -> str:
    """``LIST`` for a listing ``GET`` (``list-type=`` or ``prefix=`` in the query), else the
    method."""
    if method == "GET":
        params = [p.split("=", 1)[0] for p in urlsplit(path).query.split("&") if p]
        if "list-type" in params or "prefix" in params:
            return "LIST"
    return method


class DelayProxy:
    """An HTTP proxy on 127.0.0.1 that forwards every request to ``upstream_port`` after
    ``latency`` seconds, counting requests (:meth:`counts`) by :func:`request_kind`."""

    def __init__(self, upstream_port: int, latency: float = 0.02) -> None:
        self.upstream_port = upstream_port
        self.latency = latency
        self._counts: dict[str, int] = {}
        # request body bytes up, response body bytes down, requests with If-(None-)Match
        self._stats = dict.fromkeys(_STATS, 0)
        self.log: list[tuple[str, str]] = []  # (kind, path) of every request, in order
        # (kind, path, arrived, answered) of every request, times in seconds (monotonic)
        self.timeline: list[tuple[str, str, float, float]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive; "Connection: close" is honoured
            # without it, Nagle's algorithm and delayed ACKs add ~45 ms to every response with
            # a body on a reused connection, on top of the latency the proxy adds on purpose
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _forward(self) -> None:
                arrived = time.monotonic()
                try:
                    self._forward_timed()
                finally:
                    with proxy._lock:
                        proxy.timeline.append(
                            (
                                request_kind(self.command, self.path),
                                self.path,
                                arrived,
                                time.monotonic(),
                            )
                        )

            def _forward_timed(self) -> None:
                body = self._read_body()
                kind = request_kind(self.command, self.path)
                with proxy._lock:
                    proxy._counts[kind] = proxy._counts.get(kind, 0) + 1
                    proxy.log.append((kind, self.path))
                    proxy._stats["bytes_sent"] += len(body)
                    if self.headers.get("If-None-Match") or self.headers.get("If-Match"):
                        proxy._stats["conditional"] += 1
                headers = {}
                for name, value in self.headers.items():
                    lower = name.lower()
                    if lower in _HOP_BY_HOP or lower == "content-length":
                        continue
                    headers[name] = value
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                if proxy.latency > 0:
                    time.sleep(proxy.latency)
                try:
                    resp, data = self._upstream_request(body, headers)
                except OSError as e:
                    with proxy._lock:
                        proxy._stats["errors_5xx"] += 1
                    msg = f"proxy: upstream failed: {e!r}".encode()
                    self.send_response(502)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                with proxy._lock:
                    proxy._stats["bytes_received"] += len(data)
                    if resp.status >= 500:
                        proxy._stats["errors_5xx"] += 1
                self.send_response(resp.status, resp.reason)
                # HEAD and 304 describe a body they do not carry: pass the upstream length
                no_body = self.command == "HEAD" or resp.status in (204, 304)
                no_body = no_body or resp.status < 200
                for name, value in resp.getheaders():
                    lower = name.lower()
                    if lower in _HOP_BY_HOP:
                        continue
                    if lower == "content-length" and not no_body:
                        continue
                    self.send_header(name, value)
                if not no_body:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not no_body:
                    self.wfile.write(data)

            def _upstream_request(
                self, body: bytes, headers: dict[str, str]
            ) -> tuple[http.client.HTTPResponse, bytes]:
                """Send the request upstream on this client connection's own keep-alive
                connection (opened on first use); once more on a new connection when a
                reused one turns out closed before any answer (the request was not taken)."""
                for attempt in range(2):
                    conn = self._upstream
                    reused = conn is not None
                    if conn is None:
                        conn = self._upstream = http.client.HTTPConnection(
                            "127.0.0.1", proxy.upstream_port, timeout=120
                        )
                    try:
                        conn.request(self.command, self.path, body=body, headers=headers)
                        resp = conn.getresponse()
                        data = resp.read()
                    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                        self._close_upstream()
                        if not reused or attempt:
                            raise
                        continue
                    except OSError:
                        self._close_upstream()
                        raise
                    if resp.will_close:
                        self._close_upstream()
                    return resp, data
                raise AssertionError("unreachable")

            def _close_upstream(self) -> None:
                if self._upstream is not None:
                    self._upstream.close()
                    self._upstream = None

            def setup(self) -> None:
                self._upstream: http.client.HTTPConnection | None = None
                super().setup()

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    self._close_upstream()

            def _read_body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    chunks = []
                    while True:
                        line = self.rfile.readline()
                        if not line:
                            raise ConnectionError("client closed inside a chunked body")
                        size = int(line.split(b";")[0].strip(), 16)
                        if size == 0:  # trailers (dropped), then the empty line
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()  # CRLF after the chunk
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256  # Lance and object_store open many connections at once

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def counts(self) -> dict[str, int]:
        """Requests forwarded since the last :meth:`reset`, by kind (plus ``total``, and
        ``bytes_sent`` / ``bytes_received``: request and response body bytes, and
        ``conditional``: requests with an ``If-None-Match`` or ``If-Match`` header,
        ``errors_5xx``: answers with a 5xx status, the proxy's own 502 included)."""
        with self._lock:
            out = {k: self._counts.get(k, 0) for k in KINDS}
            out.update({k: v for k, v in self._counts.items() if k not in out})
            out["total"] = sum(self._counts.values())
            out.update(self._stats)
            return out

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._stats = dict.fromkeys(_STATS, 0)
            self.log.clear()
            self.timeline.clear()

    def start(self) -> DelayProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@contextmanager
def delay_proxy(upstream_port: int, latency: float = 0.02) -> Iterator[DelayProxy]:
    """A running :class:`DelayProxy` in front of ``upstream_port``."""
    proxy = DelayProxy(upstream_port, latency).start()
    try:
        yield proxy
    finally:
        proxy.stop()


# -- an S3-compatible server + proxy in child processes ------------------------------------------
# The S3-compatible servers :class:`S3ProxyProcess` can start (each must honour put-if-absent,
# ``If-None-Match: *`` on PUT, which this package and deltalake's ``conditional_put`` rely on):
#   moto         moto's server (``python -m moto.server``) in a process of its own
#   moto-shared  moto's server in the proxy's process (how the benchmarks ran before
#                2026-11-27: moto and the proxy then share one GIL)
#   localbucket  LocalBucket (PyPI ``localbucket``, a stdlib ``ThreadingHTTPServer`` storing
#                objects as files; its listings walk the whole bucket) in a process of its own
SERVERS = ("moto", "moto-shared", "localbucket")


def _wait_for_port(port: int, proc: subprocess.Popen[bytes] | None, timeout: float = 60) -> None:
    """Return once something accepts connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the S3 server exited with code {proc.returncode}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"no S3 server on 127.0.0.1:{port} after {timeout:.0f} s")


def prefix_bounded_listing(handler: Any) -> None:
    """Make LocalBucket's listings walk only the directory of the listed prefix (up to its last
    ``/``) instead of the whole bucket, with the same answer: a listing then costs what the
    prefix holds, as on S3, not what the bucket holds (a namespace of 365 partition tables
    keeps ~1,500 objects in its bucket and lists ``_versions/`` twice per new table).

    ``handler`` is ``localbucket.S3Handler``; its ``_list_entries(bucket_dir, prefix,
    delimiter, marker, marker_is_prefix, max_keys)`` returns (contents as (key, path) pairs,
    common prefixes, truncated, last entry as ``K:key`` / ``P:prefix``)."""
    original = handler._list_entries

    def _list_entries(
        self: Any,
        bucket_dir: Any,
        prefix: str,
        delimiter: str,
        marker: str,
        marker_is_prefix: bool,
        max_keys: int,
    ) -> tuple[list[Any], list[str], bool, str]:
        base = prefix[: prefix.rfind("/") + 1]
        if not base:
            return original(  # type: ignore[no-any-return]
                self, bucket_dir, prefix, delimiter, marker, marker_is_prefix, max_keys
            )
        start = bucket_dir / base
        if not start.is_dir():
            return [], [], False, ""
        if marker and not marker.startswith(base):
            if marker.encode() > base.encode():
                return [], [], False, ""  # every key under base sorts before the marker
            marker, marker_is_prefix = "", False
        contents, common, truncated, last = original(
            self,
            start,
            prefix[len(base) :],
            delimiter,
            marker[len(base) :],
            marker_is_prefix,
            max_keys,
        )
        contents = [(base + key, path) for key, path in contents]
        common = [base + c for c in common]
        return contents, common, truncated, last[:2] + base + last[2:] if last else last

    handler._list_entries = _list_entries


def multi_object_delete(handler: Any) -> None:
    """Give LocalBucket S3's DeleteObjects (``POST /<bucket>?delete``), which it lacks: the
    put-if-absent probe of this package removes its scratch object with it, and its retries of
    the refused request (``501 Not Implemented``) cost about a second per namespace created.

    ``handler`` is ``localbucket.S3Handler``: each listed key is deleted as its DeleteObject
    deletes one (empty folders removed), and every key is reported deleted, as S3 does for
    keys that do not exist."""
    import xml.etree.ElementTree as ET

    original = handler._post_request

    def _post_request(self: Any, bucket: str, key: str) -> None:
        if key or "delete" not in self.query:
            original(self, bucket, key)
            return
        body = ET.fromstring(self._read_body())
        keys = [el.text or "" for el in body.iter() if el.tag.rsplit("}", 1)[-1] == "Key"]
        bucket_dir = self._bucket_dir(bucket).resolve()
        result = ET.Element("DeleteResult", xmlns="http://s3.amazonaws.com/doc/2006-03-01/")
        for name in keys:
            target = self._object_path(bucket, name)
            if target.is_file():
                target.unlink(missing_ok=True)
                parent = target.parent
                while parent != bucket_dir:
                    try:
                        parent.rmdir()
                    except OSError:
                        break
                    parent = parent.parent
            ET.SubElement(ET.SubElement(result, "Deleted"), "Key").text = name
        self._send_xml(result)

    handler._post_request = _post_request


@contextmanager
def _server_process(server: str) -> Iterator[int]:
    """Run ``server`` (one of :data:`SERVERS` but ``moto-shared``) as a process on a free
    127.0.0.1 port; yield the port; stop the process on exit."""
    from helpers.s3 import free_port

    port = free_port()
    data_dir = None
    if server == "moto":
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    elif server == "localbucket":
        data_dir = tempfile.mkdtemp(prefix="dlp-localbucket-")
        # as the proxy: TCP_NODELAY (else Nagle's algorithm and delayed ACKs hold every
        # response with a body ~40 ms on a reused connection) and a listen backlog for
        # dozens of connections opened at once (the default of 5 drops SYNs: 1 s retries)
        tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = (
            "import http.server, sys, localbucket\n"
            f"sys.path.insert(0, {tests_dir!r})\n"
            "from helpers.delay_proxy import multi_object_delete, prefix_bounded_listing\n"
            "localbucket.S3Handler.disable_nagle_algorithm = True\n"
            "prefix_bounded_listing(localbucket.S3Handler)\n"
            "multi_object_delete(localbucket.S3Handler)\n"
            "http.server.ThreadingHTTPServer.request_queue_size = 256\n"
            "http.server.ThreadingHTTPServer.daemon_threads = True\n"
            "sys.argv = ['localbucket'] + sys.argv[1:]\n"
            "localbucket.main()\n"
        )
        cmd = [sys.executable, "-c", code, "--port", str(port), data_dir]
    else:
        raise ValueError(f"unknown S3 server {server!r}; choose from {', '.join(SERVERS)}")
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for_port(port, proc)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


def _serve(conn: Any, latency: float, server: str = "moto-shared") -> None:
    """Child process: an S3-compatible ``server`` and a :class:`DelayProxy` in front of it;
    answers ``("counts",)``, ``("reset",)``, ``("log",)``, ``("timeline",)``,
    ``("latency", seconds)`` and
    ``("stop",)`` on ``conn``."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with ExitStack() as stack:
        if server == "moto-shared":
            from helpers.s3 import s3_server

            port = stack.enter_context(s3_server()).port
        else:
            port = stack.enter_context(_server_process(server))
        proxy = stack.enter_context(delay_proxy(port, latency))
        conn.send({"server": f"http://127.0.0.1:{port}", "proxy": proxy.endpoint})
        while True:
            cmd = conn.recv()
            if cmd[0] == "counts":
                conn.send(proxy.counts())
            elif cmd[0] == "reset":
                proxy.reset()
                conn.send(None)
            elif cmd[0] == "log":
                conn.send(list(proxy.log))
            elif cmd[0] == "timeline":
                conn.send(list(proxy.timeline))
            elif cmd[0] == "latency":
                proxy.latency = float(cmd[1])
                conn.send(None)
            else:
                conn.send(None)
                return


class S3ProxyProcess:
    """An S3-compatible server (``server``, one of :data:`SERVERS`; moto by default) behind a
    :class:`DelayProxy` in a child process (spawned, so the ``tests`` directory must be on
    ``sys.path``, as ``helpers`` is imported from it); the server runs in a process of its own
    unless it is ``moto-shared``.

    ``endpoint`` is the proxy's (what the measured clients use), ``server_endpoint`` the
    server's own (for setting up buckets without counting; ``moto_endpoint`` is the same)."""

    def __init__(self, latency: float = 0.02, server: str = "moto") -> None:
        if server not in SERVERS:
            raise ValueError(f"unknown S3 server {server!r}; choose from {', '.join(SERVERS)}")
        self.server = server
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, latency, server), daemon=True)
        self._proc.start()
        if not self._conn.poll(120):
            self._proc.kill()
            raise RuntimeError("the S3 server process did not start")
        ports = self._conn.recv()
        self.endpoint: str = ports["proxy"]
        self.server_endpoint: str = ports["server"]
        self.moto_endpoint: str = self.server_endpoint
        self._lock = threading.Lock()

    def __enter__(self) -> S3ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self) -> Any:
        """A boto3 S3 client of the server itself (requests through it are not counted)."""
        from helpers.s3 import s3_client

        return s3_client(self.server_endpoint)

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` on the server directly (not counted); return its name."""
        self.client().create_bucket(Bucket=name)
        return name

    def _call(self, *cmd: object) -> Any:
        with self._lock:
            self._conn.send(cmd)
            return self._conn.recv()

    def counts(self) -> dict[str, int]:
        return self._call("counts")

    def reset(self) -> None:
        self._call("reset")

    def log(self) -> list[tuple[str, str]]:
        """(kind, path) of every request since the last reset, in order."""
        return list(self._call("log"))

    def timeline(self) -> list[tuple[str, str, float, float]]:
        """(kind, path, arrived, answered) of every request since the last reset (seconds,
        one monotonic clock), in the order they were answered."""
        return list(self._call("timeline"))

    def set_latency(self, seconds: float) -> None:
        self._call("latency", seconds)

    def stop(self) -> None:
        if self._proc.is_alive():
            with suppress(EOFError, OSError):
                self._call("stop")
            self._proc.join(timeout=20)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()


@contextmanager
def s3_proxy_process(latency: float = 0.02, server: str = "moto") -> Iterator[S3ProxyProcess]:
    """A running :class:`S3ProxyProcess`; stopped on exit."""
    proc = S3ProxyProcess(latency, server)
    try:
        yield proc
    finally:
        proc.stop()
