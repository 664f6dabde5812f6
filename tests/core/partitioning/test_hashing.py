"""Tests for the partition hash functions (``core.partitioning.hashing``)."""

from __future__ import annotations

import datetime
import decimal
import re
import struct
import zoneinfo

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import xxhash

from dagster_lance_partitioned.core.partitioning.hashing import (
    _murmur3_matrix,
    _xxh64_matrix,
    encode_for_hash,
    hashable_type,
    murmur3,
    murmur3_multi,
    xxhash64,
)

TS = datetime.datetime(2017, 11, 16, 22, 31, 8)
TS_MICROS = 1510871468000000
TS_VECTOR = -2047944441


def m3(arr: pa.Array | pa.ChunkedArray) -> list[int | None]:
    out = murmur3(arr)
    assert out.type == pa.int32()
    return out.to_pylist()


def i64le(v: int) -> bytes:
    return struct.pack("<q", v)


def ref_murmur(b: bytes | None) -> int | None:
    return None if b is None else mmh3.hash(b, 0, signed=True)


def ref_xxh(b: bytes | None) -> int | None:
    if b is None:
        return None
    v = xxhash.xxh64_intdigest(b)
    return v - (1 << 64) if v >= 1 << 63 else v


# ------------------------------------------------------------------------------------------
# Spec test vectors
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "t",
    [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32()],
)
def test_int_vector(t: pa.DataType) -> None:
    assert m3(pa.array([34], t)) == [2017239379]


def test_uint64_vector() -> None:
    assert m3(pa.array([34], pa.uint64())) == [2017239379]


def test_uint64_too_large_raises() -> None:
    with pytest.raises(ValueError, match="2\\*\\*63"):
        murmur3(pa.array([2**63], pa.uint64()))
    # A NULL slot does not count, and 2**63-1 itself is fine.
    assert m3(pa.array([None, 2**63 - 1], pa.uint64()))[0] is None


def test_date_vector() -> None:
    d = datetime.date(2017, 11, 16)
    assert m3(pa.array([d])) == [-653330422]
    assert m3(pa.array([d], pa.date64())) == [-653330422]


def test_date64_before_epoch_floors_to_days() -> None:
    d = datetime.date(1969, 12, 31)
    assert m3(pa.array([d], pa.date64())) == [ref_murmur(i64le(-1))]
    assert m3(pa.array([d], pa.date32())) == [ref_murmur(i64le(-1))]


@pytest.mark.parametrize("t", [pa.time32("s"), pa.time32("ms"), pa.time64("us"), pa.time64("ns")])
def test_time_vector(t: pa.DataType) -> None:
    assert m3(pa.array([datetime.time(22, 31, 8)], t)) == [-662762989]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_timestamp_vector_units(unit: str) -> None:
    assert m3(pa.array([TS], pa.timestamp(unit))) == [TS_VECTOR]
    assert m3(pa.array([TS], pa.timestamp(unit, tz="UTC"))) == [TS_VECTOR]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_timestamp_vector_zoned(unit: str) -> None:
    ny = zoneinfo.ZoneInfo("America/New_York")
    same_instant = datetime.datetime(2017, 11, 16, 17, 31, 8, tzinfo=ny)
    assert same_instant == TS.replace(tzinfo=datetime.UTC)
    arr = pa.array([same_instant], pa.timestamp(unit, tz="America/New_York"))
    assert m3(arr) == [TS_VECTOR]


def test_timestamp_ns_floors_to_micros() -> None:
    arr = pa.array([TS_MICROS * 1000 + 999, -1], pa.timestamp("ns"))
    assert m3(arr) == [TS_VECTOR, ref_murmur(i64le(-1))]


@pytest.mark.parametrize("t", [pa.string(), pa.large_string(), pa.string_view()])
def test_string_vector(t: pa.DataType) -> None:
    assert m3(pa.array(["iceberg"], t)) == [1210000089]


@pytest.mark.parametrize("t", [pa.binary(), pa.large_binary(), pa.binary_view(), pa.binary(4)])
def test_binary_vector(t: pa.DataType) -> None:
    assert m3(pa.array([b"\x00\x01\x02\x03"], t)) == [-188683207]


