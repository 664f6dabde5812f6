"""Merge (upsert) of input rows into a namespace on key columns, in one manifest commit."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..concurrency import parallel_map
from ..errors import DuplicateKeyError, MergeKeyError, UnnamedPartitionError, WriteError
from ..expr.filters import FilterLike, quote_ident, sql_literal, to_sql
from ..expr.filters import check as check_filter
from ..manifest.commit_summary import Operation
from ..manifest.state import HasState, NamespaceState, state_of
from ..partitioning.partitioner import SpecEvaluator
from ..read.field_filters import namespace_row_filter
from ..read.planning import ScanTask
from ..schema import arrow_json
from ..schema.conform import check_write_schema, conform_for_write, table_write_schema
from ..schema.namespace_schema import dropped_names, full_schema
from ..write.ingest import as_reader
from . import keys as K
from .change import RowChangeResult
from .commit import run
from .executor import TableExecutor
from .plan import ChangePlan, Key, first_unknown, keys_cover_partitions

WHEN_MATCHED = ("update", "ignore")
WHEN_NOT_MATCHED = ("insert", "ignore")
WHEN_NOT_MATCHED_BY_SOURCE = ("keep", "delete")
# At most this many distinct values per key column are pushed into the lookup filter that
# prunes the partitions a merge searches for its keys (more: every partition is searched).
LOOKUP_IN_LIST_MAX = 2_000


@dataclass(frozen=True, init=False)
class MergeOptions:
    """How a merge goes: the one value every merge path takes (``merge_insert`` of a namespace
    or a transaction, :func:`merge_rows`, Spark's ``merge_dataframe`` and
    ``write_dataframe(mode="merge")``, the Dagster IO manager's merge output).

    The key columns ``on`` (a name or names); what happens to an input row whose key is stored
    (``when_matched``: ``update`` | ``ignore``), to one whose key is not (``when_not_matched``:
    ``insert`` | ``ignore``) and to a stored row whose key is not in the input
    (``when_not_matched_by_source``: ``keep`` | ``delete``); ``scope`` (a filter) limits the
    stored rows such a delete may remove, ``confine`` (a filter) the stored rows the merge may
    change or move -- both kept as SQL. Bad choices raise :class:`WriteError` here;
    :meth:`checked` checks the columns and filters against a namespace. The Dagster IO manager
    reads them from an asset's metadata (``lance/merge_on``, ``lance/merge_when_matched``,
    ...). A frozen value rather than a builder: the same options go to the namespace, a
    transaction, Spark's tasks (pickled) and the commit properties (:meth:`properties`)::

        ns.merge_insert(updates, on="id")  # the defaults: update matches, insert the rest
        ns.merge_insert(updates, MergeOptions("id", when_not_matched_by_source="delete"))"""

    # set by __init__ (its defaults: update, insert, keep, no scope, no confine)
    on: tuple[str, ...]
    when_matched: str
    when_not_matched: str
    when_not_matched_by_source: str
    scope: str | None
    confine: str | None

    def __init__(
        self,
        on: str | Sequence[str],
        when_matched: str = "update",
        when_not_matched: str = "insert",
        when_not_matched_by_source: str = "keep",
        scope: FilterLike = None,
        confine: FilterLike = None,
    ) -> None:
        for name, value, allowed in (
            ("when_matched", when_matched, WHEN_MATCHED),
            ("when_not_matched", when_not_matched, WHEN_NOT_MATCHED),
            ("when_not_matched_by_source", when_not_matched_by_source, WHEN_NOT_MATCHED_BY_SOURCE),
        ):
            if value not in allowed:
                raise WriteError(f"{name}={value!r}: use one of {', '.join(allowed)}")
        init = object.__setattr__  # frozen
        init(self, "on", (on,) if isinstance(on, str) else tuple(on))
        init(self, "when_matched", when_matched)
        init(self, "when_not_matched", when_not_matched)
        init(self, "when_not_matched_by_source", when_not_matched_by_source)
        init(self, "scope", to_sql(scope))  # blank: none
        init(self, "confine", to_sql(confine))

    @classmethod
    def of(cls, on: str | Sequence[str] | MergeOptions) -> MergeOptions:
        """``on`` itself when it is merge options, else a merge on the key column(s) ``on``
        with the default options."""
        return on if isinstance(on, MergeOptions) else cls(on)

    @property
    def update(self) -> bool:
        """Matched input rows replace the stored ones."""
        return self.when_matched == "update"

    @property
    def insert(self) -> bool:
        """Unmatched input rows are added."""
        return self.when_not_matched == "insert"

    @property
    def by_source(self) -> bool:
        """Stored rows whose key is not in the input are deleted (within ``scope``)."""
        return self.when_not_matched_by_source == "delete"

    def properties(self) -> dict[str, str]:
        """The commit properties recording them."""
        return {
            "on": json.dumps(list(self.on)),
            "when_matched": self.when_matched,
            "when_not_matched": self.when_not_matched,
            "when_not_matched_by_source": self.when_not_matched_by_source,
            **({"scope": self.scope} if self.scope else {}),
            **({"confine": self.confine} if self.confine else {}),
        }

    def checked(self, ns: NamespaceState) -> MergeOptions:
        """These options checked against ``ns`` (refreshed), ``scope`` and ``confine`` as SQL
        selecting exactly their rows there (partition field ids read as what they stand for);
        raises naming what is wrong."""
        ns.refresh()
        plain = arrow_json.strip_field_ids(ns.schema_with_ids)
        if not self.on:
            raise MergeKeyError("merge needs at least one key column in `on`", None)
        if (unknown := first_unknown(plain, list(self.on))) is not None:
            raise MergeKeyError(
                f"merge key {unknown!r} is not a column of the namespace "
                f"(columns: {', '.join(plain.names)})",
                unknown,
            )
        scope_sql = namespace_row_filter(ns, self.scope)
        if scope_sql is not None and not self.by_source:
            raise WriteError("scope only applies with when_not_matched_by_source='delete'")
        if scope_sql is not None:
            check_filter(scope_sql, ns.schema_with_ids)  # a bad scope fails here
        confine_sql = namespace_row_filter(ns, self.confine)
        if confine_sql is not None:
            check_filter(confine_sql, ns.schema_with_ids)
        return replace(self, scope=scope_sql, confine=confine_sql)


def input_table(data: Any, ns: NamespaceState) -> pa.Table:
    """``data`` read whole and conformed to the namespace's write schema."""
    write_schema = table_write_schema(ns.schema_with_ids)
    reader = as_reader(data)
    check_input_schema(reader.schema, ns)
    batches = [conform_for_write(b, write_schema) for b in reader]
    return pa.Table.from_batches(batches, schema=write_schema)


