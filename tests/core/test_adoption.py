"""Adopting data of another schema and partitioning (``core/adoption.py``), without Dagster:

- :func:`plan_adoption` finds the added columns (nullable, dictionaries as their values), the
  widened types and a changed partitioning; identical data plans no change.
- :meth:`Adoption.refuse` raises :class:`EvolutionRefusedError` naming each change, only for a
  change that is there.
- :func:`write_adopting` writes straight into the namespace when nothing changes, else commits
  the changes with the data in one transaction; a commit losing to another writer's different
  change is planned again on the latest version."""

from __future__ import annotations

import pyarrow as pa
import pytest
from helpers.data import SCHEMA, sample_table, sorted_rows

from dagster_lance_partitioned import EvolutionRefusedError, PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.adoption import (
    Adoption,
    adopted_schema,
    open_or_create,
    plan_adoption,
    write_adopting,
)

BY_COUNTRY = [PartitionField.identity("country")]


def make_ns(tmp_path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, BY_COUNTRY)
    ns.write(sample_table())
    return ns


def with_score(table: pa.Table) -> pa.Table:
    return table.append_column("score", pa.array(range(table.num_rows), pa.int64()))


def test_the_same_data_plans_no_change(tmp_path):
    ns = make_ns(tmp_path)
    adoption = plan_adoption(ns, SCHEMA, BY_COUNTRY)
    assert not adoption.has_changes and not adoption.changes_schema
    adoption.refuse("ns", schema="refused", spec="refused")  # nothing to refuse


def test_added_widened_and_repartitioned_columns_are_planned(tmp_path):
    ns = make_ns(tmp_path)
    ns.add_columns(pa.field("small", pa.int32()))
    schema = pa.schema(
        [
            *SCHEMA,
            pa.field("small", pa.int64()),  # widened
            pa.field("label", pa.dictionary(pa.int8(), pa.utf8()), nullable=False),  # added
        ]
    )
    adoption = plan_adoption(ns, schema, [PartitionField.identity("label")])
    assert [(f.name, f.type, f.nullable) for f in adoption.added] == [("label", pa.utf8(), True)]
    assert adoption.widened == (("small", pa.int64()),)
    assert adoption.changes_spec and adoption.has_changes

    # the fields may depend on the namespace schema as the data leaves it
    seen: list[pa.Schema] = []
    plan_adoption(ns, schema, lambda target: seen.append(target) or BY_COUNTRY)
    assert seen[0].field("small").type == pa.int64() and "label" in seen[0].names
    assert adopted_schema(ns.schema, schema).field("label").nullable


def test_a_refusal_names_each_change_only_when_it_is_there(tmp_path):
    ns = make_ns(tmp_path)
    version = ns.version
    adoption = plan_adoption(ns, with_score(sample_table()).schema, BY_COUNTRY)
    adoption.refuse("asset x", spec="spec changes are off")  # the spec does not change
    with pytest.raises(EvolutionRefusedError) as e:
        adoption.refuse("asset x", schema="schema changes are off")
    assert str(e.value) == (
        "asset x: the output schema changed (new column 'score' (int64)) and schema changes "
        "are off; nothing was written"
    )

    spec = plan_adoption(ns, SCHEMA, [PartitionField.identity("event_date")])
    with pytest.raises(EvolutionRefusedError, match=r"spec v1: country; now: event_date"):
        spec.refuse("asset x", spec="spec changes are off")
    assert ns.refresh().version == version  # planning and refusing commit nothing


def test_no_change_writes_straight_into_the_namespace(tmp_path):
    ns = make_ns(tmp_path)
    targets = []

    def write(ns_: PartitionedNamespace, target):
        targets.append(target)
        return target.write(sample_table(3, start=100))

    adopted = write_adopting(lambda: (ns, plan_adoption(ns, SCHEMA, BY_COUNTRY)), write)
    assert targets == [ns]
    assert adopted.result is not None and adopted.result.rows_written == 3
    assert not adopted.adoption.has_changes


def test_changes_commit_with_the_data_in_one_transaction(tmp_path):
    ns = make_ns(tmp_path)
    data = with_score(sample_table(3, start=100))

    def prepare() -> tuple[PartitionedNamespace, Adoption]:
        return ns, plan_adoption(ns, data.schema, BY_COUNTRY)

    adopted = write_adopting(prepare, lambda _, target: target.write(data))
    assert adopted.result is not None and adopted.result.rows_written == 3  # the transaction's
    ns.refresh()
    assert ns.schema.field("score").nullable
    rows = sorted_rows(ns.to_table())
    assert [r["score"] for r in rows if r["id"] >= 100] == [0, 1, 2]
    assert all(r["score"] is None for r in rows if r["id"] < 100)


def test_a_commit_losing_to_another_writers_change_is_planned_again(tmp_path):
    make_ns(tmp_path)
    uri = str(tmp_path / "ns")
    data = with_score(sample_table(3, start=100))  # score int64
    attempts: list[Adoption] = []
    retries: list[int] = []

    def prepare() -> tuple[PartitionedNamespace, Adoption]:
        ns = PartitionedNamespace.open(uri)
        if not attempts:  # another writer adds score as int32 after this one read the version
            PartitionedNamespace.open(uri).add_columns(pa.field("score", pa.int32()))
        attempts.append(plan_adoption(ns, data.schema, BY_COUNTRY))
        return ns, attempts[-1]

    adopted = write_adopting(
        prepare, lambda _, target: target.write(data), on_retry=lambda: retries.append(1)
    )
    assert retries == [1]
    assert attempts[0].added and attempts[0].added[0].name == "score"  # planned on the old one
    assert attempts[1].widened == (("score", pa.int64()),)  # planned again on the latest
    assert adopted.adoption is attempts[1]
    ns = PartitionedNamespace.open(uri)
    assert ns.schema.field("score").type == pa.int64()
    assert ns.count_rows() == 15


def test_open_or_create_creates_once_and_opens_after(tmp_path):
    uri = str(tmp_path / "made")
    made = []

    def create() -> PartitionedNamespace:
        made.append(1)
        return PartitionedNamespace.create(uri, SCHEMA, BY_COUNTRY, exist_ok=True)

    first = open_or_create(uri, None, create)
    second = open_or_create(uri, None, create)
    assert made == [1]
    assert first.uri == second.uri and second.current_spec.spec_id == 1
