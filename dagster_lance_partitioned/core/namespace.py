"""``PartitionedNamespace``: the one class users hold to create, write, plan and read a Lance
partitioned namespace."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from . import storage
from .boundary import storage_boundary
from .concurrency import in_background
from .errors import (
    ManifestError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    PartitionedNamespaceError,
)
from .expr.filters import FilterLike
from .manifest.layout import (
    SEP,
    WRITER_FLAG_KEY,
    WRITER_FLAG_VALUE,
    base_manifest_schema,
    partition_field_columns,
)
from .manifest.naming import NAMING_KEY, ensure_naming_key, new_naming_key
from .manifest.snapshot import ManifestSnapshot
from .manifest.state import NamespaceState, load_snapshot
from .manifest.stats import stats_field
from .manifest.store import SCHEMA_KEY, ManifestStore
from .ops.groups import Inspect, Maintenance
from .partitioning.calendar_fields import warn_mixed_periods
from .partitioning.partition_spec import PartitionField, PartitionSpec, SpecField, resolve_fields
from .partitioning.partitioner import SpecEvaluator
from .read.planning import ScanPlan, plan_namespace
from .read.scan import TABLE_BATCH_ROWS, count_plan_rows, scan_reader
from .schema import arrow_json
from .schema.namespace_schema import check_columns
from .schema.namespace_schema import snapshot_schema as snapshot_schema  # re-exported
from .write.mode import WriteMode
from .write.result import WriteResult

if TYPE_CHECKING:
    from .row_changes.change import RowChangeResult
    from .row_changes.merge import MergeOptions
    from .search.catalog import IndexCoverage, IndexResult
    from .search.session import SearchSession
    from .transaction import Transaction


class PartitionedNamespace:
    """A Lance partitioned namespace: one Lance table per partition, listed in ``__manifest``.

    Reads use one manifest version (``version``) for every partition; writes register all the
    partitions they touch in a single manifest commit."""

    def __init__(
        self,
        root: str,
        storage_options: dict[str, str] | None,
        snapshot: ManifestSnapshot,
        pinned: bool,
    ) -> None:
        self._state = NamespaceState(ManifestStore(root, storage_options), snapshot, pinned)
        self._maintenance = Maintenance(self._state)
        self._inspect = Inspect(self._state)

    @property
    def state(self) -> NamespaceState:
        """The store and manifest version this object reads (what operations work on)."""
        return self._state

    @property
    def maintenance(self) -> Maintenance:
        """Compaction, cleanup, vacuum and dropping partitions (see :class:`.Maintenance`)."""
        return self._maintenance

    @property
    def inspect(self) -> Inspect:
        """Partitions, health checks and commit history (see :class:`.Inspect`)."""
        return self._inspect

    # -- construction -------------------------------------------------------------------------
    @classmethod
    @storage_boundary("creating the namespace")
    def create(
        cls,
        uri: str | os.PathLike[str],
        schema: pa.Schema,
        partition_fields: Sequence[PartitionField | SpecField],
        storage_options: dict[str, str] | None = None,
        *,
        exist_ok: bool = False,
    ) -> PartitionedNamespace:
        """Create an empty partitioned namespace at ``uri`` with spec v1 of
        ``partition_fields`` (none: unpartitioned, one table ``v1$dataset`` holds every row).

        Never replaces an existing namespace: when one exists (or another process creates one
        at the same time and wins), raises :class:`NamespaceExistsError`, or with ``exist_ok``
        opens that namespace as it is (its schema and spec may differ from the ones given)."""
        root = storage.normalize_root(uri)
        store = ManifestStore(root, storage_options)
        try:
            return cls._create(store, schema, partition_fields)
        except NamespaceExistsError:
            if not exist_ok:
                raise
        return cls.open(root, storage_options)

    @classmethod
    def _create(
        cls,
        store: ManifestStore,
        schema: pa.Schema,
        partition_fields: Sequence[PartitionField | SpecField],
    ) -> PartitionedNamespace:
        root = store.root
        if store.exists_on_storage():
            raise NamespaceExistsError(f"{root}: a __manifest table already exists here")
        check_columns(schema, "create")  # names Lance reads back, no dictionary types
        ns_schema, _ = arrow_json.assign_field_ids(arrow_json.normalize_schema(schema), 0)
        spec = PartitionSpec(1, resolve_fields(partition_fields, ns_schema))
        SpecEvaluator(spec, ns_schema)  # compiles every expression and checks result types
        warn_mixed_periods(spec.fields, ns_schema)
        manifest_schema = base_manifest_schema()
        for f in partition_field_columns([spec]):
            manifest_schema = manifest_schema.append(f)
        manifest_schema = manifest_schema.append(stats_field())
        metadata = {
            SCHEMA_KEY: json.dumps(arrow_json.schema_to_json(ns_schema), separators=(",", ":")),
            spec.key: spec.to_json_str(),
            WRITER_FLAG_KEY: WRITER_FLAG_VALUE,
            NAMING_KEY: new_naming_key(),
        }
        first = pa.Table.from_pylist(
            [{"object_id": spec.namespace, "object_type": "namespace", "metadata": "{}"}],
            schema=manifest_schema,
        )
        snap = load_snapshot(store.create(first, metadata))
        return cls(root, store.storage_options, snap, pinned=False)

    @classmethod
    @storage_boundary("opening the namespace")
    def open(
        cls,
        uri: str | os.PathLike[str],
        storage_options: dict[str, str] | None = None,
        version: int | None = None,
    ) -> PartitionedNamespace:
        """Open the namespace at ``uri``, at its latest manifest version or at ``version``."""
        root = storage.normalize_root(uri)
        if not storage.is_uri(root) and not os.path.exists(root):
            raise NamespaceNotFoundError(f"{root}: no such directory")
        if version is not None and (
            isinstance(version, bool) or not isinstance(version, int) or version < 1
        ):
            raise ManifestError(
                f"{root}: manifest version must be a positive integer, got {version!r}"
            )
        store = ManifestStore(root, storage_options)
        ds = store.dataset(version) if version is not None else store.open_latest()
        # a manifest listing an object id twice is refused
        snap = load_snapshot(ds).verify(latest=version is None)
        return cls(root, storage_options, snap, pinned=version is not None)

    # -- state --------------------------------------------------------------------------------
    @property
    def uri(self) -> str:
        """The namespace root."""
        return self._state.uri

    @property
    def storage_options(self) -> dict[str, str] | None:
        """Storage options used for every table of the namespace."""
        return self._state.storage_options

    @property
    def version(self) -> int:
        """The ``__manifest`` version this object reads."""
        return self._state.version

    @property
    def schema_with_ids(self) -> pa.Schema:
        """The namespace schema with ``lance:field_id`` on every field."""
        return self._state.schema_with_ids

    @property
    def schema(self) -> pa.Schema:
        """The namespace schema (the union of all partition tables' columns)."""
        return arrow_json.strip_field_ids(self.schema_with_ids)

    @property
    def specs(self) -> list[PartitionSpec]:
        """Every partition spec version, oldest first."""
        return self._state.specs

    @property
    def current_spec(self) -> PartitionSpec:
        """The newest spec; new writes partition by it."""
        return self.specs[-1]

    @property
    def metadata(self) -> dict[str, str]:
        """The ``__manifest`` table metadata (root namespace properties)."""
        return self._state.metadata

    @storage_boundary("reading __manifest")
    def refresh(self) -> PartitionedNamespace:
        """Move to the latest manifest version (no-op for a namespace opened at a version)."""
        self._state.refresh()
        return self

    def describe_namespace(self, path: Sequence[str]) -> dict[str, str]:
        """Runtime properties of ``v<N>`` (its spec) or of a partition namespace (its value)."""
        oid = SEP.join(path)
        snap = self._state.snapshot
        if len(path) == 1:
            spec = snap.specs.get(int(path[0][1:])) if path[0][1:].isdigit() else None
            if spec is None:
                raise PartitionedNamespaceError(f"no spec namespace {oid!r}")
            return {"partition_spec": spec.to_json_str()}
        for (spec_id, values), ns_oid in snap.namespace_ids().items():
            if ns_oid == oid:
                f = snap.specs[spec_id].fields[len(values) - 1]
                return {f"partition.{f.field_id}": _property_value(values[-1])}
        raise PartitionedNamespaceError(f"no partition namespace {oid!r}")

    # -- write --------------------------------------------------------------------------------
    @storage_boundary("writing")
    def write(
        self,
        data: Any,
        mode: WriteMode = "append",
        *,
        commit_properties: dict[str, str] | None = None,
        partitions: Sequence[Mapping[str, Any]] | None = None,
    ) -> WriteResult:
        """Write ``data`` (Arrow table / batch / reader / C stream) partitioned by the current
        spec, and make all of it visible in one manifest commit.

        ``append`` adds rows; ``overwrite_partitions`` replaces the partitions present in the
        data; ``overwrite`` replaces the whole table. ``partitions`` (mappings of the current
        spec's field ids to values) names the only partitions the write may touch: a row of any
        other partition fails the write (nothing committed), and with ``overwrite_partitions``
        a named partition without rows becomes empty."""
        state = self._state
        state.require_unpinned("write")
        state.store.check_store()
        from .transaction import write_rows

        listing = None
        if _list_beside(state, data):
            # the refresh's listing made while the rows are routed and their tables opened
            listing = in_background(state.store.newest_version)
        else:
            self.refresh()
            if ensure_naming_key(state.store, state.snapshot):
                self.refresh()
        return write_rows(
            state,
            data,
            mode,
            commit_properties=commit_properties,
            partitions=partitions,
            listing=listing,
        )

    # -- read ---------------------------------------------------------------------------------
    @storage_boundary("planning a scan")
    def plan_scan(self, filter: FilterLike = None, *, by_stats: bool = True) -> ScanPlan:
        """The partition tables (and versions) a scan with ``filter`` reads; ``str()`` of it is
        a readable account (per spec version: manifest predicate, partitions kept / total; the
        tables pruned by partition values and by statistics; the residual filter),
        ``.to_dict()`` JSON. ``by_stats=False`` keeps the tables whose statistics prove that
        no row matches (every table of the partitions the filter selects)."""
        return plan_namespace(self._state, filter, by_stats)

    @storage_boundary("scanning")
    def scan(
        self,
        filter: FilterLike = None,
        columns: Sequence[str] | None = None,
        batch_size: int | None = None,
        *,
        concurrency: int | None = None,
    ) -> pa.RecordBatchReader:
        """Stream the rows matching ``filter`` as Arrow batches of the namespace schema.

        ``concurrency``: how many partition tables are opened and read at once (default: a
        few on local disk, dozens on object stores, or ``DLP_SCAN_CONCURRENCY``; see
        :func:`.read.scan.scan_concurrency`)."""
        plan = plan_namespace(self._state, filter, check_links=False)  # checked when each is read
        return scan_reader(
            plan, self.schema_with_ids, columns, self.storage_options, batch_size, concurrency
        )

    @storage_boundary("reading")
    def to_table(
        self,
        filter: FilterLike = None,
        columns: Sequence[str] | None = None,
        *,
        concurrency: int | None = None,
    ) -> pa.Table:
        """The rows matching ``filter`` as one Arrow table (``concurrency``: see :meth:`scan`)."""
        return self.scan(
            filter, columns, batch_size=TABLE_BATCH_ROWS, concurrency=concurrency
        ).read_all()

    @storage_boundary("counting rows")
    def count_rows(self, filter: FilterLike = None, *, concurrency: int | None = None) -> int:
        """How many rows match ``filter`` (partitions whose every row matches are counted from
        their tables' metadata, without reading data; ``concurrency``: see :meth:`scan`)."""
        plan = plan_namespace(self._state, filter, check_links=False)  # checked when each is read
        return count_plan_rows(plan, self.schema_with_ids, self.storage_options, concurrency)

    # -- partition evolution ------------------------------------------------------------------
    @storage_boundary("updating the partition spec")
    def update_spec(self, partition_fields: Sequence[PartitionField | SpecField]) -> int:
        """Add spec version N+1 (field ids of identical fields reused); new writes partition by
        it, data written under older versions stays readable and is pruned by its own spec.

        One commit of table metadata; the new spec's manifest columns and ``v<N+1>`` namespace
        are added by the first write under it. Returns the manifest version (unchanged when
        the fields equal the current spec's)."""
        self._state.require_unpinned("change its partition spec")
        if any(s.draft for s in self.specs):
            self.upgrade()  # field ids and manifest columns follow the current shape first
        from .evolution import update_spec_step
        from .manifest.changes import commit_steps

        return self._after(
            commit_steps(self._state.store, [update_spec_step(partition_fields)]).version
        )

    # -- transactions (core/transaction.py) ---------------------------------------------------
    def transaction(self) -> Transaction:
        """A transaction: ``with ns.transaction() as tx:`` takes schema and spec changes
        (``tx.add_columns``, ``rename_column``, ``drop_column``, ``promote_column``,
        ``update_spec``) and then one data operation (``tx.write``, ``merge_insert``,
        ``delete``, ``update``) with this class's signatures, and commits them on leaving the
        block; an exception inside it commits nothing. The data is written against the
        changed schema and spec, and refused (nothing committed) before anything becomes
        visible; see :mod:`.transaction` for how the commit is made. ``tx.result`` tells what
        was committed."""
        from .transaction import Transaction

        return Transaction(self._state)

    # -- schema evolution (core/schema/evolution.py) ------------------------------------------
    @storage_boundary("adding columns")
    def add_columns(self, fields: pa.Field | Sequence[pa.Field] | pa.Schema) -> int:
        """Add nullable columns with new field ids (a column there alike already, same name,
        type and nullability, is left as it is); returns the manifest version."""
        from .evolution import add_columns

        return self._after(add_columns(self, fields))

    @storage_boundary("renaming a column")
    def rename_column(self, old: str, new: str) -> int:
        """Rename a column (its field id is kept; nothing when ``old`` is gone and ``new`` is
        the column renamed from it); returns the manifest version."""
        from .evolution import rename_column

        return self._after(rename_column(self, old, new))

    @storage_boundary("dropping a column")
    def drop_column(self, name: str) -> int:
        """Drop a column not used by the current spec (nothing when it is dropped already);
        returns the manifest version."""
        from .evolution import drop_column

        return self._after(drop_column(self, name))

    @storage_boundary("promoting a column")
    def promote_column(self, name: str, wider_type: pa.DataType) -> int:
        """Widen a column's type (e.g. int32 -> int64; nothing when it has that type);
        returns the manifest version."""
        from .evolution import promote_column

        return self._after(promote_column(self, name, wider_type))

    # -- compatibility (core/manifest/upgrade.py, core/ops/hive.py) -----------------------------
    @storage_boundary("upgrading the namespace")
    def upgrade(self) -> int:
        """Rewrite draft-shaped metadata in the current shape; returns the manifest version."""
        from .manifest.upgrade import upgrade

        return self._after(upgrade(self))

    @classmethod
    @storage_boundary("importing a Hive tree")
    def import_hive(
        cls,
        uri: str | os.PathLike[str],
        *,
        types: dict[str, pa.DataType] | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> PartitionedNamespace:
        """Register an existing ``key=value/.../name.lance`` tree of Lance tables under ``uri``
        as a partitioned namespace, without copying data."""
        from .ops.hive import import_hive
        from .ops.statistics import collect_statistics

        root = import_hive(uri, types=types, storage_options=storage_options)
        ns = cls.open(root, storage_options)
        collect_statistics(ns)  # the imported tables' statistics, read once
        return ns

    def _after(self, version: int) -> int:
        self.refresh()
        return version

    # -- row-level changes (core/row_changes.py) ----------------------------------------------
    @storage_boundary("merging")
    def merge_insert(
        self,
        data: Any,
        on: str | Sequence[str] | MergeOptions,
        *,
        commit_properties: dict[str, str] | None = None,
    ) -> RowChangeResult:
        """Upsert ``data`` across partitions in one manifest commit, on the key column(s)
        ``on`` with the default options (matched rows updated, new rows inserted, stored rows
        kept), or as a :class:`~.row_changes.MergeOptions` says (``when_matched``,
        ``when_not_matched``, ``when_not_matched_by_source``, ``scope``; ``confine``: the
        partitions it may change). See :func:`~.row_changes.merge_rows`::

            ns.merge_insert(updates, on="id")
            ns.merge_insert(updates, MergeOptions("id", when_matched="ignore"))"""
        from .row_changes.merge import MergeOptions, merge_rows

        return merge_rows(self, data, MergeOptions.of(on), commit_properties=commit_properties)

    @storage_boundary("deleting rows")
    def delete(
        self, filter: FilterLike, *, commit_properties: dict[str, str] | None = None
    ) -> RowChangeResult:
        """Delete the rows matching ``filter`` in one manifest commit (partitions left empty
        are deregistered; see :func:`~.row_changes.delete_rows`)."""
        from .row_changes.delete import delete_rows

        return delete_rows(self, filter, commit_properties=commit_properties)

    @storage_boundary("updating rows")
    def update(
        self,
        filter: FilterLike,
        set: Mapping[str, str],
        *,
        commit_properties: dict[str, str] | None = None,
    ) -> RowChangeResult:
        """Set columns (``set``: column -> SQL expression) of the rows matching ``filter`` in
        one manifest commit; rows whose partition changes move (see
        :func:`~.row_changes.update_rows`)."""
        from .row_changes.update import update_rows

        return update_rows(self, filter, set, commit_properties=commit_properties)

    # -- indexes and search (core/search/) ---------------------------------------------------
    @storage_boundary("creating an index")
    def create_index(
        self,
        column: str,
        index_type: str,
        *,
        name: str | None = None,
        min_rows: int | None = None,
        **params: Any,
    ) -> IndexCoverage:
        """Declare an index on ``column`` for the whole namespace and give every partition
        table whose size calls for it that index: two manifest commits, the declaration, then
        every table's indexed version, all registered together. Interrupted between the two,
        the index is declared and built nowhere yet: :meth:`indexes` shows it ``pending``
        (searches stay exact), and the next ``maintenance.optimize_indexes()``, a write to a
        partition (for that partition) or the same call again builds it.

        ``index_type``: vector ``IVF_PQ``, ``IVF_HNSW_SQ``, ``IVF_FLAT`` (``params`` such as
        ``metric``, ``num_partitions``, ``num_sub_vectors``; left out, they are derived from
        each table's size); full text ``INVERTED`` (``FTS``; tokenizer ``params``); scalar
        ``BTREE``, ``BITMAP``, ``LABEL_LIST``. Tables with fewer than ``min_rows`` rows
        (default: 4,096 for vector indexes, 1 otherwise) are searched without one. Later
        writes, row changes and compactions index what they write before their manifest
        commit. Returns the index's coverage (see :meth:`indexes`)."""
        from .search.catalog import create_index

        return create_index(self, column, index_type, name=name, min_rows=min_rows, params=params)

    @storage_boundary("listing indexes")
    def indexes(self, filter: FilterLike = None) -> list[IndexCoverage]:
        """The declared indexes with their coverage over the partitions ``filter`` selects:
        partitions indexed / needing one / searched without one (below ``min_rows``) / total,
        and the rows appended since an index was built (searched exhaustively); ``status``
        ``pending`` (with a ``hint``) while partitions needing it lack it."""
        from .search.catalog import coverages

        return coverages(self, filter)

    @storage_boundary("dropping an index")
    def drop_index(self, name: str) -> IndexResult:
        """Remove the declared index ``name`` and the partition tables' indexes of that name."""
        from .search.catalog import drop_index

        return drop_index(self, name)

    @storage_boundary("searching")
    def search(
        self,
        query: Any,
        *,
        column: str | None = None,
        k: int = 10,
        filter: FilterLike = None,
        columns: Sequence[str] | None = None,
        session: SearchSession | None = None,
        **params: Any,
    ) -> pa.Table:
        """The ``k`` best rows for ``query`` across the partitions ``filter`` keeps.

        A vector (list or numpy array) gives the k nearest rows with ``_distance``
        (ascending); a string gives full-text matches with ``_score`` (BM25 over the whole
        namespace version, as one dataset holding its rows scores them, descending).
        ``filter`` prunes partitions, then applies inside each before ranking, so k rows come
        back whenever k rows match.
        ``column`` may be left out when one index of the query's kind is declared (or one
        vector column exists). A vector query over several indexed partitions probes the
        ``probes`` IVF clusters (default 20) nearest it over all of their centroids, and
        searches only the partitions holding them; ``params`` (``nprobes`` per partition
        instead, ``minimum_nprobes`` / ``maximum_nprobes``, ``refine_factor``, ``ef``,
        ``use_index``, ``metric``) pass through to Lance. Every parameter is checked before
        anything runs (:class:`SearchQueryError` naming the one at fault); a ``k`` beyond the
        rows that match returns those rows. ``session``: what searches keep between queries
        (a :class:`~.search.session.SearchSession`; None: the process's default one)."""
        from .search.query import search

        return search(
            self,
            query,
            column=column,
            k=k,
            filter=filter,
            columns=columns,
            params=params,
            session=session,
        )

    def __repr__(self) -> str:
        return (
            f"PartitionedNamespace({self.uri!r}, version={self.version}, "
            f"spec=v{self.current_spec.spec_id}, partitions={len(self._state.snapshot.tables())})"
        )


# rows routed before the refresh's listing has answered are small enough to be kept in
# buffers (never written as fragments: see write.ingest) and can be routed again
LIST_BESIDE_MAX_BYTES = 64 * 1024 * 1024


def _list_beside(state: NamespaceState, data: Any) -> bool:
    """Whether a write of ``data`` makes its refresh's listing beside routing the rows: on an
    object store (a listing is a round trip there), for rows in memory that can be routed again
    should the version held turn out not to be the newest, on a namespace that has its naming
    key."""
    return (
        storage.store_scheme(state.uri) in storage.OBJECT_STORE_SCHEMES
        and isinstance(data, (pa.Table, pa.RecordBatch))
        and data.nbytes <= LIST_BESIDE_MAX_BYTES
        and NAMING_KEY in state.snapshot.metadata
    )


def _property_value(value: Any) -> str:
    if value is None:
        return "null"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)
