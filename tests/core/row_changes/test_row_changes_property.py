"""Property: random sequences of merge / delete / update (and spec changes) on small namespaces
partitioned by identity, bucket or year give the same rows as the same operations on a plain
list of rows, and every row lies in the partition its table's spec says."""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from typing import Any

import datafusion as dfn
import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_lance_partitioned import MergeOptions, PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.partitioning.partitioner import SpecEvaluator

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("k", pa.int32()),
        pa.field("d", pa.date32()),
        pa.field("v", pa.float64()),
    ]
)
SPECS = {
    "identity": [PartitionField.identity("k")],
    "bucket": [PartitionField.bucket("k", 3)],
    "year": [PartitionField.year("d")],
    "identity_year": [PartitionField.identity("k"), PartitionField.year("d")],
}
DATES = [dt.date(2024, 5, 1), dt.date(2025, 1, 1), dt.date(2025, 7, 15), None]
FILTERS = [
    "k < {n}",
    "k IS NULL",
    "id % 3 = {r}",
    "v > {x}",
    "d = DATE '2025-01-01'",
    "k = {n} OR v < {x}",
    "d IS NULL AND id > {n}",
]
SETS = [
    {"v": "v + 1"},
    {"k": "k + 1"},
    {"k": "{n}"},
    {"d": "DATE '2026-03-01'"},
    {"k": "NULL", "v": "0"},
    {"v": "CAST(id AS DOUBLE)", "d": "NULL"},
]

ks = st.one_of(st.none(), st.integers(-2, 5))
row = st.tuples(st.integers(0, 30), ks, st.sampled_from(DATES), st.integers(-5, 5))
filters = st.builds(
    lambda t, n, r, x: t.format(n=n, r=r, x=x),
    st.sampled_from(FILTERS),
    st.integers(-2, 5),
    st.integers(0, 2),
    st.integers(-5, 5),
)
merge_op = st.tuples(
    st.just("merge"),
    st.lists(row, min_size=0, max_size=8, unique_by=lambda r: r[0]),
    st.sampled_from(["id", "id_k"]),
    st.sampled_from(["update", "ignore"]),
    st.sampled_from(["insert", "ignore"]),
    st.sampled_from(["keep", "delete"]),
)
delete_op = st.tuples(st.just("delete"), filters)
update_op = st.tuples(
    st.just("update"),
    filters,
    st.builds(
        lambda s, n: {c: e.format(n=n) for c, e in s.items()},
        st.sampled_from(SETS),
        st.integers(-2, 5),
    ),
)
respec_op = st.tuples(st.just("respec"), st.sampled_from(sorted(SPECS)))
ops = st.lists(st.one_of(merge_op, merge_op, delete_op, update_op, respec_op), max_size=6)


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist([{c: r[c] for c in SCHEMA.names} for r in rows], schema=SCHEMA)


def _sql(rows: list[dict[str, Any]], select: str, where: str) -> list[dict[str, Any]]:
    """DataFusion over the model's rows (the oracle for SQL semantics)."""
    ctx = dfn.SessionContext()
    table = _table(rows)
    batches = table.to_batches() or [pa.RecordBatch.from_pylist([], schema=SCHEMA)]
    ctx.register_record_batches("t", [batches])
    out = ctx.sql(
        f"SELECT {select}, __pos FROM (SELECT *, ROW_NUMBER() OVER () AS __pos FROM t)"
        f" WHERE {where}"
    ).to_arrow_table()
    return out.to_pylist()


