"""The second door into core: what the engines built on it (the Dagster layer, the Spark
layer, the CLI) need beyond the public API of :mod:`dagster_lance_partitioned.core`.

Everything an engine imports from core comes from here or from the package itself; every other
core module is internal and may change in any release. The names are grouped by what an
engine does with them:

- **Writing partitions** it computed itself (Spark writes staged per task, then committed once).
- **Reading the tables of a scan plan** task by task (Spark partitions, the IO manager's loads).
- **Changing rows in tasks** (Spark's distributed merge: plan, per-table executor, one commit).
- **Filters and schemas** as the engines pass them through (quoting, literals, field ids).
- **The manifest** as checks, sensors and the CLI inspect it (snapshots, commit properties,
  writer flags, history, health).
- **Partition specs** as engines describe and evaluate them.
- **Search indexes** as asset checks, jobs and the CLI declare, build and describe them.
- **Storage** paths and listings, and the bounded thread pool core uses.
- **Sizes and thresholds** core works with (:class:`~.tuning.Tuning`, changed for a block with
  :func:`~.tuning.tuned`)."""

# isort: skip_file
from __future__ import annotations

# -- Writing partitions an engine computed (staged per task, committed once)
from .adoption import Adoption, open_or_create, plan_adoption, write_adopting
from .manifest.naming import NAMING_KEY, derived_name, ensure_naming_key, keyed_name
from .manifest.registration import TableVersion
from .manifest.stats import of_table as table_statistics
from .schema.conform import conform_for_write, table_write_schema
from .write.mode import WRITE_MODES, check_mode
from .write.staged import StageResult, StagedPartition, StagedWrite
from .write.writer import PartitionWriter
from .table_files import data_bytes

# -- Reading the tables of a scan plan task by task; filters as engines pass them
from .expr.filters import FilterLike, error_text, first_line, quote_ident, sql_literal, to_sql
from .read.field_filters import resolve_filter
from .read.scan import iter_task_batches, lance_filter, open_table

# -- Changing rows in tasks (a distributed merge: plan, executor per table, commit)
from .manifest.changes import apply_to as apply_changes, commit_changes
from .row_changes.change import TableEdit
from .row_changes.commit import Counts, commit_outcomes, new_table_location
from .row_changes.executor import TableExecutor
from .row_changes.keys import anti as anti_join_keys, distinct as distinct_keys
from .row_changes.merge import (
    WHEN_MATCHED,
    WHEN_NOT_MATCHED,
    WHEN_NOT_MATCHED_BY_SOURCE,
    check_input_schema,
    check_keys,
    check_null_keys,
    confined_error,
    duplicate_key_error,
)
from .row_changes.plan import ChangePlan, keys_cover_partitions, source_names as spec_source_columns

# -- Schemas with field ids
from .schema.arrow_json import field_id, is_list_like, normalize_schema, strip_field_ids

# -- The manifest as checks, sensors and the CLI read it (flags, history, health)
from .manifest.commit_summary import (
    PROP_DAGSTER_ASSET_KEY,
    PROP_DAGSTER_PARTITION_KEYS,
    PROP_DAGSTER_RUN_ID,
    PROP_SOURCE,
)
from .manifest.state import state_of
from .manifest.store import ManifestStore
from .manifest.snapshot import ManifestSnapshot, TableEntry
from .manifest.layout import (
    LEGACY_WRITER_FLAG_BIT,
    WRITER_FLAG_BIT,
    WRITER_FLAG_KEY,
    parse_writer_flags,
)
from .ops.health import (
    ORPHAN_GRACE,
    check_integrity,
    check_read_versions,
    check_schemas,
    find_orphans,
)
from .ops.history import commits as commit_history

# -- Partition specs as engines describe and evaluate them
from .partitioning.describe import field_summary, source_labels, transform_text, window_of
from .partitioning.partition_by import parse_partition_by
from .partitioning.partition_spec import source_names, source_types
from .partitioning.partitioner import SpecEvaluator
from .partitioning.transforms import Granularity
from .partitioning.windows import as_source, is_zoned, window_values

