"""Lance partitioned namespaces for Dagster and Spark.

The core (``dagster_lance_partitioned.core``) needs only pyarrow, pylance and datafusion; the
Spark and Dagster layers live in their own subpackages and are imported explicitly."""

from .core import *  # noqa: F403
from .core import __all__ as __all__

__version__ = "0.1.0"