@pytest.mark.parametrize(
    "t", [pa.decimal128(4, 2), pa.decimal128(38, 2), pa.decimal256(10, 2), pa.decimal256(76, 2)]
)
def test_decimal_vector(t: pa.DataType) -> None:
    assert m3(pa.array([decimal.Decimal("14.20")], t)) == [-500754589]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", b"\x00"),
        ("2.55", b"\x00\xff"),
        ("-0.01", b"\xff"),
        ("-1.28", b"\x80"),
        ("-1.29", b"\xff\x7f"),
        ("1.27", b"\x7f"),
        ("1.28", b"\x00\x80"),
        ("14.20", b"\x05\x8c"),
    ],
)
def test_decimal_minimal_bytes(value: str, expected: bytes) -> None:
    arr = pa.array([decimal.Decimal(value)], pa.decimal128(10, 2))
    assert encode_for_hash(arr).values() == [expected]
    assert m3(arr) == [ref_murmur(expected)]


def test_decimal_extremes() -> None:
    big = decimal.Decimal("9" * 38)
    neg = decimal.Decimal("-" + "9" * 38)  # not -big: that rounds to the context precision
    arr = pa.array([big, neg, None], pa.decimal128(38, 0))
    vals = encode_for_hash(arr).values()
    for v, dec in zip(vals[:2], [big, neg], strict=True):
        assert v is not None
        assert int.from_bytes(v, "big", signed=True) == int(dec)
        assert len(v) == 16  # 10**38 - 1 needs 127 bits plus sign
    assert vals[2] is None


def test_bool_encoding() -> None:
    assert m3(pa.array([False, True, None])) == [
        ref_murmur(i64le(0)),
        ref_murmur(i64le(1)),
        None,
    ]
    assert m3(pa.array([True])) == m3(pa.array([1], pa.int64()))


# ------------------------------------------------------------------------------------------
# Floats
# ------------------------------------------------------------------------------------------


def test_float_promotion_resistant() -> None:
    h = m3(pa.array([1.5], pa.float64()))
    assert h == [ref_murmur(struct.pack("<d", 1.5))]
    assert m3(pa.array([1.5], pa.float32())) == h
    assert m3(pa.array([1.5], pa.float16())) == h


def test_negative_zero_equals_zero() -> None:
    for t in (pa.float16(), pa.float32(), pa.float64()):
        h = m3(pa.array([0.0, -0.0], t))
        assert h[0] == h[1] == ref_murmur(struct.pack("<d", 0.0))
    assert xxhash64(pa.array([-0.0])) == xxhash64(pa.array([0.0]))


def test_nan_variants_equal() -> None:
    bits = np.array(
        [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FFFFFFFFFFFFFFF],
        dtype=np.uint64,
    )
    nans = pa.array(bits.view(np.float64), pa.float64())
    h = m3(nans)
    assert len(set(h)) == 1
    assert h[0] == ref_murmur(struct.pack("<Q", 0x7FF8000000000000))
    nan32 = pa.array(np.array([0x7FC00000, 0xFFC00001], dtype=np.uint32).view(np.float32))
    assert set(m3(nan32)) == {h[0]}
    assert len(set(xxhash64(nans).to_pylist())) == 1


# ------------------------------------------------------------------------------------------
# Shapes: NULLs, empty, chunked, dictionary, slices
# ------------------------------------------------------------------------------------------


def test_nulls_preserved() -> None:
    arr = pa.array([34, None, 34, None], pa.int64())
    assert m3(arr) == [2017239379, None, 2017239379, None]
    assert xxhash64(arr).to_pylist()[1::2] == [None, None]
    assert m3(pa.array([None, "iceberg"], pa.string())) == [None, 1210000089]
    assert m3(pa.nulls(3, pa.int32())) == [None, None, None]


@pytest.mark.parametrize(
    "t", [pa.int32(), pa.string(), pa.decimal128(5, 2), pa.float64(), pa.binary(3)]
)
def test_empty(t: pa.DataType) -> None:
    empty = pa.array([], t)
    assert murmur3(empty).equals(pa.array([], pa.int32()))
    assert xxhash64(empty).equals(pa.array([], pa.int64()))
    assert murmur3_multi(empty, empty).equals(pa.array([], pa.int32()))
    assert murmur3(pa.chunked_array([], type=t)).equals(pa.array([], pa.int32()))


