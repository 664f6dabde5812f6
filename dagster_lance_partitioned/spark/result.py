"""The outcome of a Spark write, carried by the namespace itself.

The driver-side commit of a Spark write may run far from the process that started it (a Spark
Connect server on another machine): no file or socket connects the two, only the namespace. So
the ``__manifest`` commit records the write: ``dlp.write_id`` (chosen by the caller) and
``dlp.spark.result`` (compact: spec id, task and message counts, and rows and bytes per
partition). The caller finds its commit by the write id among the manifest versions after the
one it saw before the write, and rebuilds the :class:`WriteResult` from that commit's
properties and the manifest versions before and at it (one commit changes the manifest at
once, so the tables whose pin changed between the two are exactly the write's).

It also carries package errors raised in Spark's Python workers back to the caller with their
class (``carried`` / ``package_error``, at the end of the module)."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import functools
import importlib
import json
import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ..core import (
    PartitionedNamespace,
    PartitionedNamespaceError,
    PartitionWrite,
    WriteError,
    WriteResult,
)
from ..core.engine import ManifestStore, StageResult, check_mode, data_bytes

RESULT_PROPERTY = "spark.result"  # stored as dlp.spark.result
WRITE_ID_PROPERTY = "write_id"  # set by the core for every staged write (dlp.write_id)
WRITE_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def key_text(key: Iterable[Any]) -> str:
    """A partition key (values in spec order) as canonical text, the same for the key a task
    staged and for the values the manifest stores."""

    def plain(v: Any) -> Any:
        if isinstance(v, dt.date | dt.datetime | dt.time):
            return v.isoformat()
        if isinstance(v, decimal.Decimal):
            return str(v)
        if isinstance(v, bytes):
            return v.hex()
        return v

    return json.dumps([plain(v) for v in key], separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Summary:
    """What a Spark write's commit records about itself."""

    spec_id: int
    tasks: int
    pairs: int
    message_bytes: int
    partitions: dict[str, tuple[int, int]]  # key text -> (rows, bytes)

    def encode(self) -> str:
        """Compact text: zlib-compressed JSON, base64."""
        doc = {
            "s": self.spec_id,
            "t": self.tasks,
            "n": self.pairs,
            "m": self.message_bytes,
            "p": [[k, r, b] for k, (r, b) in self.partitions.items()],
        }
        raw = json.dumps(doc, separators=(",", ":")).encode()
        return "z" + base64.b64encode(zlib.compress(raw, 9)).decode()

    @classmethod
    def decode(cls, text: str) -> Summary:
        """The summary :meth:`encode` wrote."""
        if not text.startswith("z"):
            raise WriteError(f"unknown {RESULT_PROPERTY} encoding {text[:8]!r}")
        doc = json.loads(zlib.decompress(base64.b64decode(text[1:])))
        return cls(doc["s"], doc["t"], doc["n"], doc["m"], {k: (r, b) for k, r, b in doc["p"]})


def summarize(spec_id: int, results: Sequence[StageResult | None], message_bytes: int) -> Summary:
    """The summary of a write whose tasks staged ``results``."""
    partitions: dict[str, tuple[int, int]] = {}
    pairs = 0
    for result in results:
        for part in result.partitions if result else ():
            pairs += 1
            size = data_bytes(part.fragments)
            rows, nbytes = partitions.get(key_text(part.key), (0, 0))
            partitions[key_text(part.key)] = (rows + part.rows, nbytes + size)
    return Summary(spec_id, len(results), pairs, message_bytes, partitions)


def check_write_id(write_id: str) -> str:
    """``write_id`` when it is a valid write id (letters, digits, ``_``, ``-``; at most 64)."""
    if not WRITE_ID_PATTERN.fullmatch(write_id):
        raise WriteError(f"write id {write_id!r}: use 1-64 letters, digits, '_' or '-'")
    return write_id


def find_commit(
    uri: str, storage_options: dict[str, str] | None, since: int, write_id: str
) -> tuple[int, dict[str, str]] | None:
    """The manifest version after ``since`` committed by write ``write_id`` and its
    properties; None when no such commit exists (the write committed nothing)."""
    latest = PartitionedNamespace.open(uri, storage_options).version
    store = ManifestStore(uri, storage_options)
    for version in range(since + 1, latest + 1):
        props = store.commit_properties(version) or {}
        if props.get(WRITE_ID_PROPERTY) == write_id:
            return version, props
    return None


def find_result(
    uri: str, storage_options: dict[str, str] | None, since: int, write_id: str
) -> WriteResult | None:
    """The result of write ``write_id``, committed after manifest version ``since``; None
    when it committed nothing."""
    found = find_commit(uri, storage_options, since, write_id)
    if found is None:
        return None
    version, props = found
    return rebuild(uri, storage_options, version, props)


