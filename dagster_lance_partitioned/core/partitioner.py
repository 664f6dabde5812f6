"""Computing a spec's partition values for record batches and splitting batches by them."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from . import arrow_json
from .expressions import CompiledExpression, coerce_result
from .spec import PartitionSpec, SpecField, source_types

_ROW = "__dlp_row"


class SpecEvaluator:
    """Evaluates every field of one partition spec over batches of the namespace schema."""

    def __init__(self, spec: PartitionSpec, schema: pa.Schema) -> None:
        self.spec = spec
        self.schema = schema
        names = {arrow_json.field_id(f): f.name for f in schema}
        self._sources: list[list[str | None]] = []
        self._compiled: list[CompiledExpression] = []
        for f in spec.fields:
            types = source_types(f, schema)
            self._sources.append([names.get(i) for i in f.source_ids])
            compiled = CompiledExpression(f.sql(types), types, label=f.field_id)
            # raises ResultTypeMismatchError early when the declared type cannot hold the values
            coerce_result(pa.array([], compiled.output_type), f.result_type, f.field_id)
            self._compiled.append(compiled)

    def field_values(
        self,
        f: SpecField,
        compiled: CompiledExpression,
        sources: list[str | None],
        batch: pa.RecordBatch,
    ) -> pa.Array:
        """One field's partition values for every row of ``batch``."""
        cols = []
        for name, field in zip(sources, compiled.input_schema, strict=True):
            if name is None or batch.schema.get_field_index(name) < 0:
                cols.append(pa.nulls(batch.num_rows, field.type))
            else:
                cols.append(batch.column(name))
        return coerce_result(compiled.evaluate(cols), f.result_type, f.field_id)

    def values(self, batch: pa.RecordBatch) -> list[pa.Array]:
        """Every field's partition values for every row of ``batch``, in spec order."""
        return [
            self.field_values(f, c, s, batch)
            for f, c, s in zip(self.spec.fields, self._compiled, self._sources, strict=True)
        ]

    def split(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple[Any, ...], pa.RecordBatch]]:
        """(partition values, rows of ``batch`` in that partition) for each partition present."""
        if batch.num_rows == 0:
            return
        values = self.values(batch)
        keys = [f"k{i}" for i in range(len(values))]
        ktable = pa.table(
            [*values, pa.array(range(batch.num_rows), pa.int64())], names=[*keys, _ROW]
        )
        if len(values) == 1 and values[0].null_count == 0:
            uniq = pc.unique(values[0])
            if len(uniq) == 1:
                yield (_py(uniq[0]),), batch
                return
        grouped = ktable.group_by(keys, use_threads=False).aggregate([(_ROW, "list")])
        lists = grouped.column(f"{_ROW}_list").combine_chunks()
        taken = batch.take(lists.flatten())  # one gather; each partition is then a slice
        offsets = lists.offsets.to_pylist()
        key_cols = [grouped.column(k) for k in keys]
        for g in range(grouped.num_rows):
            key = tuple(_py(c[g]) for c in key_cols)
            yield key, taken.slice(offsets[g], offsets[g + 1] - offsets[g])


def _py(scalar: pa.Scalar) -> Any:
    value = scalar.as_py()
    if isinstance(value, float) and math.isnan(value):
        return math.nan  # one canonical NaN object, so NaN partitions compare equal as keys
    return value
