"""Dagster layer: the IO manager storing assets as Lance partitioned namespaces and, built on it,
asset checks, sensors and the maintenance job. The ``dg`` component is
``dagster_lance_partitioned.orchestration.component.LancePartitionedComponent``."""

from .checks import build_lance_partitioned_checks
from .errors import InvalidAssetKeyError, MissingUpstreamPartitionsError, StorageRootError
from .handlers import UnsupportedTypeError
from .io_manager import (
    EvolutionRefusedError,
    LancePartitionedIOManager,
    PartitionKeyMismatchError,
    column_schema,
)
from .layout import Layout, PartitionLayoutError, time_window
from .maintenance import (
    MaintenanceConfig,
    build_lance_maintenance_job,
    build_lance_maintenance_schedule,
)
from .sensors import build_lance_external_change_sensor, build_lance_schema_sensor

__all__ = [
    "EvolutionRefusedError",
    "InvalidAssetKeyError",
    "LancePartitionedIOManager",
    "Layout",
    "MaintenanceConfig",
    "MissingUpstreamPartitionsError",
    "PartitionKeyMismatchError",
    "PartitionLayoutError",
    "StorageRootError",
    "UnsupportedTypeError",
    "build_lance_external_change_sensor",
    "build_lance_maintenance_job",
    "build_lance_maintenance_schedule",
    "build_lance_partitioned_checks",
    "build_lance_schema_sensor",
    "column_schema",
    "time_window",
]
