"""``LancePartitionedIOManager``: Dagster assets stored as Lance partitioned namespaces, one per
asset at ``<root>/<asset key path>``. A run's partitions (one key, a range or any set) are
written and committed in one manifest commit; inputs load exactly their mapped partitions.

An output is handled in steps: :class:`OutputSlice` describes, from the context alone, which
part of which namespace the output writes and how (like Dagster's ``TableSlice``); *prepare*
opens, creates or evolves the namespace; *write* hands the rows to the output type's
:class:`~.handlers.TypeHandler` (a write or a merge); *describe* turns the result into
materialization metadata."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa
from dagster._core.definitions.partitions.subset import DefaultPartitionsSubset
from pydantic import Field

from ..core.concurrency import parallel_map
from ..core.errors import (
    CommitConflictError,
    NamespaceNotFoundError,
    PartitionedNamespaceError,
    StorageError,
    UnnamedPartitionError,
    WriteError,
    clean_message,
)
from ..core.evolution import is_widening
from ..core.namespace import PartitionedNamespace
from ..core.partitioning.partition_by import parse_partition_by
from ..core.partitioning.partition_spec import PartitionField, resolve_fields
from ..core.read.scan import open_table
from ..core.row_changes import RowChangeResult
from ..core.row_changes.merge import MergeOptions
from ..core.schema.arrow_json import normalize_schema, normalize_type
from ..core.transaction import Transaction
from ..core.write import WriteResult, check_mode
from .errors import (
    EvolutionRefusedError,
    MissingUpstreamPartitionsError,
    PartitionKeyMismatchError,
    StorageRootError,
)
from .handlers import (
    MergeRequest,
    ReadRequest,
    TypeHandler,
    WriteRequest,
    WriteTarget,
    check_handlers,
    default_type_handlers,
    handler_for_object,
    handler_for_type,
)
from .indexes import (
    check_requests,
    coverage_metadata,
    coverage_over,
    coverage_summary,
    declare_requested,
)
from .layout import Layout
from .metadata_keys import (
    ALLOW_MISSING,
    BYTES_WRITTEN,
    COMMITTED,
    ENGINE,
    INDEXES,
    INDEXES_DECLARED,
    MANIFEST_VERSION,
    MERGE_ON,
    PARTITION_BY,
    PARTITION_ROW_COUNTS,
    PARTITIONS_REMOVED,
    PARTITIONS_WRITTEN,
    READ_VERSIONS,
    ROWS_DELETED,
    ROWS_INSERTED,
    ROWS_MOVED,
    ROWS_UPDATED,
    RUN_PARTITION_KEYS,
    RUN_ROWS_WRITTEN,
    SCHEMA_UPDATE_MODE,
    SIZE_WRITTEN,
    SPEC_UPDATE_MODE,
    SPEC_UPDATED,
    SPEC_VERSION,
    VERSION,
    WRITE_MODE,
    scoped,
)
from .output import (
    MERGE,
    OutputSlice,
    OutputValue,
    check_merge_columns,
)
from .resource import LancePartitionedResource, check_not_nested, namespace_uri

UPDATE_MODES = ("update", "error")
OPEN_ATTEMPTS = 5  # opens of a namespace that another run is creating at that instant
EVOLVE_ATTEMPTS = 10  # re-evaluations of a schema / spec change racing other runs' changes
COUNT_THREADS = 8  # partition tables whose rows are counted at once (merge metadata)

# exceptions of Lance and Arrow (and the OS under them) that handle_output reports as StorageError
_RAW_ERRORS = (OSError, RuntimeError, ValueError, pa.ArrowException)


class LancePartitionedIOManager(dg.ConfigurableIOManager):
    """Stores assets as Lance partitioned namespaces at ``<root>/<asset key path>``.

    Outputs and inputs may be Spark DataFrames, pyarrow Tables / RecordBatchReaders or pandas
    DataFrames (chosen by the object, and for inputs by the type annotation); more types by
    overriding ``type_handlers()``. Partitioned assets need metadata ``partition_expr`` (a
    column, or ``{dimension: column}``). Unpartitioned assets need nothing: each run replaces
    the whole asset (a namespace without partition fields, one table) in one manifest commit;
    ``lance/partition_by`` stores one partitioned by its data instead. Each run of a
    partitioned asset replaces exactly its partitions in one manifest commit, or with
    ``lance/write_mode: merge`` upserts its rows on the ``lance/merge_on`` columns. Metadata
    ``lance/indexes`` (``[{"column": .., "index_type": .., "name"?: .., "min_rows"?: ..,
    **params}]``) declares indexes on the namespace (once; a different declaration of a name
    is refused), which each run's write then builds on the tables it writes before its
    commit."""

    root: str = Field(description="Where the namespaces live: a local path or an object store URI.")
    storage_options: dict[str, str] | None = Field(
        default=None, description="Object store options (credentials, endpoint, region)."
    )
    write_mode: str = Field(
        default="overwrite_partitions",
        description="Default write mode of unpartitioned assets stored with lance/partition_by: "
        "overwrite_partitions, append, overwrite or merge (metadata lance/write_mode "
        "overrides it). Unpartitioned assets without lance/partition_by are overwritten whole "
        "unless their lance/write_mode says otherwise.",
    )
    partition_spec_update_mode: str = Field(
        default="update",
        description="When the partitions definition changed: 'update' adds a spec version, "
        "'error' fails the run (metadata lance/partition_spec_update_mode overrides it).",
    )
    schema_update_mode: str = Field(
        default="update",
        description="When the output gained columns or widened types: 'update' evolves the "
        "namespace schema, 'error' fails the run (metadata lance/schema_update_mode).",
    )
    pin_upstream_version: bool = Field(
        default=True,
        description="Load inputs at the manifest version recorded by the upstream "
        "materialization (reproducible reads) instead of the latest.",
    )

    # -- type handlers ------------------------------------------------------------------------
    @staticmethod
    def type_handlers() -> Sequence[TypeHandler[Any]]:
        """The handlers of output and input types, the first supporting a type winning.
        Override it in a subclass to store more types (or to replace a built-in handler)::

            class MyIOManager(LancePartitionedIOManager):
                @staticmethod
                def type_handlers() -> Sequence[TypeHandler[Any]]:
                    return [PolarsHandler(), *default_type_handlers()]
        """
        return default_type_handlers()

    def _handlers(self) -> list[TypeHandler[Any]]:
        return check_handlers(self.type_handlers())

    # -- run start ----------------------------------------------------------------------------
    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Check, when a run starts and before any asset computes, that a local ``root`` is
        (or can be created as) a writable directory; raise :class:`StorageRootError` naming the
        path otherwise. Object store URIs are checked by their first read or write."""
        check_root(self.root)

    # -- locations ----------------------------------------------------------------------------
    @property
    def resource(self) -> LancePartitionedResource:
        """The :class:`LancePartitionedResource` of this IO manager's ``root`` and
        ``storage_options``: the namespaces it writes, for checks, sensors and asset code."""
        return LancePartitionedResource(root=self.root, storage_options=self.storage_options)

    def uri_for(self, asset_key: dg.AssetKey) -> str:
        """The namespace URI of ``asset_key``: ``<root>/<part 1>/.../<part n>``, each key part
        one directory, unchanged (the rule of :func:`~.resource.namespace_uri`, shared with
        :class:`LancePartitionedResource`).

        A part must be non-empty and made of ASCII letters, digits, ``_`` and ``-``, with ``.``
        allowed only between them (``v1.2`` yes; ``.``, ``..``, ``.hidden``, ``a.`` no); any
        other part (``/``, ``\\``, ``:``, ``%``, whitespace, control characters, non-ASCII, ...)
        raises :class:`InvalidAssetKeyError`, so every namespace stays inside ``root``."""
        return namespace_uri(self.root, asset_key)

    # -- output -------------------------------------------------------------------------------
    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        """Write ``obj`` into the asset's namespace (created, or evolved, first when needed):
        exactly the run's partitions, in one manifest commit. The indexes of ``lance/indexes``
        the namespace does not declare yet are declared first, so that commit registers the
        written tables indexed; the materialization records the indexes' coverage.

        Concurrent runs may create or evolve the namespace at the same time: one creates it,
        the others write into it; identical schema / spec changes are made once. A Lance or
        Arrow failure is raised as :class:`StorageError` naming the asset and its URI."""
        if obj is None:
            return
        uri = self.uri_for(context.asset_key)  # refuses unsafe keys before anything else
        try:
            out = OutputSlice.of(context, uri, self.write_mode)
            handlers = self._handlers()
            value = OutputValue(obj, handler_for_object(obj, out.asset, handlers), handlers)
            check_requests(out.asset, out.indexes, value.schema)
            for attempt in range(1, EVOLVE_ATTEMPTS + 1):
                ns, tx, spec_changed = self._prepare(out, value)
                declared_now = declare_requested(out.asset, ns, out.indexes)
                if declared_now:
                    context.log.info(
                        f"{out.asset}: declared index(es) {', '.join(declared_now)} ({INDEXES}) "
                        f"on {uri}; this run's write indexes the partition tables it writes"
                    )
                context.log.info(
                    f"writing {out.asset} into {uri} ({out.mode}"
                    + (f", {len(out.keys)} partition key(s)" if out.keys is not None else "")
                    + f", spec v{tx.current_spec.spec_id}"
                    + (", schema / spec changes in the same transaction" if tx.has_changes else "")
                    + ")"
                )
                try:
                    result = self._write(out, value, ns, tx)
                    break
                except CommitConflictError:
                    # another run changed the schema / spec differently meanwhile and nothing
                    # of this one is visible: evaluate the changes again on the latest version
                    if not tx.has_changes or tx.committed or attempt == EVOLVE_ATTEMPTS:
                        raise
                    context.log.info(f"{out.asset}: {uri} changed meanwhile; retrying")
            ns.refresh()
            shared, per_key = self._describe(out, value, ns, result, spec_changed)
            self._describe_indexes(context, out, ns, result, shared, per_key, declared_now)
        except PartitionedNamespaceError:
            raise
        except _RAW_ERRORS as e:
            raise StorageError(
                f"asset {context.asset_key.to_user_string()}: writing to {uri} failed: "
                f"{type(e).__name__}: {clean_message(e)}",
                namespace=uri,
                path=uri,
            ) from e
        if per_key:
            context.log.info(_run_summary(out.asset, ns.version, shared, len(per_key)))
            context.log.info(
                f"{out.asset}: Dagster now records {len(per_key)} materializations, one per "
                "partition key, each with its own metadata"
            )
            if not _add_partition_metadata(context, per_key):
                shared[PARTITION_ROW_COUNTS] = dg.MetadataValue.json(
                    {k: m["dagster/partition_row_count"] for k, m in per_key.items()}
                )
            _emit_in_partition_order(context)
        context.add_output_metadata(shared)

    def _prepare(
        self, out: OutputSlice, value: OutputValue
    ) -> tuple[PartitionedNamespace, Transaction, bool]:
        """The namespace ``out`` writes into (created when missing), the transaction that
        evolves it for ``value`` (schema, partition spec; not committed yet) and whether its
        partitioning changes. Everything that would change the namespace is checked first
        (update modes, merge keys, and that every row is one of the run's keys), and the
        changes are committed with the data, so a refused run leaves it exactly as it was."""
        if out.merge is not None:
            check_merge_columns(out.asset, out.merge, value.schema)

        def create() -> PartitionedNamespace:
            fields = self._fields(out.asset, value.schema, out.layout, out.metadata)
            value.check_rows(out)
            key = dg.AssetKey.from_user_string(out.asset)
            check_not_nested(self.root, key, self.storage_options)
            # of runs creating it at once one wins; the others get the winner's namespace,
            # whose schema may lack some of this output's columns: evolve it like any other.
            # Dictionary (categorical) columns are stored as their values.
            return PartitionedNamespace.create(
                out.uri, normalize_schema(value.schema), fields, self.storage_options, exist_ok=True
            )

        ns = self._open_or_create(out.uri, create)
        tx, spec_changed = self._evolve(
            ns, out.asset, value.schema, out.layout, out.metadata, lambda: value.check_rows(out)
        )
        return ns, tx, spec_changed

    def _write(
        self, out: OutputSlice, value: OutputValue, ns: PartitionedNamespace, tx: Transaction
    ) -> WriteResult | RowChangeResult | None:
        """Hand the rows to the handler: a merge, or a write of exactly the run's partitions,
        in ``tx`` with its schema / spec changes (a handler writes into the transaction)."""
        if not tx.has_changes:
            return self._write_into(out, value, ns)
        with tx:
            returned = self._write_into(out, value, tx)
        # a handler writing in this process added its data to tx; Spark's driver committed
        # the changes with its own data
        return tx.result.data if tx.result.data is not None else returned

    def _write_into(
        self, out: OutputSlice, value: OutputValue, ns: WriteTarget
    ) -> WriteResult | RowChangeResult | None:
        if out.merge is not None:
            return self._merge(out, out.merge, value, ns)
        request = WriteRequest(check_mode(out.mode), out.partitions(ns), out.commit_properties)
        try:
            return value.handler.write(value.obj, ns, request)
        except UnnamedPartitionError as e:  # a row of another key (also from Spark executors)
            raise out.stray_row(ns.schema, e.values.values(), e.sample) from e

    def _merge(
        self,
        out: OutputSlice,
        merge: MergeOptions,
        value: OutputValue,
        ns: WriteTarget,
    ) -> RowChangeResult | None:
        """Merge the output on its keys. For a partitioned asset the merge is the run's keys':
        a row of another key, or an input key stored in a partition of another key (the merge
        would move it out of there; refused by the merge itself, ``confine``, on the manifest
        version it commits on), is refused; ``delete`` of unmatched stored rows removes only
        rows of the run's keys (and of ``lance/merge_scope``)."""
        scopes = [merge.scope] if merge.scope else []
        confine = None
        if out.partitioned:
            value.check_rows(out)  # input rows: no core check, a merge may write any partition
            confine = out.row_filter(ns.schema)  # stored rows: checked where the merge commits
            scopes.insert(0, confine)
        by_source = merge.when_not_matched_by_source == "delete"
        request = MergeRequest(
            merge.on,
            merge.when_matched,
            merge.when_not_matched,
            merge.when_not_matched_by_source,
            " AND ".join(f"({s})" for s in scopes) if by_source and scopes else None,
            out.commit_properties,
            confine,
        )
        try:
            return value.handler.merge(value.obj, ns, request)
        except UnnamedPartitionError as e:  # a key stored outside the run's partition keys
            assert out.layout is not None
            try:
                key = out.layout.key_of(list(e.values.values()))
            except (ValueError, TypeError):  # a partition of an older spec: its raw values
                key = str(e.values)
            raise PartitionKeyMismatchError(
                f"asset {out.asset}: a merge key of the output is stored in partition key "
                f"{key!r}, which this run does not target: the merge would move the row out "
                "of it. Nothing was committed. Materialize both keys in one run, or add the "
                f"partition column(s) {[d.column for d in out.layout.dimensions]} to "
                f"{MERGE_ON} ({e})",
                key,
                e.sample,
            ) from e

    def _describe(
        self,
        out: OutputSlice,
        value: OutputValue,
        ns: PartitionedNamespace,
        result: WriteResult | RowChangeResult | None,
        spec_changed: bool,
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """The output's metadata (on every event of the run) and, for a run of several keys,
        each key's own: its row count, the read versions of its tables and the partition tables
        and bytes it wrote (the run's totals are then on every event as ``lance/run_*``)."""
        meta: dict[str, Any] = {
            "dagster/uri": dg.MetadataValue.path(out.uri),
            "dagster/table_name": out.asset,
            "dagster/column_schema": column_schema(ns.schema),
            MANIFEST_VERSION: ns.version,
            SPEC_VERSION: ns.current_spec.spec_id,
            SPEC_UPDATED: spec_changed,
        }
        total: int | None = None  # the namespace's rows, when they are the count to report
        keys, layout = out.keys, out.layout
        # a run of several keys: each key's event carries its own numbers, the run's totals
        # are named lance/run_*
        several = keys is not None and len(keys) > 1 and layout is not None
        if isinstance(result, RowChangeResult):
            tables, total = self._merge_metadata(out, ns, result, meta, several)
        else:
            tables = [_Table.written(p) for p in result.partitions] if result else []
            meta[scoped(PARTITIONS_WRITTEN, several)] = len(tables)
            meta.update(_bytes_metadata(result.bytes_written if result else 0, several))
            if result is not None and result.removed:
                meta[scoped(PARTITIONS_REMOVED, several)] = len(result.removed)
        meta[ENGINE] = value.handler.engine or "arrow"
        rows = sum(t.rows for t in tables) if total is None else total
        if not several:
            meta[READ_VERSIONS] = dg.MetadataValue.json(_read_versions(tables, layout))
            meta["dagster/row_count" if keys is None else "dagster/partition_row_count"] = rows
            return meta, {}
        assert keys is not None and layout is not None
        if not isinstance(result, RowChangeResult):
            meta[RUN_ROWS_WRITTEN] = rows
        meta[RUN_PARTITION_KEYS] = len(keys)
        return meta, _per_key_metadata(tables, keys, layout, isinstance(result, RowChangeResult))

    def _describe_indexes(
        self,
        context: dg.OutputContext,
        out: OutputSlice,
        ns: PartitionedNamespace,
        result: WriteResult | RowChangeResult | None,
        shared: dict[str, Any],
        per_key: dict[str, dict[str, Any]],
        declared_now: Sequence[str],
    ) -> None:
        """Add the coverage of the namespace's declared indexes to the output's metadata
        (nothing when it declares none): over the partition tables of the run's keys for a
        partitioned asset (each key's event: its own tables; the run's under
        ``lance/run_*``), over the tables the run wrote or changed for an unpartitioned one.
        Only those tables are opened, never the whole namespace."""
        if declared_now:
            shared[INDEXES_DECLARED] = dg.MetadataValue.json(list(declared_now))
        if out.partitioned:
            tasks = list(ns.plan_scan(out.row_filter(ns.schema), by_stats=False).tasks)
        else:
            written = _written_ids(result)
            tasks = [t for t in ns.plan_scan(None, by_stats=False).tasks if t.object_id in written]
        layout, current = out.layout, ns.current_spec.spec_id

        def key_of(task: Any) -> str | None:
            if layout is None or task.spec_id != current:
                return None  # a table of an older partitioning belongs to no key's event
            return layout.key_of(list(task.partition_values.values()))

        several = bool(per_key)
        total, by_key = coverage_over(
            ns, tasks, key_of if several else None, list(per_key) if several else ()
        )
        if not total:
            return
        shared.update(coverage_metadata(total, run=several))
        for key, meta in per_key.items():
            meta.update(coverage_metadata(by_key[key]))
        scope = "the run's partition keys" if out.partitioned else "the tables the run wrote"
        context.log.info(f"{out.asset}: indexes over {scope}: {coverage_summary(total)}")

    def _merge_metadata(
        self,
        out: OutputSlice,
        ns: PartitionedNamespace,
        result: RowChangeResult,
        meta: dict[str, Any],
        run: bool = False,
    ) -> tuple[list[_Table], int | None]:
        """Add a merge's own metadata to ``meta`` (rows inserted / updated / deleted / moved,
        partition tables changed; named ``lance/rows_inserted``, ...: with ``run``, the totals
        of a run of several keys, ``lance/run_...``). Returns the tables describing it, with
        their rows after it: those of the run's keys (current spec; ``changed`` when the merge
        wrote them) -- for an unpartitioned asset the changed ones, and the namespace's row
        count."""
        assert out.merge is not None
        meta.update(
            {
                WRITE_MODE: MERGE,
                MERGE_ON: dg.MetadataValue.json(list(out.merge.on)),
                scoped(ROWS_INSERTED, run): dg.MetadataValue.int(result.rows_inserted),
                scoped(ROWS_UPDATED, run): dg.MetadataValue.int(result.rows_updated),
                scoped(ROWS_DELETED, run): dg.MetadataValue.int(result.rows_deleted),
                scoped(ROWS_MOVED, run): dg.MetadataValue.int(result.rows_moved),
                scoped(PARTITIONS_WRITTEN, run): len(result.partitions),
                COMMITTED: result.committed,
            }
        )
        if result.partitions_removed:
            meta[scoped(PARTITIONS_REMOVED, run)] = len(result.partitions_removed)
        changed = set(result.partitions)
        if not out.partitioned:
            tables = _counted(ns, None, self.storage_options, changed)
            return [t for t in tables if t.changed], sum(t.rows for t in tables)
        current = ns.current_spec.spec_id
        tables = _counted(ns, out.row_filter(ns.schema), self.storage_options, changed)
        return [t for t in tables if t.spec_id == current], None  # older specs': no key's

    def _open_or_create(
        self, uri: str, create: Callable[[], PartitionedNamespace]
    ) -> PartitionedNamespace:
        """The namespace at ``uri``, made by ``create`` (atomic, opening a concurrent winner's)
        when there is none. A storage failure while another run is creating it (the manifest
        half-appeared) is retried a few times; a lasting one is raised."""
        for attempt in range(1, OPEN_ATTEMPTS):
            try:
                ns = self._open(uri)
                return ns if ns is not None else create()
            except StorageError:
                time.sleep(0.05 * attempt)
        ns = self._open(uri)
        return ns if ns is not None else create()

    def _open(self, uri: str) -> PartitionedNamespace | None:
        try:
            return PartitionedNamespace.open(uri, self.storage_options)
        except NamespaceNotFoundError:
            return None

    def _fields(
        self, asset: str, schema: pa.Schema, layout: Layout | None, meta: Mapping[str, Any]
    ) -> list[PartitionField]:
        """The partition fields of the asset's spec: its partitions definition's, those of
        ``lance/partition_by``, or none (stored as it is: one table holds every row)."""
        if layout is not None:
            return layout.fields(schema)
        raw = meta.get(PARTITION_BY)
        if raw is None:
            return []
        return parse_partition_by(raw if isinstance(raw, str) else list(raw))

    def _evolve(
        self,
        ns: PartitionedNamespace,
        asset: str,
        schema: pa.Schema,
        layout: Layout | None,
        meta: Mapping[str, Any],
        check_rows: Callable[[], None],
    ) -> tuple[Transaction, bool]:
        """A transaction holding the changes that adopt the output's added columns, widened
        types and changed partitioning (none: nothing to adopt), after checking the update
        modes and (``check_rows``) that every row is a targeted key; True when the output's
        partitioning differs from the namespace's current spec. Concurrent runs making the
        same changes converge when they commit (see :mod:`~..core.transaction`)."""
        tx = ns.transaction()  # ns was just opened: the changes are checked on its version
        fields = self._fields(asset, self._target(ns, schema), layout, meta)
        added, widened = self._schema_changes(ns, schema)
        changes_spec = not self._same_spec(ns, fields)
        if not (added or widened or changes_spec):
            return tx, False
        self._refuse(asset, meta, ns, added, widened, changes_spec, fields)
        check_rows()
        if added:
            tx.add_columns(added)
        for name, typ in widened:
            tx.promote_column(name, typ)
        if changes_spec:
            tx.update_spec(fields)
        return tx, changes_spec

    @staticmethod
    def _schema_changes(
        ns: PartitionedNamespace, schema: pa.Schema
    ) -> tuple[list[pa.Field], list[tuple[str, pa.DataType]]]:
        """Columns the output adds to the namespace schema, and types it widens."""
        current = ns.schema
        added = [
            f.with_nullable(True).with_type(normalize_type(f.type))  # dictionaries as values
            for f in schema
            if current.get_field_index(f.name) < 0
        ]
        widened = [
            (f.name, f.type)
            for f in schema
            if current.get_field_index(f.name) >= 0
            and current.field(f.name).type != f.type
            and is_widening(current.field(f.name).type, f.type)
        ]
        return added, widened

    @staticmethod
    def _target(ns: PartitionedNamespace, schema: pa.Schema) -> pa.Schema:
        """The namespace schema after adopting the output's added columns and widened types."""
        target = ns.schema
        for f in schema:
            i = target.get_field_index(f.name)
            if i < 0:
                target = target.append(f.with_nullable(True))
            elif is_widening(target.field(i).type, f.type):
                target = target.set(i, target.field(i).with_type(f.type))
        return target

    @staticmethod
    def _same_spec(ns: PartitionedNamespace, fields: list[PartitionField]) -> bool:
        """Whether ``fields`` are the current spec's fields."""
        names = set(ns.schema.names)
        if any(c not in names for f in fields for c in f.source_columns):
            return False  # partitioned by a column the namespace does not have yet
        return resolve_fields(fields, ns.schema_with_ids, ns.specs) == ns.current_spec.fields

    def _refuse(
        self,
        asset: str,
        meta: Mapping[str, Any],
        ns: PartitionedNamespace,
        added: list[pa.Field],
        widened: list[tuple[str, pa.DataType]],
        spec_changed: bool,
        fields: list[PartitionField],
    ) -> None:
        """Raise when a change the output implies is not allowed by the update modes."""
        if (added or widened) and _mode(
            meta, SCHEMA_UPDATE_MODE, self.schema_update_mode
        ) == "error":
            what = [f"new column {f.name!r} ({f.type})" for f in added] + [
                f"column {n!r} widened {ns.schema.field(n).type} -> {t}" for n, t in widened
            ]
            raise EvolutionRefusedError(
                f"asset {asset}: the output schema changed ({'; '.join(what)}) and "
                f"{SCHEMA_UPDATE_MODE} is 'error'; nothing was written"
            )
        if (
            spec_changed
            and _mode(meta, SPEC_UPDATE_MODE, self.partition_spec_update_mode) == "error"
        ):
            have = ", ".join(f.field_id for f in ns.current_spec.fields) or "none"
            want = ", ".join(f.default_field_id() for f in fields) or "none"
            raise EvolutionRefusedError(
                f"asset {asset}: its partitioning changed (spec v{ns.current_spec.spec_id}: "
                f"{have}; now: {want}) and {SPEC_UPDATE_MODE} is 'error'; nothing was written"
            )

    # -- input --------------------------------------------------------------------------------
    def load_input(self, context: dg.InputContext) -> Any:
        """The asset's rows of the partitions the input maps to (all rows when unpartitioned),
        filtered and projected by the input's ``filter`` / ``columns`` metadata."""
        asset_key = context.asset_key
        uri = self.uri_for(asset_key)  # refuses unsafe keys before anything is read
        upstream = context.upstream_output
        asset = asset_key.to_user_string()
        meta = dict(context.definition_metadata or {})
        upstream_meta = dict(upstream.definition_metadata or {}) if upstream else {}
        handler = handler_for_type(context.dagster_type.typing_type, asset, self._handlers())
        version = meta.get(VERSION)
        keys: list[str] | None = None
        if context.has_asset_partitions:
            keys = list(context.asset_partition_keys)
        recorded = None
        if version is None and self.pin_upstream_version:
            recorded = self._recorded_version(context, asset_key, keys)
        try:
            ns = PartitionedNamespace.open(uri, self.storage_options)
        except PartitionedNamespaceError as e:
            raise type(e)(f"cannot load asset {asset} from {uri}: {e}") from e
        if version is not None:
            ns = self._at_version(ns, asset, int(version))
        elif recorded is not None and recorded <= ns.version:
            ns = self._at_version(ns, asset, recorded)
        elif recorded is not None:  # the namespace was re-created since that materialization
            context.log.warning(
                f"{asset}: the upstream materialization recorded manifest version {recorded}, "
                f"but {uri} is at version {ns.version} (re-created?); loading the latest"
            )
        filters: list[str] = []
        if keys is not None and context.asset_partitions_def is not None:
            layout = Layout.of(
                asset, context.asset_partitions_def, upstream_meta.get("partition_expr")
            )
            filters.append(layout.row_filter(keys, ns.schema))
        if meta.get("filter"):
            filters.append(f"({meta['filter']})")
        columns = meta.get("columns")
        request = ReadRequest(
            uri,
            " AND ".join(filters) or None,
            list(columns) if columns is not None else None,
            ns.version,
            self.storage_options,
        )
        plan = ns.plan_scan(request.filter)
        if keys is not None and context.asset_partitions_def is not None and _partitioned(context):
            self._check_missing(context, asset, keys, layout, ns, plan, meta)
        context.log.info(
            f"loading {asset} from {uri} at manifest version {ns.version}: "
            f"{len(plan.tasks)} of {plan.total_partitions} partition tables"
            + (f" for {len(keys)} partition key(s)" if keys is not None else "")
        )
        return handler.read(request)

    def _check_missing(
        self,
        context: dg.InputContext,
        asset: str,
        keys: list[str],
        layout: Layout,
        ns: PartitionedNamespace,
        plan: Any,
        meta: Mapping[str, Any],
    ) -> None:
        """Raise :class:`MissingUpstreamPartitionsError` when mapped keys have neither a
        partition in the namespace nor a Dagster materialization (input metadata
        ``lance/allow_missing_partitions: True`` logs a warning instead)."""
        current = ns.current_spec.spec_id
        if any(t.spec_id != current for t in plan.tasks):
            return  # partitions of another partitioning: which keys they hold is not known
        present = {layout.key_of(list(t.partition_values.values())) for t in plan.tasks}
        missing = [k for k in keys if k not in present]
        if missing and _has_instance(context):
            done = context.instance.get_materialized_partitions(context.asset_key)
            missing = [k for k in missing if k not in done]
        if not missing:
            return
        shown = ", ".join(missing[:20]) + (
            f" and {len(missing) - 20} more" if len(missing) > 20 else ""
        )
        if bool(meta.get(ALLOW_MISSING, False)):
            context.log.warning(
                f"{asset}: {len(missing)} of {len(keys)} mapped partition(s) were never "
                f"materialized and load as no rows ({ALLOW_MISSING}): {shown}"
            )
            return
        raise MissingUpstreamPartitionsError(
            f"cannot load asset {asset}: {len(missing)} of the {len(keys)} partition(s) this "
            f"input maps to were never materialized: {shown}. Materialize them first, or set "
            f"input metadata {ALLOW_MISSING}: True to load them as no rows",
            asset,
            missing,
        )

    def _at_version(
        self, ns: PartitionedNamespace, asset: str, version: int
    ) -> PartitionedNamespace:
        try:
            return PartitionedNamespace.open(ns.uri, self.storage_options, version)
        except Exception as e:
            raise PartitionedNamespaceError(
                f"cannot load asset {asset} at manifest version {version} of {ns.uri} "
                f"(latest is {ns.version}): {e}"
            ) from e

    def _recorded_version(
        self, context: dg.InputContext, asset_key: dg.AssetKey, keys: list[str] | None
    ) -> int | None:
        """The newest manifest version recorded by materializations of the partitions loaded."""
        instance = context.instance if _has_instance(context) else None
        if instance is None:
            return None
        records_filter = dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=keys)
        limit = min(len(keys), 1000) if keys else 1
        records = instance.fetch_materializations(records_filter, limit=limit).records
        versions = []
        for r in records:
            mat = r.asset_materialization
            value = mat.metadata.get(MANIFEST_VERSION) if mat is not None else None
            if value is not None:
                versions.append(int(str(value.value)))
        return max(versions) if versions else None


