"""Index declarations: what a namespace asks of every partition table (an index on a column,
of a Lance index type, with parameters), stored in ``__manifest`` table metadata under
``dlp.index.<name>`` as this package's extension (see docs/reference/format.md, "Indexes")."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from ..errors import IndexDeclarationError
from ..schema.arrow_json import field_id

INDEX_KEY_PREFIX = "dlp.index."

VECTOR_TYPES = ("IVF_PQ", "IVF_HNSW_SQ", "IVF_FLAT")
TEXT_TYPES = ("INVERTED",)
SCALAR_TYPES = ("BTREE", "BITMAP", "LABEL_LIST")
INDEX_TYPES = VECTOR_TYPES + TEXT_TYPES + SCALAR_TYPES
ALIASES = {"FTS": "INVERTED"}
METRICS = ("l2", "cosine", "dot")
# parameters that must be positive integers (checked when declared, not when first built)
INTEGER_PARAMS = (
    "num_partitions",
    "num_sub_vectors",
    "num_bits",
    "sample_rate",
    "m",
    "ef_construction",
)

# Partition tables with fewer rows are searched without a vector index: a flat search of a few
# thousand vectors is exact and about as fast as probing an index (see
# docs/explanation/benchmarks.md).
VECTOR_MIN_ROWS = 4096
# Scalar and full-text indexes are cheap to build and exact: every non-empty table gets one.
OTHER_MIN_ROWS = 1
# Rows per IVF partition aimed at when ``num_partitions`` is not given: about as many as one
# index over a million rows has (sqrt(rows)), so that a query over many tables, routed by
# their centroids together (search/ivf.py), probes clusters of a like size
ROWS_PER_IVF_PARTITION = 1024
# Training rows per centroid (IVF and PQ) unless ``sample_rate`` is given; Lance's default is 256.
VECTOR_SAMPLE_RATE = 32

# Tokenizer options of an INVERTED index that the query is tokenized with as well.
TOKENIZER_OPTIONS = (
    "base_tokenizer",
    "language",
    "max_token_length",
    "lower_case",
    "stem",
    "remove_stop_words",
    "custom_stop_words",
    "ascii_folding",
    "min_ngram_length",
    "max_ngram_length",
    "prefix_only",
)

Kind = Literal["vector", "text", "scalar"]
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$")


def canonical_type(index_type: str) -> str:
    """``index_type`` as one of :data:`INDEX_TYPES` (``FTS`` is ``INVERTED``); raises
    :class:`IndexDeclarationError` for anything else."""
    if not isinstance(index_type, str):
        raise IndexDeclarationError(f"index type must be a string, got {index_type!r}")
    name = index_type.strip().upper()
    name = ALIASES.get(name, name)
    if name not in INDEX_TYPES:
        raise IndexDeclarationError(
            f"unknown index type {index_type!r}; one of {', '.join(INDEX_TYPES)} (or FTS)"
        )
    return name


def kind_of(index_type: str) -> Kind:
    """Whether an index type serves vector, full-text or scalar lookups."""
    if index_type in VECTOR_TYPES:
        return "vector"
    if index_type in TEXT_TYPES:
        return "text"
    return "scalar"


def vector_dimension(t: pa.DataType) -> int | None:
    """The dimension of a column type holding float vectors (a fixed-size list of floats),
    else None."""
    if pa.types.is_fixed_size_list(t) and pa.types.is_floating(t.value_type):
        return int(t.list_size)
    return None


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _is_scalar(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or _is_text(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
        or pa.types.is_binary(t)
    )


def _check_column_type(column: str, t: pa.DataType, index_type: str) -> None:
    kind = kind_of(index_type)
    if kind == "vector":
        ok = vector_dimension(t) is not None
        wanted = "a fixed-size list of floats (a vector)"
    elif kind == "text":
        ok, wanted = _is_text(t), "a string"
    elif index_type == "LABEL_LIST":
        ok = (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_scalar(t.value_type)
        wanted = "a list of scalars"
    else:
        ok, wanted = _is_scalar(t), "a scalar (number, string, date, time, boolean)"
    if not ok:
        raise IndexDeclarationError(
            f"column {column!r} is {t}: a {index_type} index needs {wanted}"
        )


@dataclass(frozen=True)
class IndexDeclaration:
    """One declared index: every partition table with at least ``min_rows`` rows carries a
    Lance index ``name`` of ``index_type`` on ``column`` (field id ``field_id``), built with
    ``params`` (vector parameters left out are derived from each table's size)."""

    name: str
    column: str
    field_id: int | None
    index_type: str
    min_rows: int
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The ``__manifest`` metadata key holding this declaration."""
        return INDEX_KEY_PREFIX + self.name

    @property
    def kind(self) -> Kind:
        """``vector``, ``text`` or ``scalar``."""
        return kind_of(self.index_type)

    @property
    def metric(self) -> str:
        """The distance metric of a vector index (``l2`` unless declared)."""
        return str(self.params.get("metric", "l2")).lower()

    @property
    def trainable_rows(self) -> int:
        """The fewest rows Lance trains this index on: an ``IVF_PQ`` codebook needs
        ``2 ** num_bits`` (default 256) rows; on fewer Lance publishes an index covering no
        row, so such tables are searched flat like those below ``min_rows``."""
        if self.index_type == "IVF_PQ":
            bits = self.params.get("num_bits", 8)
            return 2 ** int(bits) if isinstance(bits, int) and 0 < bits <= 16 else 1
        return 1

    def asks_for_same(self, other: IndexDeclaration) -> bool:
        """Whether ``other`` asks for the same index: one column (by field id when both know
        it), name, type, ``min_rows`` and parameters (a vector index's metric ``l2`` whether
        given or not)."""
        if self.field_id is not None and other.field_id is not None:
            same_column = self.field_id == other.field_id
        else:
            same_column = self.column == other.column
        return (
            same_column
            and self.name == other.name
            and self.index_type == other.index_type
            and self.min_rows == other.min_rows
            and self._compared_params() == other._compared_params()
        )

    def _compared_params(self) -> dict[str, Any]:
        params = dict(self.params)
        if self.kind == "vector":
            params["metric"] = self.metric
        return params

    def plain(self) -> dict[str, Any]:
        """This declaration as a person reads it: column, index type, ``min_rows`` and
        parameters."""
        return {
            "column": self.column,
            "index_type": self.index_type,
            "min_rows": self.min_rows,
            "params": dict(self.params),
        }

    def tokenizer(self) -> dict[str, Any]:
        """The tokenizer options of a full-text index (for tokenizing queries alike)."""
        return {k: v for k, v in self.params.items() if k in TOKENIZER_OPTIONS}

    def to_json(self) -> str:
        """The metadata value of this declaration."""
        body = {
            "column": self.column,
            "field_id": self.field_id,
            "index_type": self.index_type,
            "min_rows": self.min_rows,
            "params": self.params,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, name: str, text: str) -> IndexDeclaration:
        """The declaration stored under ``dlp.index.<name>``."""
        body = json.loads(text)
        return cls(
            name=name,
            column=str(body["column"]),
            field_id=body.get("field_id"),
            index_type=canonical_type(str(body["index_type"])),
            min_rows=int(body.get("min_rows", OTHER_MIN_ROWS)),
            params=dict(body.get("params") or {}),
        )

    def with_column(self, schema: pa.Schema) -> IndexDeclaration:
        """This declaration naming its column as ``schema`` (with field ids) names it now (a
        renamed column is followed by its field id)."""
        if self.field_id is None:
            return self
        for f in schema:
            if field_id(f) == self.field_id:
                if f.name == self.column:
                    return self
                return IndexDeclaration(
                    self.name, f.name, self.field_id, self.index_type, self.min_rows, self.params
                )
        return self

    def build_params(self, rows: int, dimension: int | None) -> dict[str, Any]:
        """Parameters for Lance's index builder on a table of ``rows`` rows: the declared
        ones, and for vector indexes a partition count and sub-vector count derived from the
        table's size and the vectors' dimension when not declared."""
        params = dict(self.params)
        if self.kind != "vector":
            return params
        params.setdefault("metric", "l2")
        if "num_partitions" not in params:
            per = ROWS_PER_IVF_PARTITION * (4 if self.index_type == "IVF_HNSW_SQ" else 1)
            params["num_partitions"] = max(1, min(4096, math.ceil(rows / per)))
        if self.index_type == "IVF_PQ" and "num_sub_vectors" not in params and dimension:
            params["num_sub_vectors"] = _sub_vectors(dimension)
        # training samples per centroid: Lance's default (256) trains each partition table's
        # quantizer on as many rows as one big dataset's; an eighth keeps recall (refined
        # results) and builds a namespace of many tables within a single dataset's build time
        # (docs/explanation/benchmarks.md, search)
        params.setdefault("sample_rate", VECTOR_SAMPLE_RATE)
        return params


def _sub_vectors(dimension: int) -> int:
    """PQ sub-vectors of 8 dimensions each where the dimension allows (else the largest
    divisor of it up to dimension / 2)."""
    for width in (8, 4, 2, 16, 1):
        if dimension % width == 0 and dimension // width >= 1:
            return dimension // width
    return 1


def declarations(metadata: Mapping[str, str]) -> list[IndexDeclaration]:
    """The index declarations in ``__manifest`` table metadata, by name."""
    out = []
    for key in sorted(metadata):
        if key.startswith(INDEX_KEY_PREFIX) and metadata[key]:
            out.append(IndexDeclaration.from_json(key[len(INDEX_KEY_PREFIX) :], metadata[key]))
    return out


def declare(
    schema: pa.Schema,
    column: str,
    index_type: str,
    *,
    name: str | None,
    min_rows: int | None,
    params: Mapping[str, Any],
) -> IndexDeclaration:
    """A checked declaration of an index on ``column`` of ``schema`` (with field ids); raises
    :class:`IndexDeclarationError` naming the column, type, name or parameter at fault."""
    canonical = canonical_type(index_type)
    if not isinstance(column, str) or schema.get_field_index(column) < 0:
        raise IndexDeclarationError(
            f"no column {column!r} in the namespace schema (columns: {', '.join(schema.names)})"
        )
    f = schema.field(column)
    _check_column_type(column, f.type, canonical)
    index_name = name if name is not None else f"{column}_{canonical.lower()}"
    if not isinstance(index_name, str) or not _NAME.match(index_name):
        raise IndexDeclarationError(
            f"index name {index_name!r}: use letters, digits, '_' and '-' (at most 128)"
        )
    if min_rows is None:
        min_rows = VECTOR_MIN_ROWS if kind_of(canonical) == "vector" else OTHER_MIN_ROWS
    if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
        raise IndexDeclarationError(f"min_rows must be a positive integer, got {min_rows!r}")
    checked = dict(params)
    if "metric" in checked:
        if kind_of(canonical) != "vector":
            raise IndexDeclarationError(
                f"metric {checked['metric']!r}: only vector indexes take a metric, not {canonical}"
            )
        metric = str(checked["metric"]).lower()
        if metric not in METRICS:
            raise IndexDeclarationError(
                f"metric {checked['metric']!r}: vector indexes take one of {', '.join(METRICS)}"
            )
        checked["metric"] = metric
    for key in INTEGER_PARAMS:
        value = checked.get(key)
        if key in checked and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise IndexDeclarationError(
                f"index {index_name!r}: {key} must be a positive integer, got {value!r}"
            )
    try:
        json.dumps(checked)
    except (TypeError, ValueError):
        raise IndexDeclarationError(
            f"index {index_name!r}: parameters must be JSON values (numbers, strings, lists)"
        ) from None
    return IndexDeclaration(index_name, column, field_id(f), canonical, min_rows, checked)