def check_input_schema(schema: pa.Schema, ns: NamespaceState) -> None:
    """Refuse input whose columns cannot be written to ``ns`` (naming the column)."""
    try:
        dropped = dropped_names(full_schema(ns.snapshot.metadata))
    except Exception:
        dropped = set()
    check_write_schema(schema, table_write_schema(ns.schema_with_ids), dropped)


def check_null_keys(rows: pa.Table | pa.RecordBatch, on: Sequence[str]) -> None:
    """Refuse NULL merge keys, naming the column."""
    for name in on:
        nulls = rows.column(name).null_count
        if nulls:
            raise MergeKeyError(
                f"merge key column {name!r} is NULL in {nulls} input row(s); keys must be set",
                name,
            )


def duplicate_key_error(key: dict[str, Any], count: int, more: int | None) -> DuplicateKeyError:
    """The error naming a key the merge input holds ``count`` times."""
    also = f" ({more} duplicate key(s))" if more is not None else ""
    return DuplicateKeyError(
        f"merge key {key} occurs {count} times in the input{also}; each key may occur once. "
        "Nothing was changed",
        key,
    )


def check_keys(rows: pa.Table, on: list[str]) -> None:
    """Refuse NULL keys and keys occurring twice in the merge input, naming one."""
    check_null_keys(rows, on)
    if rows.num_rows < 2:
        return
    if len(pc.unique(rows.column(on[0]))) == rows.num_rows:
        return  # the first key column alone is unique
    counts = rows.select(on).group_by(on).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dup.num_rows:
        first = dup.slice(0, 1).to_pylist()[0]
        key = {name: first[name] for name in on}
        raise duplicate_key_error(key, first["count_all"], dup.num_rows)


