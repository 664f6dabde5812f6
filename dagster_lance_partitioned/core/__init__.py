"""The engine-agnostic core: the partitioned-namespace format (pyarrow, pylance, datafusion)."""

from .errors import (
    CommitConflictError,
    ExpressionError,
    FilterError,
    ManifestError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    NotAPartitionedNamespaceError,
    NullabilityError,
    PartialPartitionError,
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
from .health import IntegrityIssue, Orphan, SchemaIssue, UncommittedVersion, VersionIssue
from .maintenance import (
    CleanupResult,
    CompactResult,
    DroppedPartition,
    DropResult,
    VacuumResult,
)
from .namespace import PartitionedNamespace
from .planning import ScanPlan, ScanTask
from .spec import PartitionField, PartitionSpec, SpecField
from .windows import TimeWindow
from .write import PartitionWrite, WriteMode, WriteResult

__all__ = [
    "CleanupResult",
    "CommitConflictError",
    "CompactResult",
    "DropResult",
    "DroppedPartition",
    "ExpressionError",
    "FilterError",
    "IntegrityIssue",
    "ManifestError",
    "NamespaceExistsError",
    "NamespaceNotFoundError",
    "NotAPartitionedNamespaceError",
    "NullabilityError",
    "Orphan",
    "PartialPartitionError",
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
    "SchemaIssue",
    "SchemaMismatchError",
    "SpecError",
    "SpecField",
    "TimeWindow",
    "UncommittedVersion",
    "UnknownTransformError",
    "UnnamedPartitionError",
    "VacuumResult",
    "VersionIssue",
    "WriteError",
    "WriteMode",
    "WriteResult",
]
