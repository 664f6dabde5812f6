"""A latency-adding, request-counting HTTP proxy in front of an S3-compatible server, and a child
process running moto's S3 server behind such a proxy (for benchmarks on "object storage": the
server's Python work then does not compete with the client for the client's GIL).

:class:`DelayProxy` forwards every request to the upstream server after sleeping a fixed delay
(one simulated round trip per request) and counts requests by kind: ``GET``, ``PUT``, ``HEAD``,
``POST``, ``DELETE``, and ``LIST`` (a ``GET`` whose query has ``list-type=`` or ``prefix=``).
It speaks HTTP/1.1 with keep-alive to its clients, de-chunks ``Transfer-Encoding: chunked``
request bodies (forwarded with a ``Content-Length``), forwards ``aws-chunked`` bodies unchanged
(the upstream decodes them), answers ``Expect: 100-continue`` itself and serves each connection on
its own thread.
"""

from __future__ import annotations

import http.client
import http.server
import logging
import multiprocessing
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
                try:
                    try:
                        upstream.request(self.command, self.path, body=body, headers=headers)
                        resp = upstream.getresponse()
                        data = resp.read()
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
                finally:
                    upstream.close()

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


# -- moto + proxy in a child process ---------------------------------------------------------------
def _serve(conn: Any, latency: float) -> None:
    """Child process: moto's S3 server and a :class:`DelayProxy` in front of it; answers
    ``("counts",)``, ``("reset",)``, ``("latency", seconds)`` and ``("stop",)`` on ``conn``."""
    from helpers.s3 import s3_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with s3_server() as server, delay_proxy(server.port, latency) as proxy:
        conn.send({"moto": server.endpoint, "proxy": proxy.endpoint})
        while True:
            cmd = conn.recv()
            if cmd[0] == "counts":
                conn.send(proxy.counts())
            elif cmd[0] == "reset":
                proxy.reset()
                conn.send(None)
            elif cmd[0] == "log":
                conn.send(list(proxy.log))
            elif cmd[0] == "latency":
                proxy.latency = float(cmd[1])
                conn.send(None)
            else:
                conn.send(None)
                return


class S3ProxyProcess:
    """moto's S3 server behind a :class:`DelayProxy`, both in a child process (spawned, so the
    ``tests`` directory must be on ``sys.path``, as ``helpers`` is imported from it).

    ``endpoint`` is the proxy's (what the measured clients use), ``moto_endpoint`` moto's own
    (for setting up buckets without counting)."""

    def __init__(self, latency: float = 0.02) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, latency), daemon=True)
        self._proc.start()
        if not self._conn.poll(120):
            self._proc.kill()
            raise RuntimeError("the S3 server process did not start")
        ports = self._conn.recv()
        self.endpoint: str = ports["proxy"]
        self.moto_endpoint: str = ports["moto"]
        self._lock = threading.Lock()

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

    def set_latency(self, seconds: float) -> None:
        self._call("latency", seconds)

    def stop(self) -> None:
        if self._proc.is_alive():
            with suppress(EOFError, OSError):
                self._call("stop")
            self._proc.join(timeout=10)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()


@contextmanager
def s3_proxy_process(latency: float = 0.02) -> Iterator[S3ProxyProcess]:
    """A running :class:`S3ProxyProcess`; stopped on exit."""
    proc = S3ProxyProcess(latency)
    try:
        yield proc
    finally:
        proc.stop()
