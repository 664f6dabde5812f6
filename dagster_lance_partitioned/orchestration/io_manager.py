"""``LancePartitionedIOManager``: Dagster assets stored as Lance partitioned namespaces, one per
asset at ``<root>/<asset key path>``. A run's partitions (one key, a range or any set) are
written and committed in one manifest commit; inputs load exactly their mapped partitions.

An output is handled in steps: :class:`OutputSlice` describes, from the context alone, which
part of which namespace the output writes and how (like Dagster's ``TableSlice``); *prepare*
opens or creates the namespace and plans what it adopts of the output's schema and partitioning
(:mod:`~..core.adoption`, which also retries a commit that lost to another run's changes);
*write* hands the rows to the output type's :class:`~.handlers.TypeHandler` (a write or a
merge); *describe* turns the result into materialization metadata (:mod:`.metadata`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import dagster as dg
import pyarrow as pa
from pydantic import Field

from ..core import (
    MergeOptions,
    PartitionedNamespace,
    PartitionedNamespaceError,
    PartitionField,
    RowChangeResult,
    ScanPlan,
    StorageError,
    UnnamedPartitionError,
    WriteError,
    WriteResult,
)
from ..core.engine import (
    Adoption,
    check_mode,
    clean_message,
    normalize_schema,
    open_or_create,
    parse_partition_by,
    plan_adoption,
    write_adopting,
)
from .dagster_private import input_instance, is_partitioned_step
from .errors import (
    MissingUpstreamPartitionsError,
    PartitionKeyMismatchError,
    StorageRootError,
)
from .handlers import (
    ReadRequest,
    TypeHandler,
    WriteRequest,
    WriteTarget,
    check_handlers,
    default_type_handlers,
    handler_for_object,
    handler_for_type,
)
from .indexes import check_requests, declare_requested
from .layout import Layout
from .metadata import column_schema as column_schema  # importable from here as before
from .metadata import describe_indexes, describe_output, record_metadata
from .metadata_keys import (
    ALLOW_MISSING,
    INDEXES,
    MANIFEST_VERSION,
    MERGE_ON,
    PARTITION_BY,
    SCHEMA_UPDATE_MODE,
    SPEC_UPDATE_MODE,
    VERSION,
)
from .output import OutputSlice, OutputValue, check_merge_columns
from .resource import LancePartitionedResource, check_not_nested, namespace_uri

UPDATE_MODES = ("update", "error")

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
        with _storage_errors(context.asset_key, uri):
            out = OutputSlice.of(context, uri, self.write_mode)
            handlers = self._handlers()
            value = OutputValue(obj, handler_for_object(obj, out.asset, handlers), handlers)
            check_requests(out.asset, out.indexes, value.schema)
            declared: list[str] = []  # the indexes this run declared
            done = write_adopting(
                lambda: self._prepare(out, value),
                lambda ns, target: self._write(context, out, value, ns, target, declared),
                # another run changed the schema / spec differently meanwhile and nothing of
                # this one is visible: the changes are evaluated again on the latest version
                on_retry=lambda: context.log.info(
                    f"{out.asset}: {uri} changed meanwhile; retrying"
                ),
            )
            ns = done.namespace.refresh()
            engine = value.handler.engine
            spec_changed = done.adoption.changes_spec
            meta = describe_output(out, engine, ns, done.result, spec_changed, self.storage_options)
            coverage = describe_indexes(out, ns, done.result, meta, declared)
            if coverage is not None:
                context.log.info(coverage)
        record_metadata(context, out.asset, ns.version, meta)

    def _prepare(
        self, out: OutputSlice, value: OutputValue
    ) -> tuple[PartitionedNamespace, Adoption]:
        """The namespace ``out`` writes into (created when missing) and what it adopts of
        ``value``'s schema and partitioning (made in one transaction with the data). Everything
        that would change the namespace is checked first (update modes, merge keys, and that
        every row is one of the run's keys), so a refused run leaves it exactly as it was."""
        if out.merge is not None:
            check_merge_columns(out.asset, out.merge, value.schema)

        def create() -> PartitionedNamespace:
            fields = _partition_fields(out, value.schema)
            value.check_rows(out)
            key = dg.AssetKey.from_user_string(out.asset)
            check_not_nested(self.root, key, self.storage_options)
            # of runs creating it at once one wins; the others get the winner's namespace,
            # whose schema may lack some of this output's columns: evolve it like any other.
            # Dictionary (categorical) columns are stored as their values.
            return PartitionedNamespace.create(
                out.uri, normalize_schema(value.schema), fields, self.storage_options, exist_ok=True
            )

        ns = open_or_create(out.uri, self.storage_options, create)
        adoption = plan_adoption(ns, value.schema, lambda schema: _partition_fields(out, schema))
        if adoption.has_changes:
            self._check_update_modes(out, adoption)
            value.check_rows(out)
        return ns, adoption

    def _check_update_modes(self, out: OutputSlice, adoption: Adoption) -> None:
        """Raise :class:`EvolutionRefusedError` when a change ``adoption`` makes is not allowed
        by the update modes (asset metadata, else the IO manager's)."""
        meta, subject = out.metadata, f"asset {out.asset}"
        if (
            adoption.changes_schema
            and _mode(meta, SCHEMA_UPDATE_MODE, self.schema_update_mode) == "error"
        ):
            adoption.refuse(subject, schema=f"{SCHEMA_UPDATE_MODE} is 'error'")
        if (
            adoption.changes_spec
            and _mode(meta, SPEC_UPDATE_MODE, self.partition_spec_update_mode) == "error"
        ):
            adoption.refuse(subject, spec=f"{SPEC_UPDATE_MODE} is 'error'")

    def _write(
        self,
        context: dg.OutputContext,
        out: OutputSlice,
        value: OutputValue,
        ns: PartitionedNamespace,
        target: WriteTarget,
        declared: list[str],
    ) -> WriteResult | RowChangeResult | None:
        """Declare the indexes ``ns`` lacks (their names into ``declared``), then hand the
        rows to the handler: a merge, or a write of exactly the run's partitions, into
        ``target`` (``ns``, or the transaction with the schema / spec changes)."""
        declared[:] = declare_requested(out.asset, ns, out.indexes)
        if declared:
            context.log.info(
                f"{out.asset}: declared index(es) {', '.join(declared)} ({INDEXES}) "
                f"on {out.uri}; this run's write indexes the partition tables it writes"
            )
        context.log.info(
            f"writing {out.asset} into {out.uri} ({out.mode}"
            + (f", {len(out.keys)} partition key(s)" if out.keys is not None else "")
            + f", spec v{target.current_spec.spec_id}"
            + (", schema / spec changes in the same transaction" if target is not ns else "")
            + ")"
        )
        if out.merge is not None:
            return self._merge(out, out.merge, value, target)
        request = WriteRequest(check_mode(out.mode), out.partitions(target), out.commit_properties)
        try:
            return value.handler.write(value.obj, target, request)
        except UnnamedPartitionError as e:  # a row of another key (also from Spark executors)
            raise out.stray_row(target.schema, e.values.values(), e.sample) from e

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
        scope = " AND ".join(f"({s})" for s in scopes) if merge.by_source and scopes else None
        options = replace(merge, scope=scope, confine=confine)
        try:
            return value.handler.merge(value.obj, ns, options, out.commit_properties)
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

    # -- input --------------------------------------------------------------------------------
    def load_input(self, context: dg.InputContext) -> Any:
        """The asset's rows of the partitions the input maps to (all rows when unpartitioned),
        filtered and projected by the input's ``filter`` / ``columns`` metadata."""
        uri = self.uri_for(context.asset_key)  # refuses unsafe keys before anything is read
        asset = context.asset_key.to_user_string()
        meta = dict(context.definition_metadata or {})
        handler = handler_for_type(context.dagster_type.typing_type, asset, self._handlers())
        keys = list(context.asset_partition_keys) if context.has_asset_partitions else None
        ns = self._open_for_load(context, asset, uri, meta.get(VERSION), keys)
        filters: list[str] = []
        layout: Layout | None = None
        if keys is not None and context.asset_partitions_def is not None:
            upstream = context.upstream_output
            expr = (upstream.definition_metadata or {}).get("partition_expr") if upstream else None
            layout = Layout.of(asset, context.asset_partitions_def, expr)
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
        if layout is not None and keys is not None and is_partitioned_step(context):
            _check_missing(context, asset, keys, layout, ns, plan, meta)
        context.log.info(
            f"loading {asset} from {uri} at manifest version {ns.version}: "
            f"{len(plan.tasks)} of {plan.total_partitions} partition tables"
            + (f" for {len(keys)} partition key(s)" if keys is not None else "")
        )
        return handler.read(request)

    def _open_for_load(
        self,
        context: dg.InputContext,
        asset: str,
        uri: str,
        version: Any,
        keys: list[str] | None,
    ) -> PartitionedNamespace:
        """The namespace at ``version`` (input metadata ``lance/version``), else at the
        manifest version the upstream materializations of ``keys`` recorded (with
        ``pin_upstream_version``), else at its latest."""
        recorded = None
        if version is None and self.pin_upstream_version:
            recorded = _recorded_version(context, context.asset_key, keys)
        try:
            ns = PartitionedNamespace.open(uri, self.storage_options)
        except PartitionedNamespaceError as e:
            raise type(e)(f"cannot load asset {asset} from {uri}: {e}") from e
        if version is not None:
            return _open_at(ns, asset, int(version))
        if recorded is not None and recorded <= ns.version:
            return _open_at(ns, asset, recorded)
        if recorded is not None:  # the namespace was re-created since that materialization
            context.log.warning(
                f"{asset}: the upstream materialization recorded manifest version {recorded}, "
                f"but {uri} is at version {ns.version} (re-created?); loading the latest"
            )
        return ns


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


def _check_missing(
    context: dg.InputContext,
    asset: str,
    keys: list[str],
    layout: Layout,
    ns: PartitionedNamespace,
    plan: ScanPlan,
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
    instance = input_instance(context)
    if missing and instance is not None:
        done = instance.get_materialized_partitions(context.asset_key)
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


def _recorded_version(
    context: dg.InputContext, asset_key: dg.AssetKey, keys: list[str] | None
) -> int | None:
    """The newest manifest version recorded by materializations of the partitions loaded."""
    instance = input_instance(context)
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


def _open_at(ns: PartitionedNamespace, asset: str, version: int) -> PartitionedNamespace:
    """``ns`` at manifest ``version`` (raising an error naming the asset and both versions)."""
    try:
        return PartitionedNamespace.open(ns.uri, ns.storage_options, version)
    except Exception as e:
        raise PartitionedNamespaceError(
            f"cannot load asset {asset} at manifest version {version} of {ns.uri} "
            f"(latest is {ns.version}): {e}"
        ) from e


@contextmanager
def _storage_errors(asset_key: dg.AssetKey, uri: str) -> Iterator[None]:
    """Raise a Lance or Arrow failure (not this package's own errors) as :class:`StorageError`
    naming the asset and its URI."""
    try:
        yield
    except PartitionedNamespaceError:
        raise
    except _RAW_ERRORS as e:
        raise StorageError(
            f"asset {asset_key.to_user_string()}: writing to {uri} failed: "
            f"{type(e).__name__}: {clean_message(e)}",
            namespace=uri,
            path=uri,
        ) from e


def _partition_fields(out: OutputSlice, schema: pa.Schema) -> list[PartitionField]:
    """The partition fields of the asset's spec on ``schema``: its partitions definition's,
    those of ``lance/partition_by``, or none (stored as it is: one table holds every row)."""
    if out.layout is not None:
        return out.layout.fields(schema)
    raw = out.metadata.get(PARTITION_BY)
    if raw is None:
        return []
    return parse_partition_by(raw if isinstance(raw, str) else list(raw))


def _mode(meta: Mapping[str, Any], key: str, default: str) -> str:
    mode = str(meta.get(key, default))
    if mode not in UPDATE_MODES:
        raise WriteError(f"{key} must be one of {UPDATE_MODES}, got {mode!r}")
    return mode
