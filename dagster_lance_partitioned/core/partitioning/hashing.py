"""Partition hash functions (``murmur3``, ``murmur3_multi``, legacy ``hash``) over pyarrow arrays.

Values are first encoded to the bytes FORMAT.md prescribes (integers, dates, times and
timestamps as an 8-byte little-endian int64, strings as UTF-8, decimals as the minimal
big-endian two's complement of the unscaled value, ...), so that hashes agree with Apache
Iceberg's bucket transform and do not change when a column's type is widened. Fixed-width
encodings are hashed column-wise with NumPy; variable-width ones value by value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.types as pat
import xxhash

__all__ = [
    "HashInput",
    "encode_for_hash",
    "hashable_type",
    "murmur3",
    "murmur3_multi",
    "xxhash64",
]

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF

# Murmur3 x86_32 constants.
_M_C1 = np.uint32(0xCC9E2D51)
_M_C2 = np.uint32(0x1B873593)
_M_N = np.uint32(0xE6546B64)
_M_F1 = np.uint32(0x85EBCA6B)
_M_F2 = np.uint32(0xC2B2AE35)

# xxHash64 primes.
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261
_X_P1 = np.uint64(_P1)
_X_P2 = np.uint64(_P2)
_X_P3 = np.uint64(_P3)
_X_P4 = np.uint64(_P4)
_X_P5 = np.uint64(_P5)

_MS_PER_DAY = 86_400_000
# Multiplier (> 0) or floor divisor (< 0) taking a time/timestamp unit to microseconds.
_TO_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": -1_000}


@dataclass(frozen=True)
class HashInput:
    """A column encoded as the bytes the partition hashes consume, one value per row."""

    valid: np.ndarray
    """Boolean mask, True where the row is not NULL."""
    fixed: np.ndarray | None = None
    """``(n, width)`` uint8 matrix when all values encode to ``width`` bytes (NULL rows: zeros)."""
    blobs: list[bytes | None] | None = None
    """Per-row bytes (None for NULL) when encodings differ in length."""

    def __len__(self) -> int:
        """Number of rows."""
        return len(self.valid)

    @property
    def is_fixed(self) -> bool:
        """Whether every value encodes to the same number of bytes."""
        return self.fixed is not None

    def value(self, i: int) -> bytes | None:
        """The encoded bytes of row ``i``, or None if it is NULL."""
        if not self.valid[i]:
            return None
        if self.fixed is not None:
            return bytes(self.fixed[i].tobytes())
        assert self.blobs is not None
        return self.blobs[i]

    def values(self) -> list[bytes | None]:
        """The encoded bytes of every row (None for NULL)."""
        if self.blobs is not None:
            return self.blobs
        assert self.fixed is not None
        return [
            row.tobytes() if ok else None for row, ok in zip(self.fixed, self.valid, strict=True)
        ]


# --------------------------------------------------------------------------------------------
# Type support and encoding
# --------------------------------------------------------------------------------------------

_INT_TYPES = {
    pa.int8(): "<i1",
    pa.int16(): "<i2",
    pa.int32(): "<i4",
    pa.int64(): "<i8",
    pa.uint8(): "<u1",
    pa.uint16(): "<u2",
    pa.uint32(): "<u4",
    pa.uint64(): "<u8",
}
_FLOAT_TYPES = {pa.float16(): "<f2", pa.float32(): "<f4", pa.float64(): "<f8"}


def _is_string_like(t: pa.DataType) -> bool:
    return bool(pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t))


def _is_binary_like(t: pa.DataType) -> bool:
    return bool(pat.is_binary(t) or pat.is_large_binary(t) or pat.is_binary_view(t))


def hashable_type(t: pa.DataType) -> bool:
    """Whether values of Arrow type ``t`` can be hashed by this module."""
    if pat.is_dictionary(t):
        return hashable_type(t.value_type)
    return (
        t in _INT_TYPES
        or t in _FLOAT_TYPES
        or pat.is_boolean(t)
        or pat.is_date(t)
        or pat.is_time(t)
        or pat.is_timestamp(t)
        or pat.is_decimal(t)
        or pat.is_fixed_size_binary(t)
        or _is_string_like(t)
        or _is_binary_like(t)
    )


def _as_array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A single contiguous, dictionary-decoded array holding the values of ``arr``."""
    if isinstance(arr, pa.ChunkedArray):
        chunks = [_as_array(c) for c in arr.chunks]
        if not chunks:
            t = arr.type.value_type if pat.is_dictionary(arr.type) else arr.type
            return pa.array([], type=t)
        return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
    if not isinstance(arr, pa.Array):
        raise TypeError(f"expected a pyarrow Array or ChunkedArray, got {type(arr).__name__}")
    if pat.is_dictionary(arr.type):
        return arr.dictionary_decode()
    return arr


