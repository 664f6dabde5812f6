"""Fixtures shared by every test folder, and the tier markers given by folder and fixture
(``spark``, ``object_store``; the tiers are described in pyproject.toml)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pyarrow as pa
import pytest
from helpers.data import sample_table
from helpers.faults import CommitHooks
from helpers.spark import spark_session  # noqa: F401  (the session-wide "spark" fixture)

from dagster_lance_partitioned.core.engine import tuned

# the moto fixtures of tests/integration/conftest.py
OBJECT_STORE_FIXTURES = frozenset({"server", "counting", "bucket"})


@pytest.fixture
def sample() -> pa.Table:
    return sample_table()


@pytest.fixture
def tune() -> Iterator[Callable[..., None]]:
    """``tune(**changes)``: core's sizes and thresholds (:class:`~core.tuning.Tuning` fields)
    changed until the test ends -- to reach a threshold with few rows."""
    with ExitStack() as stack:
        yield lambda **changes: stack.enter_context(tuned(**changes)) and None


@pytest.fixture
def before_commit(monkeypatch: pytest.MonkeyPatch) -> CommitHooks:
    """``before_commit(ns, hook)``: ``ns``'s writes call ``hook(pending)`` once their partition
    tables are committed, just before the manifest commit; ``before_commit(ns, None)`` stops it
    (helpers/faults.py)."""
    return CommitHooks().patch(monkeypatch.setattr)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests in ``tests/spark`` or using the ``spark`` fixture are marked ``spark``; tests using
    a moto fixture ``object_store`` (before ``-m`` deselects)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "spark" in fixtures or item.path.parent.name == "spark":
            item.add_marker(pytest.mark.spark)
        if fixtures & OBJECT_STORE_FIXTURES:
            item.add_marker(pytest.mark.object_store)
