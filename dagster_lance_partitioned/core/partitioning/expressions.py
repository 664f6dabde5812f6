"""Partition expressions evaluated with DataFusion, with the hash UDFs ``murmur3``,
``murmur3_multi`` and ``hash`` registered, and the result type checked against the declaration.

DataFusion's Python UDFs take one exact signature, while the hash functions accept any hashable
type. So each call site of a hash function is given a private name and registered with the
argument types DataFusion infers for that site; the implementation dispatches on the runtime type.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import datafusion as dfn
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ExpressionError, ResultTypeMismatchError
from ..lru import Lru
from . import hashing

HASH_UDFS: dict[str, tuple[Callable[..., pa.Array], pa.DataType]] = {
    "murmur3": (hashing.murmur3, pa.int32()),
    "murmur3_multi": (hashing.murmur3_multi, pa.int32()),
    "hash": (hashing.xxhash64, pa.int64()),
}
_TABLE = "__dlp_input"


@dataclass(frozen=True)
class _CallSite:
    name: str  # murmur3 | murmur3_multi | hash
    start: int  # index of the function name
    open_paren: int
    close_paren: int
    args: tuple[tuple[int, int], ...]  # (start, end) of each argument's text
    depth: int


def _scan_call_sites(sql: str) -> list[_CallSite]:
    """Locate hash-function calls in ``sql``: names, parentheses and top-level argument spans.

    This is a lexical scan (quotes and parentheses only); DataFusion does all the parsing."""
    sites: list[_CallSite] = []
    stack: list[tuple[int, str | None, int | None, list[int]]] = []  # (open, fn, fn_start, commas)
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            j = i + 1
            while j < n:
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
            continue
        if ch == "(":
            k = i - 1
            while k >= 0 and sql[k].isspace():
                k -= 1
            end = k + 1
            while k >= 0 and (sql[k].isalnum() or sql[k] == "_"):
                k -= 1
            word = sql[k + 1 : end].lower()
            prev = sql[k] if k >= 0 else ""
            fn = word if word in HASH_UDFS and (not prev or prev not in ".\"'") else None
            stack.append((i, fn, k + 1 if fn else None, []))
        elif ch == "," and stack:
            stack[-1][3].append(i)
        elif ch == ")" and stack:
            open_i, fn, fn_start, commas = stack.pop()
            if fn is not None and fn_start is not None:
                bounds = [open_i, *commas, i]
                args = tuple((bounds[a] + 1, bounds[a + 1]) for a in range(len(bounds) - 1))
                if len(args) == 1 and not sql[args[0][0] : args[0][1]].strip():
                    args = ()
                sites.append(_CallSite(fn, fn_start, open_i, i, args, len(stack)))
        i += 1
    return sites


def ordered_context() -> dfn.SessionContext:
    """A DataFusion session that returns rows in input order (one partition, no repartitioning),
    so evaluated values line up with the rows they came from."""
    config = (
        dfn.SessionConfig()
        .with_target_partitions(1)
        .with_repartition_aggregations(False)
        .with_repartition_windows(False)
        .with_repartition_sorts(False)
        .set("datafusion.optimizer.enable_round_robin_repartition", "false")
    )
    return dfn.SessionContext(config)


def _wrap(impl: Callable[..., pa.Array], out_type: pa.DataType) -> Callable[..., pa.Array]:
    def call(*arrays: pa.Array) -> pa.Array:
        return impl(*arrays).cast(out_type)

    return call


# compiled expressions kept per process (a DataFusion context each: building one costs a few
# ms, which every write and plan would pay again)
COMPILED_CACHED = 256
_compiled: Lru[CompiledExpression] = Lru(COMPILED_CACHED)


def compiled(sql: str, input_types: Sequence[pa.DataType], label: str = "") -> CompiledExpression:
    """The :class:`CompiledExpression` of ``sql`` over ``input_types``, compiled once per
    process (it holds no state between evaluations)."""
    key = (sql, tuple(input_types), label)
    hit = _compiled.get(key)
    if hit is None:
        hit = CompiledExpression(sql, input_types, label)
        _compiled.put(key, hit)
    return hit


class CompiledExpression:
    """A DataFusion SQL expression over ``col0..colN`` of known input types, ready to evaluate."""

    def __init__(self, sql: str, input_types: Sequence[pa.DataType], label: str = "") -> None:
        self.sql = sql
        self.label = label or sql
        self.input_schema = pa.schema([pa.field(f"col{i}", t) for i, t in enumerate(input_types)])
        self._lock = threading.Lock()
        self._ctx = ordered_context()
        self._query = self._prepare()
        self.output_type = self._evaluate_raw(self.input_schema.empty_table()).type

    def _prepare(self) -> str:
        sites = _scan_call_sites(self.sql)
        if not sites:
            return f"SELECT {self.sql} AS v FROM {_TABLE}"
        private = {s.start: f"__dlp_{s.name}_{k}" for k, s in enumerate(sites)}
        # rewrite names right to left so earlier offsets stay valid
        text = self.sql
        for s in sorted(sites, key=lambda s: s.start, reverse=True):
            text = text[: s.start] + private[s.start] + text[s.open_paren :]
        shift = {s.start: len(private[s.start]) - (s.open_paren - s.start) for s in sites}

        def moved(pos: int) -> int:
            return pos + sum(d for st, d in shift.items() if st < pos)

        empty = self.input_schema.empty_table()
        self._ctx.register_record_batches(_TABLE, [empty.to_batches() or [_empty_batch(empty)]])
        for s in sorted(sites, key=lambda s: -s.depth):  # innermost first
            args = [text[moved(a) : moved(b)] for a, b in s.args]
            if not args:
                raise ExpressionError(f"{self.label}: {s.name}() needs at least one argument")
            if s.name != "murmur3_multi" and len(args) != 1:
                raise ExpressionError(f"{self.label}: {s.name}() takes exactly one argument")
            try:
                typed = self._ctx.sql(
                    "SELECT "
                    + ", ".join(f"{a} AS a{i}" for i, a in enumerate(args))
                    + f" FROM {_TABLE}"
                ).schema()
            except Exception as e:
                raise ExpressionError(f"{self.label}: cannot type {s.name}() arguments: {e}") from e
            arg_types = [typed.field(i).type for i in range(len(args))]
            for t in arg_types:
                if not hashing.hashable_type(t):
                    raise ExpressionError(f"{self.label}: {s.name}() cannot hash values of {t}")
            impl, out = HASH_UDFS[s.name]
            udf = dfn.udf(_wrap(impl, out), arg_types, out, "immutable", private[s.start])
            self._ctx.register_udf(udf)
        self._ctx.deregister_table(_TABLE)
        return f"SELECT {text} AS v FROM {_TABLE}"

    def _evaluate_raw(self, table: pa.Table) -> pa.ChunkedArray:
        with self._lock:
            batches = table.to_batches() or [_empty_batch(table)]
            self._ctx.register_record_batches(_TABLE, [batches])
            try:
                out = self._ctx.sql(self._query).to_arrow_table()
            except Exception as e:
                raise ExpressionError(f"{self.label}: evaluation failed: {e}") from e
            finally:
                self._ctx.deregister_table(_TABLE)
        return out.column("v")

    def evaluate(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Array:
        """Evaluate over the given source columns (``col0``, ``col1``, ... in order)."""
        table = pa.Table.from_arrays(list(columns), schema=self.input_schema)
        out = self._evaluate_raw(table).combine_chunks()
        if len(out) != table.num_rows:
            raise ExpressionError(
                f"{self.label}: evaluated {len(out)} values for {table.num_rows} rows"
            )
        return out


def _empty_batch(table: pa.Table) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([], f.type) for f in table.schema], schema=table.schema
    )


def coerce_result(values: pa.Array, declared: pa.DataType, label: str) -> pa.Array:
    """Return ``values`` as ``declared`` when the evaluated type is consistent with it."""
    actual = values.type
    if actual == declared:
        return values
    if not result_type_compatible(actual, declared):
        raise ResultTypeMismatchError(
            f"partition field {label!r}: expression evaluates to {actual} but result_type "
            f"declares {declared}"
        )
    try:
        return pc.cast(values, declared, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise ResultTypeMismatchError(
            f"partition field {label!r}: values of {actual} do not fit result_type {declared}: {e}"
        ) from None


def result_type_compatible(actual: pa.DataType, declared: pa.DataType) -> bool:
    """Whether an evaluated type may stand for a declared result type (exact, or same family)."""
    if actual == declared or pa.types.is_null(actual):
        return True
    families: list[Callable[[pa.DataType], bool]] = [
        pa.types.is_integer,
        lambda t: (
            pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
        ),
        lambda t: (
            pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
        ),
        pa.types.is_floating,
        pa.types.is_date,
        pa.types.is_decimal,
    ]
    if any(fam(actual) and fam(declared) for fam in families):
        return True
    return bool(
        pa.types.is_timestamp(actual)
        and pa.types.is_timestamp(declared)
        and actual.tz == declared.tz
    )
