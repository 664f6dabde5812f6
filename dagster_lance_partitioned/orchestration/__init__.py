"""Dagster layer: the IO manager storing assets as Lance partitioned namespaces (and, built on
it, sensors and asset checks)."""

from .handlers import UnsupportedTypeError
from .io_manager import (
    EvolutionRefusedError,
    LancePartitionedIOManager,
    PartitionKeyMismatchError,
    column_schema,
)
from .layout import Layout, PartitionLayoutError, time_window

__all__ = [
    "EvolutionRefusedError",
    "LancePartitionedIOManager",
    "Layout",
    "PartitionKeyMismatchError",
    "PartitionLayoutError",
    "UnsupportedTypeError",
    "column_schema",
    "time_window",
]