def check_root(root: str) -> None:
    """Raise :class:`StorageRootError` unless the local directory ``root`` exists or can be
    created, and is writable (object store URIs are not checked)."""
    if "://" in root and not root.startswith("file://"):
        return
    path = os.path.abspath(root.removeprefix("file://"))
    if os.path.exists(path) and not os.path.isdir(path):
        raise StorageRootError(
            f"IO manager root {path} is a file, not a directory; point root (DLP_ROOT) at a "
            "directory. Nothing was computed.",
            path,
        )
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise StorageRootError(
            f"IO manager root {path} cannot be created ({e.strerror or e}); nothing was computed",
            path,
        ) from e
    if not os.access(path, os.W_OK | os.X_OK):
        raise StorageRootError(
            f"IO manager root {path} is not writable by this process; nothing was computed",
            path,
        )


def _partitioned(context: dg.InputContext) -> bool:
    """Whether the loading step is partitioned; an unpartitioned downstream reads every
    upstream partition that exists (its mapping names all of them, materialized or not)."""
    try:
        step = context.step_context
        return bool(step.has_partition_key or step.has_partition_key_range)
    except Exception:  # a context built outside a run
        return False


def _has_instance(context: dg.InputContext) -> bool:
    try:
        return context.instance is not None
    except Exception:  # a context built without an instance (direct IO manager calls)
        return False