def test_chunked() -> None:
    chunked = pa.chunked_array([[34, None], [], [34]], type=pa.int32())
    out = murmur3(chunked)
    assert isinstance(out, pa.Array)
    assert out.to_pylist() == [2017239379, None, 2017239379]
    strs = pa.chunked_array([["iceberg"], [None, "iceberg"]])
    assert m3(strs) == [1210000089, None, 1210000089]


def test_dictionary() -> None:
    arr = pa.array(["iceberg", None, "x", "iceberg"]).dictionary_encode()
    assert pa.types.is_dictionary(arr.type)
    h = m3(arr)
    assert h == m3(pa.array(["iceberg", None, "x", "iceberg"]))
    assert h[0] == 1210000089
    ints = pa.DictionaryArray.from_arrays(pa.array([0, 1, None]), pa.array([34, 7], pa.int16()))
    assert m3(ints) == m3(pa.array([34, 7, None], pa.int64()))
    # Chunks with different dictionaries.
    chunked = pa.chunked_array(
        [pa.array(["a", "iceberg"]).dictionary_encode(), pa.array(["iceberg"]).dictionary_encode()]
    )
    assert m3(chunked)[1:] == [1210000089, 1210000089]


def test_sliced_arrays_respect_offset() -> None:
    base = {
        "int": pa.array([1, 2, None, 34, 5], pa.int32()),
        "str": pa.array(["a", "b", None, "iceberg", "e"]),
        "dec": pa.array(
            [decimal.Decimal(x) for x in ["1", "2", "3", "14.20", "5"]], pa.decimal128(4, 2)
        ),
        "fsb": pa.array([b"aaaa", b"bbbb", None, b"\x00\x01\x02\x03", b"eeee"], pa.binary(4)),
        "bool": pa.array([True, False, None, True, False]),
    }
    for arr in base.values():
        sliced = arr.slice(2, 2)
        assert m3(sliced) == m3(pa.array(sliced.to_pylist(), arr.type))
        assert (
            xxhash64(sliced).to_pylist()
            == xxhash64(pa.array(sliced.to_pylist(), arr.type)).to_pylist()
        )
    assert m3(base["int"].slice(3, 1)) == [2017239379]
    assert m3(base["str"].slice(3, 1)) == [1210000089]
    assert m3(base["dec"].slice(3, 1)) == [-500754589]
    assert m3(base["fsb"].slice(3, 1)) == [-188683207]


def test_type_promotion_resistance() -> None:
    values = [0, 1, -1, 34, 2**31 - 1, -(2**31), None]
    assert m3(pa.array(values, pa.int32())) == m3(pa.array(values, pa.int64()))
    assert xxhash64(pa.array(values, pa.int32())).equals(xxhash64(pa.array(values, pa.int64())))
    small = [0, 1, 34, 127, None]
    assert m3(pa.array(small, pa.int8())) == m3(pa.array(small, pa.uint16()))
    assert m3(pa.array(["iceberg"], pa.string())) == m3(pa.array(["iceberg"], pa.large_string()))
    assert m3(pa.array([TS], pa.timestamp("s"))) == m3(pa.array([TS], pa.timestamp("ns")))
    d1 = pa.array([decimal.Decimal("14.20")], pa.decimal128(4, 2))
    d2 = pa.array([decimal.Decimal("14.20")], pa.decimal128(20, 2))
    assert m3(d1) == m3(d2)


# ------------------------------------------------------------------------------------------
# Supported / unsupported types
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "t",
    [
        pa.int8(),
        pa.uint64(),
        pa.bool_(),
        pa.float16(),
        pa.date64(),
        pa.time32("ms"),
        pa.timestamp("ns", tz="UTC"),
        pa.string_view(),
        pa.large_binary(),
        pa.binary(16),
        pa.decimal256(50, 10),
        pa.dictionary(pa.int32(), pa.string()),
    ],
)
def test_hashable_types(t: pa.DataType) -> None:
    assert hashable_type(t)


