"""Where the example stores its data and which Spark runs it, read from the environment when the
definitions load: ``DLP_ROOT`` (default ``data/pipeline`` in the repository; a relative path is
taken from the working directory, as for ``examples/run_pipeline.py``) and ``DLP_SPARK_MASTER``
(default ``local[*]``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dagster as dg
from dagster_pyspark import PySparkResource

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@dg.template_var
def lake_root() -> str:
    """The storage root (``{{ lake_root }}`` in ``defs/lake/defs.yaml``): ``DLP_ROOT``, else
    ``data/pipeline`` in the repository; local paths made absolute."""
    root = os.environ.get("DLP_ROOT") or str(REPO / "data" / "pipeline")
    return root if "://" in root else os.path.abspath(root)


def spark_resource(master: str | None = None) -> PySparkResource:
    """The Spark session of the example (``DLP_SPARK_MASTER``, default ``local[*]``)."""
    master = master or os.environ.get("DLP_SPARK_MASTER", "local[*]")
    return PySparkResource(
        spark_config={
            "spark.master": master,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.python.filterPushdown.enabled": "true",
        }
    )
