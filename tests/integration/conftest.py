"""Fixtures of the object-store test modules: one moto S3 server per module, a counting proxy
in front of it, and a new bucket per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.s3 import S3Server, StripProxy, s3_server, strip_proxy


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    """A moto S3 server of the module."""
    with s3_server() as srv:
        yield srv


@pytest.fixture(scope="module")
def counting(server: S3Server) -> Iterator[StripProxy]:
    """A proxy in front of moto forwarding every request unchanged, counting them."""
    with strip_proxy(server.port, strip=False) as proxy:
        yield proxy


@pytest.fixture
def bucket(server: S3Server) -> str:
    """A new, empty bucket."""
    return server.create_bucket()