@pytest.mark.parametrize(
    ("t", "arr"),
    [
        (pa.struct([("a", pa.int32())]), pa.array([{"a": 1}])),
        (pa.list_(pa.int32()), pa.array([[1]])),
        (
            pa.map_(pa.string(), pa.int32()),
            pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int32())),
        ),
        (pa.null(), pa.array([None])),
        (pa.duration("s"), pa.array([1], pa.duration("s"))),
        (pa.dictionary(pa.int32(), pa.list_(pa.int8())), None),
    ],
)
def test_unsupported_types(t: pa.DataType, arr: pa.Array | None) -> None:
    assert not hashable_type(t)
    if arr is None:
        return
    with pytest.raises(TypeError, match=re.escape(str(arr.type))):
        murmur3(arr)
    with pytest.raises(TypeError):
        xxhash64(arr)
    with pytest.raises(TypeError):
        murmur3_multi(pa.array([1] * len(arr)), arr)


def test_not_an_array_raises() -> None:
    with pytest.raises(TypeError):
        murmur3([1, 2, 3])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# Vectorised paths vs slow per-value reference
# ------------------------------------------------------------------------------------------

N = 4000


def _rng() -> np.random.Generator:
    return np.random.default_rng(20240611)


def _with_nulls(rng: np.random.Generator, values: np.ndarray, t: pa.DataType) -> pa.Array:
    mask = rng.random(len(values)) < 0.1
    return pa.array(values, type=t, mask=mask)