def _mode(meta: Mapping[str, Any], key: str, default: str) -> str:
    mode = str(meta.get(key, default))
    if mode not in UPDATE_MODES:
        raise WriteError(f"{key} must be one of {UPDATE_MODES}, got {mode!r}")
    return mode


def column_schema(schema: pa.Schema) -> dg.TableSchema:
    """The namespace schema as Dagster column metadata."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                f.name,
                str(f.type),
                constraints=dg.TableColumnConstraints(nullable=f.nullable),
            )
            for f in schema
        ]
    )


@dataclass(frozen=True)
class _Table:
    """A partition table an output wrote or changed: its partition values (spec order), the
    version now registered, and its rows (those written; for a merge, all of it now)."""

    object_id: str
    values: Mapping[str, Any]
    read_version: int | None
    rows: int
    spec_id: int | None = None
    bytes: int = 0  # of the data files written (writes; merges do not report them)
    changed: bool = True  # written by this output (False: a merge left it as it was)

    @classmethod
    def written(cls, p: Any) -> _Table:
        """A partition a write wrote (a ``PartitionWrite``)."""
        return cls(p.object_id, p.values, p.read_version, p.rows, bytes=p.bytes_written)


def _written_ids(result: WriteResult | RowChangeResult | None) -> set[str]:
    """The object ids of the partition tables a write or merge wrote or changed."""
    if result is None:
        return set()
    if isinstance(result, RowChangeResult):
        return set(result.partitions)
    return {p.object_id for p in result.partitions}


def _counted(
    ns: PartitionedNamespace,
    filter: str | None,
    storage_options: dict[str, str] | None,
    changed: set[str],
) -> list[_Table]:
    """The partition tables a scan with ``filter`` reads, with their row counts (recorded in
    the manifest; a table without them counted from its metadata, a few tables at a time);
    ``changed``: the object ids a merge wrote."""
    tasks = list(ns.plan_scan(filter, by_stats=False).tasks)

    def count(task: Any) -> int:
        if task.rows is not None:
            return int(task.rows)
        return int(open_table(task, storage_options).count_rows())

    rows = parallel_map(count, tasks, COUNT_THREADS)
    return [
        _Table(
            t.object_id, t.partition_values, t.read_version, n, t.spec_id, 0, t.object_id in changed
        )
        for t, n in zip(tasks, rows, strict=True)
    ]


def _per_key_metadata(
    tables: Sequence[_Table], keys: Sequence[str], layout: Layout, merge: bool = False
) -> dict[str, dict[str, Any]]:
    """For each key of a multi-key run: its row count, the read versions of its tables, the
    partition tables it wrote and (a write) their bytes."""
    mine: dict[str, list[_Table]] = {k: [] for k in keys}
    for t in tables:
        key = layout.key_of(list(t.values.values()))
        if key in mine:  # partitions of other keys (an older spec's) belong to no event
            mine[key].append(t)
    out: dict[str, dict[str, Any]] = {}
    for k in keys:
        written = [t for t in mine[k] if t.changed]
        out[k] = {
            "dagster/partition_row_count": sum(t.rows for t in mine[k]),
            READ_VERSIONS: dg.MetadataValue.json(_read_versions(mine[k], layout)),
            PARTITIONS_WRITTEN: len(written),
        }
        if not merge:
            out[k].update(_bytes_metadata(sum(t.bytes for t in written)))
    return out


def _bytes_metadata(n: int, run: bool = False) -> dict[str, Any]:
    """``lance/bytes_written`` (an integer, which the UI plots) and ``lance/size_written`` (the
    same as text a person reads, e.g. ``2.8 MiB``); ``lance/run_...`` with ``run``."""
    return {
        scoped(BYTES_WRITTEN, run): dg.MetadataValue.int(n),
        scoped(SIZE_WRITTEN, run): dg.MetadataValue.text(_human_size(n)),
    }


def _human_size(n: int) -> str:
    """A byte count in binary units: ``512 B``, ``2.8 MiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _run_summary(asset: str, version: int, meta: Mapping[str, Any], keys: int) -> str:
    """One line with a multi-key run's totals, for the run's log."""

    def num(key: str) -> Any:
        value = meta.get(scoped(key, True))
        return getattr(value, "value", value)

    parts = [f"{keys} partition keys", f"{num(PARTITIONS_WRITTEN)} partition table(s) written"]
    if meta.get(RUN_ROWS_WRITTEN) is not None:
        parts.append(f"{num(RUN_ROWS_WRITTEN)} rows, {num(SIZE_WRITTEN)}")
    else:
        parts.append(
            f"rows inserted {num(ROWS_INSERTED)}, updated {num(ROWS_UPDATED)}, "
            f"deleted {num(ROWS_DELETED)}, moved {num(ROWS_MOVED)}"
        )
    return f"{asset}: manifest version {version}: " + ", ".join(parts)


