"""``pip install dagster-lance-partitioned`` without extras pulls in no Spark: the core, the
Dagster layer (pyarrow and pandas assets) and the CLI work with pyspark impossible to import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _requirement_names(requirements: list[str]) -> set[str]:
    names = set()
    for req in requirements:
        name = req.split(";")[0].split("[")[0]
        for sep in "<>=!~ ":
            name = name.split(sep)[0]
        names.add(name.strip().lower())
    return names


def test_spark_is_an_extra_not_a_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = _requirement_names(project["dependencies"])
    assert not base & {"pyspark", "dagster-pyspark"}
    extras = project["optional-dependencies"]
    assert {"pyspark", "dagster-pyspark"} <= _requirement_names(extras["spark"])
    assert "dagster-lance-partitioned[spark,example]" in extras["dev"]
    assert "dagster-lance-partitioned[spark]" in extras["example"]


def test_core_dagster_and_cli_work_when_pyspark_cannot_be_imported(tmp_path):
    script = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class NoSpark(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("pyspark", "dagster_pyspark"):
                    raise ImportError(f"{{name}} is not installed (blocked by the test)")
                return None

        sys.meta_path.insert(0, NoSpark())

        import dagster as dg
        import pyarrow as pa
        from dagster_lance_partitioned import PartitionedNamespace
        from dagster_lance_partitioned.orchestration import (
            LancePartitionedIOManager, LancePartitionedResource)
        from dagster_lance_partitioned.cli import main

        days = dg.DailyPartitionsDefinition(start_date="2024-01-01")

        @dg.asset(partitions_def=days, metadata={{"partition_expr": "d"}})
        def events(context) -> pa.Table:
            import datetime as dt
            day = dt.date.fromisoformat(context.partition_key)
            return pa.table({{"d": [day, day], "v": [1, 2]}})

        root = {str(tmp_path)!r}
        result = dg.materialize(
            [events], partition_key="2024-01-02",
            resources={{"io_manager": LancePartitionedIOManager(root=root)}})
        assert result.success
        ns = LancePartitionedResource(root=root).namespace(dg.AssetKey("events"))
        assert ns.to_table().num_rows == 2
        assert main(["info", ns.uri]) == 0
        assert not [m for m in sys.modules if m.split(".")[0] in ("pyspark", "dagster_pyspark")]
        print("OK")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("OK")