def _random_fixed_arrays() -> dict[str, tuple[pa.Array, list[bytes | None]]]:
    """Random arrays of every fixed-width type, with the expected encoded bytes per row."""
    rng = _rng()
    out: dict[str, tuple[pa.Array, list[bytes | None]]] = {}

    def ints(name: str, t: pa.DataType, lo: int, hi: int, dtype: str) -> None:
        vals = rng.integers(lo, hi, size=N, endpoint=True, dtype=np.int64).astype(dtype)
        arr = _with_nulls(rng, vals, t)
        out[name] = (arr, [None if v is None else i64le(v) for v in arr.to_pylist()])

    ints("int8", pa.int8(), -(2**7), 2**7 - 1, "int8")
    ints("int16", pa.int16(), -(2**15), 2**15 - 1, "int16")
    ints("int32", pa.int32(), -(2**31), 2**31 - 1, "int32")
    ints("int64", pa.int64(), -(2**63), 2**63 - 1, "int64")
    ints("uint8", pa.uint8(), 0, 2**8 - 1, "uint8")
    ints("uint16", pa.uint16(), 0, 2**16 - 1, "uint16")
    ints("uint32", pa.uint32(), 0, 2**32 - 1, "uint32")
    ints("uint64", pa.uint64(), 0, 2**63 - 1, "uint64")

    bools = _with_nulls(rng, rng.random(N) < 0.5, pa.bool_())
    out["bool"] = (bools, [None if v is None else i64le(int(v)) for v in bools.to_pylist()])

    days = rng.integers(-50_000, 50_000, size=N).astype(np.int32)
    d32 = _with_nulls(rng, days, pa.date32())
    out["date32"] = (
        d32,
        [None if v is None else i64le(int(v)) for v in d32.cast(pa.int32()).to_pylist()],
    )
    ms = days.astype(np.int64) * 86_400_000
    d64 = _with_nulls(rng, ms, pa.date64())
    out["date64"] = (
        d64,
        [None if v is None else i64le(v // 86_400_000) for v in d64.cast(pa.int64()).to_pylist()],
    )

    scale = {"s": 1_000_000, "ms": 1_000, "us": 1}
    for unit, t in [("s", pa.time32("s")), ("ms", pa.time32("ms"))]:
        raw = rng.integers(0, 86_400 * (1_000_000 // scale[unit]), size=N).astype(np.int32)
        arr = _with_nulls(rng, raw, t)
        phys = arr.cast(pa.int32()).to_pylist()
        out[f"time32_{unit}"] = (arr, [None if v is None else i64le(v * scale[unit]) for v in phys])
    for unit in ("us", "ns"):
        raw = rng.integers(0, 86_400 * 10**6 * (1000 if unit == "ns" else 1), size=N)
        arr = _with_nulls(rng, raw, pa.time64(unit))
        phys = arr.cast(pa.int64()).to_pylist()
        div = 1000 if unit == "ns" else 1
        out[f"time64_{unit}"] = (arr, [None if v is None else i64le(v // div) for v in phys])

    for unit, tz in [("s", None), ("ms", "UTC"), ("us", "America/New_York"), ("ns", None)]:
        bound = {"s": 10**10, "ms": 10**13, "us": 10**16, "ns": 9 * 10**18}[unit]
        raw = rng.integers(-bound, bound, size=N)
        arr = _with_nulls(rng, raw, pa.timestamp(unit, tz=tz))
        phys = arr.cast(pa.int64()).to_pylist()
        if unit == "ns":
            enc = [None if v is None else i64le(v // 1000) for v in phys]
        else:
            enc = [None if v is None else i64le(v * scale[unit]) for v in phys]
        out[f"timestamp_{unit}_{tz}"] = (arr, enc)

    def canon(v: float | None) -> bytes | None:
        if v is None:
            return None
        if v != v:
            return struct.pack("<Q", 0x7FF8000000000000)
        return struct.pack("<d", 0.0 if v == 0 else v)

    for name, t, dtype in [
        ("float16", pa.float16(), np.float16),
        ("float32", pa.float32(), np.float32),
        ("float64", pa.float64(), np.float64),
    ]:
        width = np.dtype(dtype).itemsize
        bits = rng.integers(0, 256, size=N * width, dtype=np.uint8).view(dtype).copy()
        bits[:4] = [0.0, -0.0, np.nan, -np.nan]
        arr = _with_nulls(rng, bits, t)
        out[name] = (arr, [canon(None if v is None else float(v)) for v in arr.to_pylist()])

    raw = rng.integers(0, 256, size=(N, 5), dtype=np.uint8)
    fsb = pa.array([r.tobytes() for r in raw], pa.binary(5), mask=rng.random(N) < 0.1)
    out["fixed_size_binary5"] = (fsb, fsb.to_pylist())
    return out


FIXED = _random_fixed_arrays()


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_width_matches_reference(name: str) -> None:
    arr, expected_bytes = FIXED[name]
    enc = encode_for_hash(arr)
    assert enc.is_fixed
    assert enc.values() == expected_bytes
    assert m3(arr) == [ref_murmur(b) for b in expected_bytes]
    assert xxhash64(arr).to_pylist() == [ref_xxh(b) for b in expected_bytes]


def test_variable_width_matches_reference() -> None:
    rng = _rng()
    strs = [
        "".join(chr(c) for c in rng.integers(32, 0x3000, size=rng.integers(0, 12)))
        for _ in range(500)
    ]
    arr = pa.array(strs, mask=rng.random(500) < 0.1)
    expected = [None if s is None else s.encode() for s in arr.to_pylist()]
    assert m3(arr) == [ref_murmur(b) for b in expected]
    assert xxhash64(arr).to_pylist() == [ref_xxh(b) for b in expected]

    unscaled = [int(v) for v in rng.integers(-(10**17), 10**17, size=500)]
    decs = pa.array([decimal.Decimal(u).scaleb(-3) for u in unscaled], pa.decimal128(30, 3))
    exp_dec = [
        u.to_bytes(((u if u >= 0 else ~u).bit_length() + 8) // 8, "big", signed=True)
        for u in unscaled
    ]
    assert m3(decs) == [ref_murmur(b) for b in exp_dec]


@pytest.mark.parametrize("length", [*range(0, 40), 63, 64, 65, 100])
def test_matrix_kernels_any_length(length: int) -> None:
    rng = _rng()
    mat = rng.integers(0, 256, size=(64, length), dtype=np.uint8)
    rows = [r.tobytes() for r in mat]
    assert _murmur3_matrix(mat).view(np.int32).tolist() == [ref_murmur(b) for b in rows]
    assert _xxh64_matrix(mat).tolist() == [xxhash.xxh64_intdigest(b) for b in rows]


def test_xxhash64_known_values() -> None:
    assert xxhash64(pa.array([34], pa.int32())).to_pylist() == [ref_xxh(i64le(34))]
    assert xxhash64(pa.array(["iceberg"])).to_pylist() == [ref_xxh(b"iceberg")]
    out = xxhash64(pa.array([34, None]))
    assert out.type == pa.int64()
    # Signed reinterpretation: the unsigned digest of 34 is above 2**63.
    assert xxhash.xxh64_intdigest(i64le(34)) >= 2**63
    assert out.to_pylist() == [xxhash.xxh64_intdigest(i64le(34)) - 2**64, None]


# ------------------------------------------------------------------------------------------
# murmur3_multi
# ------------------------------------------------------------------------------------------


def _ref_multi(columns: list[list[bytes | None]]) -> list[int | None]:
    out: list[int | None] = []
    for row in zip(*columns, strict=True):
        parts = [b for b in row if b is not None]
        out.append(mmh3.hash(b"".join(parts), 0, signed=True) if parts else None)
    return out


def test_multi_single_arg_equals_murmur3() -> None:
    for arr, _ in FIXED.values():
        assert murmur3_multi(arr).equals(murmur3(arr))
    strs = pa.array(["iceberg", None])
    assert murmur3_multi(strs).equals(murmur3(strs))


def test_multi_vectors() -> None:
    a = pa.array([34, None, None, 34], pa.int32())
    b = pa.array(["iceberg", "iceberg", None, None])
    out = murmur3_multi(a, b).to_pylist()
    assert out[0] == ref_murmur(i64le(34) + b"iceberg")
    assert out[1] == 1210000089
    assert out[2] is None
    assert out[3] == 2017239379


@pytest.mark.parametrize(
    "names",
    [
        ("int32", "int64"),
        ("int8", "date32", "timestamp_ns_None"),
        ("float64", "bool", "uint32", "time64_ns"),
        ("fixed_size_binary5", "int16"),
        ("fixed_size_binary5", "float16", "fixed_size_binary5", "date64", "timestamp_s_None"),
    ],
)
def test_multi_fixed_random_nulls(names: tuple[str, ...]) -> None:
    rng = _rng()
    arrs: list[pa.Array] = []
    cols: list[list[bytes | None]] = []
    for n in names:
        # Extra NULLs (about half the rows) so every NULL pattern, all-NULL included, occurs.
        arr, enc = FIXED[n]
        extra = rng.random(N) < 0.5
        arrs.append(pc.if_else(pa.array(extra), pa.scalar(None, arr.type), arr))
        cols.append([None if x else b for b, x in zip(enc, extra, strict=True)])
    out = murmur3_multi(*arrs)
    assert out.type == pa.int32()
    got = out.to_pylist()
    assert got == _ref_multi(cols)
    all_null = [all(c[i] is None for c in cols) for i in range(N)]
    assert [g is None for g in got] == all_null
    assert any(all_null)  # the random NULL patterns include the all-NULL one
    # Chunked input gives the same answer.
    chunked = [pa.chunked_array([a.slice(0, 1000), a.slice(1000)]) for a in arrs]
    assert murmur3_multi(*chunked).equals(out)


def test_multi_mixed_width_random_nulls() -> None:
    rng = _rng()
    ints, int_bytes = FIXED["int64"]
    strs = pa.array(
        [f"s{int(v)}" for v in rng.integers(0, 10**6, size=N)], mask=rng.random(N) < 0.3
    )
    decs = pa.array(
        [decimal.Decimal(int(v)).scaleb(-2) for v in rng.integers(-(10**6), 10**6, size=N)],
        pa.decimal128(12, 2),
        mask=rng.random(N) < 0.3,
    )
    cols = [int_bytes, encode_for_hash(strs).values(), encode_for_hash(decs).values()]
    got = murmur3_multi(ints, strs, decs).to_pylist()
    assert got == _ref_multi(cols)
    assert any(g is None for g in got)


def test_multi_all_null_and_errors() -> None:
    nulls = pa.nulls(3, pa.int64())
    assert murmur3_multi(nulls, pa.nulls(3, pa.string())).to_pylist() == [None] * 3
    with pytest.raises(ValueError, match="length"):
        murmur3_multi(pa.array([1, 2]), pa.array([1]))
    with pytest.raises(ValueError):
        murmur3_multi()


def test_multi_many_arguments() -> None:
    # More arguments than fit in an int64 NULL-pattern code.
    rng = _rng()
    n = 200
    arrs = [
        pa.array(rng.integers(-1000, 1000, size=n), pa.int16(), mask=rng.random(n) < 0.9)
        for _ in range(70)
    ]
    cols = [encode_for_hash(a).values() for a in arrs]
    assert murmur3_multi(*arrs).to_pylist() == _ref_multi(cols)
