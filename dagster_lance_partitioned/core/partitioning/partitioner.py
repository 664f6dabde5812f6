"""Computing a spec's partition values for record batches and splitting batches by them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import arrow_json
from .expressions import CompiledExpression, coerce_result
from .expressions import compiled as compile_expression
from .partition_spec import PartitionSpec, SpecField, canonical_value, source_types


class SpecEvaluator:
    """Evaluates every field of one partition spec over batches of the namespace schema."""

    def __init__(self, spec: PartitionSpec, schema: pa.Schema) -> None:
        self.spec = spec
        self.schema = schema
        names = {arrow_json.field_id(f): f.name for f in schema}
        self._sources: list[list[str | None]] = []
        self._compiled: list[CompiledExpression] = []
        self._constant: dict[str, pa.DataType] = {}  # column -> its type in the schema
        for f in spec.fields:
            types = source_types(f, schema)
            self._sources.append([names.get(i) for i in f.source_ids])
            compiled = compile_expression(f.sql(types), types, label=f.field_id)
            # raises ResultTypeMismatchError early when the declared type cannot hold the values
            coerce_result(pa.array([], compiled.output_type), f.result_type, f.field_id)
            self._compiled.append(compiled)
            # the source column of an identity field holds one value per partition: filled
            # instead of gathered (when no cast of its values could merge distinct ones)
            source = self._sources[-1]
            if (
                len(types) == 1
                and source[0] is not None
                and constant_safe(types[0])
                and f.result_type == types[0]
                and f.transform_for(types).is_identity
            ):
                self._constant[source[0]] = types[0]

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

    def split(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple[Any, ...], Rows]]:
        """(partition values, the rows of ``batch`` in that partition) for each partition present.

        The rows are selected lazily: gathering them is left to whoever writes them, so the
        gathers of many partitions can run concurrently."""
        if batch.num_rows == 0:
            return
        if not self._compiled:  # a spec without fields: one partition holds every row
            yield (), Rows(batch)
            return
        values = self.values(batch)
        codes, keys = _group_codes(values)
        if len(keys) == 1:
            yield keys[0], Rows(batch)
            return
        # stable sort by group code (a radix sort for small codes); each group's row numbers
        # are then ascending, so its gather reads the batch front to back
        small = np.int16 if len(keys) <= np.iinfo(np.int16).max else np.int32
        order = np.argsort(codes.astype(small), kind="stable")
        counts = np.bincount(codes, minlength=len(keys))
        constant = tuple(
            i for i, f in enumerate(batch.schema) if self._constant.get(f.name) == f.type
        )
        start = 0
        for g, count in enumerate(counts.tolist()):
            if count:
                yield keys[g], Rows(batch, order[start : start + count], constant)
            start += count


@dataclass(frozen=True)
class Rows:
    """Some rows of a batch (all of them when ``indices`` is None), gathered on demand.

    ``constant``: positions of columns holding one value in these rows (the source columns of
    identity partition fields, of types whose grouping equality is equality of their bytes):
    filled with that value instead of gathered."""

    batch: pa.RecordBatch
    indices: np.ndarray | None = None
    constant: tuple[int, ...] = ()

    @property
    def num_rows(self) -> int:
        return int(self.batch.num_rows) if self.indices is None else len(self.indices)

    @property
    def nbytes(self) -> int:
        """Estimated size once gathered."""
        if self.indices is None or self.batch.num_rows == 0:
            return int(self.batch.nbytes)
        return int(self.batch.nbytes) * len(self.indices) // int(self.batch.num_rows)

    def materialize(self) -> pa.RecordBatch:
        """The rows as their own batch."""
        if self.indices is None:
            return self.batch
        picked = pa.array(self.indices)
        if not self.constant or not len(self.indices):
            return self.batch.take(picked)
        first = int(self.indices[0])
        columns = [
            pa.repeat(col[first], len(self.indices)) if i in self.constant else col.take(picked)
            for i, col in enumerate(self.batch.columns)
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.batch.schema)


def constant_safe(kind: pa.DataType) -> bool:
    """Whether rows grouped as equal by a value of ``kind`` hold identical bytes (strings,
    integers, dates, timestamps, booleans: not floats, whose 0.0 and -0.0 group together)."""
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_date(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_boolean(kind)
    )


def _group_codes(values: list[pa.Array]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """A dense group code per row (0..G-1) and each group's partition-value tuple."""
    combined: np.ndarray | None = None
    dictionaries = []
    sizes = []
    for arr in values:
        encoded = pc.dictionary_encode(arr, null_encoding="encode")
        idx = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        dictionaries.append(encoded.dictionary)
        sizes.append(len(encoded.dictionary))
        combined = idx if combined is None else combined * len(encoded.dictionary) + idx
    assert combined is not None
    span = int(np.prod(sizes, dtype=np.float64))
    if span <= max(4 * len(combined), 1 << 20):  # dense lookup table: linear time
        present = np.zeros(span, dtype=bool)
        present[combined] = True
        uniq = np.flatnonzero(present)
        lookup = np.empty(span, dtype=np.int64)
        lookup[uniq] = np.arange(len(uniq))
        dense = lookup[combined]
    else:
        uniq, dense = np.unique(combined, return_inverse=True)
    keys = []
    for code in uniq.tolist():
        parts = []
        for size in reversed(sizes):
            parts.append(code % size)
            code //= size
        parts.reverse()
        keys.append(tuple(_py(d[i]) for d, i in zip(dictionaries, parts, strict=True)))
    return dense.astype(np.int64, copy=False), keys


def _py(scalar: pa.Scalar) -> Any:
    return canonical_value(scalar.as_py())