def merge_rows(
    ns: NamespaceState | HasState,
    data: Any,
    options: MergeOptions,
    *,
    commit_properties: Mapping[str, str] | None = None,
) -> RowChangeResult:
    """Merge ``data`` into the namespace as ``options`` say (:class:`MergeOptions`: the key
    columns ``on`` and what happens to matched, new and unmatched stored rows), in one
    manifest commit (``data`` is read whole into memory).

    An input row whose key exists is a match: ``when_matched="update"`` replaces the stored
    row(s) with it, ``"ignore"`` keeps them. An unmatched row is inserted
    (``when_not_matched="insert"``) or dropped (``"ignore"``). Input rows are routed by the
    current spec. A matched row whose stored copy lies in another partition (its partition
    source columns changed, or it was written under an older spec) is moved: the stored copy
    is deleted and the new one written to its partition, in the same commit.

    Where keys are searched: when ``on`` includes the source columns of every spec version
    that has partitions, a key can only be in the partitions its values map to, so only those
    are read (an exact and cheap lookup). Otherwise every partition that may hold the keys is
    searched (pruned by ``on`` IN (input values) when the values are few), so moved keys are
    always found.

    ``when_not_matched_by_source="delete"`` deletes stored rows whose key is not in the input,
    limited to the partitions the input rows are routed to -- or, with ``scope`` (a filter),
    to the stored rows matching ``scope`` instead. It never empties partitions the input does
    not touch unless ``scope`` says so.

    ``confine`` (a filter) names the partitions the merge may change: a key stored in a
    partition outside it that the merge would move out raises :class:`UnnamedPartitionError`
    (checked on the manifest version the merge commits on, so a concurrent write cannot slip
    such a row in between); nothing is changed then.

    Keys must be unique in the input and never NULL (:class:`DuplicateKeyError`,
    :class:`MergeKeyError`); nothing is changed then."""
    ns = state_of(ns)
    ns.require_unpinned("merge into it")
    opts = options.checked(ns)
    src = input_table(data, ns)
    check_keys(src, list(opts.on))
    executor = TableExecutor(ns.uri, ns.storage_options)

    def build(p: ChangePlan) -> None:
        plan_merge(p, src, opts, executor)

    props = {**opts.properties(), **(commit_properties or {})}
    return run(ns, Operation.MERGE, build, props, executor)


def plan_merge(p: ChangePlan, src: pa.Table, opts: MergeOptions, executor: TableExecutor) -> None:
    """Decide every input row and every touched table's change on ``p``'s snapshot."""
    on = list(opts.on)
    routed, targets = p.route(src)
    target_of = np.full(src.num_rows, "", dtype=object)  # object id of each row's target
    for key, idx in routed.items():
        if key in targets:
            target_of[idx] = targets[key].object_id
    candidates = _candidates(p, src, on, targets)
    elsewhere = np.zeros(src.num_rows, dtype=bool)
    if candidates and src.num_rows:
        stored = parallel_map(
            lambda t: executor.stored_keys(t, p.schema, on), candidates, executor.threads
        )
        table_rows, input_rows = K.pairs(_stacked(stored, on), src, on)
        starts = np.cumsum([0] + [s.num_rows for s in stored])
        table_of = np.searchsorted(starts, table_rows, side="right") - 1
        ids = np.array([t.object_id for t in candidates], dtype=object)
        away = ids[table_of] != target_of[input_rows]  # stored in another table than its target
        elsewhere[input_rows[away]] = True
        if opts.update:  # the copies elsewhere of the rows written are deleted: moved
            if opts.confine is not None:
                check_confined(
                    p, opts.confine, src, on, candidates, table_of[away], input_rows[away]
                )
            _plan_moves(p, src, on, candidates, table_of[away], input_rows[away])
    for key, idx in routed.items():
        task = targets.get(key)
        away = elsewhere[idx]
        if task is not None:
            change = p.change(task)
            change.on, change.upsert = tuple(on), src.take(pa.array(idx))
            change.update, change.insert = opts.update, opts.insert
            change.elsewhere, change.counted = away, True
            continue
        write = (away & opts.update) | (~away & opts.insert)
        if write.any():
            p.creates.setdefault(key, []).append(src.take(pa.array(idx[write])))
            p.updated += int((write & away).sum())
            p.inserted += int((write & ~away).sum())
    if opts.by_source:
        _plan_by_source(p, src, opts, list(targets.values()), executor)


def check_confined(
    p: ChangePlan,
    confine: str,
    src: pa.Table,
    on: list[str],
    tables: list[ScanTask],
    table_of: np.ndarray,
    input_rows: np.ndarray,
) -> None:
    """Refuse moving keys out of tables that ``confine`` does not select on ``p``'s snapshot
    (``tables[table_of]`` hold the keys of ``src[input_rows]``, pairwise)."""
    allowed = {t.object_id for t in p.tasks(confine)}
    for t, row in zip(table_of.tolist(), input_rows.tolist(), strict=True):
        task = tables[t]
        if task.object_id in allowed:
            continue
        sample = src.slice(row, 1).to_pylist()[0]
        raise confined_error(task, {name: sample[name] for name in on}, sample, confine)


