"""Lance partitioned namespaces for Dagster and Spark.

The core (``dagster_lance_partitioned.core``) needs only pyarrow, pylance and datafusion; the
Spark and Dagster layers live in their own subpackages and are imported explicitly.

Importing the package sets ``LANCE_LOG=error`` unless ``LANCE_LOG`` is set: Lance's Rust log
(warnings such as one per partition searched about ``disable_scoring_autoprojection``, with
their Rust module paths) says nothing a user of this package can act on. Lance reads the
variable when it is first imported, so a process importing ``lance`` before this package keeps
Lance's default; set ``LANCE_LOG`` (``warn``, ``info``, ``debug``) to see Lance's log."""

import os as _os

_os.environ.setdefault("LANCE_LOG", "error")

from .core import *  # noqa: F403
from .core import __all__ as __all__

__version__ = "0.1.0"
