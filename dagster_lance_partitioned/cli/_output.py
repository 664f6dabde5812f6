"""What the CLI prints: values as JSON or text, aligned tables, sizes, and error messages."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

import pyarrow as pa

from ..core.engine import error_text as error_text  # re-exported: the CLI's messages
from ..core.engine import first_line as first_line

PROG = "lance-partitioned"


def to_json_value(value: Any) -> Any:
    """``value`` made JSON-serialisable: ISO dates, string decimals, base64 bytes."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.date | dt.time | dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if hasattr(value, "isoformat"):  # e.g. pandas.Timestamp
        return value.isoformat()
    return str(value)


def write_json(out: TextIO, doc: Any) -> None:
    """Write ``doc`` as one JSON document."""
    out.write(json.dumps(to_json_value(doc), indent=2, ensure_ascii=False, allow_nan=False))
    out.write("\n")


def plural(n: int, word: str) -> str:
    """``1 partition`` / ``2 partitions``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def size_text(n: int) -> str:
    """A byte count for people: ``512 B``, ``2.0 KiB``, ``3.1 MiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def is_numeric(t: pa.DataType) -> bool:
    """Whether values of ``t`` are right-aligned in tables."""
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def _ellipsis(out: TextIO) -> str:
    """``…`` when ``out`` can encode it, else ``...``."""
    try:
        "…".encode(getattr(out, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return "..."
    return "…"


class Text:
    """Renders values and tables as text for one output stream."""

    def __init__(self, out: TextIO, max_width: int) -> None:
        self.out = out
        self.max_width = max_width
        self.ellipsis = _ellipsis(out)

    def value(self, value: Any) -> str:
        """One value as text (``null`` for NULL), without cutting."""
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, bytes | bytearray | memoryview):
            return "0x" + bytes(value).hex()
        if isinstance(value, dt.datetime | dt.date | dt.time):
            return value.isoformat()
        if isinstance(value, dict | list | tuple):
            return json.dumps(to_json_value(value), ensure_ascii=False, separators=(", ", ": "))
        return str(value)

    def cut(self, text: str) -> str:
        """``text`` on one line, cut to the maximum width with an ellipsis."""
        text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
        if self.max_width and len(text) > self.max_width:
            keep = max(self.max_width - len(self.ellipsis), 1)
            return text[:keep] + self.ellipsis
        return text

    def cell(self, value: Any) -> str:
        """One table cell."""
        return self.cut(self.value(value))

    def values(self, values: dict[str, Any]) -> str:
        """Partition values as one cell: ``country=US, year=2025``."""
        return self.cut(", ".join(f"{k}={self.value(v)}" for k, v in values.items()))

    def table(
        self, headers: Sequence[str], rows: Iterable[Sequence[str]], right: Iterable[int] = ()
    ) -> None:
        """Write an aligned table: header, dashes, rows (cells already rendered)."""
        heads = [self.cut(h) for h in headers]
        body = [list(r) for r in rows]
        widths = [len(h) for h in heads]
        for r in body:
            for i, c in enumerate(r):
                widths[i] = max(widths[i], len(c))
        align_right = set(right)

        def line(cells: Sequence[str]) -> str:
            parts = [
                c.rjust(widths[i]) if i in align_right else c.ljust(widths[i])
                for i, c in enumerate(cells)
            ]
            return "  ".join(parts).rstrip()

        self.out.write(line(heads) + "\n")
        self.out.write(line(["-" * w for w in widths]) + "\n")
        for r in body:
            self.out.write(line(r) + "\n")

    def pairs(self, items: Sequence[tuple[str, str]]) -> None:
        """Write ``key  value`` lines with the keys aligned."""
        width = max((len(k) for k, _ in items), default=0)
        for k, v in items:
            self.out.write(f"{k.ljust(width)}  {v}".rstrip() + "\n")


# -- errors -----------------------------------------------------------------------------------
def report(message: BaseException | str) -> None:
    """Write ``lance-partitioned: error: <message>`` on stderr (cleaned, see error_text)."""
    sys.stderr.write(f"{PROG}: error: {error_text(message)}\n")


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
