"""Partition fields as people name them: ``year(event_date)``, ``bucket[16](user_id)``, a
time window as its window (``window[day, America/New_York](time_hour)``) rather than its SQL, and
an expression as its SQL over the source columns. The command line shows fields so, and a filter
naming a partition field id (:mod:`.read.field_filters`) describes the fields it named so."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from .partition_spec import SpecField, source_names, source_types
from .windows import TimeWindow, is_zoned, parse_window

_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


def window_of(f: SpecField, types: Sequence[pa.DataType]) -> TimeWindow | None:
    """The calendar window a field's expression computes over sources of ``types`` (its
    :func:`.partition_spec.source_types`), when it is one."""
    if f.expression is None or len(types) != 1:
        return None
    (source,) = types
    if pa.types.is_null(source):
        return None
    return parse_window(f.expression, source)


def window_text(window: TimeWindow, source: pa.DataType) -> str:
    """``day, America/New_York``; ``hour, UTC, starting at :30``; ``week, starting Monday``
    (a window over dates or naive timestamps reads them as wall-clock time: no zone shown)."""
    parts = [window.unit] + ([window.timezone] if is_zoned(source) else [])
    start: list[str] = []
    if window.unit == "week" and window.day != 0:
        start.append(_WEEKDAYS[window.day])
    if window.unit == "month" and window.day != 1:
        start.append(f"day {window.day}")
    if window.unit == "hour" and window.minute_offset:
        start.append(f"at :{window.minute_offset:02d}")
    elif window.hour_offset or window.minute_offset:
        start.append(f"{window.hour_offset:02d}:{window.minute_offset:02d}")
    if start:
        parts.append("starting " + " ".join(start))
    return ", ".join(parts)


def transform_text(f: SpecField, schema: pa.Schema) -> str:
    """``identity``, ``bucket[16]``, ``window[day, America/New_York]`` or ``expression: <sql>``."""
    if f.transform is None:
        window = window_of(f, source_types(f, schema))
        if window is None:
            return f"expression: {f.expression}"
        return f"window[{window_text(window, source_types(f, schema)[0])}]"
    obj = f.transform.to_json()
    params = [str(v) for k, v in obj.items() if k != "type"]
    return str(obj["type"]) + (f"[{', '.join(params)}]" if params else "")


def source_labels(f: SpecField, schema: pa.Schema) -> list[str]:
    """The field's source columns by name (``#<id> (dropped)`` for ids no longer present)."""
    names = source_names(f, schema)
    return [
        n if n is not None else f"#{sid} (dropped)"
        for n, sid in zip(names, f.source_ids, strict=True)
    ]


def field_text(f: SpecField, schema: pa.Schema) -> str:
    """``year(event_date)``, ``window[day, UTC](time_hour)``, ``(<sql> over a, b)``."""
    sources = ", ".join(source_labels(f, schema))
    text = transform_text(f, schema)
    if text.startswith("expression: "):
        return f"({f.expression} over {sources})"
    return f"{text}({sources})"


def field_summary(f: SpecField, schema: pa.Schema) -> str:
    """``event_date_year=year(event_date)``, ``time_hour_day=window[day, UTC](time_hour)``."""
    return f"{f.field_id}={field_text(f, schema)}"
