"""Dagster layer: the resource locating assets' Lance partitioned namespaces, the IO manager
storing assets in them and, built on them, asset checks, sensors and the maintenance job. The
``dg`` component is
``dagster_lance_partitioned.orchestration.component.LancePartitionedComponent``."""

from ..core import MergeOptions
from .checks import build_lance_partitioned_checks
from .errors import (
    EvolutionRefusedError,
    IndexDeclarationConflictError,
    IndexMetadataError,
    InvalidAssetKeyError,
    MissingUpstreamPartitionsError,
    NestedAssetError,
    PartitionKeyMismatchError,
    PartitionLayoutError,
    RetentionRuleError,
    StorageRootError,
    UnsupportedTypeError,
)
from .handlers import (
    ArrowReaderHandler,
    ArrowTableHandler,
    PandasHandler,
    ReadRequest,
    SparkHandler,
    TypeHandler,
    WriteRequest,
    default_type_handlers,
)
from .io_manager import LancePartitionedIOManager
from .layout import Layout, time_window
from .maintenance import (
    MaintenanceConfig,
    RetentionRule,
    build_lance_maintenance_job,
    build_lance_maintenance_schedule,
)
from .metadata import column_schema
from .output import OutputSlice
from .resource import LancePartitionedResource
from .sensors import build_lance_external_change_sensor, build_lance_schema_sensor

__all__ = [
    "ArrowReaderHandler",
    "ArrowTableHandler",
    "EvolutionRefusedError",
    "IndexDeclarationConflictError",
    "IndexMetadataError",
    "InvalidAssetKeyError",
    "LancePartitionedIOManager",
    "LancePartitionedResource",
    "Layout",
    "MaintenanceConfig",
    "MergeOptions",
    "MissingUpstreamPartitionsError",
    "NestedAssetError",
    "OutputSlice",
    "PandasHandler",
    "PartitionKeyMismatchError",
    "PartitionLayoutError",
    "ReadRequest",
    "RetentionRule",
    "RetentionRuleError",
    "SparkHandler",
    "StorageRootError",
    "TypeHandler",
    "UnsupportedTypeError",
    "WriteRequest",
    "build_lance_external_change_sensor",
    "build_lance_maintenance_job",
    "build_lance_maintenance_schedule",
    "build_lance_partitioned_checks",
    "build_lance_schema_sensor",
    "column_schema",
    "default_type_handlers",
    "time_window",
]