def _read_versions(tables: Sequence[_Table], layout: Layout | None) -> dict[str, str]:
    """The Lance table version now registered for each table, keyed by its Dagster partition
    key (by ``column=value`` for assets stored partitioned by their data). Versions are text:
    detached versions exceed 2**53, which the Dagster UI (JavaScript) would round."""
    out: dict[str, str] = {}
    for t in tables:
        if layout is not None:
            name = layout.key_of(list(t.values.values()))
        else:
            name = "/".join(f"{c}={v}" for c, v in t.values.items()) or t.object_id
        if name in out:  # several tables under one name (should not happen): keep them all
            name = f"{name} ({t.object_id})"
        out[name] = str(t.read_version)
    return out


def _add_partition_metadata(context: dg.OutputContext, per_key: dict[str, dict[str, Any]]) -> bool:
    """Attach each key's metadata to that key's materialization only (so a backfill of N keys
    stores N small events, not N copies of every key's numbers); False for a context built
    outside a run, which has no step to attach them to."""
    try:
        step = context.step_context
    except dg.DagsterInvariantViolationError:
        return False
    for key, meta in per_key.items():
        step.add_asset_metadata(meta, asset_key=context.asset_key, partition_key=key)
    return True


class _KeysInOrder(set):  # type: ignore[type-arg]
    """A set of partition keys that iterates in a given order."""

    def __init__(self, ordered: Sequence[str]) -> None:
        super().__init__(ordered)
        self.ordered = list(ordered)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ordered)