def _validity(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return cast(np.ndarray, arr.is_valid().to_numpy(zero_copy_only=False))


def _raw_values(arr: pa.Array, dtype: str) -> np.ndarray:
    """The physical values of a fixed-width primitive array (NULL slots unspecified)."""
    n = len(arr)
    dt = np.dtype(dtype)
    buf = arr.buffers()[1]
    if n == 0 or buf is None:
        return np.zeros(n, dtype=dt)
    return np.frombuffer(buf, dtype=dt, count=arr.offset + n)[arr.offset :]


def _to_micros(values: np.ndarray, unit: str) -> np.ndarray:
    factor = _TO_MICROS[unit]
    if factor > 0:
        return values * np.int64(factor)
    return cast(np.ndarray, np.floor_divide(values, np.int64(-factor)))


def _int64_column(arr: pa.Array, valid: np.ndarray) -> np.ndarray | None:
    """The int64 each value is hashed as, or None if the type does not encode as an int64."""
    t = arr.type
    if t == pa.uint64():
        raw = _raw_values(arr, "<u8")
        if np.any(raw[valid] > np.uint64(2**63 - 1)):
            raise ValueError("cannot hash uint64 values above 2**63-1: they do not fit in int64")
        return raw.view(np.int64)
    if t in _INT_TYPES:
        return _raw_values(arr, _INT_TYPES[t]).astype(np.int64)
    if pat.is_boolean(t):
        filled = arr.fill_null(False) if arr.null_count else arr
        return cast(np.ndarray, filled.to_numpy(zero_copy_only=False).astype(np.int64))
    if pat.is_date32(t):
        return _raw_values(arr, "<i4").astype(np.int64)
    if pat.is_date64(t):
        return cast(np.ndarray, np.floor_divide(_raw_values(arr, "<i8"), np.int64(_MS_PER_DAY)))
    if pat.is_time32(t):
        return _to_micros(_raw_values(arr, "<i4").astype(np.int64), t.unit)
    if pat.is_time64(t) or pat.is_timestamp(t):
        return _to_micros(_raw_values(arr, "<i8"), t.unit)
    if t in _FLOAT_TYPES:
        with np.errstate(invalid="ignore"):  # signalling NaNs warn when widened
            f = _raw_values(arr, _FLOAT_TYPES[t]).astype(np.float64)
        f = np.where(f == 0.0, 0.0, f)  # -0.0 -> 0.0
        f = np.where(np.isnan(f), np.nan, f)  # canonical NaN 0x7ff8000000000000
        return f.view(np.int64)
    return None


def _minimal_be_bytes(v: int) -> bytes:
    """Minimal big-endian two's complement bytes of ``v`` (0 -> 00, 255 -> 00ff, -1 -> ff)."""
    bits = (v if v >= 0 else ~v).bit_length()
    return v.to_bytes(bits // 8 + 1, "big", signed=True)


def _decimal_blobs(arr: pa.Array, valid: np.ndarray) -> list[bytes | None]:
    width = arr.type.byte_width
    n = len(arr)
    buf = arr.buffers()[1]
    if n == 0 or buf is None:
        return [None] * n
    raw = memoryview(buf)[arr.offset * width : (arr.offset + n) * width].tobytes()
    out: list[bytes | None] = []
    for i, ok in enumerate(valid.tolist()):
        if ok:
            unscaled = int.from_bytes(raw[i * width : (i + 1) * width], "little", signed=True)
            out.append(_minimal_be_bytes(unscaled))
        else:
            out.append(None)
    return out


def _offset_blobs(arr: pa.Array, valid: np.ndarray) -> list[bytes | None]:
    """Per-value bytes of a string/binary array (32- or 64-bit offsets)."""
    t = arr.type
    if pat.is_string_view(t):
        arr = arr.cast(pa.large_string())
    elif pat.is_binary_view(t):
        arr = arr.cast(pa.large_binary())
    n = len(arr)
    if n == 0:
        return []
    large = pat.is_large_string(arr.type) or pat.is_large_binary(arr.type)
    _, obuf, dbuf = arr.buffers()
    offs = np.frombuffer(obuf, dtype="<i8" if large else "<i4", count=arr.offset + n + 1)
    offs = offs[arr.offset :]
    start, end = int(offs[0]), int(offs[-1])
    data = memoryview(dbuf)[start:end].tobytes() if dbuf is not None else b""
    rel = (offs - start).tolist()
    return [data[rel[i] : rel[i + 1]] if ok else None for i, ok in enumerate(valid.tolist())]


def _fixed_binary_matrix(arr: pa.Array) -> np.ndarray:
    width = arr.type.byte_width
    n = len(arr)
    buf = arr.buffers()[1]
    if n == 0 or buf is None or width == 0:
        return np.zeros((n, width), dtype=np.uint8)
    flat = np.frombuffer(buf, dtype=np.uint8, count=(arr.offset + n) * width)
    return flat[arr.offset * width :].reshape(n, width)


def encode_for_hash(arr: pa.Array | pa.ChunkedArray) -> HashInput:
    """Encode every value of ``arr`` as the bytes the partition hashes consume (FORMAT.md)."""
    a = _as_array(arr)
    t = a.type
    if not hashable_type(t):
        raise TypeError(f"cannot hash values of type {t}")
    valid = _validity(a)
    ints = _int64_column(a, valid)
    if ints is not None:
        ints = np.ascontiguousarray(ints, dtype="<i8")
        return HashInput(valid=valid, fixed=ints.view(np.uint8).reshape(len(a), 8))
    if pat.is_fixed_size_binary(t):
        return HashInput(valid=valid, fixed=_fixed_binary_matrix(a))
    if pat.is_decimal(t):
        return HashInput(valid=valid, blobs=_decimal_blobs(a, valid))
    return HashInput(valid=valid, blobs=_offset_blobs(a, valid))


# --------------------------------------------------------------------------------------------
# Vectorised hash kernels over (n, L) uint8 matrices
# --------------------------------------------------------------------------------------------


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _rotl64(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _words(mat: np.ndarray, start: int, count: int, dtype: str) -> np.ndarray:
    """``count`` little-endian words of ``dtype`` per row, from byte ``start`` of each row."""
    size = np.dtype(dtype).itemsize
    block = np.ascontiguousarray(mat[:, start : start + count * size])
    return block.view(dtype).reshape(mat.shape[0], count)


def _murmur3_matrix(mat: np.ndarray, seed: int = 0) -> np.ndarray:
    """Murmur3 x86_32 of every row of an ``(n, L)`` uint8 matrix, as uint32."""
    n, length = mat.shape
    h = np.full(n, seed & _MASK32, dtype=np.uint32)
    nblocks = length // 4
    if nblocks:
        blocks = _words(mat, 0, nblocks, "<u4")
        for j in range(nblocks):
            k = blocks[:, j] * _M_C1
            k = _rotl32(k, 15) * _M_C2
            h ^= k
            h = _rotl32(h, 13) * np.uint32(5) + _M_N
    tail = nblocks * 4
    rem = length - tail
    if rem:
        k = np.zeros(n, dtype=np.uint32)
        if rem >= 3:
            k ^= mat[:, tail + 2].astype(np.uint32) << np.uint32(16)
        if rem >= 2:
            k ^= mat[:, tail + 1].astype(np.uint32) << np.uint32(8)
        k ^= mat[:, tail].astype(np.uint32)
        k = _rotl32(k * _M_C1, 15) * _M_C2
        h ^= k
    h ^= np.uint32(length & _MASK32)
    h ^= h >> np.uint32(16)
    h *= _M_F1
    h ^= h >> np.uint32(13)
    h *= _M_F2
    h ^= h >> np.uint32(16)
    return h


def _xxh64_round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    acc = acc + lane * _X_P2
    return _rotl64(acc, 31) * _X_P1


def _xxh64_matrix(mat: np.ndarray, seed: int = 0) -> np.ndarray:
    """xxHash64 of every row of an ``(n, L)`` uint8 matrix, as uint64."""
    n, length = mat.shape
    pos = 0
    if length >= 32:
        nstripes = length // 32
        lanes = _words(mat, 0, 4 * nstripes, "<u8")
        accs = [
            np.full(n, (seed + _P1 + _P2) & _MASK64, dtype=np.uint64),
            np.full(n, (seed + _P2) & _MASK64, dtype=np.uint64),
            np.full(n, seed & _MASK64, dtype=np.uint64),
            np.full(n, (seed - _P1) & _MASK64, dtype=np.uint64),
        ]
        for s in range(nstripes):
            for i in range(4):
                accs[i] = _xxh64_round(accs[i], lanes[:, 4 * s + i])
        h = _rotl64(accs[0], 1) + _rotl64(accs[1], 7) + _rotl64(accs[2], 12)
        h = h + _rotl64(accs[3], 18)
        for acc in accs:
            h ^= _xxh64_round(np.zeros(n, dtype=np.uint64), acc)
            h = h * _X_P1 + _X_P4
        pos = nstripes * 32
    else:
        h = np.full(n, (seed + _P5) & _MASK64, dtype=np.uint64)
    h = h + np.uint64(length & _MASK64)
    while pos + 8 <= length:
        lane = _words(mat, pos, 1, "<u8")[:, 0]
        h ^= _xxh64_round(np.zeros(n, dtype=np.uint64), lane)
        h = _rotl64(h, 27) * _X_P1 + _X_P4
        pos += 8
    if pos + 4 <= length:
        word = _words(mat, pos, 1, "<u4")[:, 0].astype(np.uint64)
        h ^= word * _X_P1
        h = _rotl64(h, 23) * _X_P2 + _X_P3
        pos += 4
    while pos < length:
        h ^= mat[:, pos].astype(np.uint64) * _X_P5
        h = _rotl64(h, 11) * _X_P1
        pos += 1
    h ^= h >> np.uint64(33)
    h *= _X_P2
    h ^= h >> np.uint64(29)
    h *= _X_P3
    h ^= h >> np.uint64(32)
    return cast(np.ndarray, h)


# --------------------------------------------------------------------------------------------
# Public hash functions
# --------------------------------------------------------------------------------------------


def _result(values: np.ndarray, valid: np.ndarray, type_: pa.DataType) -> pa.Array:
    mask = None if bool(valid.all()) else ~valid
    return pa.array(values, type=type_, mask=mask)


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _pattern_codes(valid_mat: np.ndarray) -> np.ndarray:
    """An int64 per row identifying its NULL pattern (the row of the ``(n, m)`` validity matrix)."""
    m = valid_mat.shape[1]
    if m <= 62:
        weights = np.left_shift(np.int64(1), np.arange(m, dtype=np.int64))
        return valid_mat.astype(np.int64) @ weights
    _, inverse = np.unique(valid_mat, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def murmur3(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Murmur3 x86_32 (seed 0) of each value as a signed int32; NULL for NULL."""
    enc = encode_for_hash(arr)
    if enc.fixed is not None:
        out = _murmur3_matrix(enc.fixed).view(np.int32)
    else:
        out = np.array(
            [mmh3.hash(b, 0, signed=True) if b is not None else 0 for b in enc.values()],
            dtype=np.int32,
        )
    return _result(out, enc.valid, pa.int32())


def murmur3_multi(*arrs: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Murmur3 x86_32 of the concatenated encodings of each row's non-NULL arguments.

    The result is NULL only where every argument is NULL.
    """
    if not arrs:
        raise ValueError("murmur3_multi needs at least one argument")
    encs = [encode_for_hash(a) for a in arrs]
    n = len(encs[0])
    if any(len(e) != n for e in encs):
        lengths = ", ".join(str(len(e)) for e in encs)
        raise ValueError(f"murmur3_multi arguments differ in length: {lengths}")
    valid_mat = np.stack([e.valid for e in encs], axis=1)
    any_valid = cast(np.ndarray, valid_mat.any(axis=1))
    out = np.zeros(n, dtype=np.int32)
    if n == 0:
        return _result(out, any_valid, pa.int32())

    if all(e.fixed is not None for e in encs):
        # Rows sharing a NULL pattern concatenate to a fixed-length byte string.
        codes = _pattern_codes(valid_mat)
        uniq, first = np.unique(codes, return_index=True)
        for code, row0 in zip(uniq.tolist(), first.tolist(), strict=True):
            pattern: np.ndarray = valid_mat[row0]
            if not pattern.any():
                continue
            rows = np.flatnonzero(codes == code)
            parts = [
                cast(np.ndarray, e.fixed)[rows] for e, ok in zip(encs, pattern, strict=True) if ok
            ]
            mat = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
            out[rows] = _murmur3_matrix(mat).view(np.int32)
        return _result(out, any_valid, pa.int32())

    columns = [e.values() for e in encs]
    for i in range(n):
        if any_valid[i]:
            data = b"".join(b for col in columns if (b := col[i]) is not None)
            out[i] = mmh3.hash(data, 0, signed=True)
    return _result(out, any_valid, pa.int32())


def xxhash64(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """xxHash64 (seed 0) of each value as a signed int64; NULL for NULL (legacy ``hash``)."""
    enc = encode_for_hash(arr)
    if enc.fixed is not None:
        out = _xxh64_matrix(enc.fixed).view(np.int64)
    else:
        out = np.array(
            [_signed64(xxhash.xxh64_intdigest(b)) if b is not None else 0 for b in enc.values()],
            dtype=np.int64,
        )
    return _result(out, enc.valid, pa.int64())