def rebuild(
    uri: str, storage_options: dict[str, str] | None, version: int, props: Mapping[str, str]
) -> WriteResult:
    """The :class:`WriteResult` of the write committed as manifest ``version`` with ``props``."""
    at = PartitionedNamespace.open(uri, storage_options, version=version)
    before = PartitionedNamespace.open(uri, storage_options, version=version - 1)
    pins = {p["object_id"]: p["read_version"] for p in before.inspect.partitions()}
    summary = Summary.decode(props[RESULT_PROPERTY]) if RESULT_PROPERTY in props else None
    mode = props.get("mode", "append")
    written = []
    current = set()
    for p in at.inspect.partitions():
        current.add(p["object_id"])
        if pins.get(p["object_id"]) == p["read_version"]:
            continue  # not touched by this commit
        rows, nbytes = (0, 0)
        if summary is not None:
            rows, nbytes = summary.partitions.get(key_text(p["values"].values()), (0, 0))
        written.append(
            PartitionWrite(
                p["object_id"],
                p["location"],
                dict(p["values"]),
                rows,
                p["read_version"],
                created=p["object_id"] not in pins,
                replaced=mode != "append",
                bytes_written=nbytes,
            )
        )
    spec_id = summary.spec_id if summary is not None else at.current_spec.spec_id
    removed = tuple(sorted(set(pins) - current))
    return WriteResult(version, spec_id, check_mode(mode), tuple(written), removed)


# --------------------------------------------------------------------------------------------
# Errors raised in Spark's Python workers
#
# A package error raised where Spark runs our code in a Python worker (a task's write(), the
# planner worker's writer(), the driver's commit()) reaches the caller as a PySparkException
# (PythonException, AnalysisException, ...) whose message holds the worker's traceback text:
# the class and its fields are lost. ``carried`` marks the error with a note Spark prints with
# the traceback -- ``[dlp-error:<base64 JSON>]``, written by ``encode_error`` -- and
# ``package_error`` rebuilds the same exception class, message and fields from it on the caller's
# side. Nothing is recognised by message text.

ERROR_NOTE = re.compile(r"\[dlp-error:([A-Za-z0-9_-]+={0,2})\]")
_PACKAGE = __name__.split(".", 1)[0]  # dagster_lance_partitioned

_F = TypeVar("_F", bound=Callable[..., Any])


def carried(fn: _F) -> _F:
    """Decorate a function Spark runs in a Python worker: a package error it raises gets the
    note :func:`package_error` rebuilds it from (once, also when raised through nested ones)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PartitionedNamespaceError as e:
            note = f"[dlp-error:{encode_error(e)}]"
            if note not in getattr(e, "__notes__", ()):
                e.add_note(note)
            raise

    return cast(_F, wrapper)


def encode_error(error: PartitionedNamespaceError) -> str:
    """``error``'s class, arguments and fields as URL-safe base64 of JSON."""
    cls = type(error)
    doc = {
        "c": f"{cls.__module__}:{cls.__qualname__}",
        "a": [_to_json(a) for a in error.args],
        "f": {k: _to_json(v) for k, v in vars(error).items() if not k.startswith("_")},
    }
    raw = json.dumps(doc, separators=(",", ":"), allow_nan=True).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_error(text: str) -> PartitionedNamespaceError | None:
    """The exception :func:`encode_error` encoded; None for anything else (an unknown or
    foreign class, malformed text)."""
    try:
        doc = json.loads(base64.urlsafe_b64decode(text.encode()))
        module, _, qualname = str(doc["c"]).partition(":")
        if module != _PACKAGE and not module.startswith(_PACKAGE + "."):
            return None
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if not (isinstance(cls, type) and issubclass(cls, PartitionedNamespaceError)):
            return None
        error = cls.__new__(cls)
        BaseException.__init__(error, *(_from_json(a) for a in doc["a"]))
        for key, value in dict(doc["f"]).items():
            setattr(error, str(key), _from_json(value))
        return error
    except Exception:  # not ours after all
        return None


def package_error(error: BaseException) -> PartitionedNamespaceError | None:
    """The package exception a Spark error carries (see :func:`carried`): the same class with
    the same message and fields, raised in a Python worker; None when it carries none. Looks
    at ``error``'s message and those of its causes; the last note found wins (the innermost
    failure Spark reports last)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PartitionedNamespaceError):
            return current
        for match in reversed(ERROR_NOTE.findall(_message(current))):
            rebuilt = decode_error(match)
            if rebuilt is not None:
                return rebuilt
        current = current.__cause__ or current.__context__
    return None


def _message(error: BaseException) -> str:
    parts = [str(error)]
    get = getattr(error, "getMessage", None)  # PySparkException: the JVM side's full message
    if callable(get):
        with contextlib.suppress(Exception):
            parts.append(str(get()))
    return "\n".join(parts)


def _to_json(value: Any) -> Any:
    """A value as JSON that :func:`_from_json` turns back into the same Python value (dates,
    times, decimals, bytes, tuples and non-string dict keys tagged); other objects as repr."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$timedelta": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, tuple):
        return {"$tuple": [_to_json(v) for v in value]}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {"$dict": [[_to_json(k), _to_json(v)] for k, v in value.items()]}
    return {"$repr": repr(value)}


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    [(tag, raw)] = value.items()
    if tag == "$float":
        return float(raw)
    if tag == "$datetime":
        return dt.datetime.fromisoformat(raw)
    if tag == "$date":
        return dt.date.fromisoformat(raw)
    if tag == "$time":
        return dt.time.fromisoformat(raw)
    if tag == "$timedelta":
        return dt.timedelta(days=raw[0], seconds=raw[1], microseconds=raw[2])
    if tag == "$decimal":
        return decimal.Decimal(raw)
    if tag == "$bytes":
        return bytes.fromhex(raw)
    if tag == "$tuple":
        return tuple(_from_json(v) for v in raw)
    if tag == "$dict":
        return {_hashable(_from_json(k)): _from_json(v) for k, v in raw}
    return str(raw)  # $repr


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