# -- Search indexes as checks, jobs and the CLI declare, build and describe them
from .search.build import TableIndexState
from .search.catalog import (
    Reindex,
    Runner as IndexRunner,
    coverages as index_coverages,
    create_index,
    declared as declared_indexes,
    find as find_index,
    optimize_indexes,
    summarize as summarize_indexes,
    table_states as index_table_states,
)
from .search.declaration import (
    IndexDeclaration,
    METRICS,
    VECTOR_TYPES,
    canonical_type,
    declare as declare_index,
    kind_of,
)
from .search.query import text_index, vector_column
from .search.tables import DISTANCE, SCORE

# -- Storage paths and listings, core's bounded thread pool, error text
from .concurrency import parallel_map, table_threads
from .errors import clean_message, is_storage_failure
from .storage import (
    MANIFEST_DIR,
    file_sizes,
    is_dir,
    join as join_uri,
    list_dirs,
    list_files,
    location_problem,
    manifest_exists,
    table_uri,
)

# -- Sizes and thresholds (tests, benchmarks, unusual deployments)
from .tuning import Tuning, tuned, tuning

__all__ = [
    "DISTANCE",
    "LEGACY_WRITER_FLAG_BIT",
    "MANIFEST_DIR",
    "METRICS",
    "NAMING_KEY",
    "ORPHAN_GRACE",
    "PROP_DAGSTER_ASSET_KEY",
    "PROP_DAGSTER_PARTITION_KEYS",
    "PROP_DAGSTER_RUN_ID",
    "PROP_SOURCE",
    "SCORE",
    "VECTOR_TYPES",
    "WHEN_MATCHED",
    "WHEN_NOT_MATCHED",
    "WHEN_NOT_MATCHED_BY_SOURCE",
    "WRITER_FLAG_BIT",
    "WRITER_FLAG_KEY",
    "WRITE_MODES",
    "Adoption",
    "ChangePlan",
    "Counts",
    "FilterLike",
    "Granularity",
    "IndexDeclaration",
    "IndexRunner",
    "ManifestSnapshot",
    "ManifestStore",
    "PartitionWriter",
    "Reindex",
    "SpecEvaluator",
    "StageResult",
    "StagedPartition",
    "StagedWrite",
    "TableEdit",
    "TableEntry",
    "TableExecutor",
    "TableIndexState",
    "TableVersion",
    "Tuning",
    "anti_join_keys",
    "apply_changes",
    "as_source",
    "canonical_type",
    "check_input_schema",
    "check_integrity",
    "check_keys",
    "check_mode",
    "check_null_keys",
    "check_read_versions",
    "check_schemas",
    "clean_message",
    "commit_changes",
    "commit_history",
    "commit_outcomes",
    "confined_error",
    "conform_for_write",
    "create_index",
    "data_bytes",
    "declare_index",
    "declared_indexes",
    "derived_name",
    "distinct_keys",
    "duplicate_key_error",
    "ensure_naming_key",
    "error_text",
    "field_id",
    "field_summary",
    "file_sizes",
    "find_index",
    "find_orphans",
    "first_line",
    "index_coverages",
    "index_table_states",
    "is_dir",
    "is_list_like",
    "is_storage_failure",
    "is_zoned",
    "iter_task_batches",
    "join_uri",
    "keyed_name",
    "keys_cover_partitions",
    "kind_of",
    "lance_filter",
    "list_dirs",
    "list_files",
    "location_problem",
    "manifest_exists",
    "new_table_location",
    "normalize_schema",
    "open_or_create",
    "open_table",
    "optimize_indexes",
    "parallel_map",
    "parse_partition_by",
    "parse_writer_flags",
    "plan_adoption",
    "quote_ident",
    "resolve_filter",
    "source_labels",
    "source_names",
    "source_types",
    "spec_source_columns",
    "sql_literal",
    "state_of",
    "strip_field_ids",
    "summarize_indexes",
    "table_statistics",
    "table_threads",
    "table_uri",
    "table_write_schema",
    "text_index",
    "to_sql",
    "transform_text",
    "tuned",
    "tuning",
    "vector_column",
    "window_of",
    "window_values",
    "write_adopting",
]
