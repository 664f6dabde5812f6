"""What an output writes, worked out before anything is touched: :class:`OutputSlice` (which
part of which namespace, how -- the anchor is Dagster's ``TableSlice``), the merge options of a
merge output (the core's :class:`~..core.row_changes.merge.MergeOptions`, read from asset
metadata by :func:`merge_options_of`), and the output value with its type handler
(:class:`OutputValue`). The metadata keys that choose them are in :mod:`.metadata_keys`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa

from ..core import MergeKeyError, MergeOptions, WriteError
from ..core.engine import (
    PROP_DAGSTER_ASSET_KEY,
    PROP_DAGSTER_PARTITION_KEYS,
    PROP_DAGSTER_RUN_ID,
    PROP_SOURCE,
    WHEN_MATCHED,
    WHEN_NOT_MATCHED,
    WHEN_NOT_MATCHED_BY_SOURCE,
    WRITE_MODES,
)
from .errors import PartitionKeyMismatchError
from .handlers import ArrowTableHandler, TypeHandler, WriteTarget
from .indexes import IndexRequest, index_requests
from .layout import Layout
from .metadata_keys import (
    INDEXES,
    MERGE_ON,
    MERGE_SCOPE,
    MERGE_WHEN_MATCHED,
    MERGE_WHEN_NOT_MATCHED,
    MERGE_WHEN_NOT_MATCHED_BY_SOURCE,
    PARTITION_BY,
    WRITE_MODE,
)

COMMIT_SOURCE = "dagster-lance-partitioned/io-manager"  # commit property dlp.source
MERGE = "merge"
OUTPUT_MODES = (*WRITE_MODES, MERGE)
MERGE_CHOICES = {  # the first is the default
    MERGE_WHEN_MATCHED: WHEN_MATCHED,
    MERGE_WHEN_NOT_MATCHED: WHEN_NOT_MATCHED,
    MERGE_WHEN_NOT_MATCHED_BY_SOURCE: WHEN_NOT_MATCHED_BY_SOURCE,
}


def merge_options_of(asset: str, meta: Mapping[str, Any]) -> MergeOptions:
    """A merge output's options from asset metadata: the key columns ``on`` (``lance/
    merge_on``), ``lance/merge_when_matched`` (update | ignore), ``lance/merge_when_not_matched``
    (insert | ignore), ``lance/merge_when_not_matched_by_source`` (keep | delete) and
    ``lance/merge_scope`` (a filter: the stored rows such a delete may remove);
    :class:`MergeKeyError` for a missing or malformed ``lance/merge_on`` (naming the column),
    :class:`WriteError` for other bad values."""
    raw = meta.get(MERGE_ON)
    if raw is None or raw == "" or raw == []:
        raise MergeKeyError(
            f"asset {asset}: {WRITE_MODE} is 'merge' but metadata {MERGE_ON} names no key "
            f"column; give the columns that identify a row, e.g. {MERGE_ON}: ['id']",
            None,
        )
    on = [raw] if isinstance(raw, str) else list(raw)
    for name in on:
        if not isinstance(name, str) or not name:
            raise MergeKeyError(
                f"asset {asset}: {MERGE_ON} must be column names, got {name!r}", None
            )
        if on.count(name) > 1:
            raise MergeKeyError(f"asset {asset}: {MERGE_ON} names {name!r} twice", name)
    chosen = {}
    for key, allowed in MERGE_CHOICES.items():
        value = str(meta.get(key, allowed[0]))
        if value not in allowed:
            raise WriteError(f"asset {asset}: {key} {value!r} is not one of {', '.join(allowed)}")
        chosen[key] = value
    scope = meta.get(MERGE_SCOPE)
    if scope is not None and chosen[MERGE_WHEN_NOT_MATCHED_BY_SOURCE] != "delete":
        raise WriteError(
            f"asset {asset}: {MERGE_SCOPE} limits the rows "
            f"{MERGE_WHEN_NOT_MATCHED_BY_SOURCE}: 'delete' removes; without that it has no "
            "effect"
        )
    return MergeOptions(
        tuple(on),
        chosen[MERGE_WHEN_MATCHED],
        chosen[MERGE_WHEN_NOT_MATCHED],
        chosen[MERGE_WHEN_NOT_MATCHED_BY_SOURCE],
        str(scope) if scope is not None else None,
    )


def check_merge_columns(asset: str, merge: MergeOptions, schema: pa.Schema) -> None:
    """Raise :class:`MergeKeyError` naming the first key column of ``merge`` the output
    lacks."""
    for name in merge.on:
        if schema.get_field_index(name) < 0:
            raise MergeKeyError(
                f"asset {asset}: merge key {name!r} ({MERGE_ON}) is not a column of the "
                f"output (columns: {', '.join(schema.names)}); nothing was written",
                name,
            )


@dataclass(frozen=True)
class OutputSlice:
    """The part of a namespace one output writes, and how, worked out from the output context
    alone (the anchor is Dagster's ``TableSlice``): the asset and its namespace URI, the write
    ``mode`` (``merge`` or a core write mode: ``overwrite`` for an unpartitioned asset
    without ``lance/partition_by`` unless ``lance/write_mode`` says otherwise), the run's
    partition ``keys`` and their ``layout`` (None for unpartitioned assets), the asset's
    definition metadata, the merge options, the properties the commit records and the indexes
    the asset declares (``lance/indexes``)."""

    asset: str
    uri: str
    mode: str
    layout: Layout | None
    keys: tuple[str, ...] | None
    metadata: Mapping[str, Any]
    commit_properties: Mapping[str, str]
    merge: MergeOptions | None = None
    indexes: tuple[IndexRequest, ...] = ()

    @classmethod
    def of(cls, context: dg.OutputContext, uri: str, default_mode: str) -> OutputSlice:
        """The slice of ``context``'s output (refusing unknown write modes, bad merge
        options and malformed ``lance/indexes`` before anything is touched)."""
        asset = context.asset_key.to_user_string()
        meta = dict(context.definition_metadata or {})
        layout: Layout | None = None
        keys: tuple[str, ...] | None = None
        if context.has_asset_partitions:
            layout = Layout.of(asset, context.asset_partitions_def, meta.get("partition_expr"))
            keys = tuple(context.asset_partition_keys)
            # a partitioned asset replaces its keys, unless it merges into them
            mode = MERGE if meta.get(WRITE_MODE) == MERGE else "overwrite_partitions"
        else:
            # stored as it is (no lance/partition_by): each run replaces the whole asset
            default = default_mode if meta.get(PARTITION_BY) is not None else "overwrite"
            mode = str(meta.get(WRITE_MODE, default))
            if mode not in OUTPUT_MODES:
                raise WriteError(
                    f"asset {asset}: {WRITE_MODE} {mode!r} is not one of {', '.join(OUTPUT_MODES)}"
                )
        props = {
            PROP_SOURCE: COMMIT_SOURCE,  # stored as dlp.source (core prefixes its properties)
            PROP_DAGSTER_RUN_ID: context.run_id,
            PROP_DAGSTER_ASSET_KEY: asset,
        }
        if keys is not None:
            props[PROP_DAGSTER_PARTITION_KEYS] = json.dumps(list(keys))
        merge = merge_options_of(asset, meta) if mode == MERGE else None
        indexes = index_requests(asset, meta.get(INDEXES))
        return cls(asset, uri, mode, layout, keys, meta, props, merge, indexes)

    @property
    def partitioned(self) -> bool:
        return self.layout is not None and self.keys is not None

    def row_filter(self, schema: pa.Schema) -> str:
        """The SQL predicate selecting exactly the rows of the run's keys."""
        assert self.layout is not None and self.keys is not None
        return self.layout.row_filter(list(self.keys), schema)

    def partitions(self, ns: WriteTarget) -> list[dict[str, Any]] | None:
        """The partitions (``{field id: value}``) of the run's keys under the current spec:
        the only ones a write may touch (None: unpartitioned, any)."""
        if self.layout is None or self.keys is None:
            return None
        field_ids = [f.field_id for f in ns.current_spec.fields]
        return self.layout.partitions(list(self.keys), ns.schema, field_ids)

    def stray_row(
        self, schema: pa.Schema, values: Any = None, sample: dict[str, Any] | None = None
    ) -> PartitionKeyMismatchError:
        """The error for an output row of a partition the run does not target (its partition
        ``values`` in spec order, or a ``sample`` row)."""
        layout, keys = self.layout, list(self.keys or [])
        key = "?"
        if layout is not None and values is not None:
            key = layout.key_of(list(values))
        elif layout is not None and sample is not None:
            key = layout.key_of_row(sample, schema)
        more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
        return PartitionKeyMismatchError(
            f"asset {self.asset}: the output holds rows of partition key {key!r}, which this "
            f"run does not target (it targets {keys[:5]}{more}); nothing was committed. "
            f"Sample row: {sample}",
            key,
            sample,
        )


class OutputValue:
    """An output value and its handler. A row check of a single-pass value (a stream) reads it
    into a table first, which the write then uses."""

    def __init__(self, obj: Any, handler: TypeHandler[Any], handlers: Sequence[TypeHandler[Any]]):
        self.obj = obj
        self.handler = handler
        self.handlers = handlers
        self.schema = handler.schema(obj)
        self.checked = False

    def check_rows(self, out: OutputSlice) -> None:
        """Raise :class:`PartitionKeyMismatchError` when a row belongs to none of the run's
        keys (once; nothing for unpartitioned outputs)."""
        if self.checked or not out.partitioned:
            return
        self.materialize()
        sample = self.handler.sample_outside(self.obj, out.row_filter(self.schema))
        if sample is not None:
            raise out.stray_row(self.schema, sample=sample)
        self.checked = True

    def materialize(self) -> None:
        """Read a single-pass value into an Arrow table (handled as one from then on)."""
        if self.handler.single_pass:
            data = self.handler.to_arrow(self.obj)
            self.obj = data.read_all() if isinstance(data, pa.RecordBatchReader) else data
            found = [h for h in self.handlers if h.handles(self.obj)]
            self.handler = found[0] if found else ArrowTableHandler()