def confined_error(
    task: ScanTask, key: dict[str, Any], sample: dict[str, Any], confine: str
) -> UnnamedPartitionError:
    """The error for a merge key stored in ``task``'s partition, outside ``confine``."""
    return UnnamedPartitionError(
        f"merge key {key} is stored in partition {task.partition_values} "
        f"({task.object_id}), which this merge may not touch (it may change only {confine}); "
        "nothing was changed",
        dict(task.partition_values),
        sample,
    )


def _plan_moves(
    p: ChangePlan,
    src: pa.Table,
    on: list[str],
    tables: list[ScanTask],
    table_of: np.ndarray,
    input_rows: np.ndarray,
) -> None:
    """Delete the keys of ``input_rows`` from ``tables[table_of]`` (pairwise)."""
    if not len(table_of):
        return
    order = np.lexsort((input_rows, table_of))
    table_of, input_rows = table_of[order], input_rows[order]
    bounds = np.flatnonzero(np.r_[True, table_of[1:] != table_of[:-1], True])
    for start, end in itertools.pairwise(bounds):
        idx = np.unique(input_rows[start:end])
        change = p.change(tables[int(table_of[start])])
        change.on = tuple(on)
        change.delete_keys.append(src.select(on).take(pa.array(idx)))
        p.moved += len(idx)


def _candidates(
    p: ChangePlan, src: pa.Table, on: list[str], targets: dict[Key, ScanTask]
) -> list[ScanTask]:
    """The tables that may hold input keys in another partition than the row's target."""
    found: dict[str, ScanTask] = {}
    if keys_cover_partitions(p.snap, p.schema, on):
        # a key can only be where its values map under each spec: the current spec's is the
        # row's target, so only tables of older specs are searched
        counts = p.snap.table_counts()
        for s in p.snap.specs.values():
            if s.spec_id == p.spec.spec_id or not counts.get(s.spec_id):
                continue
            evaluator = SpecEvaluator(s, p.schema)
            keys: set[Key] = set()
            for batch in src.to_batches():
                keys.update(k for k, _ in evaluator.split(batch))
            entries = p.snap.find_tables(s, keys)
            found.update((t.object_id, t) for t in p.tasks_of(entries.values()))
        return list(found.values())
    if src.num_rows:
        found.update((t.object_id, t) for t in p.tasks(lookup_filter(src, on)))
    return list(found.values())


def _stacked(tables: list[pa.Table], on: list[str]) -> pa.Table:
    """The ``on`` columns of ``tables`` one after the other (types of the first)."""
    parts = [t.select(on) for t in tables]
    schema = parts[0].schema
    return pa.concat_tables([t.cast(schema) for t in parts])


def _plan_by_source(
    p: ChangePlan,
    src: pa.Table,
    opts: MergeOptions,
    targets: list[ScanTask],
    executor: TableExecutor,
) -> None:
    """Delete stored rows whose key is not in the input: in the target partitions, or in the
    rows matching ``scope``."""
    on = list(opts.on)
    if opts.scope is None:
        scoped: list[tuple[ScanTask, str | None]] = [(t, None) for t in targets]
    else:
        scoped = [(t, opts.scope) for t in p.tasks(opts.scope)]
    if not scoped:
        return
    stored = parallel_map(
        lambda s: executor.stored_keys(s[0], p.schema, on, s[1]), scoped, executor.threads
    )
    if not sum(s.num_rows for s in stored):
        return
    inside = K.member(_stacked(stored, on), src, on)
    start = 0
    for (task, _where), keys in zip(scoped, stored, strict=True):
        here = inside[start : start + keys.num_rows]
        start += keys.num_rows
        if here.all():
            continue
        gone = keys.select(on).filter(pa.array(~here))
        p.deleted += gone.num_rows
        change = p.change(task)
        change.on = tuple(on)
        change.delete_keys.append(K.distinct(gone, on))


def lookup_filter(src: pa.Table, keys: list[str]) -> str | None:
    """A filter selecting (at least) the stored rows with the input's keys, for pruning; None
    when the input has too many distinct values."""
    parts = []
    for name in keys:
        values = pc.unique(src.column(name)).to_pylist()
        if len(values) > LOOKUP_IN_LIST_MAX:
            continue
        try:
            literals = ", ".join(sql_literal(v) for v in values)
        except Exception:
            continue
        parts.append(f"{quote_ident(name)} IN ({literals})")
    return " AND ".join(parts) or None
