"""The outcome of a Spark write, carried by the namespace itself.

The driver-side commit of a Spark write may run far from the process that started it (a Spark
Connect server on another machine): no file or socket connects the two, only the namespace. So
the ``__manifest`` commit records the write: ``dlp.write_id`` (chosen by the caller) and
``dlp.spark.result`` (compact: spec id, task and message counts, and rows and bytes per
partition). The caller finds its commit by the write id among the manifest versions after the
one it saw before the write, and rebuilds the :class:`WriteResult` from that commit's
properties and the manifest versions before and at it (one commit changes the manifest at
once, so the tables whose pin changed between the two are exactly the write's)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import WriteError
from ..core.manifest import ManifestStore
from ..core.namespace import PartitionedNamespace
from ..core.staged import StageResult
from ..core.writer import PartitionWrite, WriteResult

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
            size = sum(f.file_size_bytes or 0 for frag in part.fragments for f in frag.files)
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
    pins = {p["object_id"]: p["read_version"] for p in before.partitions()}
    summary = Summary.decode(props[RESULT_PROPERTY]) if RESULT_PROPERTY in props else None
    mode = props.get("mode", "append")
    written = []
    current = set()
    for p in at.partitions():
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
    return WriteResult(version, spec_id, mode, tuple(written), removed)
