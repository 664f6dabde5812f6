"""Azurite, Microsoft's Azure Storage emulator (an npm package), on 127.0.0.1 for the ``az://``
tests: blob service only, in memory, on a free port.

``scripts/run_tests.sh`` installs it into ``.venv/azurite`` when node and npm exist; the
environment variable ``DLP_AZURITE`` may name another ``azurite-blob`` executable.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .s3 import free_port

ACCOUNT = "devstoreaccount1"
# Azurite's well-known development account key (public, the same in every installation)
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
REPO = Path(__file__).resolve().parents[2]


def azurite_executable() -> str | None:
    """The ``azurite-blob`` executable: ``$DLP_AZURITE``, ``.venv/azurite`` (where
    ``scripts/run_tests.sh`` installs it) or on ``PATH``; None when there is none."""
    candidates = [
        os.environ.get("DLP_AZURITE", ""),
        str(REPO / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"),
        shutil.which("azurite-blob") or "",
    ]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@dataclass
class Azurite:
    """A running Azurite blob service."""

    port: int
    endpoint: str  # http://127.0.0.1:<port>/devstoreaccount1 (path-style account URL)

    def storage_options(self) -> dict[str, str]:
        """Lance storage options reaching this service (object_store's Azure keys)."""
        return {
            "azure_storage_account_name": ACCOUNT,
            "azure_storage_account_key": ACCOUNT_KEY,
            "azure_storage_endpoint": self.endpoint,
            "allow_http": "true",
        }

    def create_container(self, name: str | None = None) -> str:
        """Create a container (a fresh random name by default); returns its name.
        (object_store cannot create containers: one Shared Key signed REST call.)"""
        name = name or f"dlp-{uuid.uuid4().hex[:12]}"
        status, body = self._request("PUT", name, {"restype": "container"})
        if status != 201:
            raise RuntimeError(f"cannot create container {name}: {status} {body[:300]!r}")
        return name

    def _request(self, method: str, path: str, query: dict[str, str]) -> tuple[int, bytes]:
        date = dt.datetime.now(dt.UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
        headers = {"x-ms-date": date, "x-ms-version": "2021-08-06"}
        canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        resource = f"/{ACCOUNT}/{ACCOUNT}/{path}" + "".join(
            f"\n{k}:{v}" for k, v in sorted(query.items())
        )
        # VERB, then 11 standard headers (all empty here), then the x-ms-* headers and resource
        to_sign = method + "\n" * 12 + canonical_headers + resource
        key = base64.b64decode(ACCOUNT_KEY)
        signature = base64.b64encode(hmac.new(key, to_sign.encode(), hashlib.sha256).digest())
        headers["Authorization"] = f"SharedKey {ACCOUNT}:{signature.decode()}"
        headers["Content-Length"] = "0"
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, f"/{ACCOUNT}/{path}?{qs}", headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"azurite exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"azurite did not listen on 127.0.0.1:{port}: {log.read_text()[-2000:]}")


@contextmanager
def azurite(executable: str) -> Iterator[Azurite]:
    """Start Azurite's blob service (in memory) on a free 127.0.0.1 port; stop it on exit."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dlp-azurite-") as work:
        log = Path(work) / "azurite.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    executable,
                    "--blobHost",
                    "127.0.0.1",
                    "--blobPort",
                    str(port),
                    "--inMemoryPersistence",
                    "--skipApiVersionCheck",
                    "--loose",
                    "--disableTelemetry",
                    "--silent",
                ],
                cwd=work,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_for_port(port, proc, log, timeout=60)
            yield Azurite(port, f"http://127.0.0.1:{port}/{ACCOUNT}")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
