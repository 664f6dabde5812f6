"""The engine-agnostic core: the partitioned-namespace format (pyarrow, pylance, datafusion)."""

from .errors import (
    CommitConflictError,
    ExpressionError,
    ManifestError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    NotAPartitionedNamespaceError,
    NullabilityError,
    PartitionedNamespaceError,
    PartitionReadError,
    ResultTypeMismatchError,
    SchemaError,
    SchemaMismatchError,
    SpecError,
    UnknownTransformError,
    UnnamedPartitionError,
    WriteError,
)
from .filters import FilterError
from .namespace import PartitionedNamespace
from .planning import ScanPlan, ScanTask
from .spec import PartitionField, PartitionSpec, SpecField
from .windows import TimeWindow
from .writer import PartitionWrite, WriteResult

__all__ = [
    "CommitConflictError",
    "ExpressionError",
    "FilterError",
    "ManifestError",
    "NamespaceExistsError",
    "NamespaceNotFoundError",
    "NotAPartitionedNamespaceError",
    "NullabilityError",
    "PartitionField",
    "PartitionReadError",
    "PartitionSpec",
    "PartitionWrite",
    "PartitionedNamespace",
    "PartitionedNamespaceError",
    "ResultTypeMismatchError",
    "ScanPlan",
    "ScanTask",
    "SchemaError",
    "SchemaMismatchError",
    "SpecError",
    "SpecField",
    "TimeWindow",
    "UnknownTransformError",
    "UnnamedPartitionError",
    "WriteError",
    "WriteResult",
]
