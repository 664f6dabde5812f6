"""Fixtures shared by every test folder, and the folder markers (``spark``, ``object_store``)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from helpers.data import sample_table
from helpers.spark import spark_session  # noqa: F401  (the session-wide "spark" fixture)


@pytest.fixture
def sample() -> pa.Table:
    return sample_table()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests in ``tests/spark`` or using the ``spark`` fixture are marked ``spark``."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) or item.path.parent.name == "spark":
            item.add_marker(pytest.mark.spark)