def _emit_in_partition_order(context: dg.OutputContext) -> None:
    """Have Dagster emit the run's materializations in partition order, so the run's newest
    event (the asset's "latest materialization" in the UI) is its last key. Dagster lists the
    keys of a run of static, dynamic or multi-partitions from a set (any order); time windows
    already come in order. Relies on the output context's partitions subset (Dagster 1.13);
    left as it is when that changed."""
    subset = getattr(context, "_asset_partitions_subset", None)
    pdef = context.asset_partitions_def if context.has_asset_partitions else None
    if type(subset) is not DefaultPartitionsSubset or pdef is None or len(subset.subset) < 2:
        return
    instance = context.step_context.instance if _has_step(context) else None
    ordered = sorted(subset.subset, key=_partition_order(pdef, instance))
    context._asset_partitions_subset = DefaultPartitionsSubset(_KeysInOrder(ordered))


def _partition_order(
    pdef: dg.PartitionsDefinition, instance: dg.DagsterInstance | None = None
) -> Callable[[str], tuple[Any, ...]]:
    """A sort key putting partition keys of ``pdef`` in its order (time windows by start,
    static keys as defined, dynamic keys as added, multi-partitions dimension by dimension, in
    Dagster's dimension order)."""
    if isinstance(pdef, dg.MultiPartitionsDefinition):
        dims = [(d.name, _rank(d.partitions_def, instance)) for d in pdef.partitions_defs]

        def multi(key: str) -> tuple[Any, ...]:
            parts = (
                key.keys_by_dimension
                if isinstance(key, dg.MultiPartitionKey)
                else dict(zip([n for n, _ in dims], str(key).split("|"), strict=True))
            )
            return tuple(rank(parts[name]) for name, rank in dims)

        return multi
    rank = _rank(pdef, instance)
    return lambda key: (rank(key),)


def _rank(
    pdef: dg.PartitionsDefinition, instance: dg.DagsterInstance | None
) -> Callable[[str], tuple[Any, ...]]:
    """A sort key of one dimension's keys."""
    if isinstance(pdef, dg.TimeWindowPartitionsDefinition):
        return lambda key: (pdef.time_window_for_partition_key(key).start.timestamp(), key)
    if isinstance(pdef, dg.DynamicPartitionsDefinition):
        known = pdef.get_partition_keys(dynamic_partitions_store=instance) if instance else []
    else:
        known = pdef.get_partition_keys()
    index = {k: i for i, k in enumerate(known)}
    return lambda key: (index.get(key, len(index)), key)


def _has_step(context: dg.OutputContext) -> bool:
    try:
        context.step_context  # noqa: B018 -- raises outside a run
    except dg.DagsterInvariantViolationError:
        return False
    return True