class Model:
    """The rows as a list; each row remembers the spec version of the partition it lies in."""

    def __init__(self, ns: PartitionedNamespace, rows: list[dict[str, Any]]) -> None:
        self.ns = ns
        self.spec_id = ns.current_spec.spec_id
        self.rows = [{**r, "_spec": self.spec_id} for r in rows]

    def key(self, spec_id: int, row: dict[str, Any]) -> tuple[Any, ...]:
        spec = next(s for s in self.ns.specs if s.spec_id == spec_id)
        batch = pa.RecordBatch.from_pylist([{c: row[c] for c in SCHEMA.names}], schema=SCHEMA)
        values = SpecEvaluator(spec, self.ns.schema_with_ids).values(batch)
        return tuple(v[0].as_py() for v in values)

    def merge(self, data, on, when_matched, when_not_matched, by_source) -> None:
        cur = self.spec_id
        keep = list(self.rows)
        gone: set[int] = set()
        added = []
        in_keys = {tuple(r[c] for c in on) for r in data}
        targets = {self.key(cur, r) for r in data}
        for r in data:
            k = tuple(r[c] for c in on)
            target = self.key(cur, r)
            found = [
                i
                for i, s in enumerate(keep)
                if all(v is not None for v in k) and tuple(s[c] for c in on) == k
            ]
            if not found:
                if when_not_matched == "insert":
                    added.append({**r, "_spec": cur})
                continue
            if when_matched == "ignore":
                continue
            here = [
                i for i in found if keep[i]["_spec"] == cur and self.key(cur, keep[i]) == target
            ]
            gone.update(found)
            added.extend({**r, "_spec": cur} for _ in (here or [None]))
        if by_source == "delete":
            for i, s in enumerate(keep):
                k = tuple(s[c] for c in on)
                if (
                    s["_spec"] == cur
                    and self.key(cur, s) in targets
                    and k not in in_keys
                    and all(v is not None for v in k)
                ):
                    gone.add(i)
        self.rows = [s for i, s in enumerate(keep) if i not in gone] + added

    def delete(self, where: str) -> None:
        drop = {r["__pos"] - 1 for r in _sql(self.rows, "id", where)}
        self.rows = [r for i, r in enumerate(self.rows) if i not in drop]

    def update(self, where: str, assignments: dict[str, str]) -> None:
        select = ", ".join(
            f"({assignments[c]}) AS {c}" if c in assignments else c for c in SCHEMA.names
        )
        changed = _sql(self.rows, select, where)
        table = _table(changed).cast(SCHEMA, safe=False)  # as the namespace casts them
        for pos, new in zip((r["__pos"] - 1 for r in changed), table.to_pylist(), strict=True):
            old = self.rows[pos]
            spec_id = old["_spec"]
            if self.key(spec_id, new) != self.key(spec_id, old):
                spec_id = self.spec_id
            self.rows[pos] = {**new, "_spec": spec_id}

    def check(self) -> None:
        expected = sorted((tuple(r[c] for c in SCHEMA.names) for r in self.rows), key=repr)
        got = sorted((tuple(r.values()) for r in self.ns.to_table().to_pylist()), key=repr)
        assert got == expected
        for task in self.ns.plan_scan().tasks:
            spec = next(s for s in self.ns.specs if s.spec_id == task.spec_id)
            stored = lance.dataset(task.uri, version=task.read_version).to_table()
            assert stored.num_rows > 0, f"empty partition {task.object_id} left registered"
            values = SpecEvaluator(spec, self.ns.schema_with_ids).values(
                stored.cast(SCHEMA).combine_chunks().to_batches()[0]
            )
            for f, arr in zip(spec.fields, values, strict=True):
                assert set(arr.to_pylist()) == {task.partition_values[f.field_id]}


CASES = {
    "spec": st.sampled_from(sorted(SPECS)),
    "initial": st.lists(row, max_size=12, unique_by=lambda r: r[0]),
    "steps": ops,
}
CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(max_examples=50, deadline=None, suppress_health_check=CHECKS)
@given(**CASES)
def test_row_changes_match_a_list_of_rows(spec, initial, steps):
    run_steps(spec, initial, steps)


@pytest.mark.slow
@settings(max_examples=500, deadline=None, suppress_health_check=CHECKS)
@given(**CASES)
def test_row_changes_match_a_list_of_rows_long(spec, initial, steps):
    run_steps(spec, initial, steps)


def run_steps(spec: str, initial: list[tuple], steps: list[tuple]) -> None:
    """Apply ``steps`` to a namespace and to the model, comparing after each."""
    root = tempfile.mkdtemp(prefix="dlp-rowprop-")
    try:
        ns = PartitionedNamespace.create(root, schema=SCHEMA, partition_fields=SPECS[spec])
        first = [{"id": i, "k": k, "d": d, "v": float(v)} for i, k, d, v in initial]
        if first:
            ns.write(_table(first))
        model = Model(ns, first)
        model.check()
        for step in steps:
            kind = step[0]
            if kind == "merge":
                _, data, on_kind, matched, not_matched, by_source = step
                on = ["id"] if on_kind == "id" else ["id", "k"]
                data = [
                    {
                        "id": i,
                        "k": (k if k is not None or on_kind == "id" else 0),
                        "d": d,
                        "v": float(v),
                    }
                    for i, k, d, v in data
                ]
                ns.merge_insert(
                    _table(data),
                    MergeOptions(
                        on,
                        when_matched=matched,
                        when_not_matched=not_matched,
                        when_not_matched_by_source=by_source,
                    ),
                )
                model.merge(data, on, matched, not_matched, by_source)
            elif kind == "delete":
                ns.delete(step[1])
                model.delete(step[1])
            elif kind == "update":
                ns.update(step[1], step[2])
                model.update(step[1], step[2])
            else:
                ns.update_spec(SPECS[step[1]])
                model.spec_id = ns.current_spec.spec_id
            model.check()
    finally:
        shutil.rmtree(root, ignore_errors=True)
